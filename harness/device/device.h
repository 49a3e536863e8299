/* device.h - the device backend interface: where segments, pages and pinned host memory come from.
 *
 * Two backends sit behind it:
 *   cuda  a real GPU: cudaMalloc/cudaFree, the driver's VMM API (cuMemAddressReserve, cuMemCreate, cuMemMap,
 *         cuMemSetAccess, cuMemUnmap, cuMemRelease) for expandable segments, cudaHostAlloc/cudaFreeHost.
 *   sim   a simulated device with a fixed capacity. It hands out address ranges the way the driver does
 *         (the lowest free range first) and backs them with host RAM, so CPU kernels compute real values;
 *         in dry-run mode it keeps no backing memory (accounting only).
 * The caching allocator (cachealloc.h) is the only caller of the segment and VMM calls. Both backends report
 * failures as oom_status values: running out of device memory is OOM_ENOMEM_DEVICE, never an abort.
 *
 * Fault injection lives here, in front of every backend: device_fault_arm(dev, n, persistent) makes the n-th
 * following device allocation (mem_alloc or va_map, counted from 1) fail with OOM_ENOMEM_DEVICE, and with
 * persistent=true every one after it too.
 *
 * CUDA is never initialised before a fork: device_open() of the cuda backend is the first CUDA call.
 */
#ifndef OOMLAB_DEVICE_H
#define OOMLAB_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

typedef uint64_t devptr; /* a device address; 0 is "no address" */

typedef enum device_kind {
    DEVICE_AUTO = 0, /* cuda when built in and a GPU is visible, else sim */
    DEVICE_SIM,      /* simulated device */
    DEVICE_CUDA,     /* real GPU */
} device_kind;

/* Options for device_open(). Zero-initialise, then set what matters. */
typedef struct device_options {
    device_kind kind;
    size_t sim_capacity_bytes; /* sim: total device memory; 0 = DEVICE_SIM_DEFAULT_CAPACITY */
    bool sim_dry_run;          /* sim: accounting only, no host backing */
    int cuda_ordinal;          /* cuda: device index */
} device_options;

/* An H100 80GB HBM3's totalGlobalMem, measured with PyTorch 2.11 (85017493504 B): sim's default capacity. */
#define DEVICE_SIM_DEFAULT_CAPACITY ((size_t)85017493504ULL)
/* VMM granularity on both backends (the H100 reports 2 MiB). */
#define DEVICE_VMM_GRANULARITY ((size_t)2 << 20)

/* Backend operations. impl is the backend's private state. Every op returns OOM_OK or a failure; on failure
 * no out-parameter is written and nothing is held. */
typedef struct device_ops {
    const char *name; /* "cuda" or "sim" */
    /* cudaMalloc: bytes > 0; the address is aligned to DEVICE_VMM_GRANULARITY. */
    oom_status (*mem_alloc)(void *impl, size_t bytes, devptr *out);
    oom_status (*mem_free)(void *impl, devptr p, size_t bytes);
    /* cudaMemGetInfo */
    oom_status (*mem_info)(void *impl, size_t *free_bytes, size_t *total_bytes);
    /* cuMemAddressReserve: a virtual range with no physical memory. */
    oom_status (*va_reserve)(void *impl, size_t bytes, devptr *out);
    oom_status (*va_release)(void *impl, devptr p, size_t bytes);
    /* Back [p, p+bytes) with bytes/page_bytes physical handles (one cuMemCreate each), map them and make them
     * read-write (cuMemMap + cuMemSetAccess). p and bytes are multiples of page_bytes. */
    oom_status (*va_map)(void *impl, devptr p, size_t bytes, size_t page_bytes);
    /* Unmap [p, p+bytes) and release its handles (cuMemUnmap + cuMemRelease). Same alignment as va_map. */
    oom_status (*va_unmap)(void *impl, devptr p, size_t bytes, size_t page_bytes);
    /* cudaHostAlloc(cudaHostAllocDefault) / cudaFreeHost */
    oom_status (*host_alloc)(void *impl, size_t bytes, void **out);
    oom_status (*host_free)(void *impl, void *p);
    /* Copies and fill; synchronous. */
    oom_status (*copy_htod)(void *impl, devptr dst, const void *src, size_t bytes);
    oom_status (*copy_dtoh)(void *impl, void *dst, devptr src, size_t bytes);
    oom_status (*copy_dtod)(void *impl, devptr dst, devptr src, size_t bytes);
    oom_status (*fill)(void *impl, devptr dst, int byte, size_t bytes);
    /* sim: a host pointer to the backing bytes of p (NULL in dry-run or when unmapped); cuda: NULL. */
    void *(*host_view)(void *impl, devptr p);
    /* sim: put the next mem_alloc at addr if it asks for exactly bytes and that range is free (trace replay
     * keeps PyTorch's addresses this way); consumed by the next mem_alloc either way; cuda: ignored. */
    void (*addr_hint)(void *impl, devptr addr, size_t bytes);
    /* A kernel is launched (the first call matters): the driver gives back the address range it set aside at
     * context creation, so later segments can take it (sim; cuda: nothing to do, the driver does it). */
    void (*note_kernel_launch)(void *impl);
    void (*close)(void *impl);
} device_ops;

/* The device handle. Fields are read-only for callers. */
typedef struct device {
    const device_ops *ops;
    void *impl;
    device_kind kind;
    char name[96];       /* "NVIDIA H100 80GB HBM3" or "sim" */
    size_t total_bytes;  /* totalGlobalMem (cuda) or the sim capacity */
    /* fault injection */
    uint64_t alloc_calls;   /* device allocations attempted so far (mem_alloc + va_map) */
    uint64_t fault_at;      /* fail when alloc_calls reaches this; 0 = disarmed */
    bool fault_persistent;  /* keep failing after fault_at */
    uint64_t faults_fired;  /* how many allocations the injector failed */
} device;

/* Open a backend. DEVICE_AUTO never fails for lack of a GPU: it falls back to sim. Returns OOM_ENODEV when
 * cuda is asked for but not built in or no GPU is visible, OOM_ENOMEM_HOST when the handle cannot be made. */
oom_status device_open(const device_options *opt, device **out);
void device_close(device *dev);

/* True when the cuda backend is compiled into this binary. */
bool device_cuda_built(void);
/* Parse "auto", "cuda" or "sim"; OOM_EINVAL otherwise. */
oom_status device_kind_parse(const char *s, device_kind *out);
const char *device_kind_str(device_kind k);

/* Fault injection (see the file comment). nth = 0 disarms. */
void device_fault_arm(device *dev, uint64_t nth, bool persistent);

/* Wrappers: the only way callers reach the ops; they apply fault injection to mem_alloc and va_map. */
oom_status device_mem_alloc(device *dev, size_t bytes, devptr *out);
oom_status device_mem_free(device *dev, devptr p, size_t bytes);
oom_status device_mem_info(device *dev, size_t *free_bytes, size_t *total_bytes);
oom_status device_va_reserve(device *dev, size_t bytes, devptr *out);
oom_status device_va_release(device *dev, devptr p, size_t bytes);
oom_status device_va_map(device *dev, devptr p, size_t bytes, size_t page_bytes);
oom_status device_va_unmap(device *dev, devptr p, size_t bytes, size_t page_bytes);
oom_status device_host_alloc(device *dev, size_t bytes, void **out);
oom_status device_host_free(device *dev, void *p);
oom_status device_copy_htod(device *dev, devptr dst, const void *src, size_t bytes);
oom_status device_copy_dtoh(device *dev, void *dst, devptr src, size_t bytes);
oom_status device_copy_dtod(device *dev, devptr dst, devptr src, size_t bytes);
oom_status device_fill(device *dev, devptr dst, int byte, size_t bytes);
void *device_host_view(device *dev, devptr p);
void device_addr_hint(device *dev, devptr addr, size_t bytes);
void device_note_kernel_launch(device *dev);

/* Backend constructors (device.c picks one). */
oom_status device_sim_open(const device_options *opt, device *dev);
oom_status device_cuda_open(const device_options *opt, device *dev); /* OOM_ENODEV when not built in */
bool device_cuda_visible(void);                                       /* a GPU is there (cuda built in) */

OOM_END_DECLS

#endif
