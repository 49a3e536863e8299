/* predict.h - `oomlab predict`'s analysis of a predicted trace: will the script fit, where would it run out, and
 * which allocator setting buys the last gigabyte.
 *
 * The trace is what scripts/oomlab_capture wrote for a user's script run on the CPU (the meta device): PyTorch's
 * snapshot format with allocs and frees only (no segment events: a prediction, trace/replay.h), each entry's
 * user_metadata "step S: aten::OP at FILE:LINE", and a top-level "oomlab_capture" object (schema
 * oomlab.capture/1) naming the GPU it modelled {name, total_memory, sm_count, arch, context_bytes, sources}, the
 * placeholders it answered (.item(), data-dependent shapes) and the allocations it modelled (cuBLAS workspaces,
 * reduction staging, ...). From it, each through the allocator model (every byte from its counters):
 *   - peak allocated and peak reserved bytes: a replay with no cap at all (a device larger than any GPU);
 *   - fits: a replay on the GPU (its total memory, its CUDA context charged outside the allocator, as the driver
 *     does) under the budget, set_per_process_memory_fraction(budget / total) as `run --budget` applies it
 *     (cachealloc_budget_cap); without a budget the limit is the device's free memory, total less the context;
 *   - the OOM of that replay, if any: its event, the step and op from the event's user_metadata, and the message
 *     PyTorch prints (cachealloc's text);
 *   - advise (analysis/advise.h) on the same trace and GPU: the minimum budget per allocator setting, the verdict,
 *     steps and leaks.
 */
#ifndef OOMLAB_PREDICT_H
#define OOMLAB_PREDICT_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"
#include "core/compat.h"
#include "core/status.h"
#include "analysis/advise.h"

OOM_BEGIN_DECLS

#define PREDICT_SCHEMA "oomlab.predict/8" /* /7 had no capture "op_seconds", "op_median_us",
                                          * "deferred"; /6 no "other"; /5 no "fits_in_layouts", "layouts", advise/1;
                                          * /4 no capture "compile"; /3 no "range", "upper", "answered",
                                          * "pinned"; /2 no "external_bytes", /1 no "not_modelled" */
/* The capture's trace metadata (scripts/oomlab_capture/recorder.py) this reader understands. */
#define CAPTURE_SCHEMA "oomlab.capture/1"

/* The GPU the capture modelled (its "oomlab_capture"."gpu"). */
typedef struct predict_gpu {
    char name[64];
    char arch[32];
    size_t total;   /* totalGlobalMem */
    size_t context; /* what the CUDA context holds there, outside the allocator */
    int sm_count;
} predict_gpu;

typedef struct predict_options {
    size_t budget;          /* the allocator's budget (fraction x total); 0: the whole device */
    const char *alloc_conf; /* allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax); NULL: PyTorch's defaults */
    bool advise;            /* also run advise (the sweep's probes do not) */
    bool series;            /* advise samples its series for a plot */
    size_t external;        /* memory the process holds outside the allocator besides the CUDA context (NCCL's
                             * buffers under --nproc, device/devcomm.h): charged to the GPU in the fit and advise
                             * replays, as the context is; 0: none */
} predict_options;

/* A prediction's analysis. Invariants (predict_result_check):
 *   P1  peak_allocated <= peak_reserved (an uncapped replay's blocks lie in its segments);
 *   P2  upper, where set, has no upper and no other of its own;
 *   P3  other, where set, has no other of its own, and its upper obeys P2;
 *   P4  with orders, orders_allocated[0] <= orders_allocated[1] and orders_reserved[0] <= orders_reserved[1]. */
typedef struct predict_result {
    char path[512];
    predict_gpu gpu;
    size_t budget;         /* opt->budget */
    size_t cap;            /* the allocator's cap on the GPU: cachealloc_budget_cap(budget, total); 0: none */
    size_t external;       /* opt->external */
    size_t events;
    size_t peak_allocated; /* uncapped replay */
    size_t peak_reserved;
    bool fits;             /* the replay on the GPU under the budget ran without an OOM */
    int layouts_fit;       /* with a budget: of ADVISE_LAYOUTS other orders of the segments (advise.h), how many
                            * fit under it too; -1 without a budget */
    long oom_event;        /* its first OOM's event; -1 when it fits */
    long oom_step;         /* from the event's user_metadata "step S: OP at WHERE"; -1 when it names none */
    char oom_op[128];
    char oom_where[256];
    char oom_metadata[512]; /* the user_metadata text as the trace has it */
    char oom_message[1200]; /* PyTorch's OOM text, from the model */
    bool has_advise;
    advise_result advise;
    cJSON *capture;        /* a copy of the trace's "oomlab_capture" (placeholders, modelled, torch, ...) */
    /* The range's upper end: the analysis of the capture's upper trace, where the capture met allocations the CPU
     * cannot know (its "range": cuDNN convolutions not in a measured table) and put their bounds in; NULL when
     * the prediction is a point. Owned: predict_result_free frees it. Invariant: upper->upper == NULL. */
    struct predict_result *upper;
    /* The other choices: where the capture met choices the GPU makes by timing during torch.compile (its compile
     * "timed": pad_mm, max-autotune), the analysis of a second capture that took each the other way
     * (--timed-choices other), with its own upper end; NULL when there was none or it was not run (--nproc). Owned.
     * Invariant: other->other == NULL. */
    struct predict_result *other;
    /* The frees the upper trace makes later than this trace does (benchmark tensors Python's garbage collector frees
     * on the GPU, at a point the CPU cannot know): how many, and the peaks over PREDICT_FREE_ORDERS orders of them,
     * each free at a point drawn between its two (predict_free_orders); orders 0 where there are none. */
    size_t late_frees;
    int orders;
    size_t orders_allocated[2], orders_reserved[2]; /* [lowest, highest] over the orders */
} predict_result;

/* How many orders of the late frees predict_free_orders replays (seeded: the same trace gives the same span). */
#define PREDICT_FREE_ORDERS 32

/* Where upper (the range's upper trace of lower) frees an allocation of lower later than lower does, replay lower in
 * PREDICT_FREE_ORDERS orders with each such free moved to a point drawn between its two (the first order: all at
 * their latest), uncapped under opt's settings, into res's late_frees, orders and spans. OOM_OK with orders 0 where
 * no free is later; OOM_ENOMEM_HOST; what replay refuses. */
oom_status predict_free_orders(const trace_file *lower, const trace_file *upper, const char *path,
                               const predict_options *opt, predict_result *res, char *err, size_t errcap);

/* The validator (core/check.h's shape): P1-P3 above, over res and its ends. */
oom_status predict_result_check(const predict_result *res, bool expensive, char *why, size_t cap);

/* How many choices the capture of res made by timing (the sum of its compile "timed"); 0 without torch.compile. */
int predict_timed_choices(const predict_result *res);

/* Analyse the loaded trace t (path names it in messages). OOM_EINVAL with one line in err: a capture of another
 * schema than CAPTURE_SCHEMA, no "oomlab_capture" GPU in the trace, a budget of the GPU's memory or more, a bad alloc_conf, what replay and advise refuse;
 * OOM_ENOMEM_HOST. res is zeroed first; free it with predict_result_free whatever the status. */
oom_status predict_run(const trace_file *t, const char *path, const predict_options *opt, predict_result *res,
                       char *err, size_t errcap);

void predict_result_free(predict_result *res);

/* The report for people: peaks (and the range's upper end, with what makes it), fit, the OOM, placeholders,
 * the values answered from the data, modelled and not modelled allocations, pinned host memory, then advise's
 * (and the minimum budgets of the upper trace). */
void predict_print(const predict_result *res, FILE *out);

/* The same as one JSON object (schema oomlab.predict/8): schema, script, gpu {name, total_memory, sm_count, arch,
 * context_bytes}, budget (null: the whole device), cap (what the allocator may hold: the budget's cap, or total less
 * the context and external), external_bytes, events, peak_allocated, peak_reserved, fits, fits_in_layouts (with a budget: of
 * `layouts` other orders of the segments, how many fit; null without one), layouts, oom (null or
 * {event, step, op, where, metadata, message}), placeholders, answered ([{what, count, where}]: values read from
 * the data), modelled, not_modelled ([{what, ops, source}]: ops whose CUDA allocations the capture leaves out, so
 * the prediction is low by them; [] when none), range ([{what, count, largest, bytes, source}]: what the upper
 * trace bounds; [] when the prediction is a point), pinned {calls, bytes, largest} (host memory Tensor.pin_memory
 * asked for), capture {torch, ops, seconds, op_seconds, op_median_us, steps, deferred {parameters, elements, bytes}: host tensors never materialised}, advise (advise's JSON, oomlab.advise/2, or null), upper (the
 * same object for the upper trace, its own "upper" null; null when the prediction is a point), other (the same object
 * for the other choices' capture, its own "other" null; null where there was none). NULL when out of memory. */
cJSON *predict_json(const predict_result *res, const char *script);

/* Do two loaded traces hold the same events (action, address, size), device by device? `oomlab predict --nproc`'s
 * test that ranks are symmetric in memory: their user_metadata (which op, which line) may differ (rank 0 alone
 * printing a loss frees its tensors at another line), their allocator replays cannot. */
bool predict_traces_same(const trace_file *a, const trace_file *b);

/* `--sweep NAME=LO..HI`: the largest value in [lo, hi] whose capture fits, by bisection, assuming that what fits
 * at a value fits below it. probe(value, ctx, &point) runs one fresh capture and fills the point; a non-zero
 * return ends the search with that status. */
typedef struct predict_probe {
    int64_t value;
    bool fits;
    size_t peak_allocated, peak_reserved;
} predict_probe;

#define PREDICT_SWEEP_MAX 64

typedef struct predict_sweep {
    int64_t lo, hi;
    predict_probe probes[PREDICT_SWEEP_MAX]; /* in the order run */
    size_t nprobes;
    int64_t found;       /* the largest value that fits; lo - 1 when none does */
    bool monotonic;      /* false when a larger value showed a lower peak reserved than a smaller one */
    int64_t nonmono_lo, nonmono_hi; /* the pair that showed it */
} predict_sweep;

typedef int (*predict_probe_fn)(int64_t value, void *ctx, predict_probe *out);

/* Probe lo, then hi, then bisect between the largest that fits and the smallest that does not. Returns 0 or the
 * first non-zero return of probe. */
int predict_sweep_run(int64_t lo, int64_t hi, predict_probe_fn probe, void *ctx, predict_sweep *sw);

OOM_END_DECLS

#endif
