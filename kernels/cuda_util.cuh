/* cuda_util.cuh - what the CUDA kernels (the kernels/NAME.cu files) share.
 *
 *   kc_to_f / kc_from_f<T>   element <-> f32 for T = float, __half, __nv_bfloat16; stores round to nearest even
 *                            (__float2half_rn, __float2bfloat16_rn: the bits of dtype.h's host conversions)
 *   kc_vec<T, V>             V elements loaded or stored as one aligned access (16 bytes when V = 16 / sizeof T)
 *   kc_dispatch<F>(dt, ...)  F::run<T>(...) for the storage type T of dt
 *   kc_ew<Op>                the elementwise engine: up to four same-typed arrays, a functor over f32 values,
 *                            grid-stride, 16-byte accesses when every pointer is aligned, a scalar tail
 *   kc_blocks, KC_THREADS    launch sizes: a grid-stride grid capped at KC_MAX_BLOCKS
 *   KC_LAUNCHED(kernel)      the check after every launch: OOM_ECUDA with the CUDA error in the last-error record
 *   kc_warp_* / kc_block_*   f32 sums and maxima over a warp or a whole (1-D) block
 *   kc_gemm_tile             a GEMM block's tile, in L2-friendly groups
 *
 * Kernels launch on the default stream, never synchronise and never allocate.
 */
#ifndef OOMLAB_CUDA_UTIL_CUH
#define OOMLAB_CUDA_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kargs.h"
#include "kernels.h"

/* ---- element conversions ------------------------------------------------------------------------------------- */

__device__ __forceinline__ float kc_to_f(float x) { return x; }
__device__ __forceinline__ float kc_to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float kc_to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T kc_from_f(float x);
template <> __device__ __forceinline__ float kc_from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half kc_from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 kc_from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

template <typename T, int V> struct alignas(sizeof(T) * V) kc_vec {
    T v[V];
};

/* Elements per 16-byte access. */
template <typename T> constexpr int kc_vec_len() { return (int)(16 / sizeof(T)); }

static inline bool kc_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- GEMM tiles ----------------------------------------------------------------------------------------------- */

/* Block b's tile (tm, tn) of a tiles_m x tiles_n grid of C: blocks walk groups of 8 tile rows column by column, so
 * the blocks resident at one time share A rows and B columns in L2 (gemm.cu and gemm_sm90.cu). */
__device__ __forceinline__ void kc_gemm_tile(int tiles_m, int tiles_n, int *tm, int *tn)
{
    const int group = 8;
    const int64_t b = blockIdx.x, per_group = (int64_t)group * tiles_n;
    const int first = (int)(b / per_group) * group;
    const int rows = min(tiles_m - first, group);
    const int in_group = (int)(b % per_group);
    *tm = first + in_group % rows;
    *tn = in_group / rows;
}

/* ---- launches ------------------------------------------------------------------------------------------------ */

#define KC_THREADS 256
#define KC_MAX_BLOCKS 4096 /* enough to fill any GPU; larger sizes loop (grid-stride) */

/* Blocks of `threads` for `work` items (at least one block). */
static inline unsigned kc_blocks(int64_t work, int threads)
{
    int64_t b = (work + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > KC_MAX_BLOCKS ? KC_MAX_BLOCKS : b);
}

/* OOM_OK for cudaSuccess, else OOM_ECUDA with "KERNEL: what: cudaError..." in the last-error record. */
static inline oom_status kc_status(cudaError_t e, const char *kernel, const char *what, const char *file, int line)
{
    if (e == cudaSuccess)
        return OOM_OK;
    oom_error_set(OOM_ECUDA, file, line, "%s: %s: %s", kernel, what, cudaGetErrorName(e));
    return OOM_ECUDA;
}

/* The check after every launch (cudaGetLastError also clears a launch error). */
#define KC_LAUNCHED(kernel) kc_status(cudaGetLastError(), (kernel), "launch failed", __FILE__, __LINE__)

/* F::template run<T>(args...) for dt's storage type; the caller has checked dt. */
template <typename F, typename... Args> static oom_status kc_dispatch(dtype dt, Args... args)
{
    switch (dt) {
    case DT_F32:
        return F::template run<float>(args...);
    case DT_F16:
        return F::template run<__half>(args...);
    case DT_BF16:
        return F::template run<__nv_bfloat16>(args...);
    default:
        return OOM_EINVAL;
    }
}

/* ---- the elementwise engine ---------------------------------------------------------------------------------- */

/* Op<T> has `unsigned reads, writes` (bit k: array k is loaded / stored) and
 * `__device__ void operator()(float x[4]) const`, which maps the loaded values to the stored ones. Element i
 * of every array is read before element i of any array is written, by the same thread, so outputs may alias
 * inputs exactly. */
template <typename T> struct kc_arrays {
    T *p[4];
};

template <typename T, int V, typename Op> __global__ void kc_ew_kernel(kc_arrays<T> a, int64_t n, Op op)
{
    typedef kc_vec<T, V> vec;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t groups = n / V;
    for (int64_t g = tid; g < groups; g += stride) {
        vec v[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            if ((op.reads >> k) & 1u)
                v[k] = reinterpret_cast<const vec *>(a.p[k])[g];
#pragma unroll
        for (int e = 0; e < V; e++) {
            float x[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                x[k] = ((op.reads >> k) & 1u) ? kc_to_f(v[k].v[e]) : 0.0f;
            op(x);
#pragma unroll
            for (int k = 0; k < 4; k++)
                if ((op.writes >> k) & 1u)
                    v[k].v[e] = kc_from_f<T>(x[k]);
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            if ((op.writes >> k) & 1u)
                reinterpret_cast<vec *>(a.p[k])[g] = v[k];
    }
    for (int64_t i = groups * V + tid; i < n; i += stride) { /* the tail: fewer than V elements */
        float x[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            x[k] = ((op.reads >> k) & 1u) ? kc_to_f(a.p[k][i]) : 0.0f;
        op(x);
#pragma unroll
        for (int k = 0; k < 4; k++)
            if ((op.writes >> k) & 1u)
                a.p[k][i] = kc_from_f<T>(x[k]);
    }
}

/* Run Op<T>{args...} over n elements of arrays p0..p3 (unused ones NULL). 16-byte accesses when every array
 * is 16-byte aligned, else one element at a time. */
template <template <typename> class Op> struct kc_ew {
    template <typename T, typename... Args>
    static oom_status run(const char *kernel, int64_t n, void *p0, const void *p1, const void *p2, const void *p3,
                          Args... args)
    {
        if (n == 0)
            return OOM_OK;
        constexpr int V = kc_vec_len<T>();
        kc_arrays<T> a = {{(T *)p0, (T *)p1, (T *)p2, (T *)p3}};
        bool vec = true;
        for (int k = 0; k < 4; k++)
            vec = vec && (!a.p[k] || kc_aligned16(a.p[k]));
        Op<T> op = {args...};
        if (vec) {
            int64_t work = n / V > n % V ? n / V : n % V;
            kc_ew_kernel<T, V, Op<T>><<<kc_blocks(work, KC_THREADS), KC_THREADS>>>(a, n, op);
        } else {
            kc_ew_kernel<T, 1, Op<T>><<<kc_blocks(n, KC_THREADS), KC_THREADS>>>(a, n, op);
        }
        return KC_LAUNCHED(kernel);
    }
};

/* ---- warp and block reductions (f32) ------------------------------------------------------------------------- */

__device__ __forceinline__ float kc_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kc_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum (is_max false) or maximum of v over a 1-D block whose size is a multiple of 32; every thread gets
 * it. Every thread of the block must call it (it synchronises). */
__device__ __forceinline__ float kc_block_reduce(float v, bool is_max)
{
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = is_max ? kc_warp_max(v) : kc_warp_sum(v);
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    v = lane < warps ? part[lane] : (is_max ? -INFINITY : 0.0f);
    v = is_max ? kc_warp_max(v) : kc_warp_sum(v);
    __syncthreads(); /* part may be reused by the next call */
    return v;
}

__device__ __forceinline__ float kc_block_sum(float v) { return kc_block_reduce(v, false); }
__device__ __forceinline__ float kc_block_max(float v) { return kc_block_reduce(v, true); }

#endif
