/* tracking.h - the commands of nightly regression tracking: `oomlab compare`, `baseline`, `history` and `export`
 * (compare.c, history.c, export.c). Each takes the words after its name and returns the exit status: 0, 1 (compare:
 * a regression), 2 (bad input: one line on stderr, nothing written). */
#ifndef OOMLAB_TRACKING_H
#define OOMLAB_TRACKING_H

#include "core/compat.h"

OOM_BEGIN_DECLS

int cli_compare(int argc, char **argv);
int cli_baseline(int argc, char **argv);
int cli_history(int argc, char **argv);
int cli_export(int argc, char **argv);

/* "oomlab: " + the formatted line on stderr; returns 2. */
int cli_bad_input(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

OOM_END_DECLS

#endif
