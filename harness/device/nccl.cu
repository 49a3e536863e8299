/* nccl.cu - devcomm.h's NCCL engine: libnccl.so.2 opened with dlopen (as cuda.cu opens NVML), so oomlab builds and
 * starts without it. Looked for by its soname on the loader's path (LD_LIBRARY_PATH: PyTorch's wheel ships it under
 * site-packages/nvidia/nccl/lib), then under the CUDA Toolkit (/usr/local/cuda/lib, lib64). The few types used are
 * declared here with nccl.h's values (ncclSum 0, ncclFloat16 6, ncclFloat32 7, ncclBfloat16 9, ncclInt64 4), so no
 * header is needed either. One process drives every rank: ncclCommInitAll, and each collective issued for all
 * ranks between ncclGroupStart and ncclGroupEnd on each GPU's default stream, then synchronised. */
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/devcomm.h"

typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t; /* ncclSuccess = 0 */
typedef ncclResult_t (*pfn_init_all)(ncclComm_t *, int, const int *);
typedef ncclResult_t (*pfn_destroy)(ncclComm_t);
typedef const char *(*pfn_err)(ncclResult_t);
typedef ncclResult_t (*pfn_group)(void);
typedef ncclResult_t (*pfn_version)(int *);
typedef ncclResult_t (*pfn_all_reduce)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*pfn_reduce_scatter)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*pfn_all_gather)(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*pfn_broadcast)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);

static struct {
    bool tried, ok;
    char where[160];
    pfn_init_all init_all;
    pfn_destroy destroy;
    pfn_err err;
    pfn_group group_start, group_end;
    pfn_version version;
    pfn_all_reduce all_reduce;
    pfn_reduce_scatter reduce_scatter;
    pfn_all_gather all_gather;
    pfn_broadcast broadcast;
} nc;

static bool nccl_load(void)
{
    if (nc.tried)
        return nc.ok;
    nc.tried = true;
    static const char *const names[] = {"libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2",
                                        "/usr/local/cuda/lib64/libnccl.so.2"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) != NULL)
            snprintf(nc.where, sizeof nc.where, "%s", names[i]);
    if (!h)
        return false;
    nc.init_all = (pfn_init_all)dlsym(h, "ncclCommInitAll");
    nc.destroy = (pfn_destroy)dlsym(h, "ncclCommDestroy");
    nc.err = (pfn_err)dlsym(h, "ncclGetErrorString");
    nc.group_start = (pfn_group)dlsym(h, "ncclGroupStart");
    nc.group_end = (pfn_group)dlsym(h, "ncclGroupEnd");
    nc.version = (pfn_version)dlsym(h, "ncclGetVersion");
    nc.all_reduce = (pfn_all_reduce)dlsym(h, "ncclAllReduce");
    nc.reduce_scatter = (pfn_reduce_scatter)dlsym(h, "ncclReduceScatter");
    nc.all_gather = (pfn_all_gather)dlsym(h, "ncclAllGather");
    nc.broadcast = (pfn_broadcast)dlsym(h, "ncclBroadcast");
    nc.ok = nc.init_all && nc.destroy && nc.err && nc.group_start && nc.group_end && nc.version && nc.all_reduce &&
            nc.reduce_scatter && nc.all_gather && nc.broadcast;
    return nc.ok;
}

struct devnccl {
    int n;
    device *devs[DEVCOMM_MAX_RANKS];
    ncclComm_t comms[DEVCOMM_MAX_RANKS];
};

static oom_status nccl_status(ncclResult_t r, const char *what)
{
    if (r == 0)
        return OOM_OK;
    OOM_ERROR(OOM_ECUDA, "NCCL: %s failed: %s", what, nc.err(r));
    return OOM_ECUDA;
}

static int nccl_dtype(dtype dt)
{
    return dt == DT_F32 ? 7 : dt == DT_F16 ? 6 : dt == DT_BF16 ? 9 : 4;
}

static void *vp(devptr p) { return (void *)(uintptr_t)p; }

/* cudaMemGetInfo's free on each rank's GPU. Every function here sets GPUs with cudaSetDevice (NCCL does too) and puts
 * back the GPU that was current when it was called, which cuda.cu's record of the current GPU (device_make_current)
 * names: that record stays true. */
static void free_of(device *const *devs, int n, size_t *out)
{
    for (int k = 0; k < n; k++) {
        size_t total = 0;
        out[k] = 0;
        cudaSetDevice(device_cuda_ordinal(devs[k]));
        if (cudaMemGetInfo(&out[k], &total) != cudaSuccess)
            out[k] = 0;
    }
}

oom_status devnccl_run(struct devnccl *c, devcomm_op op, const devptr *send, const devptr *recv, size_t count,
                       dtype dt, int root)
{
    int saved = 0; /* as in devnccl_init: the current GPU is put back when done */
    cudaGetDevice(&saved);
    oom_status st = nccl_status(nc.group_start(), "ncclGroupStart");
    for (int k = 0; k < c->n && st == OOM_OK; k++) {
        cudaSetDevice(device_cuda_ordinal(c->devs[k]));
        int t = nccl_dtype(dt);
        ncclResult_t r = 0;
        switch (op) {
        case COMM_ALL_REDUCE:
            r = nc.all_reduce(vp(send[k]), vp(recv[k]), count, t, 0, c->comms[k], 0);
            break;
        case COMM_REDUCE_SCATTER:
            r = nc.reduce_scatter(vp(send[k]), vp(recv[k]), count, t, 0, c->comms[k], 0);
            break;
        case COMM_ALL_GATHER:
            r = nc.all_gather(vp(send[k]), vp(recv[k]), count, t, c->comms[k], 0);
            break;
        default:
            r = nc.broadcast(vp(send[k]), vp(recv[k]), count, t, root, c->comms[k], 0);
            break;
        }
        st = nccl_status(r, devcomm_op_str(op));
    }
    oom_status end = nccl_status(nc.group_end(), "ncclGroupEnd");
    if (st == OOM_OK)
        st = end;
    for (int k = 0; k < c->n && st == OOM_OK; k++) { /* work.wait() and the host's next step */
        cudaSetDevice(device_cuda_ordinal(c->devs[k]));
        cudaError_t e = cudaStreamSynchronize(0);
        if (e != cudaSuccess) {
            OOM_ERROR(OOM_ECUDA, "NCCL: %s: %s", devcomm_op_str(op), cudaGetErrorString(e));
            st = OOM_ECUDA;
        }
    }
    cudaSetDevice(saved);
    return st;
}

oom_status devnccl_init(device *const *devs, int n, struct devnccl **out, size_t *external, char *why, size_t whycap)
{
    if (!nccl_load()) {
        snprintf(why, whycap,
                 "NCCL: libnccl.so.2 not found (PyTorch's wheel has it under site-packages/nvidia/nccl/lib: add it to "
                 "LD_LIBRARY_PATH); collectives staged through the host");
        return OOM_EUNSUPPORTED;
    }
    struct devnccl *c = (struct devnccl *)calloc(1, sizeof *c);
    if (!c)
        return OOM_ENOMEM_HOST;
    c->n = n;
    int ords[DEVCOMM_MAX_RANKS];
    for (int k = 0; k < n; k++) {
        c->devs[k] = devs[k];
        ords[k] = device_cuda_ordinal(devs[k]);
    }
    int saved = 0; /* put back on every return below (free_of's comment) */
    cudaGetDevice(&saved);
    size_t before[DEVCOMM_MAX_RANKS], after[DEVCOMM_MAX_RANKS];
    free_of(devs, n, before);
    oom_status st = nccl_status(nc.init_all(c->comms, n, ords), "ncclCommInitAll");
    if (st != OOM_OK) {
        free(c);
        cudaSetDevice(saved);
        return st;
    }
    /* a first collective of each kind (NCCL connects its channels on first use), on a scratch buffer of 32 MiB per
     * GPU, large enough for the SIMPLE protocol; freed before the second reading */
    const size_t scratch = (size_t)32 << 20;
    devptr buf[DEVCOMM_MAX_RANKS] = {0};
    for (int k = 0; k < n && st == OOM_OK; k++) {
        void *p = NULL;
        cudaSetDevice(device_cuda_ordinal(devs[k]));
        if (cudaMalloc(&p, scratch) != cudaSuccess) {
            OOM_ERROR(OOM_ENOMEM_DEVICE, "NCCL: no room for the first collective's scratch buffer on GPU %d", ords[k]);
            st = OOM_ENOMEM_DEVICE;
        }
        buf[k] = (devptr)(uintptr_t)p;
    }
    size_t per = scratch / (size_t)n / sizeof(float);
    for (int op = 0; op < COMM_NOPS && st == OOM_OK; op++)
        st = devnccl_run(c, (devcomm_op)op, buf, buf, op == COMM_ALL_REDUCE || op == COMM_BROADCAST ? per * (size_t)n : per,
                         DT_F32, 0);
    for (int k = 0; k < n; k++)
        if (buf[k]) {
            cudaSetDevice(device_cuda_ordinal(devs[k]));
            cudaFree(vp(buf[k]));
        }
    if (st != OOM_OK) {
        devnccl_free(c);
        cudaSetDevice(saved);
        return st;
    }
    free_of(devs, n, after);
    cudaSetDevice(saved);
    for (int k = 0; k < n; k++)
        external[k] = before[k] > after[k] ? before[k] - after[k] : 0;
    int v = 0;
    nc.version(&v);
    snprintf(why, whycap, "NCCL %d.%d.%d (%s): one communicator per GPU, buffers measured with cudaMemGetInfo", v / 10000,
             (v / 100) % 100, v % 100, nc.where);
    *out = c;
    return OOM_OK;
}

void devnccl_free(struct devnccl *c)
{
    if (!c)
        return;
    int saved = 0;
    cudaGetDevice(&saved);
    for (int k = 0; k < c->n; k++)
        if (c->comms[k])
            nc.destroy(c->comms[k]);
    cudaSetDevice(saved);
    free(c);
}
