/* bench_cuda.cu - raw CUDA allocation timings for `oomlab bench alloc`: cudaMalloc/cudaFree and
 * cudaMallocAsync/cudaFreeAsync, so the caching allocator's figures have their baselines in the same run. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench.h"

#define RAW_MAX_K 64

/* One round: k allocations, then k frees. Returns false on any CUDA failure (state cleared). */
static bool raw_round(size_t bytes, int k, bool async, cudaStream_t s)
{
    void *p[RAW_MAX_K];
    int got = 0;
    bool ok = true;
    for (; got < k; got++) {
        cudaError_t e = async ? cudaMallocAsync(&p[got], bytes, s) : cudaMalloc(&p[got], bytes);
        if (e != cudaSuccess) {
            ok = false;
            break;
        }
    }
    for (int i = 0; i < got; i++) {
        cudaError_t e = async ? cudaFreeAsync(p[i], s) : cudaFree(p[i]);
        if (e != cudaSuccess)
            ok = false;
    }
    if (!ok)
        (void)cudaGetLastError();
    return ok;
}

extern "C" oom_status device_time_raw_pairs(device *dev, size_t bytes, int outstanding, long pairs, bool async,
                                            double *ns)
{
    if (dev->kind != DEVICE_CUDA || outstanding < 1 || outstanding > RAW_MAX_K || pairs < 1)
        return OOM_EUNSUPPORTED;
    cudaStream_t s = 0;
    if (async) {
        /* keep freed memory in the pool, as PyTorch's measured figures did (release threshold = max) */
        int dev_id = 0;
        cudaMemPool_t pool;
        uint64_t threshold = UINT64_MAX;
        if (cudaGetDevice(&dev_id) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev_id) != cudaSuccess ||
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) {
            (void)cudaGetLastError();
            return OOM_ECUDA;
        }
    }
    if (!raw_round(bytes, outstanding, async, s))
        return OOM_ENOMEM_DEVICE;
    long rounds = pairs / outstanding > 0 ? pairs / outstanding : 1;
    double t0 = bench_now_ns();
    for (long r = 0; r < rounds; r++)
        if (!raw_round(bytes, outstanding, async, s))
            return OOM_ENOMEM_DEVICE;
    if (async)
        cudaStreamSynchronize(s);
    *ns = (bench_now_ns() - t0) / ((double)rounds * outstanding);
    if (async) {
        /* give the pool's memory back so later cells and the caching allocator see the whole device */
        int dev_id = 0;
        cudaMemPool_t pool;
        if (cudaGetDevice(&dev_id) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev_id) == cudaSuccess)
            cudaMemPoolTrimTo(pool, 0);
        (void)cudaGetLastError();
    }
    return OOM_OK;
}

extern "C" oom_status bench_device_bandwidth(double *gbps, char *how, size_t how_len)
{
    int dev = 0, khz = 0, bits = 0;
    *gbps = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess || khz <= 0 || bits <= 0) {
        (void)cudaGetLastError();
        return OOM_ECUDA;
    }
    /* double data rate: two transfers per clock */
    *gbps = (double)khz * 1e3 * 2.0 * (bits / 8.0) * 1e-9;
    snprintf(how, how_len, "memory clock %d MHz x %d-bit bus x 2, from the driver", khz / 1000, bits);
    return OOM_OK;
}
