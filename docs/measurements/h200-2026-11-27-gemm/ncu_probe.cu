#include <cuda_runtime.h>
#include <stdio.h>
#include "kernels.h"
int main() {
    struct { dtype dt; bool ta, tb; long m, n, k; } sh[] = {
        {DT_F32, false, true, 256, 4096, 4096}, {DT_F32, false, false, 256, 4096, 4096},
        {DT_F16, true, false, 4096, 4096, 256}, {DT_F16, true, false, 4096, 4096, 4096}};
    for (auto &s : sh) {
        size_t es = s.dt == DT_F32 ? 4 : 2;
        void *a, *b, *c;
        cudaMalloc(&a, s.m * s.k * es); cudaMalloc(&b, s.k * s.n * es); cudaMalloc(&c, s.m * s.n * es);
        cudaMemset(a, 0, s.m * s.k * es); cudaMemset(b, 0, s.k * s.n * es);
        long lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
        for (int r = 0; r < 2; r++) k_gemm_cuda(s.dt, s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n);
        cudaDeviceSynchronize();
        printf("%s %s%s %ldx%ldx%ld %s\n", s.dt == DT_F32 ? "f32" : "f16", s.ta ? "T" : "N", s.tb ? "T" : "N", s.m, s.n, s.k,
               cudaGetErrorName(cudaGetLastError()));
        cudaFree(a); cudaFree(b); cudaFree(c);
    }
}
