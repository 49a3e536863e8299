/* fakecuda.c - the CUDA runtime and driver calls that only ask, answered as one idle GPU, so that PyTorch's CUDA
 * code paths torch.compile walks on the CPU (fake CUDA tensors in AOTAutograd's joint trace: the autograd engine
 * asks for the device's current stream and whether it has a primary context) work with no driver. Interposed with
 * LD_PRELOAD (fakecuda.py); its soname is libcuda.so.1, so that PyTorch's dlopen("libcuda.so.1") finds it.
 * Nothing here allocates or launches: cudaMalloc and every other call still reach the real runtime, which fails
 * there as with no GPU. Only the CUDA headers are used (the toolkit's include folder), no CUDA library. */
#include <cuda_runtime_api.h> /* struct cudaDeviceProp only: no CUDA library is linked */
#include <stdlib.h>
#include <string.h>

static int current_device;

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = current_device; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st)
{
    (void)s;
    *st = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) { (void)mode; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return cudaSuccess; }

/* The GPU of the prediction, from OOMLAB_FAKECUDA_GPU="name;total_memory;major;minor;sm_count;threads_per_sm;
 * l2_bytes;smem_per_block_optin" (fakecuda.py sets it from the GPU table): what at::cuda::getDeviceProperties answers (SDPA's backend
 * choice reads the capability and SM count). */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    const char *spec = getenv("OOMLAB_FAKECUDA_GPU");
    char buf[256];
    char *f[8] = {0};
    int n = 0;
    if (device != 0 || !spec || strlen(spec) >= sizeof buf)
        return cudaErrorInvalidDevice;
    strcpy(buf, spec);
    for (char *tok = strtok(buf, ";"); tok && n < 8; tok = strtok(NULL, ";"))
        f[n++] = tok;
    if (n != 8)
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    strncpy(p->name, f[0], sizeof p->name - 1);
    p->totalGlobalMem = strtoull(f[1], NULL, 10);
    p->major = atoi(f[2]);
    p->minor = atoi(f[3]);
    p->multiProcessorCount = atoi(f[4]);
    p->maxThreadsPerMultiProcessor = atoi(f[5]);
    p->l2CacheSize = atoi(f[6]);
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->regsPerMultiprocessor = 65536;
    p->regsPerBlock = 65536;
    p->sharedMemPerBlock = 49152;
    p->sharedMemPerBlockOptin = atoi(f[7]);
    p->sharedMemPerMultiprocessor = p->sharedMemPerBlockOptin + 1024;
    return cudaSuccess;
}

/* The driver API (CUresult: CUDA_SUCCESS = 0, CUDA_ERROR_NOT_SUPPORTED = 801). */
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) { (void)dev; *flags = 0; *active = 1; return 0; }
int cuCtxGetCurrent(void **ctx) { static int context; *ctx = &context; return 0; }
int cuGetErrorString(int err, const char **s) { (void)err; *s = "no GPU (oomlab capture)"; return 0; }
static int not_supported(void) { return 801; }

/* c10's DriverAPI takes its entry points through the runtime: the ones above, the rest not supported */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)
{
    (void)version;
    (void)flags;
    if (!strcmp(symbol, "cuDevicePrimaryCtxGetState"))
        *fn = (void *)cuDevicePrimaryCtxGetState;
    else if (!strcmp(symbol, "cuDeviceGet"))
        *fn = (void *)cuDeviceGet;
    else if (!strcmp(symbol, "cuCtxGetCurrent"))
        *fn = (void *)cuCtxGetCurrent;
    else
        *fn = (void *)not_supported;
    if (status)
        *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
}
