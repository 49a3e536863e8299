/* sweep_report.h - a sweep (sweep.h) as people read it (the table) and as programs read it (the results JSON).
 *
 * The results JSON, schema "oomlab.sweep/1":
 *   {"schema", "scenario", "title", "backend", "device", "dry_run", "memory_caching" (false: caching off, as
 *    PYTORCH_NO_CUDA_MEMORY_CACHING=1 sets it), "scale", "budget", "started", "passed",
 *    "param", "lo", "hi", "params": {the other parameters},
 *    "variants": [{"name", "kind", "monotonic": false when a value fits above one that does not (in the series
 *                  or in either search's runs), "window": null | {"fails", "fits"}: such a pair, the smallest value
 *                  that fits above one that does not and the largest that does not below it,
 *                  "series": [{"value", "outcome": "ok"|"oom"|"error", "peak_allocated", "peak_reserved",
 *                              "reproduced", "passed", "oom_what": null|text}],
 *                  "largest_fit": {"value": null|N, "runs": [{"value", "fits"}]},
 *                  "find_executable_batch_size": {"starting_batch_size", "factor": 0.9, "value": null|N,
 *                                                 "runs": [{"value", "fits"}]}}]}
 * written to DIR/STAMP-BACKEND/SCENARIO.sweep.json.
 */
#ifndef OOMLAB_SWEEP_REPORT_H
#define OOMLAB_SWEEP_REPORT_H

#include <cJSON.h>
#include <stdio.h>

#include "core/compat.h"
#include "core/status.h"
#include "run/sweep.h"

OOM_BEGIN_DECLS

#define SWEEP_SCHEMA "oomlab.sweep/1"

/* The table: per variant the series (value, outcome, peaks) and both searches. */
void sweep_table(const sweep_result *r, FILE *out);
/* The results JSON; NULL when out of host memory. */
cJSON *sweep_json(const sweep_result *r);
/* Write it to DIR/STAMP-BACKEND/SCENARIO.sweep.json (report_write_file); the path goes to path. */
oom_status sweep_write(const sweep_result *r, const char *dir, char *path, size_t cap);

OOM_END_DECLS

#endif
