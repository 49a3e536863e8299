/* ref_util.h - what the CPU references share: element access per dtype and f32 summation.
 *
 * Element access: LD_T(p, i) reads element i of buffer p as f32 and ST_T(p, i, v) stores the f32 v rounded
 * once (dtype.h), for T = F32, F16, BF16. A kernel writes its loop once as a macro BODY(T) and runs it with
 * REF_FLOAT_DISPATCH(dt, BODY), which expands one typed loop per dtype; REF_MAP is the loop of the maps.
 *
 * Summation: the references accumulate in f32 (kernels.h) but not naively. Terms are summed in chunks of
 * REF_CHUNK with 8 interleaved accumulators and the chunk sums are combined pairwise (a binary counter), so the
 * rounding error grows with log n, not n. The CUDA reductions (a tree over threads) are as accurate, so the two
 * agree to a few ulps at any size.
 */
#ifndef OOMLAB_REF_UTIL_H
#define OOMLAB_REF_UTIL_H

#include <stdint.h>

#include "core/dtype.h"

#define LD_F32(p, i) (((const float *)(p))[i])
#define LD_F16(p, i) f16_to_f32(((const uint16_t *)(p))[i])
#define LD_BF16(p, i) bf16_to_f32(((const uint16_t *)(p))[i])
#define ST_F32(p, i, v) (((float *)(p))[i] = (v))
#define ST_F16(p, i, v) (((uint16_t *)(p))[i] = f32_to_f16(v))
#define ST_BF16(p, i, v) (((uint16_t *)(p))[i] = f32_to_bf16(v))

/* Run BODY(F32), BODY(F16) or BODY(BF16) for dt; the caller has checked that dt is one of them. */
#define REF_FLOAT_DISPATCH(dt, BODY)                                                                               \
    switch (dt) {                                                                                                  \
    case DT_F32:                                                                                                   \
        BODY(F32);                                                                                                 \
        break;                                                                                                     \
    case DT_F16:                                                                                                   \
        BODY(F16);                                                                                                 \
        break;                                                                                                     \
    case DT_BF16:                                                                                                  \
        BODY(BF16);                                                                                                \
        break;                                                                                                     \
    default:                                                                                                       \
        break;                                                                                                     \
    }

/* out[i] = EXPR for every i in [0, n), EXPR an f32 expression of i (reading with LD_T), stored with ST_T.
 * Chunks of REF_LANES values are computed into a local array and then stored: the fixed-length f32 loops
 * vectorise at -O2 (the local array cannot alias the buffers, so no run-time overlap checks are needed), and an
 * output may alias an input exactly (a chunk is read before it is written). */
#define REF_LANES 8
#define REF_MAP(T, out, n, EXPR)                                                                                   \
    do {                                                                                                           \
        int64_t i0_ = 0;                                                                                           \
        for (; i0_ + REF_LANES <= (n); i0_ += REF_LANES) {                                                         \
            float t_[REF_LANES];                                                                                   \
            for (int k_ = 0; k_ < REF_LANES; k_++) {                                                               \
                const int64_t i = i0_ + k_;                                                                        \
                t_[k_] = (EXPR);                                                                                   \
            }                                                                                                      \
            for (int k_ = 0; k_ < REF_LANES; k_++)                                                                 \
                ST_##T(out, i0_ + k_, t_[k_]);                                                                     \
        }                                                                                                          \
        for (; i0_ < (n); i0_++) {                                                                                 \
            const int64_t i = i0_;                                                                                 \
            ST_##T(out, i, (EXPR));                                                                                \
        }                                                                                                          \
    } while (0)

/* Terms per chunk: a caller converts up to REF_CHUNK terms into a float array, then adds the chunk. */
#define REF_CHUNK 256

/* A running f32 sum: level[l] holds the sum of 2^l chunks while bit l of chunks is set. */
typedef struct ref_sum {
    float level[64];
    uint64_t chunks;
} ref_sum;

static inline void ref_sum_init(ref_sum *s) { s->chunks = 0; }

/* Add x[0..k), k <= REF_CHUNK, as one chunk. */
static inline void ref_sum_add(ref_sum *s, const float *x, int64_t k)
{
    float lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += x[i + j];
    for (; i < k; i++)
        lane[i & 7] += x[i];
    float v = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    int l = 0;
    for (uint64_t c = s->chunks; c & 1; c >>= 1, l++) /* carry: merge equal-sized partial sums */
        v = s->level[l] + v;
    s->level[l] = v;
    s->chunks++;
}

static inline float ref_sum_total(const ref_sum *s)
{
    float t = 0.0f;
    for (int l = 0; l < 64; l++)
        if ((s->chunks >> l) & 1)
            t += s->level[l];
    return t;
}

#endif
