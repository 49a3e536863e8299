/* runner.h - running a scenario's variants and collecting what they measured.
 *
 * Each variant runs in a fresh runtime (its own device and caching allocator) under the budget B, applied as
 * set_per_process_memory_fraction(B / total) is: the cap is (size_t)(B / total * total) in double (one byte
 * under B for 1 GiB on an H100), total being the GPU's totalGlobalMem or the sim's capacity (an H100's). So an
 * OOM happens at the same step on every GPU and on sim. A budget above the device's total is bad input, as
 * PyTorch refuses a fraction above 1. The allocator settings are the user's (alloc_conf, picked by the caller
 * with alloc_conf_pick: --alloc-conf, then the variables of ALLOC_CONF_ENV_VARS) with the variant's own keys on
 * top; the runner never reads the environment itself.
 *
 * Isolation: each variant runs in a child process (fork), which sends its variant_result back through a pipe
 * (isolate.h); the parent writes nothing of a variant's own and keeps no allocator of its own, so counters are
 * the child's alone. A variant that dies of a signal (or exits without reporting, or ends on a CUDA error, which
 * leaves a CUDA context unusable) is OUTCOME_CRASHED; one that runs past its timeout (run_options.timeout_s, else
 * the scenario's timeout_s, else RUN_DEFAULT_TIMEOUT_S) is killed (SIGKILL) and is OUTCOME_TIMEOUT; the next
 * variant runs either way. The parent never initialises CUDA: it learns the GPU from device_cuda_probe() (a
 * child of its own), so every variant's child can. run_options.no_fork runs the variants in this process (for a
 * debugger): no isolation, no timeout. Where CUDA was already initialised in this process before runner_run (a
 * caller's own device_open on cuda), a child could not use it: variants on cuda then run in this process, and
 * run_result.isolation says so.
 *
 * Besides the scenario's own expectations, every variant is checked to end clean: every tensor and autograd node
 * released and nothing left allocated, so a scenario cannot hide a leak of its own.
 */
#ifndef OOMLAB_RUNNER_H
#define OOMLAB_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "core/compat.h"
#include "device/device.h"
#include "alloc/memstats.h"
#include "run/scenario.h"

OOM_BEGIN_DECLS

#define RUN_MAX_SETS 16
#define RUN_MAX_PARAMS 32 /* parameters a scenario may declare */
#define RUN_MAX_VARIANTS 32 /* --variant options */

typedef struct run_set {
    const char *name;
    int64_t value;
} run_set;

/* A variant's time limit when neither the scenario nor --timeout gives one. */
#define RUN_DEFAULT_TIMEOUT_S 600.0

/* `oomlab faultsweep` (faultsweep.h): faults to inject into a variant and the findings to collect. */
typedef struct run_fault {
    uint64_t device_at; /* the device_at-th device allocation of the variant and every later one fail (device.h's
                           device_fault_plan, over all of the variant's devices); 0: none, only counted */
    uint64_t host_at;   /* the same for pinned host allocations */
} run_fault;

/* What a variant run under a run_fault found (every check is made in the process that ran the variant). */
typedef struct run_fault_findings {
    uint64_t device_calls, host_calls; /* allocation attempts counted */
    bool device_fired, host_fired;     /* the injected fault was reached */
    bool surfaced;   /* device fault: the allocator reported an OOM (num_ooms > 0 on some device) */
    bool status_ok;  /* ended ok, with caught OOMs, or on an uncaught device or pinned OOM: no other failure */
    bool released;   /* every tensor and autograd node freed, 0 bytes allocated, no pinned block handed out */
    bool valid;      /* cachealloc_check and hostalloc_check pass on every device */
    bool leak_checked, no_leak; /* LeakSanitizer ran in the child (asan builds) and found nothing */
    char detail[320]; /* the first thing that was not clean; "" when clean */
} run_fault_findings;

typedef struct run_options {
    device_kind backend;
    bool dry_run;           /* sim without backing memory or compute */
    size_t budget;          /* 0: the scenario's default */
    const char *alloc_conf; /* the user's settings text; NULL or "" for PyTorch's defaults */
    const char *alloc_conf_source; /* where it came from (alloc_conf_pick's source); NULL: "default" */
    run_scale scale;        /* SCALE_AUTO: full on cuda and in a dry run, ci on sim when computing */
    const char *variants[RUN_MAX_VARIANTS]; /* --variant (repeatable); none: all */
    int nvariants;
    run_set sets[RUN_MAX_SETS];
    int nsets;
    uint64_t seed;
    bool real_addresses;    /* cuda: order blocks by the driver's addresses (rt_options.real_addresses) */
    bool no_fork;           /* run the variants in this process (a debugger's view): no isolation, no timeout */
    int jobs;               /* --jobs: variants' processes at once (runner_jobs); 0: the default */
    double timeout_s;       /* seconds per variant; 0: the scenario's timeout_s; < 0: none */
    const run_fault *fault; /* faultsweep: inject and check (NULL: a normal run) */
    bool uncached;          /* caching off (cachealloc_options.uncached), picked by alloc_no_caching_pick */
    const char *uncached_source; /* the variable that decided it; NULL: none did */
} run_options;

/* The allocator's counters at a step (memory_stats() names in the results JSON). */
typedef struct scn_sample {
    char label[64];
    int64_t allocated, reserved, active, inactive_split; /* *_bytes.all.current */
    int64_t allocated_peak, reserved_peak;               /* *_bytes.all.peak */
    int64_t step_peak;                                   /* the most allocated since the previous sample
                                                          * (cachealloc_take_window_peak); -1: not taken */
    int64_t segments;                                    /* segment.all.current */
    int64_t device_allocs, device_frees;                 /* num_device_alloc, num_device_free */
    int64_t alloc_retries, ooms;                         /* num_alloc_retries, num_ooms */
} scn_sample;

typedef struct scn_metric_value {
    char name[48];
    char unit[16];
    double value;
    int sample; /* index of the sample it goes with; -1 before the first */
} scn_metric_value;

typedef struct scn_expectation {
    bool holds;
    char text[320];
} scn_expectation;

/* An OOM caught (scn_caught), as the plot marks it: where, what was asked, and the allocator then. */
typedef struct scn_oom_mark {
    int step; /* samples taken before it */
    char what[96];
    size_t requested, alloc_size, allocated, reserved;
    int device;
} scn_oom_mark;

typedef enum variant_outcome { OUTCOME_OK, OUTCOME_OOM, OUTCOME_ERROR, OUTCOME_CRASHED, OUTCOME_TIMEOUT } variant_outcome;
const char *variant_outcome_str(variant_outcome o); /* "ok", "oom", "error", "crashed", "timeout" */

typedef struct variant_result {
    const scenario_variant *v;
    char alloc_conf[ALLOC_CONF_TEXT_MAX]; /* the effective settings, canonical form */
    variant_outcome outcome;
    char error[RT_MESSAGE_MAX]; /* OUTCOME_ERROR, _CRASHED, _TIMEOUT: what went wrong */
    oom_status status;          /* OUTCOME_ERROR: the failure's status */
    int signal;                 /* OUTCOME_CRASHED: the signal that ended the child (0: none) */
    run_fault_findings fault;   /* under run_options.fault */
    scn_oom oom;                /* OUTCOME_OOM: the first OOM */
    int ooms;                   /* OOMs caught */
    int story_ooms;             /* of them, caught before scn_remedy: steps of the story, not the outcome */
    bool saved_set;             /* scn_saved was called (a partial variant) */
    int64_t saved;              /* scn_saved: bytes needed less than the bug */
    char saved_what[200];       /* scn_saved: what they are */
    scn_oom_mark *oom_marks;    /* each OOM caught, in order (noom_marks == ooms; the first is also `oom`) */
    size_t noom_marks;
    /* the allocator's layout at the first OOM, on the device it happened on (cachealloc_oom_layout); NULL with
     * oom_nlayout 0 when there was no OOM */
    ca_snap_segment *oom_layout;
    size_t oom_nlayout;
    /* a fix's layout at its peak: at the first sample with the most reserved bytes (device 0), what the segment map
     * draws beside the OOM's (cachealloc_layout); NULL with fix_nlayout 0 for other kinds, fix_step -1 */
    ca_snap_segment *fix_layout;
    size_t fix_nlayout;
    int fix_step;           /* the sample it was taken at */
    int64_t fix_reserved;   /* reserved bytes then */
    memstats stats;             /* at the end of the variant */
    scn_sample *samples;
    size_t nsamples;
    scn_expectation *expect;
    size_t nexpect;
    scn_metric_value *metrics;
    size_t nmetrics;
    char (*notes)[RT_MESSAGE_MAX]; /* long enough for an error text a variant demonstrates */
    size_t nnotes;
    bool reproduced; /* false: scn_not_reproduced said why the failure does not happen at these parameters */
    bool expected;   /* no error and every expectation of the scenario's holds */
    bool kind_holds; /* the outcome is what the kind promises: a fix fits, a partial saves bytes (scn_saved) */
    bool kind_promised; /* run at the scenario's own parameters and budget (a fix: at any budget), where its kind is
                         * a promise: a kind that does not hold fails the variant; else it is shown (✗), not failed */
    char kind_text[640]; /* what the kind promises, said with the measured outcome ("" for a bug or a myth) */
    bool passed;     /* expected and kind_holds */
    double seconds;     /* wall time of the variant's run */
    double cpu_seconds; /* the process's CPU time meanwhile (all its threads: a DataLoader's workers too) */
    struct scn_device_result *devices; /* the variant's devices 1.. (scn_rt_device); device 0 is the above */
    size_t ndevices;
} variant_result;

/* A variant's extra device k >= 1 (scn_rt_device): its own allocator's samples, taken at every scn_step in step
 * with the variant's own (the steps before it was opened are recorded as zeros with their labels: its allocator
 * did not exist yet), and its statistics at the end. */
typedef struct scn_device_result {
    int index;
    char name[128];  /* "sim:1 (another simulated device)", "cuda:0 as logical device 1 (...)" */
    bool logical;    /* cuda: an allocator and budget of its own on GPU 0, the machine having no GPU j of its own */
    size_t cap;      /* its allocator's cap */
    memstats stats;  /* at the end of the variant */
    scn_sample *samples;
    size_t nsamples;
} scn_device_result;

typedef struct run_result {
    const scenario *sc;
    char backend[8];
    char device[96];
    size_t budget;       /* B: the scenario's default or --budget */
    size_t cap;          /* the cap in force (cachealloc_budget of the first variant's allocator); 0: none */
    size_t device_total; /* the total the fraction is of */
    char conf_source[32];                /* "--alloc-conf", the variable's name, or "default" */
    char conf_user[ALLOC_CONF_TEXT_MAX]; /* the user's settings text as given */
    run_scale scale;     /* resolved: SCALE_CI or SCALE_FULL */
    bool dry_run;
    bool model_order;    /* cuda: blocks ordered by sim's model of the driver's addresses (device_order_key) */
    bool uncached;       /* caching off (run_options.uncached) */
    char uncached_source[40]; /* the variable that decided it, or "" */
    int64_t params[RUN_MAX_PARAMS]; /* the scenario's parameters, in its order */
    char started[32];   /* UTC, ISO 8601 */
    variant_result *variants;
    size_t nvariants;
    bool passed;
    const char *isolation; /* NULL: each variant in a child process; else why they ran in this one */
    size_t crashed, timed_out; /* variants that crashed or ran past their timeout */
} run_result;

/* A sample of the allocator's counters m, as scn_step takes it at every step (the label is the caller's). */
void runner_sample_of(const memstats *m, scn_sample *smp);

/* The scale a run gets: o->scale unless SCALE_AUTO, then full on cuda (explicit or auto with a GPU) and in a dry
 * run, else ci. */
run_scale runner_resolve_scale(const run_options *o);

/* Check the options against the scenario (variant, --set names and ranges, allocator settings) without running
 * anything: OOM_EINVAL with one line in err naming the problem. */
oom_status runner_validate(const scenario *sc, const run_options *o, char *err, size_t errcap);
/* The parameter of sc named name (its index into *idx when idx is not NULL); NULL if sc has none. */
const scenario_param *runner_param(const scenario *sc, const char *name, size_t *idx);
/* Whether o's --variant list (none: every variant) selects v. */
bool runner_selects(const run_options *o, const scenario_variant *v);

#define RUN_MAX_JOBS 256    /* --jobs at most */
#define RUN_JOBS_WHY_MAX 160 /* runner_jobs' reason */

/* How many variants' processes run at once for o (runner_run_batch's jobs), with the reason in why: --jobs, else
 * the online cores; 1 under --no-fork; on cuda no more than the GPU's free memory (device_cuda_probe) holds
 * processes of budget (the largest budget of the runs) plus a CUDA context each, every process keeping its own
 * cap. */
int runner_jobs(const run_options *o, size_t budget, char *why, size_t whycap);

/* Run n runs (scenario scs[k] under opts[k] into outs[k]) with their variants as children, at most jobs at once:
 * every run is validated and prepared first (an error frees every outs[k] and returns as runner_run's do), then
 * the variants run, started in the runs' order; each outs[k] is what runner_run(scs[k], opts[k]) gives alone,
 * whatever jobs is (each variant is a fork of this process, which writes nothing meanwhile; only the
 * variants' times differ). Variants of a run whose isolation is set (--no-fork, CUDA already here) run in this
 * process first. */
oom_status runner_run_batch(const scenario *const *scs, const run_options *const *opts, size_t n, run_result *outs,
                            int jobs, char *err, size_t errcap);

/* Validate, then run. OOM_EINVAL (bad input, err says why: also a budget above the device's total) or
 * OOM_ENODEV (no such backend) before anything runs; OOM_OK once every selected variant ran, whatever their
 * outcomes (out->passed tells). */
oom_status runner_run(const scenario *sc, const run_options *o, run_result *out, char *err, size_t errcap);
void run_result_free(run_result *r);

OOM_END_DECLS

#endif
