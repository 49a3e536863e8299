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
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "run/compare.h"
#include "run/history.h"
#include "testutil.h"

static char tmpdir[64];

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
    static char paths[8][256];
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
    char args[1536], cmd[2048];
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
    expect_bad_input(run("compare %s %s", tpath("sweep.json"), base), "schema 'oomlab.sweep/1', not oomlab.run/1");
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
    expect_bad_input(run("history %s", tpath("bad2.csv")), "line 2: value 'x' is not a number");
    expect_bad_input(run("history %s --append %s --commit x", tpath("bad2.csv"), one), "is not a number");
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
