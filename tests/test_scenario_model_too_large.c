/* test_scenario_model_too_large.c - the model_too_large scenario, the runner's several devices (scn_rt_device), the
 * copies between runtimes, and PyTorch's recording.
 *
 * Suite "scenario" (backend under test where a runtime is opened directly; the scenario runs on sim). The
 * recording, tests/data/twins/model_too_large.torch.json, comes from scripts/twins/model_too_large.py on a GPU;
 * until it is committed the parity test is skipped.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "results/report.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "testutil.h"
#include "scntest.h"
#include "twin.h"

#define RECORDING "tests/data/twins/model_too_large.torch.json"

Test(scenario, model_too_large_counters_equal_pytorch)
{
    twin_check(scenario_find("model_too_large"), RECORDING);
}

/* ---- tensor_copy_to, tensor_copy_from_host_ ---------------------------------------------------------------- */

Test(scenario, tensor_copy_to_moves_values_into_the_other_runtimes_allocator)
{
    rt *a = test_rt_open(0, NULL), *b = test_rt_open(0, NULL);
    cr_assert(a && b);
    float host[6] = {1, -2, 3.5f, 4, 5, -6}, back[6] = {0};
    tensor *x = tensor_from_host(a, DT_F32, SHAPE(2, 3), host);
    int64_t b0 = test_stat(b, "allocated_bytes.all.current"), a0 = test_stat(a, "allocated_bytes.all.current");
    tensor *y = tensor_copy_to(b, x);
    cr_assert_not_null(y, "%s", rt_message(b));
    cr_assert_eq(y->rt, b);
    cr_assert_eq(y->ndim, 2);
    cr_assert_eq(y->shape[1], 3);
    cr_assert_eq(test_stat(b, "allocated_bytes.all.current") - b0, 512, "one 512-byte block on the destination");
    cr_assert_eq(test_stat(a, "allocated_bytes.all.current"), a0, "nothing more on the source");
    cr_assert_eq(tensor_to_host(y, back), OOM_OK);
    cr_assert_arr_eq(back, host, sizeof host);
    /* t.copy_(host): in place, the version bumped */
    float two[6] = {9, 8, 7, 6, 5, 4};
    uint32_t ver = y->st->version;
    cr_assert_eq(tensor_copy_from_host_(y, two), OOM_OK);
    cr_assert_eq(y->st->version, ver + 1);
    cr_assert_eq(tensor_to_host(y, back), OOM_OK);
    cr_assert_arr_eq(back, two, sizeof two);
    /* not differentiable: a tensor that needs grad, with grad mode on, is refused */
    x->requires_grad = true;
    cr_assert_null(tensor_copy_to(b, x));
    cr_assert_eq(rt_status(a), OOM_EINVAL);
    cr_assert_not_null(strstr(rt_message(a), "not differentiable"), "%s", rt_message(a));
    rt_clear(a);
    tensor_release(y);
    tensor_release(x);
    cr_assert_eq(test_stat(b, "allocated_bytes.all.current"), 0);
    rt_close(a);
    rt_close(b);
}

Test(scenario, tensor_copy_to_an_oom_is_the_destinations)
{
    rt *a = test_rt_open(0, NULL), *b = test_rt_open((size_t)2 << 20, NULL);
    cr_assert(a && b);
    tensor *x = tensor_zeros(a, DT_F32, SHAPE(1024, 1024)); /* 4 MiB: more than b's 2 MiB budget */
    cr_assert_null(tensor_copy_to(b, x));
    cr_assert_eq(rt_status(b), OOM_ENOMEM_DEVICE);
    cr_assert(rt_ok(a));
    rt_clear(b);
    tensor_release(x);
    rt_close(a);
    rt_close(b);
}

/* ---- the runner's several devices ----------------------------------------------------------------------------- */

static const scenario_param probe_params[] = {{"leak", "leave a block allocated on device 2", 0, 0, 1, 0}};
static const scenario_variant probe_variants[] = {{"bug", VARIANT_BUG, "three devices", ""}};

/* step 0 on device 0 alone; then devices 1 and 2 open (2 opens 1); 4 MiB on device 2 held at step 1; an OOM on
 * device 1 (a 2 GiB request over the 64 MiB budget); with leak=1 a 1 MiB block is left allocated on device 2 (an
 * allocator block rather than a tensor, so that nothing of the host leaks). */
static oom_status probe_run(scn *s, const scenario_variant *v)
{
    (void)v;
    tensor *a = tensor_zeros(scn_rt(s), DT_F32, SHAPE(256, 1024)); /* 1 MiB on device 0 */
    scn_step(s, "one device");
    rt *r2 = scn_rt_device(s, 2);
    cr_assert_not_null(r2);
    cr_assert_eq(scn_devices(s), 3);
    cr_assert_null(scn_rt_device(s, SCN_MAX_DEVICES), "out of range");
    rt_clear(scn_rt(s));
    tensor *b = tensor_zeros(r2, DT_F32, SHAPE(1024, 1024));
    scn_step(s, "three devices");
    cr_assert_eq(scn_stat_device(s, 2, "allocated_bytes.all.current"), 4 << 20);
    cr_assert_eq(scn_stat_device(s, 1, "allocated_bytes.all.current"), 0);
    tensor *c = tensor_empty(scn_rt_device(s, 1), DT_F32, SHAPE(512, 1024, 1024));
    cr_assert_null(c);
    cr_assert(scn_caught(s, "on device 1"));
    cr_assert(rt_ok(scn_rt_device(s, 1)), "caught and cleared");
    tensor_release(a);
    tensor_release(b);
    devptr p = 0;
    if (scn_param(s, "leak"))
        cr_assert_eq(cachealloc_malloc(r2->ca, (size_t)1 << 20, &p), OOM_OK);
    scn_step(s, "released");
    return OOM_OK;
}

static const scenario probe = {
    .name = "probe", .title = "devices", .story = "", .default_budget = (size_t)64 << 20,
    .params = probe_params, .nparams = 1, .variants = probe_variants, .nvariants = 1, .run = probe_run,
};

Test(scenario, runner_several_devices_samples_ooms_rows_and_json)
{
    run_options o = {.backend = DEVICE_SIM, .scale = SCALE_CI};
    run_result res;
    char err[256] = "";
    cr_assert_eq(runner_run(&probe, &o, &res, err, sizeof err), OOM_OK, "%s", err);
    const variant_result *v = &res.variants[0];
    cr_assert(v->passed);
    cr_assert_eq(v->ndevices, 2);
    cr_assert_eq(v->devices[1].index, 2);
    cr_assert_eq(v->devices[1].cap, res.cap, "the same budget on every device");
    cr_assert_not_null(strstr(v->devices[0].name, "sim:1"), "%s", v->devices[0].name);
    for (size_t k = 0; k < 2; k++) {
        cr_assert_eq(v->devices[k].nsamples, v->nsamples, "in step with device 0");
        for (size_t i = 0; i < v->nsamples; i++)
            cr_assert_str_eq(v->devices[k].samples[i].label, v->samples[i].label);
        cr_assert_eq(v->devices[k].samples[0].reserved, 0, "before it was opened: zeros");
    }
    cr_assert_eq(v->samples[1].allocated, 1 << 20);
    cr_assert_eq(v->devices[1].samples[1].allocated, 4 << 20);
    cr_assert_eq(v->devices[1].samples[2].allocated, 0);
    cr_assert_eq(v->devices[0].samples[1].allocated, 0);
    cr_assert_eq(v->outcome, OUTCOME_OOM);
    cr_assert_eq(v->oom.device, 1);
    cr_assert_str_eq(v->oom.what, "on device 1");
    cr_assert_eq(v->devices[0].samples[2].ooms, 1, "device 1's allocator counted its OOM");
    cr_assert_eq(v->samples[2].ooms, 0);
    /* the table: one row per device; the JSON: "devices" with their samples, and the OOM's device */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    report_table(&res, f);
    fclose(f);
    cr_assert_not_null(strstr(buf, "\n  device 1 "), "%s", buf);
    cr_assert_not_null(strstr(buf, "\n  device 2 "), "%s", buf);
    cr_assert_not_null(strstr(buf, "OOM on device 1 at on device 1"), "%s", buf);
    free(buf);
    cJSON *j = report_json(&res);
    cJSON *jv = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 0);
    cJSON *devs = cJSON_GetObjectItem(jv, "devices");
    cr_assert_eq(cJSON_GetArraySize(devs), 2);
    cJSON *d2 = cJSON_GetArrayItem(devs, 1);
    cr_assert_eq(cJSON_GetObjectItem(d2, "index")->valueint, 2);
    cr_assert_eq(cJSON_GetObjectItem(d2, "peak_allocated")->valuedouble, (double)(4 << 20));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(d2, "samples")), (int)v->nsamples);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(jv, "oom"), "device")->valueint, 1);
    cJSON_Delete(j);
    run_result_free(&res);

    /* a block left on device 2 fails the variant's clean-end check, naming the device */
    o.nsets = 1;
    o.sets[0].name = "leak";
    o.sets[0].value = 1;
    cr_assert_eq(runner_run(&probe, &o, &res, err, sizeof err), OOM_OK, "%s", err);
    v = &res.variants[0];
    cr_assert_not(v->passed);
    bool named = false;
    for (size_t i = 0; i < v->nexpect; i++)
        named = named || (!v->expect[i].holds && strstr(v->expect[i].text, "device 2 ends with every tensor released"));
    cr_assert(named);
    run_result_free(&res);
}

/* A single-device scenario's JSON has an empty "devices" array. */
Test(scenario, runner_one_device_has_no_device_rows)
{
    run_options o = {.backend = DEVICE_SIM, .dry_run = true};
    run_result res;
    char err[256] = "";
    cr_assert_eq(runner_run(scenario_find("fragmentation"), &o, &res, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(res.variants[0].ndevices, 0);
    cJSON *j = report_json(&res);
    cJSON *jv = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(jv, "devices")), 0);
    cJSON_Delete(j);
    run_result_free(&res);
}

/* ---- the scenario ------------------------------------------------------------------------------------------------ */

static void run_it(run_options *o, run_result *res) { scn_test_run("model_too_large", o, res); }

static int64_t peak(const memstats *m, const char *key)
{
    int64_t v = 0;
    memstats_get(m, key, &v);
    return v;
}

/* The same parameter fails at both scales: layers.15.weight, after 15 layers (ci: 4 MiB weights in 20 MiB
 * segments under 72 MiB; full: 256 MiB weights, a segment each, under 3968 MiB). */
Test(scenario, model_too_large_fails_at_layer_15_at_both_scales)
{
    static const struct {
        run_scale scale;
        bool dry;
        int64_t weights_held; /* allocated at the OOM: 15 weights and 15 biases */
    } cases[] = {
        {SCALE_CI, false, 15 * ((int64_t)4 << 20) + 15 * 4096},
        {SCALE_FULL, true, 15 * ((int64_t)256 << 20) + 15 * 32768},
    };
    for (size_t c = 0; c < 2; c++) {
        run_options o = {.backend = DEVICE_SIM, .scale = cases[c].scale, .dry_run = cases[c].dry};
        run_result res;
        run_it(&o, &res);
        cr_assert(res.passed);
        const variant_result *bug = scn_test_variant(&res, "bug");
        cr_assert_eq(bug->outcome, OUTCOME_OOM);
        cr_assert_str_eq(bug->oom.what, "model.to(device): layers.15.weight");
        cr_assert_eq(bug->oom.step, 15, "a sample after each of the 15 layers moved");
        cr_assert_str_eq(bug->samples[14].label, "moved layer 14");
        cr_assert_eq((int64_t)bug->oom.allocated, cases[c].weights_held);
        for (size_t i = 1; i < res.nvariants; i++) {
            cr_assert_eq(res.variants[i].outcome, OUTCOME_OK, "%s", res.variants[i].v->name);
            cr_assert(res.variants[i].reproduced, "%s", res.variants[i].v->name);
        }
        /* half: half the bytes of the weights per layer, every layer loaded */
        const variant_result *half = scn_test_variant(&res, "fix-half");
        cr_assert_eq(half->samples[23].allocated, 24 * (cases[c].weights_held / 15 / 2));
        /* model-parallel: two devices, 12 layers each */
        const variant_result *mp = scn_test_variant(&res, "fix-model-parallel");
        cr_assert_eq(mp->ndevices, 1);
        cr_assert_eq(mp->samples[23].allocated, 12 * (cases[c].weights_held / 15));
        cr_assert_eq(mp->devices[0].samples[23].allocated, 12 * (cases[c].weights_held / 15));
        cr_assert_eq(mp->devices[0].samples[11].allocated, 0, "layers 0..11 are device 0's");
        /* offload: the device peak is two layers and the activations, whatever the depth */
        const variant_result *off = scn_test_variant(&res, "fix-offload");
        int64_t layer = cases[c].weights_held / 15;
        cr_assert_lt(peak(&off->stats, "allocated_bytes.all.peak"), 2 * layer + layer / 2);
        cr_assert_geq(peak(&off->stats, "allocated_bytes.all.peak"), 2 * layer);
        run_result_free(&res);
    }
}

/* --set across its ranges: every run passes; where a parameter removes the failure, the variant says so. */
Test(scenario, model_too_large_set_exploration)
{
    static const struct {
        const char *sets;
        const char *reproduced; /* bug, fix-half, fix-model-parallel, fix-offload */
        const char *bug_oom;    /* the bug's OOM, "" for none */
        bool dry;               /* the large ones count bytes only (the same outcomes, in a fraction of the time) */
    } cases[] = {
        {"width=8192", "1000", "model.to(device): layers.0.weight", true}, /* not even one layer, in any form */
        {"width=2000", "1001", "model.to(device): layers.4.weight", true},
        {"width=16", "0101", "", false},     /* everything fits: nothing to fix, no split needed */
        {"depth=2", "0101", "", false},
        {"batch=4096", "1001", "model.to(device): layers.15.weight", true}, /* the weights fit, the forward does not */
        {"devices=8,depth=64", "1011", "model.to(device): layers.15.weight", true},
        {"depth=5,devices=7", "0101", "", false},
        {"width=333,depth=3,batch=1", "0101", "", false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_options o = {.backend = DEVICE_SIM, .scale = SCALE_CI, .dry_run = cases[c].dry};
        scn_test_sets(&o, cases[c].sets);
        run_result res;
        run_it(&o, &res);
        cr_assert(scn_test_expected(&res), "[%s] did not pass", cases[c].sets);
        cr_assert_eq(res.nvariants, 4);
        for (size_t v = 0; v < 4; v++)
            cr_assert_eq(res.variants[v].reproduced, cases[c].reproduced[v] == '1', "[%s] %s", cases[c].sets,
                         res.variants[v].v->name);
        const variant_result *bug = scn_test_variant(&res, "bug");
        cr_assert_str_eq(bug->ooms ? bug->oom.what : "", cases[c].bug_oom, "[%s]", cases[c].sets);
        run_result_free(&res);
    }
    static const char *const bad[] = {"width", "depth", "devices", "batch"};
    static const int64_t bad_values[] = {8193, 1, 9, 0};
    for (size_t i = 0; i < 4; i++) {
        run_options o = {.backend = DEVICE_SIM, .nsets = 1};
        o.sets[0].name = bad[i];
        o.sets[0].value = bad_values[i];
        char err[256] = "";
        cr_assert_eq(runner_validate(scenario_find("model_too_large"), &o, err, sizeof err), OOM_EINVAL, "%s", bad[i]);
        cr_assert_not_null(strstr(err, bad[i]), "%s", err);
    }
}
