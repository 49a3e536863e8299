/* scenario.h - the scenario interface: one failure mode, its variants, and what each variant must show.
 *
 * A scenario (scenarios/NAME.c) reproduces one PyTorch OOM failure mode with the runtime (tensor.h, ops.h,
 * nn.h, optim.h) and lists its variants:
 *   bug     the failure as users meet it;
 *   fix-*   a fix that works, and says why: at the scenario's budget it fits (the runner checks it: a fix that
 *           runs out of memory is ✗ at any parameters, never "not reproduced");
 *   partial advice that lowers memory, but not enough: at the scenario's budget it still runs out; it reports
 *           the bytes it saved against the bug (scn_saved), shown with its own mark (◐), not ✓;
 *   myth-*  popular advice that does not help, shown failing (or a seed article's false claim, shown false).
 * A variant's outcome is its end result: an OOM a variant provokes on purpose before its remedy (the seed's failing
 * request before `del`) is a step of its story, caught before scn_remedy, not its outcome.
 * The runner (runner.h) gives each variant a fresh runtime under the scenario's budget and the variant's
 * allocator settings, and calls the scenario's run function, which:
 *   - does what the PyTorch code does, marking steps with scn_step (a sample of the allocator's counters);
 *   - catches a device OOM where PyTorch code would raise it, with scn_caught (the OOM is recorded, with the
 *     allocator's state at that moment, and the run goes on, as after `except torch.OutOfMemoryError`);
 *   - ends with scn_expect lines: what this variant must show, asserted on the measured counters.
 * Every number comes from the caching allocator's counters; a scenario computes no byte counts itself.
 */
#ifndef OOMLAB_SCENARIO_H
#define OOMLAB_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/cachealloc.h"
#include "core/compat.h"
#include "alloc/memstats.h"
#include "runtime/runtime.h"
#include "core/status.h"

OOM_BEGIN_DECLS

typedef enum variant_kind { VARIANT_BUG, VARIANT_FIX, VARIANT_MYTH, VARIANT_PARTIAL } variant_kind;

const char *variant_kind_str(variant_kind k); /* "bug", "fix", "myth", "partial" */

/* A knob of the scenario, set with --set name=value. Values are integers in [min, max]. def is the value at
 * full scale (PyTorch's twin runs it), ci the value at CI scale (0: the same as def): ci shrinks a workload so the
 * whole catalog computes on sim's CPU references in seconds, while every expectation keeps its meaning. */
typedef struct scenario_param {
    const char *name;
    const char *help;
    int64_t def, min, max;
    int64_t ci;
} scenario_param;

/* The workload's scale (--scale): full, the size PyTorch's twin runs, or ci. */
typedef enum run_scale { SCALE_AUTO = 0, SCALE_CI, SCALE_FULL } run_scale;
const char *run_scale_str(run_scale s); /* "auto", "ci", "full" */
/* A parameter's default at a scale (SCALE_AUTO reads as full). */
int64_t scenario_param_default(const scenario_param *p, run_scale s);

typedef struct scenario_variant {
    const char *name;       /* "bug", "fix-expandable-segments", "myth-empty-cache", ... */
    variant_kind kind;
    const char *summary;    /* one line: what the variant does */
    const char *alloc_conf; /* allocator settings it runs under, applied over the user's ("" = none) */
} scenario_variant;

typedef struct scn scn; /* a variant's run (runner.c) */

typedef struct scenario {
    const char *name;  /* the catalog key: `oomlab run NAME` */
    const char *title; /* one line */
    const char *story; /* a paragraph: cause, what the user sees, the fix, and why it works */
    size_t default_budget; /* at full scale */
    size_t ci_budget;      /* at CI scale (0: default_budget), so that the OOMs still happen where they must */
    const scenario_param *params;
    size_t nparams;
    const scenario_variant *variants;
    size_t nvariants;
    /* Run variant v in s's runtime. Returns OOM_OK, or a failure that is not a measured result (an autograd
     * error it did not expect, a host OOM): the runner reports the variant as an error. */
    oom_status (*run)(scn *s, const scenario_variant *v);
    /* Seconds a variant may run before the runner kills it and reports it timed out (each variant runs in a child
     * process: runner.h); 0: RUN_DEFAULT_TIMEOUT_S. `oomlab run --timeout` overrides it. */
    unsigned timeout_s;
} scenario;

/* ---- for scenario code -------------------------------------------------------------------------------- */

/* The variant's runtime. */
rt *scn_rt(scn *s);
/* A parameter's value (the scale's default unless --set changed it). */
int64_t scn_param(const scn *s, const char *name);
/* The scale the variant runs at, and whether kernels compute (false in a dry run: counters only, no values, so
 * expectations about values say they were not measured). */
run_scale scn_scale(const scn *s);
bool scn_computes(const scn *s);
/* The budget in force (bytes) as given to the runner. */
size_t scn_budget(const scn *s);
/* A device-synchronised clock: waits for the device, then reads a monotonic clock (seconds). Time a region as
 * torch.cuda.synchronize(); t0 = time.perf_counter() ... torch.cuda.synchronize(); t1 = ... does. */
double scn_clock(scn *s);
/* A measured figure that is not an allocator counter (time per sample, a gradient norm, bytes per step derived
 * from samples), recorded with the sample taken last (or -1 before the first); in the results JSON under
 * "metrics" and in the table's details. unit: "s", "bytes", "bytes/step", "1", ... */
void scn_metric(scn *s, const char *name, const char *unit, double value);
/* A line for the reader (shown under the variant in the table, "notes" in the JSON). */
void scn_note(scn *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* At these parameters the failure this variant demonstrates does not happen (the budget has room, say): the
 * variant is reported "not reproduced", with why (made its first note, ahead of any noted before), and its
 * expectations say what holds instead. It does not fail
 * the run: a parameter change is not a broken mechanism. */
void scn_not_reproduced(scn *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The remedy begins: take a sample under the label (as scn_step) and make every OOM caught so far a step of the
 * variant's story (the failure it shows before applying its remedy), not its outcome: the outcome is OOM only if
 * an OOM is caught after this call. The first OOM stays scn_first_oom (the story's, then). */
void scn_remedy(scn *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A partial variant's saving: the bytes it needs less than the bug at the same point, measured from the allocator's
 * counters, and what they are ("the forward keeps 384 MiB, the bug's 512 MiB"). A partial variant that does not
 * call it, or saves nothing, fails its kind's check. */
void scn_saved(scn *s, int64_t bytes, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Sample the allocator's counters under a label ("step 3", "freed the short-lived tensors"). */
void scn_step(scn *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* `except torch.OutOfMemoryError`: if the runtime holds a device OOM, record it (the first one is the
 * variant's OOM), clear it and return true. Any other failure stays in the runtime and returns false. */
bool scn_caught(scn *s, const char *what);
/* The same for pinned host memory: a cudaHostAlloc/cudaHostRegister that failed (`RuntimeError: CUDA error: out
 * of memory` from pin_memory() or a loader's pin thread). Records it as the variant's OOM if it is the first,
 * with message as its text; the variant's outcome is then OOM, of pinned host memory. */
void scn_caught_pinned(scn *s, const char *what, const char *message);
/* Assert what the variant must show; the description says it in words, with the measured figures. */
void scn_expect(scn *s, bool holds, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The allocator's statistics now, and one of them by its memory_stats() name ("reserved_bytes.all.current"). */
const memstats *scn_stats(const scn *s);
int64_t scn_stat(const scn *s, const char *key);
/* The first OOM of the variant, or NULL. */
const struct scn_oom *scn_first_oom(const scn *s);

/* A recorded OOM: where it happened and the allocator's state at that moment. */
typedef struct scn_oom {
    int step;                  /* samples taken before it */
    char what[96];
    size_t requested;          /* bytes asked for */
    size_t alloc_size;         /* the segment the allocator tried to get */
    size_t allocated, reserved;
    size_t reserved_unallocated;
    size_t largest_free_block;
    char message[RT_MESSAGE_MAX]; /* PyTorch's text, then oomlab's two figures */
    int device;                /* the device it happened on: 0, or k of scn_rt_device */
    bool pinned;               /* pinned host memory ran out (scn_caught_pinned), not the device: the allocator
                                * figures above are 0 */
} scn_oom;

/* ---- several devices (the model_too_large scenario) ------------------------------------------------------ */

/* Device k of the variant: 0 is scn_rt(s); k = 1 .. SCN_MAX_DEVICES-1 opens, on first use, another runtime (and
 * every one below k not yet open), each with its own device and caching allocator under the same budget and
 * settings, as cuda:k has its own allocator and its own set_per_process_memory_fraction in PyTorch. On sim each
 * is another simulated device of the same capacity; on cuda each is a logical device of the GPU the variant
 * runs on (a second allocator and budget on that GPU), labelled so in the table and the JSON. scn_step samples
 * every open device; scn_caught catches an OOM on any of them; each ends checked clean. NULL when k is out of
 * range or the runtime cannot be opened (the variant then ends as an error, recorded in scn_rt(s)). */
#define SCN_MAX_DEVICES 8
rt *scn_rt_device(scn *s, int k);
/* Devices open (1 + the extra ones), and one allocator statistic of device k (0 when k is not open). */
int scn_devices(const scn *s);
int64_t scn_stat_device(const scn *s, int k, const char *key);

/* A communicator over devices 0 .. n-1 of the variant (device/devcomm.h: one rank per device, opening those not
 * yet open), made on first use and closed when the variant ends, after its run function returns. Its engine and
 * NCCL's buffers per rank (outside the caching allocator: the OOM message's non-PyTorch memory) are noted for the
 * reader. NULL on failure, recorded in scn_rt(s); a second call with another n fails the same way. */
struct devcomm *scn_comm(scn *s, int n);

/* ---- the catalog (registry.c) --------------------------------------------------------------------------- */

extern const scenario *const scenario_catalog[];
extern const size_t scenario_catalog_size;
const scenario *scenario_find(const char *name);
/* Make a scenario that is not in the catalog findable by name (scenario_find), never listed: the test-only
 * scenarios (tests/fixtures) register themselves this way. At most SCENARIO_MAX_REGISTERED; false when full. */
#define SCENARIO_MAX_REGISTERED 8
bool scenario_register(const scenario *sc);
const scenario_variant *scenario_variant_find(const scenario *sc, const char *name);

/* Does name match the catalog's name pattern: a lowercase letter, then lowercase letters, digits, '_' and '-', at
 * most SCENARIO_NAME_MAX bytes ("fragmentation", "fix-expandable-segments")? Every scenario and variant of the
 * catalog does (a test checks). A scenario or variant name read from an input becomes part of a path, or a row of
 * the history, only after it passes this: "../../escaped" never does. */
#define SCENARIO_NAME_MAX 64
bool scenario_name_ok(const char *name);

OOM_END_DECLS

#endif
