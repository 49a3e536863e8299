/* krand.h - the element formulas of kernels.h's counter-based RNG, compiled for the host and the device.
 *
 * random_ref.c and random.cu both call these, so the CPU and the GPU draw the same values: the integer parts
 * are exact, and the float arithmetic of uniform is done one correctly rounded operation at a time (no FMA
 * contraction: __fmul_rn/__fadd_rn on the device, ISO C's default -ffp-contract=off on the host), so uniform
 * is bit-exact. normal calls logf, cosf and sqrtf, whose device versions may differ from libm by a few ulps.
 * krand_hash is kernels.h's oom_rng_hash (host-only there); test_kernels.c checks the two agree.
 */
#ifndef OOMLAB_KRAND_H
#define OOMLAB_KRAND_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KRAND_FN static __host__ __device__ inline
#else
#define KRAND_FN static inline
#endif

KRAND_FN uint64_t krand_hash(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

KRAND_FN float krand_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

KRAND_FN float krand_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* lo + (hi - lo) * u, u = (h >> 40) * 2^-24 (exact in f32). Rounding may give hi itself: see krand_below. */
KRAND_FN float krand_uniform(uint64_t h, float lo, float hi)
{
    float u = (float)(h >> 40) * 0x1p-24f;
    return krand_add(lo, krand_mul(krand_add(hi, -lo), u));
}

/* Box-Muller: mean + std * sqrt(-2 ln u1) * cos(2 pi u2), u1 in (0, 1], u2 in [0, 1). */
KRAND_FN float krand_normal(uint64_t h, float mean, float std)
{
    float u1 = (float)((h >> 40) + 1) * 0x1p-24f;
    float u2 = (float)((h >> 16) & 0xffffffu) * 0x1p-24f;
    float r = sqrtf(krand_mul(-2.0f, logf(u1)));
    float z = krand_mul(r, cosf(krand_mul(6.28318530717958647692f, u2)));
    return krand_add(mean, krand_mul(std, z));
}

/* lo + h % (hi - lo) for hi > lo, without signed overflow (the range may exceed INT64_MAX). */
KRAND_FN int64_t krand_int(uint64_t h, int64_t lo, int64_t hi)
{
    uint64_t range = (uint64_t)hi - (uint64_t)lo;
    return (int64_t)((uint64_t)lo + h % range);
}

/* The representable value just below the one with sign-magnitude bits `bits` (sign = its sign bit:
 * 0x80000000 for f32, 0x8000 for f16 and bf16). krand_uniform rounded to the stored type can equal hi (e.g.
 * 1 - 2^-24 rounds to 1 in bf16); the kernels then store this value instead, so every value is in [lo, hi). */
KRAND_FN uint32_t krand_below(uint32_t bits, uint32_t sign)
{
    if (bits & sign)
        return bits + 1; /* negative, -0 included: one step away from zero */
    if (bits == 0)
        return sign | 1u; /* +0: the negative smallest subnormal */
    return bits - 1;      /* positive: one step toward zero */
}

#endif
