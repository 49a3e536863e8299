/* report.h - a scenario run as people read it (the table) and as programs read it (the results JSON).
 *
 * The table: a header (backend, budget, the cap in force, where the user's allocator settings came from, and
 * whether caching is off and what turned it off),
 * one row per variant (variant, outcome, peak allocated, peak reserved, reserved but unallocated at the OOM, the
 * largest free block at the OOM, and ✓ when every expectation holds, ◐ for a partial fix that shows what it must,
 * with the bytes it saves), then each variant's expectations, ✓ or ✗,
 * and its OOM message.
 *
 * The results JSON, schema "oomlab.run/3" (REPORT_SCHEMA; readers accept /2 and /1 too):
 *   {"schema", "scenario", "title", "backend", "device", "dry_run", "scale": "ci"|"full",
 *    "budget" (B), "cap" (the cap in force: set_per_process_memory_fraction(B / device_total); null when none),
 *    "device_total", "alloc_conf_source" ("--alloc-conf", the variable's name from ALLOC_CONF_ENV_VARS, or
 *    "default"), "alloc_conf_user" (the settings text it supplied), "memory_caching" (false: caching off, as
 *    PYTORCH_NO_CUDA_MEMORY_CACHING=1 sets it; memory_stats then stay 0), "memory_caching_source" (the variable of
 *    ALLOC_NO_CACHING_ENV_VARS that decided it, or null), "started", "passed",
 *    "params": {name: value},
 *    "variants": [{"name", "kind": "bug"|"fix"|"partial"|"myth", "summary", "alloc_conf", "outcome": "ok"|"oom"|"error", "passed", "error",
 *                  "peak_allocated", "peak_reserved", "seconds", "cpu_seconds" (the process's CPU time),
 *                  "reproduced": false when the failure does not happen at these parameters, "notes": [text],
 *                  "story_ooms": OOMs caught before the variant's remedy (scn_remedy): steps of its story, not its
 *                                outcome ("oom" is still the first OOM caught),
 *                  "saved": null | {"bytes", "what"}: a partial fix's saving against the bug (scn_saved),
 *                  "kind_check": null (a bug, a myth) | {"holds", "text"}: what the variant's kind promises, on its
 *                                outcome (a fix fits; a partial fix saves bytes but still runs out); "passed" is
 *                                false when it does not hold,
 *                  "metrics": [{"name", "unit", "value", "sample": index into samples or -1}],
 *                  "oom": null | {"step", "what", "requested", "alloc_size", "allocated", "reserved",
 *                                 "reserved_unallocated", "largest_free_block", "ooms" (caught), "device",
 *                                 "message", "segments": the allocator's layout at that OOM, as memory_viz's
 *                                 Allocator State History draws it (cachealloc_layout), in address order:
 *                                 [{"address", "size", "pool": "small"|"large", "expandable",
 *                                   "page" (only in an expandable range: its page size),
 *                                   "blocks": [[bytes, "allocated"|"free"|"unmapped"], ...] in address order,
 *                                   tiling the segment ("unmapped": an expandable range's space with no
 *                                   pages)}]},
 *                  "fix_layout": null | {"step", "label", "reserved", "segments"}: a fix's layout at its peak (the
 *                                first sample with the most reserved bytes), shaped as "oom"'s "segments", for the
 *                                segment map's fix panel; null for other kinds,
 *                  "ooms_caught": (only with an OOM) every OOM scn_caught recorded, in order:
 *                                 [{"step", "what", "requested", "alloc_size", "allocated", "reserved",
 *                                   "device"}],
 *                  "expectations": [{"holds", "text"}],
 *                  "samples": [{"label", "allocated", "reserved", "active", "inactive_split",
 *                               "allocated_peak", "reserved_peak", "segments", "num_device_alloc",
 *                               "num_device_free", "num_alloc_retries", "num_ooms",
 *                               "step_peak": the most allocated at any moment since the previous sample (the
 *                               allocator's window counter, cachealloc_take_window_peak; absent in older files)}],
 *                  "memory_stats": {the 122 keys of torch.cuda.memory_stats()},
 *                  "devices": [] | [{"index" (1..), "name", "logical", "cap", "peak_allocated", "peak_reserved",
 *                                    "samples": [as above, one per sample of the variant], "memory_stats"}]}]}
 * A variant on several devices (scn_rt_device) reports device 0 in its own fields and the others in "devices"
 * ("oom"'s "device" says which one ran out); the table shows one row per device under the variant's row.
 * Byte counts are integers; run files are written atomically (fileio.h).
 */
#ifndef OOMLAB_REPORT_H
#define OOMLAB_REPORT_H

#include <cJSON.h>
#include <stdio.h>

#include "core/compat.h"
#include "run/runner.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define REPORT_SCHEMA "oomlab.run/3"
/* The earlier versions the readers still accept: /3 added each variant's "fix_layout"; /2 added every sample's
 * "step_peak" (the allocator's peak since the sample before) and each variant's "story_ooms", "kind_check" and
 * "saved"; files of /2 and /1 read with those absent. */
#define REPORT_SCHEMA_V2 "oomlab.run/2"
#define REPORT_SCHEMA_V1 "oomlab.run/1"

void report_table(const run_result *r, FILE *out);
/* The line under a table's title: backend, device, dry run, scale (and that ci is the default on sim), budget. */
void report_header(const run_result *r, FILE *out);
/* The whole catalog in one table (scenario, variant, outcome, peaks, ✓), then what failed in full. */
void report_catalog_table(const run_result *runs, size_t n, FILE *out);
/* The results JSON; NULL when out of host memory. The caller frees it with cJSON_Delete. */
cJSON *report_json(const run_result *r);
/* Write the results JSON to DIR/STAMP-BACKEND/SCENARIO.json (STAMP from r->started), creating directories;
 * the path written goes to path (cap bytes). OOM_EIO / OOM_ENOMEM_HOST with the reason in the last-error
 * record; nothing partial is left. */
oom_status report_write(const run_result *r, const char *dir, char *path, size_t cap);
/* Write the document j (freed here; NULL: out of host memory) with a final newline to DIR/STAMP-BACKEND/FILENAME,
 * STAMP from started (ISO 8601 UTC), claiming STAMP-BACKEND-2, -3, ... when another run of the same second has
 * the name; as report_write. */
oom_status report_write_file(cJSON *j, const char *started, const char *backend, const char *filename,
                             const char *dir, char *path, size_t cap);
/* Write the results JSON to RUNDIR/SCENARIO.json, a name that must not exist (a catalog run's other scenarios go
 * beside the first one's file). */
oom_status report_write_in(const run_result *r, const char *rundir, char *path, size_t cap);

OOM_END_DECLS

#endif
