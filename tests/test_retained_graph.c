/* test_retained_graph.c - the retained_graph scenario: its --set space, its two scales, and PyTorch's recording.
 *
 * Suite "scenario" (backend under test, ci scale unless said). The recording, tests/data/twins/
 * retained_graph.torch.json, comes from scripts/twins/retained_graph.py on a GPU; until it is committed the parity
 * test is skipped, and says so.
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
#include "twin.h"

#define RECORDING "tests/data/twins/retained_graph.torch.json"

static const scenario *sc(void)
{
    const scenario *s = scenario_find("retained_graph");
    cr_assert_not_null(s, "retained_graph is not in the catalog");
    return s;
}

/* Run with --set name=value pairs (a NULL name ends the list) at a scale; the result must be a pass. */
static void run_sets(run_result *res, run_scale scale, bool dry, const run_set *sets)
{
    run_options o = {.backend = dry ? DEVICE_SIM : test_backend(), .scale = scale, .dry_run = dry};
    for (; sets && sets->name; sets++)
        o.sets[o.nsets++] = *sets;
    char err[512] = "";
    cr_assert_eq(runner_run(sc(), &o, res, err, sizeof err), OOM_OK, "%s", err);
}

static void expect_pass(const run_result *res, const char *what)
{
    for (size_t v = 0; v < res->nvariants; v++) {
        const variant_result *vr = &res->variants[v];
        cr_expect_neq(vr->outcome, OUTCOME_ERROR, "%s %s: %s", what, vr->v->name, vr->error);
        for (size_t e = 0; e < vr->nexpect; e++)
            cr_expect(vr->expect[e].holds, "%s %s: ✗ %s", what, vr->v->name, vr->expect[e].text);
    }
    for (size_t v = 0; v < res->nvariants; v++) /* the mechanism; a fix that runs out here is ✗ by its kind */
        cr_assert(res->variants[v].expected, "%s %s did not pass", what, res->variants[v].v->name);
}

/* The last sample whose label starts with prefix, or NULL. */
static const scn_sample *sample(const variant_result *vr, const char *prefix)
{
    for (size_t i = vr->nsamples; i-- > 0;)
        if (strncmp(vr->samples[i].label, prefix, strlen(prefix)) == 0)
            return &vr->samples[i];
    return NULL;
}

/* Every variant passes over a spread of --set values: the bounds, odd sizes, too few steps to show anything, a
 * cell that does not fit. None of these takes long at ci scale. */
Test(scenario, retained_graph_set_space)
{
    static const run_set cases[][5] = {
        {{"hidden", 1}, {"batch", 1}, {"steps", 100}},
        {{"hidden", 1}, {"batch", 1}, {"steps", 100}, {"cell", 1}},
        {{"hidden", 2048}},                           /* the cell itself does not fit the ci budget */
        {{"batch", 4096}, {"steps", 12}},             /* the chain runs out early, the MLP too */
        {{"steps", 1}},                               /* no growth to measure, no in-place error yet */
        {{"steps", 2}, {"cell", 1}},                  /* RNNCell breaks only at step 2 */
        {{"steps", 3}, {"cell", 1}},
        {{"hidden", 33}, {"batch", 77}, {"steps", 7}, {"cell", 1}},
        {{"hidden", 3}, {"batch", 5}, {"steps", 9}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[96];
        snprintf(what, sizeof what, "case %zu (%s=%lld ...)", c, cases[c][0].name, (long long)cases[c][0].value);
        run_result res;
        run_sets(&res, SCALE_CI, false, cases[c]);
        expect_pass(&res, what);
        run_result_free(&res);
    }
}

Test(scenario, retained_graph_rejects_values_out_of_range)
{
    static const run_set bad[] = {{"hidden", 0}, {"hidden", 2049}, {"batch", 0}, {"batch", 4097},
                                  {"steps", 0},  {"steps", 101},   {"cell", 2},  {"cell", -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_options o = {.backend = DEVICE_SIM, .nsets = 1};
        o.sets[0] = bad[i];
        char err[512] = "";
        run_result res;
        cr_assert_eq(runner_run(sc(), &o, &res, err, sizeof err), OOM_EINVAL, "%s=%lld accepted", bad[i].name,
                     (long long)bad[i].value);
        cr_assert_not_null(strstr(err, bad[i].name), "%s", err);
        cr_assert_not_null(strstr(err, "out of range"), "%s", err);
    }
}

/* The ci workload and budget keep the full-scale outcomes: the bug runs out at the same step (sample label), the
 * others do not run out at all, and the chain grows by one step's saved tensors at both scales. */
Test(scenario, retained_graph_ci_keeps_the_full_scale_outcomes)
{
    run_result ci, full;
    run_sets(&ci, SCALE_CI, false, NULL);
    run_sets(&full, SCALE_FULL, true, NULL);
    expect_pass(&ci, "ci");
    expect_pass(&full, "full (dry run)");
    cr_assert_eq(ci.nvariants, full.nvariants);
    for (size_t v = 0; v < ci.nvariants; v++) {
        const variant_result *a = &ci.variants[v], *b = &full.variants[v];
        cr_expect_eq(a->outcome, b->outcome, "%s: %s at ci, %s at full scale", a->v->name,
                     variant_outcome_str(a->outcome), variant_outcome_str(b->outcome));
        cr_expect_eq(a->reproduced, b->reproduced, "%s reproduced at one scale only", a->v->name);
    }
    const variant_result *bug_ci = &ci.variants[0], *bug_full = &full.variants[0];
    cr_assert_str_eq(bug_ci->v->name, "bug");
    cr_assert_eq(bug_full->outcome, OUTCOME_OOM);
    const scn_sample *o_ci = sample(bug_ci, "OOM at step "), *o_full = sample(bug_full, "OOM at step ");
    cr_assert(o_ci && o_full);
    int step_ci = atoi(o_ci->label + strlen("OOM at step ")), step_full = atoi(o_full->label + strlen("OOM at step "));
    cr_expect_eq(step_ci, step_full, "the bug runs out at step %d at ci scale, at step %d at full scale", step_ci,
                 step_full);
    cr_expect_eq(step_full, 25, "the story says step 25, as PyTorch's recording (at %zu bytes)", full.budget);
    run_result_free(&ci);
    run_result_free(&full);
}

/* What PyTorch's anomaly-detection hint adds to the in-place error (scenarios/retained_graph.c notes the rest). */
static const char hint[] = " Hint: enable anomaly detection to find the operation that failed to compute its gradient, "
                           "with torch.autograd.set_detect_anomaly(True, check_nan=False).";

/* Every counter of every sample against PyTorch's (tests/twin.c), and the in-place error's text. */
Test(scenario, retained_graph_counters_equal_pytorch)
{
    twin_check(sc(), RECORDING);

    char *text = fileio_read_all(RECORDING, NULL);
    cr_assert_not_null(text);
    cJSON *twin = cJSON_Parse(text);
    cr_assert_not_null(twin);
    const cJSON *v, *want = NULL;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(twin, "variants"))
        if (strcmp(cJSON_GetObjectItemCaseSensitive(v, "variant")->valuestring, "myth-retain-graph-with-sgd") == 0)
            want = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(v, "notes"), 0);
    cr_assert(cJSON_IsString(want), "the recording has no in-place error text");

    run_options o = {.backend = DEVICE_SIM, .dry_run = true, .scale = SCALE_FULL, .nvariants = 1};
    o.variants[0] = "myth-retain-graph-with-sgd";
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(twin, "params"))
        o.sets[o.nsets++] = (run_set){p->string, (int64_t)p->valuedouble};
    run_result res;
    char err[512] = "";
    cr_assert_eq(runner_run(sc(), &o, &res, err, sizeof err), OOM_OK, "%s", err);
    const char *note = NULL;
    for (size_t i = 0; i < res.variants[0].nnotes; i++)
        if (strncmp(res.variants[0].notes[i], "RuntimeError at step ", 21) == 0)
            note = res.variants[0].notes[i];
    cr_assert_not_null(note, "oomlab noted no in-place error");
    const char *head = strchr(note, ':') + 2, *end = strstr(note, " (then PyTorch's");
    cr_assert_not_null(end);
    char mine[RT_MESSAGE_MAX];
    snprintf(mine, sizeof mine, "%.*s%s", (int)(end - head), head, hint);
    cr_expect_str_eq(mine, want->valuestring, "the in-place error differs from PyTorch's");
    run_result_free(&res);
    cJSON_Delete(twin);
    free(text);
}
