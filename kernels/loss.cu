/* loss.cu - CUDA versions of mse_loss (one block with a block reduction) and mse_loss_backward (the elementwise
 * engine); the formulas are loss_ref.c's. out and go are device scalars of type dt, read in the kernels.
 */
#include "cuda_util.cuh"

#define MSE_THREADS 1024

/* out = sum((a - b)^2) / n; n == 0 gives NaN. */
template <typename T, int V> __global__ void mse_loss_kernel(T *out, const T *a, const T *b, int64_t n)
{
    typedef kc_vec<T, V> vec;
    const int64_t groups = n / V;
    float acc = 0.0f;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        vec va = reinterpret_cast<const vec *>(a)[g], vb = reinterpret_cast<const vec *>(b)[g];
#pragma unroll
        for (int e = 0; e < V; e++) {
            float d = kc_to_f(va.v[e]) - kc_to_f(vb.v[e]);
            acc += d * d;
        }
    }
    for (int64_t i = groups * V + threadIdx.x; i < n; i += blockDim.x) {
        float d = kc_to_f(a[i]) - kc_to_f(b[i]);
        acc += d * d;
    }
    acc = kc_block_sum(acc);
    if (threadIdx.x == 0)
        *out = kc_from_f<T>(acc / (float)n);
}

struct mse_loss_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *out, const void *a, const void *b, int64_t n)
    {
        if (kc_aligned16(a) && kc_aligned16(b))
            mse_loss_kernel<T, kc_vec_len<T>()><<<1, MSE_THREADS>>>((T *)out, (const T *)a, (const T *)b, n);
        else
            mse_loss_kernel<T, 1><<<1, MSE_THREADS>>>((T *)out, (const T *)a, (const T *)b, n);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_mse_loss_cuda(dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || !out || (n > 0 && (!a || !b)))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<mse_loss_launch>(dt, __func__, out, a, b, n);
}

/* gi, a, b: gi = norm * (a - b) * go, norm = 2 / n, go read from the device. */
template <typename T> struct mse_backward_op {
    const void *go;
    float norm;
    static constexpr unsigned reads = 6, writes = 1;
    __device__ void operator()(float *x) const { x[0] = norm * (x[1] - x[2]) * kc_to_f(*(const T *)go); }
};

oom_status k_mse_loss_backward_cuda(dtype dt, void *gi, const void *go, const void *a, const void *b, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !a || !b)))
        return KARGS_FAIL(dt, 1, n);
    const float norm = n > 0 ? 2.0f / (float)n : 0.0f;
    return kc_dispatch<kc_ew<mse_backward_op>>(dt, __func__, n, gi, a, b, nullptr, go, norm);
}
