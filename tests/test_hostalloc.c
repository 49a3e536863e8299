/* test_hostalloc.c - the pinned host caching allocator (alloc/hostalloc.h), PyTorch 2.11's CachingHostAllocator.
 *
 * Suite "hostalloc": on the backend under test (sim, or cuda with OOMLAB_TEST_BACKEND=cuda). Work that is still
 * running is modelled with device_stream_hold/complete on a stream of its own, so that "the copy has not
 * finished" holds on both backends without timing anything.
 * Suite "hostalloc_sim": the pinned budget, always sim.
 * The expected statistics are PyTorch 2.11's, quirks included (hostalloc.h, Q1-Q4).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc/hostalloc.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------------------------------------- */

static device *open_dev(void)
{
    device *dev = test_device_open(0);
    cr_assert_not_null(dev, "cannot open the %s backend", device_kind_str(test_backend()));
    return dev;
}

static device *open_sim_pinned(size_t pinned)
{
    device_options o = {.kind = DEVICE_SIM, .sim_pinned_bytes = pinned};
    device *dev = NULL;
    cr_assert_eq(device_open(&o, &dev), OOM_OK);
    return dev;
}

static hostalloc *open_ha(device *dev, const hostalloc_options *o)
{
    hostalloc *ha = NULL;
    cr_assert_eq(hostalloc_new(dev, o, &ha), OOM_OK);
    return ha;
}

static void *xmalloc_pinned(hostalloc *ha, size_t n)
{
    void *p = NULL;
    oom_status st = hostalloc_malloc(ha, n, &p);
    cr_assert_eq(st, OOM_OK, "hostalloc_malloc(%zu): %s", n, oom_status_str(st));
    cr_assert_not_null(p);
    return p;
}

static int64_t hstat(hostalloc *ha, const char *key)
{
    hostalloc_stats s;
    hostalloc_get_stats(ha, &s);
    int64_t v = INT64_MIN;
    cr_assert(hostalloc_stats_get(&s, key, &v), "no key %s", key);
    return v;
}

/* The deterministic keys of host_memory_stats() (the times themselves are not: only their counts are checked,
 * as PyTorch's test_host_memory_stats does). Each stat is {allocated, current, freed, peak}. */
typedef struct want {
    int64_t active_bytes[4], active_requests[4], allocated_bytes[4], allocations[4];
    int64_t alloc_count, free_count, num_host_alloc, num_host_free;
} want;

static void expect_stats(hostalloc *ha, const want *w, const char *when)
{
    static const char *const names[4] = {"active_bytes", "active_requests", "allocated_bytes", "allocations"};
    static const char *const fields[4] = {"allocated", "current", "freed", "peak"};
    const int64_t *arrays[4] = {w->active_bytes, w->active_requests, w->allocated_bytes, w->allocations};
    char key[64];
    for (int a = 0; a < 4; a++)
        for (int f = 0; f < 4; f++) {
            snprintf(key, sizeof key, "%s.%s", names[a], fields[f]);
            cr_expect_eq(hstat(ha, key), arrays[a][f], "%s: %s = %lld, want %lld", when, key,
                         (long long)hstat(ha, key), (long long)arrays[a][f]);
        }
    cr_expect_eq(hstat(ha, "host_alloc_time.count"), w->alloc_count, "%s: host_alloc_time.count", when);
    cr_expect_eq(hstat(ha, "host_free_time.count"), w->free_count, "%s: host_free_time.count", when);
    cr_expect_eq(hstat(ha, "num_host_alloc"), w->num_host_alloc, "%s: num_host_alloc", when);
    cr_expect_eq(hstat(ha, "num_host_free"), w->num_host_free, "%s: num_host_free", when);
    cr_assert_eq(hostalloc_check(ha), OOM_OK, "%s: %s", when, oom_error_msg());
}

static size_t device_pinned(device *dev)
{
    size_t pinned = 0, limit = 0;
    device_host_info(dev, &pinned, &limit);
    return pinned;
}

/* What the device counts as pinned for a block: sim charges the 4 KiB pages spanned (cudaHostAlloc'd blocks
 * are page-aligned, malloc'd ones for cudaHostRegister need not be); cuda reports the bytes. */
static size_t pinned_for(const device *dev, void *p, size_t block, bool registered)
{
    if (dev->kind != DEVICE_SIM) /* sim counts whole pages; cuda what was asked for */
        return block;
    uintptr_t lo = (uintptr_t)p, hi = lo + block;
    if (!registered)
        return (block + 4095) / 4096 * 4096;
    return (size_t)((hi + 4095) / 4096 * 4096 - lo / 4096 * 4096);
}

static hostalloc_usage usage(hostalloc *ha)
{
    hostalloc_usage u;
    hostalloc_usage_get(ha, &u);
    return u;
}

/* ---- keys ------------------------------------------------------------------------------------------- */

Test(hostalloc, stats_keys_are_pytorch_211s)
{
    /* torch.cuda.host_memory_stats() of 2.11.0+cu130, in its sorted order. */
    static const char *const want_keys[HOSTALLOC_NKEYS] = {
        "active_bytes.allocated", "active_bytes.current", "active_bytes.freed", "active_bytes.peak",
        "active_requests.allocated", "active_requests.current", "active_requests.freed", "active_requests.peak",
        "allocated_bytes.allocated", "allocated_bytes.current", "allocated_bytes.freed", "allocated_bytes.peak",
        "allocations.allocated", "allocations.current", "allocations.freed", "allocations.peak",
        "host_alloc_time.avg", "host_alloc_time.count", "host_alloc_time.max", "host_alloc_time.min",
        "host_alloc_time.total", "host_free_time.avg", "host_free_time.count", "host_free_time.max",
        "host_free_time.min", "host_free_time.total", "num_host_alloc", "num_host_free"};
    hostalloc_stats s = {0};
    s.host_alloc_time = (hostalloc_duration){.total = 10, .max = 6, .min = 4, .count = 2};
    s.host_free_time = (hostalloc_duration){.total = 7, .max = 7, .min = 7, .count = 0};
    s.allocations = (memstat){.current = 3, .peak = 5, .allocated = 8, .freed = 5};
    for (size_t i = 0; i < HOSTALLOC_NKEYS; i++) {
        const char *k = NULL;
        cr_assert(hostalloc_stats_key(&s, i, &k, NULL));
        cr_assert_str_eq(k, want_keys[i]);
        if (i > 0) /* Python's result.sort() */
            cr_assert_lt(strcmp(want_keys[i - 1], want_keys[i]), 0);
    }
    cr_assert_not(hostalloc_stats_key(&s, HOSTALLOC_NKEYS, NULL, NULL));
    int64_t v;
    cr_assert(hostalloc_stats_get(&s, "host_alloc_time.avg", &v));
    cr_assert_eq(v, 5); /* total / count */
    cr_assert(hostalloc_stats_get(&s, "host_free_time.avg", &v));
    cr_assert_eq(v, 0); /* count 0 */
    cr_assert(hostalloc_stats_get(&s, "allocations.peak", &v));
    cr_assert_eq(v, 5);
    /* the names of 2.9 and older are gone */
    cr_assert_not(hostalloc_stats_get(&s, "segment.current", &v));
    cr_assert_not(hostalloc_stats_get(&s, "reserved_bytes.current", &v));
    cr_assert_not(hostalloc_stats_get(&s, "allocation.current", &v));
}

/* ---- rounding --------------------------------------------------------------------------------------- */

Test(hostalloc, rounding_to_powers_of_two)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    void *p = (void *)1;
    cr_assert_eq(hostalloc_malloc(ha, 0, &p), OOM_OK);
    cr_assert_null(p); /* size 0: nullptr, and no counter moves */
    expect_stats(ha, &(want){0}, "after malloc(0)");
    cr_assert_eq(device_pinned(dev), 0);

    static const struct {
        size_t ask, block;
    } cases[] = {
        {1, 1},             /* PowerOf2Ceil(1) = 1: no minimum block */
        {3, 4},
        {4096, 4096},
        {4097, 8192},
        {40960, 65536},     /* torch.ones(10 * 1024) floats: PyTorch's test_host_memory_stats */
        {19300000, 33554432}, /* 19.3 MB -> 32 MiB */
    };
    int64_t bytes = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *q = xmalloc_pinned(ha, cases[i].ask);
        cr_assert_eq(hostalloc_block_size(ha, q), cases[i].block, "malloc(%zu)", cases[i].ask);
        memset(q, 0xab, cases[i].ask); /* it is real memory */
        bytes += (int64_t)cases[i].block;
    }
    int64_t n = (int64_t)(sizeof cases / sizeof cases[0]);
    expect_stats(ha,
                 &(want){.active_bytes = {bytes, bytes, 0, bytes},
                         .active_requests = {n, n, 0, n},
                         .allocated_bytes = {bytes, bytes, 0, bytes},
                         .allocations = {n, n, 0, n},
                         .alloc_count = n,
                         .num_host_alloc = n},
                 "after six blocks");
    /* No power of two holds more than 2^63 bytes: refused, nothing changes. */
    cr_assert_eq(hostalloc_malloc(ha, ((size_t)1 << 63) + 1, &p), OOM_ENOMEM_PINNED);
    cr_assert_eq(hstat(ha, "allocations.current"), n);
    hostalloc_delete(ha);
    cr_assert_eq(device_pinned(dev), 0);
    device_close(dev);
}

/* ---- stats after each operation ------------------------------------------------------------------------ */

Test(hostalloc, stats_after_each_operation)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    const int64_t K64 = 65536, K128 = 131072;

    /* PyTorch's test_host_memory_stats: 10 Ki and 20 Ki floats. */
    void *a = xmalloc_pinned(ha, 10 * 1024 * 4);
    expect_stats(ha,
                 &(want){.active_bytes = {K64, K64, 0, K64},
                         .active_requests = {1, 1, 0, 1},
                         .allocated_bytes = {K64, K64, 0, K64},
                         .allocations = {1, 1, 0, 1},
                         .alloc_count = 1,
                         .num_host_alloc = 1},
                 "malloc a");
    void *b = xmalloc_pinned(ha, 20 * 1024 * 4);
    want w = {.active_bytes = {K64 + K128, K64 + K128, 0, K64 + K128},
              .active_requests = {2, 2, 0, 2},
              .allocated_bytes = {K64 + K128, K64 + K128, 0, K64 + K128},
              .allocations = {2, 2, 0, 2},
              .alloc_count = 2,
              .num_host_alloc = 2};
    expect_stats(ha, &w, "malloc b");
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK); /* both live: nothing to free */
    expect_stats(ha, &w, "empty_cache with both live");

    /* Q1: a free with no recorded stream caches the block and leaves the active stats alone. */
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    expect_stats(ha, &w, "free a");
    cr_assert_eq(usage(ha).cached_blocks, 1);
    cr_assert_eq(usage(ha).live_bytes, (size_t)K128);

    /* The same power reuses it: no new block, active counts one more hand-out. */
    void *c = xmalloc_pinned(ha, 50000);
    cr_assert_eq(c, a);
    w.active_requests[0] = 3, w.active_requests[1] = 3, w.active_requests[3] = 3;
    w.active_bytes[0] = w.active_bytes[1] = w.active_bytes[3] = 2 * K64 + K128;
    expect_stats(ha, &w, "malloc c (reuses a)");

    cr_assert_eq(hostalloc_free(ha, b), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, c), OOM_OK);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    w.allocated_bytes[1] = 0, w.allocated_bytes[2] = K64 + K128;
    w.allocations[1] = 0, w.allocations[2] = 2;
    w.num_host_free = 2, w.free_count = 2;
    expect_stats(ha, &w, "free b, c and empty_cache"); /* active_* unchanged: Q1 */
    cr_assert_eq(device_pinned(dev), 0);

    hostalloc_reset_peak(ha);
    w.allocated_bytes[3] = 0, w.allocations[3] = 0;
    expect_stats(ha, &w, "reset_peak_host_memory_stats");
    cr_assert_eq(hstat(ha, "host_alloc_time.max"), 0);
    cr_assert_eq(hstat(ha, "host_free_time.min"), 0);

    hostalloc_reset_accumulated(ha);
    want z = {.active_bytes = {0, 2 * K64 + K128, 0, 2 * K64 + K128}, .active_requests = {0, 3, 0, 3}};
    expect_stats(ha, &z, "reset_accumulated_host_memory_stats");
    cr_assert_eq(hstat(ha, "host_alloc_time.total"), 0);
    hostalloc_delete(ha);
    device_close(dev);
}

/* ---- events ----------------------------------------------------------------------------------------- */

Test(hostalloc, reuse_only_after_the_recorded_event_completes)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    devstream s;
    cr_assert_eq(device_stream_create(dev, &s), OOM_OK);
    const int64_t M = 1 << 20;

    /* a batch pinned, copied non_blocking on s (still running), the event recorded, then freed */
    void *a = xmalloc_pinned(ha, (size_t)M);
    cr_assert_eq(device_stream_hold(dev, s), OOM_OK);
    cr_assert_eq(hostalloc_record_event(ha, a, s), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(usage(ha).pending_blocks, 1);

    /* the copy has not finished: the next batch gets a new block */
    void *b = xmalloc_pinned(ha, (size_t)M);
    cr_assert_neq(b, a);
    cr_assert_eq(hstat(ha, "num_host_alloc"), 2);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK); /* a is pending, b live: nothing freed */
    cr_assert_eq(hstat(ha, "num_host_free"), 0);

    /* the copy completes: the next malloc processes the event and reuses a */
    cr_assert_eq(device_stream_complete(dev, s, 1), OOM_OK);
    void *c = xmalloc_pinned(ha, (size_t)M);
    cr_assert_eq(c, a);
    /* Q2: a's return through its event moved active_bytes up by 1 and its freed down by 1. */
    expect_stats(ha,
                 &(want){.active_bytes = {3 * M, 3 * M + 1, -1, 3 * M + 1},
                         .active_requests = {3, 2, 1, 2},
                         .allocated_bytes = {2 * M, 2 * M, 0, 2 * M},
                         .allocations = {2, 2, 0, 2},
                         .alloc_count = 2,
                         .num_host_alloc = 2},
                 "after reuse through the event");

    cr_assert_eq(hostalloc_free(ha, b), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, c), OOM_OK);
    hostalloc_delete(ha);
    cr_assert_eq(device_stream_destroy(dev, s), OOM_OK);
    cr_assert_eq(device_pinned(dev), 0);
    device_close(dev);
}

Test(hostalloc, lifo_reuse_and_events_in_queue_order)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    /* no events: the block freed last comes back first */
    void *p[3];
    for (int i = 0; i < 3; i++)
        p[i] = xmalloc_pinned(ha, 3000);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(hostalloc_free(ha, p[i]), OOM_OK);
    for (int i = 2; i >= 0; i--)
        cr_assert_eq(xmalloc_pinned(ha, 4096), p[i]);

    /* Two streams: x waits for held work on s1, y's stream s2 is idle. The queue is processed oldest first and
     * stops at the first event not complete, so y is not reused while x waits, though its event is complete. */
    devstream s1, s2;
    cr_assert_eq(device_stream_create(dev, &s1), OOM_OK);
    cr_assert_eq(device_stream_create(dev, &s2), OOM_OK);
    void *x = p[0], *y = p[1];
    cr_assert_eq(device_stream_hold(dev, s1), OOM_OK);
    cr_assert_eq(hostalloc_record_event(ha, x, s1), OOM_OK);
    cr_assert_eq(hostalloc_record_event(ha, y, s2), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, x), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, y), OOM_OK);
    void *n1 = xmalloc_pinned(ha, 4096);
    cr_assert(n1 != x && n1 != y, "a pending block was reused");
    cr_assert_eq(usage(ha).pending_blocks, 2);

    /* s1 completes: x then y join the free list, so y (last in) comes out first */
    cr_assert_eq(device_stream_complete(dev, s1, 1), OOM_OK);
    cr_assert_eq(device_stream_synchronize(dev, s2), OOM_OK);
    cr_assert_eq(xmalloc_pinned(ha, 4096), y);
    cr_assert_eq(xmalloc_pinned(ha, 4096), x);
    cr_assert_eq(hostalloc_check(ha), OOM_OK, "%s", oom_error_msg());
    hostalloc_delete(ha);
    cr_assert_eq(device_stream_destroy(dev, s1), OOM_OK);
    cr_assert_eq(device_stream_destroy(dev, s2), OOM_OK);
    device_close(dev);
}

Test(hostalloc, event_on_the_default_stream)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    void *a = xmalloc_pinned(ha, 100000);
    cr_assert_eq(hostalloc_record_event(ha, a, 0), OOM_OK); /* the default stream, nothing held */
    cr_assert_eq(hostalloc_record_event(ha, a, 0), OOM_OK); /* a stream counts once */
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(usage(ha).pending_blocks, 1); /* events are processed by the next malloc or empty_cache */
    cr_assert_eq(device_stream_synchronize(dev, 0), OOM_OK); /* sim: already complete; cuda: now surely */
    cr_assert_eq(xmalloc_pinned(ha, 70000), a);
    cr_assert_eq(hstat(ha, "active_requests.freed"), 1); /* one return through one event */
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    hostalloc_delete(ha);
    device_close(dev);
}

/* Q3: active_requests.peak is the sum of the per-power peaks, not the true peak. */
Test(hostalloc, active_peaks_are_summed_per_power)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    void *a = xmalloc_pinned(ha, 1000); /* 1 KiB */
    cr_assert_eq(hostalloc_record_event(ha, a, 0), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(device_stream_synchronize(dev, 0), OOM_OK);
    void *b = xmalloc_pinned(ha, 3000); /* 4 KiB: a returns first, then b is handed out */
    cr_assert_eq(hstat(ha, "active_requests.current"), 1);
    cr_assert_eq(hstat(ha, "active_requests.peak"), 2); /* one block out at a time, yet 1 + 1 */
    cr_assert_eq(hstat(ha, "allocations.peak"), 2);     /* both held: a true peak */
    cr_assert_eq(hostalloc_free(ha, b), OOM_OK);
    hostalloc_delete(ha);
    device_close(dev);
}

Test(hostalloc, empty_cache_frees_only_completed_free_blocks)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    devstream s;
    cr_assert_eq(device_stream_create(dev, &s), OOM_OK);
    const size_t M = 1 << 20;
    void *live = xmalloc_pinned(ha, M);
    void *pending = xmalloc_pinned(ha, 2 * M);
    void *cached = xmalloc_pinned(ha, 4 * M);
    cr_assert_eq(device_stream_hold(dev, s), OOM_OK);
    cr_assert_eq(hostalloc_record_event(ha, pending, s), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, pending), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, cached), OOM_OK);
    cr_assert_eq(device_pinned(dev), 7 * M);

    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    hostalloc_usage u = usage(ha);
    cr_assert_eq(u.live_bytes, M);
    cr_assert_eq(u.pending_bytes, 2 * M);
    cr_assert_eq(u.cached_blocks, 0);
    cr_assert_eq(hstat(ha, "num_host_free"), 1);
    cr_assert_eq(hstat(ha, "host_free_time.count"), 1);
    cr_assert_eq(hstat(ha, "allocated_bytes.current"), (int64_t)(3 * M));
    cr_assert_eq(device_pinned(dev), 3 * M);

    /* the copy completes: empty_cache processes the event first, then frees the block */
    cr_assert_eq(device_stream_complete(dev, s, 1), OOM_OK);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    cr_assert_eq(usage(ha).pending_blocks, 0);
    cr_assert_eq(hstat(ha, "num_host_free"), 2);
    cr_assert_eq(device_pinned(dev), M);

    cr_assert_eq(hostalloc_free(ha, live), OOM_OK);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    cr_assert_eq(hstat(ha, "allocations.current"), 0);
    cr_assert_eq(hstat(ha, "allocated_bytes.current"), 0);
    cr_assert_eq(hstat(ha, "num_host_free"), 3);
    cr_assert_eq(device_pinned(dev), 0);
    hostalloc_delete(ha);
    cr_assert_eq(device_stream_destroy(dev, s), OOM_OK);
    device_close(dev);
}

Test(hostalloc, bad_pointers_are_einval)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    int on_stack = 0;
    void *a = xmalloc_pinned(ha, 64);
    cr_assert_eq(hostalloc_record_event(ha, &on_stack, 0), OOM_EINVAL); /* not pinned here: PyTorch's false */
    cr_assert_eq(hostalloc_record_event(ha, (char *)a + 8, 0), OOM_EINVAL);
    cr_assert_eq(hostalloc_free(ha, &on_stack), OOM_EINVAL);
    cr_assert_eq(hostalloc_free(ha, NULL), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, a), OOM_EINVAL);               /* double free */
    cr_assert_eq(hostalloc_record_event(ha, a, 0), OOM_EINVAL);    /* after its free */
    cr_assert_eq(hostalloc_block_size(ha, a), 0);
    cr_assert_eq(hostalloc_malloc(ha, 8, NULL), OOM_EINVAL);
    cr_assert_eq(hostalloc_check(ha), OOM_OK, "%s", oom_error_msg());
    hostalloc_delete(ha);
    device_close(dev);
}

/* ---- settings --------------------------------------------------------------------------------------- */

Test(hostalloc, options_from_alloc_conf)
{
    alloc_conf c;
    hostalloc_options o;
    alloc_conf_default(&c);
    hostalloc_options_from_conf(&c, &o);
    cr_assert_not(o.use_host_register);
    cr_assert_eq(o.num_register_threads, 1);
    cr_assert_eq(o.reserve_segment_bytes, 0);

    char err[256];
    cr_assert_eq(alloc_conf_parse(&c,
                                  "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
                                  "pinned_reserve_segment_size_mb:64",
                                  err, sizeof err),
                 OOM_OK, "%s", err);
    hostalloc_options_from_conf(&c, &o);
    cr_assert(o.use_host_register);
    cr_assert_eq(o.num_register_threads, 8);
    cr_assert_eq(o.reserve_segment_bytes, 64 * MiB);

    device *dev = open_sim_pinned(0);
    hostalloc *ha = NULL;
    hostalloc_options bad = {.num_register_threads = 3};
    cr_assert_eq(hostalloc_new(dev, &bad, &ha), OOM_EINVAL);
    bad.num_register_threads = 256;
    cr_assert_eq(hostalloc_new(dev, &bad, &ha), OOM_EINVAL);
    cr_assert_null(ha);
    device_close(dev);
}

/* malloc + page touching (on 8 threads for big blocks) + cudaHostRegister; freed with unregister + free. */
Test(hostalloc, host_register_path)
{
    device *dev = open_dev();
    hostalloc_options o = {.use_host_register = true, .num_register_threads = 8};
    hostalloc *ha = open_ha(dev, &o);
    const size_t big = 3 * MiB + 5, small = 4096; /* 4 MiB block: threads; 4 KiB: one thread */
    unsigned char *a = xmalloc_pinned(ha, big);
    unsigned char *b = xmalloc_pinned(ha, small);
    cr_assert_eq(hostalloc_block_size(ha, a), 4 * MiB);
    cr_assert_eq(device_pinned(dev), pinned_for(dev, a, 4 * MiB, true) + pinned_for(dev, b, 4096, true));
    memset(a, 1, 4 * MiB);
    memset(b, 2, small);
    cr_assert_eq(device_host_free(dev, a), OOM_EINVAL); /* registered, not cudaHostAlloc'd */
    cr_assert_eq(hstat(ha, "num_host_alloc"), 2);
    cr_assert_eq(hstat(ha, "host_alloc_time.count"), 2);
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, b), OOM_OK);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    cr_assert_eq(hstat(ha, "num_host_free"), 2);
    cr_assert_eq(hstat(ha, "host_free_time.count"), 2);
    cr_assert_eq(device_pinned(dev), 0);
    hostalloc_delete(ha);
    device_close(dev);
}

/* pinned_reserve_segment_size_mb (Q4): one segment made on the first miss, carved in 4 KiB steps, never freed. */
Test(hostalloc, reserve_segment)
{
    device *dev = open_dev();
    hostalloc_options o = {.reserve_segment_bytes = MiB};
    hostalloc *ha = open_ha(dev, &o);
    unsigned char *a = xmalloc_pinned(ha, 1000);  /* 1 KiB block, 4 KiB carved */
    unsigned char *b = xmalloc_pinned(ha, 2000);  /* 2 KiB block, 4 KiB carved */
    unsigned char *c = xmalloc_pinned(ha, 2 * MiB); /* does not fit: cudaHostAlloc */
    cr_assert_eq(b, a + 4096);
    cr_assert_eq(device_pinned(dev), MiB + 2 * MiB);
    cr_assert_eq(hstat(ha, "num_host_alloc"), 3);
    cr_assert_eq(hstat(ha, "host_alloc_time.count"), 2); /* the reserve segment and c */
    cr_assert_eq(usage(ha).reserve_carved, 8192);
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, b), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, c), OOM_OK);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    cr_assert_eq(hstat(ha, "num_host_free"), 3);
    cr_assert_eq(hstat(ha, "host_free_time.count"), 1); /* only c went back to the device */
    cr_assert_eq(device_pinned(dev), MiB);              /* the reserve stays */
    unsigned char *d = xmalloc_pinned(ha, 1000);
    cr_assert_eq(d, a + 8192); /* the bump pointer never moves back */
    cr_assert_eq(hostalloc_free(ha, d), OOM_OK);
    hostalloc_delete(ha);
    cr_assert_eq(device_pinned(dev), 0);
    device_close(dev);
}

/* ---- threads: a pin-memory thread allocates while the main loop records events and frees ------------------ */

#define N_BATCHES 200

typedef struct handoff {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *slot[N_BATCHES];
    int produced;
    hostalloc *ha;
} handoff;

static void *pin_thread(void *arg)
{
    handoff *h = arg;
    for (int i = 0; i < N_BATCHES; i++) {
        void *p = NULL;
        if (hostalloc_malloc(h->ha, (size_t)(1 + i % 7) * 50000, &p) != OOM_OK)
            p = NULL;
        if (p)
            memset(p, i, 16);
        pthread_mutex_lock(&h->mu);
        h->slot[i] = p;
        h->produced = i + 1;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

Test(hostalloc, pin_thread_and_main_loop)
{
    device *dev = open_dev();
    hostalloc *ha = open_ha(dev, NULL);
    handoff h = {.ha = ha};
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, pin_thread, &h), 0);
    for (int i = 0; i < N_BATCHES; i++) {
        pthread_mutex_lock(&h.mu);
        while (h.produced <= i)
            pthread_cond_wait(&h.cv, &h.mu);
        void *p = h.slot[i];
        pthread_mutex_unlock(&h.mu);
        cr_assert_not_null(p, "batch %d", i);
        /* .to(device, non_blocking=True) on the default stream, then the batch is dropped */
        cr_assert_eq(hostalloc_record_event(ha, p, 0), OOM_OK);
        cr_assert_eq(hostalloc_free(ha, p), OOM_OK);
    }
    pthread_join(t, NULL);
    cr_assert_eq(device_stream_synchronize(dev, 0), OOM_OK);
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    /* every block came back through its event: all returned, and each return added 1 to active_bytes (Q2) */
    cr_assert_eq(hstat(ha, "active_requests.current"), 0);
    cr_assert_eq(hstat(ha, "active_requests.freed"), N_BATCHES);
    cr_assert_eq(hstat(ha, "active_bytes.current"), hstat(ha, "active_bytes.allocated") + N_BATCHES);
    cr_assert_eq(hstat(ha, "active_bytes.freed"), -N_BATCHES);
    cr_assert_eq(hstat(ha, "allocations.current"), 0);
    cr_assert_eq(hstat(ha, "num_host_alloc"), hstat(ha, "num_host_free"));
    cr_assert_eq(device_pinned(dev), 0);
    cr_assert_eq(hostalloc_check(ha), OOM_OK, "%s", oom_error_msg());
    hostalloc_delete(ha);
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
    device_close(dev);
}

/* ---- the pinned budget (sim) ------------------------------------------------------------------------ */

static void budget_story(bool use_register)
{
    const size_t budget = 64 * MiB + 8192;
    device *dev = open_sim_pinned(budget);
    hostalloc_options o = {.use_host_register = use_register, .num_register_threads = 4};
    hostalloc *ha = open_ha(dev, &o);
    void *a = xmalloc_pinned(ha, 30 * MiB); /* 32 MiB blocks */
    void *b = xmalloc_pinned(ha, 19300000);
    size_t held = pinned_for(dev, a, 32 * MiB, use_register) + pinned_for(dev, b, 32 * MiB, use_register);
    cr_assert_eq(device_pinned(dev), held);
    hostalloc_stats before, after;
    hostalloc_get_stats(ha, &before);

    /* the budget is spent: a request for a little more than what is left fails cleanly */
    const size_t ask = budget - held + 1; /* at most 8193 bytes: a 16 KiB block at most */
    void *c = (void *)1;
    cr_assert_eq(hostalloc_malloc(ha, ask, &c), OOM_ENOMEM_PINNED);
    cr_assert_eq(c, (void *)1); /* not written */
    hostalloc_get_stats(ha, &after);
    cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "a failed malloc moved a stat");
    cr_assert_eq(hostalloc_check(ha), OOM_OK, "%s", oom_error_msg());
    cr_assert_eq(device_pinned(dev), held);
    cr_assert_eq(usage(ha).pinned_bytes, 64 * MiB);

    /* a cached 32 MiB block does not serve a small request: still out of pinned memory */
    cr_assert_eq(hostalloc_free(ha, b), OOM_OK);
    cr_assert_eq(hostalloc_malloc(ha, ask, &c), OOM_ENOMEM_PINNED);
    /* empty_cache gives it back, and the request fits */
    cr_assert_eq(hostalloc_empty_cache(ha), OOM_OK);
    c = xmalloc_pinned(ha, ask);
    cr_assert_eq(device_pinned(dev),
                 pinned_for(dev, a, 32 * MiB, use_register) + pinned_for(dev, c, hostalloc_block_size(ha, c), use_register));
    cr_assert_eq(hstat(ha, "allocations.current"), 2);
    cr_assert_eq(hstat(ha, "num_host_alloc"), 3);
    cr_assert_eq(hstat(ha, "num_host_free"), 1);
    cr_assert_eq(hostalloc_free(ha, a), OOM_OK);
    cr_assert_eq(hostalloc_free(ha, c), OOM_OK);
    hostalloc_delete(ha);
    cr_assert_eq(device_pinned(dev), 0);
    device_close(dev);
}

Test(hostalloc_sim, pinned_budget_cudaHostAlloc) { budget_story(false); }
Test(hostalloc_sim, pinned_budget_host_register) { budget_story(true); }

Test(hostalloc_sim, reserve_segment_that_cannot_be_pinned)
{
    device *dev = open_sim_pinned(8 * MiB);
    hostalloc_options o = {.reserve_segment_bytes = 16 * MiB};
    hostalloc *ha = open_ha(dev, &o);
    void *p = NULL;
    /* PyTorch makes the reserve segment on the first miss; when that fails, the request fails with it */
    cr_assert_eq(hostalloc_malloc(ha, 100, &p), OOM_ENOMEM_PINNED);
    cr_assert_eq(hstat(ha, "allocations.current"), 0);
    cr_assert_eq(hstat(ha, "host_alloc_time.count"), 0);
    cr_assert_eq(usage(ha).reserve_bytes, 0);
    cr_assert_eq(device_pinned(dev), 0);
    cr_assert_eq(hostalloc_check(ha), OOM_OK, "%s", oom_error_msg());
    hostalloc_delete(ha);
    device_close(dev);
}
