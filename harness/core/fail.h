/* fail.h - the three ways oomlab's own code fails, by what failed:
 *   - a reason the caller prints: a function that takes `char *err, size_t cap` writes one line there (no
 *     "oomlab: " prefix, the caller adds it) with errbuf_set, or errbuf_fail / errbuf_false that also return the
 *     failure: `return errbuf_fail(err, cap, OOM_EINVAL, "...", ...);`. The line is cut to cap - 1 bytes; cap 0
 *     writes nothing.
 *   - no host memory for oomlab's own bookkeeping: xmalloc and xrealloc print "oomlab: out of host memory (N bytes)"
 *     and abort ("or die", Redis's zmalloc), since the bookkeeping cannot go on. Device memory and the memory a
 *     scenario models never come from here: running out of those is the result oomlab reports.
 *   - a broken invariant found by an allocator's validator (cachealloc_check, hostalloc_check): OOM_CHECK.
 */
#ifndef OOMLAB_FAIL_H
#define OOMLAB_FAIL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#if defined(__GNUC__)
#define OOM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define OOM_PRINTF(fmt, args)
#endif

/* Write the line (printf's format) into err[cap]. */
void errbuf_set(char *err, size_t cap, const char *fmt, ...) OOM_PRINTF(3, 4);
/* errbuf_set, then return st. */
oom_status errbuf_fail(char *err, size_t cap, oom_status st, const char *fmt, ...) OOM_PRINTF(4, 5);
/* errbuf_set, then return false: for checks that answer true or false. */
bool errbuf_false(char *err, size_t cap, const char *fmt, ...) OOM_PRINTF(3, 4);

/* Bookkeeping memory or abort. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);

/* Inside a validator: unless cond holds, record the broken invariant (printf's format) as OOM_ECORRUPT in the
 * error record, set the validator's `rc` to OOM_ECORRUPT and jump to its `out:` label, where it frees what it
 * gathered and returns rc. */
#define OOM_CHECK(cond, ...)                                                                                   \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            OOM_ERROR(OOM_ECORRUPT, __VA_ARGS__);                                                              \
            rc = OOM_ECORRUPT;                                                                                 \
            goto out;                                                                                          \
        }                                                                                                      \
    } while (0)

OOM_END_DECLS

#endif
