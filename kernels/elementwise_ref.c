/* elementwise_ref.c - CPU references of the elementwise kernels (kernels.h): fill, cast, add, mul, scale, relu,
 * relu_backward, tanh, tanh_backward, bias_rows, unscale_check.
 *
 * f16/bf16 elements are computed in f32 and rounded once when stored. Outputs may alias inputs exactly (each
 * element is read before it is written).
 */
#include <math.h>
#include <string.h>

#include "kargs.h"
#include "kernels.h"
#include "ref_util.h"

oom_status k_fill_ref(dtype dt, void *x, int64_t n, float value)
{
    bool i64_ok = dt != DT_I64 || (value >= -0x1p63f && value < 0x1p63f); /* NaN fails too */
    if ((!kargs_float(dt) && dt != DT_I64) || !i64_ok || n < 0 || (n > 0 && !x))
        return KARGS_FAIL(dt, 1, n);
    if (dt == DT_F32) {
        float *p = x;
        for (int64_t i = 0; i < n; i++)
            p[i] = value;
    } else if (dt == DT_I64) { /* torch.full(..., dtype=int64): truncation toward zero */
        int64_t *p = x, v = (int64_t)value;
        for (int64_t i = 0; i < n; i++)
            p[i] = v;
    } else {
        uint16_t *p = x, v = dt == DT_F16 ? f32_to_f16(value) : f32_to_bf16(value);
        for (int64_t i = 0; i < n; i++)
            p[i] = v;
    }
    return OOM_OK;
}

/* dst may be src only when the element sizes match (a wider dst would overwrite unread elements). */
oom_status k_cast_ref(dtype dst_dt, void *dst, dtype src_dt, const void *src, int64_t n)
{
    bool types_ok = (kargs_float(dst_dt) && kargs_float(src_dt)) || (dst_dt == DT_I64 && src_dt == DT_I64);
    bool alias_ok = dst != src || dtype_size(dst_dt) == dtype_size(src_dt);
    if (!types_ok || !alias_ok || n < 0 || (n > 0 && (!dst || !src)))
        return KARGS_FAIL(dst_dt, 1, n);
    if (dst_dt == src_dt) {
        if (n > 0 && dst != src)
            memmove(dst, src, (size_t)n * dtype_size(dst_dt));
        return OOM_OK;
    }
    /* f32 <-> f16 <-> bf16 through f32: exact widening, one rounding */
#define CAST_TO(T)                                                                                                 \
    do {                                                                                                           \
        if (src_dt == DT_F32)                                                                                      \
            for (int64_t i = 0; i < n; i++)                                                                        \
                ST_##T(dst, i, LD_F32(src, i));                                                                    \
        else if (src_dt == DT_F16)                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                                        \
                ST_##T(dst, i, LD_F16(src, i));                                                                    \
        else                                                                                                       \
            for (int64_t i = 0; i < n; i++)                                                                        \
                ST_##T(dst, i, LD_BF16(src, i));                                                                   \
    } while (0)
    REF_FLOAT_DISPATCH(dst_dt, CAST_TO)
#undef CAST_TO
    return OOM_OK;
}

oom_status k_add_ref(dtype dt, void *out, const void *a, const void *b, float alpha, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a || !b)))
        return KARGS_FAIL(dt, 1, n);
#define ADD(T) REF_MAP(T, out, n, LD_##T(a, i) + alpha * LD_##T(b, i))
    REF_FLOAT_DISPATCH(dt, ADD)
#undef ADD
    return OOM_OK;
}

oom_status k_mul_ref(dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a || !b)))
        return KARGS_FAIL(dt, 1, n);
#define MUL(T) REF_MAP(T, out, n, LD_##T(a, i) * LD_##T(b, i))
    REF_FLOAT_DISPATCH(dt, MUL)
#undef MUL
    return OOM_OK;
}

oom_status k_scale_ref(dtype dt, void *out, const void *a, float s, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
#define SCALE(T) REF_MAP(T, out, n, s * LD_##T(a, i))
    REF_FLOAT_DISPATCH(dt, SCALE)
#undef SCALE
    return OOM_OK;
}

/* torch.relu (clamp_min(a, 0)): NaN propagates, -0 becomes +0. */
static inline float relu1(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

oom_status k_relu_ref(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
#define RELU(T) REF_MAP(T, out, n, relu1(LD_##T(a, i)))
    REF_FLOAT_DISPATCH(dt, RELU)
#undef RELU
    return OOM_OK;
}

/* threshold_backward(go, y, 0): y <= 0 ? 0 : go, so a NaN y passes go through, as in PyTorch. */
oom_status k_relu_backward_ref(dtype dt, void *gi, const void *go, const void *y, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, 1, n);
#define RELU_BW(T) REF_MAP(T, gi, n, LD_##T(y, i) <= 0.0f ? 0.0f : LD_##T(go, i))
    REF_FLOAT_DISPATCH(dt, RELU_BW)
#undef RELU_BW
    return OOM_OK;
}

oom_status k_tanh_ref(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
#define TANH(T) REF_MAP(T, out, n, tanhf(LD_##T(a, i)))
    REF_FLOAT_DISPATCH(dt, TANH)
#undef TANH
    return OOM_OK;
}

oom_status k_tanh_backward_ref(dtype dt, void *gi, const void *go, const void *y, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, 1, n);
#define TANH_BW(T) REF_MAP(T, gi, n, LD_##T(go, i) * (1.0f - LD_##T(y, i) * LD_##T(y, i)))
    REF_FLOAT_DISPATCH(dt, TANH_BW)
#undef TANH_BW
    return OOM_OK;
}

/* A copy of bias into every row: exact for every dtype. */
oom_status k_bias_rows_ref(dtype dt, void *out, const void *bias, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m * n > 0 && (!out || !bias)))
        return KARGS_FAIL(dt, m, n);
    if (m * n == 0)
        return OOM_OK;
    size_t row = (size_t)n * dtype_size(dt);
    for (int64_t i = 0; i < m; i++)
        memcpy((char *)out + (size_t)i * row, bias, row);
    return OOM_OK;
}

/* found_inf is set when an element is inf/NaN before the multiplication or after it, as stored (an f16 that
 * overflows when unscaled counts). */
oom_status k_unscale_check_ref(dtype dt, void *a, int64_t n, const float *inv_scale, float *found_inf)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!a || !inv_scale || !found_inf)))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    float inv = *inv_scale;
    bool found = false;
#define UNSCALE(T)                                                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        float x = LD_##T(a, i);                                                                                    \
        ST_##T(a, i, x * inv);                                                                                     \
        found |= !isfinite(x) || !isfinite(LD_##T(a, i));                                                          \
    }
    REF_FLOAT_DISPATCH(dt, UNSCALE)
#undef UNSCALE
    if (found)
        *found_inf = 1.0f;
    return OOM_OK;
}

/* ---- retained_graph: pow ------------------------------------------------------------------------------------- */

/* x ^ e, with the exponents PyTorch's pow special-cases (pow_out: 0 and 1; PowKernel.cu: the rest). */
static inline float pow1(float x, float e)
{
    if (e == 2.0f)
        return x * x;
    if (e == 1.0f)
        return x;
    if (e == 0.0f)
        return 1.0f;
    if (e == 3.0f)
        return x * x * x;
    if (e == 0.5f)
        return sqrtf(x);
    if (e == -0.5f)
        return 1.0f / sqrtf(x);
    if (e == -1.0f)
        return 1.0f / x;
    if (e == -2.0f)
        return 1.0f / (x * x);
    return powf(x, e);
}

oom_status k_pow_scalar_ref(dtype dt, void *out, const void *a, float exponent, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
#define POW(T) REF_MAP(T, out, n, pow1(LD_##T(a, i), exponent))
    REF_FLOAT_DISPATCH(dt, POW)
#undef POW
    return OOM_OK;
}

/* ---- dangling_tensors, inplace_ops: sigmoid, sigmoid_backward, add_scalar ---------------------------------- */

/* 1 / (1 + exp(-x)), as ATen's CUDA kernel computes it in the op math type (f32). */
static inline float sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }

oom_status k_sigmoid_ref(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
#define SIGMOID(T) REF_MAP(T, out, n, sigmoid1(LD_##T(a, i)))
    REF_FLOAT_DISPATCH(dt, SIGMOID)
#undef SIGMOID
    return OOM_OK;
}

/* sigmoid_backward(grad_output, output): go * (1 - y) * y, in that order. */
oom_status k_sigmoid_backward_ref(dtype dt, void *gi, const void *go, const void *y, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, 1, n);
#define SIGMOID_BW(T) REF_MAP(T, gi, n, LD_##T(go, i) * (1.0f - LD_##T(y, i)) * LD_##T(y, i))
    REF_FLOAT_DISPATCH(dt, SIGMOID_BW)
#undef SIGMOID_BW
    return OOM_OK;
}

oom_status k_add_scalar_ref(dtype dt, void *out, const void *a, float s, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
#define ADD_SCALAR(T) REF_MAP(T, out, n, LD_##T(a, i) + s)
    REF_FLOAT_DISPATCH(dt, ADD_SCALAR)
#undef ADD_SCALAR
    return OOM_OK;
}

/* ---- inference_oom: copy (torch.cat's per-input copy) ------------------------------------------------------- */

oom_status k_copy_ref(dtype dt, void *dst, const void *src, int64_t n)
{
    if ((!kargs_float(dt) && dt != DT_I64) || n < 0 || (n > 0 && (!dst || !src)))
        return KARGS_FAIL(dt, 1, n);
    if (n > 0)
        memcpy(dst, src, (size_t)n * dtype_size(dt));
    return OOM_OK;
}
