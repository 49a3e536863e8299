/* inference_oom.c - "CUDA out of memory" in inference: grad mode left on keeps every activation for a backward
 * that never comes.
 *
 * Cause. A model called outside torch.no_grad() records its autograd graph, as in training: every hidden layer's
 * ReLU saves its output (and the next Linear saves the same tensor as its input), and the first Linear saves the
 * input. Inference never calls backward, so the graph, and every batch x width activation it saved, lives as long
 * as the output does. The forward's working set grows with the depth: the parameters, the input, one activation
 * per layer, and the layer being computed. Under no_grad nothing is saved: a layer's input dies as soon as its
 * output exists, and two activations are alive at a time.
 *
 * What the user sees. MLP(4096, 6) in eval mode on a batch of 8192 under a 1216 MiB budget (full scale,
 * --dry-run): "CUDA out of memory. Tried to allocate 128.00 MiB" in the fifth layer's ReLU, with 1.13 GiB allocated:
 * 384.25 MiB of parameters, the 128 MiB input, four saved activations and the fifth Linear's output. eval() changes
 * nothing here: it switches dropout and batch norm, not autograd. The forward would need 1408.25 MiB (the
 * parameters and eight activations); under no_grad it peaks at 768.25 MiB (the parameters and three: the input, a
 * Linear's output and the ReLU's), in chunks of 1024 at 544.52 MiB, and the half model's forward at 384.13 MiB
 * while its conversion peaks at 544.25 MiB. PyTorch 2.11 measured 1.51 GB, 0.84 GB, 0.61 GB and 0.47 GB with
 * cuBLAS's 32 MiB workspace (pytorch-measured.md), which the twin turns off, as oomlab's GEMM needs none. The
 * budget sits half an activation from both outcomes: the bug's fifth layer needs 1282 MiB reserved,
 * checkpointing with grad peaks at 1154 MiB. At ci scale (MLP(128, 6), batch 24576: 12 MiB activations, chunks
 * of 3072) the same holds under 80 MiB (86 and 74 MiB).
 *
 * The PyTorch code it mirrors (scripts/twins/inference_oom.py runs it):
 *     model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())],
 *                           nn.Linear(width, 10)).cuda().eval()
 *     x = torch.randn(batch, width, device="cuda")
 *     out = model(x)                       # torch.OutOfMemoryError: grad mode is on
 *
 * The fixes, and why they work.
 *   fix-no-grad   `with torch.no_grad():` (or torch.inference_mode()): no node is recorded, nothing is saved; each
 *       layer's input is freed once its output exists, so two activations are alive at a time.
 *   fix-half      model.half() and x = x.half(), under no_grad: every tensor is half the size. The conversion has a
 *       peak of its own: Module._apply casts one parameter at a time, so the f32 weights and the f16 copies made so
 *       far coexist (the sample "model.half()" keeps that peak; the peak is then reset with
 *       torch.cuda.reset_peak_memory_stats() so that the forward's own peak shows).
 *   fix-chunked   micro-batches of `chunk` rows under no_grad, the outputs concatenated (seed 001's example 1):
 *       `x[i:i + chunk]` is a view, so only one chunk's two activations are alive, beside the whole input and the
 *       outputs so far; torch.cat makes the result (CatBackward0 would save sizes only).
 * The myth: seed 001's "gradient checkpointing ... adapted for inference to reduce memory usage".
 *   myth-checkpoint-no-grad  checkpoint_sequential(model's hidden blocks, 2 segments) inside torch.no_grad(), as
 *       the seed writes it. torch.utils.checkpoint under no_grad records nothing: the non-reentrant checkpoint
 *       sees that its input saver got no grad_fn ("When ambient grad_mode is False") and just runs the function;
 *       the reentrant one runs it under no_grad and its ctx dies with apply. So the variant runs the plain no_grad
 *       forward, then the checkpointed one: no graph either way, and no saving. The checkpointed peak is even two
 *       activations higher (1024.25 MiB against 768.25 MiB at full scale): checkpoint_sequential's own `input`
 *       holds the last segment's input while that segment runs, and run_function's `input = functions[j](input)`
 *       holds each block's input until the block (an nn.Sequential(Linear, ReLU)) returns, so through its ReLU.
 *   myth-checkpoint-grad  the same with grad enabled. It lowers the bug's peak only because the bug keeps graphs:
 *       every segment but the last keeps just its input, the last its activations. The output still holds a graph
 *       that no backward will use (measured as what out.detach() frees: 512 MiB at full scale, the segment input and
 *       three activations), and it peaks at 1.13 GiB where the plain no_grad forward, run first in the same
 *       variant (then torch.cuda.reset_peak_memory_stats()), peaks at 768.25 MiB. Inference has no backward, so
 *       checkpointing costs no recomputation either: it only trims a graph that should not exist.
 * Both myths run the plain no_grad forward first and the checkpointed one after the peak reset, so the table's
 * peak is checkpointing's; fix-half's is the forward's (its conversion's is in the sample "model.half()").
 * Each variant's forward is timed (scn_clock: synchronised) as time_per_sample, seconds per row of the batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/scenario.h"
#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

#define CLASSES 10
#define SEGMENTS 2 /* checkpoint_sequential(..., segments=2) over the hidden blocks */

static const scenario_param params[] = {
    /* name, help, full, min, max, ci. At ci scale the activations (24576 x 128 f32: 12 MiB) still get segments of
     * their own, as the full scale's 128 MiB ones do, and the forward computes in a fraction of a second; the
     * parameters become negligible, which ci_budget accounts for (the bug still fails in its fifth layer). */
    {"width", "features of every layer of MLP(width, depth)", 4096, 16, 8192, 128},
    {"depth", "hidden [Linear(width, width), ReLU] blocks before Linear(width, 10)", 6, 1, 16, 0},
    {"batch", "rows of the randn(batch, width) input", 8192, 1, 65536, 24576},
    {"chunk", "rows per micro-batch in fix-chunked", 1024, 1, 65536, 3072},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "out = model(x) with grad enabled: every activation saved for a backward that never comes",
     ""},
    {"fix-no-grad", VARIANT_FIX, "the forward under torch.no_grad(): nothing saved, two activations at a time", ""},
    {"fix-half", VARIANT_FIX, "model.half() and x.half() under no_grad (the conversion's own peak shown)", ""},
    {"fix-chunked", VARIANT_FIX, "micro-batches of `chunk` rows under no_grad, outputs joined with torch.cat", ""},
    {"myth-checkpoint-no-grad", VARIANT_MYTH,
     "seed 001: checkpoint_sequential under no_grad, beside the plain no_grad forward: it changes nothing", ""},
    {"myth-checkpoint-grad", VARIANT_MYTH,
     "checkpoint_sequential with grad enabled: it trims only the graph the bug keeps; no_grad peaks lower", ""},
};

static const char *sz(int64_t bytes, char *buf) { return memstats_format_size((uint64_t)(bytes < 0 ? 0 : bytes), buf, 32); }

/* What one forward measured. */
typedef struct fwd {
    bool ok;            /* no OOM */
    int64_t peak;       /* allocated peak after it (reset before) */
    int64_t alloc;      /* allocated after it, output held */
    int64_t graph;      /* freed by out = out.detach(): what the output's graph kept */
    int64_t after;      /* allocated once the output is released */
} fwd;

/* out = model(x) (the caller picks the grad mode and checkpointing); sampled after it, after out = out.detach(),
 * and after del out. The time per sample is recorded as a metric. */
static fwd forward(scn *s, nn_mlp *model, tensor *x, const char *what)
{
    fwd f = {0};
    char label[64];
    double t0 = scn_clock(s);
    tensor *out = nn_mlp_forward(model, x);
    double t1 = scn_clock(s);
    if (scn_caught(s, what)) {
        tensor_release(out);
        scn_step(s, "%s: OOM", what);
        f.peak = scn_stat(s, "allocated_bytes.all.peak");
        return f;
    }
    f.ok = true;
    snprintf(label, sizeof label, "%s", what);
    scn_step(s, "%s", label);
    if (scn_computes(s))
        scn_metric(s, "time_per_sample", "s", (t1 - t0) / (double)x->shape[0]);
    f.peak = scn_stat(s, "allocated_bytes.all.peak");
    f.alloc = scn_stat(s, "allocated_bytes.all.current");
    tensor *d = tensor_detach(out); /* out = out.detach(): the graph goes, the values stay */
    tensor_release(out);
    f.graph = f.alloc - scn_stat(s, "allocated_bytes.all.current");
    scn_step(s, "%s: out.detach()", what);
    tensor_release(d);
    f.after = scn_stat(s, "allocated_bytes.all.current");
    scn_step(s, "%s: del out", what);
    return f;
}

/* fix-chunked: for i in range(0, batch, chunk): outs.append(model(x[i:i + chunk])); out = torch.cat(outs). */
typedef struct chunked {
    bool ok;
    int64_t first_peak, first_alloc, all_peak, all_alloc, cat_alloc;
} chunked;

static chunked forward_chunked(scn *s, nn_mlp *model, tensor *x, int64_t chunk)
{
    chunked c = {0};
    rt *r = scn_rt(s);
    int64_t batch = x->shape[0], n = (batch + chunk - 1) / chunk;
    tensor **outs = calloc((size_t)n, sizeof *outs);
    if (!outs) {
        fprintf(stderr, "oomlab: out of host memory\n");
        abort();
    }
    int64_t made = 0;
    bool ok = true;
    double t0 = scn_clock(s);
    RT_NO_GRAD(r)
    {
        for (int64_t i = 0; i < n && ok; i++) {
            int64_t rows = batch - i * chunk < chunk ? batch - i * chunk : chunk;
            tensor *xi = op_narrow(x, i * chunk, rows); /* x[i:i + chunk]: a view */
            outs[i] = nn_mlp_forward(model, xi);
            tensor_release(xi);
            ok = !scn_caught(s, "a chunk's forward");
            if (ok) {
                made++;
                if (i == 0) {
                    scn_step(s, "first chunk of %lld rows", (long long)rows);
                    c.first_peak = scn_stat(s, "allocated_bytes.all.peak");
                    c.first_alloc = scn_stat(s, "allocated_bytes.all.current");
                }
            }
        }
    }
    if (ok) {
        scn_step(s, "all %lld chunks", (long long)n);
        c.all_peak = scn_stat(s, "allocated_bytes.all.peak");
        c.all_alloc = scn_stat(s, "allocated_bytes.all.current");
        tensor *out = NULL;
        RT_NO_GRAD(r) { out = op_cat(outs, (int)n); } /* out = torch.cat(outs) */
        ok = !scn_caught(s, "torch.cat");
        double t1 = scn_clock(s);
        if (ok) {
            scn_step(s, "torch.cat(outs)");
            if (scn_computes(s))
                scn_metric(s, "time_per_sample", "s", (t1 - t0) / (double)batch);
            c.cat_alloc = scn_stat(s, "allocated_bytes.all.current");
        }
        for (int64_t i = 0; i < made; i++) /* del outs */
            tensor_release(outs[i]);
        scn_step(s, ok ? "del outs" : "torch.cat: OOM");
        tensor_release(out);
        if (ok)
            scn_step(s, "del out");
    } else {
        for (int64_t i = 0; i < made; i++)
            tensor_release(outs[i]);
        scn_step(s, "chunk %lld of %lld: OOM", (long long)made + 1, (long long)n);
    }
    free(outs);
    c.ok = ok;
    return c;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    const int64_t width = scn_param(s, "width"), depth = scn_param(s, "depth");
    const int64_t batch = scn_param(s, "batch"), chunk = scn_param(s, "chunk");
    const char *name = v->name;
    char a[32], b[32], c[32], cap[32];
    sz((int64_t)scn_budget(s), cap);

    /* model = MLP(width, depth).cuda().eval(); x = torch.randn(batch, width, device="cuda") */
    nn_mlp *model = nn_mlp_new(r, width, (int)depth, CLASSES, DT_F32);
    tensor *x = model ? tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0) : NULL;
    bool built = !scn_caught(s, "the model and the input");
    scn_step(s, built ? "model and input" : "OOM: the model and the input");
    const int64_t base = scn_stat(s, "allocated_bytes.all.current");

    fwd f = {0}, g = {0}; /* the variant's forward, and the plain no_grad one the myths compare with */
    chunked ch = {0};
    bool converted = false, halved = false;
    int64_t conv_before = 0, conv_peak = 0, conv_after = 0;
    if (built) {
        if (strcmp(name, "bug") == 0) {
            f = forward(s, model, x, "forward with grad enabled");
        } else if (strcmp(name, "fix-no-grad") == 0) {
            RT_NO_GRAD(r) { f = forward(s, model, x, "forward under no_grad"); }
        } else if (strcmp(name, "fix-half") == 0) {
            conv_before = base;
            converted = nn_mlp_to(model, DT_F16) == OOM_OK; /* model.half() */
            converted = !scn_caught(s, "model.half()") && converted;
            scn_step(s, converted ? "model.half()" : "model.half(): OOM");
            conv_peak = scn_stat(s, "allocated_bytes.all.peak");
            conv_after = scn_stat(s, "allocated_bytes.all.current");
            if (converted) {
                cachealloc_reset_peak(r->ca); /* torch.cuda.reset_peak_memory_stats() */
                tensor *xh = op_to(x, DT_F16);  /* x = x.half() */
                halved = !scn_caught(s, "x.half()");
                if (halved)
                    tensor_assign(&x, xh);
                scn_step(s, halved ? "x.half()" : "x.half(): OOM");
            }
            if (halved)
                RT_NO_GRAD(r) { f = forward(s, model, x, "half forward under no_grad"); }
        } else if (strcmp(name, "fix-chunked") == 0) {
            ch = forward_chunked(s, model, x, chunk);
        } else {
            /* the plain no_grad forward first, for comparison; then the peak is reset and the checkpointed one
             * runs, so the variant's peak is checkpointing's */
            bool grad = strcmp(name, "myth-checkpoint-grad") == 0;
            RT_NO_GRAD(r) { g = forward(s, model, x, "plain forward under no_grad"); }
            cachealloc_reset_peak(r->ca); /* torch.cuda.reset_peak_memory_stats() */
            /* blocks = [nn.Sequential(model[2i], model[2i + 1])]; checkpoint_sequential(blocks, min(2, depth), x,
             * use_reentrant=False), then the classifier */
            model->checkpoint_blocks = true;
            model->checkpoint_segments = depth < SEGMENTS ? (int)depth : SEGMENTS;
            bool prev = rt_set_grad_enabled(r, grad);
            f = forward(s, model, x, grad ? "checkpoint_sequential with grad" : "checkpoint_sequential under no_grad");
            rt_set_grad_enabled(r, prev);
            model->checkpoint_segments = 0;
            model->checkpoint_blocks = false;
        }
    }
    tensor_release(x);
    nn_mlp_free(model);
    scn_step(s, "everything released");
    if (!rt_ok(r))
        return rt_status(r);

    /* ---- what each variant must show, at these parameters ---- */
    const scn_oom *oom = scn_first_oom(s);
    if (oom)
        scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
                   "the OOM (%s) is the budget's: %s reserved + a new %s segment exceed %s", oom->what,
                   sz((int64_t)oom->reserved, a), sz((int64_t)oom->alloc_size, b), cap);
    if (!built) {
        scn_not_reproduced(s, "MLP(%lld, %lld) and a batch of %lld do not fit in %s before any forward",
                           (long long)width, (long long)depth, (long long)batch, cap);
        return OOM_OK;
    }

    if (strcmp(name, "bug") == 0) {
        if (!f.ok) {
            scn_expect(s, true, "the forward with grad enabled fails with CUDA out of memory under %s", cap);
            scn_expect(s, oom->allocated > (size_t)base,
                       "at the OOM %s is allocated, %s beyond the model and the input: activations saved for "
                       "backward",
                       sz((int64_t)oom->allocated, a), sz((int64_t)oom->allocated - base, b));
        } else {
            scn_not_reproduced(s, "a batch of %lld fits in %s even with grad enabled (peak %s)", (long long)batch,
                               cap, sz(f.peak, a));
            scn_expect(s, f.graph > 0,
                       "the output still holds its graph: out.detach() frees %s of saved activations", sz(f.graph, a));
        }
        return OOM_OK;
    }

    if (strcmp(name, "fix-chunked") == 0) {
        if (!ch.ok) {
            scn_not_reproduced(s, "even chunks of %lld rows do not fit in %s", (long long)chunk, cap);
            return OOM_OK;
        }
        scn_expect(s, true, "%lld rows in chunks of %lld under no_grad fit in %s (peak %s)", (long long)batch,
                   (long long)chunk, cap, sz(ch.all_peak, a));
        scn_expect(s, ch.all_peak <= ch.first_peak + (ch.all_alloc - ch.first_alloc),
                   "the peak is one chunk's: %s after the first chunk, %s after all, no more than the %s of outputs "
                   "kept since",
                   sz(ch.first_peak, a), sz(ch.all_peak, b), sz(ch.all_alloc - ch.first_alloc, c));
        scn_expect(s, ch.cat_alloc > ch.all_alloc, "torch.cat allocates the joined output (%s) beside the chunks'",
                   sz(ch.cat_alloc - ch.all_alloc, a));
        return OOM_OK;
    }

    if (strcmp(name, "fix-half") == 0) {
        if (!converted || !halved || !f.ok) {
            scn_not_reproduced(s, "the half-precision model does not fit in %s (%s)", cap, oom ? oom->what : "");
            return OOM_OK;
        }
        scn_expect(s, conv_peak > conv_before && conv_after < conv_before,
                   "model.half() peaks at %s: the f32 weights and the f16 copies made so far coexist (%s before, "
                   "%s after)",
                   sz(conv_peak, a), sz(conv_before, b), sz(conv_after, c));
        scn_expect(s, f.graph == 0, "under no_grad the output holds no graph (out.detach() frees nothing)");
        scn_expect(s, true, "the half forward fits in %s: peak %s after the peak was reset", cap, sz(f.peak, a));
        return OOM_OK;
    }

    if (strcmp(name, "fix-no-grad") == 0) {
        if (!f.ok) {
            scn_not_reproduced(s, "even the no_grad forward does not fit in %s", cap);
            return OOM_OK;
        }
        scn_expect(s, f.graph == 0, "no graph is recorded: out.detach() frees nothing");
        scn_expect(s, true, "the forward fits in %s: peak %s, %s beyond the model and the input", cap,
                   sz(f.peak, a), sz(f.peak - base, b));
        return OOM_OK;
    }

    if (!g.ok) { /* the myths: the plain no_grad forward they compare with */
        scn_not_reproduced(s, "even the plain no_grad forward does not fit in %s", cap);
        return OOM_OK;
    }
    if (strcmp(name, "myth-checkpoint-no-grad") == 0) {
        if (!f.ok) {
            scn_expect(s, false, "the checkpointed no_grad forward failed where the plain one fit (peak %s)",
                       sz(g.peak, a));
            return OOM_OK;
        }
        scn_expect(s, f.graph == 0 && f.peak >= g.peak,
                   "false: under no_grad checkpointing records no graph (out.detach() frees nothing) and lowers "
                   "nothing: peak %s with it, %s without",
                   sz(f.peak, a), sz(g.peak, b));
        if (f.peak > g.peak)
            scn_note(s, "%s more with it: checkpoint_sequential's `input` holds the last segment's input while that "
                        "segment runs, and run_function's `input` each block's input through the block's ReLU",
                     sz(f.peak - g.peak, a));
        return OOM_OK;
    }

    /* myth-checkpoint-grad */
    if (!f.ok) {
        scn_expect(s, true, "checkpointing with grad enabled still fails under %s, where no_grad fits (peak %s)", cap,
                   sz(g.peak, a));
        return OOM_OK;
    }
    scn_expect(s, f.graph > 0,
               "with grad enabled the output still holds a graph no backward will use: out.detach() frees %s (the "
               "segment inputs and the last segment's activations)",
               sz(f.graph, a));
    scn_expect(s, g.peak <= f.peak,
               "it saves memory only against the bug's full graph: the plain no_grad forward peaks at %s, checkpointing "
               "at %s",
               sz(g.peak, a), sz(f.peak, b));
    if (depth < SEGMENTS)
        scn_note(s, "with one hidden block checkpoint_sequential has a single segment, which runs plainly: the block's "
                    "activation is saved as in the bug");
    return OOM_OK;
}

const scenario scenario_inference_oom = {
    .name = "inference_oom",
    .title = "OOM in inference: grad mode left on keeps every activation for a backward that never comes",
    .story = "Calling a model outside torch.no_grad() records its autograd graph: every layer's activation is saved "
             "for a backward that inference never runs, so the forward holds one batch x width tensor per layer. "
             "MLP(4096, 6) on a batch of 8192 fails under 1216 MiB. torch.no_grad() (or inference_mode()) saves "
             "nothing: two activations are alive at a time. model.half() halves every tensor, though the "
             "conversion itself holds the f32 and f16 weights together for a moment. Micro-batches under no_grad "
             "keep one chunk's activations. Seed 001's gradient checkpointing for inference changes nothing under "
             "no_grad, and with grad enabled it only trims the graph that should not exist.",
    .default_budget = (size_t)1216 << 20,
    .ci_budget = (size_t)80 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
