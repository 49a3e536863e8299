/* test_scenarios.c - the catalog: every variant shows what it must, and fragmentation's counters equal PyTorch's.
 *
 * Suite "scenario" (backend under test). PyTorch's side is tests/data/twins/fragmentation.torch.json, recorded
 * by scripts/twins/fragmentation.py with PyTorch 2.11.0+cu130 on an H100: memory_stats() right after the large
 * request, which the scenario samples at the same point.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "testutil.h"

static void run_all(const scenario *sc, run_result *res)
{
    run_options o = {.backend = test_backend()};
    char err[512] = "";
    cr_assert_eq(runner_run(sc, &o, res, err, sizeof err), OOM_OK, "%s", err);
}

Test(scenario, every_variant_of_the_catalog_shows_what_it_must)
{
    cr_assert_gt(scenario_catalog_size, 0);
    for (size_t i = 0; i < scenario_catalog_size; i++) {
        run_result res;
        run_all(scenario_catalog[i], &res);
        cr_assert_eq(res.nvariants, scenario_catalog[i]->nvariants);
        for (size_t v = 0; v < res.nvariants; v++) {
            const variant_result *vr = &res.variants[v];
            for (size_t e = 0; e < vr->nexpect; e++)
                cr_expect(vr->expect[e].holds, "%s/%s: ✗ %s", scenario_catalog[i]->name, vr->v->name,
                          vr->expect[e].text);
            cr_expect_neq(vr->outcome, OUTCOME_ERROR, "%s/%s: %s", scenario_catalog[i]->name, vr->v->name, vr->error);
        }
        cr_assert(res.passed, "%s did not pass", scenario_catalog[i]->name);
        run_result_free(&res);
    }
}

/* The sample taken right after the large request. */
static const scn_sample *after_request(const variant_result *vr)
{
    for (size_t i = 0; i < vr->nsamples; i++)
        if (strstr(vr->samples[i].label, "MiB request"))
            return &vr->samples[i];
    cr_assert_fail("%s: no sample after the request", vr->v->name);
    return NULL;
}

static int64_t num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "missing %s", key);
    return (int64_t)v->valuedouble;
}

Test(scenario, fragmentation_counters_equal_pytorch)
{
    char *text = fileio_read_all("tests/data/twins/fragmentation.torch.json", NULL);
    cr_assert_not_null(text, "%s", oom_error_msg());
    cJSON *twin = cJSON_Parse(text);
    cr_assert_not_null(twin);
    const scenario *sc = scenario_find("fragmentation");
    cr_assert_not_null(sc);
    run_result res;
    run_all(sc, &res);
    cr_assert_eq((size_t)cJSON_GetArraySize(twin), res.nvariants);
    for (size_t v = 0; v < res.nvariants; v++) {
        const variant_result *vr = &res.variants[v];
        const cJSON *t = NULL;
        for (int i = 0; i < cJSON_GetArraySize(twin); i++)
            if (strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(twin, i), "variant")->valuestring,
                       vr->v->name) == 0)
                t = cJSON_GetArrayItem(twin, i);
        cr_assert_not_null(t, "PyTorch has no %s", vr->v->name);
        const char *outcome = cJSON_GetObjectItemCaseSensitive(t, "outcome")->valuestring;
        cr_assert_str_eq(variant_outcome_str(vr->outcome), outcome, "%s", vr->v->name);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(t, "stats");
        const scn_sample *s = after_request(vr);
        cr_expect_eq(s->allocated, num(st, "allocated_bytes.all.current"), "%s allocated", vr->v->name);
        cr_expect_eq(s->allocated_peak, num(st, "allocated_bytes.all.peak"), "%s allocated peak", vr->v->name);
        cr_expect_eq(s->reserved, num(st, "reserved_bytes.all.current"), "%s reserved", vr->v->name);
        cr_expect_eq(s->reserved_peak, num(st, "reserved_bytes.all.peak"), "%s reserved peak", vr->v->name);
        cr_expect_eq(s->inactive_split, num(st, "inactive_split_bytes.all.current"), "%s inactive split",
                     vr->v->name);
        cr_expect_eq(s->segments, num(st, "segment.all.current"), "%s segments", vr->v->name);
        cr_expect_eq(s->device_allocs, num(st, "num_device_alloc"), "%s num_device_alloc", vr->v->name);
        cr_expect_eq(s->device_frees, num(st, "num_device_free"), "%s num_device_free", vr->v->name);
        cr_expect_eq(s->alloc_retries, num(st, "num_alloc_retries"), "%s num_alloc_retries", vr->v->name);
        cr_expect_eq(s->ooms, num(st, "num_ooms"), "%s num_ooms", vr->v->name);
        if (vr->outcome == OUTCOME_OOM) {
            /* PyTorch's message up to the process line (oomlab has no NVML) and from the allocated figures on */
            const char *msg = cJSON_GetObjectItemCaseSensitive(t, "message")->valuestring;
            cr_expect_eq(strncmp(vr->oom.message, msg, 38), 0, "%s: %.60s", vr->v->name, vr->oom.message);
            const char *tail = strstr(msg, "1024.00 MiB allowed; Of the allocated memory");
            cr_assert_not_null(tail);
            cr_expect_not_null(strstr(vr->oom.message, tail), "%s: PyTorch's tail\n%s\nnot in\n%s", vr->v->name,
                               tail, vr->oom.message);
        }
    }
    run_result_free(&res);
    cJSON_Delete(twin);
    free(text);
}
