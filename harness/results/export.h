/* export.h - a run in the formats CI dashboards read with no glue (`oomlab export`):
 *
 *   JUnit XML (the Apache Ant schema Jenkins, GitLab and GitHub's report actions read; tests/data/junit.xsd):
 *     <testsuites> with one <testsuite> per scenario (package "oomlab", id from 0, timestamp the run's start
 *     without a zone, hostname this machine's), <properties> backend, device, scale, budget, alloc_conf_user and
 *     each parameter, one <testcase classname="SCENARIO.VARIANT" name="N: the expectation"> per expectation
 *     (<failure type="expectation"> when it does not hold), one more, name "0: runs without error", with an <error>
 *     for a variant that stopped on an error; time: the variant's seconds shared by its testcases; <system-out>:
 *     the variants' notes (why a failure was not reproduced).
 *   Google Benchmark JSON (gbench_*): {"context": {...}, "benchmarks": [...]}, one benchmark per variant,
 *     "SCENARIO/VARIANT", real_time its wall time ("seconds") and cpu_time the process's CPU time ("cpu_seconds"),
 *     both in ms, its peak bytes and single-valued time metrics (s) as user counters.
 *   github-action-benchmark's customSmallerIsBetter: a JSON array of {"name", "unit", "value", "extra"}: each
 *     variant's peak allocated, peak reserved and total allocated bytes, and for an OOM the reserved but
 *     unallocated bytes at it.
 */
#ifndef OOMLAB_EXPORT_H
#define OOMLAB_EXPORT_H

#include <cJSON.h>

#include "core/compat.h"
#include "core/status.h"
#include "results/runset.h"

OOM_BEGIN_DECLS

/* The JUnit XML of s, malloc'd (the caller frees it); NULL when out of host memory. */
char *export_junit(const runset *s);

/* Google Benchmark's "context" for this machine and process: date (now, ISO 8601 with zone), host_name,
 * executable, num_cpus, mhz_per_cpu, cpu_scaling_enabled, caches, load_avg, library_version, library_build_type,
 * json_schema_version, and oomlab's own oomlab_backend, oomlab_device, oomlab_debug_level. NULL when out of host
 * memory. */
cJSON *gbench_context(const char *executable, const char *backend, const char *device, int debug_level);
/* One benchmark of run_type "iteration": real_time in time_unit ("ns", "us", "ms", "s"; < 0: the measurement
 * failed, "error_occurred" says so); cpu_time < 0: not measured, left out and said in "label". Added to the array benchmarks; returns it for counters (or NULL). */
cJSON *gbench_add(cJSON *benchmarks, const char *name, double real_time, double cpu_time, const char *time_unit);
/* The Google Benchmark document of a run set; *untimed: variants with no time (a baseline), left out. */
cJSON *export_gbench(const runset *s, size_t *untimed);

/* The customSmallerIsBetter array of a run set; NULL when out of host memory. */
cJSON *export_smaller_is_better(const runset *s);

OOM_END_DECLS

#endif
