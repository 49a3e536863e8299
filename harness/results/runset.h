/* runset.h - results JSON read back: one file, or a run folder of them (a catalog run writes one per scenario).
 *
 * `oomlab compare`, `baseline`, `history` and `export` read runs through here, so every one of them refuses the
 * same bad input with the same line: a file that is not JSON (a truncated file: the byte where it stops), a
 * document of another schema (oomlab.sweep/1, a replay's output), a results document missing a field the
 * readers need, two documents of one scenario in a folder, a folder with no results in it.
 *
 * Every file is read within one bound (runset_set_max_input, the --max-input of every command that reads results,
 * else fileio_default_limit: as the trace reader), and its values must arrive exactly (jsonfile_check_values:
 * UTF-8 strings without NUL, finite numbers at most 2^53).
 *
 * A folder's documents are its files NAME.json, in name order; NAME.sweep.json (a sweep's series, schema
 * oomlab.sweep/1) is not a run and is skipped, and the table that reads the set says how many were.
 */
#ifndef OOMLAB_RUNSET_H
#define OOMLAB_RUNSET_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/fileio.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define RUNSET_PATH_MAX 1024

/* One results document. Invariant: json is a valid oomlab.run/1 document (runset_validate), scenario and
 * backend point into it. */
typedef struct runset_doc {
    char path[RUNSET_PATH_MAX];
    cJSON *json;
    const char *scenario;
    const char *backend;
} runset_doc;

/* Invariant: docs[0..n) have distinct scenarios, n >= 1 once loaded. */
typedef struct runset {
    char path[RUNSET_PATH_MAX]; /* as given */
    bool folder;
    size_t skipped_sweeps; /* NAME.sweep.json files in the folder, not runs */
    runset_doc *docs;
    size_t n;
} runset;

/* The bound on every results or history file this process reads: bytes (--max-input), or 0 for the default
 * (fileio_default_limit). Set once by the command line before anything is read. */
void runset_set_max_input(size_t bytes);
fileio_limit runset_input_limit(void);

/* Read path (a results file, or a folder of them). OOM_EINVAL with one line in err naming the file and the
 * problem; OOM_ENOMEM_HOST. *out is empty (runset_free-able) on failure. */
oom_status runset_load(const char *path, runset *out, char *err, size_t errcap);
void runset_free(runset *s);

/* One results file read and validated the way runset_load reads each file of a folder: an oomlab.run/1 document
 * (runset_validate) or, with sweeps, also an oomlab.sweep/1 one (runset_validate_sweep). `oomlab plot` and
 * `oomlab report` read through here, so they refuse what compare refuses, with the same line; besides, a run's
 * every OOM step must be a sample index (a whole number from 0 to 2^31 - 1: the figures draw it at x = step;
 * history refuses such steps with lines of its own). OOM_EINVAL with one line in err; *out the document (the
 * caller frees it) on OOM_OK, else NULL. */
oom_status runset_read_file(const char *path, bool sweeps, cJSON **out, char *err, size_t errcap);

/* The document of scenario name, or NULL. */
const runset_doc *runset_find(const runset *s, const char *name);

/* Check that j is a results document the readers can use: schema oomlab.run/1 and the fields compare, history
 * and export read. false with one line in err (prefixed by what) when not. */
bool runset_validate(const cJSON *j, const char *what, char *err, size_t errcap);

/* Check that j is a sweep file the figures can draw: schema oomlab.sweep/1, its variants and their series. */
bool runset_validate_sweep(const cJSON *j, const char *what, char *err, size_t errcap);

/* Field readers of a validated document: NULL / the fallback when absent or of another type. */
const cJSON *runset_get(const cJSON *o, const char *key);
const char *runset_str(const cJSON *o, const char *key, const char *fallback);
double runset_num(const cJSON *o, const char *key, double fallback);

OOM_END_DECLS

#endif
