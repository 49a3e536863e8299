/* hostbuf.h - CPU tensors: pageable host memory and pinned memory from the host caching allocator.
 *
 * What a DataLoader's batch is on the host side. A pageable hostbuf is malloc'd memory (a worker's batch: not
 * counted by any allocator, as a CPU tensor in PyTorch is not in host_memory_stats()). hostbuf_pin_memory is
 * tensor.pin_memory(): a block of rt->ha (rounded up to a power of two, cached and reused, alloc/hostalloc.h) and
 * a copy. hostbuf_to_device is tensor.to("cuda", non_blocking=...): a device tensor from the caching allocator
 * and the copy; from pinned memory with non_blocking, the block records the copy's stream as PyTorch's copy_
 * does (CachingHostAllocator_recordEvent), so that after its free the block is not reused before the copy
 * completes. From pageable memory the copy is synchronous and records nothing.
 *
 * Threads: hostbuf_randn, hostbuf_pin_memory and hostbuf_free may run on any thread (a worker, the pin-memory
 * thread) and never touch the rt's sticky error; hostbuf_to_device belongs to the rt's thread.
 * In a dry run (!rt->computes) a pageable hostbuf has no data and nothing is filled or copied, but the pinned
 * blocks are still allocated from rt->ha: the counters are the point.
 */
#ifndef OOMLAB_HOSTBUF_H
#define OOMLAB_HOSTBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "runtime/runtime.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

/* Invariants (hostbuf_check; checked builds run it at the entry of every function taking a hostbuf and on what
 * they return):
 *   H1  rt is set, 0 <= ndim <= TENSOR_MAX_DIMS, dt is a known dtype, every shape[i] >= 0;
 *   H2  nbytes == numel(shape) x dtype_size(dt);
 *   H3  pinned => data is a block of rt->ha (NULL only when nbytes == 0);
 *   H4  !pinned => data is malloc'd exactly when the rt computes and nbytes > 0 (NULL in a dry run);
 *   H5  (expensive) pinned => data is a live block of rt->ha of nbytes or more. */
typedef struct hostbuf {
    rt *rt;
    dtype dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    size_t nbytes;
    void *data;
    bool pinned;
} hostbuf;

/* torch.randn(shape) on the CPU: pageable, filled from seed (normal(0, 1)). OOM_EINVAL for a bad shape,
 * OOM_ENOMEM_HOST when malloc fails. */
oom_status hostbuf_randn(rt *r, dtype dt, int ndim, const int64_t *shape, uint64_t seed, hostbuf **out);
/* src.pin_memory(): a new pinned hostbuf with src's values. OOM_ENOMEM_PINNED when the block cannot be pinned
 * (nothing held). */
oom_status hostbuf_pin_memory(const hostbuf *src, hostbuf **out);
/* Drop the buffer (a pinned block goes back to rt->ha: cached, or waiting for its recorded events). NULL: no-op. */
void hostbuf_free(hostbuf *b);
/* b.to("cuda", non_blocking=non_blocking), the copy on stream s: NULL on failure, recorded in the rt. */
tensor *hostbuf_to_device(const hostbuf *b, bool non_blocking, devstream s);

/* Validator (core/check.h): H1-H4, and with expensive H5 (a look-up under the host allocator's lock). OOM_OK, or
 * OOM_ECORRUPT with the broken invariant in why[cap]: it touches no error record, so any thread may call it. */
oom_status hostbuf_check(const hostbuf *b, bool expensive, char *why, size_t cap);

OOM_END_DECLS

#endif
