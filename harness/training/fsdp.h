/* fsdp.h - FSDP2's fully_shard (torch/distributed/fsdp/_fully_shard: FSDPParam, FSDPParamGroup, foreach_all_gather,
 * foreach_reduce) over an MLP of nn.Linear layers, each layer one fully_shard group, on N ranks of a devcomm: one
 * runtime (device and caching allocator) per rank, as torchrun's processes.
 *
 * A rank keeps each parameter's padded shard (its torch.chunk rows, the sharded parameter a view of it). Unshard: the
 * flat all-gather output (N x the group's shards) allocated on FSDP's all-gather copy-in stream, all-gathered, copied
 * out into each parameter's unsharded storage (default stream; the unsharded parameter a leaf over it); reshard:
 * those storages resize_(0). Explicit prefetching (forward_prefetch, backward_prefetch: set_modules_to_*_prefetch)
 * issues the next (previous) K layers' all-gathers from a layer's pre-forward (pre-backward) hook, each output held
 * until its layer's own hook copies it out. Backward: pre-backward (unshard, prefetch of the previous layer) runs in
 * the engine's hook before the layer output's grad_fn; post-backward (the unsharded gradients copied into a reduce-scatter input,
 * freed, reduce-scattered into an output on the reduce-scatter stream whose views are the sharded .grad) once the
 * group's last gradient is accumulated, the first layer's at the end of backward. docs/parity.md
 * ("sharded_training") lists the PyTorch sources and what is not known to be exact.
 *
 * The ranks' forward and backward run one thread per rank, one at a time (a turn passed at each collective and when a
 * rank's phase ends), so each allocator sees its own process's sequence and the collectives see every rank's data.
 * A rank whose phase ends early (an OOM) leaves the others' next collective failing with OOM_EINVAL, as NCCL would
 * wait forever.
 */
#ifndef OOMLAB_FSDP_H
#define OOMLAB_FSDP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/compat.h"
#include "device/devcomm.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"
#include "training/nn.h"

OOM_BEGIN_DECLS

#define FSDP_MAX_LAYERS 17 /* depth 16 and the classifier */
#define FSDP_NP 2          /* parameters of a Linear: weight, bias */
/* FSDPCommContext's streams, as the allocator sees them: only these two allocate besides the default stream */
#define FSDP_STREAM_ALL_GATHER_COPY_IN 1 /* all_gather_copy_in_stream: the all-gather output */
#define FSDP_STREAM_REDUCE_SCATTER 2     /* reduce_scatter_stream: the reduce-scatter output (the sharded gradients) */

struct ag_node;
struct fsdp_world;

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

typedef enum fsdp_state { FSDP_IDLE, FSDP_FORWARD, FSDP_PRE_BACKWARD, FSDP_POST_BACKWARD } fsdp_state;

/* FSDPParamGroup: one Linear's parameters. */
typedef struct fsdp_group {
    fsdp_param p[FSDP_NP];
    bool unsharded;         /* _sharded_state == UNSHARDED */
    tensor *ag_result;      /* _all_gather_result: an all-gather issued, its copy-out not yet done */
    fsdp_state state;
    struct ag_node *out_fn; /* the grad_fn of the layer's output (borrowed): its pre-backward hook's node */
    bool input_requires_grad; /* its post_backward runs from autograd (RegisterPostBackwardFunction), else at the end */
    int grads_seen;
    bool post_pending; /* every gradient accumulated: post_backward runs before the engine's next node (its own
                          node in PyTorch, RegisterPostBackwardFunction, after the AccumulateGrad nodes return) */
} fsdp_group;

struct fsdp_world;
struct fsdp_rank;

/* A checkpointed segment of a rank's Sequential (ag_segment, owner the fsdp_rank): modules [first, end) of its
 * 2 x depth + 1 (Linear, ReLU, ..., Linear). The context of checkpoint nodes that outlive a forward: it lives in
 * the rank. */

typedef struct fsdp_rank {
    rt *r;
    int k;
    nn_linear lin[FSDP_MAX_LAYERS];
    int nl;
    fsdp_group g[FSDP_MAX_LAYERS];
    bool reshard_after_forward;
    int forward_prefetch;  /* 0: FSDP's default (no forward prefetch); K: each Linear's
                              set_modules_to_forward_prefetch(the next K Linears) */
    int backward_prefetch; /* 0: FSDP's default (the previous layer, in reverse post-forward order); K: each Linear's
                              set_modules_to_backward_prefetch(the previous K Linears, nearest first) */
    int checkpoint_segments; /* 0 or 1: off; else model(x) is checkpoint_sequential(model, s, x, use_reentrant=False),
                                modelled with reshard_after_forward=False only (a recompute then all-gathers nothing) */
    ag_segment segments[2 * FSDP_MAX_LAYERS];
    bool recomputing; /* a checkpoint's recompute runs this rank's modules */
    bool lazy_done;
    tensor *ag_state;  /* comm_ctx.all_gather_state: the last forward all-gather's output, freed after the next
                          copy-out */
    tensor *rs_state;  /* comm_ctx.reduce_scatter_state: the last reduce-scatter's input */
    int ag_held_peak;  /* the most all-gather outputs this rank held at once (every group's _all_gather_result and
                          all_gather_state): the gathers in flight */
    optimizer *opt;
    tensor *x, *y, *loss;
    struct fsdp_world *w;
    oom_status status; /* the last phase's (forward's or backward's) result on this rank */
} fsdp_rank;

/* One step's shapes, for the forward threads. */
typedef struct fsdp_step {
    int64_t batch, width, classes;
} fsdp_step;

/* The ranks, and the turn-taking of their threads in forward and backward (see run_ranks). */
typedef struct fsdp_world {
    int n;
    devcomm *c;
    fsdp_rank *rk[DEVCOMM_MAX_RANKS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn;                          /* the rank whose thread may run */
    bool active[DEVCOMM_MAX_RANKS];    /* its phase has not ended */
    bool waiting[DEVCOMM_MAX_RANKS];   /* arrived at the pending collective */
    tensor *cin[DEVCOMM_MAX_RANKS], *cout[DEVCOMM_MAX_RANKS];
    devcomm_op cop;
    oom_status cst;
    unsigned gen;
    oom_status (*phase)(fsdp_rank *rk); /* what the rank threads run */
    const fsdp_step *step;             /* forward's shapes */
} fsdp_world;

/* The world over devcomm c's n ranks; rk[k] is the caller's, set before use. fsdp_world_destroy frees the lock. */
void fsdp_world_init(fsdp_world *w, devcomm *c, int n);
void fsdp_world_destroy(fsdp_world *w);
/* model = MLP(width, depth, classes) on rank rk (nn.Linear layers, float32): false on a failure (in rk->r). */
bool fsdp_mlp_build(fsdp_rank *rk, int64_t width, int depth, int64_t classes);
/* fully_shard(each Linear), fully_shard(model), SGD(lr=1e-3) over the sharded parameters: each layer's shards made,
 * then its full parameters freed (weight, then bias, as recorded). False on a failure. */
bool fsdp_mlp_shard(fsdp_rank *rk);
/* opt.zero_grad(); x, y = the batch; loss = F.cross_entropy(model(x), y) on every rank (model(x): the Sequential's
 * loop, or checkpoint_sequential with rk->checkpoint_segments), layer by layer (pre_forward's unshard and all-gather,
 * the layer, post_forward's reshard). False when a rank failed: its OOM left in its runtime, each rank's result in
 * rk->status (OOM_EINVAL: left at a collective by a rank that failed; checkpointing with reshard_after_forward). */
bool fsdp_forward(fsdp_world *w, int64_t batch, int64_t width, int64_t classes);
/* loss.backward() on every rank with FSDP's hooks (see above); each rank's result in rk->status. */
void fsdp_backward(fsdp_world *w);
/* del loss, x, y, opt, model on one rank: every tensor it holds released. */
void fsdp_rank_free(fsdp_rank *rk);

OOM_END_DECLS

#endif
