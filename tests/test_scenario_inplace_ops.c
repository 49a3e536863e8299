/* test_scenario_inplace_ops.c - the inplace_ops scenario: PyTorch's counters and error text (once recorded), the
 * figures it must show at full scale (a dry run), and a spread of --set values and budgets.
 *
 * Suite "scenario" (backend under test). PyTorch's side will be tests/data/twins/inplace_ops.torch.json, recorded
 * by scripts/twins/inplace_ops.py; until it exists the parity test is skipped and says so.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "testutil.h"
#include "scntest.h"
#include "twin.h"

#define RECORDING "tests/data/twins/inplace_ops.torch.json"

static const scenario *sc(void)
{
    const scenario *s = scenario_find("inplace_ops");
    cr_assert_not_null(s);
    return s;
}

static void run(run_options *o, run_result *res)
{
    char err[512] = "";
    cr_assert_eq(runner_run(sc(), o, res, err, sizeof err), OOM_OK, "%s", err);
}

static double metric(const variant_result *vr, const char *name)
{
    for (size_t i = 0; i < vr->nmetrics; i++)
        if (strcmp(vr->metrics[i].name, name) == 0)
            return vr->metrics[i].value;
    cr_assert_fail("%s has no metric '%s'", vr->v->name, name);
    return 0;
}

static void all_passed(const run_result *res)
{
    for (size_t v = 0; v < res->nvariants; v++) {
        const variant_result *vr = &res->variants[v];
        for (size_t e = 0; e < vr->nexpect; e++)
            cr_expect(vr->expect[e].holds, "%s: ✗ %s", vr->v->name, vr->expect[e].text);
        cr_expect_neq(vr->outcome, OUTCOME_ERROR, "%s: %s", vr->v->name, vr->error);
    }
    cr_assert(res->passed);
}

#define IN_PLACE_ERROR(shape)                                                                                  \
    "one of the variables needed for gradient computation has been modified by an inplace operation: "        \
    "[torch.cuda.FloatTensor " shape "], which is output 0 of SigmoidBackward0, is at version 1; expected "    \
    "version 0 instead. Hint: enable anomaly detection to find the operation that failed to compute its "      \
    "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."

Test(scenario, inplace_ops_counters_and_error_text_equal_pytorch)
{
    twin_check(sc(), RECORDING);
    /* the RuntimeError's text, as the twin caught it (t.note), against the scenario's note */
    char *text = fileio_read_all(RECORDING, NULL);
    cr_assert_not_null(text);
    cJSON *twin = cJSON_Parse(text);
    cr_assert_not_null(twin);
    const char *torch_text = NULL;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(twin, "variants"))
    {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(v, "variant")->valuestring, "bug-inplace-on-saved") == 0)
            torch_text = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(v, "notes"), 0)->valuestring;
    }
    cr_assert_not_null(torch_text, "the recording has no error text for bug-inplace-on-saved");
    run_options o = {.backend = DEVICE_SIM, .dry_run = true, .budget = (size_t)1 << 30};
    o.variants[o.nvariants++] = "bug-inplace-on-saved";
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(twin, "params"))
    {
        o.sets[o.nsets++] = (run_set){p->string, (int64_t)p->valuedouble};
    }
    run_result res;
    run(&o, &res);
    cr_assert_geq(res.variants[0].nnotes, 1);
    cr_assert_str_eq(res.variants[0].notes[0], torch_text);
    run_result_free(&res);
    cJSON_Delete(twin);
    free(text);
}

Test(scenario, inplace_ops_full_scale_figures)
{
    run_options o = {.backend = DEVICE_SIM, .dry_run = true};
    run_result res;
    run(&o, &res);
    cr_assert_eq(res.scale, SCALE_FULL);
    all_passed(&res);
    const double act = 128.0 * (1 << 20); /* 8192 x 4096 floats */
    const variant_result *bug = scn_test_variant(&res, "bug"), *fix = scn_test_variant(&res, "fix-inplace");
    cr_assert_eq(metric(bug, "peak above the inputs"), act, "two activations at the peak");
    cr_assert_eq(metric(bug, "allocations by the ops"), 10.0);
    cr_assert_eq(bug->stats.allocated_bytes[STAT_ALL].peak, 2 * (int64_t)act);
    cr_assert_eq(metric(fix, "peak above the inputs"), 0.0, "one activation");
    cr_assert_eq(metric(fix, "allocations by the ops"), 0.0);
    cr_assert_eq(fix->stats.allocated_bytes[STAT_ALL].peak, (int64_t)act);
    const variant_result *hazard = scn_test_variant(&res, "bug-inplace-on-saved");
    cr_assert_eq(hazard->outcome, OUTCOME_OK, "the RuntimeError is caught, as the except clause does");
    cr_assert_str_eq(hazard->notes[0], IN_PLACE_ERROR("[8192, 4096]"));
    cr_assert_str_eq(hazard->samples[4].label, "backward raised");
    cr_assert_eq(metric(hazard, "bytes of the clone"), 0.0);
    const variant_result *clone = scn_test_variant(&res, "fix-clone");
    cr_assert_eq(metric(clone, "bytes of the clone"), act);
    cr_assert_str_eq(clone->samples[4].label, "backward");
    cr_assert_eq(clone->stats.allocated_bytes[STAT_ALL].peak - hazard->stats.allocated_bytes[STAT_ALL].peak, (int64_t)act,
                 "the clone raises the peak by one activation");
    const variant_result *myth = scn_test_variant(&res, "myth-same-layout");
    cr_assert_eq(metric(myth, "allocations by the ops"), 10.0, "x = x + y allocates every time");
    cr_assert_eq(metric(myth, "peak above the inputs"), act);
    run_result_free(&res);
}

Test(scenario, inplace_ops_set_spread_and_budgets)
{
    static const struct {
        run_set set;
        const char *only; /* one variant, or NULL for all */
    } cases[] = {{{"width", 1}, NULL},  {{"width", 65536}, NULL}, {{"width", 777}, "fix-clone"},
                 {{"batch", 1}, NULL},  {{"batch", 65536}, NULL}, {{"ops", 1}, "bug"},
                 {{"ops", 100}, "fix-inplace"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run_set set = cases[k].set;
        run_options o = {.backend = DEVICE_SIM, .scale = SCALE_CI, .nsets = 1};
        o.sets[0] = set;
        if (cases[k].only)
            o.variants[o.nvariants++] = cases[k].only;
        run_result res;
        run(&o, &res);
        for (size_t v = 0; v < res.nvariants; v++) {
            const variant_result *vr = &res.variants[v];
            for (size_t e = 0; e < vr->nexpect; e++)
                cr_expect(vr->expect[e].holds, "%s=%lld %s: ✗ %s", set.name, (long long)set.value, vr->v->name,
                          vr->expect[e].text);
        }
        cr_assert(scn_test_expected(&res), "--set %s=%lld", set.name, (long long)set.value);
        if (set.value == 65536)
            cr_assert(!res.variants[0].reproduced, "a 1 GiB input does not fit the CI budget");
        run_result_free(&res);
    }
    /* budgets that cut the chain and the graph short: every variant still says what holds */
    static const size_t budgets[] = {(size_t)20 << 20, (size_t)70 << 20};
    for (size_t k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
        run_options o = {.backend = DEVICE_SIM, .scale = SCALE_CI, .budget = budgets[k]};
        run_result res;
        run(&o, &res);
        cr_assert(scn_test_expected(&res), "--budget %zu MiB", budgets[k] >> 20);
        if (k == 0) {
            const variant_result *bug = scn_test_variant(&res, "bug");
            cr_assert_eq(bug->outcome, OUTCOME_OOM, "the second activation does not fit in 20 MiB");
            cr_assert(bug->reproduced);
            cr_assert_eq(scn_test_variant(&res, "fix-inplace")->outcome, OUTCOME_OK, "in place, one activation fits");
        }
        run_result_free(&res);
    }
    run_options o = {.backend = DEVICE_SIM, .nsets = 1};
    o.sets[0] = (run_set){"ops", 101};
    char err[256] = "";
    cr_assert_eq(runner_validate(sc(), &o, err, sizeof err), OOM_EINVAL);
    cr_assert_not_null(strstr(err, "ops"), "%s", err);
}
