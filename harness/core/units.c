/* units.c - parse byte sizes. */
#include "core/units.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

static const struct {
    const char *name;
    uint64_t mult;
} unit_table[] = {
    {"", 1},
    {"B", 1},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
    {"KB", 1000ULL},
    {"MB", 1000000ULL},
    {"GB", 1000000000ULL},
    {"TB", 1000000000000ULL},
};

oom_status units_parse_size(const char *s, size_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return OOM_EINVAL;
    /* integer part and fraction, exactly (no floating point): value = whole + frac_num / frac_den */
    uint64_t whole = 0, frac_num = 0, frac_den = 1;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return OOM_EINVAL;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return OOM_EINVAL;
        for (; isdigit((unsigned char)*p); p++) {
            if (frac_den >= 1000000000000ULL)
                return OOM_EINVAL; /* at most 12 fraction digits */
            frac_num = frac_num * 10 + (uint64_t)(*p - '0');
            frac_den *= 10;
        }
    }
    for (size_t i = 0; i < sizeof unit_table / sizeof unit_table[0]; i++) {
        if (strcmp(p, unit_table[i].name) != 0)
            continue;
        uint64_t m = unit_table[i].mult;
        if (whole > UINT64_MAX / m)
            return OOM_EINVAL;
        uint64_t bytes = whole * m;
        if (frac_num) {
            /* frac_num / frac_den * m must be whole: reduce the fraction, then m must divide evenly */
            uint64_t a = frac_num, b = frac_den;
            while (b) {
                uint64_t t = a % b;
                a = b;
                b = t;
            }
            uint64_t n = frac_num / a, d = frac_den / a;
            if (m % d != 0 || n > UINT64_MAX / (m / d))
                return OOM_EINVAL;
            uint64_t add = n * (m / d);
            if (bytes > UINT64_MAX - add)
                return OOM_EINVAL;
            bytes += add;
        }
        if (bytes == 0 || bytes > SIZE_MAX)
            return OOM_EINVAL;
        *out = (size_t)bytes;
        return OOM_OK;
    }
    return OOM_EINVAL;
}
