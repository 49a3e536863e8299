/* device_cuda.cu - the cuda backend: cudaMalloc/cudaFree, the driver's VMM API, cudaHostAlloc.
 *
 * Written as CUDA C (C-like host code). The driver functions (cuMem*, cuDeviceGetAttribute, cuGetErrorName)
 * are looked up at run time through cudaGetDriverEntryPointByVersion, so the binary links only the static
 * runtime and still starts on machines without libcuda (device_cuda_visible() is then false).
 * Every allocation is recorded in a sorted table so that bad frees, double maps and unmaps of unmapped pages
 * are refused with OOM_EINVAL before they reach CUDA, as on the sim backend.
 * The backend assumes one host thread drives it (the primary context is made current in device_cuda_open).
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct cuda_dev {
    int ordinal;
    bool vmm;    /* the driver API was found and the device supports VMM */
    size_t gran; /* cuMemGetAllocationGranularity (minimum) */
    cu_table segs, resv, pages, host;
} cuda_dev;

static void *hptr(devptr p) { return (void *)(uintptr_t)p; }

static oom_status cu_mem_alloc(void *impl, size_t bytes, devptr *out)
{
    cuda_dev *c = (cuda_dev *)impl;
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
    cu_entry *e = tab_exact(&c->segs, p);
    if (!e || e->size != bytes)
        return OOM_EINVAL;
    oom_status st = OOM_CUDA(cudaFree(hptr(p)));
    if (st == OOM_OK)
        tab_remove(&c->segs, e);
    return st;
}

static oom_status cu_mem_info(void *impl, size_t *free_bytes, size_t *total_bytes)
{
    (void)impl;
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
    if (bytes == 0)
        return OOM_EINVAL;
    if (!tab_reserve(&c->host, 1))
        return OOM_ENOMEM_HOST;
    void *p = NULL;
    oom_status st = OOM_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    if (st == OOM_ENOMEM_DEVICE)
        st = OOM_ENOMEM_HOST; /* pinned host memory ran out, not the device */
    if (st != OOM_OK)
        return st;
    tab_insert(&c->host, (devptr)(uintptr_t)p, bytes, 0);
    *out = p;
    return OOM_OK;
}

static oom_status cu_host_free(void *impl, void *p)
{
    cuda_dev *c = (cuda_dev *)impl;
    if (!p)
        return OOM_OK;
    cu_entry *e = tab_exact(&c->host, (devptr)(uintptr_t)p);
    if (!e)
        return OOM_EINVAL;
    oom_status st = OOM_CUDA(cudaFreeHost(p));
    if (st == OOM_OK)
        tab_remove(&c->host, e);
    return st;
}

static oom_status cu_copy_htod(void *impl, devptr dst, const void *src, size_t bytes)
{
    (void)impl;
    if (bytes == 0)
        return OOM_OK;
    return OOM_CUDA(cudaMemcpy(hptr(dst), src, bytes, cudaMemcpyHostToDevice));
}

static oom_status cu_copy_dtoh(void *impl, void *dst, devptr src, size_t bytes)
{
    (void)impl;
    if (bytes == 0)
        return OOM_OK;
    return OOM_CUDA(cudaMemcpy(dst, hptr(src), bytes, cudaMemcpyDeviceToHost));
}

static oom_status cu_copy_dtod(void *impl, devptr dst, devptr src, size_t bytes)
{
    (void)impl;
    if (bytes == 0)
        return OOM_OK;
    oom_status st = OOM_CUDA(cudaMemcpy(hptr(dst), hptr(src), bytes, cudaMemcpyDeviceToDevice));
    if (st == OOM_OK) /* device-to-device copies are asynchronous to the host */
        st = OOM_CUDA(cudaStreamSynchronize(0));
    return st;
}

static oom_status cu_fill(void *impl, devptr dst, int byte, size_t bytes)
{
    (void)impl;
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
    if (c->pages.n || c->resv.n)
        (void)cudaDeviceSynchronize();
    while (c->pages.n)
        (void)unmap_page(c, &c->pages.e[c->pages.n - 1]);
    for (size_t i = 0; i < c->resv.n; i++)
        (void)drv.cuMemAddressFree((CUdeviceptr)c->resv.e[i].addr, c->resv.e[i].size);
    for (size_t i = 0; i < c->segs.n; i++)
        (void)cudaFree(hptr(c->segs.e[i].addr));
    for (size_t i = 0; i < c->host.n; i++)
        (void)cudaFreeHost(hptr(c->host.e[i].addr));
    (void)cudaGetLastError();
    free(c->pages.e);
    free(c->resv.e);
    free(c->segs.e);
    free(c->host.e);
    free(c);
}

static const device_ops cuda_ops = {
    "cuda",         cu_mem_alloc,  cu_mem_free,  cu_mem_info,  cu_va_reserve, cu_va_release,
    cu_va_map,      cu_va_unmap,   cu_host_alloc, cu_host_free, cu_copy_htod,  cu_copy_dtoh,
    cu_copy_dtod,   cu_fill,       cu_host_view, cu_addr_hint, cu_note_kernel_launch, cu_close,
};

bool device_cuda_visible(void)
{
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
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return OOM_ENODEV;
    }
    if (ordinal < 0 || ordinal >= n)
        return OOM_ENODEV;

    /* Select the device and create its primary context, which the driver VMM calls below run in. */
    oom_status st = OOM_CUDA(cudaSetDevice(ordinal));
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
    c->gran = DEVICE_VMM_GRANULARITY;

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
    return OOM_OK;
}
