/* history.h - the nightly history (results/history.csv) and the steps in it.
 *
 * The file: CSV (RFC 4180 quoting), header exactly HISTORY_HEADER, one row per run, scenario, variant and metric:
 *   utc_date   the run's "started" (ISO 8601 UTC, 2026-11-25T15:12:04Z)
 *   commit     what was built (make nightly: git describe --always --dirty)
 *   backend, device, scale   the run's
 *   scenario, variant, metric, value   metric is one of HISTORY_METRICS (oom_step and oom_requested only for a
 *              variant that ran out of memory); value a number
 * Rows are appended in run order; a series is the rows of one (backend, device, scale, scenario, variant, metric)
 * in file order.
 *
 * Steps (the idea of asv's step_detect): each series is fitted with the piecewise-constant function that minimises
 * sum |y - level| + gamma per segment (the L1 Potts model, solved exactly by dynamic programming), with every
 * segment at least min_runs long, so a change is reported once, at the run where it started, with its size (the
 * difference of the medians of the segments either side), and a one-off blip is not a segment of its own.
 * gamma is 3 * sigma * ln(n) with sigma the series' noise, estimated robustly from the median absolute value of its
 * successive differences (1.4826 median |y[i+1] - y[i]| / sqrt 2) (0 for exact byte counters, whose every persistent change is then a step), and
 * at least 1e-9 of the series' scale.
 */
#ifndef OOMLAB_HISTORY_H
#define OOMLAB_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/compat.h"
#include "core/status.h"
#include "results/runset.h"

OOM_BEGIN_DECLS

#define HISTORY_HEADER "utc_date,commit,backend,device,scale,scenario,variant,metric,value"
/* The metrics appended per variant (memory_stats names in brackets): peak_allocated, peak_reserved,
 * total_allocated (allocated_bytes.all.allocated), segments_peak (segment.all.peak), num_alloc_retries,
 * expectations_failed, seconds, and for an OOM oom_step and oom_requested. */
#define HISTORY_METRICS "peak_allocated, peak_reserved, total_allocated, segments_peak, num_alloc_retries, " \
                        "expectations_failed, seconds, oom_step, oom_requested"

enum { HISTORY_NCOLS = 9 };

/* One row. Invariant: col[] point into the history's own storage. */
typedef struct history_row {
    const char *col[HISTORY_NCOLS - 1]; /* utc_date .. metric */
    double value;
} history_row;

typedef struct history {
    history_row *rows;
    size_t n;
    size_t skipped; /* bad rows left out (each warned about) */
    char *text; /* the file, its fields unquoted in place */
} history;

/* Read a history file. A header other than HISTORY_HEADER is OOM_EINVAL with one line in err (not a history). A
 * bad row (another number of fields, an open quote, a NUL, a scenario or variant name off the catalog's
 * pattern, a value that is not a number or out of its metric's range: history_value_problem) is left out and
 * counted in skipped, with a warning on stderr naming its line ("history: warning: FILE line N skipped: why";
 * the first 5, then how many more): one bad run never makes a history unreadable. OOM_ENOMEM_HOST. */
oom_status history_read(const char *path, history *h, char *err, size_t errcap);
void history_free(history *h);

/* Why value v cannot be a row of metric (one of HISTORY_METRICS): "is not a finite number", "is negative", "is not
 * a whole number", "is more than 2^53" (bytes and counts), "is more than 2^31 - 1" (oom_step), "is more than 1e9
 * seconds"; "is not a metric of the history (...)"; NULL when it can. The one check of appending and reading. */
const char *history_value_problem(const char *metric, double v);

/* Append the rows of every run in s to path (created with its header when absent). Every run is checked first
 * (a document without "started" is a baseline; a scenario or variant name off the catalog's pattern,
 * scenario_name_ok; a control character in a text column; a value history_value_problem refuses): one bad value
 * and nothing is appended (OOM_EINVAL, one line in err). Then the rows are appended under an exclusive flock, as
 * one write (fileio_open_locked, fileio_append), so concurrent appenders never lose one another's rows; a file
 * whose line 1 is not the header is not appended to. *added: rows appended. */
oom_status history_append(const char *path, const runset *s, const char *commit, size_t *added, char *err,
                          size_t errcap);

/* The starts of the segments of y[0..n) (after the first, which starts at 0), into starts (at most max); returns
 * how many. min_runs >= 1: the shortest segment. */
size_t history_segments(const double *y, size_t n, size_t min_runs, size_t *starts, size_t max);

/* Every step of every series of h whose size exceeds threshold (relative to the level before it), printed, one
 * line each, to out; returns how many. */
size_t history_print_steps(const history *h, size_t min_runs, double threshold, FILE *out);

OOM_END_DECLS

#endif
