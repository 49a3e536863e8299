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
 * persistent=true every one after it too. A fault plan (device_fault_plan, below) does the same over several devices
 * at once and also for pinned host allocations: faultsweep's injected faults.
 *
 * Pinned host memory, streams and events (for the pinned host allocator, alloc/hostalloc.h):
 *   host_alloc/host_free     cudaHostAlloc / cudaFreeHost;
 *   host_register/unregister cudaHostRegister / cudaHostUnregister of memory the caller allocated;
 *   host_info                the pinned bytes held through this device and the pinned limit.
 * sim counts pinned bytes (whole 4 KiB pages) against a budget, device_options.sim_pinned_bytes, by default the
 * host's RAM (physical pages, capped by the cgroup's memory.max where one is set: a container's limit); a
 * request past it fails with OOM_ENOMEM_PINNED, as cudaHostAlloc does when the kernel cannot pin more.
 *   Streams: 0 is the default stream; stream_create makes another (cudaStreamNonBlocking).
 *   Events: event_record creates an event and records it on a stream (cudaEventCreateWithFlags(DisableTiming) +
 *   cudaEventRecord); event_query says whether the work queued on the stream before it has completed.
 *   Held work: stream_hold queues one unit of work on a stream that completes only when stream_complete lets
 *   it (in queue order) or stream_synchronize completes everything. It is how a test or a model says "a
 *   non_blocking copy or a kernel is still running": sim keeps two counters per stream, queued and completed,
 *   and an event recorded when `queued` was q is complete once `completed` >= q (at once when nothing is held);
 *   cuda launches a one-thread kernel that waits on a counter in mapped pinned memory, so real cudaEvents
 *   behave the same. On cuda, a synchronous copy on a stream whose work is held waits for it, as on any GPU.
 * The host, stream and event ops are thread-safe on both backends (a pin-memory thread calls them); every other
 * op belongs to one thread.
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

typedef uint64_t devptr;    /* a device address; 0 is "no address" */
typedef uint64_t devstream; /* a stream; 0 is the default stream */
typedef uint64_t devevent;  /* an event; 0 is "no event" */

typedef enum device_kind {
    DEVICE_AUTO = 0, /* cuda when built in and a GPU is visible, else sim */
    DEVICE_SIM,      /* simulated device */
    DEVICE_CUDA,     /* real GPU */
} device_kind;

/* Options for device_open(). Zero-initialise, then set what matters. */
typedef struct device_options {
    device_kind kind;
    size_t sim_capacity_bytes; /* sim: total device memory; 0 = DEVICE_SIM_DEFAULT_CAPACITY */
    size_t sim_context_bytes;  /* sim: the CUDA context's bytes, charged from the start (oomlab predict's GPU); 0:
                                * the measured H100's at the default capacity, none at another */
    bool sim_dry_run;          /* sim: accounting only, no host backing */
    int cuda_ordinal;          /* cuda: device index */
    size_t sim_pinned_bytes;   /* sim: pinned host memory budget; 0 = device_host_ram_bytes() */
    bool cuda_real_order;      /* cuda: order blocks by the driver's own addresses, not sim's model (below) */
    bool sim_model_order;      /* sim: run the model beside it too (tests: segments placed elsewhere by addr_hint) */
    uint64_t sim_layout_seed;  /* sim: 0, blocks ordered by the model's addresses; else by another layout's order,
                                * the same for the same seed (device_order_key) */
} device_options;

/* An H100 80GB HBM3's totalGlobalMem, measured with PyTorch 2.11 (85017493504 B): sim's default capacity. */
#define DEVICE_SIM_DEFAULT_CAPACITY ((size_t)85017493504ULL)
/* What a CUDA context holds on that H100 (tests/data/twins/fidelity.torch.json, PyTorch 2.11, driver 580):
 * total - free of cudaMemGetInfo right after torch.cuda.init(), before any tensor, and NVML's usedGpuMemory for
 * the process at that point. The sim of the default capacity charges the first (a request cannot use it, and
 * "of which X is free" leaves it out) and reports the second, plus what it mapped, as the process's memory in
 * use. device_options.sim_context_bytes replaces it (a sim of another capacity has none by default). */
#define DEVICE_SIM_CONTEXT_BYTES ((size_t)552402944ULL)      /* 526.81 MiB */
#define DEVICE_SIM_CONTEXT_NVML_BYTES ((size_t)543162368ULL) /* 518.00 MiB */

/* One compute process on the GPU, as NVML lists it (nvmlDeviceGetComputeRunningProcesses). */
typedef struct device_proc {
    unsigned int pid;
    unsigned long long used_bytes; /* usedGpuMemory */
    bool self;                     /* pid is this process's getpid() */
} device_proc;
#define DEVICE_MAX_PROCS 64

/* What NCCL did in the process (device_note_nccl). */
typedef enum device_nccl_event {
    DEVICE_NCCL_INIT,       /* a communicator spanning GPUs was created (before any segment) */
    DEVICE_NCCL_COLLECTIVE, /* a collective ran (the first one matters) */
} device_nccl_event;
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
    /* cudaHostAlloc(cudaHostAllocDefault) / cudaFreeHost. Out of pinned memory: OOM_ENOMEM_PINNED. */
    oom_status (*host_alloc)(void *impl, size_t bytes, void **out);
    oom_status (*host_free)(void *impl, void *p);
    /* cudaHostRegister(cudaHostRegisterDefault) of [p, p+bytes), memory the caller owns; cudaHostUnregister(p)
     * of a pointer registered here. A range overlapping a registered one is OOM_EINVAL. */
    oom_status (*host_register)(void *impl, void *p, size_t bytes);
    oom_status (*host_unregister)(void *impl, void *p);
    /* Pinned bytes held through this device (host_alloc + host_register, whole pages on sim) and the limit
     * (sim: its budget; cuda: 0, not known). */
    void (*host_info)(void *impl, size_t *pinned_bytes, size_t *limit_bytes);
    /* Streams, events and held work (see the file comment). */
    oom_status (*stream_create)(void *impl, devstream *out);
    oom_status (*stream_destroy)(void *impl, devstream s); /* completes its held work first */
    oom_status (*stream_hold)(void *impl, devstream s);
    oom_status (*stream_complete)(void *impl, devstream s, uint64_t n); /* n > held: all of it */
    oom_status (*stream_synchronize)(void *impl, devstream s);
    oom_status (*event_record)(void *impl, devstream s, devevent *out);
    oom_status (*event_query)(void *impl, devevent e, bool *done);
    oom_status (*event_destroy)(void *impl, devevent e);
    /* cudaStreamWaitEvent: work queued on s from now on starts after the work before e. sim: its work runs at
     * once (or is held in queue order), so there is nothing to wait for; the event must exist. */
    oom_status (*stream_wait_event)(void *impl, devstream s, devevent e);
    /* cudaMemcpyAsync host to device on stream s (src pinned, or the copy is synchronous on cuda); sim: the copy
     * is done at once. The caller keeps src alive until an event recorded after it completes. */
    oom_status (*copy_htod_async)(void *impl, devptr dst, const void *src, size_t bytes, devstream s);
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
    /* The compute processes on the GPU and the memory each holds, as NVML reports them (PyTorch's OOM message
     * lists them): up to cap entries in out, the number listed in *count. cuda: NVML (libnvidia-ml.so.1, loaded
     * when first asked); sim of the default capacity: this process alone, its physical bytes plus
     * DEVICE_SIM_CONTEXT_NVML_BYTES. OOM_EUNSUPPORTED when there is nothing to report (no NVML; a sim of
     * another capacity): PyTorch then leaves the line out. */
    oom_status (*processes)(void *impl, device_proc *out, size_t cap, size_t *count);
    /* Memory another library takes on the device outside the caching allocator (NCCL's buffers, which libnccl
     * cudaMallocs itself: devcomm.h), charged (charge) or given back. sim: charged against its capacity and
     * counted in the process's memory (cudaMemGetInfo's free and NVML's line move) but kept out of its address
     * model, as the driver's placement of libnccl's memory is out of sight of oomlab's model on cuda too;
     * OOM_ENOMEM_DEVICE when the capacity has no room. NULL (cuda): the library's own cudaMalloc did it. */
    oom_status (*external)(void *impl, size_t bytes, bool charge);
    /* NCCL in this process (device_note_nccl): sim lays its regions out as the driver does in a process that
     * initialised NCCL (sim.c's file comment). NULL (cuda): the real driver does it; the shadow is told. */
    void (*note_nccl)(void *impl, device_nccl_event ev);
} device_ops;

/* The device handle. Fields are read-only for callers. */
typedef struct device {
    const device_ops *ops;
    void *impl;
    device_kind kind;
    char name[96];       /* "NVIDIA H100 80GB HBM3" or "sim" */
    size_t total_bytes;  /* totalGlobalMem (cuda) or the sim capacity */
    /* cudaDeviceProp's multiProcessorCount, maxThreadsPerMultiProcessor, warpSize (ATen's reduction config reads
     * them); sim: an H100's, 132, 2048, 32 */
    int sm_count, max_threads_per_sm, warp_size;
    /* fault injection */
    uint64_t alloc_calls;   /* device allocations attempted so far (mem_alloc + va_map) */
    uint64_t fault_at;      /* fail when alloc_calls reaches this; 0 = disarmed */
    bool fault_persistent;  /* keep failing after fault_at */
    uint64_t faults_fired;  /* how many allocations the injector failed */
    /* pinned cap (device_pinned_cap_set): 0 = none */
    size_t pinned_cap;
    /* cuda: sim's model of the driver's placement, run beside the real driver (see device_order_key). shadow is
     * a dry-run sim of the default capacity that mirrors every mem_alloc/free, va_reserve/release/map/unmap and
     * the first kernel launch; ranges maps each live real range to the shadow's, sorted by real base.
     * Invariant: ranges holds exactly the live segments and reservations, none overlapping. NULL/0 on sim and
     * with cuda_real_order. */
    struct device *shadow;
    struct device_range *ranges;
    size_t nranges, capranges;
    bool shadow_lost; /* the model refused a range the driver gave: keys from then on are real addresses */
    uint64_t layout_seed; /* sim: device_options.sim_layout_seed */
    struct device_fault_plan *plan; /* shared fault plan (device_fault_plan_attach); NULL: none */
} device;

/* Open a backend. DEVICE_AUTO never fails for lack of a GPU: it falls back to sim. Returns OOM_ENODEV when
 * cuda is asked for but not built in or no GPU is visible, OOM_ENOMEM_HOST when the handle cannot be made. */
oom_status device_open(const device_options *opt, device **out);
/* Close the backend and free the handle. NULL: no-op. Cannot fail. */
void device_close(device *dev);

/* True when the cuda backend is compiled into this binary. */
bool device_cuda_built(void);
/* The GPUs the cuda backend sees (cudaGetDeviceCount; 0 without the backend or a GPU). Initialises CUDA: never
 * in a process that forks afterwards. */
int device_cuda_count(void);
/* Make dev's GPU current on this thread before launching a kernel on its memory (cudaSetDevice; remembered, so a
 * no-op on one GPU). Nothing on sim. */
void device_make_current(device *dev);
/* Copy bytes from src's memory at s to dst's at d: cudaMemcpyPeer when both are cuda devices (peer access
 * enabled where the GPUs allow it), OOM_EUNSUPPORTED otherwise (the caller stages the copy through the host). */
oom_status device_copy_peer(device *dst, devptr d, device *src, devptr s, size_t bytes);
/* Parse "auto", "cuda" or "sim"; OOM_EINVAL otherwise. */
oom_status device_kind_parse(const char *s, device_kind *out);
const char *device_kind_str(device_kind k);

/* The address by which the caching allocator orders blocks of one size (the ptr of PyTorch's
 * BlockComparatorSize). PyTorch breaks best-fit ties by address, so which of two equal free blocks is reused
 * depends on where the driver put their segments. On sim that is p itself (sim places segments as the driver does
 * in PyTorch's process). On cuda the driver places segments differently in oomlab's process than in PyTorch's
 * (oomlab loads no cuBLAS, cuDNN or cuRAND, whose allocations move the driver's regions), so the key is where sim's
 * model would have put p's segment, plus p's offset in it: the cuda backend then reuses the blocks PyTorch reuses,
 * and its counters equal sim's. With device_options.cuda_real_order, or if the model ever refuses a range
 * (reported once on stderr), it is p. On sim with a layout seed (device_options.sim_layout_seed) it is p under a
 * seeded order of the ranges: the 2 MiB granule of p hashed with the seed, then p (ranges start on granules and
 * addresses stay below 2^47, so a block's key is its range's plus its offset, as for p). That is how the counters
 * would go had the driver put the same segments in another order: where it puts them depends on the driver's own
 * allocations (kernels' modules, libraries' handles), which no model sees (docs/parity.md, "Where the driver puts
 * segments"). */
devptr device_order_key(const device *dev, devptr p);
/* True when device_order_key uses sim's model (cuda, not cuda_real_order, the model never refused a range). */
bool device_orders_by_model(const device *dev);

/* Fault injection (see the file comment). nth = 0 disarms. */
void device_fault_arm(device *dev, uint64_t nth, bool persistent);

/* A fault plan shared by the devices attached to it (a variant's devices: `oomlab faultsweep`). Allocation
 * attempts are counted over all of them, in call order: device allocations (mem_alloc: cudaMalloc; va_map: an
 * expandable segment's cuMemCreate + cuMemMap) in device_calls, pinned host allocations (host_alloc:
 * cudaHostAlloc; host_register: cudaHostRegister) in host_calls. The device_at-th device allocation and every
 * later one fail with OOM_ENOMEM_DEVICE before reaching the backend, as cudaMalloc does on a full device; the
 * host_at-th pinned allocation and every later one fail with OOM_ENOMEM_PINNED, as cudaHostAlloc does when
 * nothing more can be pinned. 0 = never. Frees, reserves and everything else go through. The fired counters
 * say whether the fault was reached. Host calls may come from a pin-memory thread: host counters are atomic.
 * Invariant: *_fired > 0 exactly when *_at != 0 and *_calls >= *_at. */
typedef struct device_fault_plan {
    uint64_t device_at, host_at;
    uint64_t device_calls, device_fired;
    uint64_t host_calls, host_fired; /* atomic (__atomic builtins): nvcc compiles this header as C++ */
} device_fault_plan;

/* Count dev's allocations in plan (borrowed; it must outlive the device's use) and fail them as it says. The
 * plan replaces the device's own device_fault_arm counters for device allocations. */
void device_fault_plan_attach(device *dev, device_fault_plan *plan);

/* A GPU as seen without initialising CUDA in this process: device_cuda_visible() and cudaGetDeviceProperties
 * run in a child process (a process that has initialised CUDA cannot fork a child that uses CUDA, and the runner
 * runs each variant in a fork). Learned once per process. */
typedef struct device_cuda_info {
    bool visible;
    char name[96];
    size_t total_bytes;
    size_t free_bytes; /* cudaMemGetInfo's free when probed (the runner's --jobs bound); 0: not known */
} device_cuda_info;
const device_cuda_info *device_cuda_probe(void);
/* Whether this process has initialised CUDA (device_cuda_visible or a cuda device_open ran here). */
bool device_cuda_initialised(void);

/* A cap on pinned host memory, in front of every backend, as a container's memlock limit or its RAM would be:
 * host_alloc and host_register fail with OOM_ENOMEM_PINNED when the pinned bytes held through this device (whole
 * 4 KiB pages) would pass cap_bytes. 0 removes it. On sim it applies beside sim_pinned_bytes; on cuda it is the
 * only limit oomlab can set (a real GPU's host pins what its RAM allows). Set it before a pinning thread runs. */
void device_pinned_cap_set(device *dev, size_t cap_bytes);

/* Wrappers: the only way callers reach the ops; they apply fault injection to mem_alloc and va_map (and the fault
 * plan's host_at and the pinned cap to host_alloc and host_register). On failure each returns its op's status
 * (device_ops above says which) with nothing held, or OOM_EINVAL for a NULL device or argument; the reason, where
 * the backend, the injector or the cap gives one, is in the calling thread's last-error record (status.h), so a
 * pin thread's failure never overwrites the main thread's. The void ones cannot fail. */
oom_status device_mem_alloc(device *dev, size_t bytes, devptr *out);
oom_status device_mem_free(device *dev, devptr p, size_t bytes);
oom_status device_mem_info(device *dev, size_t *free_bytes, size_t *total_bytes);
oom_status device_va_reserve(device *dev, size_t bytes, devptr *out);
oom_status device_va_release(device *dev, devptr p, size_t bytes);
oom_status device_va_map(device *dev, devptr p, size_t bytes, size_t page_bytes);
oom_status device_va_unmap(device *dev, devptr p, size_t bytes, size_t page_bytes);
oom_status device_host_alloc(device *dev, size_t bytes, void **out);
oom_status device_host_free(device *dev, void *p);
oom_status device_host_register(device *dev, void *p, size_t bytes);
oom_status device_host_unregister(device *dev, void *p);
void device_host_info(device *dev, size_t *pinned_bytes, size_t *limit_bytes);
oom_status device_stream_create(device *dev, devstream *out);
oom_status device_stream_destroy(device *dev, devstream s);
oom_status device_stream_hold(device *dev, devstream s);
oom_status device_stream_wait_event(device *dev, devstream s, devevent e);
oom_status device_copy_htod_async(device *dev, devptr dst, const void *src, size_t bytes, devstream s);
oom_status device_stream_complete(device *dev, devstream s, uint64_t n);
oom_status device_stream_synchronize(device *dev, devstream s);
oom_status device_event_record(device *dev, devstream s, devevent *out);
oom_status device_event_query(device *dev, devevent e, bool *done);
oom_status device_event_destroy(device *dev, devevent e);
oom_status device_copy_htod(device *dev, devptr dst, const void *src, size_t bytes);
oom_status device_copy_dtoh(device *dev, void *dst, devptr src, size_t bytes);
oom_status device_copy_dtod(device *dev, devptr dst, devptr src, size_t bytes);
oom_status device_fill(device *dev, devptr dst, int byte, size_t bytes);
void *device_host_view(device *dev, devptr p);
oom_status device_processes(device *dev, device_proc *out, size_t cap, size_t *count);
void device_addr_hint(device *dev, devptr addr, size_t bytes);
void device_note_kernel_launch(device *dev);
/* The process has initialised NCCL on dev (DEVICE_NCCL_INIT, a communicator spanning GPUs: devcomm_open), or
 * NCCL's first collective on dev ran (DEVICE_NCCL_COLLECTIVE): sim's model of the driver (on cuda, the shadow's)
 * places segments as in such a process from then on. INIT counts only before the device's first segment. */
void device_note_nccl(device *dev, device_nccl_event ev);
/* device_ops.external: charge bytes another library holds on the device, or release them (see device_ops). */
oom_status device_external_charge(device *dev, size_t bytes);
void device_external_release(device *dev, size_t bytes);

/* The host's RAM: physical pages x page size, capped by the cgroup's memory.max when one is set (sim's default
 * pinned budget). */
size_t device_host_ram_bytes(void);

/* Backend constructors (device.c picks one). */
oom_status device_sim_open(const device_options *opt, device *dev);
oom_status device_cuda_open(const device_options *opt, device *dev); /* OOM_ENODEV when not built in */
void device_cuda_make_current(device *dev);
oom_status device_cuda_copy_peer(device *dst, devptr d, device *src, devptr s, size_t bytes);
bool device_cuda_visible(void);                                       /* a GPU is there (cuda built in) */
/* Ordinal 0's name and total, and whether a GPU is visible, asked in this process (device_cuda_probe's child). */
oom_status device_cuda_props(device_cuda_info *out);
/* The GPU ordinal of a cuda device (-1 on sim). */
int device_cuda_ordinal(const device *dev);

OOM_END_DECLS

#endif
