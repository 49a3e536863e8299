/* unzeroed_grads.c - training without optimizer.zero_grad(): the gradients accumulate, memory does not grow.
 *
 * Cause. Without zero_grad(), every backward pass adds its gradients into the .grad tensors the step before
 * left behind. AccumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h) takes the first gradient of a
 * parameter over as its .grad; once .grad exists, and grad mode is off in backward, it adds the new gradient in
 * place, `variable_grad += new_grad`, whatever else holds .grad, and the engine then drops the new gradient. So
 * the .grad tensors are the same ones at every step: allocated memory after each step is flat. What changes is
 * the peak: from step 2 on, backward makes each new gradient while the accumulated one is still held, so the
 * accumulated gradients of the layers backward has not reached yet are extra at every moment of backward (at
 * step 1, and with set_to_none, a new gradient simply becomes .grad). The peak, and reserved memory with it
 * when the new gradient finds no cached block, rise once, at step 2, and never again. The real damage is
 * numerical: .grad is the sum of every batch's gradient, and its norm grows with the step count (about
 * sqrt(steps) here, where random inputs and labels make the batches' gradients nearly uncorrelated; linearly
 * when they agree), so SGD takes ever larger steps in a stale direction.
 *
 * What the user sees. No OOM and no growth: with MLP(4096, 4), batch 256, memory_allocated() after each
 * optimizer step is 516.44 MiB in all 20 steps. The peak is another matter (full scale, --dry-run): 600.46 MiB
 * allocated and 618.00 MiB reserved from step 2 on, against 520.44 MiB and 554.00 MiB for the loop with
 * zero_grad(). The bug peaks in step 2's backward through the last hidden layer, the first 64 MiB weight
 * gradient: it holds 256.22 MiB of parameters, 256.22 MiB of accumulated .grad and 88.02 MiB of new gradients and
 * activations (that weight gradient, two 4 MiB activation gradients, four saved 4 MiB activations); the fixed loop
 * peaks at the end of backward with the parameters and 264.22 MiB of fresh gradients and activations.
 * So the 80 MiB difference is the price of computing a gradient while the old ones are all still there, paid once:
 * a budget between the two reserved peaks (`--budget 600MiB`) makes the loop fail in step 2 (in its backward;
 * in its forward, which holds the .grad tensors beside the activations, below 556 MiB), never later, since a
 * budget that holds step 2 holds every step after it. The default budget, 640 MiB, holds the bug and
 * zero_grad(set_to_none=False); the CI scale (MLP(768, 4), batch 64, 8 steps) peaks at 21.46 MiB allocated and
 * 42.00 MiB reserved against 18.46 MiB and 22.00 MiB, under a 48 MiB budget.
 *
 * The PyTorch code it mirrors (scripts/twins/unzeroed_grads.py runs it):
 *     model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())],
 *                           nn.Linear(width, 10)).cuda()
 *     opt = torch.optim.SGD(model.parameters(), lr=1e-3)
 *     for step in range(steps):
 *         x = torch.randn(batch, width, device="cuda")
 *         y = torch.randint(0, 10, (batch,), device="cuda")
 *         # opt.zero_grad() is missing
 *         loss = F.cross_entropy(model(x), y)
 *         loss.backward()
 *         opt.step()      # default foreach SGD without momentum: p += -lr * grad, nothing allocated
 * Each step's gradient norm (after backward, every .grad's squares summed to the host: sum_squares) is the metric
 * grad_norm. The twin's values differ from oomlab's, whose random streams are not torch's: compare their growth,
 * not values.
 *
 * The fixes, and why they work.
 *   fix-zero-grad  opt.zero_grad() at the top of each step. In PyTorch 2.x it sets every .grad to None: the
 *       gradients are freed before the forward pass, and backward's new gradients become .grad again. The peak and
 *       reserved memory stay at step 1's, and each step's gradient is its own batch's.
 *   fix-zero-grad-in-place  opt.zero_grad(set_to_none=False): the .grad tensors are zeroed in place and stay
 *       allocated. The gradients are right again, but memory behaves as the bug's: backward still makes each new
 *       gradient beside the (zeroed) accumulated one, so the peak rises at step 2 just as much.
 * The myth.
 *   myth-memory-grows  seed 000 says a missing zero_grad() makes memory_allocated() grow with every step. The bug's
 *       loop, measured: allocated after each optimizer step is flat; what grows is the gradient norm.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/scenario.h"
#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"

#define CLASSES 10
#define MAX_DEPTH 16
#define MAX_STEPS 50

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (weights stay above 1 MiB at ci, so they live in the large pool as at full
     * scale; larger values at ci scale run out of the ci budget before computing much) */
    {"width", "features of every layer of MLP(width, depth)", 4096, 16, 8192, 768},
    {"depth", "hidden [Linear(width, width), ReLU] blocks before Linear(width, 10)", 4, 1, MAX_DEPTH, 0},
    {"batch", "rows of each step's randn(batch, width) input", 256, 1, 4096, 64},
    {"steps", "training steps (zero_grad, forward, backward, SGD step)", 20, 1, MAX_STEPS, 8},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "train without optimizer.zero_grad(): each backward adds into the last step's .grad", ""},
    {"fix-zero-grad", VARIANT_FIX, "optimizer.zero_grad() first in each step (set_to_none=True: .grad freed)", ""},
    {"fix-zero-grad-in-place", VARIANT_FIX, "optimizer.zero_grad(set_to_none=False): .grad zeroed, kept allocated",
     ""},
    {"myth-memory-grows", VARIANT_MYTH, "seed 000: without zero_grad() memory_allocated() grows every step", ""},
};

/* The total 2-norm of every parameter's .grad: the squares summed in double, in index order, onto one sum across
 * the parameters (kernels.h's sum_squares; on cuda summed on the device and copied to the host, as .item() does;
 * no device memory). NAN on failure (recorded in the rt). */
static double grad_norm(rt *r, tensor *const *ps, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        tensor *g = ps[i]->grad;
        if (!g)
            continue;
        oom_status st = r->k->sum_squares(g->dt, tensor_data(g), tensor_numel(g), &sum);
        if (st != OOM_OK) {
            rt_fail_detail(r, st, "grad_norm: sum_squares failed");
            return NAN;
        }
    }
    return sqrt(sum);
}

/* What the loop measured, per step (index k - 1), at the samples it took. */
typedef struct series {
    int64_t fwd_alloc[MAX_STEPS];  /* allocated after forward */
    int64_t bwd_peak[MAX_STEPS];   /* allocated peak after backward */
    int64_t step_alloc[MAX_STEPS]; /* allocated after the optimizer step */
    int64_t step_peak[MAX_STEPS];  /* allocated peak after the optimizer step */
    int64_t step_resv[MAX_STEPS];  /* reserved after the optimizer step */
    double norm[MAX_STEPS];        /* grad_norm after backward */
} series;

static bool all_equal(const int64_t *v, int64_t from, int64_t to)
{
    for (int64_t k = from; k < to; k++)
        if (v[k] != v[from])
            return false;
    return true;
}

static const char *sz(int64_t bytes, char *buf) { return memstats_format_size((uint64_t)bytes, buf, 32); }

static oom_status run(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    const int64_t width = scn_param(s, "width"), depth = scn_param(s, "depth");
    const int64_t batch = scn_param(s, "batch"), steps = scn_param(s, "steps");
    const bool to_none = strcmp(v->name, "fix-zero-grad") == 0;
    const bool in_place = strcmp(v->name, "fix-zero-grad-in-place") == 0;
    const bool computes = scn_computes(s);
    series m;
    memset(&m, 0, sizeof m);

    /* model = MLP(width, depth).cuda(); opt = torch.optim.SGD(model.parameters(), lr=1e-3) */
    nn_mlp *model = nn_mlp_new(r, width, (int)depth, CLASSES, DT_F32);
    tensor *ps[2 * (MAX_DEPTH + 1)];
    size_t np = model ? nn_mlp_parameters(model, ps, sizeof ps / sizeof ps[0]) : 0;
    optimizer *opt = model ? optim_sgd(r, ps, np, 1e-3, 0.0, 0.0, 0.0, false) : NULL;
    bool built = !scn_caught(s, "building the model");
    scn_step(s, built ? "model and optimizer" : "OOM building the model");
    const int64_t params_bytes = scn_stat(s, "allocated_bytes.all.current");

    tensor *x = NULL, *y = NULL, *loss = NULL;
    int64_t done = 0;                  /* steps completed */
    const char *failed = NULL;         /* the phase an OOM stopped the loop in */
    bool freed_before_forward = true;  /* fix-zero-grad: no .grad left when forward starts */
    bool zeroed_before_forward = true; /* fix-zero-grad-in-place: every .grad all zeros (computing only) */
    char phase[64];
    for (int64_t k = 1; built && k <= steps; k++) {
        snprintf(phase, sizeof phase, "step %lld: the batch", (long long)k);
        tensor *nx = tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0); /* x = torch.randn(...) */
        if (nx)
            tensor_assign(&x, nx);
        tensor *ny = nx ? tensor_randint(r, SHAPE(batch), 0, CLASSES) : NULL; /* y = torch.randint(...) */
        if (ny)
            tensor_assign(&y, ny);
        if (scn_caught(s, phase)) {
            failed = "the batch";
            break;
        }
        if (to_none || in_place) {
            optim_zero_grad(opt, to_none);
            double zn = in_place && computes ? grad_norm(r, ps, np) : 0.0;
            if (to_none)
                for (size_t i = 0; i < np; i++)
                    freed_before_forward &= ps[i]->grad == NULL;
            else if (computes)
                zeroed_before_forward &= zn == 0.0;
        }

        snprintf(phase, sizeof phase, "step %lld: forward", (long long)k);
        tensor *out = nn_mlp_forward(model, x); /* loss = F.cross_entropy(model(x), y) */
        tensor *nl = op_cross_entropy(out, y);
        tensor_release(out);
        if (scn_caught(s, phase)) {
            tensor_release(nl);
            failed = "forward";
            break;
        }
        tensor_assign(&loss, nl);
        scn_step(s, "%s", phase);
        m.fwd_alloc[k - 1] = scn_stat(s, "allocated_bytes.all.current");

        snprintf(phase, sizeof phase, "step %lld: backward", (long long)k);
        autograd_backward(loss, NULL, false); /* loss.backward() */
        if (scn_caught(s, phase)) {
            failed = "backward";
            break;
        }
        scn_step(s, "%s", phase);
        m.bwd_peak[k - 1] = scn_stat(s, "allocated_bytes.all.peak");
        if (computes) {
            m.norm[k - 1] = grad_norm(r, ps, np);
            if (!rt_ok(r))
                break;
            scn_metric(s, "grad_norm", "1", m.norm[k - 1]);
        }

        snprintf(phase, sizeof phase, "step %lld: optimizer step", (long long)k);
        optim_step(opt); /* opt.step() */
        if (scn_caught(s, phase)) {
            failed = "the optimizer step";
            break;
        }
        scn_step(s, "%s", phase);
        m.step_alloc[k - 1] = scn_stat(s, "allocated_bytes.all.current");
        m.step_peak[k - 1] = scn_stat(s, "allocated_bytes.all.peak");
        m.step_resv[k - 1] = scn_stat(s, "reserved_bytes.all.current");
        done = k;
    }
    if (failed)
        scn_step(s, "%s: OOM", phase);
    tensor_release(loss);
    tensor_release(y);
    tensor_release(x);
    optim_free(opt);
    nn_mlp_free(model);
    scn_step(s, "everything released");
    if (!rt_ok(r))
        return rt_status(r);

    /* ---- what each variant must show, at these parameters ---- */
    char a[32], b[32], c[32], cap[32];
    sz((int64_t)scn_budget(s), cap);
    const scn_oom *oom = scn_first_oom(s);
    const bool accumulates = !to_none; /* bug, myth, in-place: .grad stays allocated across steps */
    if (oom)
        scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
                   "the OOM (%s) is the budget's: %s reserved + a new %s segment exceed %s", oom->what,
                   sz((int64_t)oom->reserved, a), sz((int64_t)oom->alloc_size, b), cap);
    if (!built || (oom && done == 0)) {
        scn_not_reproduced(s, "MLP(%lld, %lld) at batch %lld does not fit in %s even for one step (%s)",
                           (long long)width, (long long)depth, (long long)batch, cap, oom ? oom->what : "");
        return OOM_OK;
    }
    scn_expect(s, memcmp(m.bwd_peak, m.step_peak, (size_t)done * 8) == 0,
               "SGD's step (foreach, no momentum) allocates nothing: the peak after each step is backward's");
    if (oom) {
        /* only step 2 raises the peak: a budget that holds step 2 holds every later step */
        if (accumulates)
            scn_expect(s, done == 1,
                       "the loop fails in step 2, the first with .grad held (here in %s), and in no later step",
                       failed);
        else
            scn_expect(s, false, "zero_grad() makes every step like step 1, which fit: yet %s failed after %lld steps",
                       failed, (long long)done);
        scn_not_reproduced(s, "%s cannot hold step 2's peak: the loop stops in step 2", cap);
        return OOM_OK;
    }
    if (steps == 1) {
        scn_not_reproduced(s, "one step: backward finds no .grad to add into, so every variant runs the same loop "
                              "(peak %s)",
                           sz(m.step_peak[0], a));
        return OOM_OK;
    }

    const int64_t n = steps - 1;
    const int64_t peak_rise = m.step_peak[1] - m.step_peak[0], resv_rise = m.step_resv[1] - m.step_resv[0];
    const int64_t held = m.fwd_alloc[1] - m.fwd_alloc[0]; /* .grad held through step 2's forward */
    if (strcmp(v->name, "myth-memory-grows") == 0) {
        scn_expect(s, all_equal(m.step_alloc, 0, steps),
                   "false: memory_allocated() after the optimizer step is %s at every one of the %lld steps",
                   sz(m.step_alloc[0], a), (long long)steps);
        scn_note(s, "what rises is the peak, once, at step 2: %s to %s", sz(m.step_peak[0], a), sz(m.step_peak[1], b));
    } else if (accumulates) {
        scn_expect(s, held > 0 && all_equal(m.fwd_alloc, 1, steps),
                   "the .grad tensors stay allocated between steps: %s more during every forward from step 2 on, "
                   "and no more at later steps",
                   sz(held, a));
        scn_expect(s, peak_rise > 0 && m.step_peak[n] == m.step_peak[1],
                   "the peak rises once, at step 2, by %s (%s to %s): backward makes each new gradient beside the "
                   "accumulated one; no later step raises it",
                   sz(peak_rise, a), sz(m.step_peak[0], b), sz(m.step_peak[1], c));
        scn_expect(s, m.step_resv[n] == m.step_resv[1], "reserved memory does not grow after step 2: %s",
                   sz(m.step_resv[n], a));
        if (resv_rise > 0)
            scn_note(s, "reserved rose by %s at step 2: the new gradients found no cached block", sz(resv_rise, a));
        else
            scn_note(s, "reserved did not rise at step 2: the new gradients fit in cached blocks");
        scn_note(s, "at the peak: %s of parameters, %s of .grad from the steps before, %s of new gradients and "
                    "activations",
                 sz(params_bytes, a), sz(held, b), sz(m.step_peak[n] - params_bytes - held, c));
    } else {
        scn_expect(s, freed_before_forward && all_equal(m.fwd_alloc, 0, steps),
                   "zero_grad() frees every .grad before the forward: allocated after forward is %s at every step",
                   sz(m.fwd_alloc[0], a));
        scn_expect(s, m.step_peak[n] == m.step_peak[0] && m.step_resv[n] == m.step_resv[0],
                   "the peak and reserved memory stay at step 1's: %s and %s", sz(m.step_peak[0], a),
                   sz(m.step_resv[0], b));
        scn_note(s, "at the peak: %s of parameters, %s of gradients and activations (no .grad from the step before)",
                 sz(params_bytes, a), sz(m.step_peak[n] - params_bytes, b));
    }
    if (in_place) {
        if (computes)
            scn_expect(s, zeroed_before_forward, "zero_grad(set_to_none=False) leaves every .grad all zeros");
        else
            scn_note(s, "the zeroed .grad values are not measured in a dry run");
    }

    if (!computes) {
        scn_note(s, "gradient norms are not measured in a dry run");
    } else if (accumulates && !in_place) {
        scn_expect(s, m.norm[n] > m.norm[0],
                   "what grows is the gradient norm: %.4g at step 1, %.4g at step %lld (%.2fx; sqrt(%lld) = %.2f)",
                   m.norm[0], m.norm[n], (long long)steps, m.norm[n] / m.norm[0], (long long)steps,
                   sqrt((double)steps));
    } else {
        scn_note(s, "gradient norm %.4g at step 1, %.4g at step %lld: each step's own batch", m.norm[0], m.norm[n],
                 (long long)steps);
    }
    return OOM_OK;
}

const scenario scenario_unzeroed_grads = {
    .name = "unzeroed_grads",
    .title = "training without zero_grad(): gradients accumulate, allocated memory stays flat, the peak rises once",
    .story = "Without optimizer.zero_grad(), each backward pass adds its gradients into the .grad tensors left "
             "by the step before, in place. memory_allocated() after every step is flat: the .grad tensors are "
             "the same ones. From step 2 on, backward makes each new gradient while the accumulated one is held, "
             "so the peak (and reserved memory, when the new gradient finds no cached block) rises once, at step "
             "2, and never again. The damage is numerical: the gradient norm grows with the step count. "
             "zero_grad() (set_to_none=True) frees the gradients and keeps step 1's peak; "
             "zero_grad(set_to_none=False) fixes the gradients but keeps the bug's peak. The seed's claim that "
             "memory grows every step is false.",
    .default_budget = (size_t)640 << 20,
    .ci_budget = (size_t)48 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
