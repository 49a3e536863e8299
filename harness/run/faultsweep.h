/* faultsweep.h - `oomlab faultsweep`: SQLite's OOM loop over a scenario's variants.
 *
 * For each variant, first a run with no fault counts its allocation attempts. Then, for n = 1, 2, ... (or
 * 1, 1 + stride, ...), the variant runs again with the n-th device allocation and every later one failing
 * (run_fault.device_at = n); then separately the same for pinned host allocations (host_at = n). The loop over
 * n stops at the first run that completes without reaching its fault.
 *
 * What an injected fault is: device.h's device_fault_plan, in front of the backend. A device allocation is a
 * cudaMalloc of a segment (mem_alloc) or the cuMemCreate + cuMemMap of an expandable segment's pages (va_map),
 * counted over all of the variant's devices from its first allocation; a pinned host allocation is a
 * cudaHostAlloc or cudaHostRegister of the host caching allocator. The injected failure is what the backend
 * returns on a full device (OOM_ENOMEM_DEVICE, cudaErrorMemoryAllocation) or when nothing more can be pinned
 * (OOM_ENOMEM_PINNED), and it persists: from the n-th on, the device has no memory to give (frees, and the
 * blocks the caching allocator already holds, still work). So the caching allocator takes its real OOM path, as
 * PyTorch's does: it frees its cached blocks and retries (the retry is the next allocation, which fails too),
 * then raises the OOM with its message; the scenario catches it where its PyTorch code would, or ends on it.
 * Scenarios that expect an OOM at a given step see their expectations fail under injection: the sweep does not
 * read expectations.
 *
 * A point is clean when the variant's process did not crash or hang, it ended ok, with caught OOMs, or on an
 * uncaught device or pinned OOM (no other failure), a device fault surfaced as the allocator's OOM (num_ooms >
 * 0), every tensor and autograd node was released with 0 bytes allocated and no pinned block handed out on every
 * device, cachealloc_check and hostalloc_check pass, and (in an asan build, `make asan`) LeakSanitizer finds no
 * host leak in the variant's process once its runtimes are closed. Each point runs in its own child process
 * (runner.h), so a crash at one point is reported and the sweep goes on.
 */
#ifndef OOMLAB_FAULTSWEEP_H
#define OOMLAB_FAULTSWEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/compat.h"
#include "run/runner.h"
#include "run/scenario.h"

OOM_BEGIN_DECLS

/* A sweep that has not stopped by this point has a fault loop that does not end: reported as a failure. */
#define FAULTSWEEP_MAX_POINT 100000

typedef struct faultsweep_options {
    run_options run;     /* backend, scale, budget, settings, --set, --variant (none: all), timeout */
    uint64_t stride;     /* test points 1, 1 + stride, 1 + 2 stride, ...; 0 or 1: every point */
    bool device, host;   /* which allocations to fail */
} faultsweep_options;

/* A point that was not clean. */
typedef struct faultsweep_failure {
    const char *kind; /* "device", "host", or "none" (the run without a fault) */
    uint64_t at;      /* the first failing allocation (0 for "none") */
    char what[400];
} faultsweep_failure;

/* One variant's sweep. Invariant: points count runs whose fault fired (or that crashed or hung at a point the
 * run without a fault reaches); nfailures <= device_points + host_points + 1. */
typedef struct faultsweep_row {
    const scenario *sc;
    const scenario_variant *v;
    uint64_t device_allocs, host_allocs; /* attempts in the run without a fault */
    uint64_t device_points, host_points;
    faultsweep_failure *failures;
    size_t nfailures;
} faultsweep_row;

typedef struct faultsweep_result {
    faultsweep_row *rows;
    size_t nrows;
    uint64_t stride;
    char backend[8];
    run_scale scale;
    bool passed; /* every point clean */
    int jobs;    /* points run at once (runner_jobs) and why */
    char jobs_why[RUN_JOBS_WHY_MAX];
} faultsweep_result;

/* Sweep the selected variants of each scenario in list. OOM_EINVAL or OOM_ENODEV (err says why) before anything
 * runs; OOM_OK once every point ran, whatever they found (out->passed tells). */
oom_status faultsweep_run(const scenario *const *list, size_t n, const faultsweep_options *o, faultsweep_result *out,
                          char *err, size_t errcap);
/* The table (scenario, variant, device points, host points, failures), then each failure. */
void faultsweep_table(const faultsweep_result *r, FILE *out);
void faultsweep_result_free(faultsweep_result *r);

OOM_END_DECLS

#endif
