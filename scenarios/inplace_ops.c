/* inplace_ops.c - out-of-place ops hold two activations at once; in-place ops hold one, and break autograd when
 * they change a tensor it saved.
 *
 * Cause. `x = x * 2` computes into a new tensor while x is still alive, and only the rebinding frees the old
 * one: every out-of-place op needs its input and its output at once, so a chain of them peaks at two
 * activations. `x.mul_(2)` writes into x's own storage: no allocation, the peak stays at one. But an in-place op
 * on a tensor that autograd saved for backward changes what backward needs: sigmoid saves its output
 * (derivatives.yaml: sigmoid_backward(grad, result)), so `torch.sigmoid(x).mul_(2)` inside a graph makes the
 * backward pass stop with PyTorch's in-place RuntimeError. Cloning first keeps the saved output intact, at the
 * cost of one more activation.
 *
 * What the user sees. x of 8192 x 4096 floats (128 MiB) under no_grad: ten alternating `x = x * 2`,
 * `x = x + 1` ops peak at 256 MiB allocated and make ten allocations; the same ops in place peak at 128 MiB and
 * make none. In a graph, backward raises "one of the variables needed for gradient computation has been modified
 * by an inplace operation: [torch.cuda.FloatTensor [8192, 4096]], which is output 0 of SigmoidBackward0, is at
 * version 1; expected version 0 instead. Hint: enable anomaly detection to find the operation that failed to
 * compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
 *
 * The PyTorch code it mirrors (scripts/twins/inplace_ops.py runs it):
 *     x = torch.randn(batch, width, device="cuda")
 *     with torch.no_grad():
 *         for i in range(ops):
 *             x = x * 2 if i % 2 == 0 else x + 1      # fix-inplace: x.mul_(2) / x.add_(1)
 *
 *     head = nn.Linear(width, 10).cuda()
 *     x = torch.randn(batch, width, device="cuda", requires_grad=True)
 *     h = torch.sigmoid(x).mul_(2)                     # in place on sigmoid's saved output
 *     F.cross_entropy(head(h), y).backward()           # RuntimeError
 *
 * The fixes, and why they work.
 *   fix-inplace  x.mul_(2), x.add_(1): each op writes into x's storage (its version counter moves), so the
 *       chain allocates nothing and holds one activation.
 *   fix-clone    torch.sigmoid(x).clone().mul_(2): the in-place op changes the clone, and sigmoid's saved output
 *       stays at version 0; the clone costs one activation, measured (as does `torch.sigmoid(x) * 2`).
 * The myth.
 *   myth-same-layout  seed 000: `x = x + y` "might create a new tensor x instead of modifying x in-place if y
 *       requires a different memory layout". An out-of-place op always allocates its result, whatever the
 *       layouts: with x and y both contiguous, every `x = x + y` allocates a new block while the old x is alive.
 *       Only the in-place form (x += y, x.add_(y)) reuses x's memory.
 * The bug-inplace-on-saved variant ends when the RuntimeError is caught (as `except RuntimeError`), with its text
 * recorded as a note and expected word for word; the twin records the text PyTorch 2.11 prints.
 */
#include <stdio.h>
#include <string.h>

#include "run/scenario.h"
#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

#define CLASSES 10

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (0: as full); ci: 16 MiB activations, each its own segment as at full */
    {"width", "columns of the activation", 4096, 1, 65536, 1024},
    {"batch", "rows of the activation", 8192, 1, 65536, 4096},
    {"ops", "elementwise ops in the chain", 10, 1, 100, 0},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "x = x * 2; x = x + 1; ... under no_grad: two activations alive at every op", ""},
    {"fix-inplace", VARIANT_FIX, "x.mul_(2); x.add_(1); ...: one activation, no allocation", ""},
    {"bug-inplace-on-saved", VARIANT_BUG, "torch.sigmoid(x).mul_(2) in a graph: backward raises", ""},
    {"fix-clone", VARIANT_FIX, "torch.sigmoid(x).clone().mul_(2): backward works, one more activation", ""},
    {"myth-same-layout", VARIANT_MYTH, "x = x + y with one layout still allocates every time", ""},
};

static bool is(const scenario_variant *v, const char *name) { return strcmp(v->name, name) == 0; }

static int64_t allocated(const scn *s) { return scn_stat(s, "allocated_bytes.all.current"); }
static int64_t allocations(const scn *s) { return scn_stat(s, "allocation.all.allocated"); }

/* ---- bug, fix-inplace, myth-same-layout: a chain of elementwise ops under no_grad ----------------------------- */

static oom_status chain(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int64_t width = scn_param(s, "width"), batch = scn_param(s, "batch"), ops = scn_param(s, "ops");
    bool inplace = is(v, "fix-inplace"), myth = is(v, "myth-same-layout");
    char cap[32], act[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);

    tensor *x = tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0);
    int64_t x_bytes = allocated(s);
    tensor *y = myth && x ? tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0) : NULL;
    if (scn_caught(s, "the input")) {
        scn_step(s, "the input does not fit");
        tensor_release(x);
        if (!rt_ok(r))
            return rt_status(r);
        scn_not_reproduced(s, "a %lld x %lld input does not fit in %s", (long long)batch, (long long)width, cap);
        scn_expect(s, scn_first_oom(s) != NULL, "the input's own allocation is what fails");
        return OOM_OK;
    }
    scn_step(s, myth ? "x and y" : "input");
    int64_t before = allocated(s), count0 = allocations(s);
    memstats_format_size((uint64_t)x_bytes, act, sizeof act);

    int64_t done = 0;
    RT_NO_GRAD(r)
    {
        for (int64_t i = 0; i < ops; i++) {
            bool ok;
            if (myth)
                ok = tensor_rebind(&x, op_add(x, y, 1.0)); /* x = x + y */
            else if (inplace)
                ok = (i % 2 == 0 ? op_mul_(x, 2.0) : op_add_scalar_(x, 1.0)) != NULL; /* x.mul_(2), x.add_(1) */
            else
                /* x = x * 2, x = x + 1 */
                ok = tensor_rebind(&x, i % 2 == 0 ? op_mul_scalar(x, 2.0) : op_add_scalar(x, 1.0));
            if (!ok)
                break;
            done++;
            scn_step(s, "op %lld", (long long)(i + 1));
        }
    }
    bool oom = scn_caught(s, "an op of the chain");
    if (oom)
        scn_step(s, "OOM at op %lld", (long long)(done + 1));
    int64_t peak = scn_stat(s, "allocated_bytes.all.peak"), made = allocations(s) - count0;
    int64_t after = allocated(s);
    tensor_release(x);
    tensor_release(y);
    scn_step(s, "released");
    if (!rt_ok(r))
        return rt_status(r);

    /* ---- what each variant must show ---- */
    int64_t extra = peak - before; /* above the inputs, at the chain's peak */
    char ex[32];
    memstats_format_size((uint64_t)(extra > 0 ? extra : 0), ex, sizeof ex);
    scn_metric(s, "peak above the inputs", "bytes", (double)extra);
    scn_metric(s, "allocations by the ops", "1", (double)made);
    if (inplace) {
        scn_expect(s, !oom && done == ops, "all %lld in-place ops ran", (long long)ops);
        scn_expect(s, made == 0 && extra == 0,
                   "the in-place chain allocated nothing (%lld allocations): the peak stays at the one %s activation",
                   (long long)made, act);
        return OOM_OK;
    }
    if (oom) {
        const scn_oom *o = scn_first_oom(s);
        scn_note(s, "the second activation does not fit beside the first in %s: the out-of-place op needs both", cap);
        scn_expect(s, o->allocated >= (size_t)before && o->reserved + o->alloc_size > scn_budget(s),
                   "OOM at op %lld: the new result does not fit beside the live input (%s allocated)",
                   (long long)(done + 1), memstats_format_size(o->allocated, ex, sizeof ex));
        return OOM_OK;
    }
    scn_expect(s, made == ops, "each of the %lld ops allocated its result: %lld allocations", (long long)ops,
               (long long)made);
    scn_expect(s, extra == x_bytes,
               "the peak is one activation (%s) above the %s: the old x and the new one are alive together",
               ex, myth ? "inputs" : "input");
    scn_expect(s, after == before, "after the chain, one x is left, as before it");
    if (myth)
        scn_note(s, "x and y have one layout (both contiguous), and x = x + y still made a new tensor every time; "
                    "x += y (add_) would make none");
    return OOM_OK;
}

/* ---- bug-inplace-on-saved, fix-clone: an in-place op on sigmoid's saved output -------------------------------- */

static oom_status saved_output(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int64_t width = scn_param(s, "width"), batch = scn_param(s, "batch");
    bool clone = is(v, "fix-clone");
    char cap[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);

    nn_linear head = {0};
    tensor *x = NULL, *y = NULL, *sg = NULL, *h = NULL, *logits = NULL, *loss = NULL;
    bool fits = nn_linear_init(&head, r, width, CLASSES, true, DT_F32) == OOM_OK;
    if (fits) {
        x = tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0);
        tensor_set_requires_grad(x, true);
        y = tensor_randint(r, SHAPE(batch), 0, CLASSES);
    }
    int64_t a_input = 0, a_sigmoid = 0, a_inplace = 0, clone_bytes = 0;
    bool forward_ok = false;
    if (rt_ok(r)) {
        scn_step(s, "input and head");
        a_input = allocated(s);
        sg = op_sigmoid(x); /* s = torch.sigmoid(x) */
        if (sg) {
            scn_step(s, "sigmoid");
            a_sigmoid = allocated(s);
            if (clone) {
                h = op_clone(sg); /* h = s.clone().mul_(2) */
                if (h && !op_mul_(h, 2.0))
                    tensor_assign(&h, NULL);
            } else if (op_mul_(sg, 2.0)) { /* h = s.mul_(2): h is s */
                h = tensor_retain(sg);
            }
        }
        if (h) {
            scn_step(s, clone ? "clone, then mul_(2)" : "mul_(2) in place");
            a_inplace = allocated(s);
            clone_bytes = a_inplace - a_sigmoid;
            logits = nn_linear_forward(&head, h); /* loss = F.cross_entropy(head(h), y) */
            loss = op_cross_entropy(logits, y);
            tensor_assign(&logits, NULL); /* head(h) is a temporary */
        }
        forward_ok = loss != NULL;
        if (forward_ok)
            scn_step(s, "forward");
    }
    if (scn_caught(s, fits && a_input ? "the forward pass" : "the input and head")) {
        scn_step(s, "OOM before backward");
        tensor *ts[] = {loss, h, sg, x, y};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            tensor_release(ts[i]);
        nn_linear_free(&head);
        scn_step(s, "released");
        if (!rt_ok(r))
            return rt_status(r);
        scn_not_reproduced(s, "the forward pass at %lld x %lld does not fit in %s", (long long)batch,
                           (long long)width, cap);
        scn_expect(s, true, "an OOM before backward, not a broken mechanism");
        return OOM_OK;
    }
    if (!rt_ok(r))
        return rt_status(r);

    /* try: loss.backward()  except RuntimeError as e: text = str(e) */
    char text[RT_MESSAGE_MAX] = "";
    bool raised = false, backward_oom = false;
    if (autograd_backward(loss, NULL, false) != OOM_OK) {
        if (rt_status(r) == OOM_EAUTOGRAD) {
            raised = true;
            snprintf(text, sizeof text, "%s", rt_message(r));
            scn_note(s, "%s", text);
            rt_clear(r);
        } else {
            backward_oom = scn_caught(s, "the backward pass");
        }
    }
    if (!rt_ok(r))
        return rt_status(r);
    scn_step(s, raised ? "backward raised" : backward_oom ? "backward: OOM" : "backward");
    bool has_grad = x->grad != NULL;
    tensor *ts[] = {loss, h, sg, x, y}; /* del s, h, loss, x, y, head */
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tensor_release(ts[i]);
    nn_linear_free(&head);
    scn_step(s, "released");
    if (!rt_ok(r))
        return rt_status(r);

    /* ---- what each variant must show ---- */
    char cb[32], act[32];
    memstats_format_size((uint64_t)clone_bytes, cb, sizeof cb);
    memstats_format_size((uint64_t)(a_sigmoid - a_input), act, sizeof act);
    scn_metric(s, "bytes of the clone", "bytes", (double)clone_bytes);
    if (backward_oom) {
        scn_not_reproduced(s, "the backward pass does not fit in %s", cap);
        scn_expect(s, true, "an OOM in backward, not a broken mechanism");
        return OOM_OK;
    }
    if (!clone) {
        char want[RT_MESSAGE_MAX];
        snprintf(want, sizeof want,
                 "one of the variables needed for gradient computation has been modified by an inplace operation: "
                 "[torch.cuda.FloatTensor [%lld, %lld]], which is output 0 of SigmoidBackward0, is at version 1; "
                 "expected version 0 instead. Hint: enable anomaly detection to find the operation that failed to "
                 "compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).",
                 (long long)batch, (long long)width);
        scn_expect(s, clone_bytes == 0, "mul_(2) on sigmoid's output allocated nothing (%s)", cb);
        scn_expect(s, raised && strcmp(text, want) == 0,
                   "backward raises PyTorch's RuntimeError word for word (the note has it): sigmoid's saved "
                   "output [%lld, %lld] is at version 1, expected version 0",
                   (long long)batch, (long long)width);
        scn_expect(s, !has_grad, "x got no gradient");
    } else {
        scn_expect(s, !raised, "backward runs: sigmoid's saved output was not touched");
        scn_expect(s, has_grad, "x got its gradient");
        scn_expect(s, clone_bytes == a_sigmoid - a_input && clone_bytes > 0,
                   "the clone costs one more activation: %s, the size of sigmoid's output (%s)", cb, act);
    }
    return OOM_OK;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    if (is(v, "bug-inplace-on-saved") || is(v, "fix-clone"))
        return saved_output(s, v);
    return chain(s, v);
}

const scenario scenario_inplace_ops = {
    .name = "inplace_ops",
    .title = "out-of-place ops hold two activations at once; in-place ops hold one, and break saved tensors",
    .story = "`x = x * 2` computes into a new tensor while x is alive, so a chain of out-of-place ops under no_grad "
             "peaks at two activations and allocates at every op; x.mul_(2) and x.add_(1) write into x: one "
             "activation, no allocation. Inside a graph, an in-place op on a tensor autograd saved "
             "(torch.sigmoid(x).mul_(2): sigmoid saves its output) makes backward raise PyTorch's in-place "
             "RuntimeError; .clone() first fixes it at the cost of one activation. Seed 000's claim that x = x + y "
             "may reuse x's memory unless the layouts differ is false: it allocates every time.",
    .default_budget = (size_t)1 << 30,
    .ci_budget = (size_t)128 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
