/* gemm.cu - k_gemm_cuda (kernels.h): C = alpha * op(A) * op(B) + beta * C, row-major, on the default stream.
 *
 * f32: an FP32 SGEMM (FFMA, no TF32, so results agree with the CPU reference to f32 rounding). A block computes
 *   a BM x 128 tile of C (BM = 128 with 256 threads, or 64 with 128 threads when 128-row tiles would leave SMs
 *   idle), each thread an 8 x 8 sub-tile from two 4-row and two 4-column strips. The k loop walks slices of 8
 *   (16 for 64-row tiles) through double-buffered shared memory: the next slice's global loads are issued into
 *   registers before the current slice is multiplied and stored into the other buffer after it, one barrier
 *   per slice. Both operands sit k-major in shared memory (As[p][i], Bs[p][j]), so a thread reads its 8 A and
 *   8 B values of a step as four 16-byte loads; an operand stored k-contiguous (A untransposed, B transposed) is
 *   transposed on its way in, and its rows are padded by 4 floats so those scattered stores hit 32 distinct
 *   banks.
 * f16/bf16: tensor cores through mma.sync m16n8k16 (f32 accumulators). A block computes 128 x 128 with 4 warps
 *   of 64 x 64 (4 x 8 accumulator tiles each); k slices of 32 go through a 4-stage cp.async pipeline into shared
 *   memory kept in the operand's own layout, rows padded by 8 halves, and reach the registers through ldmatrix
 *   (.trans where the operand is stored k-major), which absorbs the transpositions. alpha, beta and the single
 *   rounding to the type are applied to the accumulators on their way to C.
 * Both have a fast path (16-byte unpredicated f32 loads and stores; 16-byte cp.async for halves) chosen when
 * shapes and alignments allow it, and an exact predicated path for everything else: tiles past an edge are
 * filled with zeros in shared memory and only elements inside C are written.
 *
 * Never allocates, never synchronises. k == 0 or alpha == 0 only scales C (A and B are not read, as in BLAS);
 * beta == 0 never reads C. Bad arguments: OOM_EINVAL; a failed launch: OOM_ECUDA with the CUDA error recorded.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "cuda_util.cuh"
#include "gemm_sm90.h"
#include "kernels.h"

namespace {

/* ---- shared helpers ---------------------------------------------------------------------------------- */

/* C = beta * C (beta == 0: zeros, C not read): k == 0 or alpha == 0. */
template <typename T> __global__ void scale_c_kernel(int64_t m, int64_t n, float beta, T *c, int64_t ldc)
{
    int64_t total = m * n;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        T *p = c + (e / n) * ldc + e % n;
        *p = kc_from_f<T>(beta == 0.0f ? 0.0f : beta * kc_to_f(*p));
    }
}

/* ---- f32: FFMA SGEMM ---------------------------------------------------------------------------------- */

constexpr int SG_BN = 128; /* tile columns */
constexpr int SG_PAD = 4;  /* floats of padding per shared row: bank spread, 16-byte alignment kept */

/* k slice per tile height: 8 for 128-row tiles (two blocks per SM under 128 registers), 16 for 64-row tiles
 * (one block per SM: a longer slice hides more load latency). Measured on the H100, see the commit log. */
template <int BM> __host__ __device__ constexpr int sg_bk() { return BM == 128 ? 8 : 16; }

/* One operand's slice: ROWS indices i (m for A, n for B) by BK indices p, loaded by NT threads as chunks of
 * 4 consecutive elements. Element (i, p) lives at g[KCONTIG ? i * ld + p : p * ld + i]. Thread tid's chunk number
 * it sits at (i_base + di(it), p_base + dp(it)):
 *   KCONTIG:  i_base = tid / 2, p_base = 4 (tid % 2): a warp reads 16 rows, 32 bytes each, per chunk
 *   else:     i_base = 4 (tid % (ROWS / 4)), p_base = tid / (ROWS / 4): a warp reads 512 contiguous bytes
 * and stores it at S[p][i] (KCONTIG: transposed, four scalar stores that hit 32 distinct banks per warp). */
template <int ROWS, int NT, bool KCONTIG, int BK> struct sg_slice {
    static constexpr int ITERS = ROWS * BK / 4 / NT;
    static_assert(ITERS * NT * 4 == ROWS * BK && ITERS >= 1 && BK % 8 == 0, "whole chunks per thread");
    static_assert(!KCONTIG || (2 * ROWS) % NT == 0, "KCONTIG: a pass covers whole rows");
    static constexpr int RPASS = KCONTIG ? 2 * ROWS / NT : 1; /* KCONTIG: passes down the rows per k group */
    static __device__ __forceinline__ int i_base(int tid) { return KCONTIG ? tid / 2 : (tid % (ROWS / 4)) * 4; }
    static __device__ __forceinline__ int p_base(int tid) { return KCONTIG ? (tid % 2) * 4 : tid / (ROWS / 4); }
    static __host__ __device__ constexpr int di(int it) { return KCONTIG ? (it % RPASS) * (NT / 2) : 0; }
    static __host__ __device__ constexpr int dp(int it) { return KCONTIG ? (it / RPASS) * 8 : it * (4 * NT / ROWS); }
    static __host__ __device__ constexpr int64_t goff(int64_t i, int64_t p, int64_t ld)
    {
        return KCONTIG ? i * ld + p : p * ld + i;
    }

    /* Fast path: every element inside the operand, 16-byte aligned. g points at this thread's first chunk of
     * the slice; the others are at fixed offsets from it. */
    static __device__ __forceinline__ void load_vec(float4 (&r)[ITERS], const float *__restrict__ g, int64_t ld)
    {
#pragma unroll
        for (int it = 0; it < ITERS; it++)
            r[it] = *reinterpret_cast<const float4 *>(g + goff(di(it), dp(it), ld));
    }

    /* Edge path: the slice at (i0, p0); elements outside (ni, np) read as 0. */
    static __device__ __forceinline__ void load_edge(float4 (&r)[ITERS], const float *__restrict__ g, int64_t ld,
                                                     int64_t i0, int64_t p0, int64_t ni, int64_t np, int tid)
    {
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            int64_t i = i0 + i_base(tid) + di(it), p = p0 + p_base(tid) + dp(it);
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int64_t ie = KCONTIG ? i : i + e, pe = KCONTIG ? p + e : p;
                v[e] = (ie < ni && pe < np) ? g[goff(ie, pe, ld)] : 0.0f;
            }
            r[it] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }

    /* Registers -> shared S[BK][ROWS + SG_PAD]. */
    static __device__ __forceinline__ void store(float (*S)[ROWS + SG_PAD], const float4 (&r)[ITERS], int tid)
    {
        const int ib = i_base(tid), pb = p_base(tid);
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            int i = ib + di(it), p = pb + dp(it);
            if (KCONTIG) {
                S[p + 0][i] = r[it].x;
                S[p + 1][i] = r[it].y;
                S[p + 2][i] = r[it].z;
                S[p + 3][i] = r[it].w;
            } else {
                *reinterpret_cast<float4 *>(&S[p][i]) = r[it];
            }
        }
    }
};

/* BM x 128 tile of C per block, 2 * BM threads: warps of 32 x 64 (BM / 32 along m, 2 along n); lane l owns rows
 * {4 (l / 8) .. +3, +16} and columns {4 (l % 8) .. +3, +32} of its warp's tile. VEC: every tile is whole,
 * A, B, C and their leading dimensions are 16-byte aligned (the host checks). 128-row tiles run two blocks per
 * SM (a 128-register cap); 64-row tiles are only chosen when there are too few tiles to fill the SMs, so they
 * take the registers they want (no spills) and run one block per SM. */
template <int BM, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__(2 * BM, BM == 128 ? 2 : 1)
    sgemm_kernel(int64_t m, int64_t n, int64_t k, float alpha, const float *__restrict__ a, int64_t lda,
                 const float *__restrict__ b, int64_t ldb, float beta, float *__restrict__ c, int64_t ldc)
{
    constexpr int NT = 2 * BM, SG_BK = sg_bk<BM>();
    using SA = sg_slice<BM, NT, !TA, SG_BK>;    /* op(A)(i, p): A[i][p], or A[p][i] when transposed */
    using SB = sg_slice<SG_BN, NT, TB, SG_BK>;  /* op(B)(p, j): B[p][j], or B[j][p] when transposed */
    __shared__ __align__(16) float As[2][SG_BK][BM + SG_PAD];
    __shared__ __align__(16) float Bs[2][SG_BK][SG_BN + SG_PAD];

    int tm, tn;
    kc_gemm_tile((int)((m + BM - 1) / BM), (int)((n + SG_BN - 1) / SG_BN), &tm, &tn);
    const int64_t m0 = (int64_t)tm * BM, n0 = (int64_t)tn * SG_BN;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int ar = (warp / 2) * 32 + (lane / 8) * 4; /* first of this thread's rows in the tile */
    const int bc = (warp % 2) * 64 + (lane % 8) * 4; /* first of its columns */

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0.0f;

    /* fast path: this thread's chunk pointers, advanced by one slice per step */
    const float *ga = a + SA::goff(m0 + SA::i_base(tid), SA::p_base(tid), lda);
    const float *gb = b + SB::goff(n0 + SB::i_base(tid), SB::p_base(tid), ldb);
    const int64_t sa_step = SA::goff(0, SG_BK, lda), sb_step = SB::goff(0, SG_BK, ldb);

    float4 ra[SA::ITERS], rb[SB::ITERS];
    const int64_t kt = (k + SG_BK - 1) / SG_BK;
    if (VEC) {
        SA::load_vec(ra, ga, lda);
        SB::load_vec(rb, gb, ldb);
    } else {
        SA::load_edge(ra, a, lda, m0, 0, m, k, tid);
        SB::load_edge(rb, b, ldb, n0, 0, n, k, tid);
    }
    SA::store(As[0], ra, tid);
    SB::store(Bs[0], rb, tid);
    __syncthreads();

    for (int64_t t = 0; t < kt; t++) {
        const int buf = (int)(t & 1);
        const bool more = t + 1 < kt;
        if (more) { /* in flight while this slice is multiplied */
            if (VEC) {
                ga += sa_step;
                gb += sb_step;
                SA::load_vec(ra, ga, lda);
                SB::load_vec(rb, gb, ldb);
            } else {
                SA::load_edge(ra, a, lda, m0, (t + 1) * SG_BK, m, k, tid);
                SB::load_edge(rb, b, ldb, n0, (t + 1) * SG_BK, n, k, tid);
            }
        }
#pragma unroll
        for (int p = 0; p < SG_BK; p++) {
            float4 a0 = *reinterpret_cast<const float4 *>(&As[buf][p][ar]);
            float4 a1 = *reinterpret_cast<const float4 *>(&As[buf][p][ar + 16]);
            float4 b0 = *reinterpret_cast<const float4 *>(&Bs[buf][p][bc]);
            float4 b1 = *reinterpret_cast<const float4 *>(&Bs[buf][p][bc + 32]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (more) { /* the other buffer: every thread finished reading it before the last barrier */
            SA::store(As[buf ^ 1], ra, tid);
            SB::store(Bs[buf ^ 1], rb, tid);
        }
        __syncthreads();
    }

    /* C = alpha * acc + beta * C; row i of acc is tile row ar + i (i < 4) or ar + 12 + i, column j is bc + j
     * (j < 4) or bc + 28 + j. */
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int64_t row = m0 + ar + (i < 4 ? i : 12 + i);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t col = n0 + bc + 32 * h;
            float *cp = c + row * ldc + col;
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                v[e] = alpha * acc[i][4 * h + e];
            if (VEC) {
                float4 o = make_float4(v[0], v[1], v[2], v[3]);
                if (beta != 0.0f) {
                    float4 old = *reinterpret_cast<const float4 *>(cp);
                    o.x += beta * old.x, o.y += beta * old.y, o.z += beta * old.z, o.w += beta * old.w;
                }
                *reinterpret_cast<float4 *>(cp) = o;
            } else if (row < m) {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (col + e < n)
                        cp[e] = beta != 0.0f ? v[e] + beta * cp[e] : v[e];
            }
        }
    }
}

template <int BM, bool TA, bool TB>
void sgemm_launch(bool vec, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    unsigned blocks = (unsigned)(((m + BM - 1) / BM) * ((n + SG_BN - 1) / SG_BN));
    if (vec)
        sgemm_kernel<BM, TA, TB, true><<<blocks, 2 * BM>>>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        sgemm_kernel<BM, TA, TB, false><<<blocks, 2 * BM>>>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <int BM>
void sgemm_dispatch(bool ta, bool tb, bool vec, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!ta && !tb)
        sgemm_launch<BM, false, false>(vec, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else if (!ta && tb)
        sgemm_launch<BM, false, true>(vec, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else if (ta && !tb)
        sgemm_launch<BM, true, false>(vec, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        sgemm_launch<BM, true, true>(vec, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- f16 / bf16: tensor cores (mma.sync m16n8k16, f32 accumulators) -------------------------------------- */

constexpr int HG_BM = 128, HG_BN = 128, HG_BK = 32;
constexpr int HG_WARPS_M = 2, HG_WARPS_N = 2;         /* warps of a block along m and n */
constexpr int HG_WM = HG_BM / HG_WARPS_M;             /* a warp's tile: HG_WM x HG_WN */
constexpr int HG_WN = HG_BN / HG_WARPS_N;
constexpr int HG_MI = HG_WM / 16, HG_NJ = HG_WN / 8; /* m16 x n8 accumulator tiles per warp */
constexpr int HG_THREADS = 32 * HG_WARPS_M * HG_WARPS_N;
constexpr int HG_PAD = 8; /* halves of padding per shared row: ldmatrix's 8 row reads hit 8 distinct 16-byte bank
                           * groups (row strides of 80 or 272 bytes), and rows stay 16-byte aligned */
constexpr int HG_STAGES = 4;
static_assert(HG_WN % 16 == 0 && HG_WM % 16 == 0, "B fragments are loaded two n8 tiles at a time");

/* One operand's slice in shared memory, in the operand's own layout: ROWS indices i (m for A, n for B) by HG_BK
 * indices p. KCONTIG (element (i, p) at g[i * ld + p]): S[i][p] with LD = HG_BK + PAD; else (g[p * ld + i]):
 * S[p][i] with LD = ROWS + PAD. Loaded in 16-byte chunks of 8 elements along the contiguous index. */
template <int ROWS, bool KCONTIG> struct hg_slice {
    static constexpr bool KCONTIG_ = KCONTIG;
    static constexpr int LD = KCONTIG ? HG_BK + HG_PAD : ROWS + HG_PAD;
    static constexpr int ELEMS = KCONTIG ? ROWS * LD : HG_BK * LD;
    static constexpr int CHUNKS = ROWS * HG_BK / 8;
    static constexpr int ITERS = CHUNKS / HG_THREADS;
    static_assert(CHUNKS % HG_THREADS == 0 && (ELEMS * 2) % 128 == 0, "whole chunks, aligned stages");
    static __device__ __forceinline__ int i_of(int c) { return KCONTIG ? c / (HG_BK / 8) : (c % (ROWS / 8)) * 8; }
    static __device__ __forceinline__ int p_of(int c) { return KCONTIG ? (c % (HG_BK / 8)) * 8 : c / (ROWS / 8); }
    static __host__ __device__ constexpr int off(int i, int p) { return KCONTIG ? i * LD + p : p * LD + i; }

    /* Global slice at (i0, p0) -> S. VEC: cp.async of whole chunks, zero-filled past the operand (the host
     * checked that the contiguous extent, ld and the base are multiples of 8 elements / 16 bytes, so a chunk is
     * either inside or outside). Otherwise element-wise bounds-checked loads and a 16-byte shared store. */
    template <bool VEC, typename T>
    static __device__ __forceinline__ void load(T *S, const T *__restrict__ g, int64_t ld, int64_t i0, int64_t p0,
                                                int64_t ni, int64_t np, int tid)
    {
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            int c = tid + it * HG_THREADS, ci = i_of(c), cp = p_of(c);
            int64_t i = i0 + ci, p = p0 + cp;
            T *dst = S + off(ci, cp);
            if (VEC) {
                bool in = i < ni && p < np;
                const T *src = in ? g + (KCONTIG ? i * ld + p : p * ld + i) : g;
                unsigned saddr = (unsigned)__cvta_generic_to_shared(dst);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(src),
                             "r"(in ? 16 : 0));
            } else {
                const uint16_t *gs = reinterpret_cast<const uint16_t *>(g);
                uint16_t v[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    int64_t ie = KCONTIG ? i : i + e, pe = KCONTIG ? p + e : p;
                    v[e] = (ie < ni && pe < np) ? gs[KCONTIG ? ie * ld + pe : pe * ld + ie] : (uint16_t)0;
                }
                uint4 w;
                w.x = v[0] | (unsigned)v[1] << 16;
                w.y = v[2] | (unsigned)v[3] << 16;
                w.z = v[4] | (unsigned)v[5] << 16;
                w.w = v[6] | (unsigned)v[7] << 16;
                *reinterpret_cast<uint4 *>(dst) = w;
            }
        }
    }

    /* Byte offset (inside a stage, at p = 0) of the row that `lane` hands to ldmatrix.x4 for the 16 x 16 block at
     * i = i0.., p = 0..15. The four 8 x 8 matrices: A fragments (IMAJOR = false) take (i0, 0), (i0 + 8, 0),
     * (i0, 8), (i0 + 8, 8) = a0..a3; B fragments (IMAJOR = true) take (i0, 0), (i0, 8), (i0 + 8, 0), (i0 + 8, 8) =
     * b0, b1 of the n8 tile at i0 and b0, b1 of the one at i0 + 8. A matrix's 8 rows run along i when the slice
     * is KCONTIG (plain ldmatrix), along p otherwise (ldmatrix.trans). */
    template <bool IMAJOR> static __device__ __forceinline__ int ldsm_row(int i0, int lane)
    {
        int j = lane / 8, r = lane % 8;
        int di = 8 * (IMAJOR ? j / 2 : j % 2), dp = 8 * (IMAJOR ? j % 2 : j / 2);
        return 2 * off(i0 + di + (KCONTIG ? r : 0), dp + (KCONTIG ? 0 : r));
    }
};

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* Four 8 x 8 b16 matrices from shared memory (row addresses from lanes 0-7, 8-15, 16-23, 24-31). */
template <bool TRANS> __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], unsigned addr)
{
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
}

/* d += a * b on one m16n8k16 tile, f32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if (std::is_same<T, __half>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint16_t bits16(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint16_t bits16(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

template <bool TA, bool TB> constexpr int hg_smem_bytes()
{
    return HG_STAGES * (hg_slice<HG_BM, !TA>::ELEMS + hg_slice<HG_BN, TB>::ELEMS) * 2;
}

/* 128 x 128 tile of C per block; warp w computes the HG_WM x HG_WN tile at ((w / HG_WARPS_N) HG_WM,
 * (w % HG_WARPS_N) HG_WN) as HG_MI x HG_NJ m16n8 accumulators. PAIR: C rows are 4-byte aligned (even ldc, aligned
 * base), so two neighbouring outputs go out as one 32-bit store. */
template <typename T, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__(HG_THREADS, 2) /* two blocks per SM: 2 x 80 KiB of stages */
    hgemm_kernel(int64_t m, int64_t n, int64_t k, float alpha, const T *__restrict__ a, int64_t lda,
                 const T *__restrict__ b, int64_t ldb, float beta, T *__restrict__ c, int64_t ldc, bool pair)
{
    using SA = hg_slice<HG_BM, !TA>; /* op(A)(i, p) */
    using SB = hg_slice<HG_BN, TB>;  /* op(B)(p, j) as (j, p) */
    extern __shared__ __align__(128) unsigned char hg_smem[];
    T *sa = reinterpret_cast<T *>(hg_smem); /* HG_STAGES A slices */
    T *sb = sa + HG_STAGES * SA::ELEMS;     /* then HG_STAGES B slices */

    int tm, tn;
    kc_gemm_tile((int)((m + HG_BM - 1) / HG_BM), (int)((n + HG_BN - 1) / HG_BN), &tm, &tn);
    const int64_t m0 = (int64_t)tm * HG_BM, n0 = (int64_t)tn * HG_BN;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wr = (warp / HG_WARPS_N) * HG_WM, wc = (warp % HG_WARPS_N) * HG_WN;

    /* this lane's ldmatrix row addresses in stage 0, p = 0 */
    const unsigned sa0 = (unsigned)__cvta_generic_to_shared(sa), sb0 = (unsigned)__cvta_generic_to_shared(sb);
    unsigned a_row[HG_MI], b_row[HG_NJ / 2];
#pragma unroll
    for (int i = 0; i < HG_MI; i++)
        a_row[i] = sa0 + SA::template ldsm_row<false>(wr + 16 * i, lane);
#pragma unroll
    for (int j = 0; j < HG_NJ / 2; j++)
        b_row[j] = sb0 + SB::template ldsm_row<true>(wc + 16 * j, lane);

    float acc[HG_MI][HG_NJ][4];
#pragma unroll
    for (int i = 0; i < HG_MI; i++)
#pragma unroll
        for (int j = 0; j < HG_NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

    const int64_t kt = (k + HG_BK - 1) / HG_BK;
    /* prologue: slices 0 .. STAGES-2 in flight; one commit group per slice (empty ones included) */
#pragma unroll
    for (int s = 0; s < HG_STAGES - 1; s++) {
        if (s < kt) {
            SA::template load<VEC>(sa + s * SA::ELEMS, a, lda, m0, (int64_t)s * HG_BK, m, k, tid);
            SB::template load<VEC>(sb + s * SB::ELEMS, b, ldb, n0, (int64_t)s * HG_BK, n, k, tid);
        }
        cp_async_commit();
    }
    for (int64_t t = 0; t < kt; t++) {
        cp_async_wait<HG_STAGES - 2>(); /* slice t has landed (for this thread) ... */
        __syncthreads();                /* ... for all, and slice t-1's stage is free */
        const int64_t next = t + HG_STAGES - 1;
        if (next < kt) {
            const int s = (int)(next % HG_STAGES);
            SA::template load<VEC>(sa + s * SA::ELEMS, a, lda, m0, next * HG_BK, m, k, tid);
            SB::template load<VEC>(sb + s * SB::ELEMS, b, ldb, n0, next * HG_BK, n, k, tid);
        }
        cp_async_commit();
        const int stage = (int)(t % HG_STAGES);
        const unsigned xa = stage * SA::ELEMS * 2, xb = stage * SB::ELEMS * 2;
#pragma unroll
        for (int p = 0; p < HG_BK; p += 16) {
            uint32_t fa[HG_MI][4], fb[HG_NJ / 2][4];
#pragma unroll
            for (int i = 0; i < HG_MI; i++)
                ldsm_x4<!SA::KCONTIG_>(fa[i], a_row[i] + xa + 2 * SA::off(0, p));
#pragma unroll
            for (int j = 0; j < HG_NJ / 2; j++)
                ldsm_x4<!SB::KCONTIG_>(fb[j], b_row[j] + xb + 2 * SB::off(0, p));
#pragma unroll
            for (int i = 0; i < HG_MI; i++)
#pragma unroll
                for (int j = 0; j < HG_NJ; j++)
                    mma16816<T>(acc[i][j], fa[i], fb[j / 2][2 * (j % 2)], fb[j / 2][2 * (j % 2) + 1]);
        }
    }
    cp_async_wait<0>(); /* nothing is left in flight when the block exits */

    /* accumulator e of tile (i, j): row wr + 16 i + lane / 4 (+ 8 for e >= 2), column wc + 8 j + 2 (lane % 4)
     * (+ 1 for odd e) */
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < HG_MI; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t row = m0 + wr + 16 * i + g + 8 * h;
            if (row >= m)
                continue;
#pragma unroll
            for (int j = 0; j < HG_NJ; j++) {
                const int64_t col = n0 + wc + 8 * j + 2 * q;
                T *cp = c + row * ldc + col;
                float v0 = alpha * acc[i][j][2 * h], v1 = alpha * acc[i][j][2 * h + 1];
                if (pair && col + 1 < n) {
                    if (beta != 0.0f) {
                        v0 += beta * kc_to_f(cp[0]);
                        v1 += beta * kc_to_f(cp[1]);
                    }
                    *reinterpret_cast<uint32_t *>(cp) =
                        (uint32_t)bits16(kc_from_f<T>(v0)) | (uint32_t)bits16(kc_from_f<T>(v1)) << 16;
                } else {
                    if (col < n)
                        cp[0] = kc_from_f<T>(beta != 0.0f ? v0 + beta * kc_to_f(cp[0]) : v0);
                    if (col + 1 < n)
                        cp[1] = kc_from_f<T>(beta != 0.0f ? v1 + beta * kc_to_f(cp[1]) : v1);
                }
            }
        }
    }
}

template <typename T, bool TA, bool TB>
cudaError_t hgemm_launch(bool vec, int64_t m, int64_t n, int64_t k, float alpha, const T *a, int64_t lda,
                         const T *b, int64_t ldb, float beta, T *c, int64_t ldc)
{
    constexpr int smem = hg_smem_bytes<TA, TB>();
    unsigned blocks = (unsigned)(((m + HG_BM - 1) / HG_BM) * ((n + HG_BN - 1) / HG_BN));
    bool pair = ldc % 2 == 0 && ((uintptr_t)c & 3u) == 0;
    auto kernel = vec ? hgemm_kernel<T, TA, TB, true> : hgemm_kernel<T, TA, TB, false>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess)
        return e;
    kernel<<<blocks, HG_THREADS, smem>>>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pair);
    return cudaSuccess;
}

template <typename T>
cudaError_t hgemm_dispatch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                           int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    /* cp.async needs 16-byte chunks that are wholly inside or outside: the contiguous extent and ld of each
     * operand multiples of 8 elements, the bases 16-byte aligned */
    bool vec = aligned16(a) && aligned16(b) && lda % 8 == 0 && ldb % 8 == 0 && (ta ? m : k) % 8 == 0 &&
               (tb ? k : n) % 8 == 0;
    const T *ta_ = static_cast<const T *>(a), *tb_ = static_cast<const T *>(b);
    T *tc = static_cast<T *>(c);
    if (!ta && !tb)
        return hgemm_launch<T, false, false>(vec, m, n, k, alpha, ta_, lda, tb_, ldb, beta, tc, ldc);
    if (!ta && tb)
        return hgemm_launch<T, false, true>(vec, m, n, k, alpha, ta_, lda, tb_, ldb, beta, tc, ldc);
    if (ta && !tb)
        return hgemm_launch<T, true, false>(vec, m, n, k, alpha, ta_, lda, tb_, ldb, beta, tc, ldc);
    return hgemm_launch<T, true, true>(vec, m, n, k, alpha, ta_, lda, tb_, ldb, beta, tc, ldc);
}

template <typename T> void scale_c_launch(int64_t m, int64_t n, float beta, void *c, int64_t ldc)
{
    int64_t total = m * n, blocks = (total + 255) / 256;
    scale_c_kernel<T><<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(m, n, beta, static_cast<T *>(c), ldc);
}

} // namespace

extern "C" const char *k_gemm_cuda_kernel(dtype dt, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                                          const void *b, int64_t ldb)
{
    if (dt == DT_F32)
        return "ffma";
    switch (gemm_sm90_tile_n(m, n, k, a, lda, b, ldb)) {
    case 256:
        return "wgmma 128x256";
    case 128:
        return "wgmma 128x128";
    case 64:
        return "wgmma 128x64";
    default:
        return "mma.sync";
    }
}

extern "C" oom_status k_gemm_cuda(dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                  const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
                                  int64_t ldc)
{
    if (dt != DT_F32 && !dtype_is_half(dt))
        return OOM_EINVAL;
    if (m < 0 || n < 0 || k < 0 || lda < (ta ? m : k) || ldb < (tb ? k : n) || ldc < n)
        return OOM_EINVAL;
    if ((m > 0 && k > 0 && !a) || (k > 0 && n > 0 && !b) || (m > 0 && n > 0 && !c))
        return OOM_EINVAL;
    if (m == 0 || n == 0)
        return OOM_OK;
    /* the 1-D grid: at most 2^31 - 1 tiles of 64 x 128 */
    if (((m + 63) / 64) * ((n + 127) / 128) > INT32_MAX)
        return OOM_EINVAL;

    cudaError_t e = cudaSuccess;
    if (k == 0 || alpha == 0.0f) { /* C = beta * C; A and B are not read (BLAS) */
        if (dt == DT_F32)
            scale_c_launch<float>(m, n, beta, c, ldc);
        else if (dt == DT_F16)
            scale_c_launch<__half>(m, n, beta, c, ldc);
        else
            scale_c_launch<__nv_bfloat16>(m, n, beta, c, ldc);
    } else if (dt == DT_F32) {
        /* 128-row tiles unless they leave more than a third of the SMs without a block */
        int dev = 0, sms = 0;
        e = cudaGetDevice(&dev);
        if (e == cudaSuccess)
            e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) {
            const float *fa = static_cast<const float *>(a), *fb = static_cast<const float *>(b);
            float *fc = static_cast<float *>(c);
            bool small = ((m + 127) / 128) * ((n + SG_BN - 1) / SG_BN) * 3 < (int64_t)sms * 2;
            int bm = small ? 64 : 128;
            bool vec = m % bm == 0 && n % SG_BN == 0 && k % (small ? sg_bk<64>() : sg_bk<128>()) == 0 &&
                       lda % 4 == 0 && ldb % 4 == 0 && ldc % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(c);
            if (small)
                sgemm_dispatch<64>(ta, tb, vec, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc);
            else
                sgemm_dispatch<128>(ta, tb, vec, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc);
        }
    } else if (int tile_n = gemm_sm90_tile_n(m, n, k, a, lda, b, ldb)) {
        e = gemm_sm90_launch(tile_n, dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else if (dt == DT_F16) {
        e = hgemm_dispatch<__half>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
        e = hgemm_dispatch<__nv_bfloat16>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess) {
        OOM_ERROR(OOM_ECUDA, "gemm (%s, %c%c, %lldx%lldx%lld): %s", dtype_str(dt), ta ? 'T' : 'N', tb ? 'T' : 'N',
                  (long long)m, (long long)n, (long long)k, cudaGetErrorName(e));
        return OOM_ECUDA;
    }
    return OOM_OK;
}
