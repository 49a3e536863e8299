/* compare.h - `oomlab compare BASELINE CURRENT`: what moved between two runs, and whether it is a regression.
 *
 * Per scenario present in both, after checking that the runs are comparable (same backend, scale, dry run, budget,
 * cap, device total, user allocator settings, block order, memory_caching (absent in one: not comparable) and
 * parameters; else bad input, one line), per variant:
 *   - unchanged, whatever the tolerances: the outcome (ok, oom, error), whether the failure was reproduced,
 *     whether there was an OOM and the step it happened at, the number of samples and their labels, the number of
 *     expectations and whether each holds;
 *   - byte counters and counts, exact unless --tolerance P% (|current - baseline| <= P% of |baseline|): peak
 *     allocated and reserved, the OOM's requested bytes, every sample's allocated, reserved, active,
 *     inactive_split, peaks, segments, device allocs and frees, retries and OOMs, the memory_stats() keys of
 *     COMPARE_STATS, every metric whose unit is not seconds (one series per name), and the same for each extra
 *     device of the variant;
 *   - times (the variant's seconds, metrics in s, a series by its sum) only with --time-tolerance P%: slower by
 *     more than P% is a regression, except on sim, where times are the CPU references' and never fail.
 * A variant or scenario in the baseline that the current run lacks is a regression (when CURRENT is a folder);
 * one the baseline lacks is new (information, `make baseline` adds it). A key of either document that compare does
 * not know (report.h's schema, and baseline.h's "baseline") is a row of its own, not compared and not a regression:
 * nothing in the files is ignored silently.
 *
 * The table has one row per metric that moved (a series: its first sample beyond the tolerance, and how many
 * moved), marked ✗ when it is a regression.
 */
#ifndef OOMLAB_COMPARE_H
#define OOMLAB_COMPARE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/compat.h"
#include "core/status.h"
#include "results/runset.h"

OOM_BEGIN_DECLS

typedef struct compare_options {
    double tolerance;      /* relative, for byte counters and counts; 0: exact */
    double time_tolerance; /* relative; < 0: times are not compared */
} compare_options;

/* One metric that moved. Invariant: regression rows make compare_result.regressions. */
typedef struct compare_row {
    char scenario[48];
    char variant[64];
    char metric[112];
    char base[40];
    char cur[40];
    char change[112];
    bool regression;
    char note[80]; /* why it is not a regression, or "" */
} compare_row;

typedef struct compare_result {
    compare_row *rows;
    size_t nrows, cap;
    size_t regressions;
    size_t scenarios, variants; /* compared */
    const char *backend;        /* the current run's (of its first document) */
    char notes[8][256];         /* lines for the reader: what was not compared, and why */
    size_t nnotes;
} compare_result;

/* Compare cur against base. OOM_EINVAL with one line in err when they cannot be compared (different parameters
 * or backends, nothing in common); OOM_ENOMEM_HOST. */
oom_status compare_runsets(const runset *base, const runset *cur, const compare_options *o, compare_result *out,
                           char *err, size_t errcap);
void compare_result_free(compare_result *r);

/* The table of what moved, then one line: how many regressions (naming the first ones) or that nothing
 * regressed. */
void compare_table(const compare_result *r, const compare_options *o, FILE *out);

/* "2%", "0.5%", "0%": a percentage as a fraction (0.02). false on anything else (no sign, no bare number). */
bool compare_parse_percent(const char *s, double *out);

OOM_END_DECLS

#endif
