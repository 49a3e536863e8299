#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels.h"
int main() {
    struct { dtype dt; bool ta, tb; long m, n, k; } sh[] = {
        {DT_F16, true, false, 4096, 4096, 256}, {DT_F16, false, true, 4096, 4096, 256},
        {DT_F16, false, true, 256, 4096, 4096}, {DT_F16, false, true, 1024, 1024, 1024},
        {DT_F16, false, true, 512, 512, 512}, {DT_F16, false, true, 128, 128, 128},
        {DT_F16, true, false, 4096, 4096, 1024}, {DT_F16, false, true, 2048, 2048, 2048}};
    gemm_hopper_mode modes[] = {GEMM_HOPPER_OFF, GEMM_HOPPER_N256, GEMM_HOPPER_N128, GEMM_HOPPER_N64, GEMM_HOPPER_AUTO};
    const char *names[] = {"mma.sync", "n256", "n128", "n64", "auto"};
    for (auto &s : sh) {
        void *a, *b, *c;
        cudaMalloc(&a, s.m * s.k * 2); cudaMalloc(&b, s.k * s.n * 2); cudaMalloc(&c, s.m * s.n * 2);
        cudaMemset(a, 0, s.m * s.k * 2); cudaMemset(b, 0, s.k * s.n * 2);
        long lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
        printf("%s%s %ldx%ldx%ld:", s.ta ? "T" : "N", s.tb ? "T" : "N", s.m, s.n, s.k);
        for (int mi = 0; mi < 5; mi++) {
            k_gemm_cuda_hopper(modes[mi]);
            for (int w = 0; w < 3; w++) k_gemm_cuda(s.dt, s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n);
            cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
            const int R = 50;
            cudaEventRecord(e0);
            for (int r = 0; r < R; r++) k_gemm_cuda(s.dt, s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n);
            cudaEventRecord(e1); cudaEventSynchronize(e1);
            float ms; cudaEventElapsedTime(&ms, e0, e1);
            double tf = 2.0 * s.m * s.n * s.k / (ms / R * 1e-3) * 1e-12;
            printf("  %s %.1f", names[mi], tf);
        }
        printf("  err=%s\n", cudaGetErrorName(cudaGetLastError()));
        cudaFree(a); cudaFree(b); cudaFree(c);
    }
}
