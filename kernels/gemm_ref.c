/* gemm_ref.c - k_gemm_ref: the CPU reference GEMM (kernels.h), blocked for the cache the GotoBLAS way.
 *
 * C (m x n) is cut into MC x NC blocks; for each block the k dimension is walked in KC slices. Each slice of op(A)
 * (MC x KC) and op(B) (KC x NC) is packed into f32 micro-panels (MR rows or NR columns, p-major, zero-padded
 * at the edges), so the micro-kernel always runs on full MR x NR tiles with unit-stride loads that the compiler
 * vectorises. The block's products accumulate in an f32 tile (acc) across all k slices; C is read and written
 * once per block at the end: C = alpha * acc + beta * C, rounded once to the type (dtype.h), C not read when
 * beta == 0. Packing does the f16/bf16 -> f32 conversion and the transpositions, so one micro-kernel serves
 * every layout and type.
 *
 * The kernel never allocates: the packing buffers and acc are fixed-size and thread-local (about 400 KiB per
 * thread that calls it), so concurrent callers on different threads are safe.
 */
#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

/* Micro-tile: MR x NR accumulators (8 AVX registers of 8 floats, or 16 SSE registers of 4). */
#define GEMM_MR 8
#define GEMM_NR 8
/* Cache blocks: a packed B micro-panel (KC x NR, 8 KiB) stays in L1, packed A (MC x KC, 64 KiB) in L2. */
#define GEMM_MC 64
#define GEMM_NC 256
#define GEMM_KC 256

_Static_assert(GEMM_MC % GEMM_MR == 0 && GEMM_NC % GEMM_NR == 0, "blocks are whole micro-tiles");

static _Thread_local float pack_a[GEMM_MC * GEMM_KC]; /* op(A) slice: MC/MR panels of KC x MR */
static _Thread_local float pack_b[GEMM_KC * GEMM_NC]; /* op(B) slice: NC/NR panels of KC x NR */
static _Thread_local float acc[GEMM_MC * GEMM_NC];    /* the C block's f32 sums, row stride NC */

/* dst[t * dstride] = (float)src[off + t] for t < cnt, for the element type dt. */
static void load_run(dtype dt, const void *src, int64_t off, int64_t cnt, float *dst, int64_t dstride)
{
    switch (dt) {
    case DT_F32: {
        const float *s = (const float *)src + off;
        for (int64_t t = 0; t < cnt; t++)
            dst[t * dstride] = s[t];
        break;
    }
    case DT_F16: {
        const uint16_t *s = (const uint16_t *)src + off;
        for (int64_t t = 0; t < cnt; t++)
            dst[t * dstride] = f16_to_f32(s[t]);
        break;
    }
    default: { /* DT_BF16 (the entry point admits nothing else) */
        const uint16_t *s = (const uint16_t *)src + off;
        for (int64_t t = 0; t < cnt; t++)
            dst[t * dstride] = bf16_to_f32(s[t]);
        break;
    }
    }
}

/* Pack op(A)[i0 .. i0+mc) x [p0 .. p0+kc) into pack_a: panel r holds rows r*MR.., element (p, i) at
 * [r*kc*MR + p*MR + i]. Rows past mc are zero. */
static void pack_a_slice(dtype dt, bool ta, const void *a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                         int64_t kc)
{
    for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
        float *panel = pack_a + ir * kc;
        int64_t rows = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
        if (!ta) { /* A is m x k: each row of the panel is kc contiguous elements */
            for (int64_t i = 0; i < rows; i++)
                load_run(dt, a, (i0 + ir + i) * lda + p0, kc, panel + i, GEMM_MR);
        } else { /* A is k x m: each p gives `rows` contiguous elements */
            for (int64_t p = 0; p < kc; p++)
                load_run(dt, a, (p0 + p) * lda + i0 + ir, rows, panel + p * GEMM_MR, 1);
        }
        for (int64_t i = rows; i < GEMM_MR; i++)
            for (int64_t p = 0; p < kc; p++)
                panel[p * GEMM_MR + i] = 0.0f;
    }
}

/* Pack op(B)[p0 .. p0+kc) x [j0 .. j0+nc) into pack_b: panel r holds columns r*NR.., element (p, j) at
 * [r*kc*NR + p*NR + j]. Columns past nc are zero. */
static void pack_b_slice(dtype dt, bool tb, const void *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                         int64_t nc)
{
    for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
        float *panel = pack_b + jr * kc;
        int64_t cols = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
        if (!tb) { /* B is k x n: each p gives `cols` contiguous elements */
            for (int64_t p = 0; p < kc; p++)
                load_run(dt, b, (p0 + p) * ldb + j0 + jr, cols, panel + p * GEMM_NR, 1);
        } else { /* B is n x k: each column of the panel is kc contiguous elements */
            for (int64_t j = 0; j < cols; j++)
                load_run(dt, b, (j0 + jr + j) * ldb + p0, kc, panel + j, GEMM_NR);
        }
        if (cols < GEMM_NR)
            for (int64_t p = 0; p < kc; p++)
                for (int64_t j = cols; j < GEMM_NR; j++)
                    panel[p * GEMM_NR + j] = 0.0f;
    }
}

/* c[MR x NR] (row stride NC) = (first ? 0 : c) + sum over p < kc of a-panel column p times b-panel row p.
 * The i and j loops are unrolled completely (at -O2 too: GCC unrolls only on request there), so the local
 * tile t becomes registers and each row update one or two vector multiply-adds.
 * Not instrumented under the sanitizers (make asan): it reads only this file's packed panels and writes only acc,
 * fixed-size buffers its caller indexes, while the packing that reads the caller's tensors stays checked; the
 * instrumented loop made the ci catalog's GEMMs four times slower under ASan. */
#if defined(__clang__) || defined(__GNUC__)
__attribute__((no_sanitize("address", "undefined")))
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
/* GCC: an AVX2 clone beside the baseline (x86-64's SSE2), picked at load time: the 8 x 8 tile fits 8 ymm registers
 * instead of spilling 16 xmm ones. AVX2 without FMA, and -std=c11 keeps -ffp-contract=off: every element's sum
 * is the same sequence of float multiplies and adds either way, so the results are bit for bit the same. */
__attribute__((target_clones("avx2", "default")))
#endif
static void micro_kernel(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                         bool first)
{
    float t[GEMM_MR][GEMM_NR];
#pragma GCC unroll 8
    for (int i = 0; i < GEMM_MR; i++)
#pragma GCC unroll 8
        for (int j = 0; j < GEMM_NR; j++)
            t[i][j] = 0.0f;
    for (int64_t p = 0; p < kc; p++) {
        const float *ap = a + p * GEMM_MR, *bp = b + p * GEMM_NR;
#pragma GCC unroll 8
        for (int i = 0; i < GEMM_MR; i++) {
            float ai = ap[i];
#pragma GCC unroll 8
            for (int j = 0; j < GEMM_NR; j++)
                t[i][j] += ai * bp[j];
        }
    }
    for (int i = 0; i < GEMM_MR; i++) {
        float *ci = c + i * GEMM_NC;
        if (first)
            for (int j = 0; j < GEMM_NR; j++)
                ci[j] = t[i][j];
        else
            for (int j = 0; j < GEMM_NR; j++)
                ci[j] += t[i][j];
    }
}

/* Element (i, j) of C: read as f32, and stored rounded to the type. */
static float c_load(dtype dt, const void *c, int64_t idx)
{
    if (dt == DT_F32)
        return ((const float *)c)[idx];
    uint16_t h = ((const uint16_t *)c)[idx];
    return dt == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static void c_store(dtype dt, void *c, int64_t idx, float v)
{
    if (dt == DT_F32)
        ((float *)c)[idx] = v;
    else
        ((uint16_t *)c)[idx] = dt == DT_F16 ? f32_to_f16(v) : f32_to_bf16(v);
}

/* C[i0.., j0..] (mc x nc) = alpha * acc + beta * C; beta == 0 does not read C. */
static void store_block(dtype dt, void *c, int64_t ldc, int64_t i0, int64_t mc, int64_t j0, int64_t nc,
                        float alpha, float beta)
{
    for (int64_t i = 0; i < mc; i++) {
        const float *ai = acc + i * GEMM_NC;
        int64_t row = (i0 + i) * ldc + j0;
        if (beta == 0.0f)
            for (int64_t j = 0; j < nc; j++)
                c_store(dt, c, row + j, alpha * ai[j]);
        else
            for (int64_t j = 0; j < nc; j++)
                c_store(dt, c, row + j, alpha * ai[j] + beta * c_load(dt, c, row + j));
    }
}

oom_status k_gemm_ref(dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                      int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    if (dt != DT_F32 && !dtype_is_half(dt))
        return OOM_EINVAL;
    if (m < 0 || n < 0 || k < 0 || lda < (ta ? m : k) || ldb < (tb ? k : n) || ldc < n)
        return OOM_EINVAL;
    if ((m > 0 && k > 0 && !a) || (k > 0 && n > 0 && !b) || (m > 0 && n > 0 && !c))
        return OOM_EINVAL;
    if (m == 0 || n == 0)
        return OOM_OK;
    if (k == 0 || alpha == 0.0f) { /* C = beta * C, A and B not read (BLAS) */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c_store(dt, c, i * ldc + j, beta == 0.0f ? 0.0f : beta * c_load(dt, c, i * ldc + j));
        return OOM_OK;
    }
    for (int64_t j0 = 0; j0 < n; j0 += GEMM_NC) {
        int64_t nc = n - j0 < GEMM_NC ? n - j0 : GEMM_NC;
        for (int64_t i0 = 0; i0 < m; i0 += GEMM_MC) {
            int64_t mc = m - i0 < GEMM_MC ? m - i0 : GEMM_MC;
            for (int64_t p0 = 0; p0 < k; p0 += GEMM_KC) {
                int64_t kc = k - p0 < GEMM_KC ? k - p0 : GEMM_KC;
                pack_b_slice(dt, tb, b, ldb, p0, kc, j0, nc);
                pack_a_slice(dt, ta, a, lda, i0, mc, p0, kc);
                for (int64_t jr = 0; jr < nc; jr += GEMM_NR)
                    for (int64_t ir = 0; ir < mc; ir += GEMM_MR)
                        micro_kernel(kc, pack_a + ir * kc, pack_b + jr * kc, acc + ir * GEMM_NC + jr, p0 == 0);
            }
            store_block(dt, c, ldc, i0, mc, j0, nc, alpha, beta);
        }
    }
    return OOM_OK;
}
