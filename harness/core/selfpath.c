/* selfpath.c - the checkout this binary runs from. See selfpath.h. */
#include "core/selfpath.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

bool selfpath_find_up(const char *rel, char *dir, size_t cap)
{
    char exe[PATH_MAX], probe[PATH_MAX * 2];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *d = dirname(exe);
    for (int up = 0; up < 4; up++) {
        snprintf(probe, sizeof probe, "%s/%s", d, rel);
        if (access(probe, F_OK) == 0) {
            int w = snprintf(dir, cap, "%s", d);
            return w > 0 && (size_t)w < cap;
        }
        d = dirname(d);
    }
    return false;
}
