/* kernels_cuda.cu - the table of CUDA kernels (the cuda backend computes with these), and sync. */
#include <cuda_runtime.h>

#include "kernels.h"

/* Wait for everything launched on the device; a failed kernel surfaces here as OOM_ECUDA. */
static oom_status cuda_sync(void)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e == cudaSuccess)
        return OOM_OK;
    OOM_ERROR(OOM_ECUDA, "kernel failed: %s", cudaGetErrorName(e));
    return OOM_ECUDA;
}

/* positional, in kernel_ops' member order (C++17 has no designated initialisers) */
#define KERNEL_CUDA_ENTRY(name, params) k_##name##_cuda,

extern "C" const kernel_ops kernels_cuda = {"cuda", KERNEL_LIST(KERNEL_CUDA_ENTRY) cuda_sync};
