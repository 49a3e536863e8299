/* buildinfo.h - which build this binary is: optimised (what users run) or checked (what the suite runs). */
#ifndef OOMLAB_BUILDINFO_H
#define OOMLAB_BUILDINFO_H

#include "core/compat.h"

OOM_BEGIN_DECLS

/* One phrase naming the build, from the flags it was compiled with: "optimised build (OOM_DEBUG=0)" for `make`,
 * "checked build (OOM_DEBUG=2: the allocator validator runs after every call)" for `make test`, with
 * ", not optimised" and ", sanitizers" where they apply. */
const char *buildinfo_describe(void);

OOM_END_DECLS

#endif
