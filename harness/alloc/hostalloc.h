/* hostalloc.h - PyTorch 2.11's pinned host caching allocator, for one device and the default pool.
 *
 * It behaves like at::CachingHostAllocatorImpl (ATen/core/CachingHostAllocator.h) with the CUDA specialisation
 * of aten/src/ATen/cuda/CachingHostAllocator.cpp, the allocator behind pin_memory(), torch.empty(...,
 * pin_memory=True) and a DataLoader's pin-memory thread. Read against PyTorch 2.11.0's own headers:
 *   - malloc(0) gives NULL and touches nothing (not even the event queue). Any other request is rounded up to
 *     a power of two (PowerOf2Ceil: 1 B stays 1 B, 19.3 MB becomes 32 MiB) and served from the free list of
 *     that power, one list per power, last in first out; blocks are never split or merged.
 *   - Every malloc first processes the event queue (process_events): oldest event first, stopping at the
 *     first one not complete; a block whose events have all completed joins its free list.
 *   - A miss makes a new block (allocate_host_memory): from the reserve segment when
 *     pinned_reserve_segment_size_mb is set (made on the first miss, carved with a 4 KiB bump pointer, never
 *     given back), else cudaHostAlloc, or with pinned_use_cuda_host_register malloc + one write per 4 KiB page
 *     (on pinned_num_register_threads threads when the block spans at least 4 KiB x threads) +
 *     cudaHostRegister.
 *   - record_event(ptr, stream) adds the stream to the block's set (what a non_blocking copy does). free
 *     records one event per stream in the set, and the block waits for them outside the free lists; a block
 *     freed with no stream joins its free list at once.
 *   - empty_cache processes the events, then frees every block in the free lists; blocks handed out or waiting
 *     for events stay.
 *
 * Statistics: host_memory_stats() of 2.11, key for key (hostalloc_stats_key): allocations and allocated_bytes
 * (blocks held from the device, handed out or cached; .allocated/.current/.freed/.peak), active_requests and
 * active_bytes (blocks handed out), num_host_alloc and num_host_free (= allocations.allocated and .freed),
 * host_alloc_time and host_free_time (.total/.max/.min/.count/.avg, microseconds in the device calls). PyTorch
 * 2.11 keeps active_* per power of two and sums them when read; that, and two slips of its source, show in the
 * numbers and are reproduced so that a PyTorch twin matches:
 *   Q1 free of a block with no recorded stream leaves active_requests and active_bytes as they are: only a
 *      block that comes back through its events decreases them (CachingHostAllocatorImpl::free);
 *   Q2 that decrease of active_bytes passes size = -1 to Stat::decrease(size_t): current goes UP by 1 and
 *      freed DOWN by 1 (process_events_for_specific_size(-1));
 *   Q3 the peaks of active_requests and active_bytes are sums of per-power peaks (getStats);
 *   Q4 the reserve segment's creation counts in host_alloc_time only; a block carved from it counts in
 *      allocations and num_host_alloc but not in host_alloc_time, and on empty_cache in num_host_free but not in
 *      host_free_time, its bytes never going back to the device.
 * hostalloc_usage() gives the exact picture beside them (blocks handed out, waiting for events, cached).
 *
 * Errors: out of pinned memory (cudaHostAlloc/cudaHostRegister refused, or sim's pinned budget) is
 * OOM_ENOMEM_PINNED, where PyTorch raises "CUDA error: out of memory"; the allocator is left as it was: no
 * block, no stat moved, nothing held. Freeing or recording on a pointer this allocator did not hand out is
 * OOM_EINVAL.
 *
 * Threads: every call is thread-safe (one mutex, as PyTorch's allocator is): a pin-memory thread allocates
 * while the main loop records events and frees. The mutex is never held across cudaHostAlloc, cudaHostRegister,
 * cudaFreeHost or cudaHostUnregister (PyTorch's rule: no slow runtime call under a lock).
 * Not modelled: pinned_use_background_threads (events are processed by malloc and empty_cache only), CUDA-graph
 * private pools.
 */
#ifndef OOMLAB_HOSTALLOC_H
#define OOMLAB_HOSTALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "alloc/memstats.h"
#include "core/compat.h"
#include "core/status.h"
#include "device/device.h"

OOM_BEGIN_DECLS

#define HOSTALLOC_BUCKETS 64                   /* MAX_SIZE_INDEX: one free list per power of two */
#define HOSTALLOC_PAGE ((size_t)4096)          /* pages touched before cudaHostRegister; reserve carving */
#define HOSTALLOC_MAX_REGISTER_THREADS 128     /* pinned_max_register_threads() */

typedef struct hostalloc hostalloc;

/* The settings, from PYTORCH_CUDA_ALLOC_CONF's pinned keys (hostalloc_options_from_conf). */
typedef struct hostalloc_options {
    bool use_host_register;       /* pinned_use_cuda_host_register: malloc + cudaHostRegister */
    size_t num_register_threads;  /* pinned_num_register_threads: 1..128, a power of two; 0 means 1 */
    size_t reserve_segment_bytes; /* pinned_reserve_segment_size_mb x 1 MiB; 0: no reserve segment */
} hostalloc_options;

void hostalloc_options_from_conf(const alloc_conf *c, hostalloc_options *o);

/* c10::CachingAllocator::DurationStat, in microseconds: increase(x) adds x to total, 1 to count, keeps the max,
 * and the min of the nonzero mins (a min of 0 means "none yet"). */
typedef struct hostalloc_duration {
    int64_t total, max, min, count;
} hostalloc_duration;

/* at::HostStats as host_memory_stats() reports it. */
typedef struct hostalloc_stats {
    memstat active_bytes;
    memstat active_requests;
    memstat allocated_bytes;
    memstat allocations;
    hostalloc_duration host_alloc_time;
    hostalloc_duration host_free_time;
    int64_t num_host_alloc;
    int64_t num_host_free;
} hostalloc_stats;

/* oomlab's exact counters (not PyTorch's): where the pinned bytes are now. */
typedef struct hostalloc_usage {
    size_t live_blocks, live_bytes;       /* handed out */
    size_t pending_blocks, pending_bytes; /* freed, waiting for their events */
    size_t cached_blocks, cached_bytes;   /* in the free lists */
    size_t reserve_bytes, reserve_carved; /* the reserve segment (0 until made) and how much of it is carved */
    size_t pinned_bytes;                  /* held from the device: blocks outside the reserve + the reserve */
} hostalloc_usage;

/* Create an allocator over dev (borrowed; it must outlive the allocator). OOM_EINVAL for bad options. */
oom_status hostalloc_new(device *dev, const hostalloc_options *opt, hostalloc **out);
/* Give every block back to the device (handed out ones too), destroy pending events, free the allocator. */
void hostalloc_delete(hostalloc *ha);

/* Allocate nbytes of pinned host memory (HostAllocator::allocate). nbytes == 0: *out = NULL, nothing else
 * happens. OOM_ENOMEM_PINNED when the device cannot pin the block (nothing changes); *out is written only on
 * success. An error of an event query (cuda) is returned as it is. */
oom_status hostalloc_malloc(hostalloc *ha, size_t nbytes, void **out);
/* Free a pointer from hostalloc_malloc. NULL is a no-op; an unknown or already freed pointer is OOM_EINVAL.
 * If an event cannot be recorded, its stream is synchronised instead and the error is returned; the block is
 * freed either way. */
oom_status hostalloc_free(hostalloc *ha, void *ptr);
/* record_event: the block of ptr (a pointer hostalloc_malloc returned, still handed out) was used by work
 * queued on stream s, so after its free it is not reused before that work completes. OOM_EINVAL when ptr is
 * not a live block of this allocator (PyTorch returns false and records nothing). */
oom_status hostalloc_record_event(hostalloc *ha, void *ptr, devstream s);
/* Size of the block behind a live pointer (the rounded size), 0 when ptr is not one. */
size_t hostalloc_block_size(hostalloc *ha, const void *ptr);

/* torch._C._host_emptyCache(): process the events, then free every cached block. Returns the first device
 * error (the remaining blocks are still freed), else OOM_OK. */
oom_status hostalloc_empty_cache(hostalloc *ha);

/* getStats(), reset_peak_host_memory_stats(), reset_accumulated_host_memory_stats(). */
void hostalloc_get_stats(hostalloc *ha, hostalloc_stats *out);
void hostalloc_reset_peak(hostalloc *ha);
void hostalloc_reset_accumulated(hostalloc *ha);
void hostalloc_usage_get(hostalloc *ha, hostalloc_usage *out);
const hostalloc_options *hostalloc_get_options(const hostalloc *ha);

/* host_memory_stats(): 28 flattened keys, in Python's sorted order ("active_bytes.allocated", ...,
 * "num_host_free"). avg is total / count in integers, 0 when count is 0 (Module.cpp's durationStatToDict). */
#define HOSTALLOC_NKEYS 28
bool hostalloc_stats_key(const hostalloc_stats *s, size_t i, const char **key, int64_t *value);
/* A value by its flattened key; false when the key is not one of the 28. */
bool hostalloc_stats_get(const hostalloc_stats *s, const char *key, int64_t *value);

/* Validator: recounts blocks, free lists, the event queue and the stats against the invariants stated in
 * hostalloc.c. OOM_OK, or OOM_ECORRUPT with the broken invariant in the last-error record. Debug builds
 * (OOM_DEBUG >= 2) run it after every mutating call and abort on failure. */
oom_status hostalloc_check(hostalloc *ha);

OOM_END_DECLS

#endif
