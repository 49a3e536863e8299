/* sweep.h - one parameter of a scenario swept over a range: peak memory against the parameter, and the largest
 * value that fits the budget.
 *
 * `oomlab run SCENARIO --sweep PARAM=LO..HI` runs the selected variants (--variant; none: all) at every power of
 * two in [LO, HI], each run in a fresh runtime (its own device and caching allocator, as a new process would
 * be), with the other options as for a run. Per value and variant it records the outcome and the peak
 * allocated and reserved bytes. Then, per variant, two searches for the largest value that fits (a run that
 * completes without an OOM), each probe a fresh run:
 *   find_executable_batch_size  as accelerate's decorator does it (accelerate/utils/memory.py, current
 *                               versions): start at HI and on an OOM take int(value * 0.9), until one fits
 *                               (older accelerate halved; the found value is below the largest by up to 10%);
 *   bisection                   exact, assuming that what fits at a value fits below it: between the largest
 *                               power of two that fits and the next value of the series that does not (HI when
 *                               every power of two fits, LO when none does).
 * A run whose result is known already (the same value) is not repeated: runs are deterministic.
 * The table and the results JSON: results/sweep_report.h.
 */
#ifndef OOMLAB_SWEEP_H
#define OOMLAB_SWEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/compat.h"
#include "run/runner.h"

OOM_BEGIN_DECLS

#define SWEEP_FACTOR 0.9 /* accelerate's reduce_batch_size_fn: batch_size = int(batch_size * 0.9) */

/* One run of one variant at one value. */
typedef struct sweep_point {
    int64_t value;
    variant_outcome outcome;
    int64_t peak_allocated, peak_reserved;
    bool reproduced, passed;
    char oom_what[96]; /* where the OOM happened ("" when none) */
    char error[160];   /* OUTCOME_ERROR: what went wrong */
} sweep_point;

/* A search's runs, in order, and what it found (0: nothing in range fits). */
typedef struct sweep_search {
    int64_t found;
    int64_t start;
    int nruns;
    int64_t runs[128];
    bool fits[128];
} sweep_search;

typedef struct sweep_variant {
    const scenario_variant *v;
    sweep_point *series; /* the powers of two, ascending */
    size_t nseries;
    sweep_point *known; /* every run made, for reuse */
    size_t nknown, capknown;
    bool monotonic;     /* false: some run fits at a value above one that does not (any run: the series or a search) */
    int64_t window_fails, window_fits; /* !monotonic: the smallest value that fits above one that does not, and the
                                          largest value below it that does not */
    sweep_search accelerate, bisection;
} sweep_variant;

typedef struct sweep_result {
    const scenario *sc;
    size_t param;        /* the swept parameter's index in sc->params */
    int64_t lo, hi;
    char backend[8];
    char device[96];
    size_t budget;
    run_scale scale;
    bool dry_run;
    bool uncached;             /* caching off (run_result.uncached) */
    char uncached_source[40];  /* the variable that turned it off */
    int64_t params[RUN_MAX_PARAMS]; /* every parameter as run (the swept one: its default) */
    char started[32];
    sweep_variant *variants;
    size_t nvariants;
    int runs;    /* fresh runs made */
    bool passed; /* every run showed what it must */
    int jobs;    /* the series' runs at once (runner_jobs) and why; the searches run one at a time */
    char jobs_why[RUN_JOBS_WHY_MAX];
} sweep_result;

/* Parse "PARAM=LO..HI" (integers). false: not that form. */
bool sweep_parse(const char *arg, char *param, size_t cap, int64_t *lo, int64_t *hi);

/* Check the sweep against the scenario and the options (the parameter exists, LO..HI lies in its range and
 * holds a power of two, no --set of it), then runner_validate. OOM_EINVAL with one line in err. */
oom_status sweep_validate(const scenario *sc, const run_options *o, const char *param, int64_t lo, int64_t hi,
                          char *err, size_t errcap);

/* Validate, then sweep. OOM_EINVAL / OOM_ENODEV before anything runs (err says why); OOM_OK once done. */
oom_status runner_sweep(const scenario *sc, const run_options *o, const char *param, int64_t lo, int64_t hi,
                        sweep_result *out, char *err, size_t errcap);
void sweep_result_free(sweep_result *r);

OOM_END_DECLS

#endif
