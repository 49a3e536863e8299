/* runtime.h - the tensor runtime's context: one device, its caching allocator, the kernels, and the modes that
 * PyTorch keeps per thread (grad mode, autocast).
 *
 * Everything a scenario does goes through one rt: tensors (tensor.h) take their storage from rt->ca, ops
 * (ops.h) launch rt->k, autograd (autograd.h) reads rt->grad_enabled. On the sim backend the kernels are the CPU
 * references working on the simulated device's host backing; on cuda they are the CUDA kernels. In dry-run
 * (sim only) nothing is computed: tensors are accounted, never filled, so full-scale memory figures come out on
 * a laptop.
 *
 * Errors work like a Python exception that the caller catches at the end of a step. The first failure of an op
 * (a device OOM, an autograd error, a bad shape) is recorded in the rt: status, and the message as PyTorch words
 * it. The failing op returns NULL; every op given a NULL operand returns NULL at once, so a step's remaining
 * calls fall through. The caller checks rt_ok() (or rt_status()), releases its tensors and calls rt_clear()
 * to go on, as `except torch.OutOfMemoryError` would. Nothing aborts on a device OOM.
 */
#ifndef OOMLAB_RUNTIME_H
#define OOMLAB_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "alloc/cachealloc.h"
#include "alloc/hostalloc.h"
#include "core/compat.h"
#include "device/device.h"
#include "core/dtype.h"
#include "kernels.h"
#include "core/status.h"

OOM_BEGIN_DECLS

typedef struct rt_options {
    device_kind backend;  /* DEVICE_AUTO: cuda when built in and a GPU is visible, else sim */
    bool dry_run;         /* sim: no backing memory and no compute (accounting only) */
    size_t budget_bytes;  /* set_per_process_memory_fraction(budget_bytes / total); 0 = none */
    size_t sim_capacity;  /* sim: device size; 0 = an H100's (with its CUDA context) */
    const alloc_conf *conf; /* NULL: PyTorch's defaults */
    uint64_t seed;        /* torch.manual_seed */
    bool real_addresses;  /* cuda: order blocks by the driver's addresses, not sim's model (device_order_key) */
    int cuda_ordinal;     /* cuda: which GPU (0 unless a variant's extra device has a GPU of its own) */
    bool uncached;        /* caching off (cachealloc_options.uncached) */
} rt_options;

#define RT_MESSAGE_MAX 1280

/* The context. Scenarios read these fields; only runtime.c, tensor.c, autograd.c and ops.c write them.
 * Invariants: dev and ca are non-NULL for the rt's life; computes == !dry_run; status == OOM_OK exactly when
 * message is empty; live_tensors and live_nodes count objects not yet freed (0 again once a scenario has
 * released everything: the leak check of the tests). */
struct tensor;
typedef struct rt {
    device *dev;
    cachealloc *ca;
    hostalloc *ha;       /* pinned host memory (pin_memory(), a DataLoader's pin thread): PyTorch's host allocator */
    const kernel_ops *k; /* kernels_ref (sim) or kernels_cuda */
    bool computes;       /* false in dry-run: kernels are skipped */
    bool grad_enabled;   /* torch.is_grad_enabled() */
    bool autocast;       /* inside torch.autocast("cuda", dtype=autocast_dtype) */
    dtype autocast_dtype;
    struct autocast_cache *cast_cache; /* amp.c: the autocast weight-cast cache */
    oom_status status;
    char message[RT_MESSAGE_MAX];
    uint64_t seed;
    uint64_t rng_offset;  /* tensors drawn so far: each draw uses a fresh stream */
    uint64_t next_seq;    /* autograd sequence numbers */
    struct ag_node *dying; /* autograd.c: nodes waiting to be freed (iterative graph teardown) */
    bool draining;
    size_t live_tensors, live_nodes;
    /* autograd.c: non-reentrant checkpointing (torch.utils.checkpoint(..., use_reentrant=False)) */
    struct ck_frame *ck_pack;      /* the checkpoint whose forward runs: saved tensors become placeholders */
    struct ck_frame *ck_recompute; /* the checkpoint being recomputed: saved tensors fill its placeholders */
    bool ck_stop;                  /* the recompute has every tensor it needs: ops return NULL (early stop) */
    uint64_t graph_tasks, graph_task; /* backward calls so far; the one running (0: none) */
    bool launched;                    /* a kernel has been launched (rt_note_kernel) */
    /* autograd.c: a post hook on every AccumulateGrad node (autograd_set_post_accumulate_hook) */
    oom_status (*post_acc_hook)(void *ctx, struct tensor *leaf);
    void *post_acc_ctx;
    /* autograd.c: a hook before every node that runs (autograd_set_pre_node_hook) */
    oom_status (*pre_node_hook)(void *ctx, struct ag_node *node);
    void *pre_node_ctx;
} rt;

/* Open a device and a caching allocator on it. OOM_ENODEV when cuda is asked for and absent, OOM_EINVAL for
 * dry-run on cuda, OOM_ENOMEM_HOST otherwise; the reason is in the last-error record. */
oom_status rt_open(const rt_options *opt, rt **out);
/* The kernels, with r's GPU made current first (device_make_current: a runtime of another GPU may have launched
 * last). Every kernel launch goes through it. */
static inline const kernel_ops *rt_kernels(rt *r)
{
    device_make_current(r->dev);
    return r->k;
}
/* Free the allocator and the device. Tensors still alive are the caller's bug: debug builds report them. NULL:
 * no-op; cannot fail. */
void rt_close(rt *r);

/* ---- errors (see the file comment) ---- */
static inline bool rt_ok(const rt *r) { return r->status == OOM_OK; }
static inline oom_status rt_status(const rt *r) { return r->status; }
static inline const char *rt_message(const rt *r) { return r->message; }
void rt_clear(rt *r); /* forget the recorded failure (`except ...:` caught it); cannot fail */
/* Record a failure unless one is already recorded (the first cause wins). Returns st. */
oom_status rt_fail(rt *r, oom_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Record the allocator's last OOM (its PyTorch-format message). Returns OOM_ENOMEM_DEVICE. */
oom_status rt_fail_oom(rt *r);
/* Record st with a lower layer's reason, the calling thread's oom_error_detail() (status.h: never its file:line),
 * after "WHAT: " when what is non-NULL; the status's name when no detail was recorded. Returns st. */
oom_status rt_fail_detail(rt *r, oom_status st, const char *what);

/* ---- modes ---- */
/* torch.set_grad_enabled(on); returns the previous mode. Cannot fail. */
bool rt_set_grad_enabled(rt *r, bool on);
/* `with torch.no_grad():` as a block: RT_NO_GRAD(r) { ... }. Leave the block normally (no break/return). */
#define RT_NO_GRAD(r)                                                                                          \
    for (bool rt_ng_prev_ = rt_set_grad_enabled((r), false), rt_ng_once_ = true; rt_ng_once_;                  \
         rt_set_grad_enabled((r), rt_ng_prev_), rt_ng_once_ = false)

/* `with torch.cuda.stream(s):` for memory: the caching allocator's current stream (cachealloc_set_stream), so the
 * tensors made until the next call come from segments of stream s (0: the default stream), as PyTorch's allocator
 * keys its blocks by the stream current at allocation. Kernels still run in program order. Returns the previous
 * stream. Cannot fail. */
int rt_set_stream(rt *r, int stream);

/* A fresh seed for the next random tensor (torch's generator advancing). Cannot fail. */
uint64_t rt_next_seed(rt *r);

/* torch.cuda.empty_cache(): give every whole free segment back to the device (cachealloc.h). Cannot fail. */
void rt_empty_cache(rt *r);

/* A cap on the pinned host memory this runtime may hold (device_pinned_cap_set): a container's memlock limit or
 * its RAM. 0 = none. Cannot fail. */
void rt_set_pinned_budget(rt *r, size_t bytes);

/* A fill or random-draw kernel is launched (noted in dry-run too: the kernel is skipped, not the launch). The
 * first one matters: the CUDA driver then gives back the 414 MiB it set aside at context creation, and later
 * segments fill that region from its bottom up (sim.c; docs/parity.md, "Where the driver puts segments"), which
 * decides best-fit ties between equal-size free blocks. Only fills (the kernel sim.c's model was measured with)
 * and random draws call it, not the other ops' kernels: that is what PyTorch's recordings show, not a mechanism
 * understood. oversize_batch's fix-bf16-autocast equals PyTorch only with the release at its first
 * torch.randn, and fix-half-model only without one at model.half()'s dtype-conversion copies, which come
 * before it. A module's parameter init does not call it (the twins build their modules on the CPU and move them
 * with .to("cuda"): copies). */
static inline void rt_note_kernel(rt *r)
{
    if (!r->launched) {
        r->launched = true;
        device_note_kernel_launch(r->dev);
    }
}

/* Wait for the device (cuda: a failed kernel surfaces here as OOM_ECUDA, recorded in the rt). */
oom_status rt_sync(rt *r);

OOM_END_DECLS

#endif
