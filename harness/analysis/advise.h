/* advise.h - `oomlab advise`: is an OOM fragmentation, and which allocator setting recovers it?
 *
 * From one recorded trace (trace/trace.h, parsed once), replayed many times through the allocator model:
 *   - the workload's need: the peak of the bytes live at once, each request rounded to PyTorch's 512-byte block
 *     (an OOM entry counts its rounded size on top of what was live): no setting runs below it;
 *   - per allocator setting (PyTorch's defaults, expandable_segments, max_split_size_mb, roundup_power2_divisions,
 *     garbage_collection_threshold, the recording's own, the user's), its minimum budget. DEFINITION: the budget B,
 *     a whole number of MiB applied as set_per_process_memory_fraction(B / total) is (cachealloc_budget_cap), that
 *     bisection between a budget known to fail (below the need) and one known to pass (above the setting's
 *     uncapped peak reserved bytes) ends on: the replay runs without an OOM at B and runs out of memory at
 *     B - 1 MiB. The budget is not monotonic in every trace (docs/parity.md, "The budget a run needs"): a run can
 *     also pass in a window below B, and B is the boundary that this bisection, from these ends, finds;
 *   - fragmentation: the default's minimum budget less the need, and what the best setting saves of it;
 *   - with a recorded budget (--budget or the file's "budget"): whether each setting runs at it, so a recorded OOM
 *     reads as "would have fitted under S";
 *   - growth across repeated phases: step starts from --step-marker (user_metadata set with
 *     torch.cuda.memory._set_memory_metadata) or found from the recorded pattern of allocation sizes, allocated
 *     bytes at each, and steady growth reported as a leak with the sizes of the blocks that accumulate.
 * Every replay is a what-if (trace/replay.h, fast mode): segments are placed by the sim's model of the driver,
 * whose first kernel launch opt->kernels places.
 */
#ifndef OOMLAB_ADVISE_H
#define OOMLAB_ADVISE_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc/allocconf.h"
#include "trace/replay.h"
#include "trace/trace.h"
#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define ADVISE_MAX_EXTRA 8
#define ADVISE_MAX_ROWS 24
#define ADVISE_MAX_ACCUM 8
#define ADVISE_PLOT_POINTS 400 /* the trace cut into this many runs for the plot's series */

typedef struct advise_options {
    bool one_device;         /* advise on device_traces[device]; else the one device that has events */
    int device;
    replay_kernels kernels;  /* when the recorded program first launched a kernel (replay.h) */
    size_t kernel_at;
    size_t budget_bytes;     /* the budget of the recorded run; 0: the file's "budget", else none */
    const char *extra[ADVISE_MAX_EXTRA]; /* more settings to try (PYTORCH_CUDA_ALLOC_CONF syntax) */
    size_t nextra;
    bool only;               /* try only PyTorch's defaults, the recording's own settings and extra[] */
    const char *step_marker; /* NULL: steps from the allocation pattern; else user_metadata prefix */
    bool series;             /* sample allocated and reserved over the trace for the plot */
    size_t device_total;     /* the GPU the budgets are fractions of; 0: an H100 80GB (replay_options) */
    size_t device_context;   /* with device_total: its CUDA context's bytes */
    const char *prediction_conf; /* `oomlab predict --alloc-conf`: the settings its own peaks and fit are under
                                  * (said in the report; the table tries every setting either way); NULL: none */
    int layouts;             /* seeded layouts each row is bisected under besides the model's: 0 ADVISE_LAYOUTS,
                              * negative none (--layouts 0: the model's alone, about a tenth of the replays), else up to
                              * ADVISE_MAX_LAYOUTS */
} advise_options;

/* Seeded layouts each row's minimum budget is also bisected under (replay_options.layout_seed 1..N): the range
 * over where the driver may put segments. Which of two equal free blocks a request reuses follows their
 * segments' addresses, and the driver's placement depends on its own allocations (kernel modules, libraries'
 * handles: a compiled program loads hundreds), which no model sees; a budget that frees and remakes segments
 * can then end elsewhere (docs/parity.md, "Under a budget: a range over layouts"). */
#define ADVISE_LAYOUTS 16
#define ADVISE_MAX_LAYOUTS 64

/* One setting's figures. Invariant: fits implies min_budget > 0 and passes_at == min_budget, fails_at ==
 * min_budget - 1 MiB, and layout_lo <= min_budget <= layout_hi; !fits implies min_budget == layout_lo ==
 * layout_hi == 0. */
typedef struct advise_row {
    char conf[ALLOC_CONF_TEXT_MAX]; /* the setting as given ("" : PyTorch's defaults) */
    const char *why;                /* what the setting is ("PyTorch's defaults", "the recording's own", ...) */
    bool recorded;                  /* the recording's own settings */
    bool fits;                      /* some budget up to the device's memory runs without an OOM */
    size_t min_budget;              /* bytes, a whole number of MiB (the definition above), the model's layout */
    size_t layout_lo, layout_hi;    /* the least and greatest minimum budget over the model's and ADVISE_LAYOUTS
                                     * seeded layouts (bytes; device_total: some layout fits in none) */
    size_t peak_reserved;           /* of the replay without a budget */
    size_t peak_allocated;          /* of the replay without a budget */
    int at_recorded;                /* with a recorded budget: 1 runs, 0 runs out of memory; -1 not tried */
    size_t replays;                 /* replays this row took */
} advise_row;

/* A size of block that accumulates across steps. */
typedef struct advise_accum {
    size_t size;  /* requested bytes */
    size_t count; /* such blocks allocated in steps 2..n-1 and still live at the last step's start */
} advise_accum;

typedef struct advise_result {
    char path[512];
    int device;
    size_t events;
    size_t device_total;          /* the sim's device memory (an H100's, or opt->device_total) that the budgets
                                   * are fractions of */
    bool prediction;              /* the trace has no segment events (a prediction: trace/replay.h) */
    size_t need;                  /* the workload's need (above) */
    long need_event;              /* where it peaks */
    advise_row rows[ADVISE_MAX_ROWS];
    size_t nrows;                 /* rows[0] is PyTorch's defaults */
    long best;                    /* the fitting row with the smallest minimum budget (the first on a tie); -1 */
    alloc_conf recorded;          /* the recording's settings (PyTorch's defaults when unreadable) */
    char recorded_error[ALLOC_CONF_ERR_MAX]; /* why allocator_settings did not parse ("" if it did): the row of the
                                              * recording's own settings is left out, and the output says so */
    bool recorded_default;        /* they are PyTorch's defaults */
    char prediction_conf[ALLOC_CONF_TEXT_MAX]; /* opt->prediction_conf ("" : none) */
    size_t recorded_budget;       /* 0: none known */
    const char *budget_source;    /* "--budget", "file" or "none" */
    long recorded_oom_event;      /* the first oom entry of the trace; -1 if none */
    /* growth */
    bool steps_from_marker;
    size_t nsteps;
    size_t *step_event;           /* [nsteps] the event each step starts at */
    int64_t *step_alloc;          /* [nsteps] allocated_bytes.all.current there (the defaults' replay) */
    bool leak;                    /* steady growth from step 2 on */
    double leak_per_step;         /* bytes a step, from step 2 to the last */
    advise_accum accum[ADVISE_MAX_ACCUM];
    size_t naccum;
    /* the plot's series: the defaults and the best setting, each at its minimum budget */
    size_t npoints;
    int64_t *series[4];           /* default allocated, default reserved, best allocated, best reserved */
    replay_kernels kernels;       /* opt->kernels, and kernel_at: what the address model was told */
    size_t kernel_at;
    size_t replays;               /* all replays */
    int layouts;                  /* the seeded layouts each row was bisected under (advise_options.layouts) */
} advise_result;

/* Advise on a loaded trace (path names it in messages). OOM_EINVAL with one line in err: no events, several
 * devices and none picked, a device without events, a bad setting in opt->extra, a file "budget" that is not a
 * byte count; OOM_ENOMEM_HOST. res is zeroed first; free it with advise_result_free whatever the status. */
oom_status advise_run(const trace_file *t, const char *path, const advise_options *opt, advise_result *res,
                      char *err, size_t errcap);

void advise_result_free(advise_result *res);

/* The table, the verdict and the growth report, for people. */
void advise_print(const advise_result *res, FILE *out);

/* The same as one JSON object (schema oomlab.advise/2; /1 had no "layouts", "layouts_definition" or a setting's
 * "min_budget_mib_over_layouts"); NULL when out of memory. */
cJSON *advise_json(const advise_result *res);

/* The words of the verdict (also in the JSON), into buf. */
void advise_verdict(const advise_result *res, char *buf, size_t cap);

/* Draw the result (res->npoints > 0: advise ran with series): minimum budget per setting as bars, allocated and
 * reserved over the trace for the defaults and the best setting. PNG or SVG by the extension, via gnuplot
 * (plot.h). OOM_EINVAL / OOM_EIO with err. */
oom_status advise_plot(const advise_result *res, const char *out_path, char *err, size_t errcap);

OOM_END_DECLS

#endif
