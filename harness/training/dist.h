/* dist.h - torch.distributed's collectives on tensors, one tensor per rank (rank k's on rank k's runtime), over a
 * communicator (device/devcomm.h) whose rank k is that runtime's device: dist.all_reduce(t) (SUM, in place),
 * dist.broadcast(t, src), dist.all_gather_into_tensor(out, in), dist.reduce_scatter_tensor(out, in).
 * ProcessGroupNCCL allocates nothing of its own for these: outputs are the caller's tensors, made through the
 * caching allocator (so they count in its allocated bytes); NCCL's internal buffers are outside it (devcomm.h).
 * Each call is every rank's call at once; each output's version counter moves (an in-place write). Tensors must be
 * contiguous, of one dtype and numel across ranks (out n times in's for all_gather, in n times out's for
 * reduce_scatter): otherwise OOM_EINVAL, recorded in rank 0's runtime with the reason. */
#ifndef OOMLAB_DIST_H
#define OOMLAB_DIST_H

#include "core/compat.h"
#include "core/status.h"
#include "device/devcomm.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

oom_status dist_all_reduce(devcomm *c, tensor *const *t);
oom_status dist_broadcast(devcomm *c, tensor *const *t, int src);
oom_status dist_all_gather_into_tensor(devcomm *c, tensor *const *out, tensor *const *in);
oom_status dist_reduce_scatter_tensor(devcomm *c, tensor *const *out, tensor *const *in);

OOM_END_DECLS

#endif
