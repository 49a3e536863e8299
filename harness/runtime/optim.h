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

/* Invariants (optim_check; checked builds run it when an optimizer is made, around every step and zero_grad, and
 * when it is freed):
 *   O1  rt is set, kind is SGD or Adam, and the five per-parameter arrays exist;
 *   O2  params[i] are leaves (no grad_fn) the optimizer holds a reference to;
 *   O3  state_a[i] and state_b[i] are NULL or plain tensors (no grad_fn, no requires_grad) of params[i]'s shape and
 *       dtype: SGD's momentum buffer (state_a, only with momentum; state_b unused), Adam's exp_avg and
 *       exp_avg_sq, made in that order (state_b set implies state_a set);
 *   O4  state_step[i] is NULL, or with fused Adam a 0-dim f32 tensor, made before exp_avg (state_a set with fused
 *       implies state_step set);
 *   O5  steps[i] >= 0 counts parameter i's completed steps: steps[i] > 0 implies its state exists (SGD with
 *       momentum: state_a; Adam: state_a and state_b), and an SGD buffer exists only after a step;
 *   O6  (expensive) every parameter and state tensor holds tensor_check's invariants. */
typedef struct optimizer {
    rt *rt;
    optim_kind kind;
    optim_options o;
    size_t nparams;
    tensor **params;
    tensor **state_a, **state_b, **state_step;
    int64_t *steps;
} optimizer;

/* torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov). Never NULL (host bookkeeping
 * aborts). */
optimizer *optim_sgd(rt *r, tensor *const *params, size_t n, double lr, double momentum, double dampening,
                     double weight_decay, bool nesterov);
/* torch.optim.Adam(params, lr, betas=(beta1, beta2), eps, weight_decay). Never NULL (as optim_sgd). */
optimizer *optim_adam(rt *r, tensor *const *params, size_t n, double lr, double beta1, double beta2, double eps,
                      double weight_decay);
void optim_free(optimizer *o); /* NULL: no-op; cannot fail */

/* optimizer.step(): parameters without a .grad are skipped. A device OOM while creating state is recorded in
 * the rt and returned. */
oom_status optim_step(optimizer *o);
/* optimizer.zero_grad(set_to_none). A failure of the zeroing kernel is recorded in the rt. */
void optim_zero_grad(optimizer *o, bool set_to_none);

/* Validator (core/check.h): invariants O1-O6 above. OOM_OK, or OOM_ECORRUPT with the broken one named in why[cap];
 * touches no error record. */
oom_status optim_check(const optimizer *o, bool expensive, char *why, size_t cap);

OOM_END_DECLS

#endif
