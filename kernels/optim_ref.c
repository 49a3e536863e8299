/* optim_ref.c - CPU references of sgd_step, adam_step, adam_moments, adam_denom and addcdiv (kernels.h): koptim.h's per-element updates (PyTorch's
 * single-tensor SGD and Adam, operation by operation) over the tensor. f16/bf16 tensors (p, buf, m, v) are
 * updated in f32 and each stored value rounded once.
 */
#include "kargs.h"
#include "kernels.h"
#include "koptim.h"
#include "ref_util.h"

oom_status k_sgd_step_ref(dtype dt, void *p, const void *g, void *buf, int64_t n, float lr, float momentum,
                          float dampening, float weight_decay, bool nesterov, bool first)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !g || (momentum != 0.0f && !buf))))
        return KARGS_FAIL(dt, 1, n);
    const koptim_sgd k = koptim_sgd_make(lr, momentum, dampening, weight_decay, nesterov, first);
    const bool read_buf = momentum != 0.0f && !first;
#define SGD(T)                                                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        float b = read_buf ? LD_##T(buf, i) : 0.0f;                                                                \
        ST_##T(p, i, koptim_sgd_elem(&k, LD_##T(p, i), LD_##T(g, i), &b));                                         \
        if (momentum != 0.0f)                                                                                      \
            ST_##T(buf, i, b);                                                                                     \
    }
    REF_FLOAT_DISPATCH(dt, SGD)
#undef SGD
    return OOM_OK;
}

/* bias_correction1 and bias_correction2 (1 - beta^step) must be > 0. */
oom_status k_adam_step_ref(dtype dt, void *p, const void *g, void *m, void *v, int64_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay, float bias_correction1,
                           float bias_correction2)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !g || !m || !v)) || !(bias_correction1 > 0.0f) ||
        !(bias_correction2 > 0.0f))
        return KARGS_FAIL(dt, 1, n);
    const koptim_adam k = koptim_adam_make(lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2);
#define ADAM(T)                                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        float mv = LD_##T(m, i), vv = LD_##T(v, i);                                                                \
        ST_##T(p, i, koptim_adam_elem(&k, LD_##T(p, i), LD_##T(g, i), &mv, &vv));                                  \
        ST_##T(m, i, mv);                                                                                          \
        ST_##T(v, i, vv);                                                                                          \
    }
    REF_FLOAT_DISPATCH(dt, ADAM)
#undef ADAM
    return OOM_OK;
}

oom_status k_adam_moments_ref(dtype dt, void *m, void *v, const void *g, int64_t n, float beta1, float beta2)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!m || !v || !g)))
        return KARGS_FAIL(dt, 1, n);
    const koptim_adam k = koptim_adam_make(0.0f, beta1, beta2, 0.0f, 0.0f, 1.0f, 1.0f);
#define MOMENTS(T)                                                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        float mv = LD_##T(m, i), vv = LD_##T(v, i);                                                                \
        koptim_adam_moments(&k, LD_##T(g, i), &mv, &vv);                                                           \
        ST_##T(m, i, mv);                                                                                          \
        ST_##T(v, i, vv);                                                                                          \
    }
    REF_FLOAT_DISPATCH(dt, MOMENTS)
#undef MOMENTS
    return OOM_OK;
}

/* bias_correction2 must be > 0. */
oom_status k_adam_denom_ref(dtype dt, void *denom, const void *v, int64_t n, float bias_correction2, float eps)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!denom || !v)) || !(bias_correction2 > 0.0f))
        return KARGS_FAIL(dt, 1, n);
    const koptim_adam k = koptim_adam_make(0.0f, 0.0f, 0.0f, eps, 0.0f, 1.0f, bias_correction2);
#define DENOM(T)                                                                                                   \
    for (int64_t i = 0; i < n; i++)                                                                                \
        ST_##T(denom, i, koptim_adam_denom(&k, LD_##T(v, i)));
    REF_FLOAT_DISPATCH(dt, DENOM)
#undef DENOM
    return OOM_OK;
}

oom_status k_addcdiv_ref(dtype dt, void *p, const void *t1, const void *t2, float value, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !t1 || !t2)))
        return KARGS_FAIL(dt, 1, n);
#define ADDCDIV(T)                                                                                                 \
    for (int64_t i = 0; i < n; i++)                                                                                \
        ST_##T(p, i, LD_##T(p, i) + value * (LD_##T(t1, i) / LD_##T(t2, i)));
    REF_FLOAT_DISPATCH(dt, ADDCDIV)
#undef ADDCDIV
    return OOM_OK;
}
