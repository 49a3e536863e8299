/* memstats.c - stat resets and checks, the flattened memory_stats() keys, format_size and memory_summary(). */
#include "alloc/memstats.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The nine arrays (PyTorch's nested-dict names), for the loops below. */
static const struct {
    const char *name;
    size_t off;
} arrays[] = {
    {"allocation", offsetof(memstats, allocation)},
    {"segment", offsetof(memstats, segment)},
    {"active", offsetof(memstats, active)},
    {"inactive_split", offsetof(memstats, inactive_split)},
    {"allocated_bytes", offsetof(memstats, allocated_bytes)},
    {"reserved_bytes", offsetof(memstats, reserved_bytes)},
    {"active_bytes", offsetof(memstats, active_bytes)},
    {"inactive_split_bytes", offsetof(memstats, inactive_split_bytes)},
    {"requested_bytes", offsetof(memstats, requested_bytes)},
};
#define NARRAYS (sizeof arrays / sizeof arrays[0])

static memstat *array_at(memstats *m, size_t i) { return (memstat *)(void *)((char *)m + arrays[i].off); }
static const memstat *carray_at(const memstats *m, size_t i)
{
    return (const memstat *)(const void *)((const char *)m + arrays[i].off);
}

void memstats_reset_peak(memstats *m)
{
    for (size_t i = 0; i < NARRAYS; i++) {
        memstat *a = array_at(m, i);
        for (int t = 0; t < STAT_TYPES; t++)
            a[t].peak = a[t].current;
    }
    m->oversize_allocations.peak = m->oversize_allocations.current;
    m->oversize_segments.peak = m->oversize_segments.current;
}

void memstats_reset_accumulated(memstats *m)
{
    for (size_t i = 0; i < NARRAYS; i++) {
        memstat *a = array_at(m, i);
        for (int t = 0; t < STAT_TYPES; t++)
            a[t].allocated = a[t].freed = 0;
    }
    m->oversize_allocations.allocated = m->oversize_allocations.freed = 0;
    m->oversize_segments.allocated = m->oversize_segments.freed = 0;
    m->num_alloc_retries = 0;
    m->accumulated_reset = true;
    m->num_ooms = 0;
    m->num_sync_all_streams = 0;
    m->num_device_alloc = 0;
    m->num_device_free = 0;
}

/* a - b without signed overflow; false when it would overflow. */
static bool sub_exact(int64_t a, int64_t b, int64_t *r)
{
    if ((b > 0 && a < INT64_MIN + b) || (b < 0 && a > INT64_MAX + b))
        return false;
    *r = a - b;
    return true;
}

static const char *const pool_names[STAT_TYPES] = {"all", "small_pool", "large_pool"};

static oom_status check_stat(const memstat *s, const char *name, const char *pool, bool identity)
{
    const char *dot = pool ? "." : "";
    int64_t d;
    if (identity && (!sub_exact(s->allocated, s->freed, &d) || d != s->current)) {
        OOM_ERROR(OOM_ECORRUPT, "stat %s%s%s: current %" PRId64 " != allocated %" PRId64 " - freed %" PRId64, name,
                  dot, pool ? pool : "", s->current, s->allocated, s->freed);
        return OOM_ECORRUPT;
    }
    if (s->peak < s->current) {
        OOM_ERROR(OOM_ECORRUPT, "stat %s%s%s: peak %" PRId64 " < current %" PRId64, name, dot, pool ? pool : "",
                  s->peak, s->current);
        return OOM_ECORRUPT;
    }
    if (s->current < 0) {
        OOM_ERROR(OOM_ECORRUPT, "stat %s%s%s: current %" PRId64 " < 0", name, dot, pool ? pool : "", s->current);
        return OOM_ECORRUPT;
    }
    return OOM_OK;
}

/* all == small + large, checked as all - small == large to avoid overflow. */
static bool pool_sum_ok(int64_t all, int64_t small, int64_t large)
{
    int64_t d;
    return sub_exact(all, small, &d) && d == large;
}

oom_status memstats_check(const memstats *m)
{
    for (size_t i = 0; i < NARRAYS; i++) {
        const memstat *a = carray_at(m, i);
        for (int t = 0; t < STAT_TYPES; t++) {
            oom_status st = check_stat(&a[t], arrays[i].name, pool_names[t], !m->accumulated_reset);
            if (st != OOM_OK)
                return st;
        }
        static const char *const fields[3] = {"current", "allocated", "freed"};
        const int64_t v[3][STAT_TYPES] = {
            {a[0].current, a[1].current, a[2].current},
            {a[0].allocated, a[1].allocated, a[2].allocated},
            {a[0].freed, a[1].freed, a[2].freed},
        };
        for (int f = 0; f < 3; f++) {
            if (!pool_sum_ok(v[f][STAT_ALL], v[f][STAT_SMALL], v[f][STAT_LARGE])) {
                OOM_ERROR(OOM_ECORRUPT,
                          "stat %s.all.%s %" PRId64 " != small_pool %" PRId64 " + large_pool %" PRId64,
                          arrays[i].name, fields[f], v[f][STAT_ALL], v[f][STAT_SMALL], v[f][STAT_LARGE]);
                return OOM_ECORRUPT;
            }
        }
    }
    oom_status st = check_stat(&m->oversize_allocations, "oversize_allocations", NULL, !m->accumulated_reset);
    if (st == OOM_OK)
        st = check_stat(&m->oversize_segments, "oversize_segments", NULL, !m->accumulated_reset);
    return st;
}

/* ---- flattened keys, in Python's sorted() order (byte order: '.' < '_' < letters) ---- */

typedef struct key_entry {
    const char *key;
    size_t off; /* of an int64_t inside memstats */
} key_entry;

#define KSTAT(pfx, base)                                                                                     \
    {pfx ".allocated", (base) + offsetof(memstat, allocated)}, {pfx ".current", (base) + offsetof(memstat, current)}, \
        {pfx ".freed", (base) + offsetof(memstat, freed)}, {pfx ".peak", (base) + offsetof(memstat, peak)}
#define KARRAY(name)                                                                \
    KSTAT(#name ".all", offsetof(memstats, name) + STAT_ALL * sizeof(memstat)),        \
        KSTAT(#name ".large_pool", offsetof(memstats, name) + STAT_LARGE * sizeof(memstat)), \
        KSTAT(#name ".small_pool", offsetof(memstats, name) + STAT_SMALL * sizeof(memstat))
#define KSCALAR(name) {#name, offsetof(memstats, name)}

static const key_entry keys[] = {
    KARRAY(active),
    KARRAY(active_bytes),
    KARRAY(allocated_bytes),
    KARRAY(allocation),
    KARRAY(inactive_split),
    KARRAY(inactive_split_bytes),
    KSCALAR(max_split_size),
    KSCALAR(num_alloc_retries),
    KSCALAR(num_device_alloc),
    KSCALAR(num_device_free),
    KSCALAR(num_ooms),
    KSCALAR(num_sync_all_streams),
    KSTAT("oversize_allocations", offsetof(memstats, oversize_allocations)),
    KSTAT("oversize_segments", offsetof(memstats, oversize_segments)),
    KARRAY(requested_bytes),
    KARRAY(reserved_bytes),
    KARRAY(segment),
};

_Static_assert(sizeof keys / sizeof keys[0] == MEMSTATS_NKEYS, "memory_stats() has 122 flattened keys");

static int64_t key_value(const memstats *m, size_t i)
{
    int64_t v;
    memcpy(&v, (const char *)m + keys[i].off, sizeof v);
    return v;
}

bool memstats_key(const memstats *m, size_t i, const char **key, int64_t *value)
{
    if (i >= MEMSTATS_NKEYS)
        return false;
    if (key)
        *key = keys[i].key;
    if (value)
        *value = m ? key_value(m, i) : 0;
    return true;
}

static int key_cmp(const void *k, const void *e) { return strcmp(k, ((const key_entry *)e)->key); }

static const key_entry *key_find(const char *key)
{
    if (!key)
        return NULL;
    return bsearch(key, keys, MEMSTATS_NKEYS, sizeof keys[0], key_cmp);
}

bool memstats_get(const memstats *m, const char *key, int64_t *value)
{
    const key_entry *e = key_find(key);
    if (!e)
        return false;
    if (value)
        *value = key_value(m, (size_t)(e - keys));
    return true;
}

bool memstats_set(memstats *m, const char *key, int64_t value)
{
    const key_entry *e = key_find(key);
    if (!e)
        return false;
    memcpy((char *)m + e->off, &value, sizeof value);
    return true;
}

/* ---- format_size (c10 CUDACachingAllocator.cpp: fixed, precision 2) ---- */

char *memstats_format_size(uint64_t bytes, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return buf;
    if (bytes <= 1024)
        snprintf(buf, cap, "%" PRIu64 " bytes", bytes);
    else if (bytes <= 1048576)
        snprintf(buf, cap, "%.2f KiB", (double)bytes / 1024.0);
    else if (bytes <= 1073741824ULL)
        snprintf(buf, cap, "%.2f MiB", (double)bytes / 1048576.0);
    else
        snprintf(buf, cap, "%.2f GiB", (double)bytes / 1073741824.0);
    return buf;
}

/* ---- memory_summary (torch/cuda/memory.py) ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap * 2 + (size_t)n + 1;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
}

/* Python's floor division. */
static int64_t floordiv(int64_t a, int64_t d)
{
    int64_t q = a / d;
    if ((a % d != 0) && ((a < 0) != (d < 0)))
        q--;
    return q;
}

/* _format_size: the reference is divided as a Python float (int / 1024 is exact scaling, so a C double of the
 * same value agrees), the value floor-divided as an int. */
static void cell_size(sbuf *b, int64_t sz, int64_t pref)
{
    static const char *const prefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    const char *prefix = prefixes[0];
    double p = (double)pref;
    for (size_t i = 1; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (p < 768.0 * 1024.0)
            break;
        prefix = prefixes[i];
        sz = floordiv(sz, 1024);
        p /= 1024.0;
    }
    sb_printf(b, "%6" PRId64 " %s", sz, prefix);
}

/* _format_count: Python's int / 1000 is correctly rounded, so its thresholds reduce exactly to the integer
 * comparisons pref < 750000 and pref < 750000000. */
static void cell_count(sbuf *b, int64_t cnt, int64_t pref)
{
    const char *prefix = " ";
    if (pref >= 750000) {
        prefix = "K";
        cnt = floordiv(cnt, 1000);
        if (pref >= 750000000) {
            prefix = "M";
            cnt = floordiv(cnt, 1000);
        }
    }
    sb_printf(b, "%7" PRId64 " %s ", cnt, prefix);
}

typedef void (*cell_fn)(sbuf *, int64_t, int64_t);

static void row(sbuf *b, const char *name, const memstat *s, const memstat *ref, cell_fn cell)
{
    sb_printf(b, "| %-21s | ", name);
    cell(b, s->current, ref->current);
    sb_printf(b, " | ");
    cell(b, s->peak, ref->peak);
    sb_printf(b, " | ");
    cell(b, s->allocated, ref->allocated);
    sb_printf(b, " | ");
    cell(b, s->freed, ref->freed);
    sb_printf(b, " |\n");
}

#define RULE_EQ "|===========================================================================|\n"
#define RULE_DASH "|---------------------------------------------------------------------------|\n"

char *memstats_summary(const memstats *m, int device_id, bool abbreviated)
{
    static const struct {
        size_t off;
        const char *name;
        cell_fn cell;
    } metrics[] = {
        {offsetof(memstats, allocated_bytes), "Allocated memory", cell_size},
        {offsetof(memstats, active_bytes), "Active memory", cell_size},
        {offsetof(memstats, requested_bytes), "Requested memory", cell_size},
        {offsetof(memstats, reserved_bytes), "GPU reserved memory", cell_size},
        {offsetof(memstats, inactive_split_bytes), "Non-releasable memory", cell_size},
        {offsetof(memstats, allocation), "Allocations", cell_count},
        {offsetof(memstats, active), "Active allocs", cell_count},
        {offsetof(memstats, segment), "GPU reserved segments", cell_count},
        {offsetof(memstats, inactive_split), "Non-releasable allocs", cell_count},
    };
    sbuf b = {.p = malloc(4096), .cap = 4096};
    if (!b.p)
        return NULL;
    b.p[0] = '\0';

    sb_printf(&b, RULE_EQ);
    sb_printf(&b, "|%18sPyTorch CUDA memory summary, device ID %-17d |\n", "", device_id);
    sb_printf(&b, RULE_DASH);
    sb_printf(&b, "|%12sCUDA OOMs: %-12" PRId64 " | %6s cudaMalloc retries: %-8" PRId64 "  |\n", "", m->num_ooms, "",
              m->num_alloc_retries);
    sb_printf(&b, RULE_EQ);
    sb_printf(&b, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n");

    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++) {
        const memstat *a = (const memstat *)(const void *)((const char *)m + metrics[i].off);
        sb_printf(&b, RULE_DASH);
        row(&b, metrics[i].name, &a[STAT_ALL], &a[STAT_ALL], metrics[i].cell);
        if (!abbreviated) {
            row(&b, "      from large pool", &a[STAT_LARGE], &a[STAT_ALL], metrics[i].cell);
            row(&b, "      from small pool", &a[STAT_SMALL], &a[STAT_ALL], metrics[i].cell);
        }
    }
    sb_printf(&b, RULE_DASH);
    row(&b, "Oversize allocations", &m->oversize_allocations, &m->oversize_allocations, cell_count);
    sb_printf(&b, RULE_DASH);
    row(&b, "Oversize GPU segments", &m->oversize_segments, &m->oversize_segments, cell_count);
    sb_printf(&b, RULE_EQ);

    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
