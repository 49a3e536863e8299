/* dangling_tensors.c - references that keep GPU memory alive: which ones cost a graph, which cost a few bytes,
 * and what del, empty_cache() and gc.collect() do about them.
 *
 * Cause. A tensor made with grad enabled holds its grad_fn, and the graph behind it holds every tensor its ops
 * saved for backward (Linear its input, ReLU its output, the loss its log-probabilities and target). An
 * evaluation loop that runs with grad enabled and keeps `total = total + loss` chains every step's graph onto
 * total, so each step's saved activations stay alive: memory grows by one graph per step until the budget is
 * reached. After loss.backward() the saved tensors are freed, so keeping a loss (or an output) in a training loop
 * costs only that tensor's own block. And a tensor that is still referenced cannot be freed by anything but
 * dropping the reference: not torch.cuda.empty_cache(), which returns only cached blocks nobody holds, and not
 * gc.collect(), which finds only unreachable reference cycles (CPython frees acyclic objects the moment their
 * count drops to zero; this runtime is reference counted the same way, so gc.collect() has nothing to do here).
 *
 * What the user sees. MLP(4096, 4) at batch 256 under a 4.5 GiB budget: allocated grows by 20,984,320 bytes per
 * step (the five 4 MiB activations Linear and ReLU saved, the log-softmax output, the target and nll's total
 * weight), PyTorch's own figure, until step 216 (of 240) fails with "CUDA out of memory. Tried to allocate
 * 20.00 MiB" (the segment a 4 MiB activation needs), 4.49 GiB allocated, 4.22 GiB of it kept graphs. At CI
 * scale (MLP(48, 4), batch 104, 23 MiB) the OOM lands at the same step. Seed 002's example: holding a 1 GiB
 * tensor, a 4 GiB request fails under 4.5 GiB.
 *
 * The PyTorch code it mirrors (scripts/twins/dangling_tensors.py runs it):
 *     model = MLP(width, depth)                         # depth x [Linear, ReLU], Linear(width, 10)
 *     total = torch.zeros((), device="cuda")
 *     for step in range(steps):                         # evaluation, grad left enabled
 *         x = torch.randn(batch, width, device="cuda")
 *         y = torch.randint(0, 10, (batch,), device="cuda")
 *         out = model(x)
 *         loss = F.cross_entropy(out, y)
 *         total = total + loss                          # keeps this step's graph: OOM at step 216
 *
 *     big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")     # seed 002: 1 GiB held ...
 *     req = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")     # ... 4 GiB asked: OOM under 4.5 GiB
 *
 * The fixes, and why they work.
 *   fix-item     total += loss.item(): a Python float; the loss and its graph go when `loss` is rebound.
 *   fix-no-grad  the loop under torch.no_grad(): no graph is recorded, `total = total + loss` keeps a 0-dim
 *       tensor only (the same code as the bug).
 *   fix-detach   total = total + loss.detach(): the detached loss shares the loss's storage but has no history,
 *       so total keeps no graph.
 *   fix-del      (seed 002) del big, then the request again: the 1 GiB block goes back to the allocator's cache,
 *       still reserved (reserved stays 1 GiB after del); the 4 GiB request finds no cached block that fits and
 *       1 + 4 GiB exceeds the budget, so the allocator's OOM path releases its whole free segments and retries
 *       (num_alloc_retries counts it): the request succeeds. The seed's extra empty_cache() only does that
 *       release earlier. The first request's OOM, before del, is a step of the story: the fix's outcome is the
 *       request after del, which fits (the myths below end on their second request's OOM).
 * The myths.
 *   myth-keep-loss    seed 000: tensors kept in Python scope leak. In a training loop, history.append(loss)
 *       after backward keeps the 0-dim loss, 512 bytes a step: backward already freed the saved tensors.
 *   myth-keep-output  the same with history.append(out): batch x 10 floats a step, never a graph.
 *   myth-empty-cache  (seed 002) empty_cache() without del: the 1 GiB block is allocated, not cached, so it
 *       releases nothing and the request fails again.
 *   myth-gc-collect   (seed 002, seed 000's fix) gc.collect() without del: the tensor is reachable, so it
 *       frees nothing (here it is a no-op by construction: refcounting frees at once, as CPython does for
 *       acyclic references); the request fails again.
 * PyTorch 2.11 on an H100: 20,984,320 bytes per step for the leak (oomlab parity's eval_leak, docs/parity.md);
 * seed 002's example measured too (with 1 GiB held the 4 GiB request fails under 4.5 GiB, empty_cache() alone
 * changes nothing, after del it fits). The twin's recording is to confirm every sample.
 */
#include <stdlib.h>
#include <string.h>

#include "run/scenario.h"
#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"

#define MIB ((int64_t)1 << 20)
#define CLASSES 10

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (0: as full) */
    /* ci: the bug's OOM lands at step 216 as at full scale (23 MiB sits mid-way in the budgets that give it) */
    {"width", "the MLP's width (inputs are batch x width)", 4096, 16, 4096, 48},
    {"depth", "hidden [Linear, ReLU] blocks", 4, 1, 8, 0},
    {"batch", "rows per step", 256, 1, 2048, 104},
    {"steps", "loop iterations (the bug stops at its OOM)", 240, 3, 1000, 0},
    /* ci: both above 10 MiB, so each has a segment of its own, as at full scale */
    {"held_mib", "seed 002: the tensor held, MiB", 1024, 1, 65536, 12},
    {"request_mib", "seed 002: the request made while it is held, MiB", 4096, 1, 65536, 20},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "evaluation with grad enabled keeps total = total + loss: a graph per step", ""},
    {"fix-item", VARIANT_FIX, "total += loss.item()", ""},
    {"fix-no-grad", VARIANT_FIX, "the same loop under torch.no_grad()", ""},
    {"fix-detach", VARIANT_FIX, "total = total + loss.detach()", ""},
    {"myth-keep-loss", VARIANT_MYTH, "training: history.append(loss) after backward costs 512 bytes a step", ""},
    {"myth-keep-output", VARIANT_MYTH, "training: history.append(out) after backward costs the output only", ""},
    {"bug-held-reference", VARIANT_BUG, "seed 002: a large request while a tensor is still referenced", ""},
    {"fix-del", VARIANT_FIX, "seed 002: del the held tensor, then ask again", ""},
    {"myth-empty-cache", VARIANT_MYTH, "seed 002: torch.cuda.empty_cache() without del, then ask again", ""},
    {"myth-gc-collect", VARIANT_MYTH, "seed 002: gc.collect() without del, then ask again", ""},
};

static bool is(const scenario_variant *v, const char *name) { return strcmp(v->name, name) == 0; }

static int64_t allocated(const scn *s) { return scn_stat(s, "allocated_bytes.all.current"); }

/* The per-step figures of a loop: allocated after each completed step (at the sample the loop ends a step
 * with), and whether they grew by the same amount every step from step 1 on. */
typedef struct loop_trace {
    int64_t *at;    /* allocated after step i */
    int64_t done;   /* steps completed */
    int64_t growth; /* at[done-1] - at[done-2] (0 with fewer than 3 steps) */
    bool constant;  /* at[i] - at[i-1] == growth for every 2 <= i < done */
} loop_trace;

static void trace_finish(loop_trace *t)
{
    t->growth = t->done >= 3 ? t->at[t->done - 1] - t->at[t->done - 2] : 0;
    t->constant = t->done >= 3;
    for (int64_t i = 2; i < t->done; i++)
        t->constant = t->constant && t->at[i] - t->at[i - 1] == t->growth;
}

/* ---- the evaluation loop: bug, fix-item, fix-no-grad, fix-detach -------------------------------------------- */

static oom_status eval_loop(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int64_t width = scn_param(s, "width"), batch = scn_param(s, "batch"), steps = scn_param(s, "steps");
    int depth = (int)scn_param(s, "depth");
    bool item = is(v, "fix-item"), nograd = is(v, "fix-no-grad"), detach = is(v, "fix-detach");
    loop_trace tr = {.at = calloc((size_t)steps, sizeof(int64_t))};
    if (!tr.at)
        return OOM_ENOMEM_HOST;

    nn_mlp *model = nn_mlp_new(r, width, depth, CLASSES, DT_F32);
    tensor *total = NULL;
    double total_f = 0.0;
    int64_t model_bytes = 0;
    if (model) {
        scn_step(s, "model");
        model_bytes = allocated(s);
        if (!item)
            total = tensor_zeros(r, DT_F32, SCALAR); /* torch.zeros((), device="cuda") */
    }
    if (scn_caught(s, "building the model")) {
        scn_step(s, "the model does not fit");
        tensor_release(total);
        nn_mlp_free(model);
        free(tr.at);
        if (!rt_ok(r))
            return rt_status(r);
        scn_not_reproduced(s, "MLP(%lld, %d) does not fit in the budget", (long long)width, depth);
        scn_expect(s, scn_first_oom(s) != NULL, "the model's own allocation is what fails");
        return OOM_OK;
    }

    tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    int64_t oom_step = -1;
    for (int64_t step = 0; step < steps; step++) {
        bool ok = tensor_rebind(&x, tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0)) &&
                  tensor_rebind(&y, tensor_randint(r, SHAPE(batch), 0, CLASSES));
        if (ok && nograd) {
            RT_NO_GRAD(r)
            {
                ok = tensor_rebind(&out, nn_mlp_forward(model, x)) && tensor_rebind(&loss, op_cross_entropy(out, y)) &&
                     tensor_rebind(&total, op_add(total, loss, 1.0));
            }
        } else if (ok) {
            ok = tensor_rebind(&out, nn_mlp_forward(model, x)) && tensor_rebind(&loss, op_cross_entropy(out, y));
            if (ok && item) {
                total_f += tensor_item(loss); /* total += loss.item() */
            } else if (ok && detach) {
                tensor *d = tensor_detach(loss);
                ok = tensor_rebind(&total, op_add(total, d, 1.0));
                tensor_release(d);
            } else if (ok) {
                ok = tensor_rebind(&total, op_add(total, loss, 1.0));
            }
        }
        if (scn_caught(s, "an evaluation step")) {
            oom_step = step;
            scn_step(s, "OOM at step %lld", (long long)step);
            break;
        }
        if (!rt_ok(r))
            break;
        scn_step(s, "step %lld", (long long)step);
        tr.at[tr.done++] = allocated(s);
    }
    (void)total_f;
    tensor *ts[] = {x, y, out, loss, total}; /* del x, y, out, loss, total */
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tensor_release(ts[i]);
    scn_step(s, "loop's tensors released");
    int64_t after_release = allocated(s);
    nn_mlp_free(model);
    scn_step(s, "everything released");
    if (!rt_ok(r)) {
        free(tr.at);
        return rt_status(r);
    }

    /* ---- what each variant must show ---- */
    trace_finish(&tr);
    char per[32], cap[32], held[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    if (tr.done >= 3)
        scn_metric(s, "bytes/step", "bytes/step", (double)tr.growth);
    const scn_oom *oom = scn_first_oom(s);
    if (is(v, "bug")) {
        if (tr.done < 3) {
            scn_not_reproduced(s, "only %lld steps ran before the OOM: too few to measure a per-step growth",
                               (long long)tr.done);
            scn_expect(s, oom != NULL, "the OOM came early: a step does not fit beside the model in %s", cap);
        } else {
            memstats_format_size((uint64_t)tr.growth, per, sizeof per);
            scn_expect(s, tr.constant && tr.growth > 0,
                       "every step kept one more graph: allocated grew by %lld bytes (%s) at every step from step 1 "
                       "to step %lld",
                       (long long)tr.growth, per, (long long)(tr.done - 1));
            if (!oom) {
                scn_not_reproduced(s, "all %lld steps fit in %s: %lld graphs of %s each", (long long)steps, cap,
                                   (long long)steps, per);
            } else {
                memstats_format_size((uint64_t)tr.at[tr.done - 1] - (uint64_t)model_bytes, held, sizeof held);
                scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
                           "CUDA out of memory at step %lld of %lld, with %s of kept graphs: reserved + the new "
                           "segment exceed %s",
                           (long long)oom_step, (long long)steps, held, cap);
            }
        }
        scn_expect(s, after_release == model_bytes,
                   "deleting total freed every kept graph (allocated back to the model's %lld bytes)",
                   (long long)model_bytes);
    } else {
        if (oom) {
            scn_not_reproduced(s, "one step does not fit beside the model in %s (OOM at step %lld)", cap,
                               (long long)oom_step);
            scn_expect(s, tr.done == oom_step, "the OOM is a single step's, not a growth");
        } else {
            scn_expect(s, tr.done == steps, "all %lld steps ran within %s", (long long)steps, cap);
            scn_expect(s, tr.constant && tr.growth == 0,
                       "allocated stays flat from step 1 on (%lld bytes a step): no graph is kept",
                       (long long)tr.growth);
        }
        scn_expect(s, after_release == model_bytes, "after the loop only the model is left (%lld bytes)",
                   (long long)model_bytes);
    }
    free(tr.at);
    return OOM_OK;
}

/* ---- the training loop: myth-keep-loss, myth-keep-output ------------------------------------------------------ */

static oom_status train_loop(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int64_t width = scn_param(s, "width"), batch = scn_param(s, "batch"), steps = scn_param(s, "steps");
    int depth = (int)scn_param(s, "depth");
    bool keep_loss = is(v, "myth-keep-loss");
    loop_trace tr = {.at = calloc((size_t)steps, sizeof(int64_t))};
    tensor **history = calloc((size_t)steps, sizeof *history);
    if (!tr.at || !history) {
        free(tr.at);
        free(history);
        return OOM_ENOMEM_HOST;
    }

    nn_mlp *model = nn_mlp_new(r, width, depth, CLASSES, DT_F32);
    tensor *ps[2 * (8 + 1)];
    size_t np = model ? nn_mlp_parameters(model, ps, sizeof ps / sizeof ps[0]) : 0;
    optimizer *opt = model ? optim_sgd(r, ps, np, 1e-3, 0.0, 0.0, 0.0, false) : NULL;
    if (scn_caught(s, "building the model")) {
        scn_step(s, "the model does not fit");
        optim_free(opt);
        nn_mlp_free(model);
        free(tr.at);
        free(history);
        if (!rt_ok(r))
            return rt_status(r);
        scn_not_reproduced(s, "MLP(%lld, %d) does not fit in the budget", (long long)width, depth);
        scn_expect(s, scn_first_oom(s) != NULL, "the model's own allocation is what fails");
        return OOM_OK;
    }
    scn_step(s, "model");

    tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    int64_t kept = 0, oom_step = -1;
    for (int64_t step = 0; step < steps; step++) {
        bool ok = tensor_rebind(&x, tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0)) &&
                  tensor_rebind(&y, tensor_randint(r, SHAPE(batch), 0, CLASSES));
        if (ok) {
            optim_zero_grad(opt, true);
            ok = tensor_rebind(&out, nn_mlp_forward(model, x)) && tensor_rebind(&loss, op_cross_entropy(out, y));
        }
        if (ok) {
            scn_step(s, "step %lld forward", (long long)step);
            ok = autograd_backward(loss, NULL, false) == OOM_OK;
        }
        if (ok) {
            scn_step(s, "step %lld backward", (long long)step);
            ok = optim_step(opt) == OOM_OK;
        }
        if (ok)
            history[kept++] = tensor_retain(keep_loss ? loss : out); /* history.append(...) */
        if (scn_caught(s, "a training step")) {
            oom_step = step;
            scn_step(s, "OOM at step %lld", (long long)step);
            break;
        }
        if (!rt_ok(r))
            break;
        scn_step(s, "step %lld optimizer step", (long long)step);
        tr.at[tr.done++] = allocated(s);
    }
    tensor *ts[] = {x, y, out, loss}; /* del x, y, out, loss */
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tensor_release(ts[i]);
    scn_step(s, "loop's tensors released");
    int64_t before_del = allocated(s);
    for (int64_t i = 0; i < kept; i++) /* del history */
        tensor_release(history[i]);
    scn_step(s, "history released");
    int64_t history_bytes = before_del - allocated(s);
    optim_free(opt);
    nn_mlp_free(model);
    scn_step(s, "everything released");
    free(history);
    if (!rt_ok(r)) {
        free(tr.at);
        return rt_status(r);
    }

    trace_finish(&tr);
    const char *what = keep_loss ? "loss" : "output";
    char cap[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    if (scn_first_oom(s) && tr.done < 3) {
        scn_not_reproduced(s, "a training step of MLP(%lld, %d) at batch %lld does not fit in %s (OOM at step %lld)",
                           (long long)width, depth, (long long)batch, cap, (long long)oom_step);
        scn_expect(s, tr.done == oom_step, "the OOM comes before a per-step growth can be measured");
        free(tr.at);
        return OOM_OK;
    }
    if (scn_first_oom(s))
        scn_note(s, "the kept %ss alone filled %s at step %lld: a tensor a step still adds up", what, cap,
                 (long long)oom_step);
    else
        scn_expect(s, tr.done == steps, "all %lld training steps ran within %s", (long long)steps, cap);
    int64_t per_kept = kept ? history_bytes / kept : 0;
    scn_metric(s, "bytes/step", "bytes/step", (double)tr.growth);
    scn_metric(s, "history bytes per kept tensor", "bytes", (double)per_kept);
    scn_expect(s, kept > 0 && history_bytes == per_kept * kept,
               "del history freed %lld bytes: %lld per kept %s", (long long)history_bytes, (long long)per_kept, what);
    scn_expect(s, tr.constant && tr.growth == per_kept,
               "allocated grows by exactly the kept %s, %lld bytes a step, not by a graph: backward freed the saved "
               "tensors",
               what, (long long)tr.growth);
    free(tr.at);
    return OOM_OK;
}

/* ---- seed 002: a held reference (bug-held-reference, fix-del, myth-empty-cache, myth-gc-collect) -------------- */

/* torch.empty(mib << 20, dtype=torch.uint8): the same request, as f32 elements. */
static tensor *empty_mib(rt *r, int64_t mib) { return tensor_empty(r, DT_F32, SHAPE(mib * MIB / 4)); }

static oom_status held_reference(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int64_t held_mib = scn_param(s, "held_mib"), request_mib = scn_param(s, "request_mib");
    char cap[32], req_s[32], held_s[32];
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    memstats_format_size((uint64_t)(request_mib * MIB), req_s, sizeof req_s);
    memstats_format_size((uint64_t)(held_mib * MIB), held_s, sizeof held_s);

    tensor *big = empty_mib(r, held_mib); /* big = torch.empty(held_mib << 20, dtype=torch.uint8) */
    if (scn_caught(s, "the held tensor")) {
        scn_step(s, "the %lld MiB tensor does not fit", (long long)held_mib);
        if (!rt_ok(r))
            return rt_status(r);
        scn_not_reproduced(s, "the %s tensor alone does not fit in %s", held_s, cap);
        scn_expect(s, scn_first_oom(s) != NULL, "the held tensor's own allocation is what fails");
        return OOM_OK;
    }
    scn_step(s, "holding %lld MiB", (long long)held_mib);

    tensor *req = empty_mib(r, request_mib);
    bool first_ok = !scn_caught(s, "the request while holding");
    if (first_ok)
        scn_step(s, "holding the %lld MiB request", (long long)request_mib);
    tensor_release(req); /* del req */
    scn_step(s, "%lld MiB request %s", (long long)request_mib, first_ok ? "served, then freed" : "failed");

    /* the variant's remedy, then the request again (only after a failure, as the seed does): the first request's OOM
     * is a step of the story (scn_remedy), the outcome is the request again's */
    bool retried = !first_ok && !is(v, "bug-held-reference"), retry_ok = false;
    int64_t alloc0 = allocated(s), reserved0 = scn_stat(s, "reserved_bytes.all.current");
    int64_t alloc1 = alloc0, reserved1 = reserved0, retries1 = 0, frees1 = 0;
    if (retried) {
        if (is(v, "fix-del")) {
            tensor_release(big); /* del big */
            big = NULL;
            scn_remedy(s, "del the %lld MiB tensor", (long long)held_mib);
        } else if (is(v, "myth-empty-cache")) {
            rt_empty_cache(r);
            scn_remedy(s, "torch.cuda.empty_cache()");
        } else {
            /* gc.collect(): the tensor is reachable, and nothing here is an unreachable cycle (references are
             * counted and freed at once, as CPython frees acyclic objects): there is nothing to collect */
            scn_remedy(s, "gc.collect()");
        }
        alloc1 = allocated(s);
        reserved1 = scn_stat(s, "reserved_bytes.all.current");
        retries1 = scn_stat(s, "num_alloc_retries");
        frees1 = scn_stat(s, "num_device_free");
        req = empty_mib(r, request_mib);
        retry_ok = !scn_caught(s, "the request again");
        if (retry_ok)
            scn_step(s, "holding the %lld MiB request again", (long long)request_mib);
        tensor_release(req);
        scn_step(s, "%lld MiB request again: %s", (long long)request_mib, retry_ok ? "served, then freed" : "failed");
    }
    int64_t retries = scn_stat(s, "num_alloc_retries") - retries1, frees = scn_stat(s, "num_device_free") - frees1;
    tensor_release(big);
    scn_step(s, "everything released");
    if (!rt_ok(r))
        return rt_status(r);

    /* ---- what each variant must show, at these parameters ---- */
    const scn_oom *oom = scn_first_oom(s);
    if (first_ok) {
        scn_not_reproduced(s, "the %s request fits beside the %s tensor in %s", req_s, held_s, cap);
        scn_expect(s, oom == NULL, "no OOM");
        return OOM_OK;
    }
    if (oom->alloc_size > scn_budget(s)) {
        scn_not_reproduced(s, "the %s request does not fit in %s even alone: no reference is to blame", req_s, cap);
        scn_expect(s, !retry_ok, "the request fails whatever is released");
        return OOM_OK;
    }
    scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s) && oom->allocated >= (size_t)alloc0,
               "holding %s, the %s request fails: %s is allocated and the new segment would exceed %s", held_s,
               req_s, memstats_format_size(oom->allocated, held_s, sizeof held_s), cap);
    char d[32];
    if (is(v, "fix-del")) {
        memstats_format_size((uint64_t)(alloc0 - alloc1), d, sizeof d);
        scn_expect(s, alloc1 < alloc0 && reserved1 == reserved0,
                   "del gave the %s block back to the cache: allocated fell by %s, reserved did not move", d, d);
        scn_expect(s, retry_ok, "the %s request succeeds after del", req_s);
        if (retries > 0)
            scn_note(s, "no cached block fit the request, so the allocator's OOM path released %lld cached "
                        "segment(s) and retried (num_alloc_retries +%lld): empty_cache() was not needed",
                     (long long)frees, (long long)retries);
        else
            scn_note(s, "the request was served from the freed block, still cached");
    } else if (is(v, "myth-empty-cache") || is(v, "myth-gc-collect")) {
        memstats_format_size((uint64_t)(reserved0 - reserved1), d, sizeof d);
        scn_metric(s, "bytes released", "bytes", (double)(reserved0 - reserved1));
        scn_expect(s, alloc1 == alloc0 && reserved1 == reserved0, "%s freed nothing (%s released): %s is still referenced",
                   is(v, "myth-gc-collect") ? "gc.collect()" : "empty_cache()", d, held_s);
        scn_expect(s, !retry_ok && retries > 0,
                   "the %s request fails again, after the allocator's own release-and-retry", req_s);
    }
    return OOM_OK;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    if (is(v, "bug") || (strncmp(v->name, "fix-", 4) == 0 && !is(v, "fix-del")))
        return eval_loop(s, v);
    if (is(v, "myth-keep-loss") || is(v, "myth-keep-output"))
        return train_loop(s, v);
    return held_reference(s, v);
}

const scenario scenario_dangling_tensors = {
    .name = "dangling_tensors",
    .title = "references that keep memory alive: a graph per step, or a few bytes, and what del does",
    .story = "An evaluation loop with grad enabled that keeps total = total + loss chains every step's graph, and "
             "with it every activation the step saved, onto total: memory grows by one graph per step until CUDA "
             "runs out. loss.item(), torch.no_grad() or loss.detach() keep no graph. In a training loop, keeping "
             "the loss or the output after backward costs only that tensor (backward freed the saved ones), not "
             "the leak seed 000 claims. A tensor still referenced blocks a large request (seed 002): del frees it "
             "(the allocator itself releases the cached block when the request needs the room), while "
             "empty_cache() and gc.collect() without del free nothing.",
    .default_budget = (size_t)4608 << 20, /* 4.5 GiB */
    .ci_budget = (size_t)23 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
