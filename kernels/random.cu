/* random.cu - CUDA versions of rand_uniform, rand_normal and rand_int (kernels.h), with krand.h's formulas:
 * the same values as random_ref.c, bit for bit for uniform and int; normal to a few ulps (device logf/cosf).
 * Element i depends only on (seed, i), so the grid-stride order does not matter.
 */
#include <math.h>

#include "cuda_util.cuh"
#include "krand.h"

/* T's encoding as sign-magnitude bits, and its sign bit, for krand_below. */
__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t bits_of(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ uint32_t bits_of(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

template <typename T> __device__ __forceinline__ T from_bits(uint32_t b);
template <> __device__ __forceinline__ float from_bits<float>(uint32_t b) { return __uint_as_float(b); }
template <> __device__ __forceinline__ __half from_bits<__half>(uint32_t b)
{
    return __ushort_as_half((unsigned short)b);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_bits<__nv_bfloat16>(uint32_t b)
{
    return __ushort_as_bfloat16((unsigned short)b);
}

template <typename T> __device__ __forceinline__ uint32_t sign_bit()
{
    return sizeof(T) == 4 ? 0x80000000u : 0x8000u;
}

/* out[i] in [lo, hi): the value rounded to T, or the value of T just below hi when it rounds to hi or above. */
template <typename T> __global__ void rand_uniform_kernel(T *out, int64_t n, uint64_t seed, float lo, float hi)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        T s = kc_from_f<T>(krand_uniform(krand_hash(seed, (uint64_t)i), lo, hi));
        out[i] = kc_to_f(s) < hi ? s : from_bits<T>(krand_below(bits_of(s), sign_bit<T>()));
    }
}

template <typename T> __global__ void rand_normal_kernel(T *out, int64_t n, uint64_t seed, float mean, float std)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = kc_from_f<T>(krand_normal(krand_hash(seed, (uint64_t)i), mean, std));
}

__global__ void rand_int_kernel(int64_t *out, int64_t n, uint64_t seed, int64_t lo, int64_t hi)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = krand_int(krand_hash(seed, (uint64_t)i), lo, hi);
}

struct rand_uniform_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *out, int64_t n, uint64_t seed, float lo, float hi)
    {
        rand_uniform_kernel<T><<<kc_blocks(n, KC_THREADS), KC_THREADS>>>((T *)out, n, seed, lo, hi);
        return KC_LAUNCHED(kernel);
    }
};

struct rand_normal_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *out, int64_t n, uint64_t seed, float mean, float std)
    {
        rand_normal_kernel<T><<<kc_blocks(n, KC_THREADS), KC_THREADS>>>((T *)out, n, seed, mean, std);
        return KC_LAUNCHED(kernel);
    }
};

oom_status k_rand_uniform_cuda(dtype dt, void *out, int64_t n, uint64_t seed, float lo, float hi)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && !out) || !(lo < hi) || !isfinite(lo) || !isfinite(hi) ||
        !isfinite(hi - lo))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    return kc_dispatch<rand_uniform_launch>(dt, __func__, out, n, seed, lo, hi);
}

oom_status k_rand_normal_cuda(dtype dt, void *out, int64_t n, uint64_t seed, float mean, float std)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && !out) || !(std >= 0.0f))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    return kc_dispatch<rand_normal_launch>(dt, __func__, out, n, seed, mean, std);
}

oom_status k_rand_int_cuda(int64_t *out, int64_t n, uint64_t seed, int64_t lo, int64_t hi)
{
    if (n < 0 || (n > 0 && !out) || hi <= lo)
        return KARGS_FAIL(DT_I64, 1, n);
    if (n == 0)
        return OOM_OK;
    rand_int_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS>>>(out, n, seed, lo, hi);
    return KC_LAUNCHED(__func__);
}
