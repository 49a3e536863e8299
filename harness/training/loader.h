/* loader.h - a DataLoader(num_workers=W, prefetch_factor=P, pin_memory=...) of real threads, with a
 * deterministic schedule.
 *
 * What it mirrors (torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter, PyTorch 2.11):
 *   - at the start it dispatches P x W batch indices, round robin over the workers (index k to worker k mod W);
 *     each batch the main loop receives dispatches one more (_process_data -> _try_put_index, also when the
 *     batch is an exception), so at most P x W batches are dispatched and not yet received: the in-flight bound;
 *   - a worker makes each batch it is given, in order (here: torch.randn(shape) into pageable memory);
 *   - with pin_memory, one pin thread (_pin_memory_loop) takes the batches as they are made, in order, and copies
 *     each into a pinned block of rt->ha (tensor.pin_memory()); a pinning failure becomes the batch's exception
 *     (ExceptionWrapper) and the thread goes on with the next batch;
 *   - the main loop receives the batches in index order; the one whose pinning failed raises in the main loop.
 * Every batch lives until the caller frees it (hostbuf_free): `for batch in loader` keeps the previous batch
 * until the next one is received, so the caller frees it after loader_next returns the next.
 *
 * The schedule. Which batches are pinned when the main loop receives batch i depends on how fast the workers, the
 * pin thread's copy and the host-to-device copy are against the consumer; real threads race, so the loader follows
 * a virtual clock (nanoseconds):
 *   - a worker takes produce_ms per batch, starting when the batch is dispatched and the worker is free;
 *   - the pin thread pins batch k (in index order) from ps_k = max(finish of batch k, pe_(k-1)): it allocates the
 *     block at ps_k and copies the batch until pe_k = ps_k + nbytes / pin_gbps (the pageable->pinned memcpy);
 *   - the consumer receives batch i at T_i = max(pe_i, its clock), and holds it for step_ms (loader_step_done);
 *   - its copy to the device (loader_copy, after hostbuf_to_device): from pinned memory it holds the stream from
 *     T_i until nbytes / h2d_gbps later (after the stream's previous copy), so the event the block gets when it is
 *     freed completes no sooner and the block is not reused before; from pageable memory it is synchronous: the
 *     consumer's clock moves on by nbytes / h2d_pageable_gbps.
 * Everything that falls at or before the consumer's clock happens before the consumer's next action, in time order;
 * at equal times a copy completes before a pin allocates (an event query at its completion time sees it done) and
 * a pin allocates before the consumer frees (the consumer wakes after the pin thread). A bandwidth of 0 takes no
 * time. So the pinned blocks, their reuse and every counter are the same run to run, whatever the real threads'
 * speed. A slow consumer (step_ms well above produce_ms / W) finds the pipeline full at every step: P x W batches
 * dispatched and pinned, plus the one it holds. A fast one finds the pin thread's copy the bottleneck: the batch
 * it holds, the one being pinned and the one it frees as it receives the next (3 blocks). PyTorch's runs spread
 * between 2 and W + 1 (2 to 4 at 4 workers, 4 to 9 at 8, tests/data/twins/pinned_memory.spread.json): its workers
 * deliver a burst out of index order and the batches ahead of the lowest index are pinned and held until its turn;
 * here every batch of a burst is made at the same instant and pinned in index order, so none is (docs/parity.md).
 *
 * Threads: W worker threads and the pin thread; loader_next, loader_copy, loader_step_done, loader_in_flight and
 * loader_delete belong to the rt's thread. loader_delete is the iterator's shutdown: it stops and joins every
 * thread, lets the device copies still held complete, and frees the batches made and not received (pinned ones go
 * back to rt->ha with no recorded stream).
 */
#ifndef OOMLAB_LOADER_H
#define OOMLAB_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "runtime/hostbuf.h"
#include "runtime/runtime.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

#define LOADER_MAX_WORKERS 64
#define LOADER_MAX_BATCHES 100000
#define LOADER_MAX_MS 3600000 /* the longest a worker's batch, a step or a copy may take: the clock stays in range */

/* The copies' bandwidths on the GPU machines, GB/s (1e9 bytes a second), for loader_options.
 * LOADER_H2D_PINNED_GBPS and LOADER_H2D_PAGEABLE_GBPS are measured on the H100 machine (H100 80GB HBM3, driver
 * 580.159.04, PyTorch 2.11): pinned_memory's fix-no-pin-memory, ten 19,267,584-byte copies each, recorded 45.7 and
 * 11.1 GB/s (tests/data/twins/pinned_memory.torch.json, h2d_pinned_GBps and h2d_pageable_GBps) and 46.5 and 9.8 in
 * a rerun (docs/measurements/h100-2026-11-25). The H200 machine measured 52.8 and 13.2
 * (tests/data/twins/pinned_memory.spread.json); the H100's stay, as the machine of the committed twin whose counters
 * the slow consumer equals, and because no counter depends on the choice: a batch's copy to the device takes 0.42 or
 * 0.37 ms, under the pin thread's 4.5 ms and every worker's and step's time, so the same blocks are reused either way.
 * LOADER_PIN_COPY_GBPS is what the pin thread does to each batch, batch.pin_memory() on a worker's batch on one CPU
 * thread (_pin_memory_loop calls torch.set_num_threads(1)), measured by scripts/twins/pinned_spread.py on the H200
 * machine (driver 580.159.04, PyTorch 2.11, docs/measurements/h200-2026-11-27-pinned): 4.27 GB/s. Its plain
 * pageable->pinned copy between resident buffers ran at 11.59 GB/s; pin_memory() of a batch a worker process made
 * is slower (a cached block's allocation, and the first touch of the shared memory the batch arrived in), and that
 * is the time the main loop waits for, so 4.27 is the one used: 4.5 ms a batch. */
#define LOADER_H2D_PINNED_GBPS 45.7
#define LOADER_H2D_PAGEABLE_GBPS 11.1
#define LOADER_PIN_COPY_GBPS 4.27

typedef struct loader_options {
    int workers;        /* num_workers: 1..LOADER_MAX_WORKERS */
    int prefetch;       /* prefetch_factor: >= 1 */
    int64_t batches;    /* len(loader): 0..LOADER_MAX_BATCHES */
    dtype dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS]; /* one batch */
    bool pin_memory;
    int64_t produce_ms; /* the modelled time a worker takes per batch, 0..LOADER_MAX_MS */
    int64_t step_ms;    /* the modelled time the consumer holds a batch, 0..LOADER_MAX_MS */
    /* the modelled copies' bandwidths, GB/s, >= 0 (0: the copy takes no time): the pin thread's pageable->pinned
     * copy, and the consumer's host-to-device copy from pinned (non_blocking) and from pageable memory; a batch's
     * copy may take LOADER_MAX_MS at most */
    double pin_gbps, h2d_gbps, h2d_pageable_gbps;
} loader_options;

typedef struct loader loader;

/* Start the workers (and the pin thread) and dispatch the first P x W batches. OOM_EINVAL for bad options (out of
 * the ranges above), OOM_ENOMEM_HOST when a thread or the bookkeeping cannot be had. Batch k is filled from seed
 * oom_rng_hash(seed, k). */
oom_status loader_new(rt *r, const loader_options *o, uint64_t seed, loader **out);
/* next(iterator): the next batch in order. OOM_OK with *out the batch (the caller frees it), or *out NULL when
 * every batch has been received; the batch's own failure (OOM_ENOMEM_PINNED when its pinning failed, or what
 * making it failed with) with *out NULL. */
oom_status loader_next(loader *l, hostbuf **out);
/* The consumer copied the batch it received to the device on stream s (call it after hostbuf_to_device): with
 * pin_memory the copy holds s (device_stream_hold) until the clock passes its end, so the event the block gets
 * on s when it is freed (hostalloc_free records it then, as PyTorch does) completes no sooner; without, the clock
 * moves on by the synchronous copy's time (and the pins within it are done). OOM_OK, or device_stream_hold's
 * failure. */
oom_status loader_copy(loader *l, devstream s);
/* The consumer's step on the batch it received is over: the virtual clock moves on by step_ms, and the pins and
 * copy completions that fall within it are done before this returns. Cannot fail (a pin's failure is its batch's,
 * loader_next). */
void loader_step_done(loader *l);
/* Batches dispatched and not yet received (<= P x W), and of them those pinned (or made, without pin_memory)
 * and waiting for the main loop. Cannot fail. */
int64_t loader_in_flight(const loader *l);
int64_t loader_ready(const loader *l);
/* Batches whose pinning failed so far. Cannot fail. */
int64_t loader_pin_failures(const loader *l);
/* Shut down: join the threads, free what is not received. NULL: no-op. */
void loader_delete(loader *l);

/* Validator (core/check.h): the invariants L1-L7 of loader_state.h, under the loader's lock (any thread). OOM_OK,
 * or OOM_ECORRUPT with the broken one named in why[cap]; touches no error record. */
oom_status loader_check(const loader *l, bool expensive, char *why, size_t cap);

OOM_END_DECLS

#endif
