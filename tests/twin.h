/* twin.h - a scenario against its PyTorch twin's recording (scripts/twins/twinlib.py writes the JSON).
 *
 * twin_check runs the scenario at the twin's parameters and budget, full scale (a dry run on sim: the counters
 * without the arithmetic; computing on cuda), and asserts, for every variant the twin recorded: the same outcome
 * (ok / oom / error), the OOM at the same sample, the same number of samples with the same labels, and every
 * counter of every sample equal to PyTorch's (allocated, reserved, active, inactive split, the peaks, segments,
 * device allocations and frees, retries, OOMs). With cuBLAS's workspaces off in the twin, bytes are exact.
 */
#ifndef OOMLAB_TWIN_H
#define OOMLAB_TWIN_H

#include "run/runner.h"
#include "run/scenario.h"

/* Check sc against the recording at path (tests/data/twins/NAME.torch.json). Criterion assertions. */
void twin_check(const scenario *sc, const char *path);

/* twin_check without the counters: outcomes, OOM samples and kinds, and the samples' count and labels, for a
 * recording whose counters PyTorch does not make repeatable (data_parallel at its budget: when NCCL's watchdog
 * thread lets a finished all-reduce's bucket go is a matter of timing). */
void twin_check_outcomes(const scenario *sc, const char *path);

/* A counter that differs from PyTorch's by a known, measured amount: from the sample labelled `from` on, on every
 * device of `variant`, PyTorch's `key` (a memory_stats() name) is oomlab's + delta. twin_check_known demands
 * exactly that difference there (so it fails once the difference is gone) and equality everywhere else. */
typedef struct twin_known {
    const char *variant;
    const char *from;
    const char *key;
    int64_t delta;
} twin_known;

void twin_check_known(const scenario *sc, const char *path, const twin_known *known, size_t nknown);

/* The same for every point of a twin's --sweep recording ({"scenario", "sweep", "lo", "hi", "points": [a
 * recording per value]}), each at its own parameters. */
void twin_check_sweep(const scenario *sc, const char *path);

#endif
