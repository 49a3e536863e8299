/* reduce.cu - CUDA versions of sum_rows and sum_all (kernels.h). f32 accumulation, one rounding on store, an
 * empty sum is 0 (as reduce_ref.c). No workspace: sum_rows gives each column to one column of a block (the
 * block's rows split the matrix rows, then add up in shared memory); sum_all is one block.
 */
#include "cuda_util.cuh"

#define SUM_ROWS_X 32 /* columns per block: a warp reads 32 consecutive elements of a row */
#define SUM_ROWS_Y 16 /* row lanes per column */

template <typename T> __global__ void sum_rows_kernel(T *out, const T *a, int64_t m, int64_t n)
{
    __shared__ float part[SUM_ROWS_Y][SUM_ROWS_X + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t c0 = (int64_t)blockIdx.x * SUM_ROWS_X; c0 < n; c0 += (int64_t)gridDim.x * SUM_ROWS_X) {
        const int64_t j = c0 + tx;
        float acc = 0.0f;
        if (j < n)
            for (int64_t i = ty; i < m; i += SUM_ROWS_Y)
                acc += kc_to_f(a[i * n + j]);
        part[ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && j < n) {
            float s = 0.0f;
#pragma unroll
            for (int r = 0; r < SUM_ROWS_Y; r++)
                s += part[r][tx];
            out[j] = kc_from_f<T>(s);
        }
        __syncthreads();
    }
}

struct sum_rows_launch {
    template <typename T> static oom_status run(const char *kernel, void *out, const void *a, int64_t m, int64_t n)
    {
        dim3 block(SUM_ROWS_X, SUM_ROWS_Y);
        sum_rows_kernel<T><<<kc_blocks(n, SUM_ROWS_X), block>>>((T *)out, (const T *)a, m, n);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_sum_rows_cuda(dtype dt, void *out, const void *a, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (n > 0 && (!out || (m > 0 && !a))))
        return KARGS_FAIL(dt, m, n);
    if (n == 0)
        return OOM_OK;
    return kc_dispatch<sum_rows_launch>(dt, __func__, out, a, m, n);
}

#define SUM_ALL_THREADS 1024

/* One block: 16-byte loads over the aligned body when vec, a scalar tail. */
template <typename T, int V> __global__ void sum_all_kernel(T *out, const T *a, int64_t n)
{
    typedef kc_vec<T, V> vec;
    const int64_t groups = n / V;
    float acc = 0.0f;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
        vec v = reinterpret_cast<const vec *>(a)[g];
#pragma unroll
        for (int e = 0; e < V; e++)
            acc += kc_to_f(v.v[e]);
    }
    for (int64_t i = groups * V + threadIdx.x; i < n; i += blockDim.x)
        acc += kc_to_f(a[i]);
    acc = kc_block_sum(acc);
    if (threadIdx.x == 0)
        *out = kc_from_f<T>(acc);
}

struct sum_all_launch {
    template <typename T> static oom_status run(const char *kernel, void *out, const void *a, int64_t n)
    {
        if (kc_aligned16(a))
            sum_all_kernel<T, kc_vec_len<T>()><<<1, SUM_ALL_THREADS>>>((T *)out, (const T *)a, n);
        else
            sum_all_kernel<T, 1><<<1, SUM_ALL_THREADS>>>((T *)out, (const T *)a, n);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_sum_all_cuda(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || !out || (n > 0 && !a))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<sum_all_launch>(dt, __func__, out, a, n);
}
