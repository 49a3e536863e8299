/* test_isolate.c - each variant in its own process: a crash (SIGSEGV) and a hang (past the scenario's timeout)
 * are reported, the other variants still run, healthy variants report exactly what they report in-process, and
 * --no-fork says so. The scenarios are tests/fixtures' (isolation_fixture), in this binary and in
 * build/oomlab_fixtures (the command line with them, beside $OOMLAB_BIN), never in build/oomlab. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fileio.h"
#include "run/isolate.h"
#include "run/runner.h"
#include "testutil.h"
#include "run/scenario.h"

TestSuite(isolate);

static const variant_result *variant_of(const run_result *r, const char *name)
{
    for (size_t i = 0; i < r->nvariants; i++)
        if (strcmp(r->variants[i].v->name, name) == 0)
            return &r->variants[i];
    cr_assert_fail("no variant %s", name);
    return NULL;
}

static void run_fixture(run_options *o, run_result *res)
{
    const scenario *sc = scenario_find("isolation_fixture");
    cr_assert_not_null(sc, "the fixture scenarios are not registered in this binary");
    char err[512] = "";
    cr_assert_eq(runner_run(sc, o, res, err, sizeof err), OOM_OK, "%s", err);
}

Test(isolate, a_crash_and_a_hang_are_reported_and_the_others_run)
{
    run_options o = {.backend = DEVICE_SIM};
    run_result res;
    run_fixture(&o, &res);
    cr_assert_eq(res.nvariants, 4);
    cr_assert_null(res.isolation);
    const variant_result *before = variant_of(&res, "ok-before"), *after = variant_of(&res, "ok-after");
    const variant_result *crash = variant_of(&res, "crash"), *hang = variant_of(&res, "hang");
    for (int k = 0; k < 2; k++) { /* the healthy ones, before and after, ran and report their samples */
        const variant_result *v = k ? after : before;
        cr_assert_eq(v->outcome, OUTCOME_OK, "%s: %s", v->v->name, v->error);
        cr_assert(v->passed);
        cr_assert_eq(v->nsamples, 2);
        cr_assert_str_eq(v->samples[1].label, "released");
        cr_assert_eq(v->samples[0].allocated, 1 << 20);
        cr_assert_eq(v->nexpect, 2);
    }
    cr_assert_eq(crash->outcome, OUTCOME_CRASHED);
    cr_assert_eq(crash->signal, SIGSEGV);
    cr_assert_str_eq(isolate_signal_name(crash->signal), "SIGSEGV");
    cr_assert(strncmp(crash->error, "crashed: SIGSEGV (", 18) == 0, "%s", crash->error);
    cr_assert_not(crash->passed);
    cr_assert_eq(hang->outcome, OUTCOME_TIMEOUT);
    cr_assert_str_eq(hang->error, "timed out: still running after 1 s (the scenario's limit; --timeout SECONDS "
                                  "changes it), killed");
    cr_assert_not(hang->passed);
    cr_assert_eq(res.crashed, 1);
    cr_assert_eq(res.timed_out, 1);
    cr_assert_not(res.passed);
    cr_assert_str_eq(res.backend, "sim");
    run_result_free(&res);
}

Test(isolate, timeout_option_overrides_the_scenario)
{
    run_options o = {.backend = DEVICE_SIM, .timeout_s = 0.25, .variants = {"hang"}, .nvariants = 1};
    run_result res;
    run_fixture(&o, &res);
    cr_assert_eq(res.nvariants, 1);
    cr_assert_eq(res.variants[0].outcome, OUTCOME_TIMEOUT);
    cr_assert_str_eq(res.variants[0].error, "timed out: still running after 0.25 s (--timeout), killed");
    cr_assert_str_eq(res.backend, "sim", "no child reported: the parent names where it ran");
    run_result_free(&res);
}

Test(isolate, no_fork_runs_in_this_process_and_says_so)
{
    run_options o = {.backend = DEVICE_SIM, .no_fork = true, .variants = {"ok-before"}, .nvariants = 1};
    run_result res;
    run_fixture(&o, &res);
    cr_assert_not_null(res.isolation);
    cr_assert(strncmp(res.isolation, "--no-fork: ", 11) == 0, "%s", res.isolation);
    cr_assert_eq(res.variants[0].outcome, OUTCOME_OK);
    cr_assert(res.passed);
    run_result_free(&res);
}

/* A variant's result from its child equals the one computed in this process: every sample, expectation, note,
 * metric name, OOM and statistic (only timings differ). */
static void expect_same(const variant_result *a, const variant_result *b)
{
    const char *n = a->v->name;
    cr_assert_eq(a->v, b->v);
    cr_assert_eq(a->outcome, b->outcome, "%s", n);
    cr_assert_eq(a->passed, b->passed, "%s", n);
    cr_assert_eq(a->reproduced, b->reproduced, "%s", n);
    cr_assert_str_eq(a->alloc_conf, b->alloc_conf, "%s", n);
    cr_assert_str_eq(a->error, b->error, "%s", n);
    cr_assert_eq(a->ooms, b->ooms, "%s", n);
    cr_assert_str_eq(a->oom.message, b->oom.message, "%s", n);
    cr_assert_eq(a->oom.step, b->oom.step, "%s", n);
    cr_assert_eq(a->oom.reserved, b->oom.reserved, "%s", n);
    cr_assert_eq(memcmp(&a->stats, &b->stats, sizeof a->stats), 0, "%s: statistics differ", n);
    cr_assert_eq(a->nsamples, b->nsamples, "%s", n);
    for (size_t i = 0; i < a->nsamples; i++) {
        const scn_sample *x = &a->samples[i], *y = &b->samples[i];
        cr_assert_str_eq(x->label, y->label, "%s", n);
        cr_assert(x->allocated == y->allocated && x->reserved == y->reserved && x->active == y->active &&
                      x->inactive_split == y->inactive_split && x->allocated_peak == y->allocated_peak &&
                      x->reserved_peak == y->reserved_peak && x->segments == y->segments &&
                      x->device_allocs == y->device_allocs && x->device_frees == y->device_frees &&
                      x->alloc_retries == y->alloc_retries && x->ooms == y->ooms,
                  "%s: sample %zu (%s) differs", n, i, x->label);
    }
    cr_assert_eq(a->nexpect, b->nexpect, "%s", n);
    for (size_t i = 0; i < a->nexpect; i++) {
        cr_assert_eq(a->expect[i].holds, b->expect[i].holds, "%s", n);
        cr_assert_str_eq(a->expect[i].text, b->expect[i].text, "%s", n);
    }
    cr_assert_eq(a->nnotes, b->nnotes, "%s", n);
    for (size_t i = 0; i < a->nnotes; i++)
        cr_assert_str_eq(a->notes[i], b->notes[i], "%s", n);
    cr_assert_eq(a->nmetrics, b->nmetrics, "%s", n);
    for (size_t i = 0; i < a->nmetrics; i++)
        cr_assert_str_eq(a->metrics[i].name, b->metrics[i].name, "%s", n);
    cr_assert_eq(a->noom_marks, b->noom_marks, "%s", n);
    for (size_t i = 0; i < a->noom_marks; i++)
        cr_assert(a->oom_marks[i].step == b->oom_marks[i].step && a->oom_marks[i].requested == b->oom_marks[i].requested &&
                      strcmp(a->oom_marks[i].what, b->oom_marks[i].what) == 0,
                  "%s: OOM %zu differs", n, i);
    cr_assert_eq(a->oom_nlayout, b->oom_nlayout, "%s", n);
    for (size_t k = 0; k < a->oom_nlayout; k++) {
        const ca_snap_segment *x = &a->oom_layout[k], *y = &b->oom_layout[k];
        cr_assert(x->address == y->address && x->total_size == y->total_size && x->nblocks == y->nblocks,
                  "%s: segment %zu at the OOM differs", n, k);
        for (size_t i = 0; i < x->nblocks; i++)
            cr_assert(x->blocks[i].addr == y->blocks[i].addr && x->blocks[i].size == y->blocks[i].size &&
                          x->blocks[i].state == y->blocks[i].state,
                      "%s: segment %zu block %zu differs", n, k, i);
    }
    cr_assert_eq(a->ndevices, b->ndevices, "%s", n);
    for (size_t k = 0; k < a->ndevices; k++) {
        cr_assert_str_eq(a->devices[k].name, b->devices[k].name, "%s", n);
        cr_assert_eq(a->devices[k].nsamples, b->devices[k].nsamples, "%s", n);
        cr_assert_eq(memcmp(&a->devices[k].stats, &b->devices[k].stats, sizeof a->devices[k].stats), 0, "%s", n);
        for (size_t i = 0; i < a->devices[k].nsamples; i++)
            cr_assert_eq(a->devices[k].samples[i].allocated, b->devices[k].samples[i].allocated, "%s", n);
    }
}

Test(isolate, a_child_reports_what_this_process_computes)
{
    /* fragmentation (OOMs, notes, expandable segments) and model_too_large (a second device, metrics) */
    static const char *const names[] = {"fragmentation", "model_too_large"};
    for (size_t k = 0; k < 2; k++) {
        const scenario *sc = scenario_find(names[k]);
        run_options fork_o = {.backend = DEVICE_SIM}, here_o = {.backend = DEVICE_SIM, .no_fork = true};
        run_result forked, here;
        char err[512] = "";
        cr_assert_eq(runner_run(sc, &fork_o, &forked, err, sizeof err), OOM_OK, "%s", err);
        cr_assert_eq(runner_run(sc, &here_o, &here, err, sizeof err), OOM_OK, "%s", err);
        cr_assert_eq(forked.nvariants, here.nvariants);
        cr_assert(forked.passed && here.passed);
        cr_assert_str_eq(forked.backend, here.backend);
        cr_assert_str_eq(forked.device, here.device);
        cr_assert_eq(forked.cap, here.cap);
        cr_assert_eq(forked.device_total, here.device_total);
        cr_assert_eq(forked.model_order, here.model_order);
        size_t layouts = 0;
        for (size_t i = 0; i < forked.nvariants; i++) {
            expect_same(&forked.variants[i], &here.variants[i]);
            layouts += forked.variants[i].oom_nlayout > 0;
        }
        cr_assert_gt(layouts, 0, "%s: some variant sends its layout at an OOM", names[k]);
        run_result_free(&forked);
        run_result_free(&here);
    }
}

/* ---- the command line: build/oomlab_fixtures ------------------------------------------------------------------ */

typedef struct sh_result {
    int rc;
    char *out;
} sh_result;

/* Run `BIN args` with stdout captured (stderr to /dev/null), BIN being $OOMLAB_BIN's directory's fixtures binary
 * when fixtures is true, else $OOMLAB_BIN. */
static sh_result sh(bool fixtures, const char *args)
{
    char bin[512], cmd[1024];
    test_oomlab_bin(fixtures, bin, sizeof bin);
    snprintf(cmd, sizeof cmd,
             "env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF -u PYTORCH_ALLOC_CONF "
             "'%s' %s 2>/dev/null",
             bin, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    for (size_t r; (r = fread(out + n, 1, cap - n - 1, p)) > 0;) {
        n += r;
        if (cap - n < 4096) {
            cap *= 2;
            out = realloc(out, cap);
            cr_assert_not_null(out);
        }
    }
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "%s", cmd);
    cr_assert_neq(WEXITSTATUS(st), 127, "%s not found (make build/oomlab_fixtures)", bin);
    return (sh_result){WEXITSTATUS(st), out};
}

Test(isolate, the_command_line_reports_them_and_exits_1)
{
    sh_result r = sh(true, "run isolation_fixture --backend sim --no-write");
    cr_assert_eq(r.rc, 1, "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\nok-before                  ok "), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\ncrash                      crashed "), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\nhang                       timeout "), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\nok-after                   ok "), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\n  crashed: SIGSEGV ("), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\n2 of 4 variants show what they must (✗ above)\n1 crashed, 1 timed out (each "
                                     "variant runs in its own process: the others ran)\n"),
                       "%s", r.out);
    free(r.out);

    r = sh(true, "run isolation_fixture --backend sim --no-write --json --timeout 0.5");
    cr_assert_eq(r.rc, 1);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert_not_null(j, "%s", r.out);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(j, "variants");
    cr_assert_eq(cJSON_GetArraySize(vs), 4);
    static const char *const outcomes[] = {"ok", "crashed", "timeout", "ok"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetArrayItem(vs, i);
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(v, "outcome")->valuestring, outcomes[i]);
        const cJSON *sig = cJSON_GetObjectItemCaseSensitive(v, "signal");
        if (i == 1)
            cr_assert(cJSON_IsString(sig) && strcmp(sig->valuestring, "SIGSEGV") == 0);
        else
            cr_assert_null(sig, "only a crashed variant has a signal");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(v, "error");
        cr_assert(i == 0 || i == 3 ? cJSON_IsNull(e) : cJSON_IsString(e));
    }
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(vs, 2), "error")->valuestring,
                     "timed out: still running after 0.5 s (--timeout), killed");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(j, "isolation"), "isolated: no isolation key, as before");
    cJSON_Delete(j);
    free(r.out);

    r = sh(true, "run isolation_fixture --backend sim --variant ok-before,ok-after --no-write");
    cr_assert_eq(r.rc, 0, "%s", r.out);
    cr_assert_null(strstr(r.out, "crashed,"), "no closing line when every variant finished: %s", r.out);
    cr_assert_null(strstr(r.out, "isolation:"), "%s", r.out);
    free(r.out);

    r = sh(true, "run isolation_fixture --backend sim --variant ok-before --no-fork --no-write");
    cr_assert_eq(r.rc, 0, "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\nisolation: --no-fork: the variants ran in this process (no crash or hang "
                                     "isolation, no timeout)\n"),
                       "%s", r.out);
    free(r.out);
}

Test(isolate, the_fixtures_are_not_in_oomlab)
{
    sh_result r = sh(false, "list");
    cr_assert_eq(r.rc, 0);
    cr_assert_null(strstr(r.out, "fixture"), "%s", r.out);
    free(r.out);
    r = sh(false, "run isolation_fixture --no-write");
    cr_assert_eq(r.rc, 2);
    free(r.out);
    r = sh(true, "list");
    cr_assert_null(strstr(r.out, "fixture"), "registered scenarios are found by name, never listed: %s", r.out);
    free(r.out);
}
