/* baseline.c - baselines made from runs, written atomically. See baseline.h. */
#include "results/baseline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/echo.h"
#include "core/fileio.h"
#include "run/scenario.h"

cJSON *baseline_of(const cJSON *run)
{
    cJSON *b = cJSON_Duplicate(run, true);
    if (!b)
        return NULL;
    bool sim = strcmp(runset_str(b, "backend", ""), "sim") == 0;
    cJSON_DeleteItemFromObjectCaseSensitive(b, "started");
    cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(b, "variants"))
    {
        cJSON_DeleteItemFromObjectCaseSensitive(v, "notes");
        if (!sim)
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(v, "seconds");
        cJSON_DeleteItemFromObjectCaseSensitive(v, "cpu_seconds");
        cJSON *mets = cJSON_GetObjectItemCaseSensitive(v, "metrics");
        for (cJSON *m = mets ? mets->child : NULL; m;) {
            cJSON *next = m->next;
            if (strcmp(runset_str(m, "unit", ""), "s") == 0)
                cJSON_Delete(cJSON_DetachItemViaPointer(mets, m));
            m = next;
        }
    }
    if (!cJSON_AddStringToObject(b, "baseline",
                                 sim ? "a run less started, notes and times (sim): byte-identical run to run"
                                     : "a run less started and notes")) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

bool baseline_check(const runset *s, char *err, size_t cap)
{
    char e1[ECHO_BUF];
    for (size_t i = 0; i < s->n; i++) {
        if (!scenario_name_ok(s->docs[i].scenario)) { /* the scenario names the file */
            snprintf(err, cap, "%s: scenario '%s' is not a scenario name (a-z, then a-z, 0-9, '_' or '-', at most %d "
                     "bytes): it cannot name a baseline file",
                     s->docs[i].path, echo_str(s->docs[i].scenario, e1), SCENARIO_NAME_MAX);
            return false;
        }
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s->docs[i].json, "passed"))) {
            snprintf(err, cap, "%s: a variant of %s does not show what it must: a failing run is no baseline",
                     s->docs[i].path, s->docs[i].scenario);
            return false;
        }
    }
    return true;
}

oom_status baseline_write(const runset *s, const char *dir, size_t *written, size_t *unchanged, char *err,
                          size_t cap)
{
    *written = *unchanged = 0;
    if (!baseline_check(s, err, cap))
        return OOM_EINVAL;
    char **texts = calloc(s->n, sizeof *texts);
    oom_status st = texts ? OOM_OK : OOM_ENOMEM_HOST;
    for (size_t i = 0; st == OOM_OK && i < s->n; i++) {
        cJSON *b = baseline_of(s->docs[i].json);
        texts[i] = b ? cJSON_Print(b) : NULL;
        cJSON_Delete(b);
        if (!texts[i])
            st = OOM_ENOMEM_HOST;
    }
    if (st == OOM_ENOMEM_HOST)
        snprintf(err, cap, "out of host memory");
    if (st == OOM_OK && (st = fileio_mkdirs(dir)) != OOM_OK)
        snprintf(err, cap, "%s", oom_error_detail());
    for (size_t i = 0; st == OOM_OK && i < s->n; i++) {
        char path[RUNSET_PATH_MAX + 128];
        snprintf(path, sizeof path, "%s/%s.json", dir, s->docs[i].scenario);
        size_t len = strlen(texts[i]);
        texts[i][len] = '\n'; /* newline-terminated, as oomlab run writes results */
        size_t oldlen = 0;
        char *old = fileio_read_all(path, &oldlen);
        oom_error_clear();
        bool same = old && oldlen == len + 1 && memcmp(old, texts[i], len + 1) == 0;
        free(old);
        if (same) {
            (*unchanged)++;
            continue;
        }
        if ((st = fileio_write_atomic(path, texts[i], len + 1)) != OOM_OK)
            snprintf(err, cap, "%s", oom_error_detail());
        else
            (*written)++;
    }
    for (size_t i = 0; texts && i < s->n; i++)
        free(texts[i]);
    free(texts);
    return st;
}
