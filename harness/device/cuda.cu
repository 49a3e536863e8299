/* cuda.cu - the cuda backend: cudaMalloc/cudaFree, the driver's VMM API, cudaHostAlloc.
 *
 * Written as CUDA C (C-like host code). The driver functions (cuMem*, cuDeviceGetAttribute, cuGetErrorName)
 * are looked up at run time through cudaGetDriverEntryPointByVersion, so the binary links only the static
 * runtime and still starts on machines without libcuda (device_cuda_visible() is then false).
 * Every allocation is recorded in a sorted table so that bad frees, double maps and unmaps of unmapped pages
 * are refused with OOM_EINVAL before they reach CUDA, as on the sim backend.
 * The backend assumes one host thread drives it (the primary context is made current in device_cuda_open),
 * except the host, stream and event ops, which host_mu serialises: a pin-memory thread calls them.
 * Held work (device.h) is a one-thread kernel per hold that waits until a counter in mapped pinned memory
 * reaches its ticket; stream_complete raises the counter from the host. cudaFree, cudaFreeHost and
 * cudaHostUnregister wait for every kernel on the device, the held ones too, which only the host can let go: while
 * any work is held they are deferred (the range is gone from the backend's tables at once, so the counters and
 * host_info are as on sim) and done as soon as nothing is held (stream_complete of the last unit,
 * stream_synchronize, stream_destroy, close).
 * NVML (libnvidia-ml.so.1) is optional: it is opened with dlopen the first time an OOM message asks which
 * processes use the GPU, as PyTorch does; without it the message leaves that line out.
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "device/device.h"
#include "core/status.h"

/* Driver entry points, resolved once per process. */
typedef CUresult (*pfn_cuGetErrorName)(CUresult error, const char **str);
typedef CUresult (*pfn_cuDeviceGet)(CUdevice *device, int ordinal);
typedef CUresult (*pfn_cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*pfn_cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                            unsigned long long flags);
typedef CUresult (*pfn_cuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*pfn_cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size,
                                    const CUmemAllocationProp *prop, unsigned long long flags);
typedef CUresult (*pfn_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                 unsigned long long flags);
typedef CUresult (*pfn_cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
typedef CUresult (*pfn_cuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*pfn_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*pfn_cuMemGetAllocationGranularity)(size_t *granularity, const CUmemAllocationProp *prop,
                                                      CUmemAllocationGranularity_flags option);

typedef struct driver_api {
    bool loaded; /* every symbol below was found */
    pfn_cuGetErrorName cuGetErrorName;
    pfn_cuDeviceGet cuDeviceGet;
    pfn_cuDeviceGetAttribute cuDeviceGetAttribute;
    pfn_cuMemAddressReserve cuMemAddressReserve;
    pfn_cuMemAddressFree cuMemAddressFree;
    pfn_cuMemCreate cuMemCreate;
    pfn_cuMemMap cuMemMap;
    pfn_cuMemSetAccess cuMemSetAccess;
    pfn_cuMemUnmap cuMemUnmap;
    pfn_cuMemRelease cuMemRelease;
    pfn_cuMemGetAllocationGranularity cuMemGetAllocationGranularity;
} driver_api;

static driver_api drv;

/* Resolve one driver symbol into *slot; false (and *slot NULL) when the driver lacks it. 12000: the ABI of
 * these functions as of CUDA 12.0, which every CUDA 13 driver provides. */
static bool drv_entry(const char *sym, void **slot)
{
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    *slot = NULL;
    if (cudaGetDriverEntryPointByVersion(sym, slot, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        *slot = NULL;
        return false;
    }
    return *slot != NULL;
}

static bool drv_load(void)
{
    if (drv.loaded)
        return true;
    bool ok = true;
    ok &= drv_entry("cuGetErrorName", (void **)&drv.cuGetErrorName);
    ok &= drv_entry("cuDeviceGet", (void **)&drv.cuDeviceGet);
    ok &= drv_entry("cuDeviceGetAttribute", (void **)&drv.cuDeviceGetAttribute);
    ok &= drv_entry("cuMemAddressReserve", (void **)&drv.cuMemAddressReserve);
    ok &= drv_entry("cuMemAddressFree", (void **)&drv.cuMemAddressFree);
    ok &= drv_entry("cuMemCreate", (void **)&drv.cuMemCreate);
    ok &= drv_entry("cuMemMap", (void **)&drv.cuMemMap);
    ok &= drv_entry("cuMemSetAccess", (void **)&drv.cuMemSetAccess);
    ok &= drv_entry("cuMemUnmap", (void **)&drv.cuMemUnmap);
    ok &= drv_entry("cuMemRelease", (void **)&drv.cuMemRelease);
    ok &= drv_entry("cuMemGetAllocationGranularity", (void **)&drv.cuMemGetAllocationGranularity);
    drv.loaded = ok;
    return ok;
}

/* Map a runtime error to an oom_status; out of memory is a normal result, anything else is recorded. */
static oom_status rt_status(cudaError_t e, const char *expr, const char *file, int line)
{
    if (e == cudaSuccess)
        return OOM_OK;
    (void)cudaGetLastError(); /* clear the (non-sticky) error so later calls are not blamed for it */
    if (e == cudaErrorMemoryAllocation)
        return OOM_ENOMEM_DEVICE;
    oom_error_set(OOM_ECUDA, file, line, "%s: %s", expr, cudaGetErrorName(e));
    return OOM_ECUDA;
}

/* The same for a driver CUresult. */
static oom_status drv_status(CUresult r, const char *expr, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return OOM_OK;
    (void)cudaGetLastError();
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return OOM_ENOMEM_DEVICE;
    const char *name = NULL;
    if (!drv.cuGetErrorName || drv.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "CUDA_ERROR_?";
    oom_error_set(OOM_ECUDA, file, line, "%s: %s (%d)", expr, name, (int)r);
    return OOM_ECUDA;
}

/* Evaluate a runtime / driver call to an oom_status, recording #expr, file and line on failure. */
#define OOM_CUDA(expr) rt_status((expr), #expr, __FILE__, __LINE__)
#define OOM_CU(expr) drv_status((expr), #expr, __FILE__, __LINE__)

/* A sorted table of [addr, addr+size) entries: segments, reservations, mapped pages (with their physical
 * handle) and pinned host blocks. */
typedef struct cu_entry {
    devptr addr;
    size_t size;
    CUmemGenericAllocationHandle handle; /* pages only */
} cu_entry;

typedef struct cu_table {
    cu_entry *e;
    size_t n, cap;
} cu_table;

/* Index of the first entry whose addr is > p. */
static size_t tab_upper(const cu_table *t, devptr p)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->e[mid].addr <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entry that starts exactly at p, or NULL. */
static cu_entry *tab_exact(cu_table *t, devptr p)
{
    size_t i = tab_upper(t, p);
    return (i > 0 && t->e[i - 1].addr == p) ? &t->e[i - 1] : NULL;
}

/* The entry containing p, or NULL. */
static cu_entry *tab_containing(cu_table *t, devptr p)
{
    size_t i = tab_upper(t, p);
    return (i > 0 && p - t->e[i - 1].addr < t->e[i - 1].size) ? &t->e[i - 1] : NULL;
}

/* Does any entry overlap [p, p+bytes)? */
static bool tab_overlaps(const cu_table *t, devptr p, size_t bytes)
{
    size_t i = tab_upper(t, p);
    if (i > 0 && t->e[i - 1].addr + t->e[i - 1].size > p)
        return true;
    return i < t->n && t->e[i].addr - p < bytes;
}

/* Make room for k more entries up front, so that an insert after a successful CUDA call cannot fail. */
static bool tab_reserve(cu_table *t, size_t k)
{
    if (t->n + k <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 16;
    while (cap < t->n + k)
        cap *= 2;
    cu_entry *ne = (cu_entry *)realloc(t->e, cap * sizeof *ne);
    if (!ne)
        return false;
    t->e = ne;
    t->cap = cap;
    return true;
}

static void tab_insert(cu_table *t, devptr addr, size_t size, CUmemGenericAllocationHandle h)
{
    size_t i = tab_upper(t, addr);
    memmove(&t->e[i + 1], &t->e[i], (t->n - i) * sizeof *t->e);
    t->e[i].addr = addr;
    t->e[i].size = size;
    t->e[i].handle = h;
    t->n++;
}

static void tab_remove(cu_table *t, cu_entry *x)
{
    size_t i = (size_t)(x - t->e);
    memmove(&t->e[i], &t->e[i + 1], (t->n - i - 1) * sizeof *t->e);
    t->n--;
}

/* A stream this backend knows (the default stream is entered on first use), with its gate for held work:
 * gate_h[0] is the highest ticket the host has let through, gate_h[1] the highest ticket whose kernel has
 * started (so everything queued before it, events included, has completed); both in mapped pinned memory.
 * Held units queued so far carry tickets 1..queued. */
typedef struct cu_stream {
    devstream id; /* 0, or the cudaStream_t */
    bool created; /* by stream_create (destroyed by stream_destroy) */
    volatile unsigned *gate_h;
    unsigned *gate_d;
    unsigned queued;
} cu_stream;

/* A cudaFree, cudaFreeHost or cudaHostUnregister put off while work is held (see the file comment). */
typedef struct cu_deferred {
    void *p;
    int kind; /* DEFER_FREE, DEFER_FREE_HOST, DEFER_UNREGISTER */
} cu_deferred;

typedef struct cuda_dev {
    int ordinal;
    int pci_domain, pci_bus, pci_device; /* cudaDeviceProp's, to find the device in NVML */
    bool vmm;    /* the driver API was found and the device supports VMM */
    size_t gran; /* cuMemGetAllocationGranularity (minimum) */
    cu_table segs, resv, pages;
    pthread_mutex_t host_mu; /* guards host, events, streams */
    cu_table host;           /* pinned blocks (handle 0) and registered ranges (handle 1) */
    cu_table events;         /* live events */
    cu_stream *streams;
    size_t nstreams, capstreams;
    cu_deferred *deferred; /* frees waiting for held work to be let go (the file comment); under host_mu */
    size_t ndeferred, capdeferred;
} cuda_dev;

enum { DEFER_FREE, DEFER_FREE_HOST, DEFER_UNREGISTER };

/* Does any stream hold work the host has not let go? (host_mu held) */
static bool any_held(const cuda_dev *c)
{
    for (size_t i = 0; i < c->nstreams; i++)
        if (c->streams[i].gate_h && c->streams[i].gate_h[0] < c->streams[i].queued)
            return true;
    return false;
}

static cudaError_t defer_call(void *p, int kind)
{
    return kind == DEFER_FREE ? cudaFree(p) : kind == DEFER_FREE_HOST ? cudaFreeHost(p) : cudaHostUnregister(p);
}

/* cudaFree/cudaFreeHost/cudaHostUnregister of p now, or once nothing is held. A deferred call's error cannot be
 * reported to its caller; it is on stderr. */
static oom_status free_or_defer(cuda_dev *c, void *p, int kind)
{
    pthread_mutex_lock(&c->host_mu);
    bool later = any_held(c);
    if (later && c->ndeferred == c->capdeferred) {
        size_t cap = c->capdeferred ? c->capdeferred * 2 : 16;
        cu_deferred *v = (cu_deferred *)realloc(c->deferred, cap * sizeof *v);
        if (v) {
            c->deferred = v;
            c->capdeferred = cap;
        } else {
            later = false; /* no room to remember it: free now (it waits for the held work) */
        }
    }
    if (later) {
        c->deferred[c->ndeferred].p = p;
        c->deferred[c->ndeferred++].kind = kind;
    }
    pthread_mutex_unlock(&c->host_mu);
    return later ? OOM_OK : OOM_CUDA(defer_call(p, kind));
}

/* Do the deferred frees once nothing is held. */
static void flush_deferred(cuda_dev *c)
{
    pthread_mutex_lock(&c->host_mu);
    cu_deferred *v = NULL;
    size_t n = 0;
    if (!any_held(c)) {
        v = c->deferred;
        n = c->ndeferred;
        c->deferred = NULL;
        c->ndeferred = c->capdeferred = 0;
    }
    pthread_mutex_unlock(&c->host_mu);
    for (size_t i = 0; i < n; i++) {
        cudaError_t e = defer_call(v[i].p, v[i].kind);
        if (e != cudaSuccess)
            fprintf(stderr, "oomlab: a deferred free of %p failed: %s\n", v[i].p, cudaGetErrorString(e));
    }
    free(v);
}

static void *hptr(devptr p) { return (void *)(uintptr_t)p; }

/* Make c's GPU current on this thread before a CUDA call: with several GPUs in one process (model_too_large's
 * devices on a multi-GPU machine) each op may be another GPU's. The ordinal last set on this thread is
 * remembered, so on one GPU it is set once. */
static thread_local int cu_current = -1;
static void cu_use(const cuda_dev *c)
{
    if (cu_current != c->ordinal && cudaSetDevice(c->ordinal) == cudaSuccess)
        cu_current = c->ordinal;
}

static oom_status cu_mem_alloc(void *impl, size_t bytes, devptr *out)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (bytes == 0)
        return OOM_EINVAL;
    if (!tab_reserve(&c->segs, 1))
        return OOM_ENOMEM_HOST;
    void *p = NULL;
    oom_status st = OOM_CUDA(cudaMalloc(&p, bytes));
    if (st != OOM_OK)
        return st;
    tab_insert(&c->segs, (devptr)(uintptr_t)p, bytes, 0);
    *out = (devptr)(uintptr_t)p;
    return OOM_OK;
}

static oom_status cu_mem_free(void *impl, devptr p, size_t bytes)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    cu_entry *e = tab_exact(&c->segs, p);
    if (!e || e->size != bytes)
        return OOM_EINVAL;
    tab_remove(&c->segs, e);
    return free_or_defer(c, hptr(p), DEFER_FREE);
}

static oom_status cu_mem_info(void *impl, size_t *free_bytes, size_t *total_bytes)
{
    cu_use((cuda_dev *)impl);
    size_t f = 0, t = 0;
    oom_status st = OOM_CUDA(cudaMemGetInfo(&f, &t));
    if (st != OOM_OK)
        return st;
    *free_bytes = f;
    *total_bytes = t;
    return OOM_OK;
}

static oom_status cu_va_reserve(void *impl, size_t bytes, devptr *out)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (!c->vmm)
        return OOM_EUNSUPPORTED;
    if (bytes == 0 || bytes % c->gran != 0)
        return OOM_EINVAL;
    if (!tab_reserve(&c->resv, 1))
        return OOM_ENOMEM_HOST;
    CUdeviceptr p = 0;
    oom_status st = OOM_CU(drv.cuMemAddressReserve(&p, bytes, 0, 0, 0));
    if (st != OOM_OK)
        return st;
    tab_insert(&c->resv, (devptr)p, bytes, 0);
    *out = (devptr)p;
    return OOM_OK;
}

static oom_status cu_va_release(void *impl, devptr p, size_t bytes)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (!c->vmm)
        return OOM_EUNSUPPORTED;
    cu_entry *e = tab_exact(&c->resv, p);
    if (!e || e->size != bytes || tab_overlaps(&c->pages, p, bytes))
        return OOM_EINVAL; /* unknown, wrong size, or pages still mapped */
    oom_status st = OOM_CU(drv.cuMemAddressFree((CUdeviceptr)p, bytes));
    if (st == OOM_OK)
        tab_remove(&c->resv, e);
    return st;
}

/* Common checks of va_map/va_unmap: alignment and [p, p+bytes) inside one reservation. */
static bool page_request_ok(cuda_dev *c, devptr p, size_t bytes, size_t page_bytes)
{
    if (page_bytes == 0 || page_bytes % c->gran != 0 || bytes == 0 || bytes % page_bytes != 0 ||
        p % c->gran != 0)
        return false;
    cu_entry *r = tab_containing(&c->resv, p);
    return r && bytes <= r->size - (size_t)(p - r->addr);
}

/* Unmap and release one mapped page and drop it from the table. */
static oom_status unmap_page(cuda_dev *c, cu_entry *e)
{
    oom_status st = OOM_CU(drv.cuMemUnmap((CUdeviceptr)e->addr, e->size));
    if (st != OOM_OK)
        return st;
    st = OOM_CU(drv.cuMemRelease(e->handle));
    tab_remove(&c->pages, e); /* unmapped either way; a failed release leaks only the handle */
    return st;
}

static oom_status cu_va_map(void *impl, devptr p, size_t bytes, size_t page_bytes)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (!c->vmm)
        return OOM_EUNSUPPORTED;
    if (!page_request_ok(c, p, bytes, page_bytes) || tab_overlaps(&c->pages, p, bytes))
        return OOM_EINVAL;
    size_t npages = bytes / page_bytes;
    if (!tab_reserve(&c->pages, npages))
        return OOM_ENOMEM_HOST;

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = c->ordinal;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    oom_status st = OOM_OK;
    size_t done = 0;
    for (; done < npages; done++) {
        devptr a = p + done * page_bytes;
        CUmemGenericAllocationHandle h = 0;
        st = OOM_CU(drv.cuMemCreate(&h, page_bytes, &prop, 0));
        if (st != OOM_OK)
            break;
        st = OOM_CU(drv.cuMemMap((CUdeviceptr)a, page_bytes, 0, h, 0));
        if (st != OOM_OK) {
            (void)drv.cuMemRelease(h);
            break;
        }
        tab_insert(&c->pages, a, page_bytes, h);
        st = OOM_CU(drv.cuMemSetAccess((CUdeviceptr)a, page_bytes, &access, 1));
        if (st != OOM_OK) {
            done++; /* mapped: the rollback below unmaps it */
            break;
        }
    }
    if (st != OOM_OK) {
        /* Nothing is held on failure: undo the pages this call mapped. */
        for (size_t i = 0; i < done; i++) {
            cu_entry *e = tab_exact(&c->pages, p + i * page_bytes);
            if (e)
                (void)unmap_page(c, e);
        }
    }
    return st;
}

static oom_status cu_va_unmap(void *impl, devptr p, size_t bytes, size_t page_bytes)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (!c->vmm)
        return OOM_EUNSUPPORTED;
    if (!page_request_ok(c, p, bytes, page_bytes))
        return OOM_EINVAL;
    size_t npages = bytes / page_bytes;
    /* Every page must be one handle of exactly page_bytes, as va_map made it. */
    for (size_t i = 0; i < npages; i++) {
        cu_entry *e = tab_exact(&c->pages, p + i * page_bytes);
        if (!e || e->size != page_bytes)
            return OOM_EINVAL;
    }
    /* Work queued on the pages must finish before they go away (PyTorch synchronises here too). */
    oom_status st = OOM_CUDA(cudaDeviceSynchronize());
    for (size_t i = 0; i < npages && st == OOM_OK; i++)
        st = unmap_page(c, tab_exact(&c->pages, p + i * page_bytes));
    return st;
}

static oom_status cu_host_alloc(void *impl, size_t bytes, void **out)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (bytes == 0)
        return OOM_EINVAL;
    pthread_mutex_lock(&c->host_mu);
    oom_status st = tab_reserve(&c->host, 1) ? OOM_OK : OOM_ENOMEM_HOST;
    pthread_mutex_unlock(&c->host_mu);
    if (st != OOM_OK)
        return st;
    void *p = NULL;
    st = OOM_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocDefault)); /* not under host_mu: it takes milliseconds */
    if (st == OOM_ENOMEM_DEVICE)
        st = OOM_ENOMEM_PINNED; /* pinned host memory ran out, not the device */
    if (st != OOM_OK)
        return st;
    pthread_mutex_lock(&c->host_mu);
    if (tab_reserve(&c->host, 1)) { /* another thread may have used the slot */
        tab_insert(&c->host, (devptr)(uintptr_t)p, bytes, 0);
    } else {
        (void)cudaFreeHost(p);
        st = OOM_ENOMEM_HOST;
    }
    pthread_mutex_unlock(&c->host_mu);
    if (st == OOM_OK)
        *out = p;
    return st;
}

/* Take the entry at p with the given handle out of the host table; false when there is none. */
static bool host_take(cuda_dev *c, void *p, CUmemGenericAllocationHandle kind)
{
    pthread_mutex_lock(&c->host_mu);
    cu_entry *e = tab_exact(&c->host, (devptr)(uintptr_t)p);
    bool found = e && e->handle == kind;
    if (found)
        tab_remove(&c->host, e);
    pthread_mutex_unlock(&c->host_mu);
    return found;
}

static oom_status cu_host_free(void *impl, void *p)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (!p)
        return OOM_OK;
    if (!host_take(c, p, 0))
        return OOM_EINVAL;
    return free_or_defer(c, p, DEFER_FREE_HOST);
}

static oom_status cu_host_register(void *impl, void *p, size_t bytes)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    devptr a = (devptr)(uintptr_t)p;
    if (a > UINT64_MAX - bytes)
        return OOM_EINVAL;
    pthread_mutex_lock(&c->host_mu);
    oom_status st = tab_overlaps(&c->host, a, bytes) ? OOM_EINVAL
                    : tab_reserve(&c->host, 1)       ? OOM_OK
                                                     : OOM_ENOMEM_HOST;
    if (st == OOM_OK) /* claim the range before the slow call, so no other thread registers it meanwhile */
        tab_insert(&c->host, a, bytes, 1);
    pthread_mutex_unlock(&c->host_mu);
    if (st != OOM_OK)
        return st;
    st = OOM_CUDA(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
    if (st == OOM_ENOMEM_DEVICE)
        st = OOM_ENOMEM_PINNED;
    if (st != OOM_OK)
        (void)host_take(c, p, 1);
    return st;
}

static oom_status cu_host_unregister(void *impl, void *p)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    if (!host_take(c, p, 1))
        return OOM_EINVAL;
    return free_or_defer(c, p, DEFER_UNREGISTER);
}

static void cu_host_info(void *impl, size_t *pinned_bytes, size_t *limit_bytes)
{
    cuda_dev *c = (cuda_dev *)impl;
    size_t sum = 0;
    pthread_mutex_lock(&c->host_mu);
    for (size_t i = 0; i < c->host.n; i++)
        sum += c->host.e[i].size;
    pthread_mutex_unlock(&c->host_mu);
    *pinned_bytes = sum;
    *limit_bytes = 0;
}

/* ---- streams, events and held work (host_mu held by the callers below) ---- */

/* Say it started, then spin until the host lets ticket through (held work, device.h). */
__global__ void gate_wait_kernel(volatile unsigned *gate, unsigned ticket)
{
    gate[1] = ticket;
    __threadfence_system();
    while (gate[0] < ticket)
        __nanosleep(2000);
}

static cu_stream *stream_find(cuda_dev *c, devstream id)
{
    for (size_t i = 0; i < c->nstreams; i++)
        if (c->streams[i].id == id)
            return &c->streams[i];
    return NULL;
}

/* The entry of stream id; the default stream is entered on first use. NULL: unknown stream or no memory. */
static cu_stream *stream_get(cuda_dev *c, devstream id, oom_status *st)
{
    cu_stream *x = stream_find(c, id);
    *st = OOM_OK;
    if (x || id != 0) {
        if (!x)
            *st = OOM_EINVAL;
        return x;
    }
    if (c->nstreams == c->capstreams) {
        size_t cap = c->capstreams ? c->capstreams * 2 : 8;
        cu_stream *ns = (cu_stream *)realloc(c->streams, cap * sizeof *ns);
        if (!ns) {
            *st = OOM_ENOMEM_HOST;
            return NULL;
        }
        c->streams = ns;
        c->capstreams = cap;
    }
    x = &c->streams[c->nstreams++];
    memset(x, 0, sizeof *x);
    return x;
}

/* Open every gate of x (its held work completes). */
static void gate_open_all(cu_stream *x)
{
    if (x->gate_h) {
        x->gate_h[0] = x->queued;
        __sync_synchronize();
    }
}

static void stream_release(cuda_dev *c, cu_stream *x)
{
    if (x->gate_h) /* another stream's held work may still run: then cudaFreeHost waits for it, so defer it */
        (void)free_or_defer(c, (void *)x->gate_h, DEFER_FREE_HOST);
    x->gate_h = NULL;
    x->gate_d = NULL;
}

static oom_status cu_stream_create(void *impl, devstream *out)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    cudaStream_t s = NULL;
    oom_status st = OOM_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (st != OOM_OK)
        return st;
    pthread_mutex_lock(&c->host_mu);
    if (c->nstreams == c->capstreams) {
        size_t cap = c->capstreams ? c->capstreams * 2 : 8;
        cu_stream *ns = (cu_stream *)realloc(c->streams, cap * sizeof *ns);
        if (ns) {
            c->streams = ns;
            c->capstreams = cap;
        } else {
            st = OOM_ENOMEM_HOST;
        }
    }
    if (st == OOM_OK) {
        cu_stream *x = &c->streams[c->nstreams++];
        memset(x, 0, sizeof *x);
        x->id = (devstream)(uintptr_t)s;
        x->created = true;
        *out = x->id;
    }
    pthread_mutex_unlock(&c->host_mu);
    if (st != OOM_OK)
        (void)cudaStreamDestroy(s);
    return st;
}

static oom_status cu_stream_destroy(void *impl, devstream id)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    cu_stream *x = stream_find(c, id);
    if (!x || !x->created) {
        pthread_mutex_unlock(&c->host_mu);
        return OOM_EINVAL;
    }
    cu_stream gone = *x;
    *x = c->streams[--c->nstreams];
    pthread_mutex_unlock(&c->host_mu);
    gate_open_all(&gone);
    cudaStream_t s = (cudaStream_t)(uintptr_t)gone.id;
    oom_status st = OOM_CUDA(cudaStreamSynchronize(s)); /* the gate memory must outlive the kernels */
    flush_deferred(c);
    stream_release(c, &gone);
    oom_status st2 = OOM_CUDA(cudaStreamDestroy(s));
    return st != OOM_OK ? st : st2;
}

static oom_status cu_stream_hold(void *impl, devstream id)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    oom_status st;
    cu_stream *x = stream_get(c, id, &st);
    if (x && !x->gate_h) {
        void *h = NULL, *d = NULL;
        st = OOM_CUDA(cudaHostAlloc(&h, 2 * sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable));
        if (st == OOM_OK)
            st = OOM_CUDA(cudaHostGetDevicePointer(&d, h, 0));
        if (st == OOM_OK) {
            x->gate_h = (volatile unsigned *)h;
            x->gate_d = (unsigned *)d;
            x->gate_h[0] = x->queued;
            x->gate_h[1] = x->queued;
        } else if (h) {
            (void)cudaFreeHost(h);
        }
    }
    if (x && st == OOM_OK) {
        gate_wait_kernel<<<1, 1, 0, (cudaStream_t)(uintptr_t)x->id>>>(x->gate_d, x->queued + 1);
        st = OOM_CUDA(cudaGetLastError());
        if (st == OOM_OK)
            x->queued++;
    }
    pthread_mutex_unlock(&c->host_mu);
    return st;
}

static oom_status cu_stream_synchronize(void *impl, devstream id);

/* Let n held units through. When units stay held, wait until the kernel of the first of them has started: the
 * work queued before it (events included) has then completed, as on sim; otherwise synchronise the stream. */
static oom_status cu_stream_complete(void *impl, devstream id, uint64_t n)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    oom_status st;
    cu_stream *x = stream_get(c, id, &st);
    bool all = true;
    volatile unsigned *g = NULL;
    unsigned next = 0;
    if (x && x->gate_h) {
        unsigned open = x->gate_h[0];
        unsigned to = n >= (uint64_t)(x->queued - open) ? x->queued : open + (unsigned)n;
        x->gate_h[0] = to;
        __sync_synchronize();
        all = to == x->queued;
        g = x->gate_h;
        next = to + 1;
    }
    pthread_mutex_unlock(&c->host_mu);
    if (st != OOM_OK)
        return st;
    if (all)
        return cu_stream_synchronize(impl, id);
    /* The gate page lives until the stream is destroyed, which this thread's caller does not do meanwhile. */
    for (long spins = 0; g[1] < next; spins++) {
        if (spins > 10L * 1000 * 1000) { /* ~10 s: the device is not running the stream */
            oom_error_set(OOM_ECUDA, __FILE__, __LINE__, "stream_complete: held work did not start");
            return OOM_ECUDA;
        }
        struct timespec ts = {0, 1000};
        nanosleep(&ts, NULL);
    }
    return OOM_OK;
}

static oom_status cu_stream_synchronize(void *impl, devstream id)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    oom_status st;
    cu_stream *x = stream_get(c, id, &st);
    if (x)
        gate_open_all(x);
    pthread_mutex_unlock(&c->host_mu);
    if (st == OOM_OK)
        st = OOM_CUDA(cudaStreamSynchronize((cudaStream_t)(uintptr_t)id));
    flush_deferred(c);
    return st;
}

static oom_status cu_event_record(void *impl, devstream id, devevent *out)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    oom_status st;
    cu_stream *x = stream_get(c, id, &st);
    cudaEvent_t e = NULL;
    if (x && st == OOM_OK)
        st = tab_reserve(&c->events, 1) ? OOM_OK : OOM_ENOMEM_HOST;
    if (x && st == OOM_OK)
        st = OOM_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    if (x && st == OOM_OK) {
        st = OOM_CUDA(cudaEventRecord(e, (cudaStream_t)(uintptr_t)id));
        if (st == OOM_OK) {
            tab_insert(&c->events, (devptr)(uintptr_t)e, 1, 0);
            *out = (devevent)(uintptr_t)e;
        } else {
            (void)cudaEventDestroy(e);
        }
    }
    pthread_mutex_unlock(&c->host_mu);
    return st;
}

static oom_status cu_event_query(void *impl, devevent ev, bool *done)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    bool known = tab_exact(&c->events, (devptr)ev) != NULL;
    pthread_mutex_unlock(&c->host_mu);
    if (!known)
        return OOM_EINVAL;
    cudaError_t e = cudaEventQuery((cudaEvent_t)(uintptr_t)ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return OOM_OK;
    }
    oom_status st = OOM_CUDA(e);
    if (st == OOM_OK)
        *done = true;
    return st;
}

static oom_status cu_event_destroy(void *impl, devevent ev)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    cu_entry *x = tab_exact(&c->events, (devptr)ev);
    if (x)
        tab_remove(&c->events, x);
    pthread_mutex_unlock(&c->host_mu);
    if (!x)
        return OOM_EINVAL;
    return OOM_CUDA(cudaEventDestroy((cudaEvent_t)(uintptr_t)ev));
}

static oom_status cu_copy_htod(void *impl, devptr dst, const void *src, size_t bytes)
{
    cu_use((cuda_dev *)impl);
    if (bytes == 0)
        return OOM_OK;
    return OOM_CUDA(cudaMemcpy(hptr(dst), src, bytes, cudaMemcpyHostToDevice));
}

static oom_status cu_stream_wait_event(void *impl, devstream id, devevent ev)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    oom_status st;
    cu_stream *x = stream_get(c, id, &st);
    bool known = tab_exact(&c->events, (devptr)ev) != NULL;
    pthread_mutex_unlock(&c->host_mu);
    if (!x || !known)
        return st != OOM_OK ? st : OOM_EINVAL;
    return OOM_CUDA(cudaStreamWaitEvent((cudaStream_t)(uintptr_t)id, (cudaEvent_t)(uintptr_t)ev, 0));
}

static oom_status cu_copy_htod_async(void *impl, devptr dst, const void *src, size_t bytes, devstream id)
{
    cuda_dev *c = (cuda_dev *)impl;
    cu_use(c);
    pthread_mutex_lock(&c->host_mu);
    oom_status st;
    cu_stream *x = stream_get(c, id, &st);
    pthread_mutex_unlock(&c->host_mu);
    if (!x)
        return st;
    if (bytes == 0)
        return OOM_OK;
    return OOM_CUDA(cudaMemcpyAsync(hptr(dst), src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)(uintptr_t)id));
}

static oom_status cu_copy_dtoh(void *impl, void *dst, devptr src, size_t bytes)
{
    cu_use((cuda_dev *)impl);
    if (bytes == 0)
        return OOM_OK;
    return OOM_CUDA(cudaMemcpy(dst, hptr(src), bytes, cudaMemcpyDeviceToHost));
}

static oom_status cu_copy_dtod(void *impl, devptr dst, devptr src, size_t bytes)
{
    cu_use((cuda_dev *)impl);
    if (bytes == 0)
        return OOM_OK;
    oom_status st = OOM_CUDA(cudaMemcpy(hptr(dst), hptr(src), bytes, cudaMemcpyDeviceToDevice));
    if (st == OOM_OK) /* device-to-device copies are asynchronous to the host */
        st = OOM_CUDA(cudaStreamSynchronize(0));
    return st;
}

static oom_status cu_fill(void *impl, devptr dst, int byte, size_t bytes)
{
    cu_use((cuda_dev *)impl);
    if (bytes == 0)
        return OOM_OK;
    oom_status st = OOM_CUDA(cudaMemset(hptr(dst), byte, bytes));
    if (st == OOM_OK) /* cudaMemset is asynchronous to the host */
        st = OOM_CUDA(cudaStreamSynchronize(0));
    return st;
}

static void *cu_host_view(void *impl, devptr p)
{
    (void)impl;
    (void)p;
    return NULL;
}

static void cu_addr_hint(void *impl, devptr addr, size_t bytes)
{
    (void)impl;
    (void)bytes;
    (void)addr;
}

static void cu_note_kernel_launch(void *impl) { (void)impl; }

/* Give back everything still held, then the state. Errors are ignored: nothing can be done about them. */
static void cu_close(void *impl)
{
    cuda_dev *c = (cuda_dev *)impl;
    if (!c)
        return;
    cu_use(c);
    for (size_t i = 0; i < c->nstreams; i++) /* held work completes, so that the device can drain */
        gate_open_all(&c->streams[i]);
    flush_deferred(c);
    (void)cudaDeviceSynchronize();
    for (size_t i = 0; i < c->nstreams; i++) {
        stream_release(c, &c->streams[i]);
        if (c->streams[i].created)
            (void)cudaStreamDestroy((cudaStream_t)(uintptr_t)c->streams[i].id);
    }
    for (size_t i = 0; i < c->events.n; i++)
        (void)cudaEventDestroy((cudaEvent_t)(uintptr_t)c->events.e[i].addr);
    while (c->pages.n)
        (void)unmap_page(c, &c->pages.e[c->pages.n - 1]);
    for (size_t i = 0; i < c->resv.n; i++)
        (void)drv.cuMemAddressFree((CUdeviceptr)c->resv.e[i].addr, c->resv.e[i].size);
    for (size_t i = 0; i < c->segs.n; i++)
        (void)cudaFree(hptr(c->segs.e[i].addr));
    for (size_t i = 0; i < c->host.n; i++) {
        if (c->host.e[i].handle == 1)
            (void)cudaHostUnregister(hptr(c->host.e[i].addr)); /* the memory belongs to the caller */
        else
            (void)cudaFreeHost(hptr(c->host.e[i].addr));
    }
    (void)cudaGetLastError();
    free(c->pages.e);
    free(c->resv.e);
    free(c->segs.e);
    free(c->host.e);
    free(c->events.e);
    free(c->streams);
    free(c->deferred); /* flushed above */
    pthread_mutex_destroy(&c->host_mu);
    free(c);
}

/* NVML, as PyTorch's reportProcessMemoryInfo uses it: the unversioned nvmlDeviceGetComputeRunningProcesses
 * fills nvmlProcessInfo_v1_t. Declared here so that no NVML header is needed to build. */
typedef struct nvml_proc_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvml_proc_v1;
typedef int (*pfn_nvmlInit)(void);
typedef int (*pfn_nvmlDeviceGetHandleByPciBusId)(const char *pci_bus_id, void **device);
typedef int (*pfn_nvmlDeviceGetComputeRunningProcesses)(void *device, unsigned int *count, nvml_proc_v1 *infos);
#define NVML_OK 0
#define NVML_INSUFFICIENT_SIZE 7

typedef struct nvml_api {
    bool tried, ok;
    pfn_nvmlDeviceGetHandleByPciBusId get_handle;
    pfn_nvmlDeviceGetComputeRunningProcesses procs;
} nvml_api;

static nvml_api nvml;

static bool nvml_load(void)
{
    if (nvml.tried)
        return nvml.ok;
    nvml.tried = true;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h)
        return false;
    pfn_nvmlInit init = (pfn_nvmlInit)dlsym(h, "nvmlInit_v2");
    nvml.get_handle = (pfn_nvmlDeviceGetHandleByPciBusId)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.procs = (pfn_nvmlDeviceGetComputeRunningProcesses)dlsym(h, "nvmlDeviceGetComputeRunningProcesses");
    nvml.ok = init && nvml.get_handle && nvml.procs && init() == NVML_OK;
    return nvml.ok;
}

static oom_status cu_processes(void *impl, device_proc *out, size_t cap, size_t *count)
{
    cuda_dev *c = (cuda_dev *)impl;
    if (!nvml_load())
        return OOM_EUNSUPPORTED;
    char pci[32]; /* NVML_DEVICE_PCI_BUS_ID_FMT */
    snprintf(pci, sizeof pci, "%08X:%02X:%02X.0", (unsigned)c->pci_domain, (unsigned)c->pci_bus,
             (unsigned)c->pci_device);
    void *d = NULL;
    if (nvml.get_handle(pci, &d) != NVML_OK)
        return OOM_EUNSUPPORTED;
    /* as PyTorch: start with 8 entries and grow to the count NVML asks for */
    unsigned int n = 8;
    nvml_proc_v1 *buf = NULL;
    int r = NVML_INSUFFICIENT_SIZE;
    while (r == NVML_INSUFFICIENT_SIZE) {
        nvml_proc_v1 *nb = (nvml_proc_v1 *)realloc(buf, (n ? n : 1) * sizeof *buf);
        if (!nb) {
            free(buf);
            return OOM_ENOMEM_HOST;
        }
        buf = nb;
        r = nvml.procs(d, &n, buf);
    }
    if (r != NVML_OK) {
        free(buf);
        return OOM_EUNSUPPORTED;
    }
    unsigned int self = (unsigned int)getpid();
    for (unsigned int i = 0; i < n && i < cap; i++) {
        out[i].pid = buf[i].pid;
        out[i].used_bytes = buf[i].usedGpuMemory;
        out[i].self = buf[i].pid == self;
    }
    *count = n;
    free(buf);
    return OOM_OK;
}

/* Positional, in device_ops' field order (C++17 has no designated initializers). */
static const device_ops cuda_ops = {
    "cuda",
    cu_mem_alloc,
    cu_mem_free,
    cu_mem_info,
    cu_va_reserve,
    cu_va_release,
    cu_va_map,
    cu_va_unmap,
    cu_host_alloc,
    cu_host_free,
    cu_host_register,
    cu_host_unregister,
    cu_host_info,
    cu_stream_create,
    cu_stream_destroy,
    cu_stream_hold,
    cu_stream_complete,
    cu_stream_synchronize,
    cu_event_record,
    cu_event_query,
    cu_event_destroy,
    cu_stream_wait_event,
    cu_copy_htod_async,
    cu_copy_htod,
    cu_copy_dtoh,
    cu_copy_dtod,
    cu_fill,
    cu_host_view,
    cu_addr_hint,
    cu_note_kernel_launch,
    cu_close,
    cu_processes,
    NULL, /* external: libnccl's own cudaMalloc charges the GPU */
    NULL, /* note_nccl: the driver lays out its own regions; the shadow is told */
};

int device_cuda_ordinal(const device *dev)
{
    return dev && dev->kind == DEVICE_CUDA ? ((const cuda_dev *)dev->impl)->ordinal : -1;
}

static bool cuda_touched; /* a CUDA call has run in this process */

bool device_cuda_initialised(void) { return cuda_touched; }

oom_status device_cuda_props(device_cuda_info *out)
{
    memset(out, 0, sizeof *out);
    if (!device_cuda_visible())
        return OOM_ENODEV;
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    oom_status st = OOM_CUDA(cudaGetDeviceProperties(&prop, 0));
    if (st != OOM_OK)
        return st;
    out->visible = true;
    prop.name[sizeof out->name - 1] = '\0';
    memcpy(out->name, prop.name, sizeof out->name);
    out->total_bytes = prop.totalGlobalMem;
    size_t f = 0, t = 0; /* free memory, as the runner's jobs are bounded by it (this creates the context) */
    if (cudaMemGetInfo(&f, &t) == cudaSuccess)
        out->free_bytes = f;
    else
        (void)cudaGetLastError();
    return OOM_OK;
}

int device_cuda_count(void)
{
    cuda_touched = true;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

void device_cuda_make_current(device *dev) { cu_use((const cuda_dev *)dev->impl); }

/* cudaMemcpyPeer between two GPUs, with peer access enabled first where the pair allows it (a direct NVLink or
 * PCIe copy; otherwise the driver stages it through the host). Synchronous, as cudaMemcpyPeer is. */
oom_status device_cuda_copy_peer(device *dst, devptr d, device *src, devptr s, size_t bytes)
{
    const cuda_dev *cd = (const cuda_dev *)dst->impl, *cs = (const cuda_dev *)src->impl;
    if (bytes == 0)
        return OOM_OK;
    if (cd->ordinal != cs->ordinal) {
        int can = 0;
        cu_use(cd);
        if (cudaDeviceCanAccessPeer(&can, cd->ordinal, cs->ordinal) == cudaSuccess && can) {
            cudaError_t e = cudaDeviceEnablePeerAccess(cs->ordinal, 0);
            if (e != cudaSuccess)
                (void)cudaGetLastError(); /* already enabled, or not possible: the copy still works */
        }
    }
    return OOM_CUDA(cudaMemcpyPeer(hptr(d), cd->ordinal, hptr(s), cs->ordinal, bytes));
}

bool device_cuda_visible(void)
{
    cuda_touched = true;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
}

oom_status device_cuda_open(const device_options *opt, device *dev)
{
    if (!dev)
        return OOM_EINVAL;
    int ordinal = opt ? opt->cuda_ordinal : 0;
    int n = 0;
    cuda_touched = true;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return OOM_ENODEV;
    }
    if (ordinal < 0 || ordinal >= n)
        return OOM_ENODEV;

    /* Select the device and create its primary context, which the driver VMM calls below run in. */
    oom_status st = OOM_CUDA(cudaSetDevice(ordinal));
    if (st == OOM_OK)
        cu_current = ordinal;
    if (st == OOM_OK)
        st = OOM_CUDA(cudaFree(0));
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (st == OOM_OK)
        st = OOM_CUDA(cudaGetDeviceProperties(&prop, ordinal));
    if (st != OOM_OK)
        return st;

    cuda_dev *c = (cuda_dev *)calloc(1, sizeof *c);
    if (!c)
        return OOM_ENOMEM_HOST;
    c->ordinal = ordinal;
    c->pci_domain = prop.pciDomainID;
    c->pci_bus = prop.pciBusID;
    c->pci_device = prop.pciDeviceID;
    c->gran = DEVICE_VMM_GRANULARITY;
    if (pthread_mutex_init(&c->host_mu, NULL) != 0) {
        free(c);
        return OOM_ENOMEM_HOST;
    }

    /* VMM needs the driver entry points, the device attribute, and a granularity that divides ours. */
    if (drv_load()) {
        CUdevice d = 0;
        int supported = 0;
        if (OOM_CU(drv.cuDeviceGet(&d, ordinal)) == OOM_OK &&
            OOM_CU(drv.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                            d)) == OOM_OK &&
            supported) {
            CUmemAllocationProp ap;
            memset(&ap, 0, sizeof ap);
            ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            ap.location.id = ordinal;
            size_t g = 0;
            if (OOM_CU(drv.cuMemGetAllocationGranularity(&g, &ap, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) == OOM_OK &&
                g > 0 && DEVICE_VMM_GRANULARITY % g == 0) {
                c->vmm = true;
                c->gran = g;
            }
        }
    }

    dev->ops = &cuda_ops;
    dev->impl = c;
    dev->kind = DEVICE_CUDA;
    /* The name is at most 255 chars; keep what fits (the H100's name does). */
    prop.name[sizeof dev->name - 1] = '\0';
    memcpy(dev->name, prop.name, sizeof dev->name);
    dev->total_bytes = prop.totalGlobalMem;
    dev->sm_count = prop.multiProcessorCount;
    dev->max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    dev->warp_size = prop.warpSize;
    return OOM_OK;
}
