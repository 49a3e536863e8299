/* dtype.h - the element types of tensors and kernels, and exact host conversions for the 16-bit floats.
 *
 * f16 is IEEE 754 binary16; bf16 is the top half of a binary32. Both are stored as uint16_t on the host (C11
 * has no half type) and as __half / __nv_bfloat16 in CUDA, which have the same bits. f32_to_f16 and
 * f32_to_bf16 round to nearest, ties to even, as __float2half_rn and __float2bfloat16_rn do, so a CPU
 * reference and a CUDA kernel that compute the same f32 value store the same bits.
 */
#ifndef OOMLAB_DTYPE_H
#define OOMLAB_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/compat.h"

OOM_BEGIN_DECLS

typedef enum dtype {
    DT_F32 = 0, /* torch.float32 */
    DT_F16,     /* torch.float16 */
    DT_BF16,    /* torch.bfloat16 */
    DT_I64,     /* torch.int64 (class targets) */
    DT_COUNT
} dtype;

static inline size_t dtype_size(dtype dt) { return dt == DT_F32 ? 4 : dt == DT_I64 ? 8 : 2; }

static inline int dtype_is_half(dtype dt) { return dt == DT_F16 || dt == DT_BF16; }

/* "float32", "float16", "bfloat16", "int64": PyTorch's names. */
static inline const char *dtype_str(dtype dt)
{
    static const char *const names[DT_COUNT] = {"float32", "float16", "bfloat16", "int64"};
    return (unsigned)dt < DT_COUNT ? names[dt] : "unknown";
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu)
        return f32_from_bits(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) {
        if (man == 0)
            return f32_from_bits(sign);
        /* subnormal: man x 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x477ff000u)                  /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* below 2^-14: subnormal or zero; round a x 2^24 to the nearest integer, ties to even */
        float v = f32_from_bits(a) * 16777216.0f; /* exact: a power-of-two scale of a value < 2^10 */
        uint32_t r = (uint32_t)v;
        float frac = v - (float)r;
        if (frac > 0.5f || (frac == 0.5f && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    /* normal: drop 13 mantissa bits with round to nearest even */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

OOM_END_DECLS

#endif
