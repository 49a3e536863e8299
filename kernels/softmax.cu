/* softmax.cu - CUDA versions of log_softmax, log_softmax_backward, nll_loss and nll_loss_backward (kernels.h;
 * the formulas are softmax_ref.c's, which are PyTorch's).
 *
 * A row of log_softmax and its backward belongs to one warp when n <= ROW_WARP_MAX (8 rows per block), else to
 * one block of ROW_BLOCK threads; the row is read three times (max, sum, write), from L1/L2 after the first.
 * nll_loss is one block. A target outside [0, n) fails a device assertion, as PyTorch's "device-side assert
 * triggered": the kernel aborts and the next synchronising call reports OOM_ECUDA.
 */
#include <assert.h>

#include "cuda_util.cuh"

#define ROW_WARP_MAX 1024
#define ROW_BLOCK 256

/* Reductions over the threads that share a row: a warp (W = 32) or the whole block (W = blockDim.x). */
template <int W> __device__ __forceinline__ float row_sum(float v)
{
    if constexpr (W == 32)
        return kc_warp_sum(v);
    else
        return kc_block_sum(v);
}

template <int W> __device__ __forceinline__ float row_max(float v)
{
    if constexpr (W == 32)
        return kc_warp_max(v);
    else
        return kc_block_max(v);
}

/* out[r, :] = (a - max) - log(sum(exp(a - max))). W threads per row; rows of a block: blockDim.x / W. */
template <typename T, int W> __global__ void log_softmax_kernel(T *out, const T *a, int64_t m, int64_t n)
{
    const int rows_per_block = blockDim.x / W, lane = threadIdx.x % W;
    const int64_t first = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / W;
    for (int64_t r = first; r < m; r += (int64_t)gridDim.x * rows_per_block) { /* uniform over the row's threads */
        const T *x = a + r * n;
        float mx = -INFINITY;
        for (int64_t j = lane; j < n; j += W)
            mx = fmaxf(mx, kc_to_f(x[j]));
        mx = row_max<W>(mx);
        float s = 0.0f;
        for (int64_t j = lane; j < n; j += W)
            s += expf(kc_to_f(x[j]) - mx);
        const float logsum = logf(row_sum<W>(s));
        T *y = out + r * n;
        for (int64_t j = lane; j < n; j += W)
            y[j] = kc_from_f<T>((kc_to_f(x[j]) - mx) - logsum);
    }
}

/* gi[r, :] = go - exp(y) * sum(go). */
template <typename T, int W>
__global__ void log_softmax_backward_kernel(T *gi, const T *go, const T *y, int64_t m, int64_t n)
{
    const int rows_per_block = blockDim.x / W, lane = threadIdx.x % W;
    const int64_t first = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / W;
    for (int64_t r = first; r < m; r += (int64_t)gridDim.x * rows_per_block) {
        const T *g = go + r * n, *yr = y + r * n;
        float s = 0.0f;
        for (int64_t j = lane; j < n; j += W)
            s += kc_to_f(g[j]);
        s = row_sum<W>(s);
        T *o = gi + r * n;
        for (int64_t j = lane; j < n; j += W)
            o[j] = kc_from_f<T>(kc_to_f(g[j]) - expf(kc_to_f(yr[j])) * s);
    }
}

/* Rows of ROW_BLOCK threads: ROW_BLOCK / 32 warp rows or one block row. Every thread of a block takes part in
 * the same number of row iterations (the loop bound is uniform per row group, and a block row's group is the
 * block), so the block reduction's barriers are reached by all. */
struct log_softmax_launch {
    template <typename T> static oom_status run(const char *kernel, void *out, const void *a, int64_t m, int64_t n)
    {
        if (n <= ROW_WARP_MAX)
            log_softmax_kernel<T, 32><<<kc_blocks(m, ROW_BLOCK / 32), ROW_BLOCK>>>((T *)out, (const T *)a, m, n);
        else
            log_softmax_kernel<T, ROW_BLOCK><<<kc_blocks(m, 1), ROW_BLOCK>>>((T *)out, (const T *)a, m, n);
        return KC_LAUNCHED(kernel);
    }
};

struct log_softmax_backward_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *gi, const void *go, const void *y, int64_t m, int64_t n)
    {
        if (n <= ROW_WARP_MAX)
            log_softmax_backward_kernel<T, 32>
                <<<kc_blocks(m, ROW_BLOCK / 32), ROW_BLOCK>>>((T *)gi, (const T *)go, (const T *)y, m, n);
        else
            log_softmax_backward_kernel<T, ROW_BLOCK>
                <<<kc_blocks(m, 1), ROW_BLOCK>>>((T *)gi, (const T *)go, (const T *)y, m, n);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_log_softmax_cuda(dtype dt, void *out, const void *a, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m * n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, m, n);
    if (m * n == 0)
        return OOM_OK;
    return kc_dispatch<log_softmax_launch>(dt, __func__, out, a, m, n);
}

oom_status k_log_softmax_backward_cuda(dtype dt, void *gi, const void *go, const void *y, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m * n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, m, n);
    if (m * n == 0)
        return OOM_OK;
    return kc_dispatch<log_softmax_backward_launch>(dt, __func__, gi, go, y, m, n);
}

#define NLL_THREADS 1024

/* One block: loss = -(sum of logp[i, target[i]]) / m, total_weight = m. */
template <typename T>
__global__ void nll_loss_kernel(T *loss, T *total_weight, const T *logp, const int64_t *target, int64_t m,
                                int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
        const int64_t t = target[i];
        assert(t >= 0 && t < n);
        acc += kc_to_f(logp[i * n + t]);
    }
    acc = kc_block_sum(acc);
    if (threadIdx.x == 0) {
        const float tw = (float)m;
        *loss = kc_from_f<T>(-acc / tw);
        *total_weight = kc_from_f<T>(tw);
    }
}

/* gi[r, j] = j == target[r] ? -(go / total_weight) : 0, every element written once (no separate zeroing). */
template <typename T>
__global__ void nll_loss_backward_kernel(T *gi, const T *go, const int64_t *target, const T *total_weight,
                                         int64_t m, int64_t n)
{
    const T g = kc_from_f<T>(-(kc_to_f(*go) / kc_to_f(*total_weight)));
    const T zero = kc_from_f<T>(0.0f);
    for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
        const int64_t t = target[r];
        assert(t >= 0 && t < n);
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
             j += (int64_t)gridDim.x * blockDim.x)
            gi[r * n + j] = j == t ? g : zero;
    }
}

struct nll_loss_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *loss, void *total_weight, const void *logp,
                          const int64_t *target, int64_t m, int64_t n)
    {
        nll_loss_kernel<T><<<1, NLL_THREADS>>>((T *)loss, (T *)total_weight, (const T *)logp, target, m, n);
        return KC_LAUNCHED(kernel);
    }
};

struct nll_loss_backward_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *gi, const void *go, const int64_t *target,
                          const void *total_weight, int64_t m, int64_t n)
    {
        dim3 grid(kc_blocks(n, KC_THREADS), (unsigned)(m < 65535 ? m : 65535));
        nll_loss_backward_kernel<T>
            <<<grid, KC_THREADS>>>((T *)gi, (const T *)go, target, (const T *)total_weight, m, n);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_nll_loss_cuda(dtype dt, void *loss, void *total_weight, const void *logp, const int64_t *target,
                           int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || !loss || !total_weight || (m > 0 && (!logp || !target)))
        return KARGS_FAIL(dt, m, n);
    return kc_dispatch<nll_loss_launch>(dt, __func__, loss, total_weight, logp, target, m, n);
}

oom_status k_nll_loss_backward_cuda(dtype dt, void *gi, const void *go, const int64_t *target,
                                    const void *total_weight, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m > 0 && (!gi || !go || !target || !total_weight)))
        return KARGS_FAIL(dt, m, n);
    if (m == 0)
        return OOM_OK;
    return kc_dispatch<nll_loss_backward_launch>(dt, __func__, gi, go, target, total_weight, m, n);
}
