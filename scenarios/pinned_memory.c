/* pinned_memory.c - "CUDA error: out of memory" from a DataLoader's pin-memory thread: pinned batches pile up.
 *
 * Cause. With pin_memory=True every batch goes through PyTorch's host caching allocator, which rounds each block
 * up to a power of two (a 32x3x224x224 f32 batch of 19.3 MB takes a 32 MiB block) and keeps it cached for reuse.
 * A DataLoader keeps up to prefetch_factor x num_workers batches in flight (dispatched and not yet received by the
 * main loop), and the pin thread pins each as soon as a worker has made it. A consumer slower than the workers
 * finds the pipeline full at every step: W x P pinned batches waiting, plus the one it holds. Eight workers at
 * the default prefetch_factor of 2 hold 17 blocks, 544 MiB of page-locked memory for 328 MB of data; under a
 * pinned-host budget (a container's memlock limit or its RAM; here --set pinned_mib) cudaHostAlloc fails.
 *
 * What the user sees. With pinned_mib=500, fifteen 32 MiB blocks fit (480 MiB) and the sixteenth is refused while
 * the main loop is still at step 0; the pin thread wraps the error and goes on, and the main loop raises it when
 * it reaches batch 15: "RuntimeError: Caught RuntimeError in pin memory thread for device 0 ... CUDA error: out
 * of memory". A fast consumer (myth-pinned-leak) never sees it: the batches are received as they are pinned, and a
 * few blocks are reused for every batch: the one it holds, the one the pin thread fills, the one it frees as it
 * takes the next (3 on oomlab's clock; PyTorch's runs spread from 2 to W + 1, as its threads race: docs/parity.md).
 *
 * The PyTorch code it mirrors (scripts/twins/pinned_memory.py runs it):
 *     loader = DataLoader(RandnBatches(steps, shape), batch_size=None, num_workers=8, prefetch_factor=2,
 *                         pin_memory=True)
 *     it = iter(loader)
 *     try:
 *         for i, batch in enumerate(it):
 *             x = batch.to("cuda", non_blocking=True)
 *             time.sleep(step_ms / 1000)                      # a consumer slower than the workers
 *     except RuntimeError:                                    # the pin thread's "CUDA error: out of memory"
 *         ...
 *     del batch, x; it._shutdown_workers(); del it
 * Counters every step: torch.cuda.host_memory_stats() (allocations, bytes, active requests, num_host_alloc/free)
 * and the batches in flight. The loader is harness/training/loader.h: real worker threads and a pin thread, on a
 * virtual clock (workers take produce_ms per batch, the step takes step_ms, the pin thread's copy and the copy to
 * the device take a batch's bytes at the bandwidths measured on the GPU machines, LOADER_*_GBPS) so that the
 * counters are the same on every run; on cuda the step is also a real wait.
 *
 * The fixes, and why they work.
 *   fix-fewer-workers   num_workers=W/2: the in-flight bound W x P halves, so do the pinned blocks.
 *   fix-prefetch-1      prefetch_factor=1: the same, keeping the workers.
 *   fix-no-pin-memory   pin_memory=False: no pinned bytes at all; each host-to-device copy is then from pageable
 *       memory, synchronous and slower (on cuda the run measures both bandwidths, and a cudaHostAlloc against a
 *       cache hit, so the trade-off is visible).
 * The myths (seed 000's claims).
 *   myth-pinned-leak    "pinned buffers leak": with a fast consumer the blocks made (num_host_alloc) stop growing
 *       after the first few (between 2 and W + 1) and are reused for every later batch; after the loader shuts down nothing is held,
 *       and torch._C._host_emptyCache() gives every byte back. Held and reused, not leaked; a slow consumer holds
 *       more because more batches are in flight, not because any is lost.
 *   myth-gpu-memory     "pinned memory indirectly impacts GPU memory management": the same loop with and without
 *       pin_memory gives the same device counters at every step (allocated, reserved, segments, cudaMalloc calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/hostalloc.h"
#include "run/scenario.h"
#include "runtime/hostbuf.h"
#include "training/loader.h"
#include "runtime/tensor.h"

#define MIB ((int64_t)1 << 20)

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (0: as full) */
    {"workers", "num_workers: DataLoader worker threads", 8, 1, 16, 0},
    {"prefetch", "prefetch_factor: batches dispatched per worker", 2, 1, 8, 0},
    {"batch", "batch size (the batch is batch x channels x height x width f32)", 32, 1, 32, 4},
    {"channels", "channels of an image", 3, 1, 4, 0},
    {"height", "image height", 224, 1, 256, 0},
    {"width", "image width", 224, 1, 256, 0},
    {"step_ms", "the consumer's time per batch, ms (the slow consumer of bug and the fixes)", 400, 0, 2000, 0},
    {"produce_ms", "a worker's time per batch, ms (the model's clock; on cuda the step also really waits)", 50, 1,
     2000, 0},
    {"pinned_mib", "pinned host memory budget, MiB (a container's memlock limit); 0: the host's RAM", 500, 0,
     1048576, 62},
    {"steps", "batches in the dataset (steps of the loop)", 24, 1, 100, 0},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "pin_memory=True with a slow consumer: W x P + 1 pinned blocks, past the pinned budget", ""},
    {"fix-fewer-workers", VARIANT_FIX, "num_workers=W/2: half the batches in flight", ""},
    {"fix-prefetch-1", VARIANT_FIX, "prefetch_factor=1: W batches in flight", ""},
    {"fix-no-pin-memory", VARIANT_FIX, "pin_memory=False: nothing pinned, slower copies (measured on cuda)", ""},
    {"myth-pinned-leak", VARIANT_MYTH, "a fast consumer: a few pinned blocks, reused; all given back at the end", ""},
    {"myth-gpu-memory", VARIANT_MYTH, "the same loop with and without pin_memory: the same device counters", ""},
};

/* host_memory_stats() keys recorded every step (metrics "host.KEY"): what the parity test compares. */
static const char *const host_keys[] = {
    "allocations.current",  "allocations.peak",        "allocated_bytes.current", "allocated_bytes.peak",
    "active_requests.current", "active_bytes.current", "num_host_alloc",          "num_host_free",
};
#define NHOST (sizeof host_keys / sizeof host_keys[0])

static int64_t host_stat(rt *r, const char *key)
{
    hostalloc_stats st;
    hostalloc_get_stats(r->ha, &st);
    int64_t v = 0;
    hostalloc_stats_get(&st, key, &v);
    return v;
}

static void host_metrics(scn *s)
{
    hostalloc_stats st;
    hostalloc_get_stats(scn_rt(s)->ha, &st);
    for (size_t i = 0; i < NHOST; i++) {
        int64_t v = 0;
        hostalloc_stats_get(&st, host_keys[i], &v);
        char name[48];
        snprintf(name, sizeof name, "host.%s", host_keys[i]);
        scn_metric(s, name, strstr(host_keys[i], "bytes") ? "bytes" : "1", (double)v);
    }
}

typedef struct loop_cfg {
    const char *tag; /* label prefix: "" or "pinned " / "pageable " */
    int workers, prefetch;
    bool pin;
    int64_t step_ms;
} loop_cfg;

typedef struct loop_out {
    int64_t received;      /* batches received */
    int64_t failed_at;     /* the batch whose pinning failed, raised in the main loop; -1 */
    int64_t max_in_flight; /* over the steps */
    int64_t pin_failures;  /* pins refused, reached or not */
    int64_t host_at_fail;  /* allocated_bytes.current when the error reached the main loop */
    int64_t dev_allocated[512], dev_reserved[512], dev_allocs[512]; /* device counters per step */
    size_t block;          /* the pinned block of a batch (from the host allocator), 0 without pinning */
    size_t batch_bytes;
} loop_out;

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* for i, batch in enumerate(loader): x = batch.to("cuda", non_blocking=True); step. */
static oom_status run_loop(scn *s, const loop_cfg *c, devstream cs, loop_out *out)
{
    rt *r = scn_rt(s);
    memset(out, 0, sizeof *out);
    out->failed_at = -1;
    loader_options o = {.workers = c->workers, .prefetch = c->prefetch, .batches = scn_param(s, "steps"),
                        .dt = DT_F32, .ndim = 4, .pin_memory = c->pin, .produce_ms = scn_param(s, "produce_ms"),
                        .step_ms = c->step_ms, .pin_gbps = LOADER_PIN_COPY_GBPS, .h2d_gbps = LOADER_H2D_PINNED_GBPS,
                        .h2d_pageable_gbps = LOADER_H2D_PAGEABLE_GBPS};
    o.shape[0] = scn_param(s, "batch");
    o.shape[1] = scn_param(s, "channels");
    o.shape[2] = scn_param(s, "height");
    o.shape[3] = scn_param(s, "width");
    loader *l = NULL;
    oom_status st = loader_new(r, &o, rt_next_seed(r), &l);
    if (st != OOM_OK)
        return st;
    bool cuda = r->dev->kind == DEVICE_CUDA;
    hostbuf *batch = NULL;
    tensor *x = NULL;
    for (int64_t i = 0;; i++) {
        hostbuf *nb = NULL;
        st = loader_next(l, &nb);
        if (st == OOM_ENOMEM_PINNED) { /* the pin thread's exception, raised for batch i */
            out->failed_at = i;
            out->host_at_fail = host_stat(r, "allocated_bytes.current");
            char what[64];
            snprintf(what, sizeof what, "%spinning batch %lld", c->tag, (long long)i);
            scn_caught_pinned(s, what, "RuntimeError: Caught RuntimeError in pin memory thread for device 0: CUDA "
                                       "error: out of memory");
            scn_note(s, "%sbatch %lld: RuntimeError: Caught RuntimeError in pin memory thread for device 0: CUDA "
                        "error: out of memory",
                     c->tag, (long long)i);
            scn_step(s, "%sstep %lld: pinning failed", c->tag, (long long)i);
            host_metrics(s);
            scn_metric(s, "in_flight", "1", (double)loader_in_flight(l));
            st = OOM_OK;
            break;
        }
        if (st != OOM_OK || !nb)
            break;
        hostbuf_free(batch); /* the loop variable is rebound: the previous batch is dropped */
        batch = nb;
        if (c->pin && !out->block)
            out->block = hostalloc_block_size(r->ha, batch->data);
        out->batch_bytes = batch->nbytes;
        tensor *nx = hostbuf_to_device(batch, true, cs);
        if (!nx)
            break;
        tensor_assign(&x, nx);
        /* the copy takes its time on the loader's clock: from pinned memory it holds cs until then, so the event the
         * block gets when it is freed (on cs) completes no sooner. Held after the allocation and the copy, as on cuda
         * a held stream is a spinning kernel */
        st = loader_copy(l, cs);
        if (st != OOM_OK)
            break;
        if (cuda) /* the step: a real wait on cuda too */
            sleep_ms(c->step_ms);
        loader_step_done(l);
        out->received = i + 1;
        int64_t fl = loader_in_flight(l);
        if (fl > out->max_in_flight)
            out->max_in_flight = fl;
        scn_step(s, "%sstep %lld", c->tag, (long long)i);
        host_metrics(s);
        scn_metric(s, "in_flight", "1", (double)fl);
        if (i < 512) {
            out->dev_allocated[i] = scn_stat(s, "allocated_bytes.all.current");
            out->dev_reserved[i] = scn_stat(s, "reserved_bytes.all.current");
            out->dev_allocs[i] = scn_stat(s, "num_device_alloc");
        }
    }
    hostbuf_free(batch); /* del batch, x */
    tensor_release(x);
    out->pin_failures = loader_pin_failures(l);
    loader_delete(l); /* it._shutdown_workers(); del it */
    scn_step(s, "%sloader shut down", c->tag);
    host_metrics(s);
    if (st != OOM_OK)
        return st;
    return rt_ok(r) ? OOM_OK : rt_status(r);
}

/* fix-no-pin-memory on cuda: host-to-device bandwidth from pinned and from pageable memory, and a cudaHostAlloc
 * against a cache hit. The allocator calls are made on every backend (the counters stay the same); the times
 * are recorded on cuda only. */
static oom_status measure_tradeoff(scn *s, size_t nbytes)
{
    rt *r = scn_rt(s);
    bool cuda = r->dev->kind == DEVICE_CUDA && scn_computes(s);
    double t0 = scn_clock(s);
    void *p = NULL;
    oom_status st = hostalloc_malloc(r->ha, nbytes, &p); /* torch.empty(n, dtype=uint8, pin_memory=True) */
    double t1 = scn_clock(s);
    if (st == OOM_ENOMEM_PINNED) {
        scn_note(s, "the trade-off is not measured: one batch cannot be pinned under the pinned budget");
        scn_step(s, "trade-off not measured");
        host_metrics(s);
        return OOM_OK;
    }
    if (st != OOM_OK)
        return st;
    hostalloc_free(r->ha, p); /* del: no stream recorded, cached at once */
    double t2 = scn_clock(s);
    st = hostalloc_malloc(r->ha, nbytes, &p); /* the same size again: a cache hit */
    double t3 = scn_clock(s);
    if (st != OOM_OK)
        return st;
    tensor *d = tensor_empty(r, DT_F32, SHAPE((int64_t)(nbytes / 4))); /* the copies' target, on every backend */
    if (cuda) {
        scn_metric(s, "pinned_alloc_miss_s", "s", t1 - t0);
        scn_metric(s, "pinned_alloc_hit_s", "s", t3 - t2);
        unsigned char *pageable = malloc(nbytes);
        if (d && pageable) {
            memset(pageable, 1, nbytes);
            memset(p, 1, nbytes);
            const int reps = 10;
            double a = scn_clock(s);
            for (int k = 0; k < reps; k++)
                device_copy_htod(r->dev, d->st->ptr, p, nbytes);
            double b = scn_clock(s);
            for (int k = 0; k < reps; k++)
                device_copy_htod(r->dev, d->st->ptr, pageable, nbytes);
            double e = scn_clock(s);
            scn_metric(s, "h2d_pinned_GBps", "GB/s", (double)nbytes * reps / 1e9 / (b - a));
            scn_metric(s, "h2d_pageable_GBps", "GB/s", (double)nbytes * reps / 1e9 / (e - b));
        }
        free(pageable);
    } else {
        scn_note(s, "not measured on %s: host-to-device bandwidth and cudaHostAlloc time (cuda only)",
                 scn_computes(s) ? "sim" : "a dry run");
    }
    tensor_release(d);
    hostalloc_free(r->ha, p);
    scn_step(s, "trade-off measured");
    host_metrics(s);
    return rt_ok(r) ? OOM_OK : rt_status(r);
}

static oom_status run(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int W = (int)scn_param(s, "workers"), P = (int)scn_param(s, "prefetch");
    int64_t step_ms = scn_param(s, "step_ms"), steps = scn_param(s, "steps");
    size_t cap = (size_t)scn_param(s, "pinned_mib") * (size_t)MIB;
    rt_set_pinned_budget(r, cap);
    if (!cap) {
        size_t used = 0, lim = 0;
        device_host_info(r->dev, &used, &lim);
        cap = lim; /* sim: the host's RAM; cuda: not known (0) */
        scn_note(s, "pinned_mib=0: no pinned budget but the host's (%s)", lim ? "its RAM" : "not known on cuda");
    }
    devstream cs = 0;
    oom_status st = device_stream_create(r->dev, &cs);
    if (st != OOM_OK)
        return st;
    loop_out *a = calloc(2, sizeof *a), *b = a + 1;
    if (!a) {
        device_stream_destroy(r->dev, cs);
        return OOM_ENOMEM_HOST;
    }
    bool is_bug = strcmp(v->name, "bug") == 0, fewer = strcmp(v->name, "fix-fewer-workers") == 0;
    bool pf1 = strcmp(v->name, "fix-prefetch-1") == 0, nopin = strcmp(v->name, "fix-no-pin-memory") == 0;
    bool leak = strcmp(v->name, "myth-pinned-leak") == 0, gpu = strcmp(v->name, "myth-gpu-memory") == 0;
    loop_cfg c = {"", W, P, true, step_ms};
    if (fewer)
        c.workers = W / 2 > 0 ? W / 2 : 1;
    if (pf1)
        c.prefetch = 1;
    if (nopin)
        c.pin = false;
    if (leak || gpu)
        c.step_ms = 0; /* a consumer faster than the workers */
    if (gpu)
        c.tag = "pinned ";
    scn_step(s, "start");
    st = run_loop(s, &c, cs, a);
    if (st == OOM_OK && gpu) {
        rt_empty_cache(r);
        cachealloc_reset_peak(r->ca);
        loop_cfg c2 = c;
        c2.tag = "pageable ";
        c2.pin = false;
        st = run_loop(s, &c2, cs, b);
    }
    if (st == OOM_OK && nopin)
        st = measure_tradeoff(s, a->batch_bytes);
    hostalloc_usage u;
    hostalloc_usage_get(r->ha, &u);
    int64_t made = host_stat(r, "num_host_alloc"), peak_blocks = host_stat(r, "allocations.peak");
    int64_t peak_bytes = host_stat(r, "allocated_bytes.peak");
    if (leak) {
        hostalloc_empty_cache(r->ha); /* torch._C._host_emptyCache() */
        scn_step(s, "host cache emptied");
        host_metrics(s);
    }
    device_stream_destroy(r->dev, cs);
    if (st != OOM_OK) {
        free(a);
        return st;
    }

    /* ---- what each variant must show ---- */
    int64_t bound = (int64_t)c.workers * c.prefetch;
    char capb[32], blk[32], bb[32], pk[32];
    memstats_format_size(cap, capb, sizeof capb);
    memstats_format_size(a->block, blk, sizeof blk);
    memstats_format_size(a->batch_bytes, bb, sizeof bb);
    memstats_format_size((size_t)peak_bytes, pk, sizeof pk);
    scn_expect(s, a->max_in_flight <= bound,
               "at most num_workers x prefetch_factor = %lld batches in flight (measured at most %lld)",
               (long long)bound, (long long)a->max_in_flight);
    scn_expect(s, u.live_blocks == 0,
               "after the loader shuts down no pinned block is handed out (%zu; %zu freed ones wait in the event "
               "queue for the next allocation to see their copies complete, %zu cached)",
               u.live_blocks, u.pending_blocks, u.cached_blocks);
    if (c.pin && a->block)
        scn_expect(s, a->block >= a->batch_bytes && (a->block & (a->block - 1)) == 0,
                   "a %s batch takes a %s pinned block (a power of two)", bb, blk);
    if (c.pin)
        scn_expect(s, peak_blocks <= bound + 1 && made == peak_blocks,
                   "%lld pinned blocks at most (%s), never more than the %lld in flight + the one held, and each "
                   "made once (num_host_alloc %lld)",
                   (long long)peak_blocks, pk, (long long)bound, (long long)made);

    bool failed = a->failed_at >= 0 || a->pin_failures > 0;
    if (is_bug || fewer || pf1) {
        if (failed) {
            if (a->block)
                scn_expect(s, a->failed_at < 0 || a->host_at_fail + (int64_t)a->block > (int64_t)cap,
                           "pinning failed because the budget was full: %s pinned, one more %s block passes %s", pk,
                           blk, capb);
            else
                scn_expect(s, a->failed_at == 0 && peak_blocks == 0,
                           "not even the first batch's block fits the %s budget: pinning failed at batch 0", capb);
            if (a->failed_at >= 0)
                scn_expect(s, a->failed_at < steps, "the pin thread's error reached the main loop at batch %lld",
                           (long long)a->failed_at);
            else
                scn_note(s, "a pin failed, but the loop ended before it reached that batch");
            if (!is_bug)
                scn_not_reproduced(s, "even %lld in flight + 1 blocks of %s pass the %s budget: this fix needs a "
                                      "larger budget or fewer batches in flight",
                                   (long long)bound, blk, capb);
        } else {
            scn_expect(s, peak_bytes <= (int64_t)cap || !cap, "the pinned blocks fit the budget: %s of %s", pk,
                       capb);
            if (is_bug)
                scn_not_reproduced(s, "the %lld pinned blocks (%s) fit the %s budget at these parameters",
                                   (long long)peak_blocks, pk, capb);
        }
    }
    if (nopin) {
        scn_expect(s, peak_blocks <= 1 && a->pin_failures == 0,
                   "pin_memory=False pins nothing in the loop (%lld blocks at the peak: the trade-off "
                   "measurement's one)",
                   (long long)peak_blocks);
    }
    if ((leak || gpu) && a->received >= 2)
        scn_expect(s, peak_blocks >= 2 && peak_blocks <= (int64_t)c.workers + 1,
                   "a fast consumer holds between 2 pinned blocks (the batch it holds and the one being pinned) and "
                   "W + 1 = %d (every worker's batch pinned at once, and the one held): %lld, as the pin thread's "
                   "copy (%.1f GB/s) races the main loop; PyTorch's runs spread over that range (docs/parity.md)",
                   c.workers + 1, (long long)peak_blocks, LOADER_PIN_COPY_GBPS);
    if (leak) {
        scn_expect(s, made == peak_blocks, "num_host_alloc (%lld) == the peak of blocks held (%lld): every block "
                                           "made is reused, none is lost",
                   (long long)made, (long long)peak_blocks);
        if (a->received > made)
            scn_expect(s, made < a->received, "%lld blocks served %lld batches", (long long)made,
                       (long long)a->received);
        scn_expect(s, host_stat(r, "allocated_bytes.current") == 0 && host_stat(r, "num_host_free") == made,
                   "torch._C._host_emptyCache() gives every pinned block back (%lld bytes left, %lld of %lld freed)",
                   (long long)host_stat(r, "allocated_bytes.current"), (long long)host_stat(r, "num_host_free"),
                   (long long)made);
    }
    if (gpu) {
        int64_t n = a->received < b->received ? a->received : b->received;
        if (n > 512)
            n = 512;
        bool same = a->failed_at >= 0 || a->received == b->received;
        for (int64_t i = 0; i < n; i++)
            same = same && a->dev_allocated[i] == b->dev_allocated[i] && a->dev_reserved[i] == b->dev_reserved[i] &&
                   a->dev_allocs[i] - a->dev_allocs[0] == b->dev_allocs[i] - b->dev_allocs[0];
        if (a->failed_at >= 0)
            scn_note(s, "the pinned loop stopped at batch %lld (its pinning failed): the steps compared are the "
                        "first %lld",
                     (long long)a->failed_at, (long long)n);
        scn_expect(s, same,
                   "with and without pin_memory the device counters are the same at each of the %lld steps "
                   "(allocated, reserved, cudaMalloc calls)",
                   (long long)n);
    }
    free(a);
    return OOM_OK;
}

const scenario scenario_pinned_memory = {
    .name = "pinned_memory",
    .title = "a DataLoader's pinned batches pile up past a pinned-memory budget",
    .story = "pin_memory=True batches go through PyTorch's host caching allocator, which rounds each up to a power of "
             "two (19.3 MB takes a 32 MiB block) and keeps it cached; a consumer slower than the workers finds "
             "num_workers x prefetch_factor batches pinned at every step, plus the one it holds, and under a pinned "
             "budget cudaHostAlloc fails in the pin thread. Fewer workers, prefetch_factor=1 or pin_memory=False fix "
             "it; the blocks are held and reused, not leaked, and the GPU's memory is untouched.",
    .default_budget = (size_t)1 << 30,
    .ci_budget = (size_t)1 << 30,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
