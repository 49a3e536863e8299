/* optim.c - SGD and Adam. See optim.h. */
#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops.h"

static optimizer *optim_new(rt *r, optim_kind kind, tensor *const *params, size_t n, const optim_options *o)
{
    optimizer *opt = calloc(1, sizeof *opt);
    if (!opt || !(opt->params = calloc(n ? n : 1, sizeof *opt->params)) ||
        !(opt->state_a = calloc(n ? n : 1, sizeof *opt->state_a)) ||
        !(opt->state_b = calloc(n ? n : 1, sizeof *opt->state_b)) ||
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
    for (size_t i = 0; i < o->nparams; i++) {
        tensor_release(o->params[i]);
        tensor_release(o->state_a[i]);
        tensor_release(o->state_b[i]);
    }
    free(o->params);
    free(o->state_a);
    free(o->state_b);
    free(o->steps);
    free(o);
}

/* The state of parameter p, made at its first step (_init_group). */
static bool init_state(optimizer *o, size_t i)
{
    tensor *p = o->params[i];
    rt *r = o->rt;
    if (o->kind == OPTIM_ADAM && !o->state_a[i]) {
        o->state_a[i] = tensor_zeros(r, p->dt, p->ndim, p->shape); /* exp_avg */
        o->state_b[i] = tensor_zeros(r, p->dt, p->ndim, p->shape); /* exp_avg_sq */
        return o->state_b[i] != NULL;
    }
    if (o->kind == OPTIM_SGD && o->o.momentum != 0.0 && !o->state_a[i]) {
        /* momentum_buffer = torch.clone(grad).detach(); the kernel fills it on the first step */
        o->state_a[i] = tensor_empty(r, p->dt, p->ndim, p->shape);
        return o->state_a[i] != NULL;
    }
    return true;
}

oom_status optim_step(optimizer *o)
{
    rt *r = o->rt;
    if (!rt_ok(r))
        return r->status;
    oom_status st = OOM_OK;
    RT_NO_GRAD(r)
    {
        for (size_t i = 0; i < o->nparams && st == OOM_OK; i++) {
            tensor *p = o->params[i], *g = p->grad;
            if (!g)
                continue;
            bool first = o->kind == OPTIM_SGD && o->o.momentum != 0.0 && !o->state_a[i];
            if (!init_state(o, i)) {
                st = r->status;
                break;
            }
            int64_t n = tensor_numel(p);
            o->steps[i]++;
            if (r->computes) {
                oom_status k;
                if (o->kind == OPTIM_SGD) {
                    k = r->k->sgd_step(p->dt, tensor_data(p), tensor_data(g),
                                       o->state_a[i] ? tensor_data(o->state_a[i]) : NULL, n, (float)o->o.lr,
                                       (float)o->o.momentum, (float)o->o.dampening, (float)o->o.weight_decay,
                                       o->o.nesterov, first);
                } else {
                    double bc1 = 1.0 - pow(o->o.beta1, (double)o->steps[i]);
                    double bc2 = 1.0 - pow(o->o.beta2, (double)o->steps[i]);
                    k = r->k->adam_step(p->dt, tensor_data(p), tensor_data(g), tensor_data(o->state_a[i]),
                                        tensor_data(o->state_b[i]), n, (float)o->o.lr, (float)o->o.beta1,
                                        (float)o->o.beta2, (float)o->o.eps, (float)o->o.weight_decay, (float)bc1,
                                        (float)bc2);
                }
                if (!op_check(r, k)) {
                    st = r->status;
                    break;
                }
            }
            tensor_bump_version(p); /* p.add_(...) under no_grad */
        }
    }
    return st;
}

void optim_zero_grad(optimizer *o, bool set_to_none)
{
    rt *r = o->rt;
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *p = o->params[i];
        if (!p->grad)
            continue;
        if (set_to_none) {
            tensor_release(p->grad);
            p->grad = NULL;
        } else if (r->computes && tensor_numel(p->grad) > 0) {
            op_check(r, r->k->fill(p->grad->dt, tensor_data(p->grad), tensor_numel(p->grad), 0.0f));
            tensor_bump_version(p->grad);
        }
    }
}
