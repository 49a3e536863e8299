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
 * The schedule. Which batches are pinned when the main loop receives batch i depends on how fast the workers are
 * against the consumer; real threads race, so the loader follows a virtual clock: a worker takes produce_ms per
 * batch (starting when the batch is dispatched and the worker is free), pinning takes no time, and the consumer
 * receives batch i at T_i = max(finish of batch i, end of step i-1) and holds it for step_ms (loader_step_done).
 * The pin thread pins batch j only once the virtual clock has reached its finish; the main loop waits for those
 * pins before it goes on. Batches finish in index order (a worker's tasks are dispatched in order), so the
 * pinned blocks, their reuse and every counter are the same run to run, whatever the real threads' speed.
 * A slow consumer (step_ms well above produce_ms / W) finds the pipeline full at every step: P x W batches
 * dispatched and pinned, plus the one it holds; a fast one finds the batches pinned as they finish.
 *
 * Threads: W worker threads and the pin thread; loader_next, loader_step_done, loader_in_flight and
 * loader_delete belong to the rt's thread. loader_delete is the iterator's shutdown: it stops and joins every
 * thread and frees the batches made and not received (pinned ones go back to rt->ha with no recorded stream).
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

typedef struct loader_options {
    int workers;        /* num_workers: 1..LOADER_MAX_WORKERS */
    int prefetch;       /* prefetch_factor: >= 1 */
    int64_t batches;    /* len(loader): 0..LOADER_MAX_BATCHES */
    dtype dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS]; /* one batch */
    bool pin_memory;
    int64_t produce_ms; /* the modelled time a worker takes per batch, >= 0 */
    int64_t step_ms;    /* the modelled time the consumer holds a batch, >= 0 */
} loader_options;

typedef struct loader loader;

/* Start the workers (and the pin thread) and dispatch the first P x W batches. OOM_EINVAL for bad options,
 * OOM_ENOMEM_HOST when a thread or the bookkeeping cannot be had. Batch k is filled from seed
 * oom_rng_hash(seed, k). */
oom_status loader_new(rt *r, const loader_options *o, uint64_t seed, loader **out);
/* next(iterator): the next batch in order. OOM_OK with *out the batch (the caller frees it), or *out NULL when
 * every batch has been received; the batch's own failure (OOM_ENOMEM_PINNED when its pinning failed, or what
 * making it failed with) with *out NULL. */
oom_status loader_next(loader *l, hostbuf **out);
/* The consumer's step on the batch it received is over: the virtual clock moves on by step_ms, and the pins
 * that fall within it are done before this returns. Cannot fail (a pin's failure is its batch's, loader_next). */
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
