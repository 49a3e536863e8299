/* gemm_sm90.h - the Hopper path of k_gemm_cuda (gemm_sm90.cu: f16 / bf16 on wgmma and TMA). nvcc only. */
#ifndef OOMLAB_GEMM_SM90_H
#define OOMLAB_GEMM_SM90_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

/* The Hopper path's tile columns for these f16 / bf16 operands on the current device (any layout), 0 where it is
 * not taken: it needs compute capability 9.0, the driver's TMA encoder, bases 16-byte aligned, leading dimensions
 * multiples of 8 elements, k > 0, and k_gemm_cuda_hopper's mode not GEMM_HOPPER_OFF. By default 256, or 128 or 64
 * where wider tiles would leave SMs idle; the GEMM_HOPPER_N* modes fix it. */
int gemm_sm90_tile_n(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb);

/* Launch it with tiles of 128 x tile_n (gemm_sm90_tile_n's answer); a launch error is returned, not recorded. */
cudaError_t gemm_sm90_launch(int tile_n, dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                             const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c,
                             int64_t ldc);

#endif
