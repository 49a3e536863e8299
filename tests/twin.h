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

/* The same for every point of a twin's --sweep recording ({"scenario", "sweep", "lo", "hi", "points": [a
 * recording per value]}), each at its own parameters. */
void twin_check_sweep(const scenario *sc, const char *path);

#endif
