/* baseline.h - the committed baselines, results/baselines/BACKEND/SCENARIO.json, that `oomlab compare` checks runs
 * against.
 *
 * A baseline is a run's results JSON (schema oomlab.run/1) less what changes from one run to the next and is never
 * compared byte for byte, so that regenerating it from an unchanged tree changes no byte: "started" and each
 * variant's "notes" go, and on sim the times too (each variant's "seconds" and "cpu_seconds" and the metrics in s: sim times are
 * the CPU references' and never fail a comparison). The document says so in its "baseline" field. Baselines
 * change only through `oomlab baseline` (make baseline), which prints what changed first and writes each file
 * atomically, and refuses a run in which an expectation fails.
 */
#ifndef OOMLAB_BASELINE_H
#define OOMLAB_BASELINE_H

#include <cJSON.h>

#include "core/compat.h"
#include "core/status.h"
#include "run/runset.h"

OOM_BEGIN_DECLS

/* A baseline made of the results document run (not modified); NULL when out of host memory. */
cJSON *baseline_of(const cJSON *run);

/* Write the baseline of every run of s as DIR/SCENARIO.json (creating DIR), each atomically; every document is
 * made before any is written. *written / *unchanged: files whose bytes changed / did not. OOM_EINVAL when a run
 * did not pass (one line in err naming it), OOM_EIO, OOM_ENOMEM_HOST. */
oom_status baseline_write(const runset *s, const char *dir, size_t *written, size_t *unchanged, char *err,
                          size_t errcap);

OOM_END_DECLS

#endif
