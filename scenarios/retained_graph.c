/* retained_graph.c - a recurrent hidden state carried without detach(), backward(retain_graph=True) every step:
 * the graph becomes a chain that holds every step's saved tensors, and each backward walks all of it.
 *
 * Cause. h = cell(x, h) links this step's graph to the last one through h. loss.backward() would free the saved
 * tensors it walks through, so the next backward through the old steps fails ("Trying to backward through the
 * graph a second time"); the usual answer to that error is retain_graph=True. Then nothing is ever freed: the
 * chain keeps, for every step so far, what the cell saved for backward. GRUCell on CUDA runs
 * igates = x @ w_ih.t(), hgates = h @ w_hh.t() and the fused _thnn_fused_gru_cell, whose node saves igates,
 * hgates, h, both biases and its batch x 5 hidden workspace (derivatives.yaml names them all), while the first mm
 * keeps x: 13 x batch x hidden floats a step, 3.25 MiB at GRUCell(1024, 1024) and batch 64. And every backward
 * walks the whole chain, so step k's backward does k steps' work: its time and its allocations grow linearly.
 *
 * What the user sees. The tensors held grow by the same 3.25 MiB after every step (memory_allocated() by that,
 * or a little more where a cached block is reused whole), each backward is slower than the last, and under a
 * 193 MiB budget (GRUCell(1024, 1024)'s 24 MiB of weights, their gradients, and the chain) the run dies at step 25
 * of 40, in the backward that walks 26 steps: "CUDA out of memory. Tried to allocate 12.00 MiB. ... Of the
 * allocated memory 171.82 MiB is allocated by PyTorch, and 10.18 MiB is reserved by PyTorch but unallocated."
 * (PyTorch 2.11 on the H100, and oomlab, sample for sample.) From the second step on each backward sums every
 * weight's gradients from all the steps out of place: mm_mat2_backward's gradient is a .t() view whose base it
 * holds, so InputBuffer cannot add into it (12 MiB more at the peak for each GRU weight).
 * The budget is chosen so the story ends in the OOM users report ("it runs out after N iterations") rather than
 * in growth alone, which the expectations assert anyway; it leaves room for the myth's MLP (158 MiB reserved at
 * its peak). The OOM step moves by one per 2 MiB of budget (each step adds a 2 MiB small-pool segment), and
 * 193 MiB is in step 25's window [192, 194) MiB. At ci scale (GRUCell(16, 16), batch 1400, 31 MiB, the middle of
 * [30, 33) MiB) the bug runs out at step 25 too, in a backward: the tiny weights have no 12 MiB gradient buffers.
 *
 * The PyTorch code it mirrors (scripts/twins/retained_graph.py runs it):
 *     torch.cuda.set_per_process_memory_fraction(budget / total)
 *     cell = torch.nn.GRUCell(hidden, hidden, device="cuda")       # cell=1: torch.nn.RNNCell
 *     h = None
 *     for step in range(steps):
 *         x = torch.randn(batch, hidden, device="cuda")
 *         h = cell(x, h)                                            # h carries this step's graph into the next
 *         loss = h.pow(2).mean()
 *         loss.backward(retain_graph=True)                          # torch.OutOfMemoryError at step 25
 *
 * The fix, and why it works.
 *   fix-detach  h = h.detach() after each backward (truncated backpropagation through time): the next step's
 *       graph starts from a leaf, so each step's graph is its own and dies when loss and h are rebound. Memory is
 *       flat, every backward walks one step, and retain_graph=True can stay (it only keeps the last graph alive
 *       until the next step replaces it).
 * The myths.
 *   myth-retain-graph-leaks  seed 000 says retain_graph=True "causes memory to accumulate". Not on a fresh graph:
 *       the canonical MLP (3 x [Linear(2 hidden, 2 hidden), ReLU], Linear(2 hidden, 10), batch 8 x batch, by
 *       default MLP(2048, 3) at batch 512) with loss = m(x).pow(2).mean() and backward(retain_graph=True) every
 *       step holds the same tensors after every backward (the requested bytes are equal; memory_allocated() moves
 *       only by cached blocks handed out whole). The retained graph lives one step longer than it would, until the
 *       next forward rebinds loss: releasing the last loss frees it, 12.02 MiB at the defaults (the three ReLU
 *       outputs and the logits). Memory grows only when the graphs are chained, as in the bug.
 *   myth-retain-graph-with-sgd  retain_graph=True does not make the chain trainable either: with SGD stepping
 *       between the retained backward passes, the next backward reaches a step whose saved parameters the
 *       optimizer has changed in place and stops with PyTorch's error: "one of the variables needed for gradient
 *       computation has been modified by an inplace operation: [torch.cuda.FloatTensor [3072]] is at version 2;
 *       expected version 1 instead. ..." (GRUCell: the fused node of step 0 saved the biases at version 1; RNNCell:
 *       the w_hh.t() view saved by step 1's addmm, "[H, H]], which is output 0 of AsStridedBackward0, is at version
 *       3; expected version 2", at step 2).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/scenario.h"
#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"

#define MIB ((size_t)1 << 20)

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (0: as full) */
    {"hidden", "hidden (and input) size of the cell; the MLP side case is MLP(2 x hidden, 3)", 1024, 1, 2048, 16},
    {"batch", "batch size of the cell; the MLP side case runs 8 x batch", 64, 1, 4096, 1400},
    {"steps", "recurrent steps, each a forward and loss.backward(retain_graph=True)", 40, 1, 100, 0},
    {"cell", "0 = gru (nn.GRUCell), 1 = rnn (nn.RNNCell)", 0, 0, 1, 0},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "carry h across steps without detach(), loss.backward(retain_graph=True) every step", ""},
    {"fix-detach", VARIANT_FIX, "h = h.detach() after each backward: truncated backpropagation, one step per graph",
     ""},
    {"myth-retain-graph-leaks", VARIANT_MYTH,
     "seed 000's 'retain_graph=True accumulates memory', on a fresh graph each step (the canonical MLP): flat", ""},
    {"myth-retain-graph-with-sgd", VARIANT_MYTH,
     "the chain with SGD stepping between the retained backward passes: PyTorch's in-place error", ""},
};

/* Python's `name = expr`: an expression that raised leaves name bound to its old value. */
static void rebind(tensor **slot, tensor *value)
{
    if (value)
        tensor_assign(slot, value);
}

/* loss = y.pow(2).mean() (the pow result dies after mean, as the temporary of the expression). */
static tensor *pow2_mean(tensor *y)
{
    tensor *p = op_pow(y, 2.0);
    tensor *l = op_mean(p);
    tensor_release(p);
    return l;
}

/* What one variant measured per step, from the allocator's counters. */
typedef struct trace {
    int64_t steps;     /* backward passes that completed */
    int64_t *after;    /* allocated_bytes.all.current after each backward: memory_allocated() */
    int64_t *asked;    /* requested_bytes.all.current after each backward: the bytes the tensors asked for */
    int64_t *allocs;   /* allocations (allocation.all.allocated) each backward made */
    double *secs;      /* each backward's time */
} trace;

static void trace_init(trace *t, int64_t steps)
{
    t->steps = 0;
    t->after = calloc((size_t)steps, sizeof *t->after);
    t->asked = calloc((size_t)steps, sizeof *t->asked);
    t->allocs = calloc((size_t)steps, sizeof *t->allocs);
    t->secs = calloc((size_t)steps, sizeof *t->secs);
    if (!t->after || !t->asked || !t->allocs || !t->secs)
        abort();
}

static void trace_free(trace *t)
{
    free(t->after);
    free(t->asked);
    free(t->allocs);
    free(t->secs);
}

/* The backward of one step, timed, with its sample and metrics. */
static oom_status timed_backward(scn *s, trace *t, tensor *loss, int64_t step)
{
    int64_t a0 = scn_stat(s, "allocation.all.allocated");
    double t0 = scn_clock(s);
    oom_status st = autograd_backward(loss, NULL, true);
    double t1 = scn_clock(s);
    if (st != OOM_OK)
        return st;
    scn_step(s, "step %lld backward", (long long)step);
    t->after[t->steps] = scn_stat(s, "allocated_bytes.all.current");
    t->asked[t->steps] = scn_stat(s, "requested_bytes.all.current");
    t->allocs[t->steps] = scn_stat(s, "allocation.all.allocated") - a0;
    t->secs[t->steps] = t1 - t0;
    scn_metric(s, "backward_s", "s", t1 - t0);
    t->steps++;
    return OOM_OK;
}

/* Each completed step's value minus the previous step's, from step `from` on: the common difference in
 * *d, or false when two differ (or fewer than two steps completed). */
static bool equal_steps(const int64_t *v, int64_t n, int64_t from, int64_t *d)
{
    if (n - from < 2)
        return false;
    *d = v[from + 1] - v[from];
    for (int64_t k = from + 2; k < n; k++)
        if (v[k] - v[k - 1] != *d)
            return false;
    return true;
}

/* The OOM, if one happened, is the budget's: a new segment would exceed it. */
static void expect_budget_oom(scn *s)
{
    const scn_oom *oom = scn_first_oom(s);
    if (!oom)
        return;
    char cap[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
               "the OOM is the budget's: %zu bytes reserved plus a %zu-byte segment exceed %s", oom->reserved,
               oom->alloc_size, cap);
}

/* A flat run: the requested bytes after every backward are the same; memory_allocated() may differ by the whole
 * blocks the allocator handed out (a cached block whose remainder is too small to split goes out whole). */
static void expect_flat(scn *s, const trace *t)
{
    int64_t d = 0, lo = INT64_MAX, hi = 0;
    bool flat = t->steps < 2 || (equal_steps(t->asked, t->steps, 0, &d) && d == 0);
    for (int64_t k = 0; k < t->steps; k++) {
        lo = t->after[k] < lo ? t->after[k] : lo;
        hi = t->after[k] > hi ? t->after[k] : hi;
    }
    scn_expect(s, flat, "the tensors held after every backward are the same %lld bytes over %lld steps: nothing "
               "accumulates", (long long)(t->steps ? t->asked[t->steps - 1] : 0), (long long)t->steps);
    if (t->steps > 0 && hi != lo)
        scn_note(s, "memory_allocated() after a backward is %lld to %lld bytes: a cached block reused whole (PyTorch "
                 "does not split a large block whose remainder would be 1 MiB or less)", (long long)lo, (long long)hi);
}

static void note_times(scn *s, const trace *t)
{
    if (!scn_computes(s)) {
        scn_note(s, "backward times not measured in a dry run (no kernels ran)");
        return;
    }
    if (t->steps >= 2)
        scn_note(s, "backward took %.3f ms at step 0 and %.3f ms at step %lld (metric backward_s per step)",
                 t->secs[0] * 1e3, t->secs[t->steps - 1] * 1e3, (long long)(t->steps - 1));
}

/* ---- the recurrent chain: bug, fix-detach, myth-retain-graph-with-sgd -------------------------------------- */

typedef struct cell {
    bool gru;
    nn_gru_cell g;
    nn_rnn_cell r;
} cell;

static tensor *cell_forward(const cell *c, tensor *x, tensor *h)
{
    return c->gru ? nn_gru_cell_forward(&c->g, x, h) : nn_rnn_cell_forward(&c->r, x, h);
}

/* What PyTorch 2.11 raises when step `step`'s backward reaches a step the optimizer changed (see the story). */
static int inplace_error_text(bool gru, int64_t hidden, char *buf, size_t cap)
{
    static const char head[] = "one of the variables needed for gradient computation has been modified by an "
                               "inplace operation: ";
    static const char hint[] = " Hint: enable anomaly detection to find the operation that failed to compute its "
                               "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).";
    if (gru) /* step 0's fused node saved hidden_bias (unpacked first) at version 1; SGD made it 2 */
        snprintf(buf, cap, "%s[torch.cuda.FloatTensor [%lld]] is at version 2; expected version 1 instead.%s", head,
                 (long long)(3 * hidden), hint);
    else /* step 1's addmm saved w_hh.t() at version 2 (step 0's h was zeros: it saved no weight); SGD made it 3 */
        snprintf(buf, cap,
                 "%s[torch.cuda.FloatTensor [%lld, %lld]], which is output 0 of AsStridedBackward0, is at version 3; "
                 "expected version 2 instead.%s",
                 head, (long long)hidden, (long long)hidden, hint);
    return gru ? 1 : 2; /* the step whose backward fails */
}

static oom_status run_chain(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    const int64_t hidden = scn_param(s, "hidden"), batch = scn_param(s, "batch"), steps = scn_param(s, "steps");
    const bool detach = strcmp(v->name, "fix-detach") == 0, sgd = strcmp(v->name, "myth-retain-graph-with-sgd") == 0;
    cell c = {.gru = scn_param(s, "cell") == 0};
    const char *cell_name = c.gru ? "GRUCell" : "RNNCell";

    oom_status st = c.gru ? nn_gru_cell_init(&c.g, r, hidden, hidden) : nn_rnn_cell_init(&c.r, r, hidden, hidden);
    if (st != OOM_OK) {
        if (!scn_caught(s, "creating the cell"))
            return st;
        scn_step(s, "OOM creating the cell");
        scn_not_reproduced(s, "%s(%lld, %lld) itself does not fit in the budget", cell_name, (long long)hidden,
                           (long long)hidden);
        expect_budget_oom(s);
        return OOM_OK;
    }
    tensor *weights[4];
    if (c.gru)
        nn_gru_cell_parameters(&c.g, weights);
    else
        nn_rnn_cell_parameters(&c.r, weights);
    optimizer *opt = sgd ? optim_sgd(r, weights, 4, 0.01, 0.0, 0.0, 0.0, false) : NULL;
    scn_step(s, "model");

    trace t;
    trace_init(&t, steps);
    tensor *x = NULL, *h = NULL, *loss = NULL;
    char error[RT_MESSAGE_MAX] = "";
    int64_t error_step = -1, oom_step = -1;
    for (int64_t step = 0; step < steps; step++) {
        const char *phase = "forward";
        if (opt)
            optim_zero_grad(opt, true);
        rebind(&x, tensor_randn(r, DT_F32, SHAPE(batch, hidden), 0.0, 1.0));
        if (rt_ok(r))
            rebind(&h, cell_forward(&c, x, h));
        if (rt_ok(r))
            rebind(&loss, pow2_mean(h));
        if (rt_ok(r)) {
            scn_step(s, "step %lld forward", (long long)step);
            phase = "backward";
            timed_backward(s, &t, loss, step);
        }
        if (rt_ok(r) && opt) {
            phase = "optimizer step";
            if (optim_step(opt) == OOM_OK)
                scn_step(s, "step %lld optimizer step", (long long)step);
        }
        if (rt_ok(r) && detach)
            rebind(&h, tensor_detach(h));
        if (rt_ok(r))
            continue;
        char what[64];
        snprintf(what, sizeof what, "step %lld %s", (long long)step, phase);
        if (scn_caught(s, what)) { /* except torch.OutOfMemoryError */
            oom_step = step;
            scn_step(s, "OOM at step %lld (%s)", (long long)step, phase);
            break;
        }
        if (sgd && rt_status(r) == OOM_EAUTOGRAD) { /* except RuntimeError as e: print(e) */
            snprintf(error, sizeof error, "%s", rt_message(r));
            rt_clear(r);
            error_step = step;
            const char *hint = strstr(error, " Hint: ");
            scn_note(s, "RuntimeError at step %lld: %.*s (then PyTorch's anomaly-detection hint)", (long long)step,
                     hint ? (int)(hint - error) : (int)strlen(error), error);
            scn_step(s, "in-place error at step %lld", (long long)step);
            break;
        }
        break; /* anything else is a failure of the variant: reported after the cleanup */
    }
    st = rt_ok(r) ? OOM_OK : rt_status(r);
    bool failed = st != OOM_OK;
    tensor_release(x); /* x = h = loss = None: Python binds the targets left to right */
    tensor_release(h);
    tensor_release(loss);
    optim_free(opt);
    if (c.gru)
        nn_gru_cell_free(&c.g);
    else
        nn_rnn_cell_free(&c.r);
    if (failed) {
        trace_free(&t);
        return st;
    }
    scn_step(s, "released");

    /* ---- what each variant must show, at these parameters ---- */
    char per[32], cap[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    int64_t growth = 0, more = 0;
    if (sgd) {
        char want[RT_MESSAGE_MAX];
        int64_t fails_at = inplace_error_text(c.gru, hidden, want, sizeof want);
        if (error_step < 0) {
            if (oom_step >= 0)
                scn_not_reproduced(s, "the chain ran out of memory at step %lld before SGD's change was reached",
                                   (long long)oom_step);
            else
                scn_not_reproduced(s, "%lld steps: the backward that reaches a changed step (step %lld) never ran",
                                   (long long)steps, (long long)fails_at);
            scn_expect(s, steps <= fails_at || oom_step >= 0, "no in-place error before step %lld", (long long)fails_at);
        } else {
            scn_expect(s, error_step == fails_at, "the backward of step %lld fails (after %lld optimizer step(s))",
                       (long long)error_step, (long long)error_step);
            scn_expect(s, strcmp(error, want) == 0, "with PyTorch's in-place error naming the saved %s %s",
                       c.gru ? "bias of step 0's ThnnFusedGruCellBackward0," : "w_hh.t() of step 1's AddmmBackward0,",
                       c.gru ? "at version 2, saved at 1" : "at version 3, saved at 2");
        }
        trace_free(&t);
        return OOM_OK;
    }
    if (detach) {
        expect_flat(s, &t);
        /* step 0's h is zeros, which needs no gradient: from step 1 on, every backward does the same work */
        bool same = equal_steps(t.allocs, t.steps, 1, &more);
        scn_expect(s, t.steps < 3 || (same && more == 0), "every backward walks one step: %lld allocations each from "
                   "step 1 on", (long long)(t.steps > 1 ? t.allocs[1] : 0));
        if (scn_first_oom(s))
            scn_not_reproduced(s, "one step's graph beside %s(%lld, %lld)'s parameters and gradients does not fit in "
                               "%s (OOM at step %lld): detach() cannot help", cell_name, (long long)hidden,
                               (long long)hidden, cap, (long long)oom_step);
        else
            scn_expect(s, true, "all %lld steps fit in %s", (long long)steps, cap);
        expect_budget_oom(s);
        note_times(s, &t);
        trace_free(&t);
        return OOM_OK;
    }
    /* the bug */
    if (t.steps < 2) {
        scn_not_reproduced(s, "%lld backward pass(es) completed: too few to see the chain grow", (long long)t.steps);
        expect_budget_oom(s);
        trace_free(&t);
        return OOM_OK;
    }
    bool linear = equal_steps(t.asked, t.steps, 0, &growth);
    memstats_format_size((uint64_t)(growth > 0 ? growth : 0), per, sizeof per);
    scn_metric(s, "growth_per_step", "bytes/step", (double)growth);
    scn_expect(s, linear && growth > 0,
               "the tensors held grow by the same %s (%lld bytes requested) every step: one step's saved tensors of "
               "%s", per, (long long)growth, cell_name);
    int64_t exact = 0;
    bool at_least = true;
    for (int64_t k = 1; k < t.steps; k++) {
        exact += t.after[k] - t.after[k - 1] == growth;
        at_least = at_least && t.after[k] - t.after[k - 1] >= growth;
    }
    if (exact == t.steps - 1)
        scn_expect(s, at_least, "memory_allocated() grows by exactly that after every step");
    else
        scn_expect(s, at_least, "memory_allocated() grows by that after every step: exactly at %lld of %lld steps, "
                   "more where a reused cached block was handed out whole (its tail too small to split)",
                   (long long)exact, (long long)(t.steps - 1));
    if (t.steps >= 3) {
        bool walks = equal_steps(t.allocs, t.steps, 1, &more);
        scn_expect(s, walks && more > 0, "each backward walks the whole chain: %lld more allocations than the last, "
                   "every step (%lld at step %lld)", (long long)more, (long long)t.allocs[t.steps - 1],
                   (long long)(t.steps - 1));
    }
    if (!scn_first_oom(s))
        scn_not_reproduced(s, "all %lld steps fit in %s: the chain grew by %s a step but did not reach it",
                           (long long)steps, cap, per);
    else
        scn_expect(s, true, "CUDA out of memory at step %lld of %lld, with %lld steps' saved tensors held",
                   (long long)oom_step, (long long)steps, (long long)t.steps);
    expect_budget_oom(s);
    note_times(s, &t);
    trace_free(&t);
    return OOM_OK;
}

/* ---- myth-retain-graph-leaks: a fresh graph each step ------------------------------------------------------ */

static oom_status run_mlp(scn *s)
{
    rt *r = scn_rt(s);
    const int64_t width = 2 * scn_param(s, "hidden"), rows = 8 * scn_param(s, "batch"), steps = scn_param(s, "steps");
    nn_mlp *m = nn_mlp_new(r, width, 3, 10, DT_F32);
    if (!m) {
        if (!scn_caught(s, "creating the MLP"))
            return rt_status(r);
        scn_step(s, "OOM creating the MLP");
        scn_not_reproduced(s, "MLP(%lld, 3) itself does not fit in the budget", (long long)width);
        expect_budget_oom(s);
        return OOM_OK;
    }
    scn_step(s, "model");
    trace t;
    trace_init(&t, steps);
    tensor *x = NULL, *loss = NULL;
    int64_t oom_step = -1;
    for (int64_t step = 0; step < steps; step++) {
        const char *phase = "forward";
        rebind(&x, tensor_randn(r, DT_F32, SHAPE(rows, width), 0.0, 1.0));
        if (rt_ok(r)) {
            tensor *out = nn_mlp_forward(m, x);
            rebind(&loss, pow2_mean(out)); /* loss = m(x).pow(2).mean() */
            tensor_release(out);
        }
        if (rt_ok(r)) {
            scn_step(s, "step %lld forward", (long long)step);
            phase = "backward";
            timed_backward(s, &t, loss, step);
        }
        if (rt_ok(r))
            continue;
        char what[64];
        snprintf(what, sizeof what, "step %lld %s", (long long)step, phase);
        if (scn_caught(s, what)) {
            oom_step = step;
            scn_step(s, "OOM at step %lld (%s)", (long long)step, phase);
        }
        break;
    }
    oom_status st = rt_ok(r) ? OOM_OK : rt_status(r);
    int64_t before = scn_stat(s, "allocated_bytes.all.current");
    tensor_release(loss); /* del loss: the graph backward(retain_graph=True) kept */
    if (st == OOM_OK)
        scn_step(s, "the last loss released");
    int64_t held = before - scn_stat(s, "allocated_bytes.all.current");
    tensor_release(x);
    nn_mlp_free(m);
    if (st != OOM_OK) {
        trace_free(&t);
        return st;
    }
    scn_step(s, "released");

    char cap[32], graph[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    memstats_format_size((uint64_t)(held > 0 ? held : 0), graph, sizeof graph);
    if (oom_step >= 0) {
        scn_not_reproduced(s, "MLP(%lld, 3) at batch %lld runs out of memory at step %lld of %lld in %s",
                           (long long)width, (long long)rows, (long long)oom_step, (long long)steps, cap);
        expect_budget_oom(s);
    }
    expect_flat(s, &t);
    if (t.steps > 0) {
        scn_metric(s, "retained_graph", "bytes", (double)held);
        scn_expect(s, held > 0,
                   "retain_graph=True keeps the last graph's saved activations (%s) until loss is released or rebound",
                   graph);
    }
    note_times(s, &t);
    trace_free(&t);
    return OOM_OK;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    return strcmp(v->name, "myth-retain-graph-leaks") == 0 ? run_mlp(s) : run_chain(s, v);
}

const scenario scenario_retained_graph = {
    .name = "retained_graph",
    .title = "memory and backward time grow every step: a hidden state carried without detach(), retain_graph=True",
    .story = "An RNN's hidden state carried across steps without detach(), with loss.backward(retain_graph=True) "
             "every step, chains every step's graph to the last: the chain keeps each step's saved tensors (GRUCell: "
             "x, both gate matmuls, h and the fused cell's workspace, 13 x batch x hidden floats) and every backward "
             "walks all of it. Allocated memory grows by the same bytes every step until the budget runs out, and "
             "each backward is slower than the last. h = h.detach() after each step fixes it. retain_graph=True on "
             "a fresh graph each step does not grow memory (it only keeps the last graph one step longer), and "
             "with an optimizer stepping between the retained backward passes PyTorch stops with its in-place "
             "error.",
    .default_budget = 193 * MIB,
    .ci_budget = 31 * MIB,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
