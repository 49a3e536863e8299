/* optim.c - SGD and Adam. See optim.h. */
#include "runtime/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "runtime/ops.h"

/* O3: a state tensor of parameter p, when set. */
static oom_status check_state(const tensor *t, const tensor *p, const char *what, size_t i, char *why, size_t cap)
{
    if (!t)
        return OOM_OK;
    OOM_REQUIRE(!t->grad_fn && !t->requires_grad, why, cap, "O3: %s[%zu] has history or requires grad", what, i);
    OOM_REQUIRE(t->dt == p->dt && tensor_same_shape(t, p), why, cap,
                "O3: %s[%zu] is %s of %d dims, its parameter %s of %d", what, i, dtype_str(t->dt), t->ndim,
                dtype_str(p->dt), p->ndim);
    return OOM_OK;
}

oom_status optim_check(const optimizer *o, bool expensive, char *why, size_t cap)
{
    OOM_REQUIRE(o && o->rt && (o->kind == OPTIM_SGD || o->kind == OPTIM_ADAM), why, cap,
                "O1: no optimizer, no rt, or an unknown kind");
    OOM_REQUIRE(o->params && o->state_a && o->state_b && o->state_step && o->steps, why, cap,
                "O1: a per-parameter array is missing");
    bool sgd = o->kind == OPTIM_SGD;
    for (size_t i = 0; i < o->nparams; i++) {
        const tensor *p = o->params[i], *a = o->state_a[i], *b = o->state_b[i], *step = o->state_step[i];
        OOM_REQUIRE(p && p->refcount >= 1 && !p->grad_fn, why, cap, "O2: params[%zu] is missing or no leaf", i);
        oom_status st = check_state(a, p, sgd ? "momentum_buffer" : "exp_avg", i, why, cap);
        if (st == OOM_OK)
            st = check_state(b, p, "exp_avg_sq", i, why, cap);
        if (st != OOM_OK)
            return st;
        OOM_REQUIRE(!sgd || (!b && !step && (!a || o->o.momentum != 0.0)), why, cap,
                    "O3: SGD holds exp_avg_sq, a step tensor, or a momentum buffer without momentum (params[%zu])", i);
        OOM_REQUIRE(!b || a, why, cap, "O3: exp_avg_sq[%zu] without exp_avg", i);
        OOM_REQUIRE(!step || (o->o.fused && step->dt == DT_F32 && step->ndim == 0), why, cap,
                    "O4: state_step[%zu] without fused, or not a 0-dim f32 tensor", i);
        OOM_REQUIRE(sgd || !o->o.fused || !a || step, why, cap, "O4: fused Adam's exp_avg[%zu] before its step", i);
        OOM_REQUIRE(o->steps[i] >= 0, why, cap, "O5: steps[%zu] = %lld", i, (long long)o->steps[i]);
        if (sgd)
            OOM_REQUIRE(o->o.momentum == 0.0 || (o->steps[i] > 0) == (a != NULL), why, cap,
                        "O5: params[%zu] took %lld steps and has %s momentum buffer", i, (long long)o->steps[i],
                        a ? "a" : "no");
        else
            OOM_REQUIRE(o->steps[i] == 0 || (a && b), why, cap, "O5: params[%zu] took %lld steps without its state",
                        i, (long long)o->steps[i]);
        if (expensive) {
            const tensor *ts[4] = {p, a, b, step};
            char sub[160];
            for (int k = 0; k < 4; k++)
                if (ts[k] && tensor_check(ts[k], false, sub, sizeof sub) != OOM_OK)
                    return snprintf(why, cap, "O6: params[%zu]'s tensor %d: %s", i, k, sub), OOM_ECORRUPT;
        }
    }
    return OOM_OK;
}

static optimizer *optim_new(rt *r, optim_kind kind, tensor *const *params, size_t n, const optim_options *o)
{
    optimizer *opt = calloc(1, sizeof *opt);
    if (!opt || !(opt->params = calloc(n ? n : 1, sizeof *opt->params)) ||
        !(opt->state_a = calloc(n ? n : 1, sizeof *opt->state_a)) ||
        !(opt->state_b = calloc(n ? n : 1, sizeof *opt->state_b)) ||
        !(opt->state_step = calloc(n ? n : 1, sizeof *opt->state_step)) ||
        !(opt->steps = calloc(n ? n : 1, sizeof *opt->steps))) {
        fprintf(stderr, "oomlab: out of host memory\n");
        abort();
    }
    opt->rt = r;
    opt->kind = kind;
    opt->o = *o;
    opt->nparams = n;
    for (size_t i = 0; i < n; i++)
        opt->params[i] = tensor_retain(params[i]);
    OOM_VALIDATE("optimizer", optim_check, opt);
    return opt;
}

optimizer *optim_sgd(rt *r, tensor *const *params, size_t n, double lr, double momentum, double dampening,
                     double weight_decay, bool nesterov)
{
    optim_options o = {.lr = lr, .momentum = momentum, .dampening = dampening, .nesterov = nesterov,
                       .weight_decay = weight_decay};
    return optim_new(r, OPTIM_SGD, params, n, &o);
}

optimizer *optim_adam(rt *r, tensor *const *params, size_t n, double lr, double beta1, double beta2, double eps,
                      double weight_decay)
{
    optim_options o = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
    return optim_new(r, OPTIM_ADAM, params, n, &o);
}

void optim_free(optimizer *o)
{
    if (!o)
        return;
    OOM_VALIDATE("optimizer", optim_check, o);
    for (size_t i = 0; i < o->nparams; i++) {
        tensor_release(o->params[i]);
        tensor_release(o->state_a[i]);
        tensor_release(o->state_b[i]);
        tensor_release(o->state_step[i]);
    }
    free(o->params);
    free(o->state_a);
    free(o->state_b);
    free(o->state_step);
    free(o->steps);
    free(o);
}

/* Adam's state of parameter i, made at its first step (_init_group): [step,] exp_avg, exp_avg_sq. Only the missing
 * slots are made, so a step that ran out of memory half way can be retried. */
static bool init_adam_state(optimizer *o, size_t i)
{
    tensor *p = o->params[i];
    rt *r = o->rt;
    if (o->o.fused && !o->state_step[i] && !(o->state_step[i] = tensor_zeros(r, DT_F32, SCALAR)))
        return false;
    if (!o->state_a[i] && !(o->state_a[i] = tensor_zeros(r, p->dt, p->ndim, p->shape)))
        return false;
    if (!o->state_b[i] && !(o->state_b[i] = tensor_zeros(r, p->dt, p->ndim, p->shape)))
        return false;
    return true;
}

#define K(r, call) (!(r)->computes || op_kernel_ok((r), rt_kernels(r)->call))

/* The gradients the update reads: .grad, or with weight decay a temporary grad + wd * p (_foreach_add). */
static bool decayed_grads(optimizer *o, tensor **d)
{
    rt *r = o->rt;
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *p = o->params[i], *g = p->grad;
        if (!g)
            continue;
        if (o->o.weight_decay == 0.0) {
            d[i] = tensor_retain(g);
            continue;
        }
        d[i] = tensor_empty(r, g->dt, g->ndim, g->shape);
        if (!d[i] || !K(r, add(g->dt, tensor_data(d[i]), tensor_data(g), tensor_data(p), (float)o->o.weight_decay,
                               tensor_numel(g))))
            return false;
    }
    return true;
}

static void release_all(tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tensor_release(ts[i]);
        ts[i] = NULL;
    }
}

/* _multi_tensor_sgd: every missing momentum buffer is made (a clone of the gradient) before any parameter moves,
 * and kept only if the whole step succeeds, so an OOM leaves the optimizer as it was. */
static bool sgd_step(optimizer *o, tensor **d, tensor **bufs)
{
    rt *r = o->rt;
    if (!decayed_grads(o, d))
        return false;
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *p = o->params[i];
        if (d[i] && o->o.momentum != 0.0 && !o->state_a[i] && !(bufs[i] = tensor_empty(r, p->dt, p->ndim, p->shape)))
            return false;
    }
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *p = o->params[i];
        if (!d[i])
            continue;
        bool first = bufs[i] != NULL;
        tensor *buf = first ? bufs[i] : o->state_a[i];
        if (!K(r, sgd_step(p->dt, tensor_data(p), tensor_data(d[i]), buf ? tensor_data(buf) : NULL, tensor_numel(p),
                           (float)o->o.lr, (float)o->o.momentum, (float)o->o.dampening, 0.0f, o->o.nesterov, first)))
            return false;
        /* nesterov: _foreach_add_(device_grads, bufs, alpha=momentum) changes the gradients in place; without weight
         * decay they are the parameters' .grad */
        if (o->o.nesterov && o->o.momentum != 0.0 && o->o.weight_decay == 0.0) {
            tensor *g = p->grad;
            if (!K(r, add(g->dt, tensor_data(g), tensor_data(g), tensor_data(buf), (float)o->o.momentum,
                          tensor_numel(g))))
                return false;
            tensor_bump_version(g);
        }
        tensor_bump_version(p);
    }
    for (size_t i = 0; i < o->nparams; i++) { /* the state is written back: the step succeeded */
        if (bufs[i]) {
            o->state_a[i] = bufs[i];
            bufs[i] = NULL;
        }
        if (d[i])
            o->steps[i]++;
    }
    return true;
}

/* _multi_tensor_adam, or _fused_adam */
static bool adam_step(optimizer *o, tensor **d, tensor **denom)
{
    rt *r = o->rt;
    for (size_t i = 0; i < o->nparams; i++)
        if (o->params[i]->grad && !init_adam_state(o, i))
            return false;
    if (o->o.fused) {
        for (size_t i = 0; i < o->nparams; i++) {
            tensor *p = o->params[i], *g = p->grad;
            if (!g)
                continue;
            double t = (double)++o->steps[i];
            float bc1 = (float)(1.0 - pow(o->o.beta1, t)), bc2 = (float)(1.0 - pow(o->o.beta2, t));
            if (!K(r, fill(DT_F32, tensor_data(o->state_step[i]), 1, (float)t)) ||
                !K(r, adam_step(p->dt, tensor_data(p), tensor_data(g), tensor_data(o->state_a[i]),
                                tensor_data(o->state_b[i]), tensor_numel(p), (float)o->o.lr, (float)o->o.beta1,
                                (float)o->o.beta2, (float)o->o.eps, (float)o->o.weight_decay, bc1, bc2)))
                return false;
            tensor_bump_version(p);
        }
        return true;
    }
    if (!decayed_grads(o, d))
        return false;
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *p = o->params[i];
        if (!d[i])
            continue;
        o->steps[i]++;
        if (!K(r, adam_moments(p->dt, tensor_data(o->state_a[i]), tensor_data(o->state_b[i]), tensor_data(d[i]),
                               tensor_numel(p), (float)o->o.beta1, (float)o->o.beta2)))
            return false;
    }
    release_all(d, o->nparams); /* del device_grads */
    for (size_t i = 0; i < o->nparams; i++) { /* exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs); div_; add_(eps) */
        tensor *p = o->params[i];
        if (!p->grad)
            continue;
        float bc2 = (float)(1.0 - pow(o->o.beta2, (double)o->steps[i]));
        denom[i] = tensor_empty(r, p->dt, p->ndim, p->shape);
        if (!denom[i] || !K(r, adam_denom(p->dt, tensor_data(denom[i]), tensor_data(o->state_b[i]), tensor_numel(p),
                                          bc2, (float)o->o.eps)))
            return false;
    }
    for (size_t i = 0; i < o->nparams; i++) { /* params.addcdiv_(exp_avgs, denom, -step_size) */
        tensor *p = o->params[i];
        if (!denom[i])
            continue;
        double bc1 = 1.0 - pow(o->o.beta1, (double)o->steps[i]);
        if (!K(r, addcdiv(p->dt, tensor_data(p), tensor_data(o->state_a[i]), tensor_data(denom[i]),
                          (float)(-o->o.lr / bc1), tensor_numel(p))))
            return false;
        tensor_bump_version(p);
    }
    return true;
}

oom_status optim_step(optimizer *o)
{
    OOM_VALIDATE("optimizer", optim_check, o);
    rt *r = o->rt;
    if (!rt_ok(r))
        return r->status;
    /* per-parameter temporaries: d, the gradients the update reads; scratch, Adam's denominators or SGD's new
     * momentum buffers (kept by sgd_step only if the step succeeds) */
    tensor **d = calloc(o->nparams ? o->nparams : 1, sizeof *d);
    tensor **scratch = calloc(o->nparams ? o->nparams : 1, sizeof *scratch);
    if (!d || !scratch) {
        fprintf(stderr, "oomlab: out of host memory\n");
        abort();
    }
    RT_NO_GRAD(r)
    {
        if (o->kind == OPTIM_SGD)
            sgd_step(o, d, scratch);
        else
            adam_step(o, d, scratch);
    }
    release_all(d, o->nparams); /* the temporaries go when step() returns */
    release_all(scratch, o->nparams);
    free(d);
    free(scratch);
    OOM_VALIDATE("optimizer", optim_check, o);
    return r->status;
}

void optim_zero_grad(optimizer *o, bool set_to_none)
{
    OOM_VALIDATE("optimizer", optim_check, o);
    rt *r = o->rt;
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *p = o->params[i];
        if (!p->grad)
            continue;
        if (set_to_none) {
            tensor_release(p->grad);
            p->grad = NULL;
        } else if (tensor_numel(p->grad) > 0 && (rt_note_kernel(r), r->computes)) {
            op_kernel_ok(r, rt_kernels(r)->fill(p->grad->dt, tensor_data(p->grad), tensor_numel(p->grad), 0.0f));
            tensor_bump_version(p->grad);
        }
    }
    OOM_VALIDATE("optimizer", optim_check, o);
}
