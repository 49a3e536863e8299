/* test_scenario_inference_oom.c - the inference_oom scenario: the variants against each other (what no single variant
 * can assert about itself), the same outcomes at both scales, its --set exploration, and PyTorch's recording.
 *
 * Suite "scenario" (backend under test). The recording, tests/data/twins/inference_oom.torch.json, comes from
 * scripts/twins/inference_oom.py on a GPU; until it is committed the parity test is skipped.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/runner.h"
#include "run/scenario.h"
#include "testutil.h"
#include "scntest.h"
#include "twin.h"

#define RECORDING "tests/data/twins/inference_oom.torch.json"

Test(scenario, inference_oom_counters_equal_pytorch)
{
    twin_check(scenario_find("inference_oom"), RECORDING);
}

static void run_it(run_options *o, run_result *res) { scn_test_run("inference_oom", o, res); }

/* At both scales (ci computing, full in a dry run): the bug fails in its forward, every fix and myth runs, and the
 * peaks order as the story says: chunks < no_grad <= checkpoint under no_grad, the half forward < no_grad, and
 * checkpointing with grad above no_grad, with a graph left on its output. */
Test(scenario, inference_oom_variants_against_each_other_at_both_scales)
{
    for (int full = 0; full < 2; full++) {
        run_options o = {.backend = DEVICE_SIM, .scale = full ? SCALE_FULL : SCALE_CI, .dry_run = full};
        run_result res;
        run_it(&o, &res);
        cr_assert(res.passed, "[%s] did not pass", full ? "full" : "ci");
        const variant_result *bug = scn_test_variant(&res, "bug");
        cr_assert_eq(bug->outcome, OUTCOME_OOM);
        cr_assert_str_eq(bug->oom.what, "forward with grad enabled");
        cr_assert_eq(bug->oom.step, 1, "the OOM comes right after the first sample");
        for (size_t v = 1; v < res.nvariants; v++) {
            cr_assert_eq(res.variants[v].outcome, OUTCOME_OK, "%s", res.variants[v].v->name);
            cr_assert(res.variants[v].reproduced, "%s", res.variants[v].v->name);
        }
        const scn_sample *nograd = scn_test_sample(scn_test_variant(&res, "fix-no-grad"), "forward under no_grad");
        const scn_sample *chunks = scn_test_sample(scn_test_variant(&res, "fix-chunked"), "all 8 chunks");
        const scn_sample *half = scn_test_sample(scn_test_variant(&res, "fix-half"), "half forward under no_grad");
        const scn_sample *conv = scn_test_sample(scn_test_variant(&res, "fix-half"), "model.half()");
        const variant_result *myth = scn_test_variant(&res, "myth-checkpoint-no-grad");
        const scn_sample *ck = scn_test_sample(myth, "checkpoint_sequential under no_grad");
        const scn_sample *plain = scn_test_sample(myth, "plain forward under no_grad");
        const variant_result *mg = scn_test_variant(&res, "myth-checkpoint-grad");
        const scn_sample *ckg = scn_test_sample(mg, "checkpoint_sequential with grad");
        const scn_sample *ckg_d = scn_test_sample(mg, "checkpoint_sequential with grad: out.detach()");
        cr_assert_lt(chunks->allocated_peak, nograd->allocated_peak);
        cr_assert_lt(half->allocated_peak, nograd->allocated_peak);
        cr_assert_gt(conv->allocated_peak, scn_test_sample(scn_test_variant(&res, "fix-half"), "model and input")->allocated);
        cr_assert_eq(plain->allocated_peak, nograd->allocated_peak, "the myth's plain forward is fix-no-grad's");
        cr_assert_gt(ck->allocated_peak, plain->allocated_peak, "checkpoint_sequential's frame holds a segment input");
        cr_assert_gt(ckg->allocated_peak, nograd->allocated_peak);
        cr_assert_lt(ckg->reserved_peak, (int64_t)res.budget, "checkpointing with grad fits the default budget");
        cr_assert_gt(ckg->allocated - ckg_d->allocated, 0, "its output holds a graph");
        run_result_free(&res);
    }
}

/* --set across the ranges (the small ones computing at ci scale, the large ones in dry runs): every run passes;
 * where the bug fits, or nothing fits, the variants say "not reproduced". */
Test(scenario, inference_oom_set_exploration)
{
    static const struct {
        const char *sets; /* name=value,... */
        run_scale scale;
        bool dry;
        const char *bug_outcome;
        bool bug_reproduced;
        bool fixes_reproduced;
    } cases[] = {
        {"batch=1", SCALE_CI, false, "ok", false, true}, /* the bug fits: not reproduced */
        {"batch=2048", SCALE_CI, false, "ok", false, true},
        {"width=17,batch=33,chunk=7", SCALE_CI, false, "ok", false, true},
        {"depth=1", SCALE_CI, false, "ok", false, true}, /* one block: nothing to checkpoint */
        {"chunk=1,batch=64", SCALE_CI, false, "ok", false, true},
        {"chunk=65536", SCALE_CI, true, "oom", true, true}, /* one chunk: the whole batch under no_grad */
        {"depth=16", SCALE_CI, true, "oom", true, true},
        {"width=8192", SCALE_CI, true, "oom", false, false}, /* the model alone outgrows the ci budget */
        {"width=8192,depth=16,batch=65536,chunk=65536", SCALE_FULL, true, "oom", false, false},
        {"width=16,depth=1,batch=1,chunk=1", SCALE_FULL, true, "ok", false, true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_options o = {.backend = DEVICE_SIM, .scale = cases[c].scale, .dry_run = cases[c].dry};
        scn_test_sets(&o, cases[c].sets);
        run_result res;
        run_it(&o, &res);
        cr_assert(scn_test_expected(&res), "[%s] did not pass", cases[c].sets);
        const variant_result *bug = scn_test_variant(&res, "bug");
        cr_assert_str_eq(variant_outcome_str(bug->outcome), cases[c].bug_outcome, "[%s]", cases[c].sets);
        cr_assert_eq(bug->reproduced, cases[c].bug_reproduced, "[%s] bug", cases[c].sets);
        cr_assert_eq(scn_test_variant(&res, "fix-no-grad")->reproduced, cases[c].fixes_reproduced, "[%s]", cases[c].sets);
        cr_assert_eq(scn_test_variant(&res, "fix-chunked")->reproduced, cases[c].fixes_reproduced, "[%s]", cases[c].sets);
        run_result_free(&res);
    }
    /* out of range: refused before anything runs */
    static const char *const bad[] = {"width", "depth", "batch", "chunk"};
    static const int64_t bad_values[] = {15, 17, 0, 65537};
    for (size_t i = 0; i < 4; i++) {
        run_options o = {.backend = DEVICE_SIM, .nsets = 1};
        o.sets[0].name = bad[i];
        o.sets[0].value = bad_values[i];
        char err[256] = "";
        cr_assert_eq(runner_validate(scenario_find("inference_oom"), &o, err, sizeof err), OOM_EINVAL, "%s", bad[i]);
        cr_assert_not_null(strstr(err, bad[i]), "%s", err);
    }
}
