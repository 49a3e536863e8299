/* units.h - byte sizes as users type them: "1073741824", "1GiB", "512MiB", "1.5GiB", "64KiB", "2GB". */
#ifndef OOMLAB_UNITS_H
#define OOMLAB_UNITS_H

#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* Parse a size: digits with an optional fraction, then an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024)
 * or KB, MB, GB, TB (powers of 1000), case-sensitive as written here. The result must be a whole number of
 * bytes > 0. OOM_EINVAL on anything else (no partial parse). */
oom_status units_parse_size(const char *s, size_t *out);

OOM_END_DECLS

#endif
