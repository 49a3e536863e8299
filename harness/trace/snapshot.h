/* snapshot.h - the caching allocator model as torch.cuda.memory._snapshot() reports it.
 *
 * The dict has PyTorch 2.11's keys (../shared/reference/pytorch-allocator.md §11):
 *   segments             one per cudaMalloc segment or mapped run of an expandable range, in address order
 *                        (device 0, stream 0, segment_pool_id [0,0], frames [], blocks with state
 *                        "active_allocated" or "inactive")
 *   device_traces        [[entries of cachealloc_trace(), oldest first]]; an oom entry carries device_free
 *                        instead of addr
 *   allocator_settings   PYTORCH_CUDA_ALLOC_CONF (the settings text), max_split_size (-1: unlimited),
 *                        garbage_collection_threshold, expandable_segments, the pinned and lock keys, and
 *                        roundup_power2_divisions as {"1": d0, "2": d1, ..., "32768": d15}
 *   external_annotations []
 * Stack frames are never recorded, so every frames list is empty.
 *
 * snapshot_write writes JSON (what `oomlab replay` and scripts/snapshot2json.py read), or, when the path ends in
 * .pickle or .pkl, the same dict as a protocol-2 pickle: pytorch.org/memory_viz reads only pickles
 * (_dump_snapshot's format).
 */
#ifndef OOMLAB_SNAPSHOT_H
#define OOMLAB_SNAPSHOT_H

#include <cJSON.h>
#include <stddef.h>

#include "alloc/cachealloc.h"
#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* The _snapshot() dict of ca; the caller frees it with cJSON_Delete. NULL when out of host memory. */
cJSON *snapshot_json(const cachealloc *ca);

/* The pickle (protocol 2, plain dicts, lists, str, int, float, bool, None) of a snapshot_json() tree in a
 * malloc'd buffer of *len bytes; NULL when out of host memory. Integral numbers become ints, except the
 * float-valued garbage_collection_threshold. */
unsigned char *snapshot_pickle(const cJSON *snap, size_t *len);

/* Write ca's snapshot to path (JSON, or a pickle for *.pickle / *.pkl) atomically: a temporary file in the same
 * directory, then rename. On failure nothing is left behind and the last-error record names the problem:
 * OOM_EIO (cannot create, write or rename), OOM_ENOMEM_HOST, or OOM_EINVAL (empty path, or a path that exists
 * and is not a regular file: fileio_write_atomic). */
oom_status snapshot_write(const cachealloc *ca, const char *path);

/* Write a snapshot_json()-shaped tree (one the caller built or changed) the same way. */
oom_status snapshot_write_tree(const cJSON *snap, const char *path);

OOM_END_DECLS

#endif
