/* version.h - the commit this build's sources were at, which `oomlab version` names. */
#ifndef OOMLAB_VERSION_H
#define OOMLAB_VERSION_H

/* git rev-parse --short=12 HEAD, with "-dirty" when tracked files differed, "unknown" outside a checkout: defined in
 * BUILD/gen/commit.c, which the Makefile rewrites whenever it changes (so HEAD moving rebuilds it). */
extern const char oom_build_commit[];

#endif
