/* optim.cu - CUDA versions of sgd_step, adam_step, adam_moments, adam_denom and addcdiv (kernels.h): koptim.h's per-element updates, the same
 * functions optim_ref.c runs, in the elementwise engine, so f32 tensors move in 16-byte accesses.
 */
#include "cuda_util.cuh"
#include "koptim.h"

/* p, g, buf (x[0], x[1], x[2]); the masks say whether buf is read and written (kc_ew). */
template <typename T> struct sgd_op {
    koptim_sgd k;
    unsigned reads, writes;
    __device__ void operator()(float *x) const { x[0] = koptim_sgd_elem(&k, x[0], x[1], &x[2]); }
};

oom_status k_sgd_step_cuda(dtype dt, void *p, const void *g, void *buf, int64_t n, float lr, float momentum,
                           float dampening, float weight_decay, bool nesterov, bool first)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !g || (momentum != 0.0f && !buf))))
        return KARGS_FAIL(dt, 1, n);
    const bool use_buf = momentum != 0.0f;
    const unsigned reads = 3u | (use_buf && !first ? 4u : 0u), writes = 1u | (use_buf ? 4u : 0u);
    const koptim_sgd k = koptim_sgd_make(lr, momentum, dampening, weight_decay, nesterov, first);
    return kc_dispatch<kc_ew<sgd_op>>(dt, __func__, n, p, g, use_buf ? buf : nullptr, nullptr, k, reads, writes);
}

/* p, g, m, v (x[0..3]). */
template <typename T> struct adam_op {
    koptim_adam k;
    static constexpr unsigned reads = 15, writes = 13;
    __device__ void operator()(float *x) const { x[0] = koptim_adam_elem(&k, x[0], x[1], &x[2], &x[3]); }
};

oom_status k_adam_step_cuda(dtype dt, void *p, const void *g, void *m, void *v, int64_t n, float lr, float beta1,
                            float beta2, float eps, float weight_decay, float bias_correction1,
                            float bias_correction2)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !g || !m || !v)) || !(bias_correction1 > 0.0f) ||
        !(bias_correction2 > 0.0f))
        return KARGS_FAIL(dt, 1, n);
    const koptim_adam k = koptim_adam_make(lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2);
    return kc_dispatch<kc_ew<adam_op>>(dt, __func__, n, p, g, m, v, k);
}

/* m, v, g (x[0..2]): moments in place. */
template <typename T> struct adam_moments_op {
    koptim_adam k;
    static constexpr unsigned reads = 7, writes = 3;
    __device__ void operator()(float *x) const { koptim_adam_moments(&k, x[2], &x[0], &x[1]); }
};

oom_status k_adam_moments_cuda(dtype dt, void *m, void *v, const void *g, int64_t n, float beta1, float beta2)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!m || !v || !g)))
        return KARGS_FAIL(dt, 1, n);
    const koptim_adam k = koptim_adam_make(0.0f, beta1, beta2, 0.0f, 0.0f, 1.0f, 1.0f);
    return kc_dispatch<kc_ew<adam_moments_op>>(dt, __func__, n, m, v, g, nullptr, k);
}

/* denom, v (x[0], x[1]). */
template <typename T> struct adam_denom_op {
    koptim_adam k;
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const { x[0] = koptim_adam_denom(&k, x[1]); }
};

oom_status k_adam_denom_cuda(dtype dt, void *denom, const void *v, int64_t n, float bias_correction2, float eps)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!denom || !v)) || !(bias_correction2 > 0.0f))
        return KARGS_FAIL(dt, 1, n);
    const koptim_adam k = koptim_adam_make(0.0f, 0.0f, 0.0f, eps, 0.0f, 1.0f, bias_correction2);
    return kc_dispatch<kc_ew<adam_denom_op>>(dt, __func__, n, denom, v, nullptr, nullptr, k);
}

/* p, t1, t2 (x[0..2]). */
template <typename T> struct addcdiv_op {
    float value;
    static constexpr unsigned reads = 7, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[0] + value * (x[1] / x[2]); }
};

oom_status k_addcdiv_cuda(dtype dt, void *p, const void *t1, const void *t2, float value, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!p || !t1 || !t2)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<addcdiv_op>>(dt, __func__, n, p, t1, t2, nullptr, value);
}
