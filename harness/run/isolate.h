/* isolate.h - running one variant in a child process: crash and hang isolation for the runner (runner.h).
 *
 * isolate_variant() forks; the child runs the variant and writes its variant_result (the struct, then each
 * array it points to) and the run's backend fields into a pipe, then _exits; the parent reads until the pipe
 * closes or the deadline passes, then reaps the child. The child is a fork of the parent, the same binary at the
 * same addresses, so the bytes need no format beyond the order they are written in, and pointers into the
 * binary (the variant's scenario_variant) stay valid. A child that dies of a signal, exits without a whole
 * result, or is still running at the deadline (it is killed with SIGKILL) leaves its variant as the parent
 * prepared it, marked OUTCOME_CRASHED or OUTCOME_TIMEOUT with the reason in error. Nothing of the child's
 * reaches the parent but those bytes: its allocator, its output files (none) and its counters stay in it.
 * Standard streams are flushed before the fork; the child flushes its own before _exit.
 *
 * isolate_variants() runs several such children at once (runner_run_batch's --jobs): at most max_jobs at a time,
 * started in the jobs' order, each with its own pipe and deadline, each result decoded into its own job. Each
 * child's run is a fork of the parent at its start, so what it computes does not depend on what ran beside it;
 * the run's backend fields a child reports land in its job's `found`, for the caller to take in the jobs' order
 * (the first that reports, as one at a time would), so the results do not depend on which child ended first.
 */
#ifndef OOMLAB_ISOLATE_H
#define OOMLAB_ISOLATE_H

#include "core/compat.h"
#include "run/runner.h"

OOM_BEGIN_DECLS

/* The work of the child: fill res (prepared by the caller) and, for the first variant, run's backend fields. */
typedef void (*isolate_fn)(void *arg, variant_result *res, run_result *run);

/* Run fn in a child process with a limit of timeout_s seconds (<= 0: none; limit_source says where it came from,
 * for the timeout's message). res must be prepared (res->v set, arrays NULL); on return it holds the child's
 * result, or the crash or timeout. */
void isolate_variant(isolate_fn fn, void *arg, double timeout_s, const char *limit_source, variant_result *res,
                     run_result *run);

/* One child's work for isolate_variants: fn(arg, res, run) in the child; `found` gets the backend fields the child
 * reported (run_result's backend, device, device_total, cap, model_order; zero when it reported none). */
typedef struct isolate_job {
    isolate_fn fn;
    void *arg;
    double timeout_s;
    const char *limit_source;
    variant_result *res;
    run_result *run;
    run_result found;
} isolate_job;

/* Run every job, at most max_jobs (>= 1) children at once; returns when every child is reaped. */
void isolate_variants(isolate_job *jobs, size_t n, int max_jobs);

/* Copy the backend fields of found (a job's) into run. */
void isolate_found_merge(run_result *run, const run_result *found);

/* "SIGSEGV", "SIGABRT", ... (core/child.h's child_signal_name: "signal N" for one without a name), in a static
 * buffer. */
const char *isolate_signal_name(int sig);

OOM_END_DECLS

#endif
