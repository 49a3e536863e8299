/* twin.c - see twin.h. */
#include "twin.h"

#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "testutil.h"

static const cJSON *item(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert_not_null(v, "the recording has no '%s'", key);
    return v;
}

static int64_t num(const cJSON *o, const char *key)
{
    const cJSON *v = item(o, key);
    cr_assert(cJSON_IsNumber(v), "'%s' is not a number", key);
    return (int64_t)v->valuedouble;
}

/* One device's samples against the recording's, label for label and counter for counter. */
/* Does one of the recorded variant's notes contain text? */
static bool notes_mention(const cJSON *variant, const char *text)
{
    const cJSON *n;
    cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(variant, "notes"))
    {
        if (cJSON_IsString(n) && strstr(n->valuestring, text))
            return true;
    }
    return false;
}

/* false in twin_check_outcomes: samples are compared by count and label only */
static bool compare_counters = true;
/* twin_check_known's differences */
static const twin_known *known_diffs;
static size_t known_n;

static void compare_samples(const char *vn, int dev, const scn_sample *samples, size_t n, const cJSON *rec)
{
    static const char *const keys[] = {"allocated_bytes.all.current", "reserved_bytes.all.current",
                                        "active_bytes.all.current",    "inactive_split_bytes.all.current",
                                        "allocated_bytes.all.peak",    "reserved_bytes.all.peak",
                                        "segment.all.current",         "num_device_alloc",
                                        "num_device_free",             "num_alloc_retries",
                                        "num_ooms"};
    cr_expect_eq(n, (size_t)cJSON_GetArraySize(rec), "%s: device %d: %zu samples, PyTorch %d", vn, dev, n,
                 cJSON_GetArraySize(rec));
    size_t i = 0;
    const cJSON *s;
    bool from[16] = {false}; /* known_diffs[k] applies from its sample on */
    cr_assert_leq(known_n, sizeof from / sizeof from[0]);
    cJSON_ArrayForEach(s, rec)
    {
        if (i >= n)
            break;
        const scn_sample *m = &samples[i++];
        cr_expect_str_eq(m->label, item(s, "label")->valuestring, "%s: device %d: sample %zu", vn, dev, i - 1);
        if (!compare_counters)
            continue;
        const int64_t mine[] = {m->allocated,      m->reserved,      m->active,   m->inactive_split,
                                m->allocated_peak, m->reserved_peak, m->segments, m->device_allocs,
                                m->device_frees,   m->alloc_retries, m->ooms};
        for (size_t k = 0; k < known_n; k++)
            from[k] = from[k] || (strcmp(known_diffs[k].variant, vn) == 0 && strcmp(known_diffs[k].from, m->label) == 0);
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++) {
            int64_t delta = 0;
            for (size_t k = 0; k < known_n; k++)
                if (from[k] && strcmp(known_diffs[k].key, keys[j]) == 0)
                    delta += known_diffs[k].delta;
            cr_expect_eq(mine[j] + delta, num(s, keys[j]),
                         "%s: device %d: sample %zu '%s': %s is %lld (+%lld known), PyTorch %lld", vn, dev, i - 1,
                         m->label, keys[j], (long long)mine[j], (long long)delta, (long long)num(s, keys[j]));
        }
    }
}


/* One recording (twinlib's document). */
static void check_doc(const scenario *sc, const cJSON *twin)
{
    cr_assert_str_eq(item(twin, "scenario")->valuestring, sc->name);

    run_options o = {.backend = test_backend(), .scale = SCALE_FULL, .budget = (size_t)num(twin, "budget")};
    o.dry_run = o.backend == DEVICE_SIM; /* full scale on the CPU references would take minutes */
    static char names[RUN_MAX_SETS][64];
    const cJSON *p;
    cJSON_ArrayForEach(p, item(twin, "params"))
    {
        cr_assert_lt(o.nsets, RUN_MAX_SETS);
        snprintf(names[o.nsets], sizeof names[0], "%s", p->string);
        o.sets[o.nsets].name = names[o.nsets];
        o.sets[o.nsets].value = (int64_t)p->valuedouble;
        o.nsets++;
    }
    const cJSON *vs = item(twin, "variants");
    cJSON_ArrayForEach(p, vs)
    {
        cr_assert_lt(o.nvariants, RUN_MAX_VARIANTS);
        o.variants[o.nvariants++] = item(p, "variant")->valuestring;
    }
    run_result res;
    char err[512] = "";
    cr_assert_eq(runner_run(sc, &o, &res, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(res.nvariants, (size_t)cJSON_GetArraySize(vs));

    size_t k = 0;
    cJSON_ArrayForEach(p, vs)
    {
        const variant_result *vr = &res.variants[k++];
        const char *vn = vr->v->name;
        cr_assert_str_eq(vn, item(p, "variant")->valuestring);
        const cJSON *oom = item(p, "oom");
        const char *want = item(p, "outcome")->valuestring;
        if (vr->outcome == OUTCOME_OOM && vr->oom.pinned && strcmp(want, "ok") == 0 && !cJSON_IsObject(oom) &&
            notes_mention(p, "in pin memory thread"))
            want = "oom"; /* recorded before a pinning failure was an OOM: "ok", the pin thread's error in a note */
        /* A recording with "story_ooms" (twinlib's t.remedy) has oomlab's outcome: the OOMs before the remedy are
         * steps of the story, and their count must match. One made before it recorded "oom" when any OOM was
         * raised (fix-del's request before del), so there compare that it was raised. */
        const cJSON *story = cJSON_GetObjectItemCaseSensitive(p, "story_ooms");
        const char *mine = vr->outcome == OUTCOME_OK && vr->story_ooms && !cJSON_IsNumber(story)
                               ? "oom"
                               : variant_outcome_str(vr->outcome);
        if (cJSON_IsNumber(story))
            cr_expect_eq(vr->story_ooms, (int)story->valuedouble, "%s: %d OOMs before the remedy, PyTorch %d", vn,
                         vr->story_ooms, (int)story->valuedouble);
        cr_expect_str_eq(mine, want, "%s: outcome (%s)", vn,
                         vr->outcome == OUTCOME_ERROR ? vr->error : "");
        if (cJSON_IsObject(oom) && vr->ooms) {
            cr_expect_eq(vr->oom.step, (int)num(oom, "step"), "%s: the OOM at sample %d, PyTorch's at %d", vn,
                         vr->oom.step, (int)num(oom, "step"));
            const cJSON *kind = cJSON_GetObjectItemCaseSensitive(oom, "kind"); /* recordings before it: device */
            cr_expect_str_eq(vr->oom.pinned ? "pinned host" : "device",
                             cJSON_IsString(kind) ? kind->valuestring : "device", "%s: the kind of OOM", vn);
        }
        compare_samples(vn, 0, vr->samples, vr->nsamples, item(p, "samples"));
        /* a variant on several devices: devices 1.. in "devices", sample for sample */
        const cJSON *devs = cJSON_GetObjectItemCaseSensitive(p, "devices");
        int ndevs = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
        cr_expect_eq(vr->ndevices, (size_t)ndevs, "%s: %zu other devices, PyTorch %d", vn, vr->ndevices, ndevs);
        for (size_t d = 0; d < vr->ndevices && (int)d < ndevs; d++)
            compare_samples(vn, vr->devices[d].index, vr->devices[d].samples, vr->devices[d].nsamples,
                            item(cJSON_GetArrayItem(devs, (int)d), "samples"));
    }
    run_result_free(&res);
}

void twin_check(const scenario *sc, const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "%s", oom_error_msg());
    cJSON *twin = cJSON_Parse(text);
    cr_assert_not_null(twin, "%s does not parse", path);
    check_doc(sc, twin);
    cJSON_Delete(twin);
    free(text);
}

void twin_check_outcomes(const scenario *sc, const char *path)
{
    compare_counters = false;
    twin_check(sc, path);
    compare_counters = true;
}

void twin_check_known(const scenario *sc, const char *path, const twin_known *known, size_t nknown)
{
    known_diffs = known;
    known_n = nknown;
    twin_check(sc, path);
    known_diffs = NULL;
    known_n = 0;
}

void twin_check_sweep(const scenario *sc, const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "%s", oom_error_msg());
    cJSON *sweep = cJSON_Parse(text);
    cr_assert_not_null(sweep, "%s does not parse", path);
    cr_assert_str_eq(item(sweep, "scenario")->valuestring, sc->name);
    const cJSON *points = item(sweep, "points"), *p;
    cr_assert_gt(cJSON_GetArraySize(points), 0, "%s holds no points", path);
    cJSON_ArrayForEach(p, points)
        check_doc(sc, p);
    cJSON_Delete(sweep);
    free(text);
}
