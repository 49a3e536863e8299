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
#include "results/runset.h"

OOM_BEGIN_DECLS

/* A baseline made of the results document run (not modified); NULL when out of host memory. */
cJSON *baseline_of(const cJSON *run);

/* Can every run of s be a baseline? It passed, and its scenario matches the catalog's name pattern
 * (scenario_name_ok: the name becomes the file's, so "../x" never reaches a path). false with one line in err. */
bool baseline_check(const runset *s, char *err, size_t errcap);

/* Write the baseline of every run of s as DIR/SCENARIO.json (creating DIR), each atomically; every document is
 * checked (baseline_check) and made before any is written or DIR is made. *written / *unchanged: files whose bytes
 * changed / did not. OOM_EINVAL when baseline_check refuses (one line in err), OOM_EIO, OOM_ENOMEM_HOST. */
oom_status baseline_write(const runset *s, const char *dir, size_t *written, size_t *unchanged, char *err,
                          size_t errcap);

OOM_END_DECLS

#endif
