/* gemm_sm90.cu - the Hopper path of k_gemm_cuda (gemm.cu) for f16 and bf16: wgmma and TMA, built for sm_90a only.
 *
 * C = alpha * op(A) * op(B) + beta * C, row-major, f32 accumulators, one rounding to the type on the way to C (as
 * the mma.sync path does). A block computes a 128 x BN tile of C with three warpgroups:
 *   - the producer (warpgroup 0; one thread issues) loads each 64-deep k slice of A (128 x 64) and B (BN x 64) with
 *     TMA (cp.async.bulk.tensor) into a ring of stages in shared memory, 128-byte swizzled, and signals the stage's
 *     "full" mbarrier with the bytes it expects;
 *   - two consumers (warpgroups 1 and 2, 64 rows each) wait on "full", run four wgmma.mma_async m64nBNk16 per
 *     slice straight from shared memory (descriptors, no ldmatrix), wait for them and arrive on the stage's
 *     "empty" mbarrier, which the producer waits on before it refills the stage.
 * setmaxnreg moves registers from the producer (40) to the consumers (232): each consumer thread holds BN / 2
 * accumulators. TMA fills whatever lies past an edge of A or B with zeros, so ragged m, n and k need no
 * predication in the main loop; only the stores to C are predicated.
 * Operand layouts: an operand whose k index is contiguous (A untransposed, B transposed) is K-major in shared
 * memory: rows of 64 elements (128 bytes), 8-row atoms of 1024 bytes (descriptor: SBO = 1024). One whose m or n
 * index is contiguous is MN-major, which wgmma takes for 16-bit types with its transpose flag: TMA loads it in
 * chunks of 64 m/n indices by 64 k rows (8 KiB), the chunks one after another (descriptor: LBO = the 8 KiB from
 * chunk to chunk, SBO = 1024 from one 8-row k group to the next). This is CUTLASS's canonical GMMA layout
 * (cute/atom/mma_traits_sm90_gmma.hpp, "Major-MN" and "Major-K", LayoutType::B128).
 *
 * The tile's columns are a template parameter, 256, 128 or 64 (gemm_sm90_tile_n picks the widest whose tiles
 * nearly fill the SMs), with 4, 6 or 8 stages. Taken wherever gemm_sm90_tile_n says so: a device of compute
 * capability 9.0 (the sm_90a cubin runs nowhere else) and operands TMA can describe (bases 16-byte aligned,
 * leading dimensions multiples of 8 elements); on an H200 it beat the mma.sync path at every shape measured, from
 * 128^3 up. Never allocates, never synchronises.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_util.cuh"
#include "gemm_sm90.h"

namespace {

constexpr int BM = 128, BK = 64;               /* tile rows and k slice (64 halves: one 128-byte swizzle row) */
constexpr int CONSUMERS = 2;                    /* warpgroups of 64 rows each */
constexpr int THREADS = 128 * (CONSUMERS + 1);  /* plus the producer's warpgroup */
constexpr int A_BYTES = BM * BK * 2;
constexpr int CHUNK_BYTES = 64 * BK * 2;        /* an MN-major chunk: 64 m/n indices by 64 k rows */

/* The tile's columns BN (256, 128 or 64: the wgmma's n) and what follows from it: the stages that fit in 200 KiB
 * (4, 6 or 8), each what TMA delivers per k slice (edges included, zero-filled). */
template <int BN> struct tile {
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int STAGES = 200 * 1024 / STAGE_BYTES < 8 ? 200 * 1024 / STAGE_BYTES : 8;
    static constexpr size_t SMEM = 1024 /* alignment slack */ + (size_t)STAGES * STAGE_BYTES + 2 * STAGES * 8;
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages stay 1024-byte aligned (the swizzle atom)");
    static_assert(SMEM <= 227 * 1024, "fits an H100's shared memory per block");
};

#if defined(__CUDA_ARCH__)

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra.uni WAIT;\n"
                 "}\n" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/* TMA: the box at (c0 along the contiguous dimension, c1 along the other) of map into dst, completing on bar. */
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
                 : "memory");
}

/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and stride
 * byte offsets (all >> 4, 14 bits), 128-byte swizzle (mode 1 in bits 62-63). */
__device__ __forceinline__ uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    auto enc = [](uint32_t x) { return (uint64_t)((x & 0x3FFFF) >> 4); };
    return enc(smem_addr(p)) | enc(lbo) << 16 | enc(sbo) << 32 | 1ull << 62;
}

/* One wgmma.mma_async m64nNk16 with f32 accumulators d[N / 2] (this thread's share of the 64 x N tile), operands
 * from shared memory through descriptors; TY is the PTX type of A and B (f16 or bf16), TA / TB the transpose
 * flags (1: the operand is MN-major in shared memory). */
#define SM90_WGMMA_M64N256K16(TY, d, da, db, TA, TB)                                                                  \
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {"                                        \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                   \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                   \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                   \
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                   \
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                   \
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "       \
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"     \
                 "}, %128, %129, 1, 1, 1, %130, %131;"                                                                \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),                \
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),            \
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),         \
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),         \
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),         \
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),         \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),         \
                   "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),         \
                   "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),         \
                   "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),         \
                   "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),         \
                   "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),         \
                   "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),    \
                   "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),  \
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),  \
                   "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),  \
                   "+f"(d[126]), "+f"(d[127])                                                                         \
                 : "l"(da), "l"(db), "n"(TA), "n"(TB))

#define SM90_WGMMA_M64N128K16(TY, d, da, db, TA, TB)                                                                  \
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {"                                        \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                   \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                   \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                     \
                 "}, %64, %65, 1, 1, 1, %66, %67;"                                                                    \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),                \
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),            \
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),         \
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),         \
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),         \
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),         \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),         \
                   "+f"(d[63])                                                                                        \
                 : "l"(da), "l"(db), "n"(TA), "n"(TB))

#define SM90_WGMMA_M64N64K16(TY, d, da, db, TA, TB)                                                                   \
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {"                                         \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                     \
                 "}, %32, %33, 1, 1, 1, %34, %35;"                                                                    \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),                \
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),            \
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),         \
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                 \
                 : "l"(da), "l"(db), "n"(TA), "n"(TB))

template <typename T, int N, int TA, int TB> __device__ __forceinline__ void wgmma(float *d, uint64_t da, uint64_t db)
{
    constexpr bool f16 = std::is_same<T, __half>::value;
    if constexpr (N == 256 && f16)
        SM90_WGMMA_M64N256K16("f16", d, da, db, TA, TB);
    else if constexpr (N == 256)
        SM90_WGMMA_M64N256K16("bf16", d, da, db, TA, TB);
    else if constexpr (N == 128 && f16)
        SM90_WGMMA_M64N128K16("f16", d, da, db, TA, TB);
    else if constexpr (N == 128)
        SM90_WGMMA_M64N128K16("bf16", d, da, db, TA, TB);
    else if constexpr (f16)
        SM90_WGMMA_M64N64K16("f16", d, da, db, TA, TB);
    else
        SM90_WGMMA_M64N64K16("bf16", d, da, db, TA, TB);
}

#endif /* __CUDA_ARCH__ */

/* TA: A is stored k x m (MN-major); TB: B is stored n x k (K-major). */
template <typename T, int BN, bool TA, bool TB>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, int m,
                     int n, int k, float alpha, float beta, T *__restrict__ c, int64_t ldc, bool pair)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool A_KMAJOR = !TA, B_KMAJOR = TB;
    constexpr int STAGES = tile<BN>::STAGES, B_BYTES = tile<BN>::B_BYTES, STAGE_BYTES = tile<BN>::STAGE_BYTES;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sa = smem;                                   /* STAGES x A_BYTES */
    unsigned char *sb = sa + STAGES * A_BYTES;                  /* STAGES x B_BYTES */
    uint64_t *full = reinterpret_cast<uint64_t *>(sb + STAGES * B_BYTES), *empty = full + STAGES;

    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    int tm, tn;
    kc_gemm_tile((m + BM - 1) / BM, (n + BN - 1) / BN, &tm, &tn);
    const int ktiles = (k + BK - 1) / BK;

    if (wg == 0) { /* the producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            for (int kt = 0, s = 0, phase = 0; kt < ktiles; kt++) {
                mbar_wait(&empty[s], phase ^ 1); /* a fresh barrier's previous phase counts as complete */
                mbar_expect_tx(&full[s], STAGE_BYTES);
                unsigned char *da = sa + s * A_BYTES, *db = sb + s * B_BYTES;
                if (A_KMAJOR)
                    tma_load(da, &map_a, kt * BK, tm * BM, &full[s]);
                else
                    for (int ch = 0; ch < BM / 64; ch++)
                        tma_load(da + ch * CHUNK_BYTES, &map_a, tm * BM + ch * 64, kt * BK, &full[s]);
                if (B_KMAJOR)
                    tma_load(db, &map_b, kt * BK, tn * BN, &full[s]);
                else
                    for (int ch = 0; ch < BN / 64; ch++)
                        tma_load(db + ch * CHUNK_BYTES, &map_b, tn * BN + ch * 64, kt * BK, &full[s]);
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    /* a consumer: rows r0 .. r0 + 63 of the tile */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int r0 = (wg - 1) * 64;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.0f;
    for (int kt = 0, s = 0, phase = 0; kt < ktiles; kt++) {
        mbar_wait(&full[s], phase);
        const unsigned char *a = sa + s * A_BYTES, *b = sb + s * B_BYTES;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            /* k-major: the row block, then 16 k = 32 bytes along the swizzled row; MN-major: 16 k rows of 128 B */
            uint64_t da = A_KMAJOR ? smem_desc(a + r0 * 128 + kk * 32, 16, 1024)
                                   : smem_desc(a + (r0 / 64) * CHUNK_BYTES + kk * 16 * 128, CHUNK_BYTES, 1024);
            uint64_t db = B_KMAJOR ? smem_desc(b + kk * 32, 16, 1024) : smem_desc(b + kk * 16 * 128, CHUNK_BYTES, 1024);
            wgmma<T, BN, A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(d, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (tid == 0)
            mbar_arrive(&empty[s]);
        if (++s == STAGES) {
            s = 0;
            phase ^= 1;
        }
    }

    /* the accumulators to C: warp w holds rows 16w .. 16w + 15 of the consumer's 64; lane l rows l/4 and l/4 + 8,
     * columns 8j + 2(l % 4) and the one after, in d[4j .. 4j + 3] */
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t row = (int64_t)tm * BM + r0 + warp * 16 + lane / 4 + 8 * h;
            const int64_t col = (int64_t)tn * BN + j * 8 + 2 * (lane % 4);
            if (row >= m || col >= n)
                continue;
            T *cp = c + row * ldc + col;
            float v0 = alpha * d[4 * j + 2 * h], v1 = alpha * d[4 * j + 2 * h + 1];
            if (pair && col + 1 < n) {
                if (beta != 0.0f) {
                    v0 += beta * kc_to_f(cp[0]);
                    v1 += beta * kc_to_f(cp[1]);
                }
                T two[2] = {kc_from_f<T>(v0), kc_from_f<T>(v1)};
                *reinterpret_cast<uint32_t *>(cp) = *reinterpret_cast<const uint32_t *>(two);
            } else {
                cp[0] = kc_from_f<T>(beta != 0.0f ? v0 + beta * kc_to_f(cp[0]) : v0);
                if (col + 1 < n)
                    cp[1] = kc_from_f<T>(beta != 0.0f ? v1 + beta * kc_to_f(cp[1]) : v1);
            }
        }
#endif
}

/* cuTensorMapEncodeTiled from the driver (the runtime is linked statically and loads the driver itself). */
PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return fn;
}

/* A row-major rows x cols matrix (cols contiguous, ld elements per row) as TMA boxes of 64 contiguous elements by
 * box_rows rows, 128-byte swizzled; out-of-bounds elements read as zero. */
bool encode(CUtensorMap *map, bool bf16, const void *base, int64_t rows, int64_t cols, int64_t ld, int box_rows)
{
    auto fn = encode_fn();
    if (!fn)
        return false;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    cuuint32_t elem_strides[2] = {1, 1};
    return fn(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
              const_cast<void *>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, int BN, bool TA, bool TB>
cudaError_t launch(int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda, const void *b,
                   int64_t ldb, float beta, void *c, int64_t ldc)
{
    constexpr bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    CUtensorMap ma, mb;
    /* K-major operands: boxes of 64 k by the tile's rows; MN-major: 64 m or n by 64 k */
    bool ok = TA ? encode(&ma, bf16, a, k, m, lda, BK) : encode(&ma, bf16, a, m, k, lda, BM);
    ok = ok && (TB ? encode(&mb, bf16, b, n, k, ldb, BN) : encode(&mb, bf16, b, k, n, ldb, BK));
    if (!ok)
        return cudaErrorInvalidValue;
    auto kernel = gemm_sm90_kernel<T, BN, TA, TB>;
    constexpr size_t smem = tile<BN>::SMEM;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    unsigned blocks = (unsigned)(((m + BM - 1) / BM) * ((n + BN - 1) / BN));
    bool pair = ldc % 2 == 0 && ((uintptr_t)c & 3u) == 0;
    kernel<<<blocks, THREADS, smem>>>(ma, mb, (int)m, (int)n, (int)k, alpha, beta, static_cast<T *>(c), ldc,
                                             pair);
    return cudaSuccess;
}

template <typename T, int BN>
cudaError_t dispatch(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                     const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    if (!ta && !tb)
        return launch<T, BN, false, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (!ta && tb)
        return launch<T, BN, false, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (ta && !tb)
        return launch<T, BN, true, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return launch<T, BN, true, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
cudaError_t dispatch_bn(int bn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    if (bn == 256)
        return dispatch<T, 256>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (bn == 128)
        return dispatch<T, 128>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return dispatch<T, 64>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

gemm_hopper_mode hopper_mode = GEMM_HOPPER_AUTO;

} // namespace

extern "C" gemm_hopper_mode k_gemm_cuda_hopper(gemm_hopper_mode mode)
{
    gemm_hopper_mode was = hopper_mode;
    hopper_mode = mode;
    return was;
}

int gemm_sm90_tile_n(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb)
{
    static int cc = -1, sms = 0; /* the device's, asked once (oomlab drives one GPU per process) */
    if (hopper_mode == GEMM_HOPPER_OFF || k <= 0)
        return 0;
    if (cc < 0) {
        int dev = 0, major = 0, minor = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            return 0;
        cc = major * 10 + minor;
    }
    if (cc != 90 || !encode_fn())
        return 0;
    /* TMA: 16-byte aligned bases and row strides; dimensions the kernel's int arithmetic holds */
    if (((uintptr_t)a & 15u) || ((uintptr_t)b & 15u) || lda % 8 || ldb % 8 || m > INT32_MAX / 2 ||
        n > INT32_MAX / 2 || k > INT32_MAX / 2)
        return 0;
    if (hopper_mode == GEMM_HOPPER_N256)
        return 256;
    if (hopper_mode == GEMM_HOPPER_N128)
        return 128;
    if (hopper_mode == GEMM_HOPPER_N64)
        return 64;
    /* the widest tile whose count (nearly) fills the SMs: wide tiles reuse more of each operand load, but idle SMs
     * cost more than that (H200, fp16 TFLOP/s for 128 x 256 / 128 x 128 / 128 x 64 tiles: 256 x 4096 x 4096 196 /
     * 361 / 495, 1024^3 131 / 220 / 278, 2048^3 (128 tiles of 128 x 256 on 132 SMs) 594 / 558 / 394) */
    const int64_t rows = (m + BM - 1) / BM;
    if (rows * ((n + 255) / 256) * 10 >= (int64_t)sms * 9)
        return 256;
    if (rows * ((n + 127) / 128) * 10 >= (int64_t)sms * 9)
        return 128;
    return 64;
}

cudaError_t gemm_sm90_launch(int tile_n, dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                             const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
                             int64_t ldc)
{
    if (dt == DT_F16)
        return dispatch_bn<__half>(tile_n, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return dispatch_bn<__nv_bfloat16>(tile_n, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
