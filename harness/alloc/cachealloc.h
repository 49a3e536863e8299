/* cachealloc.h - PyTorch 2.11's CUDA caching allocator, for one device and its streams.
 *
 * It behaves like c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator): the same request rounding
 * (512 B quantum, roundup_power2_divisions), small (<= 1 MiB) and large pools, segment sizes (2 MiB, 20 MiB, or
 * the request rounded up to 2 MiB), best fit by (size, address), the split and merge rules, max_split_size and
 * max_non_split_rounding, the malloc slow path (free-block search, garbage collection, new segment,
 * release_available_cached_blocks, release of all cached blocks and one retry, OOM), the per-process budget,
 * empty_cache, expandable segments, the statistics of memory_stats(), and the OOM message.
 * ../shared/reference/pytorch-allocator.md is the behavioural spec; comments cite PyTorch's function names.
 *
 * Every byte oomlab reports comes from these counters. A failed allocation is a normal result:
 * cachealloc_malloc returns OOM_ENOMEM_DEVICE, records the OOM (stats, trace, message) and never aborts.
 */
#ifndef OOMLAB_CACHEALLOC_H
#define OOMLAB_CACHEALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "core/compat.h"
#include "device/device.h"
#include "alloc/memstats.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* PyTorch's constants (unchanged 2.4-2.11). */
#define CA_MIN_BLOCK_SIZE ((size_t)512)       /* kMinBlockSize: rounding quantum */
#define CA_SMALL_SIZE ((size_t)1048576)       /* kSmallSize: largest small-pool request */
#define CA_SMALL_BUFFER ((size_t)2097152)     /* kSmallBuffer: small segment and small page */
#define CA_MIN_LARGE_ALLOC ((size_t)10485760) /* kMinLargeAlloc: from here segments = size rounded to 2 MiB */
#define CA_ROUND_LARGE ((size_t)2097152)      /* kRoundLarge */

typedef struct cachealloc cachealloc;

/* Trace actions, as in PyTorch's TraceEntry and _snapshot()'s device_traces. */
typedef enum ca_action {
    CA_ALLOC = 0,
    CA_FREE_REQUESTED,
    CA_FREE_COMPLETED,
    CA_SEGMENT_ALLOC,
    CA_SEGMENT_FREE,
    CA_SEGMENT_MAP,
    CA_SEGMENT_UNMAP,
    CA_SNAPSHOT,
    CA_OOM,
    /* oomlab's own: a torch.cuda.empty_cache() call in a prediction's trace (oomlab predict's capture writes it, addr
     * and size 0; a PyTorch recording shows only the segment_free entries it causes). Never recorded here. */
    CA_EMPTY_CACHE,
    CA_ACTION_COUNT
} ca_action;

const char *ca_action_str(ca_action a); /* "alloc", "free_requested", ... */
bool ca_action_parse(const char *s, ca_action *out);

/* One trace entry. For CA_OOM, addr holds the device's free bytes (PyTorch's device_free). */
typedef struct ca_trace_entry {
    ca_action action;
    devptr addr;
    size_t size;    /* alloc/free: requested bytes; segment_*: bytes; oom: rounded size */
    int64_t time_us;
} ca_trace_entry;

/* What the last OOM looked like, captured at the moment it happened (after the cache was emptied). */
typedef struct ca_oom_info {
    size_t requested;          /* bytes the caller asked for */
    size_t rounded;            /* after round_size */
    size_t alloc_size;         /* the segment it tried to get: what "Tried to allocate" reports */
    size_t device_total;       /* cudaMemGetInfo */
    size_t device_free;
    bool capped;               /* a budget was active */
    size_t allowed;            /* the budget */
    size_t allocated;          /* allocated_bytes.all.current */
    size_t reserved;           /* reserved_bytes.all.current */
    size_t largest_free_block; /* the largest free cached block, any pool */
    size_t process_in_use;     /* NVML's figure for this process (sim: its model); 0 when not listed */
    double fragmented_share;   /* (reserved - allocated) / reserved: cached memory no request could get back */
    char message[1024];        /* PyTorch's text, then oomlab's two figures */
} ca_oom_info;

/* Options for cachealloc_new. */
typedef struct cachealloc_options {
    alloc_conf conf;     /* see allocconf.h; alloc_conf_default() for PyTorch's defaults */
    size_t budget_bytes; /* 0: none, unless conf.per_process_memory_fraction < 1 (fraction x device total).
                          * Applied as set_per_process_memory_fraction(budget_bytes / total) is: the cap is
                          * cachealloc_budget_cap(), and CUDA counts as initialised from the start. */
    int device_id;       /* for messages */
    bool uncached;       /* caching off, as PYTORCH_NO_CUDA_MEMORY_CACHING=1 turns it off (see below) */
} cachealloc_options;

/* Caching off (cachealloc_options.uncached), as PyTorch 2.11's forceUncachedAllocator() does it in
 * NativeCachingAllocator::allocate: every malloc is a device allocation of exactly nbytes of its own
 * (uncached_allocate: cudaMalloc), every free returns it to the device at once (uncached_delete: cudaFree).
 * DeviceCachingAllocator is never reached, so: no memory_stats counter moves on malloc or free (all stay 0; only
 * empty_cache, which still runs release_cached_blocks over the empty pools, counts num_sync_all_streams), no trace
 * entry is recorded, snapshots and layouts are empty, and no budget is enforced (set_per_process_memory_fraction
 * sets the device allocator's cap, which this path never asks: cachealloc_budget is 0). A device that cannot
 * supply nbytes gives OOM_ENOMEM_DEVICE with cachealloc_last_oom's message "CUDA error: out of memory" (PyTorch's
 * C10_CUDA_CHECK text; num_ooms stays 0, as it is no allocator OOM). */

/* Create an allocator over dev (borrowed; it must outlive the allocator). OOM_ENOMEM_HOST on failure. */
oom_status cachealloc_new(device *dev, const cachealloc_options *opt, cachealloc **out);
/* Return every segment and page to the device and free the allocator. Live blocks are released too. */
void cachealloc_delete(cachealloc *ca);

/* Allocate nbytes (PyTorch's raw_alloc). nbytes == 0 gives *out = 0 and touches nothing.
 * OOM_ENOMEM_DEVICE when the device or the budget cannot supply it (the OOM is recorded: num_ooms, the trace,
 * cachealloc_last_oom); on another device failure its own status (OOM_ENOMEM_HOST: the sim's host memory could not
 * back a segment or pages; OOM_ECUDA), with expandable segments too, and the reason in the last-error record.
 * *out is only written on success. */
oom_status cachealloc_malloc(cachealloc *ca, size_t nbytes, devptr *out);
/* Free a pointer from cachealloc_malloc (raw_delete). p == 0 is a no-op; an unknown p is OOM_EINVAL. */
oom_status cachealloc_free(cachealloc *ca, devptr p);
/* Size of the block behind a live pointer (0 if unknown). */
size_t cachealloc_block_size(const cachealloc *ca, devptr p);

/* torch.cuda.empty_cache(): release every whole free segment and unmap free expandable pages (one
 * num_sync_all_streams). Like PyTorch's, a no-op until CUDA is initialised: before the first cachealloc_malloc,
 * unless a budget was set (set_per_process_memory_fraction initialises CUDA). */
void cachealloc_empty_cache(cachealloc *ca);

/* The cap that set_per_process_memory_fraction(budget / total) sets on a device of total bytes: PyTorch keeps
 * (size_t)(fraction * totalGlobalMem), computed in double, so 1 GiB of an H100 (85,017,493,504 bytes) allows
 * 1,073,741,823 bytes. 0 (no cap) for a budget of 0, or of total or more (a fraction of 1 sets no cap; PyTorch
 * refuses one above 1, so callers reject budget > total before). */
size_t cachealloc_budget_cap(size_t budget, size_t total);

/* A budget below total whose cap is 0 bytes (budget / total x total rounds down to 0): PyTorch would run out at
 * the first allocation, where oomlab's 0 means "no cap", so every command refuses such a budget in one line,
 * written to err (naming what, "--budget"), and returns true. */
bool cachealloc_budget_allows_nothing(size_t budget, size_t total, const char *what, char *err, size_t errcap);

/* What malloc(nbytes) would do first, without doing it: true when it finds no cached block and must
 * release cached memory (garbage collection, max_split release or the emptying retry) before it can
 * get a segment. Trace replay uses this to tell PyTorch's own releases from an explicit empty_cache(). */
bool cachealloc_would_release(const cachealloc *ca, size_t nbytes);

/* The current stream (torch.cuda.stream(s) as a context): mallocs from here on are made for it, and a segment made
 * for one stream serves only that stream's requests, as PyTorch's pools key blocks by stream first (cachealloc.c,
 * "Streams"). Streams are small numbers, 0 the default stream; a negative one is 0. A free returns a block to its
 * own stream whatever is current. */
void cachealloc_set_stream(cachealloc *ca, int stream);
int cachealloc_stream(const cachealloc *ca);

/* Private pools (PyTorch's PrivatePool, a CUDA graph's memory: cachealloc.c, "Private pools"). Pools are positive
 * ids. cachealloc_begin_allocate_to_pool is beginAllocateToPool: the pool is made with one use, or gains one
 * (create_or_incref_pool), and every malloc from here on takes its blocks from it and makes its segments for it until
 * cachealloc_end_allocate_to_pool (endAllocateToPool). OOM_EINVAL for an id <= 0 or while another pool is being
 * allocated to; OOM_ENOMEM_HOST. cachealloc_release_pool is releasePool: one use less; at 0 empty_cache may release
 * the pool's free segments. */
oom_status cachealloc_begin_allocate_to_pool(cachealloc *ca, int pool);
void cachealloc_end_allocate_to_pool(cachealloc *ca, int pool);
void cachealloc_release_pool(cachealloc *ca, int pool);
int cachealloc_allocating_pool(const cachealloc *ca); /* the pool being allocated to, 0 for none */
/* The bytes of free cached blocks in private pools: what the OOM message counts as "allocated in private pools". */
size_t cachealloc_private_free_bytes(const cachealloc *ca);

const memstats *cachealloc_stats(const cachealloc *ca);
void cachealloc_reset_peak(cachealloc *ca);        /* reset_peak_memory_stats */
/* The most allocated_bytes.all.current was since the last call (or since the allocator was made), then the window
 * starts again at current: the peak between two samples, which memory_stats()'s peak (since the last reset) cannot
 * tell once an earlier step went higher. Untouched by reset_peak_memory_stats. */
int64_t cachealloc_take_window_peak(cachealloc *ca);
void cachealloc_reset_accumulated(cachealloc *ca); /* reset_accumulated_memory_stats */
const alloc_conf *cachealloc_conf(const cachealloc *ca);
/* The cap in force in bytes (allowed_memory_maximum), or 0 when none is active. */
size_t cachealloc_budget(const cachealloc *ca);
/* The most recent OOM, or NULL if none happened. */
const ca_oom_info *cachealloc_last_oom(const cachealloc *ca);
/* Largest free cached block (mapped), any pool. */
size_t cachealloc_largest_free_block(const cachealloc *ca);

/* Trace recording (torch.cuda.memory._record_memory_history(enabled="all")). Off by default. */
void cachealloc_record_history(cachealloc *ca, bool enabled);
/* Entries recorded so far, oldest first. */
const ca_trace_entry *cachealloc_trace(const cachealloc *ca, size_t *count);
void cachealloc_trace_clear(cachealloc *ca);

/* Validator: recounts every segment, block and stat and checks the invariants stated in cachealloc.c.
 * OOM_OK, or OOM_ECORRUPT with the broken invariant in the last-error record. Debug builds (OOM_DEBUG >= 2)
 * run it after every mutating call and abort on failure. */
oom_status cachealloc_check(const cachealloc *ca);

/* One block as _snapshot() reports it. */
typedef struct ca_snap_block {
    devptr addr;
    size_t size;
    size_t requested_size;
    int state; /* CA_SNAP_INACTIVE, CA_SNAP_ALLOCATED; CA_SNAP_UNMAPPED only in a layout (below) */
} ca_snap_block;

#define CA_SNAP_INACTIVE 0  /* free, cached: _snapshot()'s "inactive" */
#define CA_SNAP_ALLOCATED 1 /* "active_allocated" */
#define CA_SNAP_UNMAPPED 2  /* reserved virtual space of an expandable range with no pages mapped */

/* One segment as _snapshot() reports it (an expandable range reports one segment per mapped run). */
typedef struct ca_snap_segment {
    devptr address;
    size_t total_size, allocated_size, active_size, requested_size;
    bool is_small, is_expandable;
    int stream;       /* the stream it was allocated for (_snapshot()'s "stream") */
    int pool;         /* 0, or the private pool it belongs to (_snapshot()'s segment_pool_id) */
    size_t page_size; /* an expandable range's page (2 MiB small, large_segment_size large); 0 otherwise */
    size_t nblocks;
    ca_snap_block *blocks;
} ca_snap_segment;

/* The segments in address order. Returns a malloc'd array (free with cachealloc_snapshot_free), or NULL when
 * out of host memory; *count gets the number of segments. */
ca_snap_segment *cachealloc_snapshot(const cachealloc *ca, size_t *count);
void cachealloc_snapshot_free(ca_snap_segment *segs, size_t count);

/* The layout as memory_viz's "Allocator State History" draws it: every cudaMalloc segment, and every expandable
 * range whole (one segment, its unmapped space as CA_SNAP_UNMAPPED blocks; total_size is the range's virtual
 * size, allocated/active/requested count mapped blocks only), in address order. The blocks of each segment tile
 * it. As cachealloc_snapshot: malloc'd, freed with cachealloc_snapshot_free, NULL when out of host memory. */
ca_snap_segment *cachealloc_layout(const cachealloc *ca, size_t *count);
/* Keep the layout at each OOM (off by default: the runner turns it on, a replay or a test need not pay for it).
 * At an OOM the allocator has already released what it could, so the layout is what the failed request met. */
void cachealloc_record_oom_layout(cachealloc *ca, bool enabled);
/* A copy of the layout kept at the most recent OOM (free with cachealloc_snapshot_free); NULL with *count 0 when
 * none was kept (no OOM since recording was turned on), or out of host memory. */
ca_snap_segment *cachealloc_oom_layout(const cachealloc *ca, size_t *count);

/* memory_summary() of this allocator (memstats_summary with its device id); malloc'd, caller frees. */
char *cachealloc_summary(const cachealloc *ca, bool abbreviated);

OOM_END_DECLS

#endif
