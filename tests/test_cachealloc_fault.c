/* test_cachealloc_fault.c - device allocation failures injected under the caching allocator (SQLite-style loop).
 *
 * Suite "cachealloc_fault": for n = 1, 2, ... the n-th device allocation (cudaMalloc or page map) fails, once
 * or from then on, while a fixed mixed sequence runs. Every malloc must give OK or ENOMEM_DEVICE, the validator
 * must pass after every step, and freeing everything must bring the byte counters back to zero. The loop stops
 * at the first n the sequence never reaches.
 */
#include <criterion/criterion.h>

#include "alloc/cachealloc.h"
#include "testutil.h"

#define CHECK_OK(ca) cr_assert_eq(cachealloc_check(ca), OOM_OK, "cachealloc_check: %s", oom_error_msg())

static cachealloc *new_ca(device *dev, const char *conf, size_t budget)
{
    cachealloc_options o = {.budget_bytes = budget};
    alloc_conf_default(&o.conf);
    char err[256] = "";
    cr_assert_eq(alloc_conf_parse(&o.conf, conf, err, sizeof err), OOM_OK, "%s", err);
    cachealloc *ca = NULL;
    cr_assert_eq(cachealloc_new(dev, &o, &ca), OOM_OK);
    return ca;
}

/* op: 'm' malloc sizes[arg] into the next slot, 'f' free slot arg, 'e' empty_cache */
typedef struct op {
    char kind;
    int arg;
} op;

static const size_t sizes[] = {1000,     1572864, 11534336, 512,     31457280, 1048576,
                               10485761, 200,     20971520, 3000000, 52428800, 4096};

static const op seq[] = {
    {'m', 0}, {'m', 1}, {'m', 2}, {'m', 3}, {'m', 4}, {'f', 1}, {'f', 3}, {'m', 5}, {'m', 6}, {'m', 7},
    {'e', 0}, {'m', 8}, {'f', 0}, {'m', 9}, {'f', 4}, {'m', 10}, {'f', 2}, {'m', 11}, {'e', 0}, {'m', 1},
    {'m', 4}, {'f', 8}, {'f', 10}, {'m', 10}, {'m', 0},
};

#define NSEQ (sizeof seq / sizeof seq[0])
#define NSLOTS 32

/* Runs the sequence, frees what is left, and returns the number of mallocs that failed. */
static int run_sequence(cachealloc *ca)
{
    devptr slot[NSLOTS] = {0};
    size_t req[NSLOTS] = {0};
    int nslot = 0, ooms = 0;
    int64_t live_req = 0;
    for (size_t i = 0; i < NSEQ; i++) {
        const op *o = &seq[i];
        if (o->kind == 'm') {
            size_t n = sizes[o->arg];
            devptr p = 0;
            oom_status st = cachealloc_malloc(ca, n, &p);
            cr_assert(st == OOM_OK || st == OOM_ENOMEM_DEVICE, "step %zu: malloc(%zu) gave %s", i, n,
                      oom_status_str(st));
            if (st == OOM_OK) {
                cr_assert_neq(p, 0);
                live_req += (int64_t)n;
                req[nslot] = n;
            } else {
                ooms++;
                cr_assert_eq(cachealloc_last_oom(ca)->requested, n);
            }
            slot[nslot++] = st == OOM_OK ? p : 0;
        } else if (o->kind == 'f') {
            cr_assert_lt(o->arg, nslot);
            cr_assert_eq(cachealloc_free(ca, slot[o->arg]), OOM_OK); /* a failed malloc left 0: a no-op */
            if (slot[o->arg])
                live_req -= (int64_t)req[o->arg];
            slot[o->arg] = 0;
        } else {
            cachealloc_empty_cache(ca);
        }
        CHECK_OK(ca);
        cr_assert_eq(cachealloc_stats(ca)->requested_bytes[STAT_ALL].current, live_req, "step %zu", i);
    }
    for (int i = 0; i < nslot; i++)
        cr_assert_eq(cachealloc_free(ca, slot[i]), OOM_OK);
    CHECK_OK(ca);
    const memstats *m = cachealloc_stats(ca);
    cr_assert_eq(m->allocated_bytes[STAT_ALL].current, 0);
    cr_assert_eq(m->requested_bytes[STAT_ALL].current, 0);
    cr_assert_eq(m->active_bytes[STAT_ALL].current, 0);
    cr_assert_eq(m->allocation[STAT_ALL].current, 0);
    cachealloc_empty_cache(ca);
    CHECK_OK(ca);
    cr_assert_eq(m->reserved_bytes[STAT_ALL].current, 0, "everything is free: empty_cache returns it all");
    return ooms;
}

static void fault_loop(const char *conf, size_t budget, bool persistent)
{
    device *dev = test_device_open(0);
    cr_assert_not_null(dev);
    /* baseline: no fault, no OOM */
    cachealloc *ca = new_ca(dev, conf, budget);
    cr_assert_eq(run_sequence(ca), 0, "[%s] the sequence must fit without faults", conf);
    cr_assert_eq(cachealloc_stats(ca)->num_ooms, 0);
    cachealloc_delete(ca);

    uint64_t n = 1;
    for (;; n++) {
        cr_assert_lt(n, 500, "the fault loop does not end");
        ca = new_ca(dev, conf, budget);
        uint64_t calls0 = dev->alloc_calls, fired0 = dev->faults_fired;
        device_fault_arm(dev, n, persistent);
        int ooms = run_sequence(ca);
        device_fault_arm(dev, 0, false);
        uint64_t calls = dev->alloc_calls - calls0, fired = dev->faults_fired - fired0;
        const memstats *m = cachealloc_stats(ca);
        cr_assert_eq(m->num_ooms, ooms, "[%s] n=%llu", conf, (unsigned long long)n);
        cr_assert_eq((uint64_t)m->num_device_alloc, calls - fired, "every successful device call is counted");
        cr_assert_geq(m->num_alloc_retries, m->num_ooms);
        if (fired == 0) {
            cr_assert_eq(ooms, 0);
            cachealloc_delete(ca);
            break;
        }
        if (persistent) {
            cr_assert_geq(ooms, 1, "[%s] n=%llu: a persistent fault must surface as an OOM", conf,
                          (unsigned long long)n);
            cr_assert_eq((uint64_t)m->num_device_alloc, n - 1);
        } else {
            cr_assert_eq(fired, 1);
            cr_assert_eq(ooms, 0, "[%s] n=%llu: a one-shot fault is absorbed by the retry", conf,
                         (unsigned long long)n);
        }
        cachealloc_delete(ca);
    }
    cr_assert_gt(n, 5, "[%s] the sequence makes only %llu device allocations", conf, (unsigned long long)n - 1);
    device_close(dev);
}

Test(cachealloc_fault, one_shot_default) { fault_loop("", 0, false); }
Test(cachealloc_fault, persistent_default) { fault_loop("", 0, true); }
Test(cachealloc_fault, one_shot_expandable) { fault_loop("expandable_segments:True", 0, false); }
Test(cachealloc_fault, persistent_expandable) { fault_loop("expandable_segments:True", 0, true); }
Test(cachealloc_fault, one_shot_max_split_gc_budget)
{
    fault_loop("max_split_size_mb:40,garbage_collection_threshold:0.6", 160 * MiB, false);
}
Test(cachealloc_fault, persistent_max_split_gc_budget)
{
    fault_loop("max_split_size_mb:40,garbage_collection_threshold:0.6", 160 * MiB, true);
}

/* One fault, counted exactly: the first attempt fails, release_cached_blocks runs, the retry succeeds. */
Test(cachealloc_fault, one_shot_fault_costs_one_retry)
{
    device *dev = test_device_open(0);
    cachealloc *ca = new_ca(dev, "", 0);
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(ca, 1572864, &p), OOM_OK);
    cr_assert_eq(cachealloc_free(ca, p), OOM_OK);
    device_fault_arm(dev, 1, false);
    cr_assert_eq(cachealloc_malloc(ca, 1000, &p), OOM_OK); /* small pool: needs a new segment */
    CHECK_OK(ca);
    const memstats *m = cachealloc_stats(ca);
    cr_assert_eq(dev->faults_fired, 1);
    cr_assert_eq(m->num_alloc_retries, 1);
    cr_assert_eq(m->num_sync_all_streams, 1);
    cr_assert_eq(m->num_ooms, 0);
    cr_assert_eq(m->num_device_alloc, 2);
    cr_assert_eq(m->num_device_free, 1, "the cached 20 MiB segment went in the retry");
    cr_assert_eq(m->reserved_bytes[STAT_ALL].current, 2097152);
    cachealloc_delete(ca);
    device_close(dev);
}
