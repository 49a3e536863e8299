/* optim.h - torch.optim.SGD and torch.optim.Adam over a list of parameters, and zero_grad.
 *
 * Memory, as in PyTorch 2.11:
 *   SGD with momentum: a momentum buffer per parameter, made at the first step as a clone of the gradient.
 *   Adam: exp_avg and exp_avg_sq per parameter, zeros made lazily at the first step (the state is empty until
 *         then, so the first step() raises reserved and peak memory by two copies of the parameters); `step`
 *         is a host counter, as PyTorch keeps it on the CPU unless capturable/fused.
 *   zero_grad(set_to_none=true), the default since PyTorch 2.0, frees every .grad; set_to_none=false zeroes
 *   them in place and keeps the memory.
 * step() follows PyTorch's default implementation on CUDA, the multi-tensor ("foreach") one, temporaries
 * included, so its peak is PyTorch's:
 *   weight decay: one temporary grad + weight_decay * p per parameter (_foreach_add), for the whole step (SGD)
 *         or until the moments are updated (Adam: `del device_grads`);
 *   SGD: the momentum buffers at the first step (clones), then p += -lr * d; with nesterov and no weight decay
 *         the .grad tensors are changed in place to d (_foreach_add_(device_grads, bufs)), as in PyTorch;
 *   Adam: the moments in place, then one temporary denominator per parameter, all at once (_foreach_sqrt),
 *         then p.addcdiv_(m, denom, -lr / bias_correction1), then the temporaries go.
 * With fused set (torch.optim.Adam(fused=True)) Adam runs one kernel per parameter with no temporaries, and its
 * `step` state is a 0-dim f32 tensor on the device, made before exp_avg as PyTorch makes it.
 * step() runs under no_grad and bumps every parameter's version, which is what breaks a retained graph that
 * saved a parameter.
 */
#ifndef OOMLAB_OPTIM_H
#define OOMLAB_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

typedef enum optim_kind { OPTIM_SGD, OPTIM_ADAM } optim_kind;

typedef struct optim_options {
    double lr;
    double momentum, dampening; /* SGD */
    bool nesterov;              /* SGD */
    double beta1, beta2, eps;   /* Adam */
    double weight_decay;
    bool fused;                 /* Adam: torch.optim.Adam(fused=True) (set it before the first step) */
} optim_options;

/* Invariants: params[i] are retained leaves; state_a[i] / state_b[i] are NULL until parameter i's first step
 * with a gradient (then: SGD momentum_buffer / Adam exp_avg and exp_avg_sq, same shape and dtype as it);
 * state_step[i] is Adam(fused=True)'s device step counter, else NULL; steps[i] counts parameter i's steps. */
typedef struct optimizer {
    rt *rt;
    optim_kind kind;
    optim_options o;
    size_t nparams;
    tensor **params;
    tensor **state_a, **state_b, **state_step;
    int64_t *steps;
} optimizer;

/* torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov). */
optimizer *optim_sgd(rt *r, tensor *const *params, size_t n, double lr, double momentum, double dampening,
                     double weight_decay, bool nesterov);
/* torch.optim.Adam(params, lr, betas=(beta1, beta2), eps, weight_decay). */
optimizer *optim_adam(rt *r, tensor *const *params, size_t n, double lr, double beta1, double beta2, double eps,
                      double weight_decay);
void optim_free(optimizer *o);

/* optimizer.step(): parameters without a .grad are skipped. A device OOM while creating state is recorded in
 * the rt and returned. */
oom_status optim_step(optimizer *o);
/* optimizer.zero_grad(set_to_none). */
void optim_zero_grad(optimizer *o, bool set_to_none);

OOM_END_DECLS

#endif
