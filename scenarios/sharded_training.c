/* sharded_training.c - FSDP2 (fully_shard, ZeRO-3) runs out when the gathered parameters are kept after forward:
 * every rank then holds the whole model beside its shard and its activations; or when each layer prefetches too
 * many layers' all-gathers ahead of their use.
 *
 * Cause. fully_shard(layer) keeps 1/N of each parameter on each rank (its shard: a padded flat tensor, the
 * parameter a view of it) and all-gathers a layer's parameters only around its use. Before a layer's forward the
 * shards are copied into one flat all-gather buffer (N x the shard bytes, allocated on FSDP's all-gather copy-in
 * stream), all-gathered, and copied out into the unsharded parameters' own storages (the default stream); the
 * buffer is freed after the next layer's copy-out. With reshard_after_forward=True (the default) the unsharded
 * storages are freed after the layer's forward (untyped_storage().resize_(0): the tensors autograd saved keep their
 * shapes, not their bytes) and gathered again in backward, one layer ahead (the default backward prefetch). With
 * reshard_after_forward=False (ZeRO-2's trade: the parameters gathered once per step) they stay: after forward every
 * rank holds its shard AND the whole unsharded model, and
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
 * (MLP(896, 10), batch 640, 2 steps, under 112 MiB) has the same outcomes at the same steps.
 *
 * Prefetching ahead. FSDP2 gathers one layer ahead in backward by default (forward: none ahead); explicit lists,
 * mod.set_modules_to_forward_prefetch(next K Linears) and set_modules_to_backward_prefetch(previous K), issue K
 * layers' all-gathers from each layer's pre-forward (pre-backward) hook, and each output (N x the shards, a whole
 * layer: 64 MiB at full scale) is held until its own layer's hook copies it out. With the default resharding and
 * K = 6 (bug-prefetch-ahead), forward's peak rises from 704 MiB to 864 MiB yet forward ends resharded, and step 1's
 * backward, which holds every activation when it starts prefetching, runs out asking for a 64 MiB all-gather output
 * on every rank; one layer ahead fits (fix-limit-gathers). PyTorch's probes: K up to 4 fits 1200 MiB. At the CI scale
 * the layers are small beside the activations and K = 8 of its 11 Linears runs out, one ahead fits.
 *
 * The PyTorch code it mirrors (scripts/twins/sharded_training.py runs it with torchrun --nproc_per_node 2):
 *     dist.init_process_group("nccl"); torch.cuda.set_device(rank)
 *     model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())],
 *                           nn.Linear(width, 10)).cuda()
 *     for m in model:
 *         if isinstance(m, nn.Linear):
 *             fully_shard(m, reshard_after_forward=False)   # the bug; True (the default) is the fix
 *     fully_shard(model, reshard_after_forward=False)
 *     # bug-prefetch-ahead (K = prefetch) and fix-limit-gathers (K = 1), with the default resharding:
 *     #     lin = [m for m in model if isinstance(m, nn.Linear)]
 *     #     for i in range(len(lin)): lin[i].set_modules_to_forward_prefetch(lin[i + 1:i + 1 + K])
 *     #                              lin[i].set_modules_to_backward_prefetch(lin[max(0, i - K):i][::-1])
 *     # fix-activation-checkpointing: model.forward = functools.partial(checkpoint_sequential,
 *     #     list(model.children()), segments, use_reentrant=False)
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
 *   fix-activation-checkpointing  keep reshard_after_forward=False (its trade: no all-gathers in backward) and make
 *       room for it in the activations: model(x) runs as checkpoint_sequential(model, segments=2, x,
 *       use_reentrant=False), so forward keeps only the first segment's input of its 4 blocks (the other 3 block
 *       outputs are recomputed in backward, when the later layers' activations are gone). A rank still holds the
 *       whole unsharded model after forward, 96 MiB less of activations, and 3 steps fit (peak 1.09 GiB
 *       allocated). The recompute runs FSDP's pre-forward hooks again, which find the layers unsharded and gather
 *       nothing. It fits from 1180 MiB at full scale (PyTorch's recording: at 1200 MiB, and at the ci scale), and
 *       the bug still runs out up to 1250 MiB.
 *   fix-limit-gathers  the same explicit prefetching one Linear ahead: at most two all-gather outputs held at once
 *       (the default's count), and three steps fit (peak 896 MiB allocated, the default's).
 * The myths.
 *   myth-shards-divide-all  "sharding over N ranks divides all memory by N, so each rank can take N times the batch":
 *       the default resharding with a per-rank batch of ranks x batch. Parameters, gradients (and optimizer state)
 *       are divided by N; activations are not: they scale with the per-rank batch, and forward runs out.
 */
#include <stdio.h>
#include <string.h>

#include "device/devcomm.h"
#include "run/scenario.h"
#include "training/fsdp.h"

#define CLASSES 10
#define MAX_STEPS 8
#define MIB ((int64_t)1 << 20)

static const scenario_param params[] = {
    /* name, help, full, min, max, ci */
    {"width", "features of every layer of MLP(width, depth)", 4096, 16, 8192, 896},
    {"depth", "hidden [Linear(width, width), ReLU] blocks before Linear(width, 10)", 8, 1, FSDP_MAX_LAYERS - 1, 10},
    {"batch", "rows of each rank's randn(batch, width) input per step", 2048, 1, 65536, 640},
    {"ranks", "processes (one GPU each) in the process group", 2, 2, 4, 0},
    {"steps", "training steps (zero_grad, forward, backward, SGD step)", 3, 2, MAX_STEPS, 2},
    {"segments", "fix-activation-checkpointing: checkpoint_sequential's segments over the 2 x depth + 1 modules", 2, 2,
     2 * FSDP_MAX_LAYERS - 1, 2},
    {"prefetch", "bug-prefetch-ahead: the Linears each one prefetches (set_modules_to_forward/backward_prefetch)", 6, 1,
     FSDP_MAX_LAYERS - 1, 8},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "fully_shard(m, reshard_after_forward=False): the gathered parameters stay after forward", ""},
    {"fix-reshard-after-forward", VARIANT_FIX,
     "fully_shard(m) (reshard_after_forward=True): parameters freed after forward, gathered again in backward", ""},
    {"fix-activation-checkpointing", VARIANT_FIX,
     "reshard_after_forward=False kept, model(x) as checkpoint_sequential(model, segments, x, use_reentrant=False)",
     ""},
    {"bug-prefetch-ahead", VARIANT_BUG,
     "default resharding, each Linear prefetching the next `prefetch` Linears' all-gathers (and the previous ones' in "
     "backward)",
     ""},
    {"fix-limit-gathers", VARIANT_FIX, "the same explicit prefetching, one Linear ahead: two layers' gathers in flight",
     ""},
    {"myth-shards-divide-all", VARIANT_MYTH,
     "\"sharding divides all memory by N\": the default resharding at N times the per-rank batch", ""},
};

static const char *sz(int64_t bytes, char *buf) { return memstats_format_size((uint64_t)(bytes < 0 ? 0 : bytes), buf, 32); }
/* ---- the run ------------------------------------------------------------------------------------------------ */

/* After a phase (forward or backward, each rank in its thread): a rank left waiting at a collective by one that ran
 * out (uneven shards, or an injected fault on one rank) is cleared and noted, as in PyTorch it would wait until
 * NCCL's timeout; every rank's OOM is caught. True when a rank failed. */
static bool ranks_caught(scn *s, fsdp_rank *rr, int n, const char *what, int *stranded)
{
    bool other_oom = false, bad = false;
    for (int q = 0; q < n; q++)
        other_oom = other_oom || rr[q].status == OOM_ENOMEM_DEVICE;
    for (int r = 0; r < n; r++)
        if (rr[r].status == OOM_EINVAL && other_oom && rt_status(rr[r].r) == OOM_EINVAL) {
            rt_clear(rr[r].r);
            (*stranded)++;
            scn_note(s, "rank %d reached a collective that a rank out of memory never joins: in PyTorch it waits "
                        "until NCCL's timeout",
                     r);
        }
    for (int r = 0; r < n; r++)
        if (rr[r].status != OOM_OK && scn_caught(s, what))
            bad = true;
    return bad;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    const int64_t width = scn_param(s, "width"), depth = scn_param(s, "depth");
    const int n = (int)scn_param(s, "ranks"), steps = (int)scn_param(s, "steps");
    const bool myth = strcmp(v->name, "myth-shards-divide-all") == 0;
    const int64_t batch = scn_param(s, "batch") * (myth ? n : 1);
    const bool ckpt = strcmp(v->name, "fix-activation-checkpointing") == 0;
    const bool raf = strcmp(v->name, "bug") != 0 && !ckpt;
    /* explicit prefetching: bug-prefetch-ahead's `prefetch` Linears, fix-limit-gathers' one */
    const int prefetch = strcmp(v->name, "bug-prefetch-ahead") == 0 ? (int)scn_param(s, "prefetch")
                         : strcmp(v->name, "fix-limit-gathers") == 0 ? 1
                                                                     : 0;
    char a[32], b[32], c2[32], cap[32];
    sz((int64_t)scn_budget(s), cap);

    /* checkpoint_sequential takes at most one segment per module (more: range()'s step 0, a ValueError), as
     * inference_oom caps its own: said in the output when --set asks for more */
    int segments = (int)scn_param(s, "segments");
    if (ckpt && segments > 2 * depth + 1) {
        scn_note(s, "segments=%d is more than the model's %lld modules (checkpoint_sequential would raise ValueError): "
                    "%lld segments used",
                 segments, (long long)(2 * depth + 1), (long long)(2 * depth + 1));
        segments = (int)(2 * depth + 1);
    }
    devcomm *c = scn_comm(s, n);
    if (!c)
        return rt_status(scn_rt(s));
    fsdp_rank rr[DEVCOMM_MAX_RANKS];
    fsdp_world w;
    memset(rr, 0, sizeof rr);
    fsdp_world_init(&w, c, n);
    bool built = true;
    for (int k = 0; k < n; k++) { /* model = MLP(width, depth).cuda() on every rank */
        rr[k].r = scn_rt_device(s, k);
        rr[k].k = k;
        rr[k].w = &w;
        rr[k].reshard_after_forward = raf;
        rr[k].checkpoint_segments = ckpt ? segments : 0;
        rr[k].forward_prefetch = rr[k].backward_prefetch = prefetch;
        w.rk[k] = &rr[k];
        if (built && !fsdp_mlp_build(&rr[k], width, (int)depth, CLASSES)) { /* its OOM is caught, not an error */
            scn_caught(s, "building the model");
            built = false;
        }
    }
    scn_step(s, built ? "model" : "OOM building the model");
    int64_t model_bytes = scn_stat_device(s, 0, "allocated_bytes.all.current");
    for (int k = 0; k < n && built; k++) /* fully_shard(each Linear), fully_shard(model); SGD */
        if (!fsdp_mlp_shard(&rr[k])) {
            scn_caught(s, "fully_shard(model)");
            built = false;
        }
    if (built)
        scn_step(s, "fully_shard(model)");
    int64_t shard_bytes = built ? scn_stat_device(s, 0, "allocated_bytes.all.current") : 0;

    int done = 0;
    const char *failed = NULL;
    int64_t fwd_bytes = 0;
    int fwd_gathered = 0; /* rank 0's Linears still unsharded after step 1's forward */
    int stranded = 0; /* ranks left at a collective by one that ran out */
    char what[64];
    for (int k = 1; built && k <= steps && !failed && rt_ok(scn_rt(s)); k++) {
        snprintf(what, sizeof what, "step %d: forward", k);
        if (!fsdp_forward(&w, batch, width, CLASSES)) {
            ranks_caught(s, rr, n, what, &stranded);
            failed = "forward";
            break;
        }
        scn_step(s, "%s", what);
        if (k == 1) {
            fwd_bytes = scn_stat_device(s, 0, "allocated_bytes.all.current");
            for (int i = 0; i < rr[0].nl; i++)
                fwd_gathered += rr[0].g[i].unsharded;
        }
        snprintf(what, sizeof what, "step %d: backward", k);
        fsdp_backward(&w);
        bool bad = ranks_caught(s, rr, n, what, &stranded);
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
    const int held_peak = rr[0].ag_held_peak; /* the gathers in flight, as FSDP's state held them */
    for (int k = 0; k < n; k++) /* del loss, y, x, opt, model */
        fsdp_rank_free(&rr[k]);
    scn_step(s, "everything released");
    fsdp_world_destroy(&w);
    if (!rt_ok(scn_rt(s)))
        return rt_status(scn_rt(s));

    /* ---- what each variant must show, at these parameters ---- */
    const scn_oom *oom = scn_first_oom(s);
    if (!built) {
        scn_not_reproduced(s, "MLP(%lld, %lld) does not fit %s on each of %d ranks before sharding",
                           (long long)width, (long long)depth, cap, n);
        return OOM_OK;
    }
    /* within an eighth, and 512 B a tensor: the padding of uneven chunks and the allocator's rounding */
    const int64_t slack = model_bytes / 8 + (depth + 1) * FSDP_NP * 512 * n;
    scn_expect(s, shard_bytes * n >= model_bytes - slack && shard_bytes * n <= model_bytes + slack,
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
        scn_expect(s, ranks_oom + stranded == n && ranks_oom > 0,
                   "every rank runs out at the same point (%d of %d ranks; %d left waiting at a collective)", ranks_oom,
                   n, stranded);
    }
    if (prefetch > 1) { /* bug-prefetch-ahead */
        if (!oom) {
            scn_not_reproduced(s, "with %d Linears prefetched ahead the step still fits %s (peak %s)", prefetch, cap,
                               sz(scn_stat(s, "allocated_bytes.all.peak"), a));
            return OOM_OK;
        }
        if (held_peak <= 2) { /* it ran out before the prefetched gathers piled up (--set: the input alone) */
            scn_not_reproduced(s, "the OOM (%s) comes before the prefetched gathers pile up: rank 0 held at most %d "
                                  "all-gather outputs at once, as without prefetching",
                               oom->what, held_peak);
            return OOM_OK;
        }
        scn_expect(s, true,
                   "rank 0 held up to %d layers' all-gather outputs at once, issued ahead of their use (FSDP's default "
                   "and one layer ahead: 2)",
                   held_peak);
        if (fwd_bytes > 0)
            scn_expect(s, fwd_gathered == 0,
                       "after forward every layer is resharded (%d of %lld Linears still gathered): what runs out is "
                       "the gathers in flight, in %s",
                       fwd_gathered, (long long)depth + 1, failed);
        return OOM_OK;
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
    if (prefetch == 1)
        scn_expect(s, held_peak <= 2, "one Linear prefetched ahead: rank 0 held at most %d all-gather outputs at once",
                   held_peak);
    if (ckpt) {
        /* the unsharded model stays, as in the bug; what shrinks is what forward keeps for backward */
        scn_expect(s, fwd_bytes - shard_bytes >= model_bytes,
                   "after forward every rank still holds the whole unsharded model (%s) beside its shards, and %s of "
                   "activations: the checkpointed segments keep only their inputs",
                   sz(model_bytes, a), sz(fwd_bytes - shard_bytes - model_bytes, b));
        return OOM_OK;
    }
    scn_expect(s, fwd_bytes > shard_bytes,
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
             "layer's forward and fits, and so does keeping them with activation checkpointing. Prefetching many "
             "layers' all-gathers ahead (set_modules_to_forward/backward_prefetch) runs out too; one ahead fits. "
             "Sharding does not divide the activations, so N times the per-rank batch runs out.",
    .default_budget = (size_t)1200 << 20,
    .ci_budget = (size_t)112 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
