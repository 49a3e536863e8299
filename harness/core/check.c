/* check.c - the one way a checked build stops on a broken invariant (check.h). */
#include "core/check.h"

#include <stdio.h>
#include <stdlib.h>

void oom_check_fail(const char *module, const char *why, const char *file, int line)
{
    /* no allocation on the way out: the heap may be what is broken */
    fprintf(stderr, "oomlab: %s invariant broken: %s (%s:%d)\n", module, why, file, line);
    fflush(stderr);
    abort();
}
