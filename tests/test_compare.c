/* test_compare.c - nightly regression tracking as a user runs it: `oomlab compare` (exit 0 on an unchanged run, 1
 * on a regression naming scenario, variant and metric, 2 with one line on bad input), `oomlab baseline`,
 * `oomlab export` (the JUnit file validates against tests/data/junit.xsd with xmllint; Google Benchmark's and
 * github-action-benchmark's shapes), `oomlab history` (step detection on constructed histories), and the
 * percentage parser. The binary is $OOMLAB_BIN (make test sets it: build/checked/oomlab), else build/oomlab. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "results/compare.h"
#include "results/history.h"
#include "testutil.h"

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "compare"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(compare, .init = setup, .fini = teardown);
TestSuite(history, .init = setup, .fini = teardown);

static const char *bin(void)
{
    const char *b = getenv("OOMLAB_BIN");
    return b && b[0] ? b : "build/oomlab";
}

/* tmpdir/name, formatted. */
static const char *tpath(const char *fmt, ...)
{
    static char paths[8][TEST_TMPDIR_MAX + 200];
    static int k;
    char *p = paths[k++ % 8];
    char name[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
    return p;
}

typedef struct out {
    int rc;
    char *out, *err;
} out;

/* Run `$OOMLAB_BIN args` (formatted), stdout and stderr captured, the allocator variables cleared. */
static out run(const char *fmt, ...)
{
    char args[1536], cmd[2048 + 2 * TEST_TMPDIR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd,
             "env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF -u PYTORCH_ALLOC_CONF "
             "'%s' %s >'%s/stdout' 2>'%s/stderr'",
             bin(), args, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "cannot run: %s", cmd);
    out r = {.rc = WEXITSTATUS(st), .out = fileio_read_all(tpath("stdout"), NULL),
             .err = fileio_read_all(tpath("stderr"), NULL)};
    cr_assert(r.out && r.err);
    cr_assert_neq(r.rc, 127, "%s not found: %s", bin(), r.err);
    return r;
}

static void out_free(out *r)
{
    free(r->out);
    free(r->err);
}

/* A ci-scale sim run of fragmentation into tmpdir/NAME/; the path of its results file. */
static const char *a_run(const char *name)
{
    static char paths[4][256];
    static int k;
    char *p = paths[k++ % 4];
    out r = run("run fragmentation --backend sim --scale ci --out %s", tpath("%s", name));
    cr_assert_eq(r.rc, 0, "exit %d: %s", r.rc, r.err);
    const char *at = strstr(r.out, "results: ");
    cr_assert_not_null(at, "%s", r.out);
    cr_assert_eq(sscanf(at + 9, "%255s", p), 1);
    out_free(&r);
    return p;
}

static cJSON *read_json(const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "%s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(j, "%s does not parse", path);
    return j;
}

/* Write j to path, then free it. */
static void write_json(cJSON *j, const char *path)
{
    char *text = cJSON_Print(j);
    cr_assert_not_null(text);
    cr_assert_eq(fileio_write_atomic(path, text, strlen(text)), OOM_OK);
    free(text);
    cJSON_Delete(j);
}

static cJSON *variant_of(cJSON *doc, const char *name)
{
    cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(doc, "variants"))
    {
        if (strcmp(cJSON_GetObjectItem(v, "name")->valuestring, name) == 0)
            return v;
    }
    cr_assert_fail("no variant %s", name);
    return NULL;
}

static void set_num(cJSON *o, const char *key, double v)
{
    cJSON *x = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(x), "no number %s", key);
    cJSON_SetNumberValue(x, v);
}

/* Exit 2, nothing on stdout, exactly one line on stderr containing what. */
static void expect_bad_input(out r, const char *what)
{
    cr_assert_eq(r.rc, 2, "exit %d, expected 2 (stdout: %s stderr: %s)", r.rc, r.out, r.err);
    cr_assert_str_empty(r.out, "wrote to stdout: %s", r.out);
    size_t len = strlen(r.err);
    cr_assert(len > 1 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1,
              "stderr is not exactly one line: '%s'", r.err);
    cr_assert_not_null(strstr(r.err, what), "stderr does not name '%s': %s", what, r.err);
    out_free(&r);
}

/* ---- compare ------------------------------------------------------------------------------------------------ */

Test(compare, an_unchanged_run_passes_against_its_baseline)
{
    const char *first = a_run("a"), *second = a_run("b");
    out r = run("baseline %s %s", first, tpath("baselines/sim"));
    cr_assert_eq(r.rc, 0, "exit %d: %s %s", r.rc, r.out, r.err);
    cr_assert_not_null(strstr(r.out, "every file is new"), "%s", r.out);
    out_free(&r);
    cr_assert(access(tpath("baselines/sim/fragmentation.json"), F_OK) == 0);
    r = run("compare %s %s", tpath("baselines/sim"), second);
    cr_assert_eq(r.rc, 0, "exit %d: %s %s", r.rc, r.out, r.err);
    cr_assert_not_null(strstr(r.out, "no regression: 6 variants in 1 scenarios compared, nothing moved"), "%s", r.out);
    cr_assert_str_empty(r.err);
    out_free(&r);
    /* the baseline is byte-identical when made again from another run of the same tree */
    char *before = fileio_read_all(tpath("baselines/sim/fragmentation.json"), NULL);
    r = run("baseline %s %s", second, tpath("baselines/sim"));
    cr_assert_eq(r.rc, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "0 files written"), "%s", r.out);
    out_free(&r);
    char *after = fileio_read_all(tpath("baselines/sim/fragmentation.json"), NULL);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
}

Test(compare, a_doctored_byte_counter_is_a_regression_naming_scenario_variant_and_metric)
{
    const char *base = a_run("a");
    cJSON *j = read_json(base);
    cJSON *v = variant_of(j, "fix-expandable-segments");
    set_num(v, "peak_reserved", cJSON_GetObjectItem(v, "peak_reserved")->valuedouble + 2097152);
    write_json(j, tpath("doctored.json"));
    out r = run("compare %s %s", base, tpath("doctored.json"));
    cr_assert_eq(r.rc, 1, "exit %d: %s %s", r.rc, r.out, r.err);
    cr_assert_not_null(strstr(r.out, "fragmentation/fix-expandable-segments peak_reserved"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "+2097152 (+0.20%)  ✗"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "1 regression in 6 variants of 1 scenarios"), "%s", r.out);
    out_free(&r);
    /* --tolerance relaxes it: shown, not a regression */
    r = run("compare %s %s --tolerance 0.5%%", base, tpath("doctored.json"));
    cr_assert_eq(r.rc, 0, "exit %d: %s %s", r.rc, r.out, r.err);
    cr_assert_not_null(strstr(r.out, "within --tolerance"), "%s", r.out);
    out_free(&r);
    r = run("compare %s %s --tolerance=0.1%%", base, tpath("doctored.json"));
    cr_assert_eq(r.rc, 1, "0.2%% is beyond 0.1%%: %s", r.out);
    out_free(&r);
}

Test(compare, a_sample_an_oom_step_and_an_expectation_must_be_unchanged)
{
    const char *base = a_run("a");
    cJSON *j = read_json(base);
    cJSON *bug = variant_of(j, "bug");
    cJSON *s3 = cJSON_GetArrayItem(cJSON_GetObjectItem(bug, "samples"), 3);
    set_num(s3, "allocated", cJSON_GetObjectItem(s3, "allocated")->valuedouble + 512);
    set_num(cJSON_GetObjectItem(bug, "oom"), "step", cJSON_GetObjectItem(cJSON_GetObjectItem(bug, "oom"), "step")->valuedouble + 1);
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(variant_of(j, "myth-empty-cache"), "expectations"), 0);
    cJSON_ReplaceItemInObject(e, "holds", cJSON_CreateFalse());
    write_json(j, tpath("doctored.json"));
    /* not even a 50% tolerance lets an OOM step or an expectation move */
    out r = run("compare %s %s --tolerance 50%%", base, tpath("doctored.json"));
    cr_assert_eq(r.rc, 1, "exit %d: %s %s", r.rc, r.out, r.err);
    cr_assert_not_null(strstr(r.out, "2 regressions"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "fragmentation/bug oom step"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "fragmentation/myth-empty-cache expectation 1"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "fails  changed  ✗"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "allocated @ 3"), "the sample moved within the tolerance: %s", r.out);
    out_free(&r);
    r = run("compare %s %s", base, tpath("doctored.json"));
    cr_assert_eq(r.rc, 1);
    cr_assert_not_null(strstr(r.out, "3 regressions"), "exact: the sample too: %s", r.out);
    out_free(&r);
}

Test(compare, times_are_compared_only_when_asked_and_never_fail_on_sim)
{
    const char *base = a_run("a");
    cJSON *j = read_json(base);
    cJSON *v = variant_of(j, "bug");
    set_num(v, "seconds", cJSON_GetObjectItem(v, "seconds")->valuedouble * 10 + 1);
    write_json(j, tpath("slow.json"));
    out r = run("compare %s %s", base, tpath("slow.json"));
    cr_assert_eq(r.rc, 0, "%s", r.out);
    cr_assert_not_null(strstr(r.out, "times: not compared"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "nothing moved"), "%s", r.out);
    out_free(&r);
    r = run("compare %s %s --time-tolerance 20%%", base, tpath("slow.json"));
    cr_assert_eq(r.rc, 0, "%s", r.out);
    cr_assert_not_null(strstr(r.out, "slower; sim times never fail"), "%s", r.out);
    out_free(&r);
    /* the same on another backend is a regression */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sed -i 's/\"backend\":\\t\"sim\"/\"backend\":\\t\"cuda\"/' '%s' '%s'", base,
             tpath("slow.json"));
    cr_assert_eq(system(cmd), 0);
    r = run("compare %s %s --time-tolerance 20%%", base, tpath("slow.json"));
    cr_assert_eq(r.rc, 1, "%s", r.out);
    cr_assert_not_null(strstr(r.out, "fragmentation/bug seconds"), "%s", r.out);
    out_free(&r);
}

Test(compare, bad_input_is_one_line_and_exit_2)
{
    const char *base = a_run("a");
    /* a truncated file */
    char *text = fileio_read_all(base, NULL);
    cr_assert_eq(fileio_write_atomic(tpath("truncated.json"), text, strlen(text) / 2), OOM_OK);
    expect_bad_input(run("compare %s %s", base, tpath("truncated.json")), "truncated");
    /* a file of another schema */
    cJSON *j = cJSON_Parse(text);
    cJSON_ReplaceItemInObject(j, "schema", cJSON_CreateString("oomlab.sweep/1"));
    write_json(j, tpath("sweep.json"));
    expect_bad_input(run("compare %s %s", tpath("sweep.json"), base), "schema 'oomlab.sweep/1', not oomlab.run/3, oomlab.run/2 or oomlab.run/1");
    expect_bad_input(run("compare tests/data/train_mlp.trace.json %s", base), "no \"schema\"");
    /* a results file missing what compare reads */
    j = cJSON_Parse(text);
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 1), "samples");
    write_json(j, tpath("nosamples.json"));
    expect_bad_input(run("compare %s %s", base, tpath("nosamples.json")), "has no \"samples\"");
    /* runs of different backends */
    j = cJSON_Parse(text);
    cJSON_ReplaceItemInObject(j, "backend", cJSON_CreateString("cuda"));
    write_json(j, tpath("cuda.json"));
    expect_bad_input(run("compare %s %s", base, tpath("cuda.json")), "runs of different backends: sim in the baseline");
    free(text);
    /* runs of different parameters */
    out r = run("run fragmentation --backend sim --scale ci --set pairs=60 --out %s", tpath("p60"));
    cr_assert_eq(r.rc, 0, "%s", r.err);
    char p60[256];
    cr_assert_eq(sscanf(strstr(r.out, "results: ") + 9, "%255s", p60), 1);
    out_free(&r);
    expect_bad_input(run("compare %s %s", base, p60), "runs of different parameters: pairs 100 in the baseline, 60");
    r = run("run fragmentation --backend sim --scale ci --budget 2GiB --out %s", tpath("b2"));
    cr_assert_eq(r.rc, 0, "%s", r.err);
    char b2[256];
    cr_assert_eq(sscanf(strstr(r.out, "results: ") + 9, "%255s", b2), 1);
    out_free(&r);
    expect_bad_input(run("compare %s %s", base, b2), "runs of different parameters: budget");
    /* the command line */
    expect_bad_input(run("compare %s", base), "give BASELINE and CURRENT");
    expect_bad_input(run("compare %s %s --tolerance 2", base, base), "--tolerance: '2' is not a percentage");
    expect_bad_input(run("compare %s %s --time-tolerance -5%%", base, base), "is not a percentage");
    expect_bad_input(run("compare %s %s", base, tpath("absent.json")), "no such file or folder");
    expect_bad_input(run("compare %s %s", base, tpath("p60")), "no results files");
}

Test(compare, a_folder_missing_a_scenario_of_the_baseline_regresses)
{
    out r = run("compare results/baselines/sim %s", tpath(""));
    cr_assert_eq(r.rc, 2, "an empty folder: %s", r.err);
    out_free(&r);
    const char *one = a_run("a");
    FILE *ls = popen("ls results/baselines/sim/*.json | wc -l", "r");
    int nbase = 0;
    cr_assert(ls && fscanf(ls, "%d", &nbase) == 1 && nbase > 1);
    pclose(ls);
    /* one file against the committed catalog: compared with its scenario, the rest said */
    r = run("compare results/baselines/sim %s", one);
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    char want[128];
    snprintf(want, sizeof want, "compared 1 of the baseline's %d scenarios (CURRENT is one file)", nbase);
    cr_assert_not_null(strstr(r.out, want), "%s", r.out);
    out_free(&r);
    /* its folder: the others are missing from this run */
    char dir[256];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(one, '/') - one), one);
    r = run("compare results/baselines/sim %s", dir);
    cr_assert_eq(r.rc, 1, "%s", r.out);
    snprintf(want, sizeof want, "%d regressions", nbase - 1);
    cr_assert_not_null(strstr(r.out, want), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "in the baseline, not in this run"), "%s", r.out);
    out_free(&r);
}

Test(compare, a_failing_run_is_no_baseline)
{
    const char *base = a_run("a");
    cJSON *j = read_json(base);
    cJSON_ReplaceItemInObject(j, "passed", cJSON_CreateFalse());
    write_json(j, tpath("failed.json"));
    expect_bad_input(run("baseline %s %s", tpath("failed.json"), tpath("bl")), "a failing run is no baseline");
    cr_assert(access(tpath("bl"), F_OK) != 0, "nothing written");
}

Test(compare, percentages)
{
    double v = -1;
    cr_assert(compare_parse_percent("2%", &v));
    cr_assert_float_eq(v, 0.02, 1e-15);
    cr_assert(compare_parse_percent("0.5%", &v));
    cr_assert_float_eq(v, 0.005, 1e-15);
    cr_assert(compare_parse_percent("0%", &v) && v == 0);
    cr_assert(compare_parse_percent("150%", &v));
    cr_assert_float_eq(v, 1.5, 1e-15);
    static const char *const bad[] = {"2", "%", "-1%", "+1%", "1e3%", "2%%", "", ".5%", "5.%", "abc", "1,5%",
                                      " 2%", "2 %", "nan%", "0x10%"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert(!compare_parse_percent(bad[i], &v), "'%s' accepted", bad[i]);
}

/* ---- export ------------------------------------------------------------------------------------------------- */

Test(compare, junit_validates_against_the_ant_schema)
{
    /* make test installs libxml2-utils; a machine that cannot (the GPU machine reaches no registry) skips */
    if (system("command -v xmllint >/dev/null 2>&1") != 0)
        cr_skip_test("xmllint is not installed (make deps installs libxml2-utils)");
    const char *base = a_run("a");
    cJSON *j = read_json(base);
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(variant_of(j, "bug"), "expectations"), 1);
    cJSON_ReplaceItemInObject(e, "holds", cJSON_CreateFalse());
    cJSON_ReplaceItemInObject(e, "text", cJSON_CreateString("a <tricky> & \"quoted\" 'text'"));
    int nexpect = 0;
    cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "variants")) /* and each fix's kind check, a case of its own */
        nexpect += cJSON_GetArraySize(cJSON_GetObjectItem(v, "expectations")) +
                   cJSON_IsObject(cJSON_GetObjectItem(v, "kind_check"));
    write_json(j, tpath("run.json")); /* and frees it */
    out r = run("export %s --junit %s --gbench %s --smaller-is-better %s", tpath("run.json"), tpath("junit.xml"),
                tpath("gbench.json"), tpath("sib.json"));
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    out_free(&r);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "xmllint --noout --schema tests/data/junit.xsd '%s' 2>'%s'", tpath("junit.xml"),
             tpath("xmllint.txt"));
    int st = system(cmd);
    char *why = fileio_read_all(tpath("xmllint.txt"), NULL);
    cr_assert_eq(st, 0, "xmllint: %s", why);
    free(why);
    char *xml = fileio_read_all(tpath("junit.xml"), NULL);
    int cases = 0, failures = 0;
    for (const char *p = xml; (p = strstr(p, "<testcase ")); p++)
        cases++;
    for (const char *p = xml; (p = strstr(p, "<failure ")); p++)
        failures++;
    cr_assert_eq(cases, nexpect, "one testcase per expectation and per kind check");
    cr_assert_eq(failures, 1);
    cr_assert_not_null(strstr(xml, "classname=\"fragmentation.bug\" name=\"2: a &lt;tricky&gt; &amp; &quot;quoted&quot; &apos;text&apos;\""), "%s", xml);
    cr_assert_not_null(strstr(xml, "tests=\"" ), "%s", xml);
    cr_assert_not_null(strstr(xml, "classname=\"fragmentation.fix-expandable-segments\" name=\"5: a fix fits: it runs "
                                   "without an OOM in 1024.00 MiB\""),
                       "%s", xml);
    free(xml);
    /* Google Benchmark: context and one benchmark per variant, its time in ms */
    cJSON *g = read_json(tpath("gbench.json"));
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(g, "context")));
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "context"), "json_schema_version")->valueint, 1);
    cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "benchmarks"), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g, "benchmarks")), 6);
    cr_assert_str_eq(cJSON_GetObjectItem(b, "name")->valuestring, "fragmentation/bug");
    cr_assert_str_eq(cJSON_GetObjectItem(b, "run_type")->valuestring, "iteration");
    cr_assert_str_eq(cJSON_GetObjectItem(b, "time_unit")->valuestring, "ms");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(b, "real_time")) && cJSON_IsNumber(cJSON_GetObjectItem(b, "cpu_time")));
    cJSON *runj = read_json(base);
    cr_assert_eq(cJSON_GetObjectItem(b, "peak_reserved_bytes")->valuedouble,
                 cJSON_GetObjectItem(variant_of(runj, "bug"), "peak_reserved")->valuedouble);
    cJSON_Delete(runj);
    cJSON_Delete(g);
    /* customSmallerIsBetter: an array of {name, unit, value, extra} */
    cJSON *s = read_json(tpath("sib.json"));
    cr_assert(cJSON_IsArray(s));
    cJSON *first = cJSON_GetArrayItem(s, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(first, "name")->valuestring, "fragmentation/bug peak_allocated_bytes");
    cr_assert_str_eq(cJSON_GetObjectItem(first, "unit")->valuestring, "bytes");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(first, "value")) && cJSON_IsString(cJSON_GetObjectItem(first, "extra")));
    cJSON_Delete(s);
}

/* ---- history ------------------------------------------------------------------------------------------------ */

Test(history, a_persistent_step_once_at_its_start_and_no_blip)
{
    /* 100 x4, a blip (500) at index 2, then 120 from index 5 on */
    double y[] = {100, 100, 500, 100, 100, 120, 120, 120, 120, 120};
    size_t starts[8];
    cr_assert_eq(history_segments(y, 10, 2, starts, 8), 1);
    cr_assert_eq(starts[0], 5);
    /* a blip alone is no step; neither is the last run alone (not yet held) */
    double blip[] = {7, 7, 7, 9, 7, 7, 7};
    cr_assert_eq(history_segments(blip, 7, 2, starts, 8), 0);
    double last[] = {7, 7, 7, 7, 7, 9};
    cr_assert_eq(history_segments(last, 6, 2, starts, 8), 0);
    cr_assert_eq(history_segments(last, 6, 1, starts, 8), 1, "held for one run is enough with min_runs 1");
    /* a step down and back up: two steps */
    double dip[] = {5, 5, 5, 3, 3, 3, 5, 5, 5};
    cr_assert_eq(history_segments(dip, 9, 2, starts, 8), 2);
    cr_assert(starts[0] == 3 && starts[1] == 6);
    /* noisy times (uniform noise of +-2%, a fixed LCG): a 30% step found, the noise not */
    double noisy[40], flat[40];
    unsigned lcg = 12345;
    for (int i = 0; i < 40; i++) {
        lcg = lcg * 1103515245u + 12345u;
        double noise = 0.02 * (((lcg >> 8) & 0xffff) / 32767.5 - 1.0);
        noisy[i] = (i < 25 ? 1.0 : 1.3) + noise;
        flat[i] = 1.0 + noise;
    }
    cr_assert_eq(history_segments(noisy, 40, 2, starts, 8), 1);
    cr_assert_eq(starts[0], 25);
    cr_assert_eq(history_segments(flat, 40, 2, starts, 8), 0);
}

/* A history of 8 runs (commits c1..c8): peak_reserved steps from 1000 to 1200 at c5 and holds; num_alloc_retries
 * blips at c3; another variant's series never moves. */
static void write_history(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", HISTORY_HEADER);
    for (int i = 1; i <= 8; i++) {
        const char *head = "sim,\"sim, simulated\",ci,fragmentation";
        fprintf(f, "2026-11-%02dT03:00:00Z,c%d,%s,bug,peak_reserved,%d\n", i, i, head, i >= 5 ? 1200 : 1000);
        fprintf(f, "2026-11-%02dT03:00:00Z,c%d,%s,bug,num_alloc_retries,%d\n", i, i, head, i == 3 ? 4 : 0);
        fprintf(f, "2026-11-%02dT03:00:00Z,c%d,%s,fix-expandable-segments,peak_reserved,900\n", i, i, head);
    }
    fclose(f);
}

Test(history, the_command_prints_the_step_once_at_its_commit)
{
    write_history(tpath("h.csv"));
    out r = run("history %s", tpath("h.csv"));
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    cr_assert_not_null(strstr(r.out, "  sim ci fragmentation/bug peak_reserved: 1000 -> 1200 (+200, +20.00%) at commit c5 "
                                     "(2026-11-05T03:00:00Z), held 4 runs\n"),
                       "%s", r.out);
    cr_assert_null(strstr(r.out, "num_alloc_retries"), "a blip is no step: %s", r.out);
    cr_assert_not_null(strstr(r.out, "history: 1 step\n"), "%s", r.out);
    out_free(&r);
    r = run("history %s --threshold 25%%", tpath("h.csv"));
    cr_assert_not_null(strstr(r.out, "history: 0 steps\n"), "20%% is under 25%%: %s", r.out);
    out_free(&r);
    r = run("history %s --min-runs 1", tpath("h.csv"));
    cr_assert_not_null(strstr(r.out, "num_alloc_retries: 0 -> 4"), "with --min-runs 1 the blip is a step: %s", r.out);
    out_free(&r);
}

Test(history, append_keeps_the_header_and_refuses_bad_files)
{
    const char *one = a_run("a");
    out r = run("history %s --append %s --commit abc123", tpath("h.csv"), one);
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    out_free(&r);
    r = run("history %s --append %s --commit def456", tpath("h.csv"), one);
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    cr_assert_not_null(strstr(r.out, "history: 0 steps"), "the same run twice: %s", r.out);
    out_free(&r);
    history h;
    char err[256];
    cr_assert_eq(history_read(tpath("h.csv"), &h, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(h.n % 2, 0);
    size_t half = h.n / 2;
    cr_assert_str_eq(h.rows[0].col[1], "abc123");
    cr_assert_str_eq(h.rows[half].col[1], "def456");
    cr_assert_str_eq(h.rows[0].col[5], "fragmentation");
    cr_assert_str_eq(h.rows[0].col[6], "bug");
    cr_assert_str_eq(h.rows[0].col[7], "peak_allocated");
    history_free(&h);
    char *text = fileio_read_all(tpath("h.csv"), NULL);
    cr_assert(strncmp(text, HISTORY_HEADER "\n", strlen(HISTORY_HEADER) + 1) == 0, "%s", text);
    cr_assert_null(strstr(text + 1, "utc_date"), "one header");
    free(text);
    /* bad input */
    expect_bad_input(run("history %s --append %s", tpath("h.csv"), one), "--append needs --commit");
    expect_bad_input(run("history %s --append results/baselines/sim --commit x", tpath("h.csv")),
                     "a baseline, not a run");
    cr_assert_eq(fileio_write_atomic(tpath("bad.csv"), "date,value\n1,2\n", 15), OOM_OK);
    expect_bad_input(run("history %s", tpath("bad.csv")), "line 1 is not the header");
    cr_assert_eq(fileio_write_atomic(tpath("bad2.csv"), HISTORY_HEADER "\na,b,c,d,e,f,g,h,x\n",
                                     strlen(HISTORY_HEADER) + 19),
                 OOM_OK);
    /* a bad row is skipped with a warning naming its line, and appending goes on (tests below) */
    r = run("history %s", tpath("bad2.csv"));
    cr_assert_eq(r.rc, 0, "%s", r.err);
    char want[512];
    snprintf(want, sizeof want, "history: warning: %s line 2 skipped: metric 'h' is not a metric of the history (%s)\n",
             tpath("bad2.csv"), HISTORY_METRICS);
    cr_assert_str_eq(r.err, want);
    cr_assert_not_null(strstr(r.out, ": 0 rows,"), "%s", r.out);
    out_free(&r);
}

/* The results file of a run with one value replaced by a literal (1e999, -5): the value is set to a marker number
 * first, then the marker's text replaced. */
static void with_literal(const char *run_path, const char *variant, const char *obj, const char *key,
                         const char *literal, const char *out_path)
{
    cJSON *doc = read_json(run_path);
    cJSON *v = variant_of(doc, variant);
    set_num(obj ? cJSON_GetObjectItem(v, obj) : v, key, 987654321);
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    char *at = strstr(text, "987654321");
    cr_assert(at && !strstr(at + 1, "987654321"), "the marker is in the text once");
    FILE *f = fopen(out_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "%.*s%s%s", (int)(at - text), text, literal, at + 9);
    fclose(f);
    free(text);
}

/* issue 16 item 5: a run with a value no history row may hold (not finite, negative, fractional bytes, an OOM step
 * past int, seconds past 1e9) is refused whole, in one line: the history is not touched, so it never holds an
 * inf row that breaks every later append. */
Test(history, a_bad_run_appends_nothing)
{
    const char *one = a_run("a");
    out r = run("history %s --append %s --commit c1", tpath("h.csv"), one);
    cr_assert_eq(r.rc, 0, "%s", r.err);
    out_free(&r);
    char *before = fileio_read_all(tpath("h.csv"), NULL);
    cr_assert_not_null(before);
    static const struct {
        const char *obj, *key, *literal, *says;
    } bad[] = {
        {NULL, "peak_allocated", "1e999", "a number is not finite (it overflows a double)"}, /* refused by the reader */
        {NULL, "peak_allocated", "-1e999", "a number is not finite (it overflows a double)"},
        {NULL, "peak_reserved", "-4096", "peak_reserved -4096 is negative"},
        {NULL, "peak_allocated", "1.5", "peak_allocated 1.5 is not a whole number"},
        {NULL, "peak_allocated", "1e300", "a number is above 2^53"},
        {"oom", "step", "3e9", "is more than 2^31 - 1"},
        {"oom", "step", "-1", "oom_step -1 is negative"},
        {"oom", "requested", "1e999", "a number is not finite (it overflows a double)"},
        {NULL, "seconds", "1e999", "a number is not finite (it overflows a double)"},
        {NULL, "seconds", "1e12", "seconds 1000000000000 is more than 1e9 seconds"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        with_literal(one, "bug", bad[i].obj, bad[i].key, bad[i].literal, tpath("bad.json"));
        expect_bad_input(run("history %s --append %s --commit c2", tpath("h.csv"), tpath("bad.json")), bad[i].says);
        char *after = fileio_read_all(tpath("h.csv"), NULL);
        cr_assert_str_eq(after, before, "%s %s: the history changed", bad[i].key, bad[i].literal);
        free(after);
        expect_bad_input(run("history %s --append %s --commit c2", tpath("new.csv"), tpath("bad.json")), bad[i].says);
        cr_assert_neq(access(tpath("new.csv"), F_OK), 0, "no history is made of a bad run");
    }
    /* a name that is not the catalog's pattern (a newline would split the row) */
    cJSON *doc = read_json(one);
    cJSON_SetValuestring(cJSON_GetObjectItem(variant_of(doc, "bug"), "name"), "bug\n2026,x");
    write_json(doc, tpath("bad.json"));
    expect_bad_input(run("history %s --append %s --commit c2", tpath("h.csv"), tpath("bad.json")),
                     "\"name\" holds a control character"); /* the results reader refuses it first */
    char *after = fileio_read_all(tpath("h.csv"), NULL);
    cr_assert_str_eq(after, before);
    free(after);
    free(before);
}

/* issue 16 item 5: a bad row already in a history (written by an older oomlab, or by hand) is reported with its line
 * and skipped; the rest is read, and runs are still appended. */
Test(history, a_bad_row_in_the_file_is_skipped_with_its_line)
{
    const char *head = "2026-11-01T03:00:00Z,c1,sim,sim,ci,fragmentation,bug";
    FILE *f = fopen(tpath("h.csv"), "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", HISTORY_HEADER);
    fprintf(f, "%s,peak_allocated,1000\n", head);        /* 2 */
    fprintf(f, "%s,peak_allocated,inf\n", head);         /* 3 */
    fprintf(f, "%s,peak_reserved,-5\n", head);           /* 4 */
    fprintf(f, "%s,oom_step,1e999\n", head);             /* 5 */
    fprintf(f, "%s,\"peak_allocated,7\n", head);         /* 6: an open quote */
    fprintf(f, "a,b,c\n");                               /* 7 */
    fprintf(f, "%s,made_up,1\n", head);                  /* 8 */
    fprintf(f, "2026,c1,sim,sim,ci,../../x,bug,seconds,1\n"); /* 9 */
    fprintf(f, "%s,seconds,0.5\r\n", head);               /* 10 */
    fprintf(f, "%s,peak_reserved,2048", head);           /* 11, no line break at the end */
    fclose(f);
    char want[2048], h[256];
    snprintf(h, sizeof h, "%s", tpath("h.csv"));
    snprintf(want, sizeof want,
             "history: warning: %s line 3 skipped: peak_allocated value 'inf' is not a finite number\n"
             "history: warning: %s line 4 skipped: peak_reserved value '-5' is negative\n"
             "history: warning: %s line 5 skipped: oom_step value '1e999' is not a finite number\n"
             "history: warning: %s line 6 skipped: a quote is not closed\n"
             "history: warning: %s line 7 skipped: 3 fields, not 9 (" HISTORY_HEADER ")\n"
             "history: warning: %s: 2 more bad rows skipped (7 in all)\n",
             h, h, h, h, h, h);
    out r = run("history %s", h);
    cr_assert_eq(r.rc, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, ": 3 rows,"), "%s", r.out);
    cr_assert_str_eq(r.err, want);
    out_free(&r);
    /* a run is appended after them (on a line of its own: the last row had no line break) */
    const char *one = a_run("a");
    r = run("history %s --append %s --commit c2", h, one);
    cr_assert_eq(r.rc, 0, "%s", r.err);
    cr_assert_str_eq(r.err, want, "the read after the append warns once");
    out_free(&r);
    history hist;
    char err[256];
    cr_assert_eq(history_read(h, &hist, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(hist.skipped, 7);
    cr_assert_gt(hist.n, 3);
    cr_assert_str_eq(hist.rows[2].col[7], "peak_reserved");
    cr_assert_eq(hist.rows[2].value, 2048);
    cr_assert_str_eq(hist.rows[3].col[1], "c2");
    history_free(&hist);
}

/* issue 16 item 6: appends that run at once all land: each appender takes the file's lock and writes its rows in
 * one write, so none is lost (the old read-modify-rename lost one run's rows in 30 of 30 trials). */
Test(history, concurrent_appends_keep_every_row)
{
    const char *one = a_run("a");
    enum { N = 8 };
    int gate[2];
    cr_assert_eq(pipe(gate), 0);
    pid_t pids[N];
    for (int k = 0; k < N; k++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "exec '%s' history '%s' --append '%s' --commit c%d >/dev/null 2>'%s'", bin(),
                 tpath("h.csv"), one, k, tpath("err%d", k));
        pids[k] = fork();
        cr_assert_geq(pids[k], 0);
        if (pids[k] == 0) { /* wait at the gate, so that all start together */
            close(gate[1]);
            char c;
            while (read(gate[0], &c, 1) > 0)
                ;
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
    }
    close(gate[0]);
    close(gate[1]); /* open the gate */
    for (int k = 0; k < N; k++) {
        int st = 0;
        cr_assert_eq(waitpid(pids[k], &st, 0), pids[k]);
        char *err = fileio_read_all(tpath("err%d", k), NULL);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "appender %d: %s", k, err);
        free(err);
    }
    history h;
    char err[256];
    cr_assert_eq(history_read(tpath("h.csv"), &h, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(h.skipped, 0);
    cr_assert_eq(h.n % N, 0, "%zu rows", h.n);
    size_t per_run = h.n / N, count[N] = {0};
    for (size_t i = 0; i < h.n; i++) {
        int k = atoi(h.rows[i].col[1] + 1);
        cr_assert(k >= 0 && k < N);
        count[k]++;
        if (i % per_run) /* each run's rows together: one write each */
            cr_assert_str_eq(h.rows[i].col[1], h.rows[i - 1].col[1], "row %zu", i);
    }
    for (int k = 0; k < N; k++)
        cr_assert_eq(count[k], per_run, "run c%d: %zu rows of %zu", k, count[k], per_run);
    history_free(&h);
    char *text = fileio_read_all(tpath("h.csv"), NULL);
    cr_assert(strncmp(text, HISTORY_HEADER "\n", strlen(HISTORY_HEADER) + 1) == 0);
    cr_assert_null(strstr(text + 1, "utc_date"), "one header");
    free(text);
}

/* issue 16 item 4: a scenario name from a results file becomes a file name only when it is a scenario name:
 * "../../escaped" is refused in one line and nothing is written, not even the folder. */
Test(compare, baseline_refuses_a_scenario_name_that_is_a_path)
{
    const char *one = a_run("a");
    const char *names[] = {"../../escaped", "/abs", "Frag", "a b", ""};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        cJSON *doc = read_json(one);
        cJSON_SetValuestring(cJSON_GetObjectItem(doc, "scenario"), names[i]);
        write_json(doc, tpath("esc.json"));
        expect_bad_input(run("baseline %s %s", tpath("esc.json"), tpath("x/y/base")), "is not a scenario name");
        cr_assert_neq(access(tpath("x"), F_OK), 0, "'%s': the output folder was made", names[i]);
        cr_assert_neq(access(tpath("x/escaped.json"), F_OK), 0);
        cr_assert_neq(access(tpath("escaped.json"), F_OK), 0);
    }
}

Test(compare, a_baseline_is_byte_identical_run_to_run)
{
    /* each run is a new process with its own address layout: nothing in a baseline may follow host addresses
     * (a failed backward once released its left-over gradients in an address-hashed order: this variant's
     * inactive_split.all.allocated was 15, 16 or 17) */
    char *first = NULL;
    for (int i = 0; i < 5; i++) {
        out r = run("run retained_graph --variant myth-retain-graph-with-sgd --backend sim --scale ci --out %s",
                    tpath("r%d", i));
        cr_assert_eq(r.rc, 0, "%s", r.err);
        char path[256];
        cr_assert_eq(sscanf(strstr(r.out, "results: ") + 9, "%255s", path), 1);
        out_free(&r);
        r = run("baseline %s %s", path, tpath("b%d", i));
        cr_assert_eq(r.rc, 0, "%s", r.err);
        out_free(&r);
        char *text = fileio_read_all(tpath("b%d/retained_graph.json", i), NULL);
        cr_assert_not_null(text);
        if (!first)
            first = text;
        else {
            cr_assert_str_eq(text, first, "run %d's baseline differs from run 0's", i);
            free(text);
        }
    }
    free(first);
}

/* ---- untrusted results files (issue 16) -------------------------------------------------------------------- */

/* The committed fragmentation baseline with the string value of key (of the document, or of its first variant
 * when in_variant) replaced by raw, JSON text written as it is (escapes, bytes that are not UTF-8), into
 * tmpdir/name; its path. */
static const char *doctored(const char *name, bool in_variant, const char *key, const char *raw)
{
    cJSON *j = read_json("results/baselines/sim/fragmentation.json");
    cJSON *o = in_variant ? cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 0) : j;
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cr_assert_not_null(cJSON_AddStringToObject(o, key, "@@MARK@@"));
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    char *at = strstr(text, "\"@@MARK@@\"");
    cr_assert_not_null(at);
    const char *p = tpath("%s", name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    fprintf(f, "%.*s%s%s", (int)(at - text), text, raw, at + strlen("\"@@MARK@@\""));
    fclose(f);
    free(text);
    return p;
}

/* Item 9: every command that reads results or the history takes --max-input, and a stream past it is refused in
 * one line (they used to read /dev/zero until memory ran out). */
Test(compare, every_reader_of_results_is_bounded_by_max_input)
{
    static const char *const cmds[] = {
        "compare results/baselines/sim /dev/zero", "baseline /dev/zero %s/b",      "export /dev/zero --junit %s/j",
        "history /dev/zero",                       "history %s/h.csv --append /dev/zero --commit c",
        "plot /dev/zero -o %s/p.png",              "report /dev/zero -o %s/r",     "plot --trend /dev/zero -o %s/t",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char c[512];
        snprintf(c, sizeof c, cmds[i], tmpdir);
        expect_bad_input(run("%s --max-input 1MiB", c),
                         "/dev/zero: more than --max-input (1048576 bytes) could be read");
    }
    expect_bad_input(run("compare results/baselines/sim results/baselines/sim --max-input 0"),
                     "--max-input: '0' is not a size of at least 1 byte");
}

/* Item 10: values that would not arrive exactly are refused, naming why and where: a NUL that cut a scenario's
 * name short (baseline wrote fragmentat.json), an integer above 2^53 (9007199254740993 was read as 2^53), a
 * number that overflows a double, bytes that are not UTF-8 (export passed them into gbench.json). */
Test(compare, values_that_would_not_arrive_exactly_are_refused)
{
    const char *nul = doctored("nul.json", false, "scenario", "\"fragmentat\\u0000ion\"");
    expect_bad_input(run("baseline %s %s", nul, tpath("b")), "nul.json: a string holds a NUL (\\u0000)");
    cr_assert_neq(access(tpath("b/fragmentat.json"), F_OK), 0, "baseline wrote the cut name");
    const char *big = doctored("big.json", true, "peak_allocated", "9007199254740993");
    expect_bad_input(run("compare results/baselines/sim %s", big),
                     "big.json: a number is above 2^53 (9007199254740992), where a JSON number is not read exactly, "
                     "at byte");
    const char *inf = doctored("inf.json", true, "peak_reserved", "1e999");
    expect_bad_input(run("compare %s results/baselines/sim", inf), "inf.json: a number is not finite");
    const char *utf = doctored("utf.json", true, "name", "\"bug\xff\xfe\"");
    expect_bad_input(run("export %s --gbench %s", utf, tpath("g.json")), "utf.json: a string is not valid UTF-8");
    cr_assert_neq(access(tpath("g.json"), F_OK), 0, "gbench.json written");
}

/* Item 10: a newline in a name (or in --commit) made errors of two lines; a name with a control character is no
 * name, and every error line stays one. */
Test(compare, names_and_commits_with_newlines_make_one_line)
{
    const char *nl = doctored("nl.json", false, "scenario", "\"frag\\nmentation\"");
    expect_bad_input(run("compare %s %s", nl, nl), "nl.json: \"scenario\" holds a control character");
    const char *vnl = doctored("vnl.json", true, "name", "\"bug\\r\\nx\"");
    expect_bad_input(run("export %s --junit %s", vnl, tpath("j.xml")), "\"name\" holds a control character");
    expect_bad_input(run("history %s --append results/baselines/sim/fragmentation.json --commit 'a\nb'",
                         tpath("h.csv")),
                     "--commit: 'a b' is not a commit");
}

/* Item 12: a key compare does not know, in either file, is a row of its own (it used to be ignored silently);
 * memory_caching absent from one side (the committed baselines lacked it) makes the runs not comparable. */
Test(compare, unknown_keys_are_reported_and_memory_caching_must_match)
{
    cJSON *j = read_json("results/baselines/sim/fragmentation.json");
    cJSON_AddNumberToObject(j, "frobnicate", 1);
    cJSON_AddTrueToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 0), "extra_peak");
    write_json(j, tpath("unknown.json"));
    out r = run("compare results/baselines/sim %s", tpath("unknown.json"));
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    cr_assert_not_null(strstr(r.out, "key 'frobnicate'"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "key 'extra_peak'"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "a key compare does not know: not compared"), "%s", r.out);
    out_free(&r);
    r = run("compare %s results/baselines/sim", tpath("unknown.json")); /* in the baseline too */
    cr_assert_eq(r.rc, 0, "%s %s", r.out, r.err);
    cr_assert_not_null(strstr(r.out, "key 'frobnicate'"), "%s", r.out);
    out_free(&r);
    j = read_json("results/baselines/sim/fragmentation.json");
    cr_assert_not_null(cJSON_GetObjectItem(j, "memory_caching"), "the committed baseline lacks memory_caching");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "memory_caching");
    write_json(j, tpath("old.json"));
    expect_bad_input(run("compare %s results/baselines/sim", tpath("old.json")),
                     "fragmentation: runs of different parameters: memory_caching absent in the baseline, true in "
                     "this run");
}

/* The results schema went to oomlab.run/2 (step_peak per sample; story_ooms, kind_check, saved per variant), then
 * /3 (fix_layout per variant): files of the versions before are still read, and compared against a /3 run as one. */
Test(compare, a_results_file_of_the_version_before_is_still_read)
{
    const char *one = a_run("a");
    cJSON *doc = read_json(one);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "schema")->valuestring, "oomlab.run/3");
    cJSON_SetValuestring(cJSON_GetObjectItem(doc, "schema"), "oomlab.run/1");
    write_json(doc, tpath("v1.json"));
    out r = run("compare %s %s", tpath("v1.json"), one);
    cr_assert_eq(r.rc, 0, "exit %d: %s %s", r.rc, r.out, r.err);
    out_free(&r);
    cJSON *two = read_json(one);
    cJSON_SetValuestring(cJSON_GetObjectItem(two, "schema"), "oomlab.run/2");
    write_json(two, tpath("v2.json"));
    r = run("compare %s %s", tpath("v2.json"), one);
    cr_assert_eq(r.rc, 0, "exit %d: %s %s", r.rc, r.out, r.err);
    out_free(&r);
    cJSON *bad = read_json(one);
    cJSON_SetValuestring(cJSON_GetObjectItem(bad, "schema"), "oomlab.run/4");
    write_json(bad, tpath("v4.json"));
    expect_bad_input(run("compare %s %s", tpath("v4.json"), one),
                     "schema 'oomlab.run/4', not oomlab.run/3, oomlab.run/2 or oomlab.run/1");
}
