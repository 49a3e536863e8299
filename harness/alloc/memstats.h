/* memstats.h - the caching allocator's statistics, with PyTorch's names and meaning, and their presentations:
 * the flattened memory_stats() keys, memory_summary()'s table, and format_size().
 *
 * Each stat has current, peak, allocated and freed (int64, as c10::CachingDeviceAllocator::Stat):
 *   increase(x): current += x; peak = max(peak, current); allocated += x
 *   decrease(x): current -= x; freed += x
 * so current == allocated - freed (until reset_accumulated zeroes allocated and freed, as PyTorch does), and
 * peak >= current >= 0, always (memstats_check verifies both).
 * Arrays are indexed by pool: STAT_ALL (aggregate, 0), STAT_SMALL (small_pool, 1), STAT_LARGE (large_pool, 2);
 * every update hits STAT_ALL and the block's pool.
 */
#ifndef OOMLAB_MEMSTATS_H
#define OOMLAB_MEMSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

typedef struct memstat {
    int64_t current;
    int64_t peak;
    int64_t allocated;
    int64_t freed;
} memstat;

enum { STAT_ALL = 0, STAT_SMALL = 1, STAT_LARGE = 2, STAT_TYPES = 3 };

/* The nine stat arrays, in PyTorch's memory_stats() order of meaning. */
typedef struct memstats {
    memstat allocation[STAT_TYPES];           /* blocks handed out */
    memstat segment[STAT_TYPES];              /* cudaMalloc segments (never touched by expandable mapping) */
    memstat active[STAT_TYPES];               /* blocks handed out, until their free completes */
    memstat inactive_split[STAT_TYPES];       /* free blocks inside split non-expandable segments */
    memstat allocated_bytes[STAT_TYPES];      /* bytes of blocks handed out (rounded or whole block) */
    memstat reserved_bytes[STAT_TYPES];       /* bytes held from the driver: segments + mapped pages */
    memstat active_bytes[STAT_TYPES];
    memstat inactive_split_bytes[STAT_TYPES]; /* "Non-releasable memory" */
    memstat requested_bytes[STAT_TYPES];      /* bytes the callers asked for, before rounding */
    memstat oversize_allocations;             /* blocks >= max_split_size handed out */
    memstat oversize_segments;                /* segments >= max_split_size */
    int64_t num_alloc_retries;                /* mallocs that emptied the cache and tried again */
    int64_t num_ooms;                         /* mallocs that failed */
    int64_t num_sync_all_streams;             /* release_cached_blocks calls */
    int64_t num_device_alloc;                 /* cudaMalloc + map calls */
    int64_t num_device_free;                  /* cudaFree + unmap calls */
    int64_t max_split_size;                   /* the setting at construction; -1 for unlimited */
    bool accumulated_reset;                   /* reset_accumulated ran: current == allocated - freed no longer holds */
} memstats;

static inline void stat_increase(memstat *s, int64_t x)
{
    s->current += x;
    s->peak = s->current > s->peak ? s->current : s->peak; /* branch-free: a cmov on the allocator's hot path */
    s->allocated += x;
}

static inline void stat_decrease(memstat *s, int64_t x)
{
    s->current -= x;
    s->freed += x;
}

/* increase(x) / decrease(x), x >= 0, of STAT_ALL and pool: the hot path's updates, whose sign is known. */
static inline void stat_array_increase(memstat *a, int pool, int64_t x)
{
    stat_increase(&a[STAT_ALL], x);
    stat_increase(&a[pool], x);
}

static inline void stat_array_decrease(memstat *a, int pool, int64_t x)
{
    stat_decrease(&a[STAT_ALL], x);
    stat_decrease(&a[pool], x);
}

/* Apply +x (x > 0: increase, x < 0: decrease, 0: nothing) to STAT_ALL and pool. */
static inline void stat_array_update(memstat *a, int pool, int64_t x)
{
    if (x > 0) {
        stat_increase(&a[STAT_ALL], x);
        stat_increase(&a[pool], x);
    } else if (x < 0) {
        stat_decrease(&a[STAT_ALL], -x);
        stat_decrease(&a[pool], -x);
    }
}

/* reset_peak_memory_stats: peak := current for the nine arrays and both oversize stats. */
void memstats_reset_peak(memstats *m);
/* reset_accumulated_memory_stats: allocated = freed = 0, and the five counters = 0. */
void memstats_reset_accumulated(memstats *m);
/* The stat invariants above; OOM_ECORRUPT with a detail in the last-error record when one fails. */
oom_status memstats_check(const memstats *m);

/* Number of flattened memory_stats() keys (122). */
#define MEMSTATS_NKEYS 122
/* The i-th flattened key in memory_stats()'s sorted order ("active.all.allocated", ...) and its value.
 * Returns false when i is out of range. */
bool memstats_key(const memstats *m, size_t i, const char **key, int64_t *value);
/* Value by flattened key name ("allocated_bytes.all.peak", "num_ooms", ...); false if unknown. */
bool memstats_get(const memstats *m, const char *key, int64_t *value);
/* Set a stat by flattened key name (tests rebuild PyTorch's recorded stats this way); false if unknown. */
bool memstats_set(memstats *m, const char *key, int64_t value);

/* PyTorch's format_size: "1024 bytes", "1.50 KiB", "20.00 MiB", "1.32 GiB". buf holds at least 32 bytes. */
char *memstats_format_size(uint64_t bytes, char *buf, size_t cap);

/* memory_summary(device, abbreviated): PyTorch's 75-column table, byte for byte. Returns a malloc'd string
 * (the caller frees it), NULL when out of host memory. */
char *memstats_summary(const memstats *m, int device_id, bool abbreviated);

OOM_END_DECLS

#endif
