/* koptim.h - one element of sgd_step and adam_step (kernels.h), compiled for the host and the device:
 * optim_ref.c and optim.cu both call these, so the two follow one formula.
 *
 * torch.optim's single-tensor updates (_single_tensor_sgd, _single_tensor_adam in torch/optim/sgd.py and
 * adam.py), operation by operation, in f32:
 *
 *   SGD   d = g + weight_decay * p                               (grad.add(param, alpha=weight_decay), if != 0)
 *         buf = first ? d : momentum * buf + (1 - dampening) * d (buf.mul_(momentum).add_(d, alpha=...))
 *         d = nesterov ? d + momentum * buf : buf                (if momentum != 0)
 *         p = p + (-lr) * d                                      (param.add_(d, alpha=-lr))
 *   Adam  d = g + weight_decay * p                               (if != 0)
 *         m = lerp(m, d, 1 - beta1)                              (exp_avg.lerp_(grad, 1 - beta1))
 *         v = beta2 * v + ((1 - beta2) * d) * d                  (mul_(beta2).addcmul_(d, d, value=1 - beta2))
 *         denom = sqrt(v) / sqrt(bias_correction2) + eps
 *         p = p + (-(lr / bias_correction1)) * (m / denom)       (param.addcdiv_(m, denom, value=-step_size))
 *
 * PyTorch's default Adam (foreach) runs the same formulas in three passes with a temporary for denom: the kernels
 * adam_moments, adam_denom and addcdiv use koptim_adam_moments and koptim_adam_denom below.
 *
 * lerp is PyTorch's: |w| < 0.5 ? m + w (d - m) : d - (d - m)(1 - w), equal to the contract's
 * beta1 m + (1 - beta1) d up to rounding. The scalar prologue (1 - dampening, 1 - beta, lr / bc1, sqrt(bc2))
 * is computed in double and rounded to f32, as Python computes it and the kernel receives it. The device build
 * lets nvcc contract a * b + c into FMAs, so the CUDA results differ from the references by an ulp or so.
 */
#ifndef OOMLAB_KOPTIM_H
#define OOMLAB_KOPTIM_H

#include <math.h>
#include <stdbool.h>

#ifdef __CUDACC__
#define KOPTIM_FN static __host__ __device__ inline
#else
#define KOPTIM_FN static inline
#endif

typedef struct koptim_sgd {
    float neg_lr, momentum, damp1, weight_decay; /* -lr, momentum, 1 - dampening, weight_decay */
    bool nesterov, first;
} koptim_sgd;

typedef struct koptim_adam {
    float w, w1;    /* the lerp weight 1 - beta1 and its complement */
    float value;    /* 1 - beta2 */
    float neg_step; /* -(lr / bias_correction1) */
    float bc2_sqrt; /* sqrt(bias_correction2) */
    float beta2, eps, weight_decay;
} koptim_adam;

KOPTIM_FN koptim_sgd koptim_sgd_make(float lr, float momentum, float dampening, float weight_decay, bool nesterov,
                                     bool first)
{
    koptim_sgd k = {-lr, momentum, (float)(1.0 - (double)dampening), weight_decay, nesterov, first};
    return k;
}

KOPTIM_FN koptim_adam koptim_adam_make(float lr, float beta1, float beta2, float eps, float weight_decay,
                                       float bias_correction1, float bias_correction2)
{
    float w = (float)(1.0 - (double)beta1);
    koptim_adam k = {w,
                     1.0f - w,
                     (float)(1.0 - (double)beta2),
                     (float)-((double)lr / (double)bias_correction1),
                     (float)sqrt((double)bias_correction2),
                     beta2,
                     eps,
                     weight_decay};
    return k;
}

/* One SGD element: returns the new p; *b is buf in and out (read after the first step, written with momentum). */
KOPTIM_FN float koptim_sgd_elem(const koptim_sgd *k, float p, float d, float *b)
{
    if (k->weight_decay != 0.0f)
        d = d + k->weight_decay * p;
    if (k->momentum != 0.0f) {
        *b = k->first ? d : k->momentum * *b + k->damp1 * d;
        d = k->nesterov ? d + k->momentum * *b : *b;
    }
    return p + k->neg_lr * d;
}

/* Adam's moments, in place (exp_avg.lerp_(d, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(d, d, 1 - beta2)). */
KOPTIM_FN void koptim_adam_moments(const koptim_adam *k, float d, float *m, float *v)
{
    *m = fabsf(k->w) < 0.5f ? *m + k->w * (d - *m) : d - (d - *m) * k->w1;
    *v = *v * k->beta2 + k->value * d * d;
}

/* Adam's denominator: sqrt(v) / sqrt(bias_correction2) + eps. */
KOPTIM_FN float koptim_adam_denom(const koptim_adam *k, float v) { return sqrtf(v) / k->bc2_sqrt + k->eps; }

/* One Adam element: returns the new p; *m and *v are updated. */
KOPTIM_FN float koptim_adam_elem(const koptim_adam *k, float p, float d, float *m, float *v)
{
    if (k->weight_decay != 0.0f)
        d = d + k->weight_decay * p;
    koptim_adam_moments(k, d, m, v);
    return p + k->neg_step * (*m / koptim_adam_denom(k, *v));
}

#endif
