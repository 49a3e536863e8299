/* runset.c - results JSON read back. See runset.h. */
#include "results/runset.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/echo.h"
#include "core/fail.h"
#include "core/fileio.h"
#include "core/jsonfile.h"
#include "results/report.h"
#include "results/sweep_report.h"

const cJSON *runset_get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

const char *runset_str(const cJSON *o, const char *key, const char *fallback)
{
    const cJSON *v = runset_get(o, key);
    return cJSON_IsString(v) ? v->valuestring : fallback;
}

double runset_num(const cJSON *o, const char *key, double fallback)
{
    const cJSON *v = runset_get(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

typedef enum { T_STR, T_NUM, T_BOOL, T_ARR, T_OBJ, T_OBJ_OR_NULL, T_NUM_OR_NULL } field_type;

static const char *const type_names[] = {"a string", "a number", "true or false", "an array", "an object",
                                         "an object or null", "a number or null"};

static bool has_type(const cJSON *v, field_type t)
{
    switch (t) {
    case T_STR: return cJSON_IsString(v);
    case T_NUM: return cJSON_IsNumber(v);
    case T_BOOL: return cJSON_IsBool(v);
    case T_ARR: return cJSON_IsArray(v);
    case T_OBJ: return cJSON_IsObject(v);
    case T_OBJ_OR_NULL: return cJSON_IsObject(v) || cJSON_IsNull(v);
    case T_NUM_OR_NULL: return cJSON_IsNumber(v) || cJSON_IsNull(v);
    }
    return false;
}

typedef struct field {
    const char *key;
    field_type type;
} field;

/* Every field of fields present in o with its type; else one line naming the first that is not. */
static bool check_fields(const cJSON *o, const field *fields, size_t n, const char *what, char *err, size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = runset_get(o, fields[i].key);
        if (!v)
            return errbuf_false(err, cap, "%s has no \"%s\"", what, fields[i].key);
        if (!has_type(v, fields[i].type))
            return errbuf_false(err, cap, "%s: \"%s\" is not %s", what, fields[i].key, type_names[fields[i].type]);
    }
    return true;
}

static const field top_fields[] = {
    {"scenario", T_STR}, {"backend", T_STR},      {"device", T_STR},         {"scale", T_STR},
    {"dry_run", T_BOOL}, {"budget", T_NUM},       {"cap", T_NUM_OR_NULL},    {"device_total", T_NUM},
    {"alloc_conf_user", T_STR}, {"passed", T_BOOL}, {"params", T_OBJ},       {"variants", T_ARR},
};
static const field variant_fields[] = {
    {"name", T_STR},           {"outcome", T_STR},     {"passed", T_BOOL},        {"reproduced", T_BOOL},
    {"peak_allocated", T_NUM}, {"peak_reserved", T_NUM}, {"metrics", T_ARR},      {"oom", T_OBJ_OR_NULL},
    {"expectations", T_ARR},   {"samples", T_ARR},     {"memory_stats", T_OBJ},   {"devices", T_ARR},
};
static const field sample_fields[] = {
    {"label", T_STR},     {"allocated", T_NUM},        {"reserved", T_NUM},        {"active", T_NUM},
    {"inactive_split", T_NUM}, {"allocated_peak", T_NUM}, {"reserved_peak", T_NUM}, {"segments", T_NUM},
    {"num_device_alloc", T_NUM}, {"num_device_free", T_NUM}, {"num_alloc_retries", T_NUM}, {"num_ooms", T_NUM},
};
static const field metric_fields[] = {{"name", T_STR}, {"unit", T_STR}, {"value", T_NUM}};
static const field expect_fields[] = {{"holds", T_BOOL}, {"text", T_STR}};
static const field oom_fields[] = {{"step", T_NUM}, {"what", T_STR}, {"requested", T_NUM}};
static const field caught_fields[] = {{"step", T_NUM}, {"requested", T_NUM}, {"alloc_size", T_NUM},
                                      {"reserved", T_NUM}};
static const field segment_fields[] = {{"blocks", T_ARR}};
static const field device_fields[] = {{"index", T_NUM}, {"peak_allocated", T_NUM}, {"peak_reserved", T_NUM},
                                      {"samples", T_ARR}};

#define NF(a) (sizeof a / sizeof a[0])

static bool check_array(const cJSON *arr, const field *fields, size_t n, const char *what, const char *name,
                        char *err, size_t cap)
{
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        char w[256];
        snprintf(w, sizeof w, "%s: %s %d", what, name, i++);
        if (!cJSON_IsObject(e))
            return errbuf_false(err, cap, "%s is not an object", w);
        if (!check_fields(e, fields, n, w, err, cap))
            return false;
    }
    return true;
}

/* The first of keys (NULL-terminated) of o whose string holds a control character (a newline would break every
 * line that names it: an error, a table row, a CSV field), or NULL. */
static const char *control_in(const cJSON *o, const char *const *keys)
{
    for (; *keys; keys++)
        for (const char *c = runset_str(o, *keys, ""); *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                return *keys;
    return NULL;
}

/* A sample index: a whole number from 0 to INT_MAX. */
static bool is_index(double x) { return x >= 0.0 && x <= 2147483647.0 && x == floor(x); }

static const char *const top_names[] = {"scenario", "backend", "device", "scale", NULL};
static const char *const variant_names[] = {"name", "outcome", NULL};

/* A layout ("segments" of a variant's "oom" or "fix_layout"): segments of blocks, each block [size >= 0,
 * "allocated" | "free" | "unmapped"]; absent is fine. */
static bool check_segments(const cJSON *segs, const char *w, char *err, size_t cap)
{
    const cJSON *s, *b;
    if (!segs)
        return true;
    if (!cJSON_IsArray(segs))
        return errbuf_false(err, cap, "%s: \"segments\" is not an array", w);
    if (!check_array(segs, segment_fields, NF(segment_fields), w, "segment", err, cap))
        return false;
    int i = 0;
    cJSON_ArrayForEach(s, segs)
    {
        const cJSON *page = runset_get(s, "page");
        if (page && !(cJSON_IsNumber(page) && page->valuedouble >= 0))
            return errbuf_false(err, cap, "%s: segment %d: \"page\" is not a size", w, i);
        cJSON_ArrayForEach(b, runset_get(s, "blocks"))
        {
            const cJSON *size = cJSON_GetArrayItem(b, 0), *state = cJSON_GetArrayItem(b, 1);
            if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2 || !cJSON_IsNumber(size) || !(size->valuedouble >= 0) ||
                !cJSON_IsString(state) ||
                (strcmp(state->valuestring, "allocated") && strcmp(state->valuestring, "free") &&
                 strcmp(state->valuestring, "unmapped")))
                return errbuf_false(err, cap, "%s: segment %d: a block is not [size, \"allocated\" | \"free\" | \"unmapped\"]",
                            w, i);
        }
        i++;
    }
    return true;
}

/* A variant's "oom": its fields and its layout. */
static bool check_oom(const cJSON *oom, const char *w, char *err, size_t cap)
{
    return check_fields(oom, oom_fields, NF(oom_fields), w, err, cap) &&
           check_segments(runset_get(oom, "segments"), w, err, cap);
}

/* A fix's "fix_layout" (oomlab.run/3): null, or {"step", "label", "reserved", "segments"}. */
static bool check_fix_layout(const cJSON *f, const char *w, char *err, size_t cap)
{
    if (!f || cJSON_IsNull(f))
        return true;
    if (!cJSON_IsObject(f))
        return errbuf_false(err, cap, "%s: \"fix_layout\" is not an object or null", w);
    const cJSON *step = runset_get(f, "step"), *label = runset_get(f, "label"), *res = runset_get(f, "reserved");
    if (!cJSON_IsNumber(step) || !(step->valuedouble >= 0) || !cJSON_IsString(label) || !cJSON_IsNumber(res) ||
        !(res->valuedouble >= 0))
        return errbuf_false(err, cap, "%s: \"fix_layout\" needs \"step\", \"label\" and \"reserved\"", w);
    return check_segments(runset_get(f, "segments"), w, err, cap);
}

bool runset_validate(const cJSON *j, const char *what, char *err, size_t cap)
{
    if (!cJSON_IsObject(j))
        return errbuf_false(err, cap, "%s: not a results document (a JSON object of schema %s)", what, REPORT_SCHEMA);
    const char *schema = runset_str(j, "schema", NULL);
    if (!schema)
        return errbuf_false(err, cap, "%s: no \"schema\": not a results document of schema %s", what, REPORT_SCHEMA);
    char e1[ECHO_BUF];
    if (strcmp(schema, REPORT_SCHEMA) != 0 && strcmp(schema, REPORT_SCHEMA_V2) != 0 &&
        strcmp(schema, REPORT_SCHEMA_V1) != 0)
        return errbuf_false(err, cap, "%s: schema '%s', not %s, %s or %s (oomlab run writes those)", what,
                    echo_str(schema, e1), REPORT_SCHEMA, REPORT_SCHEMA_V2, REPORT_SCHEMA_V1);
    if (!check_fields(j, top_fields, NF(top_fields), what, err, cap))
        return false;
    const char *bad = control_in(j, top_names);
    if (bad)
        return errbuf_false(err, cap, "%s: \"%s\" holds a control character (a newline?): not a name", what, bad);
    const cJSON *v;
    int i = 0;
    cJSON_ArrayForEach(v, runset_get(j, "variants"))
    {
        char w[192];
        snprintf(w, sizeof w, "%s: variant %d", what, i++);
        if (!cJSON_IsObject(v))
            return errbuf_false(err, cap, "%s is not an object", w);
        if (!check_fields(v, variant_fields, NF(variant_fields), w, err, cap))
            return false;
        if ((bad = control_in(v, variant_names)))
            return errbuf_false(err, cap, "%s: \"%s\" holds a control character (a newline?): not a name", w, bad);
        snprintf(w, sizeof w, "%s: variant '%s'", what, echo_str(runset_str(v, "name", "?"), e1));
        if (!check_array(runset_get(v, "samples"), sample_fields, NF(sample_fields), w, "sample", err, cap) ||
            !check_array(runset_get(v, "metrics"), metric_fields, NF(metric_fields), w, "metric", err, cap) ||
            !check_array(runset_get(v, "expectations"), expect_fields, NF(expect_fields), w, "expectation", err,
                         cap) ||
            !check_array(runset_get(v, "devices"), device_fields, NF(device_fields), w, "device", err, cap))
            return false;
        int k = 0;
        const cJSON *smp;
        cJSON_ArrayForEach(smp, runset_get(v, "samples")) /* optional (newer files): a number when there */
        {
            const cJSON *sp = runset_get(smp, "step_peak");
            if (sp && !has_type(sp, T_NUM))
                return errbuf_false(err, cap, "%s: sample %d: \"step_peak\" is not %s", w, k, type_names[T_NUM]);
            k++;
        }
        const cJSON *oom = runset_get(v, "oom");
        if (cJSON_IsObject(oom) && !check_oom(oom, w, err, cap))
            return false;
        if (!check_fix_layout(runset_get(v, "fix_layout"), w, err, cap))
            return false;
        const cJSON *caught = runset_get(v, "ooms_caught"); /* optional: the OOMs a variant caught, for the plot */
        if (caught && !cJSON_IsArray(caught))
            return errbuf_false(err, cap, "%s: \"ooms_caught\" is not an array", w);
        if (caught && !check_array(caught, caught_fields, NF(caught_fields), w, "caught OOM", err, cap))
            return false;

        const cJSON *d;
        cJSON_ArrayForEach(d, runset_get(v, "devices"))
        {
            if (!check_array(runset_get(d, "samples"), sample_fields, NF(sample_fields), w, "device sample", err,
                             cap))
                return false;
        }
    }
    if (i == 0)
        return errbuf_false(err, cap, "%s: no variants", what);
    return true;
}

/* What the figures need besides (runset_read_file): each OOM's step a sample index, drawn at x = step. */
static bool steps_are_indices(const cJSON *j, const char *what, char *err, size_t cap)
{
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, runset_get(j, "variants"))
    {
        const cJSON *oom = runset_get(v, "oom"), *m;
        bool ok = !cJSON_IsObject(oom) || is_index(runset_num(oom, "step", NAN));
        cJSON_ArrayForEach(m, runset_get(v, "ooms_caught")) ok = ok && is_index(runset_num(m, "step", NAN));
        if (!ok)
            return errbuf_false(err, cap, "%s: variants[%d]: an OOM's step is not a sample index (a whole number >= 0)",
                                what, i);
        i++;
    }
    return true;
}

static size_t max_input; /* --max-input; 0: fileio_default_limit() */

void runset_set_max_input(size_t bytes) { max_input = bytes; }

fileio_limit runset_input_limit(void)
{
    return max_input ? fileio_limit_of(max_input, "--max-input") : fileio_default_limit();
}

static const field sweep_fields[] = {
    {"scenario", T_STR}, {"backend", T_STR}, {"scale", T_STR}, {"dry_run", T_BOOL}, {"budget", T_NUM},
    {"param", T_STR},    {"lo", T_NUM},      {"hi", T_NUM},    {"variants", T_ARR},
};
static const field sweep_variant_fields[] = {{"name", T_STR}, {"series", T_ARR}, {"largest_fit", T_OBJ},
                                             {"find_executable_batch_size", T_OBJ_OR_NULL}};
static const field sweep_point_fields[] = {{"value", T_NUM}, {"outcome", T_STR}, {"peak_allocated", T_NUM},
                                           {"peak_reserved", T_NUM}};
static const field search_fields[] = {{"value", T_NUM_OR_NULL}};

bool runset_validate_sweep(const cJSON *j, const char *what, char *err, size_t cap)
{
    char e1[ECHO_BUF];
    const char *schema = runset_str(j, "schema", NULL);
    if (!cJSON_IsObject(j) || !schema || strcmp(schema, SWEEP_SCHEMA) != 0)
        return errbuf_false(err, cap, "%s: schema '%s', not %s (oomlab run --sweep writes those)", what,
                    echo_str(schema ? schema : "", e1), SWEEP_SCHEMA);
    if (!check_fields(j, sweep_fields, NF(sweep_fields), what, err, cap))
        return false;
    const cJSON *v;
    int i = 0;
    cJSON_ArrayForEach(v, runset_get(j, "variants"))
    {
        char w[192];
        snprintf(w, sizeof w, "%s: variant %d", what, i++);
        if (!cJSON_IsObject(v))
            return errbuf_false(err, cap, "%s is not an object", w);
        if (!check_fields(v, sweep_variant_fields, NF(sweep_variant_fields), w, err, cap) ||
            !check_array(runset_get(v, "series"), sweep_point_fields, NF(sweep_point_fields), w, "point", err, cap) ||
            !check_fields(runset_get(v, "largest_fit"), search_fields, NF(search_fields), w, err, cap))
            return false;
        const cJSON *acc = runset_get(v, "find_executable_batch_size");
        if (cJSON_IsObject(acc) && !check_fields(acc, search_fields, NF(search_fields), w, err, cap))
            return false;
    }
    if (i == 0)
        return errbuf_false(err, cap, "%s: no variants", what);
    return true;
}

/* Read (within --max-input, one open: a FIFO is read once), parse and check the values of one file: NULL with one
 * line in err, a syntax error's kind and place, or a value that does not arrive exactly (jsonfile.h). */
static cJSON *parse_file(const char *path, char *err, size_t cap)
{
    size_t len = 0;
    fileio_limit lim = runset_input_limit();
    char *text = fileio_read_limited(path, &lim, &len, NULL);
    if (!text) {
        errbuf_false(err, cap, "%s", oom_error_detail());
        return NULL;
    }
    cJSON *j = jsonfile_parse(path, text, len, err, cap);
    if (j && !jsonfile_check_values(path, text, len, err, cap)) {
        cJSON_Delete(j);
        j = NULL;
    }
    free(text);
    return j;
}

oom_status runset_read_file(const char *path, bool sweeps, cJSON **out, char *err, size_t cap)
{
    *out = NULL;
    cJSON *j = parse_file(path, err, cap);
    if (!j)
        return OOM_EINVAL;
    bool sweep = sweeps && strcmp(runset_str(j, "schema", ""), SWEEP_SCHEMA) == 0;
    if (!(sweep ? runset_validate_sweep(j, path, err, cap)
                : runset_validate(j, path, err, cap) && steps_are_indices(j, path, err, cap))) {
        cJSON_Delete(j);
        return OOM_EINVAL;
    }
    *out = j;
    return OOM_OK;
}

/* Parse and validate one file into d. */
static bool load_doc(const char *path, runset_doc *d, char *err, size_t cap)
{
    cJSON *j = parse_file(path, err, cap);
    if (!j)
        return false;
    if (!runset_validate(j, path, err, cap)) {
        cJSON_Delete(j);
        return false;
    }
    snprintf(d->path, sizeof d->path, "%s", path);
    d->json = j;
    d->scenario = runset_str(j, "scenario", "");
    d->backend = runset_str(j, "backend", "");
    return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

oom_status runset_load(const char *path, runset *out, char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    char **names = NULL;
    size_t nnames = 0;
    DIR *dir = opendir(path); /* a folder, or ENOTDIR: a file (one call tells both, and lists the folder) */
    if (!dir && errno != ENOTDIR) {
        errbuf_false(err, cap, "%s: %s", path, errno == ENOENT ? "no such file or folder" : strerror(errno));
        return OOM_EINVAL;
    }
    if (dir) {
        out->folder = true;
        struct dirent *e;
        while ((e = readdir(dir))) {
            if (!ends_with(e->d_name, ".json") || e->d_name[0] == '.')
                continue;
            if (ends_with(e->d_name, ".sweep.json")) {
                out->skipped_sweeps++;
                continue;
            }
            char **grown = realloc(names, (nnames + 1) * sizeof *names);
            char *copy = grown ? strdup(e->d_name) : NULL;
            if (!copy) {
                names = grown ? grown : names;
                for (size_t i = 0; i < nnames; i++)
                    free(names[i]);
                free(names);
                closedir(dir);
                errbuf_false(err, cap, "out of host memory");
                return OOM_ENOMEM_HOST;
            }
            names = grown;
            names[nnames++] = copy;
        }
        closedir(dir);
        if (nnames == 0) {
            free(names);
            errbuf_false(err, cap, "%s: no results files (SCENARIO.json) in the folder", path);
            return OOM_EINVAL;
        }
        qsort(names, nnames, sizeof *names, cmp_str);
    }
    size_t n = out->folder ? nnames : 1;
    out->docs = calloc(n, sizeof *out->docs);
    oom_status rc = out->docs ? OOM_OK : OOM_ENOMEM_HOST;
    if (!out->docs)
        errbuf_false(err, cap, "out of host memory");
    for (size_t i = 0; rc == OOM_OK && i < n; i++) {
        char file[RUNSET_PATH_MAX];
        if (out->folder)
            snprintf(file, sizeof file, "%s%s%s", path, ends_with(path, "/") ? "" : "/", names[i]);
        else
            snprintf(file, sizeof file, "%s", path);
        if (!load_doc(file, &out->docs[i], err, cap)) {
            rc = OOM_EINVAL;
            break;
        }
        out->n = i + 1;
        if (runset_find(out, out->docs[i].scenario) != &out->docs[i]) {
            char e1[ECHO_BUF];
            errbuf_false(err, cap, "%s: two results of scenario '%s' in one folder (%s and this one)", file,
                 echo_str(out->docs[i].scenario, e1), runset_find(out, out->docs[i].scenario)->path);
            rc = OOM_EINVAL;
        }
    }
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    if (rc != OOM_OK)
        runset_free(out);
    return rc;
}

void runset_free(runset *s)
{
    for (size_t i = 0; s->docs && i < s->n; i++)
        cJSON_Delete(s->docs[i].json);
    free(s->docs);
    s->docs = NULL;
    s->n = 0;
}

const runset_doc *runset_find(const runset *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->docs[i].scenario, name) == 0)
            return &s->docs[i];
    return NULL;
}
