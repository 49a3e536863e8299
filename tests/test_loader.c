/* test_loader.c - the DataLoader model (training/loader.h) and pinned host buffers (runtime/hostbuf.h): the
 * in-flight bound, the order of the batches, the pinned blocks a slow and a fast consumer hold, pinning failures
 * under the pinned budget, determinism run to run, and a clean shutdown mid-iteration.
 *
 * Batches here are 16 x 1000 f32 (64,000 B): each takes a 64 KiB pinned block. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/hostalloc.h"
#include "runtime/hostbuf.h"
#include "training/loader.h"
#include "testutil.h"

#define BLOCK 65536

static loader_options opts(int w, int p, int64_t n, bool pin, int64_t produce_ms, int64_t step_ms)
{
    loader_options o = {.workers = w, .prefetch = p, .batches = n, .dt = DT_F32, .ndim = 2, .pin_memory = pin,
                        .produce_ms = produce_ms, .step_ms = step_ms};
    o.shape[0] = 16;
    o.shape[1] = 1000;
    return o;
}

/* The same with the copies' bandwidths, GB/s (bytes per ns): a 64,000-byte batch takes 64000 / gbps ns. */
static loader_options timed(int w, int p, int64_t n, int64_t produce_ms, int64_t step_ms, double pin_gbps,
                            double h2d_gbps)
{
    loader_options o = opts(w, p, n, true, produce_ms, step_ms);
    o.pin_gbps = pin_gbps;
    o.h2d_gbps = h2d_gbps;
    return o;
}

static int64_t hstat(rt *r, const char *key)
{
    hostalloc_stats st;
    hostalloc_get_stats(r->ha, &st);
    int64_t v = -1;
    cr_assert(hostalloc_stats_get(&st, key, &v), "no key %s", key);
    return v;
}

typedef struct trace {
    int64_t received, failed_at;
    int64_t in_flight[64], blocks[64], bytes[64], num_alloc[64];
} trace;

/* The scenario's loop: receive, drop the previous batch, copy non_blocking on stream cs, step, sample. */
static void consume(rt *r, const loader_options *o, int64_t stop_after, trace *t)
{
    memset(t, 0, sizeof *t);
    t->failed_at = -1;
    devstream cs = 0;
    cr_assert_eq(device_stream_create(r->dev, &cs), OOM_OK);
    loader *l = NULL;
    cr_assert_eq(loader_new(r, o, 99, &l), OOM_OK);
    hostbuf *batch = NULL;
    tensor *x = NULL;
    for (int64_t i = 0; i < stop_after; i++) {
        hostbuf *nb = NULL;
        oom_status st = loader_next(l, &nb);
        if (st == OOM_ENOMEM_PINNED) {
            t->failed_at = i;
            break;
        }
        cr_assert_eq(st, OOM_OK);
        if (!nb)
            break;
        hostbuf_free(batch);
        batch = nb;
        tensor_assign(&x, hostbuf_to_device(batch, true, cs));
        cr_assert(rt_ok(r), "%s", rt_message(r));
        cr_assert_eq(loader_copy(l, cs), OOM_OK);
        loader_step_done(l);
        t->in_flight[i] = loader_in_flight(l);
        t->blocks[i] = hstat(r, "allocations.current");
        t->bytes[i] = hstat(r, "allocated_bytes.current");
        t->num_alloc[i] = hstat(r, "num_host_alloc");
        t->received = i + 1;
    }
    hostbuf_free(batch);
    tensor_release(x);
    loader_delete(l);
    device_stream_destroy(r->dev, cs);
    hostalloc_usage u;
    hostalloc_usage_get(r->ha, &u);
    cr_assert_eq(u.live_blocks, 0, "a pinned block is still handed out after the shutdown");
    cr_assert_eq(hostalloc_check(r->ha), OOM_OK, "%s", oom_error_msg());
}

Test(loader, slow_consumer_holds_the_in_flight_bound_plus_one_pinned)
{
    rt *r = test_rt_open(0, NULL);
    loader_options o = opts(3, 2, 20, true, 10, 1000); /* the step is 100 x a worker's time */
    trace t;
    consume(r, &o, 1000, &t);
    cr_assert_eq(t.received, 20);
    for (int64_t i = 0; i < 20; i++) {
        int64_t want = 20 - (i + 1) < 6 ? 20 - (i + 1) : 6; /* P x W, until the dataset runs out */
        cr_expect_eq(t.in_flight[i], want, "step %lld: %lld in flight, want %lld", (long long)i,
                     (long long)t.in_flight[i], (long long)want);
        cr_expect_eq(t.blocks[i], 7, "step %lld: %lld pinned blocks, want W x P + 1 = 7", (long long)i,
                     (long long)t.blocks[i]);
        cr_expect_eq(t.bytes[i], 7 * BLOCK);
    }
    cr_expect_eq(t.num_alloc[19], 7, "blocks are reused, not made per batch");
    cr_assert_eq(r->live_tensors, 0);
    rt_close(r);
}

Test(loader, fast_consumer_pins_as_the_workers_finish)
{
    rt *r = test_rt_open(0, NULL);
    loader_options o = opts(4, 2, 24, true, 50, 0);
    trace t;
    consume(r, &o, 1000, &t);
    cr_assert_eq(t.received, 24);
    /* the 4 workers finish together: 4 pinned at step 0, then one more for the batch held while the next 4 pin */
    cr_expect_eq(t.blocks[0], 4);
    cr_expect_eq(t.blocks[23], 5);
    cr_expect_eq(t.num_alloc[23], 5);
    for (int64_t i = 0; i < 24; i++)
        cr_expect_leq(t.in_flight[i], 8);
    rt_close(r);
}

/* The pin thread's copy takes time (1 ms a batch here), the consumer none: the pin thread is the bottleneck, and the
 * consumer holds one batch while the next is pinned and the one before is freed as it takes the next (the pin
 * allocates first at equal times): 3 blocks, whatever the number of workers. Without the copy's time every
 * worker's batch is pinned the moment it is made: W + 1 (the test above). */
Test(loader, fast_consumer_waits_for_the_pin_copy)
{
    for (int w = 4; w <= 8; w += 4) {
        rt *r = test_rt_open(0, NULL);
        loader_options o = timed(w, 2, 24, 50, 0, 0.064, 0); /* 64,000 B at 0.064 B/ns: 1 ms */
        trace t;
        consume(r, &o, 1000, &t);
        cr_assert_eq(t.received, 24);
        cr_expect_eq(t.blocks[0], 2, "W %d: step 0 holds batch 0 and batch 1's block (%lld)", w,
                     (long long)t.blocks[0]);
        cr_expect_eq(hstat(r, "allocations.peak"), 3, "W %d: %lld blocks at the peak, want 3", w,
                     (long long)hstat(r, "allocations.peak"));
        cr_expect_eq(t.num_alloc[23], 3, "W %d: blocks made (%lld)", w, (long long)t.num_alloc[23]);
        rt_close(r);
    }
}

/* A host-to-device copy slower than the pin copy (4 ms against 1 ms): a freed batch's block waits for its copy's
 * event, so the pin thread cannot reuse it and makes another. Batches 0-3 are received at 51..54 ms, their copies
 * end at 55, 59, 63 and 67 ms (one stream, in order): batch 3's pin at 53 ms finds batch 0's block freed but its
 * copy running: a fourth block. The next batches come at 100 ms, every copy done: no more. */
Test(loader, a_running_copy_keeps_its_block_from_reuse)
{
    rt *r = test_rt_open(0, NULL);
    loader_options o = timed(4, 2, 24, 50, 0, 0.064, 0.016);
    trace t;
    consume(r, &o, 1000, &t);
    cr_assert_eq(t.received, 24);
    cr_expect_eq(hstat(r, "allocations.peak"), 4, "%lld blocks at the peak, want 4",
                 (long long)hstat(r, "allocations.peak"));
    cr_expect_eq(t.num_alloc[23], 4);
    rt_close(r);
}

/* The copies' times on the clock are deterministic too: two runs with every copy timed give the same counters. */
Test(loader, timed_copies_the_same_run_to_run)
{
    trace a, b;
    for (int run = 0; run < 2; run++) {
        rt *r = test_rt_open(0, NULL);
        loader_options o = timed(3, 3, 25, 13, 1, 0.05, 0.02);
        consume(r, &o, 1000, run ? &b : &a);
        rt_close(r);
    }
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "two runs differ");
}

Test(loader, batches_arrive_in_index_order)
{
    rt *r = test_rt_open(0, NULL);
    if (!r->computes) {
        rt_close(r);
        cr_skip_test("no values in a dry run");
    }
    for (int pin = 0; pin < 2; pin++) {
        loader_options o = opts(4, 3, 30, pin, 7, 3);
        loader *l = NULL;
        cr_assert_eq(loader_new(r, &o, 77, &l), OOM_OK);
        for (int64_t k = 0; k < 30; k++) {
            hostbuf *b = NULL;
            cr_assert_eq(loader_next(l, &b), OOM_OK);
            cr_assert_not_null(b);
            cr_assert_eq(b->pinned, pin);
            float want[2];
            kernels_ref.rand_normal(DT_F32, want, 2, oom_rng_hash(77, (uint64_t)k), 0.0f, 1.0f);
            const float *got = b->data;
            cr_expect(got[0] == want[0] && got[1] == want[1], "batch %lld out of order (pin %d)", (long long)k, pin);
            hostbuf_free(b);
            loader_step_done(l);
        }
        hostbuf *end = (hostbuf *)1;
        cr_assert_eq(loader_next(l, &end), OOM_OK);
        cr_assert_null(end, "the loader ends after its 30 batches");
        loader_delete(l);
    }
    rt_close(r);
}

Test(loader, pinning_fails_under_the_budget_and_raises_at_that_batch)
{
    rt *r = test_rt_open(0, NULL);
    rt_set_pinned_budget(r, 3 * BLOCK + 4096); /* three blocks fit, not four */
    loader_options o = opts(2, 2, 10, true, 10, 1000); /* needs W x P + 1 = 5 */
    trace t;
    consume(r, &o, 1000, &t);
    cr_assert_eq(t.failed_at, 3, "the fourth batch's pin fails, raised when the loop reaches it (got %lld)",
                 (long long)t.failed_at);
    cr_assert_eq(t.blocks[2], 3);
    cr_assert_eq(hstat(r, "num_host_alloc"), 3, "a refused block is not counted");
    rt_close(r);
}

Test(loader, pin_memory_false_pins_nothing)
{
    rt *r = test_rt_open(0, NULL);
    loader_options o = opts(3, 2, 12, false, 10, 1000);
    trace t;
    consume(r, &o, 1000, &t);
    cr_assert_eq(t.received, 12);
    cr_assert_eq(hstat(r, "num_host_alloc"), 0);
    cr_assert_eq(t.in_flight[0], 6);
    rt_close(r);
}

Test(loader, the_same_counters_run_to_run)
{
    trace a, b;
    for (int run = 0; run < 2; run++) {
        rt *r = test_rt_open(0, NULL);
        loader_options o = opts(3, 3, 25, true, 13, 7); /* neither fast nor slow: the clock decides */
        consume(r, &o, 1000, run ? &b : &a);
        rt_close(r);
    }
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "two runs differ");
}

Test(loader, shutdown_mid_iteration_frees_every_batch)
{
    rt *r = test_rt_open(0, NULL);
    loader_options o = opts(4, 4, 50, true, 5, 100);
    trace t;
    consume(r, &o, 2, &t); /* break after two batches: the iterator is dropped with 16 in flight */
    cr_assert_eq(t.received, 2);
    cr_assert_eq(t.in_flight[1], 16);
    cr_assert_eq(hostalloc_empty_cache(r->ha), OOM_OK);
    cr_assert_eq(hstat(r, "allocated_bytes.current"), 0, "every pinned block came back and was released");
    size_t pinned = 1, lim = 0;
    device_host_info(r->dev, &pinned, &lim);
    cr_assert_eq(pinned, 0);
    rt_close(r);
}

Test(loader, bad_options_are_refused)
{
    rt *r = test_rt_open(0, NULL);
    loader *l = NULL;
    loader_options o = opts(0, 2, 10, true, 1, 1);
    cr_assert_eq(loader_new(r, &o, 1, &l), OOM_EINVAL);
    o = opts(2, 0, 10, true, 1, 1);
    cr_assert_eq(loader_new(r, &o, 1, &l), OOM_EINVAL);
    o = opts(2, 2, -1, true, 1, 1);
    cr_assert_eq(loader_new(r, &o, 1, &l), OOM_EINVAL);
    o = timed(2, 2, 10, 1, 1, -1, 0);
    cr_assert_eq(loader_new(r, &o, 1, &l), OOM_EINVAL, "a negative bandwidth");
    o = timed(2, 2, 10, 1, 1, 1e-12, 0);
    cr_assert_eq(loader_new(r, &o, 1, &l), OOM_EINVAL, "a copy past LOADER_MAX_MS");
    o = opts(2, 2, 10, true, LOADER_MAX_MS + 1, 1);
    cr_assert_eq(loader_new(r, &o, 1, &l), OOM_EINVAL, "produce_ms past LOADER_MAX_MS");
    cr_assert_null(l);
    rt_close(r);
}

Test(loader, device_pinned_cap_refuses_past_it)
{
    device *dev = test_device_open(0);
    cr_assert_not_null(dev);
    device_pinned_cap_set(dev, 3 * 4096);
    void *a = NULL, *b = NULL;
    cr_assert_eq(device_host_alloc(dev, 8192, &a), OOM_OK);
    cr_assert_eq(device_host_alloc(dev, 4097, &b), OOM_ENOMEM_PINNED, "two pages more pass the cap");
    cr_assert_eq(device_host_alloc(dev, 4096, &b), OOM_OK);
    device_pinned_cap_set(dev, 0);
    void *c = NULL;
    cr_assert_eq(device_host_alloc(dev, 4096, &c), OOM_OK, "no cap");
    device_host_free(dev, a);
    device_host_free(dev, b);
    device_host_free(dev, c);
    device_close(dev);
}
