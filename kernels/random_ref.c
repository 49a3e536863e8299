/* random_ref.c - CPU references of rand_uniform, rand_normal and rand_int (kernels.h's counter-based RNG;
 * the per-element formulas are krand.h's, shared with random.cu).
 *
 * uniform stores every value in [lo, hi): when lo + (hi - lo) * u rounds to hi or above in the stored type
 * (possible in f16/bf16, and in f32 for some lo), the next value below is stored instead (krand_below).
 * Bad arguments: hi <= lo, a non-finite bound or range (uniform), std < 0 or NaN (normal, as torch's normal_).
 */
#include <math.h>

#include "kargs.h"
#include "kernels.h"
#include "krand.h"
#include "ref_util.h"

oom_status k_rand_uniform_ref(dtype dt, void *out, int64_t n, uint64_t seed, float lo, float hi)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && !out) || !(lo < hi) || !isfinite(lo) || !isfinite(hi) ||
        !isfinite(hi - lo))
        return KARGS_FAIL(dt, 1, n);
    if (dt == DT_F32) {
        float *o = out;
        for (int64_t i = 0; i < n; i++) {
            float v = krand_uniform(krand_hash(seed, (uint64_t)i), lo, hi);
            o[i] = v < hi ? v : f32_from_bits(krand_below(f32_bits(v), 0x80000000u));
        }
        return OOM_OK;
    }
    uint16_t *o = out;
    for (int64_t i = 0; i < n; i++) {
        float v = krand_uniform(krand_hash(seed, (uint64_t)i), lo, hi);
        uint16_t s = dt == DT_F16 ? f32_to_f16(v) : f32_to_bf16(v);
        float stored = dt == DT_F16 ? f16_to_f32(s) : bf16_to_f32(s);
        o[i] = stored < hi ? s : (uint16_t)krand_below(s, 0x8000u);
    }
    return OOM_OK;
}

oom_status k_rand_normal_ref(dtype dt, void *out, int64_t n, uint64_t seed, float mean, float std)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && !out) || !(std >= 0.0f))
        return KARGS_FAIL(dt, 1, n);
#define NORMAL(T)                                                                                                  \
    for (int64_t i = 0; i < n; i++)                                                                                \
    ST_##T(out, i, krand_normal(krand_hash(seed, (uint64_t)i), mean, std))
    REF_FLOAT_DISPATCH(dt, NORMAL)
#undef NORMAL
    return OOM_OK;
}

oom_status k_rand_int_ref(int64_t *out, int64_t n, uint64_t seed, int64_t lo, int64_t hi)
{
    if (n < 0 || (n > 0 && !out) || hi <= lo)
        return KARGS_FAIL(DT_I64, 1, n);
    for (int64_t i = 0; i < n; i++)
        out[i] = krand_int(krand_hash(seed, (uint64_t)i), lo, hi);
    return OOM_OK;
}
