/* optim_ref.c - CPU references of sgd_step and adam_step (kernels.h): torch.optim's single-tensor updates
 * (_single_tensor_sgd, _single_tensor_adam in torch/optim/sgd.py and adam.py), one element at a time in f32
 * with the same operations in the same order:
 *
 *   SGD   d = g + weight_decay * p                          (grad.add(param, alpha=weight_decay), if != 0)
 *         buf = first ? d : momentum * buf + (1 - dampening) * d    (buf.mul_(momentum).add_(d, alpha=...))
 *         d = nesterov ? d + momentum * buf : buf                   (if momentum != 0)
 *         p = p + (-lr) * d                                         (param.add_(d, alpha=-lr))
 *   Adam  d = g + weight_decay * p                                  (if != 0)
 *         m = lerp(m, d, 1 - beta1)                                 (exp_avg.lerp_(grad, 1 - beta1))
 *         v = beta2 * v + ((1 - beta2) * d) * d                     (mul_(beta2).addcmul_(d, d, value=1 - beta2))
 *         denom = sqrt(v) / sqrt(bias_correction2) + eps
 *         p = p + (-(lr / bias_correction1)) * (m / denom)          (param.addcdiv_(m, denom, value=-step_size))
 *
 * lerp is PyTorch's: |w| < 0.5 ? m + w * (d - m) : d - (d - m) * (1 - w), equal to the contract's
 * beta1 m + (1 - beta1) d up to rounding. The scalar prologue (1 - dampening, 1 - beta, lr / bc1,
 * sqrt(bc2)) is computed in double and rounded to f32, as Python computes it and the kernel receives it.
 * f16/bf16 tensors (p, buf, m, v) are updated in f32 and each stored value rounded once.
 */
#include <math.h>

#include "kargs.h"
#include "kernels.h"
#include "ref_util.h"

oom_status k_sgd_step_ref(dtype dt, void *p, const void *g, void *buf, int64_t n, float lr, float momentum,
                          float dampening, float weight_decay, bool nesterov, bool first)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !g || (momentum != 0.0f && !buf))))
        return KARGS_FAIL(dt, 1, n);
    const float damp1 = (float)(1.0 - (double)dampening), neg_lr = -lr;
#define SGD(T)                                                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        float pv = LD_##T(p, i), d = LD_##T(g, i);                                                                 \
        if (weight_decay != 0.0f)                                                                                  \
            d = d + weight_decay * pv;                                                                             \
        if (momentum != 0.0f) {                                                                                    \
            float b = first ? d : momentum * LD_##T(buf, i) + damp1 * d;                                           \
            ST_##T(buf, i, b);                                                                                     \
            d = nesterov ? d + momentum * b : b;                                                                   \
        }                                                                                                          \
        ST_##T(p, i, pv + neg_lr * d);                                                                             \
    }
    REF_FLOAT_DISPATCH(dt, SGD)
#undef SGD
    return OOM_OK;
}

oom_status k_adam_step_ref(dtype dt, void *p, const void *g, void *m, void *v, int64_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay, float bias_correction1,
                           float bias_correction2)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !g || !m || !v)) || !(bias_correction1 > 0.0f) ||
        !(bias_correction2 > 0.0f))
        return KARGS_FAIL(dt, 1, n);
    const float w = (float)(1.0 - (double)beta1), w1 = 1.0f - w; /* lerp weight and its complement */
    const float value = (float)(1.0 - (double)beta2);
    const float neg_step = (float)-((double)lr / (double)bias_correction1);
    const float bc2_sqrt = (float)sqrt((double)bias_correction2);
#define ADAM(T)                                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        float pv = LD_##T(p, i), d = LD_##T(g, i), mv = LD_##T(m, i), vv = LD_##T(v, i);                           \
        if (weight_decay != 0.0f)                                                                                  \
            d = d + weight_decay * pv;                                                                             \
        mv = fabsf(w) < 0.5f ? mv + w * (d - mv) : d - (d - mv) * w1;                                              \
        vv = vv * beta2 + value * d * d;                                                                           \
        ST_##T(m, i, mv);                                                                                          \
        ST_##T(v, i, vv);                                                                                          \
        float denom = sqrtf(vv) / bc2_sqrt + eps;                                                                  \
        ST_##T(p, i, pv + neg_step * (mv / denom));                                                                \
    }
    REF_FLOAT_DISPATCH(dt, ADAM)
#undef ADAM
    return OOM_OK;
}
