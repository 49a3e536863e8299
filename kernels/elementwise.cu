/* elementwise.cu - CUDA versions of the elementwise kernels (kernels.h): fill, cast, add, mul, scale, relu,
 * relu_backward, tanh, tanh_backward, bias_rows, unscale_check. Same results as elementwise_ref.c: bit for bit
 * for fill, cast, relu, relu_backward, bias_rows; to an ulp or two of f32 for the rest (FMA contraction,
 * tanhf).
 */
#include "cuda_util.cuh"

/* ---- functors of the elementwise engine (x[k] is array k; see kc_ew) ----------------------------------------- */

template <typename T> struct add_op { /* out, a, b */
    float alpha;
    static constexpr unsigned reads = 6, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[1] + alpha * x[2]; }
};

template <typename T> struct mul_op { /* out, a, b */
    static constexpr unsigned reads = 6, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[1] * x[2]; }
};

template <typename T> struct scale_op { /* out, a */
    float s;
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const { x[0] = s * x[1]; }
};

template <typename T> struct relu_op { /* out, a: NaN propagates, -0 becomes +0 (elementwise_ref.c) */
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const { x[0] = (x[1] > 0.0f || x[1] != x[1]) ? x[1] : 0.0f; }
};

template <typename T> struct relu_backward_op { /* gi, go, y */
    static constexpr unsigned reads = 6, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[2] <= 0.0f ? 0.0f : x[1]; }
};

template <typename T> struct tanh_op { /* out, a */
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const { x[0] = tanhf(x[1]); }
};

template <typename T> struct tanh_backward_op { /* gi, go, y */
    static constexpr unsigned reads = 6, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[1] * (1.0f - x[2] * x[2]); }
};

/* a; inv_scale and found_inf are device pointers (read in the kernel, never copied to the host). found_inf is
 * set when a value is inf/NaN before the multiplication or as stored after it; every writer stores 1. */
template <typename T> struct unscale_op {
    const float *inv_scale;
    float *found_inf;
    static constexpr unsigned reads = 1, writes = 1;
    __device__ void operator()(float *x) const
    {
        float y = x[0] * *inv_scale;
        if (!isfinite(x[0]) || !isfinite(kc_to_f(kc_from_f<T>(y))))
            *found_inf = 1.0f;
        x[0] = y;
    }
};

oom_status k_add_cuda(dtype dt, void *out, const void *a, const void *b, float alpha, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a || !b)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<add_op>>(dt, __func__, n, out, a, b, nullptr, alpha);
}

oom_status k_mul_cuda(dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a || !b)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<mul_op>>(dt, __func__, n, out, a, b, nullptr);
}

oom_status k_scale_cuda(dtype dt, void *out, const void *a, float s, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<scale_op>>(dt, __func__, n, out, a, nullptr, nullptr, s);
}

oom_status k_relu_cuda(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<relu_op>>(dt, __func__, n, out, a, nullptr, nullptr);
}

oom_status k_relu_backward_cuda(dtype dt, void *gi, const void *go, const void *y, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<relu_backward_op>>(dt, __func__, n, gi, go, y, nullptr);
}

oom_status k_tanh_cuda(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<tanh_op>>(dt, __func__, n, out, a, nullptr, nullptr);
}

oom_status k_tanh_backward_cuda(dtype dt, void *gi, const void *go, const void *y, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<tanh_backward_op>>(dt, __func__, n, gi, go, y, nullptr);
}

oom_status k_unscale_check_cuda(dtype dt, void *a, int64_t n, const float *inv_scale, float *found_inf)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!a || !inv_scale || !found_inf)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<unscale_op>>(dt, __func__, n, a, nullptr, nullptr, nullptr, inv_scale, found_inf);
}

/* ---- raw copies: fill, bias_rows (bits, not values: exact for every type) ------------------------------------ */

/* x[i] = v for n units U (an element, or 16 bytes of them). */
template <typename U> __global__ void fill_kernel(U *x, int64_t n, U v)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = v;
}

/* Store the element bits v in x[0..n): 16-byte stores over the aligned body, one element at a time for the
 * rest. */
template <typename E> static oom_status fill_bits(const char *kernel, void *x, int64_t n, E v)
{
    constexpr int V = (int)(16 / sizeof(E));
    int64_t body = kc_aligned16(x) ? n / V : 0;
    if (body > 0) {
        kc_vec<E, V> vv;
        for (int k = 0; k < V; k++)
            vv.v[k] = v;
        fill_kernel<kc_vec<E, V>><<<kc_blocks(body, KC_THREADS), KC_THREADS>>>((kc_vec<E, V> *)x, body, vv);
        oom_status st = KC_LAUNCHED(kernel);
        if (st != OOM_OK)
            return st;
    }
    int64_t done = body * V;
    if (done == n)
        return OOM_OK;
    fill_kernel<E><<<kc_blocks(n - done, KC_THREADS), KC_THREADS>>>((E *)x + done, n - done, v);
    return KC_LAUNCHED(kernel);
}

oom_status k_fill_cuda(dtype dt, void *x, int64_t n, float value)
{
    bool i64_ok = dt != DT_I64 || (value >= -0x1p63f && value < 0x1p63f);
    if ((!kargs_float(dt) && dt != DT_I64) || !i64_ok || n < 0 || (n > 0 && !x))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    switch (dt) { /* the stored bits are made on the host, with dtype.h's conversions */
    case DT_F32:
        return fill_bits<uint32_t>(__func__, x, n, f32_bits(value));
    case DT_F16:
        return fill_bits<uint16_t>(__func__, x, n, f32_to_f16(value));
    case DT_BF16:
        return fill_bits<uint16_t>(__func__, x, n, f32_to_bf16(value));
    default:
        return fill_bits<uint64_t>(__func__, x, n, (uint64_t)(int64_t)value);
    }
}

/* out[r, :] = bias for rows r, in units U (elements, or 16-byte groups when a row is a whole number of them). */
template <typename U> __global__ void bias_rows_kernel(U *out, const U *bias, int64_t m, int64_t nu)
{
    for (int64_t r = blockIdx.y; r < m; r += gridDim.y)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nu;
             j += (int64_t)gridDim.x * blockDim.x)
            out[r * nu + j] = bias[j];
}

template <typename U>
static oom_status bias_rows_units(const char *kernel, void *out, const void *bias, int64_t m, int64_t nu)
{
    dim3 grid(kc_blocks(nu, KC_THREADS), (unsigned)(m < 65535 ? m : 65535));
    bias_rows_kernel<U><<<grid, KC_THREADS>>>((U *)out, (const U *)bias, m, nu);
    return KC_LAUNCHED(kernel);
}

oom_status k_bias_rows_cuda(dtype dt, void *out, const void *bias, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m * n > 0 && (!out || !bias)))
        return KARGS_FAIL(dt, m, n);
    if (m * n == 0)
        return OOM_OK;
    int64_t row_bytes = n * (int64_t)dtype_size(dt);
    if (row_bytes % 16 == 0 && kc_aligned16(out) && kc_aligned16(bias))
        return bias_rows_units<uint4>(__func__, out, bias, m, row_bytes / 16);
    if (dt == DT_F32)
        return bias_rows_units<uint32_t>(__func__, out, bias, m, n);
    return bias_rows_units<uint16_t>(__func__, out, bias, m, n);
}

/* ---- cast ---------------------------------------------------------------------------------------------------- */

/* V elements a thread per step: with V = 4, a float32 side moves 16 bytes a load or store and a 16-bit side 8
 * (V = 1 where the bases are not aligned to that); the tail past the last whole group one element at a time. */
template <typename D, typename S, int V> __global__ void cast_kernel(D *dst, const S *src, int64_t n)
{
    const int64_t groups = n / V, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                  stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = first; g < groups; g += stride) {
        kc_vec<S, V> v = reinterpret_cast<const kc_vec<S, V> *>(src)[g];
        kc_vec<D, V> o;
#pragma unroll
        for (int e = 0; e < V; e++)
            o.v[e] = kc_from_f<D>(kc_to_f(v.v[e]));
        reinterpret_cast<kc_vec<D, V> *>(dst)[g] = o;
    }
    for (int64_t i = groups * V + first; i < n; i += stride)
        dst[i] = kc_from_f<D>(kc_to_f(src[i]));
}

/* Cast from S to dt's type. */
template <typename S> struct cast_from {
    template <typename D> static oom_status run(const char *kernel, void *dst, const void *src, int64_t n)
    {
        bool vec = ((uintptr_t)src % (4 * sizeof(S))) == 0 && ((uintptr_t)dst % (4 * sizeof(D))) == 0;
        if (vec)
            cast_kernel<D, S, 4><<<kc_blocks(n / 4 + 1, KC_THREADS), KC_THREADS>>>((D *)dst, (const S *)src, n);
        else
            cast_kernel<D, S, 1><<<kc_blocks(n, KC_THREADS), KC_THREADS>>>((D *)dst, (const S *)src, n);
        return KC_LAUNCHED(kernel);
    }
};

/* dst may be src only when the element sizes match (as in k_cast_ref). */
oom_status k_cast_cuda(dtype dst_dt, void *dst, dtype src_dt, const void *src, int64_t n)
{
    bool types_ok = (kargs_float(dst_dt) && kargs_float(src_dt)) || (dst_dt == DT_I64 && src_dt == DT_I64);
    bool alias_ok = dst != src || dtype_size(dst_dt) == dtype_size(src_dt);
    if (!types_ok || !alias_ok || n < 0 || (n > 0 && (!dst || !src)))
        return KARGS_FAIL(dst_dt, 1, n);
    if (n == 0 || (dst_dt == src_dt && dst == src))
        return OOM_OK;
    if (dst_dt == src_dt) { /* a copy, asynchronous on the default stream */
        cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)n * dtype_size(dst_dt), cudaMemcpyDeviceToDevice, 0);
        if (e != cudaSuccess)
            (void)cudaGetLastError(); /* not left for the next launch check to report */
        return kc_status(e, __func__, "cudaMemcpyAsync", __FILE__, __LINE__);
    }
    switch (src_dt) {
    case DT_F32:
        return kc_dispatch<cast_from<float>>(dst_dt, __func__, dst, src, n);
    case DT_F16:
        return kc_dispatch<cast_from<__half>>(dst_dt, __func__, dst, src, n);
    default:
        return kc_dispatch<cast_from<__nv_bfloat16>>(dst_dt, __func__, dst, src, n);
    }
}

/* ---- retained_graph: pow ------------------------------------------------------------------------------------- */

/* out, a: x ^ e with PyTorch's special cases (elementwise_ref.c, pow1). */
template <typename T> struct pow_op {
    float e;
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const
    {
        float v = x[1];
        x[0] = e == 2.0f    ? v * v
               : e == 1.0f  ? v
               : e == 0.0f  ? 1.0f
               : e == 3.0f  ? v * v * v
               : e == 0.5f  ? sqrtf(v)
               : e == -0.5f ? 1.0f / sqrtf(v)
               : e == -1.0f ? 1.0f / v
               : e == -2.0f ? 1.0f / (v * v)
                            : powf(v, e);
    }
};

oom_status k_pow_scalar_cuda(dtype dt, void *out, const void *a, float exponent, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<pow_op>>(dt, __func__, n, out, a, nullptr, nullptr, exponent);
}

/* ---- dangling_tensors, inplace_ops: sigmoid, sigmoid_backward, add_scalar ---------------------------------- */

template <typename T> struct sigmoid_op { /* out, a: 1 / (1 + exp(-a)) in f32, as ATen's CUDA kernel */
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const { x[0] = 1.0f / (1.0f + expf(-x[1])); }
};

template <typename T> struct sigmoid_backward_op { /* gi, go, y: go * (1 - y) * y */
    static constexpr unsigned reads = 6, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[1] * (1.0f - x[2]) * x[2]; }
};

template <typename T> struct add_scalar_op { /* out, a */
    float s;
    static constexpr unsigned reads = 2, writes = 1;
    __device__ void operator()(float *x) const { x[0] = x[1] + s; }
};

oom_status k_sigmoid_cuda(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<sigmoid_op>>(dt, __func__, n, out, a, nullptr, nullptr);
}

oom_status k_sigmoid_backward_cuda(dtype dt, void *gi, const void *go, const void *y, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<sigmoid_backward_op>>(dt, __func__, n, gi, go, y, nullptr);
}

oom_status k_add_scalar_cuda(dtype dt, void *out, const void *a, float s, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<kc_ew<add_scalar_op>>(dt, __func__, n, out, a, nullptr, nullptr, s);
}

/* ---- inference_oom: copy (torch.cat's per-input copy) ------------------------------------------------------- */

/* A device-to-device copy, asynchronous on the default stream (no allocation). */
oom_status k_copy_cuda(dtype dt, void *dst, const void *src, int64_t n)
{
    if ((!kargs_float(dt) && dt != DT_I64) || n < 0 || (n > 0 && (!dst || !src)))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)n * dtype_size(dt), cudaMemcpyDeviceToDevice, 0);
    if (e != cudaSuccess)
        (void)cudaGetLastError(); /* not left for the next launch check to report */
    return kc_status(e, __func__, "cudaMemcpyAsync", __FILE__, __LINE__);
}
