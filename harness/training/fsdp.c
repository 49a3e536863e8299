/* fsdp.c - FSDP2's fully_shard over an MLP on N ranks. See fsdp.h. */
#include "training/fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/autograd.h"
#include "runtime/runtime.h"
#include "runtime/ops.h"
#include "runtime/reduce_config.h"
#include "training/dist.h"

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
    for (int j = 0; j < FSDP_NP; j++)
        t += g->p[j].chunk_rows * g->p[j].row;
    return t;
}

/* ---- the collectives, in turn ------------------------------------------------------------------------------- */

/* Every rank's part of one collective: in[k], out[k] of rank k. Each rank's thread (forward and backward alike)
 * deposits its part, hands the turn to the next rank, and the last to arrive runs the collective for all and hands
 * the turn back to the first. A rank whose phase ended (an OOM) never arrives: the others' collective fails with
 * OOM_EINVAL, as NCCL would wait forever. */
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

/* ---- the CUDA kernels' packed metadata ----------------------------------------------------------------------- */

/* split_with_sizes_copy and _chunk_cat's CUDA fast paths (aten/src/ATen/native/cuda/TensorShape.cu) pack their
 * per-split vectors into one int64 tensor copied to the device (detail::pack_vecs: pinned host, then .to(device)):
 * a device allocation of that many int64, freed when the op returns. Both launch blocks of BLOCK_SIZE 128 threads
 * moving BYTES_PER_THREAD 16 bytes each. */
#define TS_BLOCK_BYTES (128 * 16)

static bool packed_metadata(fsdp_rank *rk, int64_t numel, tensor **out)
{
    *out = tensor_empty(rk->r, DT_I64, 1, &numel);
    return *out != NULL;
}

/* split_with_sizes_copy_out_cuda_contiguous_no_cast over all_gather_output.view(N, -1), dim=1: dst and src base
 * addresses and chunk sizes (one per split), block_idx_to_split_idx (one per block), blocks_cumsums (splits + 1).
 * The blocks per split follow the kernel's grid: iter_factor = ceil(blocks x chunks / max_blocks), with max_blocks
 * = SMs x maxThreadsPerMultiProcessor / 128 x 2, spread between chunks_per_block and iters_per_chunk. */
static int64_t split_copy_metadata_numel(const fsdp_rank *rk, const fsdp_group *g)
{
    const aten_device_props pr = aten_device_props_of(rk->r);
    const int64_t chunks = rk->w->n, es = (int64_t)dtype_size(g->p[0].shard->dt);
    int64_t blocks = 0;
    for (int j = 0; j < FSDP_NP; j++)
        blocks += ceil_div(g->p[j].chunk_rows * g->p[j].row * es, TS_BLOCK_BYTES);
    const int64_t max_blocks = (int64_t)((double)((int64_t)pr.sm_count * pr.max_threads_per_sm / 128) * 2.0);
    const int64_t iter_factor = ceil_div(blocks * chunks, max_blocks);
    int64_t per_block = (int64_t)ceil(sqrt((double)iter_factor));
    per_block = per_block < chunks ? per_block : chunks;
    const int64_t iters = ceil_div(iter_factor, per_block);
    int64_t numel = 3 * FSDP_NP + FSDP_NP + 1;
    for (int j = 0; j < FSDP_NP; j++)
        numel += ceil_div(g->p[j].chunk_rows * g->p[j].row * es, TS_BLOCK_BYTES * iters);
    return numel;
}

/* get_chunk_cat_metadata over the unsharded gradients in N chunks: srcs, actual sizes, padded chunk sizes and
 * blocks per tensor (one each per tensor), the start offsets and start blocks (tensors + 1 each) and
 * block_idx_to_tensor_idx (one per block of a padded chunk, TILE_SIZE 128 x 16 bytes). */
static int64_t chunk_cat_metadata_numel(const fsdp_rank *rk, const fsdp_group *g, int have)
{
    const int64_t es = (int64_t)dtype_size(g->p[0].shard->dt);
    int64_t numel = 4 * (int64_t)have + 2 * ((int64_t)have + 1);
    for (int j = 0; j < FSDP_NP; j++)
        if (g->p[j].unsharded && have > 0)
            numel += ceil_div(g->p[j].chunk_rows * g->p[j].row * es, TS_BLOCK_BYTES);
    (void)rk;
    return numel;
}

/* ---- FSDPParamGroup ----------------------------------------------------------------------------------------- */

/* unshard(): foreach_all_gather. The flat output (N x the shard bytes) is allocated on the all-gather copy-in stream
 * (forward and pre-backward: get_all_gather_streams), this rank's shards copied into its chunk, then all-gathered.
 * Returns false on a failure (in the rt). */
static bool unshard(fsdp_rank *rk, fsdp_group *g)
{
    if (g->ag_result || g->unsharded)
        return true;
    int prev = rt_set_stream(rk->r, FSDP_STREAM_ALL_GATHER_COPY_IN);
    int64_t per = group_shard_numel(g), numel = per * rk->w->n;
    tensor *out = tensor_empty(rk->r, g->p[0].shard->dt, 1, &numel);
    rt_set_stream(rk->r, prev);
    if (!out)
        return false;
    tensor *in = tensor_alias(out, (size_t)(per * rk->k) * dtype_size(out->dt), 1, &per, false);
    size_t off = 0;
    bool ok = in != NULL;
    for (int j = 0; j < FSDP_NP && ok; j++) { /* all_gather_copy_in: _foreach_copy_ into the input's splits */
        int64_t m = tensor_numel(g->p[j].shard);
        tensor *dst = tensor_alias(in, in->offset + off, 1, &m, false);
        ok = dst && op_copy_(dst, g->p[j].shard);
        tensor_release(dst);
        off += (size_t)m * dtype_size(out->dt);
    }
    g->ag_result = out;
    int held = rk->ag_state != NULL;
    for (int i = 0; i < rk->nl; i++)
        held += rk->g[i].ag_result != NULL;
    if (held > rk->ag_held_peak)
        rk->ag_held_peak = held;
    if (ok)
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
    for (int j = 0; j < FSDP_NP; j++) {
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
    tensor *meta = NULL; /* the kernel's packed metadata, freed when the op returns */
    if (!packed_metadata(rk, split_copy_metadata_numel(rk, g), &meta))
        return false;
    for (int c = 0; c < n; c++) { /* split_with_sizes_copy(all_gather_output.view(N, -1), dim=1) */
        size_t off = 0;
        for (int j = 0; j < FSDP_NP; j++) {
            fsdp_param *fp = &g->p[j];
            int64_t m = fp->chunk_rows * fp->row;
            uint32_t v = fp->ag_output->st->version;
            tensor *src = tensor_alias(g->ag_result, (size_t)(per * c) * es + off, 1, &m, false);
            tensor *dst = tensor_alias(fp->ag_output, (size_t)(m * c) * es, 1, &m, false);
            bool ok = src && dst && op_copy_(dst, src);
            tensor_release(src);
            tensor_release(dst);
            fp->ag_output->st->version = v;
            if (!ok) {
                tensor_release(meta);
                return false;
            }
            off += (size_t)m * es;
        }
    }
    tensor_release(meta);
    g->unsharded = true;
    return true;
}

/* wait_for_unshard(): in forward this all-gather's output is kept until the next layer's copy-out
 * (all_gather_state); elsewhere it is freed right after the copy-out. The previous forward output goes only when
 * the function returns, after this copy-out: `comm_ctx.all_gather_state = None` drops one reference, but the
 * walrus `if prev_all_gather_state := self.comm_ctx.all_gather_state:` keeps a local one to the end (measured: the
 * H200 recording frees it after the split_with_sizes_copy, with two layers' outputs and this one's parameters
 * live). */
static bool wait_for_unshard(fsdp_rank *rk, fsdp_group *g)
{
    if (!g->ag_result)
        return true;
    tensor *prev = NULL;
    if (g->state == FSDP_FORWARD) { /* prev_all_gather_state */
        prev = rk->ag_state;
        rk->ag_state = NULL;
    }
    bool ok = copy_out(rk, g);
    if (g->state == FSDP_FORWARD) { /* all_gather_state takes the reference */
        rk->ag_state = g->ag_result;
        g->ag_result = NULL;
    }
    tensor_assign(&g->ag_result, NULL);
    tensor_release(prev);
    return ok;
}

/* reshard(): to_sharded, free_unsharded_param: every unsharded storage resize_(0), in parameter order. */
static void reshard(fsdp_rank *rk, fsdp_group *g)
{
    if (!g->unsharded)
        return;
    for (int j = 0; j < FSDP_NP; j++)
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
    g->state = FSDP_POST_BACKWARD;
    tensor *grads[FSDP_NP] = {NULL};
    int have = 0;
    for (int j = 0; j < FSDP_NP; j++) {
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
    tensor *meta = NULL; /* _chunk_cat's packed metadata: freed before its kernel runs (get_chunk_cat_metadata) */
    ok = ok && packed_metadata(rk, chunk_cat_metadata_numel(rk, g, have), &meta);
    tensor_release(meta);
    for (int c = 0; c < n && ok; c++) { /* chunk_cat(grads, dim=0, num_chunks=N): padding rows are zeros */
        size_t off = 0;
        for (int j = 0; j < FSDP_NP && ok; j++) {
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
    /* unsharded_grads.clear(), but foreach_reduce's `for i, (fsdp_param, unsharded_grad) in enumerate(...)` loop
     * (run when N > 1) leaves its variable on the last gradient: that one goes when foreach_reduce returns (the
     * recording frees the bias's gradient after the reduce-scatter output is allocated) */
    tensor *held = NULL;
    for (int j = FSDP_NP - 1; j >= 0 && !held; j--)
        if (grads[j]) {
            held = grads[j];
            grads[j] = NULL;
        }
    for (int j = 0; j < FSDP_NP; j++)
        tensor_release(grads[j]);
    tensor *out = NULL;
    if (ok) {
        int prev = rt_set_stream(rk->r, FSDP_STREAM_REDUCE_SCATTER);
        out = tensor_empty(rk->r, dt, 1, &per);
        rt_set_stream(rk->r, prev);
        ok = out != NULL;
    }
    if (ok)
        ok = collective(rk, COMM_REDUCE_SCATTER, out, in) == OOM_OK;
    size_t off = 0;
    for (int j = 0; j < FSDP_NP && ok; j++) {
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
    tensor_release(held); /* foreach_reduce returns */
    if (ok) /* reduce_scatter_state takes the reference once foreach_reduce returned; after an OOM inside it the input
               was its local, gone with the exception's frames (measured: the ci-scale recording's OOM sample) */
        tensor_assign(&rk->rs_state, in);
    else
        tensor_release(in);
    return ok && rt_ok(rk->r);
}

/* _prefetch_unshard: the target's all-gather issued under use_training_state(state) (its output kept in
 * _all_gather_result until the target's own wait_for_unshard). */
static bool prefetch_unshard(fsdp_rank *rk, fsdp_group *t, fsdp_state state)
{
    fsdp_state old = t->state;
    t->state = state;
    bool ok = unshard(rk, t);
    t->state = old;
    return ok;
}

/* pre_backward(): the group unsharded (a no-op when still unsharded, or when prefetched), then the backward prefetch:
 * the previous layer's all-gather issued (the default), or the explicit list's previous K, nearest first. */
static bool pre_backward(fsdp_rank *rk, int i)
{
    fsdp_group *g = &rk->g[i];
    if (g->state == FSDP_PRE_BACKWARD)
        return true;
    g->state = FSDP_PRE_BACKWARD;
    if (!unshard(rk, g) || !wait_for_unshard(rk, g))
        return false;
    /* _backward_prefetch (the default: the reverse post-forward order, one layer), or FSDPState._pre_backward's
     * explicit list, nearest first */
    const int ahead = rk->backward_prefetch > 0 ? rk->backward_prefetch : 1;
    for (int t = i - 1; t >= 0 && t >= i - ahead; t--)
        if (!prefetch_unshard(rk, &rk->g[t], FSDP_PRE_BACKWARD))
            return false;
    return true;
}

/* The hooks autograd calls on this rank: the pre-backward unshard on each layer's output node, and the
 * post-backward reduce-scatter once a group's last gradient is accumulated (RegisterPostBackwardFunction runs right
 * after the AccumulateGrad nodes, which the engine runs first). */
static bool run_pending_post_backward(fsdp_rank *rk)
{
    for (int i = rk->nl - 1; i >= 0; i--)
        if (rk->g[i].post_pending) {
            rk->g[i].post_pending = false;
            if (!post_backward(rk, &rk->g[i]))
                return false;
        }
    return true;
}

static oom_status pre_node_hook(void *ctx, ag_node *node)
{
    fsdp_rank *rk = ctx;
    if (!run_pending_post_backward(rk))
        return rt_status(rk->r);
    for (int i = 0; i < rk->nl; i++)
        if (rk->g[i].out_fn == node)
            return pre_backward(rk, i) ? OOM_OK : rt_status(rk->r);
    return OOM_OK;
}

static oom_status post_acc_hook(void *ctx, tensor *leaf)
{
    fsdp_rank *rk = ctx;
    for (int i = 0; i < rk->nl; i++)
        for (int j = 0; j < FSDP_NP; j++)
            if (rk->g[i].p[j].unsharded == leaf) {
                fsdp_group *g = &rk->g[i];
                if (++g->grads_seen == FSDP_NP && g->input_requires_grad)
                    g->post_pending = true; /* RegisterPostBackwardFunction's node: next, once this one returns */
                return OOM_OK;
            }
    return OOM_OK;
}

/* ---- model, forward, backward -------------------------------------------------------------------------------- */

/* model = MLP(...).cuda(); fully_shard(each Linear); fully_shard(model): the shards made layer by layer, each
 * layer's full parameters freed when its fully_shard returns (weight, then bias, as recorded). */
bool fsdp_mlp_build(fsdp_rank *rk, int64_t width, int depth, int64_t classes)
{
    rk->nl = depth + 1;
    for (int i = 0; i < rk->nl; i++)
        if (nn_linear_init(&rk->lin[i], rk->r, width, i < depth ? width : classes, true, DT_F32) != OOM_OK)
            return false;
    return true;
}

bool fsdp_mlp_shard(fsdp_rank *rk)
{
    for (int i = 0; i < rk->nl; i++) {
        tensor *full[FSDP_NP] = {rk->lin[i].weight, rk->lin[i].bias};
        for (int j = 0; j < FSDP_NP; j++)
            if (!shard_param(rk, &rk->g[i].p[j], full[j], rk->w->n))
                return false;
        tensor_assign(&rk->lin[i].weight, NULL); /* the H200 recording frees the weight, then the bias */
        tensor_assign(&rk->lin[i].bias, NULL);
    }
    tensor *ps[FSDP_MAX_LAYERS * FSDP_NP];
    size_t np = 0;
    for (int i = 0; i < rk->nl; i++)
        for (int j = 0; j < FSDP_NP; j++)
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
        for (int j = 0; j < FSDP_NP; j++) {
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
            tensor_set_data(fp->sharded, view); /* sharded_param._local_tensor = the fresh shard's rows; takes view */
            tensor_assign(&fp->shard, fresh);
        }
    return true;
}

/* Module j of the Sequential on rank rk (2 x depth + 1 of them): Linear j / 2 for even j, with FSDP's hooks around
 * it (pre_forward: unshard, the all-gather, wait_for_unshard; post_forward: reshard), else a ReLU. In a checkpoint's
 * recompute (backward) the hooks run again but find the layer unsharded (reshard_after_forward=False; fsdp_forward
 * refuses checkpointing otherwise) and do nothing, and the recomputed output is not the node FSDP's pre-backward
 * hook waits on. Returns a new reference, NULL on a failure (in the rt). */
static tensor *run_module(fsdp_rank *rk, int j, tensor *h)
{
    if (j % 2)
        return op_relu(h);
    fsdp_group *g = &rk->g[j / 2];
    const bool recompute = rk->recomputing;
    if (!recompute) {
        g->state = FSDP_FORWARD;
        g->input_requires_grad = h->requires_grad;
    }
    if (!unshard(rk, g) || !wait_for_unshard(rk, g))
        return NULL;
    /* FSDPState._pre_forward: after the group's pre_forward, the explicit forward prefetch list, in order */
    for (int t = j / 2 + 1; !recompute && t < rk->nl && t <= j / 2 + rk->forward_prefetch; t++)
        if (!prefetch_unshard(rk, &rk->g[t], FSDP_FORWARD))
            return NULL;
    tensor *o = op_linear(h, g->p[0].unsharded, g->p[1].unsharded);
    if (!o || recompute)
        return o;
    g->out_fn = o->grad_fn;
    if (rk->reshard_after_forward) /* post_forward */
        reshard(rk, g);
    g->state = FSDP_IDLE;
    return o;
}

/* checkpoint_sequential's run_function(start, end) over a segment of rk's modules. */
static tensor *run_segment(void *ctx, tensor *x)
{
    const ag_segment *sg = ctx;
    fsdp_rank *rk = sg->owner;
    const bool outer = rk->recomputing;
    rk->recomputing = rk->r->ck_recompute != NULL; /* autograd_checkpoint_nr's recompute, inside backward */
    tensor *h = tensor_retain(x);
    for (int j = sg->first; j < sg->end && h; j++)
        tensor_assign(&h, run_module(rk, j, h));
    rk->recomputing = outer;
    return h;
}

/* One rank's forward: opt.zero_grad(); x, y; loss = F.cross_entropy(model(x), y), model(x) being the Sequential's
 * loop or checkpoint_sequential(model, segments, x, use_reentrant=False) (every segment but the last under
 * checkpoint, the last plainly; `input` holds each segment's input until the segment returns); the root's
 * post_forward frees the last all-gather output. */
static oom_status forward_rank(fsdp_rank *rk)
{
    const fsdp_step *st = rk->w->step;
    optim_zero_grad(rk->opt, true);
    tensor *x = tensor_randn(rk->r, DT_F32, SHAPE(st->batch, st->width), 0.0, 1.0);
    if (x)
        tensor_assign(&rk->x, x);
    tensor *y = x ? tensor_randint(rk->r, SHAPE(st->batch), 0, st->classes) : NULL;
    if (y)
        tensor_assign(&rk->y, y);
    if (!y || !lazy_init(rk))
        return rt_status(rk->r);
    const int nmod = 2 * rk->nl - 1, nseg = rk->checkpoint_segments > 1 ? rk->checkpoint_segments : 1;
    tensor *h = autograd_checkpoint_sequential(run_segment, rk, rk->segments, nmod, nseg, false, "modules", rk->x);
    if (!h)
        return rt_status(rk->r);
    tensor_assign(&rk->ag_state, NULL); /* the root's post_forward */
    tensor *loss = op_cross_entropy(h, rk->y);
    tensor_release(h);
    if (!loss)
        return rt_status(rk->r);
    tensor_assign(&rk->loss, loss);
    return OOM_OK;
}

static void io_free(fsdp_rank *rk)
{
    tensor_assign(&rk->x, NULL);
    tensor_assign(&rk->y, NULL);
    tensor_assign(&rk->loss, NULL);
}

static void run_ranks(fsdp_world *w, oom_status (*phase)(fsdp_rank *rk));

bool fsdp_forward(fsdp_world *w, int64_t batch, int64_t width, int64_t classes)
{
    fsdp_step st = {batch, width, classes};
    for (int k = 0; k < w->n; k++) {
        fsdp_rank *rk = w->rk[k];
        int nseg = rk->checkpoint_segments;
        if (nseg > 1 && (rk->reshard_after_forward || nseg > 2 * rk->nl - 1)) {
            rt_fail(rk->r, OOM_EINVAL,
                    nseg > 2 * rk->nl - 1 ? "range() arg 3 must not be zero (checkpoint_sequential: %d segments of %d "
                                            "modules)"
                                          : "checkpointing is modelled with reshard_after_forward=False only (%d "
                                            "segments of %d modules)",
                    nseg, 2 * rk->nl - 1);
            return false;
        }
    }
    w->step = &st;
    run_ranks(w, forward_rank);
    w->step = NULL;
    bool ok = true;
    for (int k = 0; k < w->n; k++)
        ok = ok && w->rk[k]->status == OOM_OK;
    return ok;
}

/* loss.backward() on one rank, then the root's final callback: post_backward for the groups autograd did not
 * reach (the first layer: its input needs no gradient), the last reduce-scatter input freed. */
static oom_status backward_rank(fsdp_rank *rk)
{
    for (int i = 0; i < rk->nl; i++)
        rk->g[i].grads_seen = 0;
    oom_status st = autograd_backward(rk->loss, NULL, false);
    if (st == OOM_OK && !run_pending_post_backward(rk))
        st = rt_status(rk->r);
    for (int i = 0; i < rk->nl && st == OOM_OK; i++) {
        fsdp_group *g = &rk->g[i];
        if (g->state != FSDP_POST_BACKWARD && !post_backward(rk, g))
            st = rt_status(rk->r);
    }
    /* The root's final callback (finalize_backward) runs only when backward returns: after an OOM inside it, the
     * prefetched all-gather output and the last reduce-scatter input stay in FSDP's state until the model goes
     * (measured: the H200 recording's OOM samples hold them) */
    for (int i = 0; i < rk->nl; i++) {
        rk->g[i].post_pending = false;
        if (st == OOM_OK)
            tensor_assign(&rk->g[i].ag_result, NULL);
        rk->g[i].state = FSDP_IDLE;
    }
    if (st == OOM_OK)
        tensor_assign(&rk->rs_state, NULL);
    return st;
}

/* One rank's thread: it waits for its turn, runs the phase, and hands the turn on when it ends. */
static void *rank_thread(void *arg)
{
    fsdp_rank *rk = arg;
    fsdp_world *w = rk->w;
    pthread_mutex_lock(&w->mu);
    while (w->turn != rk->k)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    rk->status = w->phase(rk);
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

/* phase on every rank, each in its thread, one running at a time (rank 0 first; a rank hands over at each
 * collective and when it ends), with FSDP's autograd hooks set; each rank's result in rk->status. A thread that
 * cannot start runs on the caller's thread in its turn. */
static void run_ranks(fsdp_world *w, oom_status (*phase)(fsdp_rank *rk))
{
    pthread_t th[DEVCOMM_MAX_RANKS];
    bool started[DEVCOMM_MAX_RANKS] = {false};
    w->turn = 0;
    w->gen = 0;
    w->phase = phase;
    for (int k = 0; k < w->n; k++) {
        w->active[k] = true;
        w->waiting[k] = false;
        autograd_set_pre_node_hook(w->rk[k]->r, pre_node_hook, w->rk[k]);
        autograd_set_post_accumulate_hook(w->rk[k]->r, post_acc_hook, w->rk[k]);
    }
    for (int k = 0; k < w->n; k++)
        started[k] = pthread_create(&th[k], NULL, rank_thread, w->rk[k]) == 0;
    for (int k = 0; k < w->n; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            rank_thread(w->rk[k]);
    }
    w->phase = NULL;
    for (int k = 0; k < w->n; k++) {
        autograd_set_pre_node_hook(w->rk[k]->r, NULL, NULL);
        autograd_set_post_accumulate_hook(w->rk[k]->r, NULL, NULL);
    }
}

void fsdp_backward(fsdp_world *w)
{
    run_ranks(w, backward_rank);
}

void fsdp_world_init(fsdp_world *w, devcomm *c, int n)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    w->c = c;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

void fsdp_world_destroy(fsdp_world *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

void fsdp_rank_free(fsdp_rank *rk)
{
    io_free(rk);
    tensor_assign(&rk->ag_state, NULL);
    tensor_assign(&rk->rs_state, NULL);
    optim_free(rk->opt);
    rk->opt = NULL;
    for (int i = 0; i < rk->nl; i++) {
        tensor_assign(&rk->g[i].ag_result, NULL);
        for (int j = 0; j < FSDP_NP; j++)
            param_free(&rk->g[i].p[j]);
        nn_linear_free(&rk->lin[i]);
    }
}
