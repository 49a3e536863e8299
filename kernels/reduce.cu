/* reduce.cu - CUDA versions of sum_rows and sum_all (kernels.h). f32 accumulation, one rounding on store, an
 * empty sum is 0 (as reduce_ref.c); the order of the additions depends only on the shape, so a result repeats bit
 * for bit. No allocation: sum_rows gives each column to one column of a block (the block's 32 row lanes split the
 * matrix rows, eight independent sums each, then add up in shared memory); sum_all spreads over up to
 * SUM_ALL_BLOCKS blocks, each leaving its partial sum in a fixed array of this module, and the last block to finish
 * adds the partials in block order (the kernels run on the default stream, one at a time). sum_squares does the
 * same in double into a module variable, then copies it to the host: it synchronises, as .item() does.
 */
#include "cuda_util.cuh"

#define SUM_ROWS_X 32 /* columns per block: a warp reads 32 consecutive elements of a row */
#define SUM_ROWS_Y 32 /* row lanes per column */
#define SUM_ROWS_ILP 8 /* independent sums per lane: loads in flight */

template <typename T> __global__ void sum_rows_kernel(T *out, const T *a, int64_t m, int64_t n)
{
    __shared__ float part[SUM_ROWS_Y][SUM_ROWS_X + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t c0 = (int64_t)blockIdx.x * SUM_ROWS_X; c0 < n; c0 += (int64_t)gridDim.x * SUM_ROWS_X) {
        const int64_t j = c0 + tx;
        float acc[SUM_ROWS_ILP] = {};
        if (j < n) {
            int64_t i = ty;
            for (; i + (SUM_ROWS_ILP - 1) * SUM_ROWS_Y < m; i += SUM_ROWS_ILP * SUM_ROWS_Y)
#pragma unroll
                for (int u = 0; u < SUM_ROWS_ILP; u++)
                    acc[u] += kc_to_f(a[(i + u * SUM_ROWS_Y) * n + j]);
            for (; i < m; i += SUM_ROWS_Y) /* fewer than SUM_ROWS_ILP rows left */
                acc[0] += kc_to_f(a[i * n + j]);
        }
        part[ty][tx] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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
#define SUM_ALL_BLOCKS 264 /* two per SM of an H100 or H200 */

/* The sum of v over a 1-D block of SUM_ALL_THREADS threads, every thread gets it (f32: kc_block_sum). */
__device__ __forceinline__ float block_sum(float v) { return kc_block_sum(v); }
__device__ __forceinline__ double block_sum(double v)
{
    __shared__ double part[SUM_ALL_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[threadIdx.x & 31];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    return v;
}

/* A grid's sum without allocation: thread 0 of each block leaves the block's partial (already summed over the
 * block) in partials[blockIdx.x]; the last block to finish adds the partials in block order into *total (every
 * thread) and returns true, setting *finished back to 0 for the next launch; the other blocks return false. Every
 * thread of the block must call it. */
template <typename Acc>
__device__ bool grid_total(Acc block_partial, Acc *partials, unsigned int *finished, Acc *total)
{
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = block_partial;
        __threadfence(); /* the partial is visible before the count says so */
        last = atomicAdd(finished, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return false;
    __threadfence();
    Acc p = 0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
        p += *(volatile Acc *)&partials[b];
    *total = block_sum(p);
    if (threadIdx.x == 0)
        *finished = 0;
    return true;
}

__device__ float sum_all_partials[SUM_ALL_BLOCKS];
__device__ unsigned int sum_all_finished; /* blocks done; the last one sets it back to 0 */

/* 16-byte loads over the aligned body when V > 1, a scalar tail; each block's partial, then the last block's sum of
 * the partials in block order. */
template <typename T, int V> __global__ void sum_all_kernel(T *out, const T *a, int64_t n)
{
    typedef kc_vec<T, V> vec;
    const int64_t groups = n / V, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                  stride = (int64_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (int64_t g = first; g < groups; g += stride) {
        vec v = reinterpret_cast<const vec *>(a)[g];
#pragma unroll
        for (int e = 0; e < V; e++)
            acc += kc_to_f(v.v[e]);
    }
    for (int64_t i = groups * V + first; i < n; i += stride)
        acc += kc_to_f(a[i]);
    acc = kc_block_sum(acc);
    if (gridDim.x == 1) {
        if (threadIdx.x == 0)
            *out = kc_from_f<T>(acc);
        return;
    }
    float total;
    if (grid_total(acc, sum_all_partials, &sum_all_finished, &total) && threadIdx.x == 0)
        *out = kc_from_f<T>(total);
}

struct sum_all_launch {
    template <typename T> static oom_status run(const char *kernel, void *out, const void *a, int64_t n)
    {
        constexpr int V = kc_vec_len<T>();
        const int64_t per_block = (int64_t)SUM_ALL_THREADS * V * 4; /* at least 4 loads a thread */
        int64_t blocks = (n + per_block - 1) / per_block;
        unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > SUM_ALL_BLOCKS ? SUM_ALL_BLOCKS : blocks);
        if (kc_aligned16(a))
            sum_all_kernel<T, V><<<grid, SUM_ALL_THREADS>>>((T *)out, (const T *)a, n);
        else
            sum_all_kernel<T, 1><<<grid, SUM_ALL_THREADS>>>((T *)out, (const T *)a, n);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_sum_all_cuda(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || !out || (n > 0 && !a))
        return KARGS_FAIL(dt, 1, n);
    return kc_dispatch<sum_all_launch>(dt, __func__, out, a, n);
}

/* ---- sum_squares: sum of a[i]^2 in double, to the host ------------------------------------------------------ */

__device__ double sum_squares_partials[SUM_ALL_BLOCKS];
__device__ unsigned int sum_squares_finished;
__device__ double sum_squares_result;

template <typename T> __global__ void sum_squares_kernel(const T *a, int64_t n)
{
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    double acc = 0.0;
    for (int64_t i = first; i < n; i += stride) {
        double v = (double)kc_to_f(a[i]);
        acc += v * v;
    }
    acc = block_sum(acc);
    double total;
    if (grid_total(acc, sum_squares_partials, &sum_squares_finished, &total) && threadIdx.x == 0)
        sum_squares_result = total;
}

struct sum_squares_launch {
    template <typename T> static oom_status run(const char *kernel, const void *a, int64_t n, double *acc)
    {
        const int64_t per_block = (int64_t)SUM_ALL_THREADS * 16;
        int64_t blocks = (n + per_block - 1) / per_block;
        unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > SUM_ALL_BLOCKS ? SUM_ALL_BLOCKS : blocks);
        sum_squares_kernel<T><<<grid, SUM_ALL_THREADS>>>((const T *)a, n);
        oom_status st = KC_LAUNCHED(kernel);
        if (st != OOM_OK)
            return st;
        double v = 0.0;
        cudaError_t e = cudaMemcpyFromSymbol(&v, sum_squares_result, sizeof v); /* waits for the kernel */
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return kc_status(e, kernel, "cudaMemcpyFromSymbol", __FILE__, __LINE__);
        }
        *acc += v;
        return OOM_OK;
    }
};

oom_status k_sum_squares_cuda(dtype dt, const void *a, int64_t n, double *acc)
{
    if (!kargs_float(dt) || n < 0 || !acc || (n > 0 && !a))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    return kc_dispatch<sum_squares_launch>(dt, __func__, a, n, acc);
}
