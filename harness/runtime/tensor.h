/* tensor.h - refcounted tensors whose storage comes from the caching allocator.
 *
 * A tensor is a view (shape, dtype, byte offset) of a storage; views share their storage, and the storage's
 * device block goes back to the caching allocator when its last view is released. Shapes are row-major and
 * contiguous, with one exception: a 2-D tensor may be `transposed` (what .t() returns), which the GEMM reads
 * directly; every other kernel needs a plain contiguous operand.
 *
 * The version counter lives in the storage, as PyTorch's VariableVersion is shared by a tensor and its views:
 * every in-place op bumps it, and autograd compares it with the version it saved (autograd.h).
 *
 * Ownership: functions that return a tensor * return a new reference; arguments are borrowed. tensor_release
 * drops one reference (NULL is a no-op), tensor_retain adds one. A tensor holds its .grad and its grad_fn.
 * Constructors return NULL on failure with the reason recorded in the rt (a device OOM is OOM_ENOMEM_DEVICE
 * with PyTorch's message).
 */
#ifndef OOMLAB_TENSOR_H
#define OOMLAB_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "device/device.h"
#include "core/dtype.h"
#include "runtime/runtime.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define TENSOR_MAX_DIMS 4

struct ag_node;

/* A device allocation shared by views. Invariants (tensor_check checks them through every view):
 *   S1  refcount >= 1 while any view exists;
 *   S2  ptr == 0 exactly when nbytes == 0 (PyTorch's allocate(0) returns a null pointer and touches no stat);
 *   S3  (expensive) ptr != 0 is a live block of the view's rt->ca, of nbytes or more. */
typedef struct storage {
    devptr ptr;
    size_t nbytes;
    int refcount;
    uint32_t version; /* bumped by every in-place op on any view */
    bool resized_out; /* tensor_storage_resize_ changed its size: views may lie past its end (T3) */
} storage;

/* Invariants (tensor_check; checked builds run it where a tensor is made, retained, released or changes history):
 *   T1  rt and st are set, refcount >= 1, and the rt counts it among live_tensors;
 *   T2  0 <= ndim <= TENSOR_MAX_DIMS, every shape[i] >= 0, dt is a known dtype;
 *   T3  offset + nbytes <= st->nbytes: the view lies inside its storage, unless the storage was resized
 *       (tensor_storage_resize_: PyTorch lets a view outlive its storage's bytes, FSDP's free_storage does so);
 *   T4  transposed only when ndim == 2;
 *   T5  grad_fn != NULL implies requires_grad (a non-leaf), and then grad_acc == NULL;
 *   T6  grad_acc != NULL implies grad_acc->variable == this tensor (its AccumulateGrad holds it);
 *   T7  grad is set only on leaves (grad_fn == NULL), is a plain tensor (no grad_fn, no grad of its own) and has
 *       the leaf's shape (its dtype too, except while model.half() converts a parameter and then its .grad: the
 *       engine asserts the dtype where it accumulates);
 *   T8  is_view exactly when base != NULL; a base is never itself a view; view_of_leaf implies is_view;
 *   T9  (expensive) grad and base hold T1-T8, grad_fn holds ag_node_check, st holds S3. */
typedef struct tensor {
    rt *rt;
    storage *st;
    size_t offset; /* bytes into the storage */
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    bool transposed;
    dtype dt;
    int refcount;
    bool requires_grad;
    struct tensor *grad;       /* .grad */
    struct ag_node *grad_fn;   /* the node that made it (owned reference); NULL for leaves */
    int output_nr;             /* which output of grad_fn */
    struct ag_node *grad_acc;  /* leaves: their AccumulateGrad node, borrowed (the node owns the leaf) */
    bool is_view;              /* made by t(), view() or narrow() of another tensor */
    struct tensor *base;       /* a view's base, held (owned reference) as PyTorch's ViewInfo holds it: the root
                                  of views of views, never itself a view; NULL for tensors that are not views.
                                  It counts in the storage's use count (InputBuffer's in-place test) */
    bool view_of_leaf;         /* ... of a leaf that requires grad (in-place ops on it are refused) */
} tensor;

/* tensor_empty(r, DT_F32, SHAPE(256, 4096)): the ndim, shape pair of a literal shape. */
#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#define SCALAR 0, NULL /* a 0-dim shape */

/* t.untyped_storage().resize_(nbytes), as FSDP2's alloc_storage and free_storage use it: the storage shared by t and
 * all its views gets a new block of nbytes from the caching allocator (the first min(old, new) bytes copied) and
 * gives its old block back; resize_(0) frees it while the views (a parameter, the tensors autograd saved of it) keep
 * their shapes. The version counter does not move. A view must not be read while its storage is smaller than it
 * (T3). OOM_OK, or the allocation's failure (recorded in the rt, the storage unchanged). */
oom_status tensor_storage_resize_(tensor *t, size_t nbytes);

/* ---- creation (torch.empty, zeros, full, rand, randn, randint, tensor) ----
 * Each returns NULL on failure, the reason recorded in the rt (a device OOM: PyTorch's message), and NULL at once
 * when the rt already holds an error. */
tensor *tensor_empty(rt *r, dtype dt, int ndim, const int64_t *shape);
tensor *tensor_zeros(rt *r, dtype dt, int ndim, const int64_t *shape);
tensor *tensor_full(rt *r, dtype dt, int ndim, const int64_t *shape, double value);
/* uniform in [lo, hi), normal(mean, std), integers in [lo, hi); deterministic from the rt's seed */
tensor *tensor_rand(rt *r, dtype dt, int ndim, const int64_t *shape, double lo, double hi);
tensor *tensor_randn(rt *r, dtype dt, int ndim, const int64_t *shape, double mean, double std);
tensor *tensor_randint(rt *r, int ndim, const int64_t *shape, int64_t lo, int64_t hi);
/* init.uniform_(t, lo, hi): fill in place (bumps the version, as every in-place op does). On failure the rt's
 * status, the kernel's failure recorded there; OOM_EINVAL for a NULL t. */
oom_status tensor_uniform_(tensor *t, double lo, double hi);
/* From host memory (numel elements of dt, host layout = the tensor's). NULL on failure, recorded in the rt. */
tensor *tensor_from_host(rt *r, dtype dt, int ndim, const int64_t *shape, const void *host);
/* torch.empty_like(t): same shape and dtype, and the same layout (a .t() view gets a transposed result, as
 * PyTorch keeps a dense tensor's strides). NULL on failure, recorded in t's rt. */
tensor *tensor_empty_like(const tensor *t);
/* A view of t's storage with another offset/shape (no autograd: ops.h makes differentiable views). NULL only for
 * a NULL t (host bookkeeping aborts). */
tensor *tensor_alias(const tensor *t, size_t offset, int ndim, const int64_t *shape, bool transposed);
/* torch.Tensor.detach(): the same storage and version counter, no history, requires_grad false. NULL for a NULL t
 * or when the rt holds an error. */
tensor *tensor_detach(const tensor *t);

/* ---- references (none of them fails) ---- */
tensor *tensor_retain(tensor *t);
void tensor_release(tensor *t);
/* *slot = value, releasing the old value: Python's `x = f(...)` rebinding. Returns value. */
tensor *tensor_assign(tensor **slot, tensor *value);
/* Python's `x = f(...)` when f may raise: rebinds only when value is non-NULL (a failure leaves the old binding, as
 * an exception does). Returns whether it rebound. */
bool tensor_rebind(tensor **slot, tensor *value);

/* ---- properties (none of them fails) ---- */
int64_t tensor_numel(const tensor *t);
size_t tensor_nbytes(const tensor *t);
/* Pointer the kernels read: a host view of simulated memory (sim) or the device address (cuda); NULL in
 * dry-run and for empty tensors. */
void *tensor_data(const tensor *t);
bool tensor_same_shape(const tensor *a, const tensor *b);
bool tensor_is_contiguous(const tensor *t);
/* "[256, 4096]" */
const char *tensor_shape_str(const tensor *t, char *buf, size_t cap);
/* "torch.cuda.FloatTensor" and friends, as PyTorch's messages name tensor types */
const char *tensor_type_str(const tensor *t);

/* ---- host copies and values ---- */
/* Copy the elements to host memory (tensor_nbytes bytes); OOM_EINVAL in dry-run (there are no values). */
oom_status tensor_to_host(const tensor *t, void *host);
/* .item() of a one-element tensor, as a double; NAN in dry-run or on failure (recorded in the rt). */
double tensor_item(const tensor *t);

/* param.data = src: t takes src's storage, dtype and shape (t keeps its identity, .grad and history flags);
 * src is released. Cannot fail. */
void tensor_set_data(tensor *t, tensor *src);
/* requires_grad_(flag) of a leaf. Refused (OOM_EINVAL recorded in the rt, nothing changed) for flag false on a
 * non-leaf and flag true on an integer tensor. */
void tensor_set_requires_grad(tensor *t, bool flag);
/* In-place: bump the version counter (every in-place op calls it). Cannot fail. */
static inline void tensor_bump_version(tensor *t) { t->st->version++; }

/* ---- the model_too_large scenario: copies between runtimes, and into a tensor ---- */
/* x.to(other device): a new contiguous tensor in dst's runtime (another device, its own caching allocator) with
 * src's dtype, shape and values. Between two cuda runtimes it is cudaMemcpyPeer (GPU to GPU, or within one GPU
 * for logical devices, see runner.h); on sim it goes device -> host -> device (sim's devices are separate
 * simulations). The result has no
 * history: src must not need grad while src's runtime records (the scenario runs under no_grad), else
 * OOM_EINVAL. NULL on failure, recorded in dst's runtime (a device OOM there) or src's (bad input). */
tensor *tensor_copy_to(rt *dst, const tensor *src);
/* t.copy_(host_tensor): t's bytes from host memory (a pinned buffer), in place (the version is bumped). The copy
 * is synchronous on both backends. On failure its status, recorded in the rt (OOM_EINVAL: t is transposed). */
oom_status tensor_copy_from_host_(tensor *t, const void *host);
/* t.copy_(host, non_blocking=True) issued on stream s (torch.cuda.stream(s)): cudaMemcpyAsync from pinned host
 * memory, which the caller keeps alive until an event recorded on s after it completes; sim copies at once. On
 * failure its status, recorded in the rt (OOM_EINVAL: t is transposed). */
oom_status tensor_copy_from_host_async_(tensor *t, const void *host, devstream s);

/* ---- the validator (core/check.h) ---- */
/* Invariants S1-S3 and T1-T9 above: OOM_OK, or OOM_ECORRUPT with the broken one named in why[cap]. Touches no
 * error record. Checked builds (OOM_DEBUG >= 2) run it through OOM_VALIDATE and abort on failure. */
oom_status tensor_check(const tensor *t, bool expensive, char *why, size_t cap);

OOM_END_DECLS

#endif
