/* sharded_training.c - FSDP2 (fully_shard, ZeRO-3) runs out when the gathered parameters are kept after forward:
 * every rank then holds the whole model beside its shard and its activations.
 *
 * Cause. fully_shard(layer) keeps 1/N of each parameter on each rank (its shard: a padded flat tensor, the
 * parameter a view of it) and all-gathers a layer's parameters only around its use. Before a layer's forward the
 * shards are copied into one flat all-gather buffer (N x the shard bytes, allocated on FSDP's all-gather copy-in
 * stream), all-gathered, and copied out into the unsharded parameters' own storages (the default stream); the
 * buffer is freed after the next layer's copy-out. With reshard_after_forward=True (the default) the unsharded
 * storages are freed after the layer's forward (untyped_storage().resize_(0): the tensors autograd saved keep their
 * shapes, not their bytes) and gathered again in backward, one layer ahead (the default backward prefetch). With
 * reshard_after_forward=False they stay: after forward every rank holds its shard AND the whole unsharded model, and
 * backward's gradients, the reduce-scatter input (a flat copy of a layer's unsharded gradients, on the default
 * stream) and output (the layer's sharded gradients, on the reduce-scatter stream) come on top. PyTorch's caching
 * allocator keeps a segment for the stream it was made for (cachealloc.h, "Streams"): the all-gather buffers and
 * the sharded gradients take segments of their own, which the default stream's requests cannot use.
 *
 * What the user sees. MLP(4096, 8) (512.28 MiB of float32 parameters) at a per-rank batch of 2048, each Linear
 * fully_shard-ed on 2 ranks (256.14 MiB of shards a rank), under a 1200 MiB budget: with
 * reshard_after_forward=False a rank holds 1.03 GiB after forward (its shards, the whole unsharded model and
 * 288 MiB of activations) and the first backward runs out on every rank ("Tried to allocate 64.00 MiB"); with the
 * default a rank holds 544 MiB after forward and three steps fit (peak 896 MiB allocated). The CI scale
 * (MLP(1024, 10), batch 384, 2 steps, under 112 MiB) has the same outcomes at the same steps.
 *
 * The PyTorch code it mirrors (scripts/twins/sharded_training.py runs it with torchrun --nproc_per_node 2):
 *     dist.init_process_group("nccl"); torch.cuda.set_device(rank)
 *     model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())],
 *                           nn.Linear(width, 10)).cuda()
 *     for m in model:
 *         if isinstance(m, nn.Linear):
 *             fully_shard(m, reshard_after_forward=False)   # the bug; True (the default) is the fix
 *     fully_shard(model, reshard_after_forward=False)
 *     opt = torch.optim.SGD(model.parameters(), lr=1e-3)
 *     for step in range(steps):
 *         opt.zero_grad()
 *         x = torch.randn(batch, width, device="cuda")
 *         y = torch.randint(0, 10, (batch,), device="cuda")
 *         loss = F.cross_entropy(model(x), y)
 *         loss.backward()                      # torch.OutOfMemoryError in step 1, on every rank
 *         opt.step()
 * The ranks run in one oomlab process, one simulated device (or GPU) each; forward runs layer by layer on every
 * rank in turn; each rank's backward runs in a thread of its own, the ranks taking turns (one runs at a time) and
 * meeting at each collective, so that each rank's allocator sees exactly its own process's sequence.
 *
 * The fixes, and why they work.
 *   fix-reshard-after-forward  fully_shard(m) with its default reshard_after_forward=True: after a layer's forward
 *       its unsharded parameters are freed, and backward gathers one layer (and prefetches the next) at a time:
 *       at most two layers unsharded instead of the whole model.
 * The myths.
 *   myth-shards-divide-all  "sharding over N ranks divides all memory by N, so each rank can take N times the batch":
 *       the default resharding with a per-rank batch of ranks x batch. Parameters, gradients (and optimizer state)
 *       are divided by N; activations are not: they scale with the per-rank batch, and forward runs out.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/devcomm.h"
#include "run/scenario.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"
#include "training/dist.h"
#include "training/nn.h"

#define CLASSES 10
#define MAX_DEPTH 16
#define MAX_LAYERS (MAX_DEPTH + 1)
#define NP 2 /* parameters of a Linear: weight, bias */
#define MAX_STEPS 8
#define MIB ((int64_t)1 << 20)
/* FSDPCommContext's streams, as the allocator sees them: only these two allocate */
#define STREAM_DEFAULT 0
#define STREAM_ALL_GATHER_COPY_IN 1 /* all_gather_copy_in_stream: the all-gather output */
#define STREAM_REDUCE_SCATTER 2     /* reduce_scatter_stream: the reduce-scatter output (the sharded gradients) */

static const scenario_param params[] = {
    /* name, help, full, min, max, ci */
    {"width", "features of every layer of MLP(width, depth)", 4096, 16, 8192, 1024},
    {"depth", "hidden [Linear(width, width), ReLU] blocks before Linear(width, 10)", 8, 1, MAX_DEPTH, 10},
    {"batch", "rows of each rank's randn(batch, width) input per step", 2048, 1, 65536, 384},
    {"ranks", "processes (one GPU each) in the process group", 2, 2, 4, 0},
    {"steps", "training steps (zero_grad, forward, backward, SGD step)", 3, 2, MAX_STEPS, 2},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "fully_shard(m, reshard_after_forward=False): the gathered parameters stay after forward", ""},
    {"fix-reshard-after-forward", VARIANT_FIX,
     "fully_shard(m) (reshard_after_forward=True): parameters freed after forward, gathered again in backward", ""},
    {"myth-shards-divide-all", VARIANT_MYTH,
     "\"sharding divides all memory by N\": the default resharding at N times the per-rank batch", ""},
};

static const char *sz(int64_t bytes, char *buf) { return memstats_format_size((uint64_t)(bytes < 0 ? 0 : bytes), buf, 32); }

/* ---- one rank's FSDP2 --------------------------------------------------------------------------------------- */

/* FSDPParam: a parameter sharded on dim 0 in chunks of ceil(rows / N) rows (torch.chunk), padded to N chunks. */
typedef struct fsdp_param {
    int ndim;
    int64_t shape[2];    /* the original parameter's */
    int64_t row;         /* elements of one row */
    int64_t chunk_rows;  /* padded rows of a shard */
    int64_t local_rows;  /* this rank's unpadded rows */
    tensor *shard;       /* _sharded_param_data: padded, flat, chunk_rows x row */
    tensor *sharded;     /* the sharded parameter the optimizer steps: the shard's local rows (a leaf) */
    tensor *ag_output;   /* all_gather_outputs[0]: N x the shard, flat; its storage resize_(0) while sharded */
    tensor *unsharded;   /* _unsharded_param: the original shape over ag_output's storage (a leaf) */
} fsdp_param;

typedef enum fsdp_state { ST_IDLE, ST_FORWARD, ST_PRE_BACKWARD, ST_POST_BACKWARD } fsdp_state;

/* FSDPParamGroup: one Linear's parameters. */
typedef struct fsdp_group {
    fsdp_param p[NP];
    bool unsharded;         /* _sharded_state == UNSHARDED */
    tensor *ag_result;      /* _all_gather_result: an all-gather issued, its copy-out not yet done */
    fsdp_state state;
    struct ag_node *out_fn; /* the grad_fn of the layer's output (borrowed): its pre-backward hook's node */
    bool input_requires_grad; /* its post_backward runs from autograd (RegisterPostBackwardFunction), else at the end */
    int grads_seen;
} fsdp_group;

struct fsdp_world;

typedef struct fsdp_rank {
    rt *r;
    int k;
    nn_linear lin[MAX_LAYERS];
    int nl;
    fsdp_group g[MAX_LAYERS];
    bool reshard_after_forward;
    bool lazy_done;
    tensor *ag_state;  /* comm_ctx.all_gather_state: the last forward all-gather's output, freed after the next
                          copy-out */
    tensor *rs_state;  /* comm_ctx.reduce_scatter_state: the last reduce-scatter's input */
    optimizer *opt;
    tensor *x, *y, *loss;
    struct fsdp_world *w;
    oom_status bw_status;
} fsdp_rank;

/* The ranks, and the turn-taking of their backward threads (see run_backward). */
typedef struct fsdp_world {
    int n;
    devcomm *c;
    fsdp_rank *rk[DEVCOMM_MAX_RANKS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn;                          /* the rank whose thread may run */
    bool active[DEVCOMM_MAX_RANKS];    /* its backward has not ended */
    bool waiting[DEVCOMM_MAX_RANKS];   /* arrived at the pending collective */
    tensor *cin[DEVCOMM_MAX_RANKS], *cout[DEVCOMM_MAX_RANKS];
    devcomm_op cop;
    oom_status cst;
    unsigned gen;
} fsdp_world;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* FSDPParam.__init__ (_init_sharded_param): the padded shard new_zeros'd, this rank's chunk copied in, the sharded
 * parameter a view of it. The full parameter is the caller's to free. */
static bool shard_param(fsdp_rank *rk, fsdp_param *fp, tensor *full, int n)
{
    fp->ndim = full->ndim;
    memcpy(fp->shape, full->shape, sizeof fp->shape);
    fp->row = full->ndim == 2 ? full->shape[1] : 1;
    fp->chunk_rows = ceil_div(full->shape[0], n);
    int64_t start = fp->chunk_rows * rk->k;
    fp->local_rows = full->shape[0] - start < 0 ? 0 : full->shape[0] - start;
    if (fp->local_rows > fp->chunk_rows)
        fp->local_rows = fp->chunk_rows;
    fp->shard = tensor_zeros(rk->r, full->dt, SHAPE(fp->chunk_rows * fp->row));
    if (!fp->shard)
        return false;
    bool ok = true;
    if (fp->local_rows > 0) {
        int64_t numel = fp->local_rows * fp->row;
        tensor *dst = tensor_alias(fp->shard, 0, 1, &numel, false);
        tensor *src = tensor_alias(full, (size_t)(start * fp->row) * dtype_size(full->dt), 1, &numel, false);
        ok = dst && src && op_copy_(dst, src);
        tensor_release(dst);
        tensor_release(src);
    }
    int64_t lshape[2] = {fp->local_rows, fp->row};
    fp->sharded = ok ? tensor_alias(fp->shard, 0, fp->ndim, lshape, false) : NULL;
    if (fp->sharded)
        tensor_set_requires_grad(fp->sharded, true);
    return fp->sharded != NULL && rt_ok(rk->r);
}

static void param_free(fsdp_param *fp)
{
    tensor_assign(&fp->unsharded, NULL);
    tensor_assign(&fp->ag_output, NULL);
    tensor_assign(&fp->sharded, NULL);
    tensor_assign(&fp->shard, NULL);
}

static int64_t group_shard_numel(const fsdp_group *g)
{
    int64_t t = 0;
    for (int j = 0; j < NP; j++)
        t += g->p[j].chunk_rows * g->p[j].row;
    return t;
}

/* ---- the collectives, in turn ------------------------------------------------------------------------------- */

/* Every rank's part of one collective: in[k], out[k] of rank k. Forward calls it for all ranks at once (threads
 * off); in backward each rank's thread deposits its part, hands the turn to the next rank, and the last to arrive
 * runs the collective for all and hands the turn back to the first. A rank whose backward ended (an OOM) never
 * arrives: the others' collective fails with OOM_EINVAL, as NCCL would wait forever. */
static oom_status run_collective(fsdp_world *w, devcomm_op op, tensor *const *out, tensor *const *in)
{
    oom_status st = op == COMM_ALL_GATHER ? dist_all_gather_into_tensor(w->c, out, in)
                                          : dist_reduce_scatter_tensor(w->c, out, in);
    if (st == OOM_OK && op == COMM_REDUCE_SCATTER) /* ReduceOp.AVG for float32 (_get_gradient_divide_factors) */
        for (int k = 0; k < w->n && st == OOM_OK; k++)
            if (!op_mul_(out[k], 1.0 / w->n))
                st = rt_status(out[k]->rt);
    return st;
}

static bool threaded; /* backward: ranks run in threads (set only while they do, by the main thread) */

static int next_active(const fsdp_world *w, int from)
{
    for (int j = from; j < w->n; j++)
        if (w->active[j] && !w->waiting[j])
            return j;
    return -1;
}

static oom_status collective(fsdp_rank *rk, devcomm_op op, tensor *out, tensor *in)
{
    fsdp_world *w = rk->w;
    if (!threaded)
        return OOM_OK; /* forward: the caller runs it for all ranks */
    pthread_mutex_lock(&w->mu);
    w->cin[rk->k] = in;
    w->cout[rk->k] = out;
    w->cop = op;
    w->waiting[rk->k] = true;
    unsigned gen = w->gen;
    int nxt = next_active(w, 0);
    if (nxt < 0) { /* the last to arrive: every active rank waits here */
        bool all = true;
        for (int j = 0; j < w->n; j++)
            all = all && w->active[j];
        w->cst = all ? run_collective(w, op, w->cout, w->cin) : OOM_EINVAL;
        memset(w->waiting, 0, sizeof w->waiting);
        w->gen++;
        w->turn = next_active(w, 0);
        pthread_cond_broadcast(&w->cv);
    } else {
        w->turn = nxt;
        pthread_cond_broadcast(&w->cv);
    }
    while (w->gen == gen || w->turn != rk->k)
        pthread_cond_wait(&w->cv, &w->mu);
    oom_status st = w->cst;
    pthread_mutex_unlock(&w->mu);
    if (st != OOM_OK && rt_ok(rk->r))
        rt_fail(rk->r, st, "%s: another rank left the collective", devcomm_op_str(op));
    return st;
}

/* ---- FSDPParamGroup ----------------------------------------------------------------------------------------- */

/* unshard(): foreach_all_gather. The flat output (N x the shard bytes) is allocated on the all-gather copy-in stream
 * (forward and pre-backward: get_all_gather_streams), this rank's shards copied into its chunk, then all-gathered.
 * Returns false on a failure (in the rt). */
static bool unshard(fsdp_rank *rk, fsdp_group *g)
{
    if (g->ag_result || g->unsharded)
        return true;
    int prev = rt_set_stream(rk->r, STREAM_ALL_GATHER_COPY_IN);
    int64_t per = group_shard_numel(g), numel = per * rk->w->n;
    tensor *out = tensor_empty(rk->r, g->p[0].shard->dt, 1, &numel);
    rt_set_stream(rk->r, prev);
    if (!out)
        return false;
    tensor *in = tensor_alias(out, (size_t)(per * rk->k) * dtype_size(out->dt), 1, &per, false);
    size_t off = 0;
    bool ok = in != NULL;
    for (int j = 0; j < NP && ok; j++) { /* all_gather_copy_in: _foreach_copy_ into the input's splits */
        int64_t m = tensor_numel(g->p[j].shard);
        tensor *dst = tensor_alias(in, in->offset + off, 1, &m, false);
        ok = dst && op_copy_(dst, g->p[j].shard);
        tensor_release(dst);
        off += (size_t)m * dtype_size(out->dt);
    }
    g->ag_result = out;
    if (ok && threaded)
        ok = collective(rk, COMM_ALL_GATHER, out, in) == OOM_OK;
    tensor_release(in);
    return ok && rt_ok(rk->r);
}

/* foreach_all_gather_copy_out: each parameter's unsharded storage (torch.empty the first time, then
 * alloc_storage's resize_ back to full size) on the current stream, the gathered chunks split into them; the
 * version counters kept (_unsafe_preserve_version_counter), since autograd saved these tensors in forward. */
static bool copy_out(fsdp_rank *rk, fsdp_group *g)
{
    const int n = rk->w->n;
    for (int j = 0; j < NP; j++) {
        fsdp_param *fp = &g->p[j];
        int64_t numel = fp->chunk_rows * fp->row * n;
        if (!fp->ag_output) {
            fp->ag_output = tensor_empty(rk->r, fp->shard->dt, 1, &numel);
            if (!fp->ag_output)
                return false;
            fp->unsharded = tensor_alias(fp->ag_output, 0, fp->ndim, fp->shape, false);
            tensor_set_requires_grad(fp->unsharded, true);
        } else if (tensor_storage_resize_(fp->ag_output, (size_t)numel * dtype_size(fp->shard->dt)) != OOM_OK) {
            return false;
        }
    }
    size_t es = dtype_size(g->p[0].shard->dt);
    int64_t per = group_shard_numel(g);
    for (int c = 0; c < n; c++) { /* split_with_sizes_copy(all_gather_output.view(N, -1), dim=1) */
        size_t off = 0;
        for (int j = 0; j < NP; j++) {
            fsdp_param *fp = &g->p[j];
            int64_t m = fp->chunk_rows * fp->row;
            uint32_t v = fp->ag_output->st->version;
            tensor *src = tensor_alias(g->ag_result, (size_t)(per * c) * es + off, 1, &m, false);
            tensor *dst = tensor_alias(fp->ag_output, (size_t)(m * c) * es, 1, &m, false);
            bool ok = src && dst && op_copy_(dst, src);
            tensor_release(src);
            tensor_release(dst);
            fp->ag_output->st->version = v;
            if (!ok)
                return false;
            off += (size_t)m * es;
        }
    }
    g->unsharded = true;
    return true;
}

/* wait_for_unshard(): in forward the previous all-gather's output goes first (all_gather_state), this one is kept
 * until the next copy-out; elsewhere it is freed right after the copy-out. */
static bool wait_for_unshard(fsdp_rank *rk, fsdp_group *g)
{
    if (!g->ag_result)
        return true;
    if (g->state == ST_FORWARD)
        tensor_assign(&rk->ag_state, NULL);
    bool ok = copy_out(rk, g);
    if (g->state == ST_FORWARD) { /* all_gather_state takes the reference */
        rk->ag_state = g->ag_result;
        g->ag_result = NULL;
    }
    tensor_assign(&g->ag_result, NULL);
    return ok;
}

/* reshard(): to_sharded, free_unsharded_param: every unsharded storage resize_(0), in parameter order. */
static void reshard(fsdp_rank *rk, fsdp_group *g)
{
    if (!g->unsharded)
        return;
    for (int j = 0; j < NP; j++)
        tensor_storage_resize_(g->p[j].ag_output, 0);
    g->unsharded = false;
    (void)rk;
}

/* post_backward(): the unsharded gradients taken from the parameters, the group resharded, the previous
 * reduce-scatter's input freed, then foreach_reduce: the reduce-scatter input (a flat copy of the gradients in
 * N chunks, chunk_cat) on the default stream, the gradients freed, the output on the reduce-scatter stream, whose
 * views become the sharded parameters' .grad (or are added to it). */
static bool post_backward(fsdp_rank *rk, fsdp_group *g)
{
    g->state = ST_POST_BACKWARD;
    tensor *grads[NP] = {NULL};
    int have = 0;
    for (int j = 0; j < NP; j++) {
        if (g->p[j].unsharded && g->p[j].unsharded->grad) {
            grads[j] = g->p[j].unsharded->grad;
            g->p[j].unsharded->grad = NULL;
            have++;
        }
    }
    reshard(rk, g);
    if (have == 0)
        return true;
    tensor_assign(&rk->rs_state, NULL);
    const int n = rk->w->n;
    int64_t per = group_shard_numel(g), numel = per * n;
    dtype dt = g->p[0].shard->dt;
    size_t es = dtype_size(dt);
    tensor *in = tensor_empty(rk->r, dt, 1, &numel);
    bool ok = in != NULL;
    for (int c = 0; c < n && ok; c++) { /* chunk_cat(grads, dim=0, num_chunks=N): padding rows are zeros */
        size_t off = 0;
        for (int j = 0; j < NP && ok; j++) {
            fsdp_param *fp = &g->p[j];
            int64_t rows = fp->shape[0] - fp->chunk_rows * c;
            rows = rows < 0 ? 0 : rows > fp->chunk_rows ? fp->chunk_rows : rows;
            int64_t m = rows * fp->row;
            if (grads[j] && m > 0) {
                tensor *dst = tensor_alias(in, (size_t)(per * c) * es + off, 1, &m, false);
                tensor *src = tensor_alias(grads[j], grads[j]->offset + (size_t)(fp->chunk_rows * c * fp->row) * es,
                                           1, &m, false);
                ok = dst && src && op_copy_(dst, src);
                tensor_release(dst);
                tensor_release(src);
            }
            int64_t pad = (fp->chunk_rows - rows) * fp->row;
            if (pad > 0 && ok && rk->r->computes) {
                float *zeros = calloc((size_t)pad, es);
                tensor *dst = tensor_alias(in, (size_t)(per * c) * es + off + (size_t)m * es, 1, &pad, false);
                ok = zeros && dst && tensor_copy_from_host_(dst, zeros) == OOM_OK;
                tensor_release(dst);
                free(zeros);
            }
            off += (size_t)(fp->chunk_rows * fp->row) * es;
        }
    }
    for (int j = 0; j < NP; j++) /* unsharded_grads.clear() */
        tensor_release(grads[j]);
    tensor *out = NULL;
    if (ok) {
        int prev = rt_set_stream(rk->r, STREAM_REDUCE_SCATTER);
        out = tensor_empty(rk->r, dt, 1, &per);
        rt_set_stream(rk->r, prev);
        ok = out != NULL;
    }
    if (ok && threaded)
        ok = collective(rk, COMM_REDUCE_SCATTER, out, in) == OOM_OK;
    size_t off = 0;
    for (int j = 0; j < NP && ok; j++) {
        fsdp_param *fp = &g->p[j];
        tensor *view = tensor_alias(out, off, fp->ndim, fp->sharded->shape, false);
        if (!view) {
            ok = false;
        } else if (fp->sharded->grad) {
            ok = op_add_(fp->sharded->grad, view, 1.0) != NULL;
            tensor_release(view);
        } else {
            tensor_assign(&fp->sharded->grad, view);
        }
        off += (size_t)(fp->chunk_rows * fp->row) * es;
    }
    tensor_release(out);
    tensor_assign(&rk->rs_state, in); /* reduce_scatter_state takes the reference */
    return ok && rt_ok(rk->r);
}

/* pre_backward(): the group unsharded (a no-op when still unsharded, or when prefetched), then the default backward
 * prefetch: the previous layer's all-gather issued. */
static bool pre_backward(fsdp_rank *rk, int i)
{
    fsdp_group *g = &rk->g[i];
    if (g->state == ST_PRE_BACKWARD)
        return true;
    g->state = ST_PRE_BACKWARD;
    if (!unshard(rk, g) || !wait_for_unshard(rk, g))
        return false;
    if (i > 0) { /* _backward_prefetch: the reverse post-forward order */
        fsdp_group *t = &rk->g[i - 1];
        fsdp_state old = t->state;
        t->state = ST_PRE_BACKWARD; /* use_training_state(PRE_BACKWARD) */
        bool ok = unshard(rk, t);
        t->state = old;
        return ok;
    }
    return true;
}

/* The hooks autograd calls on this rank: the pre-backward unshard on each layer's output node, and the
 * post-backward reduce-scatter once a group's last gradient is accumulated (RegisterPostBackwardFunction runs right
 * after the AccumulateGrad nodes, which the engine runs first). */
static oom_status pre_node_hook(void *ctx, ag_node *node)
{
    fsdp_rank *rk = ctx;
    for (int i = 0; i < rk->nl; i++)
        if (rk->g[i].out_fn == node)
            return pre_backward(rk, i) ? OOM_OK : rt_status(rk->r);
    return OOM_OK;
}

static oom_status post_acc_hook(void *ctx, tensor *leaf)
{
    fsdp_rank *rk = ctx;
    for (int i = 0; i < rk->nl; i++)
        for (int j = 0; j < NP; j++)
            if (rk->g[i].p[j].unsharded == leaf) {
                fsdp_group *g = &rk->g[i];
                if (++g->grads_seen == NP && g->input_requires_grad)
                    return post_backward(rk, g) ? OOM_OK : rt_status(rk->r);
                return OOM_OK;
            }
    return OOM_OK;
}

/* ---- model, forward, backward -------------------------------------------------------------------------------- */

/* model = MLP(...).cuda(); fully_shard(each Linear); fully_shard(model): the shards made layer by layer, each
 * layer's full parameters freed when its fully_shard returns (bias, then weight: the list's order reversed). */
static bool build(fsdp_rank *rk, int64_t width, int depth)
{
    rk->nl = depth + 1;
    for (int i = 0; i < rk->nl; i++)
        if (nn_linear_init(&rk->lin[i], rk->r, width, i < depth ? width : CLASSES, true, DT_F32) != OOM_OK)
            return false;
    return true;
}

static bool shard_model(fsdp_rank *rk)
{
    for (int i = 0; i < rk->nl; i++) {
        tensor *full[NP] = {rk->lin[i].weight, rk->lin[i].bias};
        for (int j = 0; j < NP; j++)
            if (!shard_param(rk, &rk->g[i].p[j], full[j], rk->w->n))
                return false;
        tensor_assign(&rk->lin[i].bias, NULL);
        tensor_assign(&rk->lin[i].weight, NULL);
    }
    tensor *ps[MAX_LAYERS * NP];
    size_t np = 0;
    for (int i = 0; i < rk->nl; i++)
        for (int j = 0; j < NP; j++)
            ps[np++] = rk->g[i].p[j].sharded;
    rk->opt = optim_sgd(rk->r, ps, np, 1e-3, 0.0, 0.0, 0.0, false);
    return rk->opt != NULL;
}

/* lazy_init's reset_sharded_param: a rank whose chunk has fewer rows than the padded shard gets a fresh padded
 * shard (new_zeros, its rows copied in) and the old one is freed. */
static bool lazy_init(fsdp_rank *rk)
{
    if (rk->lazy_done)
        return true;
    rk->lazy_done = true;
    for (int i = 0; i < rk->nl; i++)
        for (int j = 0; j < NP; j++) {
            fsdp_param *fp = &rk->g[i].p[j];
            if (fp->local_rows == fp->chunk_rows)
                continue;
            tensor *fresh = tensor_zeros(rk->r, fp->shard->dt, SHAPE(fp->chunk_rows * fp->row));
            if (!fresh)
                return false;
            int64_t m = fp->local_rows * fp->row;
            if (m > 0) {
                tensor *dst = tensor_alias(fresh, 0, 1, &m, false), *src = tensor_alias(fp->shard, 0, 1, &m, false);
                bool ok = dst && src && op_copy_(dst, src);
                tensor_release(dst);
                tensor_release(src);
                if (!ok) {
                    tensor_release(fresh);
                    return false;
                }
            }
            tensor *view = tensor_alias(fresh, 0, fp->ndim, fp->sharded->shape, false);
            tensor_set_data(fp->sharded, view); /* sharded_param._local_tensor = the fresh shard's rows */
            tensor_release(view);
            tensor_assign(&fp->shard, fresh);
        }
    return true;
}

static void io_free(fsdp_rank *rk)
{
    tensor_assign(&rk->x, NULL);
    tensor_assign(&rk->y, NULL);
    tensor_assign(&rk->loss, NULL);
}

/* One step's forward on every rank, layer by layer: pre_forward (unshard, the all-gather for all ranks,
 * wait_for_unshard), the layer, post_forward (reshard); the root's post_forward frees the last all-gather output.
 * Every rank runs each phase (they fail alike); false when one failed (its OOM not caught here). */
static bool forward(fsdp_rank *const *rks, int n, int64_t batch, int64_t width)
{
    tensor *h[DEVCOMM_MAX_RANKS] = {NULL};
    bool bad[DEVCOMM_MAX_RANKS] = {false}, any = false;
    for (int k = 0; k < n; k++) {
        fsdp_rank *rk = rks[k];
        optim_zero_grad(rk->opt, true);
        tensor *x = tensor_randn(rk->r, DT_F32, SHAPE(batch, width), 0.0, 1.0);
        if (x)
            tensor_assign(&rk->x, x);
        tensor *y = x ? tensor_randint(rk->r, SHAPE(batch), 0, CLASSES) : NULL;
        if (y)
            tensor_assign(&rk->y, y);
        if (!y || !lazy_init(rk))
            bad[k] = any = true;
        else
            h[k] = tensor_retain(rk->x);
    }
    for (int i = 0; i < rks[0]->nl && !any; i++) {
        tensor *in[DEVCOMM_MAX_RANKS], *out[DEVCOMM_MAX_RANKS];
        bool issued = false;
        for (int k = 0; k < n; k++) {
            fsdp_group *g = &rks[k]->g[i];
            g->state = ST_FORWARD;
            g->input_requires_grad = h[k]->requires_grad;
            issued = g->ag_result == NULL && !g->unsharded;
            if (!unshard(rks[k], g))
                bad[k] = any = true;
            out[k] = g->ag_result;
        }
        if (any)
            break;
        if (issued) { /* the all-gather, every rank at once */
            int64_t per = group_shard_numel(&rks[0]->g[i]);
            for (int k = 0; k < n; k++)
                in[k] = tensor_alias(out[k], (size_t)(per * k) * dtype_size(out[k]->dt), 1, &per, false);
            if (run_collective(rks[0]->w, COMM_ALL_GATHER, out, in) != OOM_OK)
                bad[0] = any = true;
            for (int k = 0; k < n; k++)
                tensor_release(in[k]);
        }
        for (int k = 0; k < n && !any; k++) {
            fsdp_rank *rk = rks[k];
            fsdp_group *g = &rk->g[i];
            tensor *o = wait_for_unshard(rk, g) ? op_linear(h[k], g->p[0].unsharded, g->p[1].unsharded) : NULL;
            if (o)
                g->out_fn = o->grad_fn;
            tensor *a = !o ? NULL : i + 1 < rk->nl ? op_relu(o) : tensor_retain(o);
            tensor_release(o);
            tensor_assign(&h[k], NULL);
            h[k] = a;
            if (!a) {
                bad[k] = true;
                continue;
            }
            if (rk->reshard_after_forward) /* post_forward */
                reshard(rk, g);
            g->state = ST_IDLE;
        }
        for (int k = 0; k < n; k++)
            any = any || bad[k];
    }
    for (int k = 0; k < n && !any; k++) {
        fsdp_rank *rk = rks[k];
        tensor_assign(&rk->ag_state, NULL); /* the root's post_forward */
        tensor *loss = op_cross_entropy(h[k], rk->y);
        if (!loss)
            bad[k] = true;
        else
            tensor_assign(&rk->loss, loss);
    }
    for (int k = 0; k < n; k++) {
        tensor_release(h[k]);
        any = any || bad[k];
    }
    return !any;
}

/* loss.backward() on one rank, then the root's final callback: post_backward for the groups autograd did not
 * reach (the first layer: its input needs no gradient), the last reduce-scatter input freed. */
static void *backward_thread(void *arg)
{
    fsdp_rank *rk = arg;
    fsdp_world *w = rk->w;
    pthread_mutex_lock(&w->mu);
    while (w->turn != rk->k)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < rk->nl; i++)
        rk->g[i].grads_seen = 0;
    oom_status st = autograd_backward(rk->loss, NULL, false);
    for (int i = 0; i < rk->nl && st == OOM_OK; i++) {
        fsdp_group *g = &rk->g[i];
        if (g->state != ST_POST_BACKWARD && !post_backward(rk, g))
            st = rt_status(rk->r);
    }
    for (int i = 0; i < rk->nl; i++) { /* finalize_backward */
        tensor_assign(&rk->g[i].ag_result, NULL);
        rk->g[i].state = ST_IDLE;
    }
    tensor_assign(&rk->rs_state, NULL);
    rk->bw_status = st;
    pthread_mutex_lock(&w->mu);
    w->active[rk->k] = false;
    int nxt = next_active(w, 0);
    bool stranded = false;
    for (int j = 0; j < w->n; j++)
        stranded = stranded || w->waiting[j];
    if (nxt < 0 && stranded) { /* the others wait at a collective this rank will never join */
        w->cst = OOM_EINVAL;
        memset(w->waiting, 0, sizeof w->waiting);
        w->gen++;
        nxt = next_active(w, 0);
    }
    w->turn = nxt;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Every rank's backward, each in its thread, one running at a time (rank 0 first; a rank hands over at each
 * collective and when it ends). Returns false when a thread could not start (the rest then run in turn anyway). */
static void backward(fsdp_world *w)
{
    pthread_t th[DEVCOMM_MAX_RANKS];
    bool started[DEVCOMM_MAX_RANKS] = {false};
    w->turn = 0;
    w->gen = 0;
    for (int k = 0; k < w->n; k++) {
        w->active[k] = true;
        w->waiting[k] = false;
        autograd_set_pre_node_hook(w->rk[k]->r, pre_node_hook, w->rk[k]);
        autograd_set_post_accumulate_hook(w->rk[k]->r, post_acc_hook, w->rk[k]);
    }
    threaded = true;
    for (int k = 0; k < w->n; k++)
        started[k] = pthread_create(&th[k], NULL, backward_thread, w->rk[k]) == 0;
    for (int k = 0; k < w->n; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            backward_thread(w->rk[k]);
    }
    threaded = false;
    for (int k = 0; k < w->n; k++) {
        autograd_set_pre_node_hook(w->rk[k]->r, NULL, NULL);
        autograd_set_post_accumulate_hook(w->rk[k]->r, NULL, NULL);
    }
}

/* ---- the run ------------------------------------------------------------------------------------------------ */

static oom_status run(scn *s, const scenario_variant *v)
{
    const int64_t width = scn_param(s, "width"), depth = scn_param(s, "depth");
    const int n = (int)scn_param(s, "ranks"), steps = (int)scn_param(s, "steps");
    const bool myth = strcmp(v->name, "myth-shards-divide-all") == 0;
    const int64_t batch = scn_param(s, "batch") * (myth ? n : 1);
    const bool raf = strcmp(v->name, "bug") != 0;
    char a[32], b[32], c2[32], cap[32];
    sz((int64_t)scn_budget(s), cap);

    devcomm *c = scn_comm(s, n);
    if (!c)
        return rt_status(scn_rt(s));
    fsdp_rank rr[DEVCOMM_MAX_RANKS];
    fsdp_world w;
    memset(rr, 0, sizeof rr);
    memset(&w, 0, sizeof w);
    w.n = n;
    w.c = c;
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    bool built = true;
    for (int k = 0; k < n; k++) { /* model = MLP(width, depth).cuda() on every rank */
        rr[k].r = scn_rt_device(s, k);
        rr[k].k = k;
        rr[k].w = &w;
        rr[k].reshard_after_forward = raf;
        w.rk[k] = &rr[k];
        built = built && build(&rr[k], width, (int)depth) && !scn_caught(s, "building the model");
    }
    scn_step(s, built ? "model" : "OOM building the model");
    int64_t model_bytes = scn_stat_device(s, 0, "allocated_bytes.all.current");
    for (int k = 0; k < n && built; k++) /* fully_shard(each Linear), fully_shard(model); SGD */
        built = shard_model(&rr[k]) && !scn_caught(s, "fully_shard(model)");
    if (built)
        scn_step(s, "fully_shard(model)");
    int64_t shard_bytes = built ? scn_stat_device(s, 0, "allocated_bytes.all.current") : 0;

    int done = 0;
    const char *failed = NULL;
    int64_t fwd_bytes = 0;
    char what[64];
    for (int k = 1; built && k <= steps && !failed && rt_ok(scn_rt(s)); k++) {
        snprintf(what, sizeof what, "step %d: forward", k);
        if (!forward(w.rk, n, batch, width)) {
            for (int r = 0; r < n; r++)
                scn_caught(s, what);
            failed = "forward";
            break;
        }
        scn_step(s, "%s", what);
        if (k == 1)
            fwd_bytes = scn_stat_device(s, 0, "allocated_bytes.all.current");
        snprintf(what, sizeof what, "step %d: backward", k);
        backward(&w);
        bool bad = false;
        for (int r = 0; r < n; r++)
            if (rr[r].bw_status != OOM_OK && scn_caught(s, what))
                bad = true;
        if (bad || !rt_ok(scn_rt(s))) {
            failed = "backward";
            break;
        }
        scn_step(s, "%s", what);
        snprintf(what, sizeof what, "step %d: optimizer step", k);
        for (int r = 0; r < n; r++)
            if (optim_step(rr[r].opt) != OOM_OK && scn_caught(s, what))
                bad = true;
        if (bad) {
            failed = "optimizer step";
            break;
        }
        scn_step(s, "%s", what);
        done = k;
    }
    if (failed)
        scn_step(s, "step %d: %s: OOM", done + 1, failed);
    for (int k = 0; k < n; k++) { /* del loss, y, x, opt, model */
        fsdp_rank *rk = &rr[k];
        io_free(rk);
        tensor_assign(&rk->ag_state, NULL);
        tensor_assign(&rk->rs_state, NULL);
        optim_free(rk->opt);
        for (int i = 0; i < rk->nl; i++) {
            tensor_assign(&rk->g[i].ag_result, NULL);
            for (int j = 0; j < NP; j++)
                param_free(&rk->g[i].p[j]);
            nn_linear_free(&rk->lin[i]);
        }
    }
    scn_step(s, "everything released");
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    if (!rt_ok(scn_rt(s)))
        return rt_status(scn_rt(s));

    /* ---- what each variant must show, at these parameters ---- */
    const scn_oom *oom = scn_first_oom(s);
    if (!built) {
        scn_not_reproduced(s, "MLP(%lld, %lld) does not fit %s on each of %d ranks before sharding",
                           (long long)width, (long long)depth, cap, n);
        return OOM_OK;
    }
    scn_expect(s, shard_bytes * n >= model_bytes && shard_bytes * n <= model_bytes + 4 * MIB,
               "fully_shard keeps 1/%d of the model on each rank: %s of %s", n, sz(shard_bytes, a),
               sz(model_bytes, b));
    if (oom)
    {
        scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
                   "the OOM (%s, on rank %d) is the budget's: %s reserved + a new %s segment exceed %s", oom->what,
                   oom->device, sz((int64_t)oom->reserved, a), sz((int64_t)oom->alloc_size, b), cap);
        int ranks_oom = 0;
        for (int k = 0; k < n; k++)
            ranks_oom += scn_stat_device(s, k, "num_ooms") > 0;
        scn_expect(s, ranks_oom == n, "every rank runs out at the same point (%d of %d ranks)", ranks_oom, n);
    }
    if (v->kind == VARIANT_BUG) {
        if (!oom) {
            scn_not_reproduced(s, "with the gathered parameters kept, the step still fits %s (peak %s)", cap,
                               sz(scn_stat(s, "allocated_bytes.all.peak"), a));
            return OOM_OK;
        }
        if (fwd_bytes > 0)
            scn_expect(s, fwd_bytes - shard_bytes >= model_bytes,
                       "after forward every rank holds the whole unsharded model (%s) beside its shards (%s): %s more "
                       "than after fully_shard",
                       sz(model_bytes, a), sz(shard_bytes, b), sz(fwd_bytes - shard_bytes, c2));
        else
            scn_expect(s, true, "the gathered layers and the activations do not fit %s in step 1's forward", cap);
        return OOM_OK;
    }
    if (myth) {
        if (!oom) {
            scn_not_reproduced(s, "at a per-rank batch of %lld the step fits %s (peak %s)", (long long)batch, cap,
                               sz(scn_stat(s, "allocated_bytes.all.peak"), a));
            return OOM_OK;
        }
        scn_expect(s, true,
                   "the shards are 1/%d of the model (%s of %s), but the activations grow with the per-rank batch "
                   "(%lld): %s runs out (%s)",
                   n, sz(shard_bytes, a), sz(model_bytes, b), (long long)batch, failed ? failed : "the step",
                   oom->what);
        return OOM_OK;
    }
    if (oom)
        return OOM_OK; /* a fix that runs out: its kind's check fails it */
    scn_expect(s, done == steps, "%d steps on %d ranks fit %s: peak %s allocated, %s reserved on rank 0", steps, n,
               cap, sz(scn_stat(s, "allocated_bytes.all.peak"), a), sz(scn_stat(s, "reserved_bytes.all.peak"), b));
    scn_expect(s, fwd_bytes > shard_bytes && fwd_bytes - shard_bytes < model_bytes,
               "after forward a rank holds its shards and the activations (%s above the shards), no unsharded layer",
               sz(fwd_bytes - shard_bytes, a));
    return OOM_OK;
}

const scenario scenario_sharded_training = {
    .name = "sharded_training",
    .title = "FSDP2 runs out when the gathered parameters are kept after forward (reshard_after_forward=False)",
    .story = "fully_shard keeps 1/N of each parameter on each rank and all-gathers a layer's parameters around its "
             "use (the all-gather buffer on its own stream); with reshard_after_forward=False the unsharded "
             "parameters stay after forward, so every rank holds the whole model beside its shard and the "
             "activations, and backward runs out. The default reshard_after_forward=True frees them after each "
             "layer's forward and fits; sharding does not divide the activations, so N times the per-rank batch "
             "runs out.",
    .default_budget = (size_t)1200 << 20,
    .ci_budget = (size_t)112 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
