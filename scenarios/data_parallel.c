/* data_parallel.c - DistributedDataParallel runs out where the same model and batch fit on one GPU: its gradient
 * buckets are a second copy of the gradients.
 *
 * Cause. DistributedDataParallel does not split the model: every rank holds all of it, its own .grad tensors, and
 * besides them the Reducer's gradient buckets (torch/csrc/distributed/c10d/reducer.cpp): flat tensors, made when
 * the model is wrapped, that every gradient is copied into (divided by the world size) as backward produces it, so
 * that NCCL can all-reduce a bucket at a time. With gradient_as_bucket_view=False, PyTorch's default, the buckets
 * are a second copy of every gradient: from DDP(model) on, each rank holds the parameters and a bucket copy of the
 * same size before any gradient exists, and backward adds the .grad tensors beside them. With
 * find_unused_parameters=False the first iteration's assignment is one bucket of every parameter
 * (bucket_size_limits = [sys.maxsize] in _ddp_init_helper); at the second forward the reducer rebuilds them in the
 * order the first backward produced the gradients, with limits [dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB),
 * bucket_cap_mb (25)]: the old bucket freed, the new ones allocated. Wrapping also broadcasts rank 0's parameters
 * (_sync_module_states: flat buckets of at least 250 MiB, two in flight). NCCL's own buffers are cudaMalloc'd by
 * libnccl outside the caching allocator: they are the OOM message's non-PyTorch memory (device/devcomm.h).
 *
 * The first iteration's bucket outlives the rebuild. At the second forward the reducer drops its single bucket
 * for the rebuilt ones, but ProcessGroupNCCL's Work for that bucket's all-reduce still holds it (its
 * stashed_for_allocator_safety_ is released by work.wait(), and the reducer waits on the Work's future instead):
 * from step 2 on every rank holds the parameters, the old bucket and the new ones, one bucket more than step 1.
 * Measured, not inferred: the twin's recording on 2 x H200 (PyTorch 2.11.0+cu130, NCCL 2.28.9) shows every sample
 * from step 2's forward on exactly 268,665,344 B (one bucket) above step 1's, and the same bytes still allocated
 * after `del ddp`; oomlab holds it until the process group goes. Whether a later collective would let it go the
 * recording does not show (both recorded fixes ran out in step 2 at 880 MiB).
 *
 * What the user sees. MLP(4096, 4) (256.22 MiB of float32 parameters) with a per-rank batch of 2048 trains on one
 * GPU under a 1136 MiB budget (peak 640.46 MiB allocated). Under DDP on 2 GPUs, each rank holds 256.22 MiB of
 * parameters and 256.22 MiB of buckets after DDP(model); step 1 fits, and step 2's backward runs out on every
 * rank: "Tried to allocate 64.00 MiB ... Of the allocated memory 1.06 GiB is allocated by PyTorch, and 11.12 MiB
 * is reserved by PyTorch but unallocated." The process figure counts the CUDA context, the reserved memory and
 * NCCL's buffers (866 MiB per rank: measured on the GPUs, charged as that measurement on sim, device/devcomm.h).
 * The CI scale (MLP(1024, 4), batch 256, 2 steps, under 82 MiB) runs out at the same step.
 *
 * The PyTorch code it mirrors (scripts/twins/data_parallel.py runs it with torchrun --nproc_per_node 2):
 *     dist.init_process_group("nccl"); torch.cuda.set_device(rank)
 *     model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())],
 *                           nn.Linear(width, 10)).cuda()
 *     opt = torch.optim.SGD(model.parameters(), lr=1e-3)
 *     model = DDP(model, device_ids=[rank], bucket_cap_mb=25, gradient_as_bucket_view=False)
 *     for step in range(steps):
 *         opt.zero_grad()                           # set_to_none: no .grad before forward
 *         x = torch.randn(batch, width, device="cuda")
 *         y = torch.randint(0, 10, (batch,), device="cuda")
 *         loss = F.cross_entropy(model(x), y)
 *         loss.backward()                           # torch.OutOfMemoryError in step 2, on every rank
 *         opt.step()
 * The ranks run in one oomlab process, one simulated device (or GPU) each, their steps interleaved phase by phase;
 * each rank's allocator sees exactly its own process's sequence: the collectives allocate nothing from it.
 *
 * The fixes, and why they work.
 *   fix-bucket-view  DDP(model, gradient_as_bucket_view=True): as each gradient is copied into its bucket, .grad is
 *       pointed at the bucket's view and the gradient autograd made is freed. The buckets are the gradients: after
 *       backward a rank holds 256.22 MiB less than the bug: step 2 fits beside the old bucket (peak 1.06 GiB).
 *   fix-smaller-batch  a per-rank batch of 512 (small_batch): the activations that backward still holds when the
 *       gradients arrive shrink by 4, and both buckets fit beside them (peak 1.02 GiB). The global batch is then
 *       512 x ranks: more ranks, or gradient accumulation, restore it.
 * The myths.
 *   myth-smaller-buckets  bucket_cap_mb=1 "to make the buckets smaller": the cap sets how the gradients are cut, not
 *       how many bytes the buckets hold; together they are always every gradient, and the first iteration's
 *       single bucket (which ignores the cap) is still held beside them. The same OOM, at the same allocation.
 *   myth-ddp-shards  "DDP splits the model over the GPUs, so each needs less than one GPU did": every rank first
 *       trains alone (peak 640.46 MiB under 1136 MiB), then under DDP the same model and batch run out. Each rank
 *       needs the whole model, its gradients and their buckets: more than one GPU, not half. Sharding is FSDP's
 *       (fully_shard) or ZeRO's, not DDP's.
 *   myth-zero-redundancy-optimizer  "ZeRO divides the memory by N": opt = ZeroRedundancyOptimizer(model.parameters(),
 *       optimizer_class=torch.optim.SGD, lr=1e-3) (torch.distributed.optim; ZeRO-1) gives each rank a partition of
 *       the parameters (sorted by numel, largest first, each to the rank with the fewest elements so far: rank 0
 *       steps three of the ten here) and keeps the optimizer's state for that partition only; after each step
 *       every rank broadcasts the parameters it owns. That shares the optimizer state, and SGD keeps none: the
 *       parameters, gradients and buckets stay whole on every rank and every counter is the bug's, the same OOM
 *       (with Adam the share would be two copies of the parameters divided by N; it is not this scenario's
 *       failure). In PyTorch at 880 MiB both ranks ran out in step 1's backward, as here (recorded); at the
 *       scenario's 1136 MiB rank 0 ran out in step 2's backward as here, but rank 1 did not finish within 200 s:
 *       the run hung. Its snapshot was not written, so why is not recorded; the likely cause is rank 1 fitting and
 *       waiting at an all-reduce rank 0 never joins, if ProcessGroupNCCL's watchdog let its first-iteration bucket
 *       go first (the timing seen in fix-bucket-view's recording; docs/parity.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/devcomm.h"
#include "run/scenario.h"
#include "runtime/autograd.h"
#include "training/dist.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"

#define CLASSES 10
#define MAX_DEPTH 16
#define MAX_PARAMS (2 * (MAX_DEPTH + 1))
#define MAX_STEPS 8
#define MIB ((int64_t)1 << 20)
/* dist._DEFAULT_FIRST_BUCKET_BYTES: the first bucket of a rebuilt assignment */
#define FIRST_BUCKET_BYTES ((size_t)1 << 20)
/* DDP's broadcast_bucket_size for _sync_module_states: int(250 * 1024 * 1024) */
#define BROADCAST_BUCKET_BYTES ((size_t)250 << 20)

static const scenario_param params[] = {
    /* name, help, full, min, max, ci */
    {"width", "features of every layer of MLP(width, depth)", 4096, 16, 8192, 1024},
    {"depth", "hidden [Linear(width, width), ReLU] blocks before Linear(width, 10)", 4, 1, MAX_DEPTH, 0},
    {"batch", "rows of each rank's randn(batch, width) input per step", 2048, 1, 65536, 256},
    {"small_batch", "the per-rank batch of fix-smaller-batch", 512, 1, 65536, 64},
    {"bucket_cap_mib", "DDP's bucket_cap_mb (the bug's: PyTorch's default 25)", 25, 1, 4096, 0},
    {"small_bucket_cap_mib", "bucket_cap_mb of myth-smaller-buckets", 1, 1, 4096, 0},
    {"ranks", "processes (one GPU each) in the process group", 2, 2, 4, 0},
    {"steps", "training steps (zero_grad, forward, backward, SGD step)", 3, 2, MAX_STEPS, 2},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "DDP(model) with PyTorch's defaults: bucket_cap_mb=25, gradient_as_bucket_view=False", ""},
    {"fix-bucket-view", VARIANT_FIX, "DDP(model, gradient_as_bucket_view=True): .grad are views into the buckets", ""},
    {"fix-smaller-batch", VARIANT_FIX, "a smaller per-rank batch (small_batch): fewer activations beside the buckets",
     ""},
    {"myth-smaller-buckets", VARIANT_MYTH, "DDP(model, bucket_cap_mb=1): more buckets, the same bytes", ""},
    {"myth-ddp-shards", VARIANT_MYTH,
     "\"DDP splits the model over the GPUs\": the step on one GPU first, then under DDP", ""},
    {"myth-zero-redundancy-optimizer", VARIANT_MYTH,
     "\"ZeRO divides the memory by N\": ZeroRedundancyOptimizer(SGD) over DDP shards only the optimizer state", ""},
};

static const char *sz(int64_t bytes, char *buf) { return memstats_format_size((uint64_t)(bytes < 0 ? 0 : bytes), buf, 32); }

/* ---- one rank's DistributedDataParallel ------------------------------------------------------------------ */

typedef struct ddp {
    rt *r;
    nn_mlp *model;
    tensor *ps[MAX_PARAMS];
    size_t np;
    optimizer *opt;    /* SGD over every parameter; under ZeroRedundancyOptimizer its zero_grad (all of them) */
    optimizer *zopt;   /* ZeroRedundancyOptimizer's local SGD over this rank's partition, or NULL */
    int owner[MAX_PARAMS]; /* ZeroRedundancyOptimizer: the rank whose local optimizer steps parameter i */
    int zorder[MAX_PARAMS]; /* the parameters by numel, largest first (stable): the partition's order */
    bool as_view;      /* gradient_as_bucket_view */
    size_t cap_bytes;  /* bucket_bytes_cap */
    double div;        /* world size: the reducer divides each gradient as it copies it in */
    tensor *buckets[MAX_PARAMS]; /* bucket.gradients: one flat tensor per bucket */
    size_t nb;
    int bucket_of[MAX_PARAMS];
    size_t offset_of[MAX_PARAMS]; /* elements into its bucket */
    int ready[MAX_PARAMS];        /* the order gradients became ready in the first backward (rebuilt_params_) */
    size_t nready;
    bool rebuilt;
    bool reduced; /* the buckets have been all-reduced: their Works hold them (see ddp_rebuild) */
    tensor *stashed[MAX_PARAMS]; /* buckets replaced by the rebuild, still held by their all-reduce's Work */
    size_t nstashed;
    oom_status hook_status;
} ddp;

static int param_index(const ddp *d, const tensor *leaf)
{
    for (size_t i = 0; i < d->np; i++)
        if (d->ps[i] == leaf)
            return (int)i;
    return -1;
}

static void free_buckets(ddp *d)
{
    for (size_t b = 0; b < d->nb; b++)
        tensor_assign(&d->buckets[b], NULL);
    d->nb = 0;
}

/* Reducer::initialize_buckets: the old buckets go first (buckets_.clear()), then bucket by bucket, in the
 * assignment's order, `at::empty({numel})` holding its parameters' gradients back to back. order[0..n) lists the
 * parameters; a bucket closes when its bytes reach its limit (compute_bucket_assignment_by_size: the first limit
 * for the first bucket, the last limit for every later one). */
static bool make_buckets(ddp *d, const int *order, size_t n, const size_t *limits, size_t nlimits)
{
    free_buckets(d);
    size_t li = 0, bytes = 0, count = 0;
    int64_t numel[MAX_PARAMS];
    for (size_t j = 0; j < n; j++) {
        int i = order[j];
        d->bucket_of[i] = (int)d->nb;
        d->offset_of[i] = count;
        count += (size_t)tensor_numel(d->ps[i]);
        bytes += tensor_nbytes(d->ps[i]);
        if (bytes >= limits[li] || j + 1 == n) {
            numel[d->nb++] = (int64_t)count;
            bytes = count = 0;
            if (li + 1 < nlimits)
                li++;
        }
    }
    for (size_t b = 0; b < d->nb; b++) {
        d->buckets[b] = tensor_empty(d->r, d->ps[0]->dt, 1, &numel[b]);
        if (!d->buckets[b])
            return false;
    }
    return true;
}

/* bucket_views_in: parameter i's gradient inside its bucket */
static tensor *bucket_view(const ddp *d, int i)
{
    const tensor *p = d->ps[i];
    return tensor_alias(d->buckets[d->bucket_of[i]], d->offset_of[i] * dtype_size(p->dt), p->ndim, p->shape,
                        false);
}

/* Reducer::autograd_hook -> mark_variable_ready: the gradient copied (and divided by the world size, mul_out) into
 * its bucket; with gradient_as_bucket_view .grad then points there and the autograd gradient goes. The first
 * backward records the order (rebuilt_params_). */
static oom_status ddp_hook(void *ctx, tensor *leaf)
{
    ddp *d = ctx;
    int i = param_index(d, leaf);
    if (i < 0 || !leaf->grad)
        return OOM_OK;
    if (!d->rebuilt && d->nready < d->np)
        d->ready[d->nready++] = i;
    tensor *view = bucket_view(d, i);
    if (!view)
        return d->r->status;
    if (!op_copy_(view, leaf->grad) || !op_mul_(view, 1.0 / d->div)) {
        tensor_release(view);
        return d->r->status;
    }
    if (d->as_view)
        tensor_assign(&leaf->grad, view); /* grad = bucket_view */
    else
        tensor_release(view);
    return OOM_OK;
}

/* Reducer::finalize_backward, gradient_as_bucket_view=False: copy_bucket_to_grad, each bucket view back into .grad */
static bool ddp_finalize(ddp *d)
{
    if (d->as_view)
        return true;
    for (size_t i = 0; i < d->np; i++) {
        if (!d->ps[i]->grad)
            continue;
        tensor *view = bucket_view(d, (int)i);
        bool ok = view && op_copy_(d->ps[i]->grad, view);
        tensor_release(view);
        if (!ok)
            return false;
    }
    return true;
}

/* ---- DistributedDataParallel(model) over every rank ---------------------------------------------------------- */

/* _sync_module_states -> _broadcast_coalesced(module_states, 250 MiB, src=0) as c10d's broadcast_coalesced does it:
 * the parameters in buckets of at least 250 MiB, each flattened into one new tensor (flatten_dense_tensors: a cat),
 * broadcast, and copied back into the parameters; at most two buckets in flight, the oldest finished (copied back,
 * its flat tensor freed) before a third is flattened. */
static bool sync_module_states(ddp *const *ds, int n, devcomm *c)
{
    tensor *flat[2][DEVCOMM_MAX_RANKS] = {{NULL}};
    size_t first[2] = {0}, last[2] = {0}, inflight = 0;
    const ddp *d0 = ds[0];
    bool ok = true;
    size_t j = 0;
    while (ok && j < d0->np) {
        size_t start = j, bytes = 0;
        while (j < d0->np && bytes < BROADCAST_BUCKET_BYTES)
            bytes += tensor_nbytes(d0->ps[j++]);
        if (inflight == 2) { /* in_flight.front().finish(); pop_front() */
            for (int k = 0; k < n && ok; k++) {
                size_t off = 0;
                for (size_t i = first[0]; i < last[0] && ok; i++) {
                    tensor *v = tensor_alias(flat[0][k], off, ds[k]->ps[i]->ndim, ds[k]->ps[i]->shape, false);
                    ok = v && op_copy_(ds[k]->ps[i], v);
                    tensor_release(v);
                    off += tensor_nbytes(ds[k]->ps[i]);
                }
                tensor_assign(&flat[0][k], NULL);
            }
            memcpy(flat[0], flat[1], sizeof flat[0]);
            memset(flat[1], 0, sizeof flat[1]);
            first[0] = first[1], last[0] = last[1];
            inflight = 1;
        }
        int64_t numel = (int64_t)(bytes / dtype_size(d0->ps[0]->dt));
        for (int k = 0; k < n && ok; k++) { /* flatten_dense_tensors */
            flat[inflight][k] = tensor_empty(ds[k]->r, d0->ps[0]->dt, 1, &numel);
            size_t off = 0;
            for (size_t i = start; i < j && flat[inflight][k] && ok; i++) {
                tensor *v = tensor_alias(flat[inflight][k], off, ds[k]->ps[i]->ndim, ds[k]->ps[i]->shape, false);
                ok = v && op_copy_(v, ds[k]->ps[i]);
                tensor_release(v);
                off += tensor_nbytes(ds[k]->ps[i]);
            }
            ok = ok && flat[inflight][k];
        }
        if (ok)
            ok = dist_broadcast(c, flat[inflight], 0) == OOM_OK;
        first[inflight] = start, last[inflight] = j;
        inflight++;
    }
    for (size_t f = 0; f < inflight; f++)
        for (int k = 0; k < n; k++) {
            size_t off = 0;
            for (size_t i = first[f]; i < last[f] && ok && flat[f][k]; i++) {
                tensor *v = tensor_alias(flat[f][k], off, ds[k]->ps[i]->ndim, ds[k]->ps[i]->shape, false);
                ok = v && op_copy_(ds[k]->ps[i], v);
                tensor_release(v);
                off += tensor_nbytes(ds[k]->ps[i]);
            }
        }
    for (size_t f = 0; f < 2; f++) /* finished, or left by an OOM part way through flattening */
        for (int k = 0; k < n; k++)
            tensor_assign(&flat[f][k], NULL);
    return ok;
}

/* DistributedDataParallel(model, bucket_cap_mb, gradient_as_bucket_view) on every rank: the states broadcast from
 * rank 0, then the Reducer: with find_unused_parameters=False the first iteration's assignment is one bucket of
 * every parameter (bucket_size_limits = [sys.maxsize]), and its hooks on every grad accumulator. */
static bool ddp_wrap(ddp *const *ds, int n, devcomm *c)
{
    bool ok = true;
    RT_NO_GRAD(ds[0]->r)
    {
        for (int k = 1; k < n; k++)
            rt_set_grad_enabled(ds[k]->r, false);
        ok = sync_module_states(ds, n, c);
        for (int k = 1; k < n; k++)
            rt_set_grad_enabled(ds[k]->r, true);
    }
    for (int k = 0; k < n && ok; k++) {
        int order[MAX_PARAMS];
        for (size_t i = 0; i < ds[k]->np; i++)
            order[i] = (int)i;
        size_t all = SIZE_MAX;
        ok = make_buckets(ds[k], order, ds[k]->np, &all, 1);
        if (ok)
            autograd_set_post_accumulate_hook(ds[k]->r, ddp_hook, ds[k]);
    }
    return ok;
}

/* DDP.forward's _pre_forward: reducer._rebuild_buckets() once, at the second forward, in the order the first
 * backward's gradients became ready, with limits [first_bucket_bytes, bucket_bytes_cap]. */
static bool ddp_rebuild(ddp *d)
{
    if (d->rebuilt || d->nready < d->np)
        return true;
    d->rebuilt = true;
    /* buckets_.clear() drops the reducer's reference, but not the last one: ProcessGroupNCCL's Work for the bucket's
     * all-reduce stashed it (stashed_for_allocator_safety_), and only work.wait()/synchronize() unstashes; the
     * reducer waits on the Work's future instead. The first iteration's bucket therefore stays allocated beside
     * the rebuilt ones, through step 2 and past `del ddp` (measured: the twin's recording on 2 x H200, every
     * sample from step 2 on is one bucket higher). When, if ever, a later collective lets it go the recording
     * does not show: oomlab holds it until the process group goes. */
    if (d->reduced)
        for (size_t b = 0; b < d->nb; b++) {
            d->stashed[d->nstashed++] = d->buckets[b];
            d->buckets[b] = NULL;
        }
    size_t limits[2] = {FIRST_BUCKET_BYTES, d->cap_bytes};
    return make_buckets(d, d->ready, d->nready, limits, 2);
}

/* ---- ZeroRedundancyOptimizer(params, optimizer_class=SGD) ------------------------------------------------------ */

/* _partition_parameters: the parameters sorted by numel, largest first (sorted() is stable), each given to the rank
 * with the fewest elements so far (the first such); every rank's local optimizer is an SGD over its own. */
static bool zero_init(ddp *const *ds, int n)
{
    const ddp *d0 = ds[0];
    for (size_t i = 0; i < d0->np; i++) {
        size_t j = i;
        for (; j > 0 && tensor_numel(d0->ps[ds[0]->zorder[j - 1]]) < tensor_numel(d0->ps[i]); j--)
            ds[0]->zorder[j] = ds[0]->zorder[j - 1];
        ds[0]->zorder[j] = (int)i;
    }
    int64_t sizes[DEVCOMM_MAX_RANKS] = {0};
    for (size_t j = 0; j < d0->np; j++) {
        int i = d0->zorder[j], min = 0;
        for (int r = 1; r < n; r++)
            if (sizes[r] < sizes[min])
                min = r;
        ds[0]->owner[i] = min;
        sizes[min] += tensor_numel(d0->ps[i]);
    }
    for (int k = 0; k < n; k++) {
        memcpy(ds[k]->owner, d0->owner, sizeof d0->owner);
        memcpy(ds[k]->zorder, d0->zorder, sizeof d0->zorder);
        tensor *mine[MAX_PARAMS];
        size_t m = 0;
        for (size_t j = 0; j < ds[k]->np; j++)
            if (ds[k]->owner[ds[k]->zorder[j]] == k)
                mine[m++] = ds[k]->ps[ds[k]->zorder[j]];
        ds[k]->zopt = optim_sgd(ds[k]->r, mine, m, 1e-3, 0.0, 0.0, 0.0, false);
        if (!ds[k]->zopt)
            return false;
    }
    return true;
}

/* step(): every rank's local optimizer steps its partition, then _sync_params broadcasts each parameter from the
 * rank that owns it, rank by rank in partition order (NCCL in place: nothing from the caching allocator). */
static bool zero_step(scn *s, ddp *const *ds, int n, devcomm *c, const char *what)
{
    bool failed = false;
    for (int r = 0; r < n; r++)
        if (optim_step(ds[r]->zopt) != OOM_OK && scn_caught(s, what))
            failed = true;
    for (int src = 0; src < n && !failed; src++)
        for (size_t j = 0; j < ds[0]->np && !failed; j++) {
            int i = ds[0]->zorder[j];
            if (ds[0]->owner[i] != src)
                continue;
            tensor *t[DEVCOMM_MAX_RANKS];
            for (int r = 0; r < n; r++)
                t[r] = ds[r]->ps[i];
            failed = dist_broadcast(c, t, src) != OOM_OK;
        }
    return !failed;
}

/* After _sync_params, computing: the parameters that differ in some byte between rank 0 and another rank (0: the
 * owners' updates reached every rank); -1 when nothing is computed or a host buffer is missing. */
static int zero_mismatches(ddp *const *ds, int n)
{
    if (!ds[0]->r->computes)
        return -1;
    int bad = 0;
    for (size_t i = 0; i < ds[0]->np; i++) {
        size_t nb = tensor_nbytes(ds[0]->ps[i]);
        unsigned char *a = malloc(nb), *b = malloc(nb);
        if (!a || !b || tensor_to_host(ds[0]->ps[i], a) != OOM_OK) {
            free(a);
            free(b);
            return -1;
        }
        for (int r = 1; r < n; r++)
            if (tensor_to_host(ds[r]->ps[i], b) != OOM_OK || memcmp(a, b, nb) != 0) {
                bad++;
                break;
            }
        free(a);
        free(b);
    }
    return bad;
}

/* ---- the run ------------------------------------------------------------------------------------------------ */

typedef struct rank_io {
    tensor *x, *y, *loss;
} rank_io;

static void io_free(rank_io *io)
{
    tensor_assign(&io->x, NULL);
    tensor_assign(&io->y, NULL);
    tensor_assign(&io->loss, NULL);
}

/* opt.zero_grad(); x, y = the batch; loss = F.cross_entropy(model(x), y) on one rank (the previous step's x, y and
 * loss are released as each is rebound); false on an OOM (not caught here) */
static bool forward(ddp *d, rank_io *io, int64_t batch, bool wrapped)
{
    optim_zero_grad(d->opt, true);
    tensor *x = tensor_randn(d->r, DT_F32, SHAPE(batch, d->model->width), 0.0, 1.0);
    if (!x)
        return false;
    tensor_assign(&io->x, x);
    tensor *y = tensor_randint(d->r, SHAPE(batch), 0, CLASSES);
    if (!y)
        return false;
    tensor_assign(&io->y, y);
    if (wrapped && !ddp_rebuild(d)) /* model(x): DDP's _pre_forward */
        return false;
    tensor *out = nn_mlp_forward(d->model, io->x);
    tensor *loss = out ? op_cross_entropy(out, io->y) : NULL;
    tensor_release(out);
    if (!loss)
        return false;
    tensor_assign(&io->loss, loss);
    return true;
}

/* One step without DDP on every rank, each GPU on its own (myth-ddp-shards' first part). False after an OOM
 * (caught). */
static bool single_gpu_step(scn *s, ddp *const *ds, int n, int64_t batch)
{
    rank_io io[DEVCOMM_MAX_RANKS];
    memset(io, 0, sizeof io);
    bool ok = true;
    for (int k = 0; k < n && ok; k++)
        ok = forward(ds[k], &io[k], batch, false);
    if (ok)
        scn_step(s, "one GPU, no DDP: forward");
    for (int k = 0; k < n && ok; k++)
        ok = autograd_backward(io[k].loss, NULL, false) == OOM_OK;
    if (ok)
        scn_step(s, "one GPU, no DDP: backward");
    for (int k = 0; k < n && ok; k++)
        ok = optim_step(ds[k]->opt) == OOM_OK;
    for (int k = 0; k < n; k++) {
        io_free(&io[k]);
        optim_zero_grad(ds[k]->opt, true);
    }
    if (!ok) {
        scn_caught(s, "one GPU, no DDP");
        return false;
    }
    scn_step(s, "one GPU, no DDP: optimizer step");
    return true;
}

/* The step of every rank, as the ranks run it at once; each phase's OOM is caught on every rank it happens on.
 * *opt_added: what the optimizer step added to rank 0's allocated bytes. */
static const char *ddp_step(scn *s, ddp *const *ds, int n, devcomm *c, rank_io *io, int64_t batch, int k,
                            int64_t *opt_added)
{
    char what[64];
    bool failed = false;
    snprintf(what, sizeof what, "step %d: forward", k);
    for (int r = 0; r < n; r++)
        if (!forward(ds[r], &io[r], batch, true) && scn_caught(s, what))
            failed = true;
    if (failed || !rt_ok(scn_rt(s)))
        return "forward";
    scn_step(s, "%s", what);
    snprintf(what, sizeof what, "step %d: backward", k);
    for (int r = 0; r < n; r++) /* loss.backward(): the hooks fill the buckets */
        if (autograd_backward(io[r].loss, NULL, false) != OOM_OK && scn_caught(s, what))
            failed = true;
    if (failed || !rt_ok(scn_rt(s)))
        return "backward";
    for (size_t b = 0; b < ds[0]->nb; b++) { /* every bucket all-reduced, as it fills */
        tensor *bt[DEVCOMM_MAX_RANKS];
        for (int r = 0; r < n; r++)
            bt[r] = ds[r]->buckets[b];
        if (dist_all_reduce(c, bt) != OOM_OK)
            return "backward";
    }
    for (int r = 0; r < n; r++)
        ds[r]->reduced = true;
    for (int r = 0; r < n; r++)
        if (!ddp_finalize(ds[r]))
            return "backward";
    scn_step(s, "%s", what);
    snprintf(what, sizeof what, "step %d: optimizer step", k);
    int64_t before = scn_stat_device(s, 0, "allocated_bytes.all.current");
    if (ds[0]->zopt)
        failed = !zero_step(s, ds, n, c, what);
    else
        for (int r = 0; r < n; r++)
            if (optim_step(ds[r]->opt) != OOM_OK && scn_caught(s, what))
                failed = true;
    if (failed || !rt_ok(scn_rt(s)))
        return "optimizer step";
    *opt_added = scn_stat_device(s, 0, "allocated_bytes.all.current") - before;
    scn_step(s, "%s", what);
    return NULL;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    const int64_t width = scn_param(s, "width"), depth = scn_param(s, "depth");
    const int n = (int)scn_param(s, "ranks"), steps = (int)scn_param(s, "steps");
    const bool small_batch = strcmp(v->name, "fix-smaller-batch") == 0;
    const bool myth_shards = strcmp(v->name, "myth-ddp-shards") == 0;
    const bool zero = strcmp(v->name, "myth-zero-redundancy-optimizer") == 0;
    const int64_t batch = scn_param(s, small_batch ? "small_batch" : "batch");
    const int64_t cap_mib = scn_param(s, strcmp(v->name, "myth-smaller-buckets") == 0 ? "small_bucket_cap_mib"
                                                                                      : "bucket_cap_mib");
    char a[32], b[32], c2[32], cap[32];
    sz((int64_t)scn_budget(s), cap);

    /* dist.init_process_group("nccl"); torch.cuda.set_device(rank) */
    devcomm *c = scn_comm(s, n);
    if (!c)
        return rt_status(scn_rt(s));
    ddp dd[DEVCOMM_MAX_RANKS];
    ddp *ds[DEVCOMM_MAX_RANKS] = {NULL};
    rank_io io[DEVCOMM_MAX_RANKS];
    memset(dd, 0, sizeof dd);
    memset(io, 0, sizeof io);
    int done = 0;
    const char *failed = NULL;
    bool built = true;
    for (int k = 0; k < n; k++) { /* model = MLP(width, depth).cuda(); opt = SGD(model.parameters(), lr=1e-3) */
        ds[k] = &dd[k];
        dd[k].r = scn_rt_device(s, k);
        dd[k].as_view = strcmp(v->name, "fix-bucket-view") == 0;
        dd[k].cap_bytes = (size_t)cap_mib << 20;
        dd[k].div = n;
        dd[k].model = built ? nn_mlp_new(dd[k].r, width, (int)depth, CLASSES, DT_F32) : NULL;
        dd[k].np = dd[k].model ? nn_mlp_parameters(dd[k].model, dd[k].ps, MAX_PARAMS) : 0;
        dd[k].opt = dd[k].model ? optim_sgd(dd[k].r, dd[k].ps, dd[k].np, 1e-3, 0.0, 0.0, 0.0, false) : NULL;
        built = built && dd[k].opt && !scn_caught(s, "building the model");
    }
    /* myth-zero-redundancy-optimizer: opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=SGD) */
    if (built && zero && !zero_init(ds, n))
        built = !scn_caught(s, "building the model");
    scn_step(s, built ? "model and optimizer" : "OOM building the model");
    int64_t model_bytes[DEVCOMM_MAX_RANKS];
    for (int k = 0; k < n; k++)
        model_bytes[k] = scn_stat_device(s, k, "allocated_bytes.all.current");

    bool single_fits = false;
    int64_t single_peak = 0;
    if (built && myth_shards) { /* every rank first trains the model alone, as `python train.py` on one GPU */
        single_fits = single_gpu_step(s, ds, n, batch);
        single_peak = scn_stat(s, "allocated_bytes.all.peak");
    }
    /* model = DDP(model, device_ids=[rank], bucket_cap_mb=..., gradient_as_bucket_view=...) */
    bool wrapped = built && ddp_wrap(ds, n, c);
    if (built && !wrapped)
        scn_caught(s, "DistributedDataParallel(model)"); /* another failure stays in the runtime */
    if (wrapped)
        scn_step(s, "DDP(model): buckets");
    int64_t bucket_bytes = wrapped ? scn_stat(s, "allocated_bytes.all.current") - model_bytes[0] : 0;

    int64_t opt_added = -1; /* step 1's optimizer step, on rank 0's allocated bytes */
    int zero_differ = -1;   /* after a ZeroRedundancyOptimizer step: parameters not equal on every rank */
    for (int k = 1; wrapped && k <= steps && !failed && rt_ok(scn_rt(s)); k++) {
        int64_t added = 0;
        failed = ddp_step(s, ds, n, c, io, batch, k, &added);
        if (k == 1 && !failed)
            opt_added = added;
        if (zero && !failed && zero_differ != 0)
            zero_differ = zero_mismatches(ds, n);
        if (!failed)
            done = k;
        else
            scn_step(s, "step %d: %s: OOM", k, failed);
    }
    for (int k = 0; k < n; k++)
        io_free(&io[k]);
    for (int k = 0; k < n; k++) {
        if (dd[k].r)
            autograd_set_post_accumulate_hook(dd[k].r, NULL, NULL);
        free_buckets(&dd[k]);
        optim_free(dd[k].opt);
        optim_free(dd[k].zopt);
        nn_mlp_free(dd[k].model);
    }
    scn_step(s, "everything released");
    for (int k = 0; k < n; k++) /* dist.destroy_process_group(): the Works' stashed buckets go */
        for (size_t j = 0; j < dd[k].nstashed; j++)
            tensor_assign(&dd[k].stashed[j], NULL);
    if (!rt_ok(scn_rt(s)))
        return rt_status(scn_rt(s));

    /* ---- what each variant must show, at these parameters ---- */
    const scn_oom *oom = scn_first_oom(s);
    if (!built || !wrapped) {
        scn_not_reproduced(s, "MLP(%lld, %lld) does not fit %s with DDP's buckets on each of %d ranks",
                           (long long)width, (long long)depth, cap, n);
        return OOM_OK;
    }
    bool same = true;
    for (int k = 1; k < n; k++)
        same = same && model_bytes[k] == model_bytes[0];
    scn_expect(s, same && bucket_bytes >= model_bytes[0] - 2 * MIB && bucket_bytes <= model_bytes[0],
               "every rank holds the whole model (%s) and, from DDP(model) on, buckets of every gradient (%s): DDP "
               "replicates, it does not shard",
               sz(model_bytes[0], a), sz(bucket_bytes, b));
    if (oom) {
        scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
                   "the OOM (%s, on rank %d) is the budget's: %s reserved + a new %s segment exceed %s", oom->what,
                   oom->device, sz((int64_t)oom->reserved, a), sz((int64_t)oom->alloc_size, b), cap);
        int ranks_oom = 0;
        for (int k = 0; k < n; k++)
            ranks_oom += scn_stat_device(s, k, "num_ooms") > 0;
        scn_expect(s, ranks_oom == n, "every rank runs out at the same point (%d of %d ranks)", ranks_oom, n);
    }
    if (v->kind == VARIANT_BUG || strcmp(v->name, "myth-smaller-buckets") == 0) {
        if (!oom) {
            scn_not_reproduced(s, "at batch %lld the gradients, their buckets and the activations fit %s (peak %s)",
                               (long long)batch, cap, sz(scn_stat(s, "allocated_bytes.all.peak"), a));
            return OOM_OK;
        }
        /* at the scenario's parameters, step 2's backward; at others (--set) the held buckets may already leave
         * no room for step 2's forward */
        if (strcmp(failed ? failed : "", "forward") == 0)
            scn_expect(s, bucket_bytes > 0,
                       "step %d's forward runs out: every rank still holds its buckets (%s)%s beside the activations",
                       done + 1, sz(bucket_bytes, b),
                       dd[0].nstashed ? " and the first iteration's bucket, held by its all-reduce," : "");
        else
            scn_expect(s, strcmp(failed ? failed : "", "backward") == 0,
                       "step %d's backward runs out: the gradients (%s) join their bucket copy (%s)%s beside the "
                       "activations",
                       done + 1, sz(model_bytes[0], a), sz(bucket_bytes, b),
                       dd[0].nstashed ? " and the first iteration's bucket, still held by its all-reduce," : "");
        if (v->kind == VARIANT_MYTH)
            scn_expect(s, true,
                       "bucket_cap_mb=%lld changes nothing in the first iteration: with find_unused_parameters=False "
                       "DDP starts with one bucket of every gradient (%s), and a rebuilt assignment's buckets still "
                       "add up to every gradient",
                       (long long)cap_mib, sz(bucket_bytes, a));
        return OOM_OK;
    }
    if (zero) {
        if (!oom) {
            scn_not_reproduced(s, "at batch %lld the gradients, their buckets and the activations fit %s (peak %s)",
                               (long long)batch, cap, sz(scn_stat(s, "allocated_bytes.all.peak"), a));
            return OOM_OK;
        }
        size_t mine = 0;
        for (size_t i = 0; i < dd[0].np; i++)
            mine += dd[0].owner[i] == 0;
        if (opt_added >= 0)
            scn_expect(s, opt_added == 0,
                       "ZeroRedundancyOptimizer gives rank 0 %zu of the %zu parameters to step, and its share of the "
                       "optimizer state is SGD's: none (step 1's optimizer step adds %s)",
                       mine, dd[0].np, sz(opt_added, a));
        if (zero_differ >= 0)
            scn_expect(s, zero_differ == 0,
                       "after each step every rank holds the same parameters: each owner's update broadcast "
                       "(%d of %zu differ)",
                       zero_differ, dd[0].np);
        scn_expect(s, true,
                   "every rank still holds the whole model (%s), its gradients and their buckets (%s): ZeRO-1 shards "
                   "the optimizer state only, and the OOM (%s) stays",
                   sz(model_bytes[0], a), sz(bucket_bytes, b), oom->what);
        return OOM_OK;
    }
    if (myth_shards) {
        if (!single_fits) {
            scn_not_reproduced(s, "at batch %lld the model does not train on one GPU either (peak %s under %s)",
                               (long long)batch, sz(single_peak, a), cap);
            return OOM_OK;
        }
        scn_expect(s, true, "the same model and batch train on one GPU without DDP: peak %s allocated under %s",
                   sz(single_peak, a), cap);
        if (!oom) {
            scn_not_reproduced(s, "the DDP step fits %s too", cap);
            return OOM_OK;
        }
        scn_expect(s, oom != NULL && (strcmp(failed ? failed : "", "backward") == 0 ||
                                      strcmp(failed ? failed : "", "forward") == 0),
                   "under DDP the same training runs out (%s): each rank needs more than one GPU did, not half",
                   oom->what);
        return OOM_OK;
    }
    /* the fixes: one that runs out is its kind's failure (kind_text says so, and it fails the run at the
     * scenario's own parameters) */
    if (oom)
        return OOM_OK;
    scn_expect(s, done == steps, "%d steps on %d ranks fit %s: peak %s allocated, %s reserved on rank 0",
               steps, n, cap, sz(scn_stat(s, "allocated_bytes.all.peak"), a),
               sz(scn_stat(s, "reserved_bytes.all.peak"), b));
    if (dd[0].as_view)
        scn_expect(s, true, "the buckets are the gradients: %s after DDP(model), no second copy (%s of parameters)",
                   sz(bucket_bytes, a), sz(model_bytes[0], c2));
    return OOM_OK;
}

const scenario scenario_data_parallel = {
    .name = "data_parallel",
    .title = "DDP runs out where one GPU did not: gradient buckets are a second copy of the gradients",
    .story = "DistributedDataParallel replicates the model on every rank and adds the Reducer's gradient buckets, "
             "a second copy of every gradient (gradient_as_bucket_view=False, the default), and at the second "
             "forward rebuilds them while NCCL's Work still holds the first bucket: MLP(4096, 4) at batch 2048 "
             "trains on one GPU under 1136 MiB, but under DDP on 2 GPUs step 2's backward runs out on every rank. "
             "gradient_as_bucket_view=True makes .grad views into the buckets and fits; a smaller per-rank batch "
             "fits; a smaller bucket_cap_mb changes how gradients are cut, not their bytes; ZeroRedundancyOptimizer "
             "shards only the optimizer state, which SGD does not keep.",
    .default_budget = (size_t)1136 << 20,
    .ci_budget = (size_t)82 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
