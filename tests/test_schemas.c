/* test_schemas.c - every JSON document oomlab writes names its schema, and each schema's shape is pinned: its keys
 * and their types, in order, against tests/data/schemas/NAME-VERSION.shape. A change of shape fails here until
 * the schema's version is bumped and its file renamed (CONTRIBUTING.md, "JSON schemas").
 *
 * Suite "schemas". Runs $OOMLAB_BIN (default build/oomlab) on sim; predict runs the capture's test double.
 */
#include <criterion/criterion.h>

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "trace/trace.h"
#include "core/fileio.h"
#include "core/strbuf.h"
#include "analysis/predict.h"
#include "testutil.h"

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "schemas"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(schemas, .init = setup, .fini = teardown);

/* The shape of v: s string, n number, b bool, z null, [T] an array typed by its first element, {k:T,...}. */
static void shape(const cJSON *v, strbuf *b)
{
    if (cJSON_IsBool(v)) {
        strbuf_printf(b, "b");
    } else if (cJSON_IsNull(v)) {
        strbuf_printf(b, "z");
    } else if (cJSON_IsNumber(v)) {
        strbuf_printf(b, "n");
    } else if (cJSON_IsString(v)) {
        strbuf_printf(b, "s");
    } else if (cJSON_IsArray(v)) {
        strbuf_printf(b, "[");
        if (v->child)
            shape(v->child, b);
        strbuf_printf(b, "]");
    } else {
        cr_assert(cJSON_IsObject(v), "a JSON value of no known type");
        strbuf_printf(b, "{");
        for (const cJSON *c = v->child; c; c = c->next) {
            strbuf_printf(b, "%s%s:", c == v->child ? "" : ",", c->string);
            shape(c, b);
        }
        strbuf_printf(b, "}");
    }
}

/* `$OOMLAB_BIN args` (stdout parsed as JSON; stderr kept aside): it names schema, and its shape is schema's file. */
static void expect_shape(const char *args, const char *schema)
{
    const char *b = getenv("OOMLAB_BIN");
    char cmd[2048], out[TEST_TMPDIR_MAX + 16], err[TEST_TMPDIR_MAX + 16], file[128];
    snprintf(out, sizeof out, "%s/out", tmpdir);
    snprintf(err, sizeof err, "%s/err", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", b && b[0] ? b : "build/oomlab", args, out, err);
    int st = system(cmd);
    char *text = fileio_read_all(out, NULL);
    char *errs = fileio_read_all(err, NULL);
    cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: exit %d: %s", cmd, WEXITSTATUS(st), errs);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s: not JSON: %s", args, text);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "schema");
    cr_assert(cJSON_IsString(name), "%s: no \"schema\"", args);
    cr_assert_str_eq(name->valuestring, schema, "%s", args);
    strbuf got = {0};
    shape(j, &got);
    cr_assert(!got.oom);
    snprintf(file, sizeof file, "tests/data/schemas/%s.shape", schema);
    *strchr(file + strlen("tests/data/schemas/"), '/') = '-'; /* oomlab.run/1 -> oomlab.run-1 */
    char *want = fileio_read_all(file, NULL);
    cr_assert_not_null(want, "%s: no %s (a new schema: add its shape file)", schema, file);
    want[strcspn(want, "\n")] = '\0';
    cr_assert_str_eq(got.s, want, "%s changed shape: bump its version (got %s)", schema, got.s);
    free(want);
    free(got.s);
    cJSON_Delete(j);
    free(text);
    free(errs);
}

Test(schemas, run) { expect_shape("run fragmentation --backend sim --json --no-write", "oomlab.run/3"); }

Test(schemas, sweep)
{
    expect_shape("run fragmentation --backend sim --sweep pairs=1..4 --json --no-write", "oomlab.sweep/1");
}

Test(schemas, replay) { expect_shape("replay tests/data/train_mlp.trace.json --json", "oomlab.replay/2"); }

Test(schemas, advise) { expect_shape("advise tests/data/train_mlp.trace.json --json", "oomlab.advise/2"); }

Test(schemas, parity) { expect_shape("parity --backend sim eval_leak", "oomlab.parity/1"); }

Test(schemas, bench_replay) { expect_shape("bench replay --events 1000 --json", "oomlab.bench_replay/1"); }

Test(schemas, predict)
{
    const char *script = test_path(tmpdir, "p.py");
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs("# an ordinary script: the test double allocates what its arguments say\n", f);
    fclose(f);
    char args[512];
    snprintf(args, sizeof args,
             "predict --python tests/fixtures/fake_capture.py --gpu TEST-64MiB --json '%s' 10MiB", script);
    expect_shape(args, "oomlab.predict/8");
}

Test(schemas, predict_nproc)
{
    const char *script = test_path(tmpdir, "p.py");
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs("# a torch.distributed script: the test double says it initialised\n", f);
    fclose(f);
    char args[512];
    snprintf(args, sizeof args,
             "predict --python tests/fixtures/fake_capture.py --nproc 2 --json '%s' 10MiB", script);
    expect_shape(args, "oomlab.predict.nproc/7");
}

/* The capture's reader accepts the version it understands and refuses another in one line. */
static oom_status predict_capture(const char *schema, char *err, size_t cap)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"device_traces\":[[{\"action\":\"alloc\",\"addr\":0,\"size\":1048576,\"stream\":0},"
             "{\"action\":\"free_completed\",\"addr\":0,\"size\":1048576,\"stream\":0}]],\"segments\":[],"
             "\"oomlab_capture\":{\"schema\":\"%s\",\"gpu\":{\"name\":\"TEST\",\"total_memory\":1073741824,"
             "\"context_bytes\":8388608}}}",
             schema);
    trace_file t;
    cr_assert_eq(trace_parse("capture.json", text, strlen(text), &t, err, cap), OOM_OK, "%s", err);
    predict_options opt = {0};
    predict_result res;
    oom_status st = predict_run(&t, "capture.json", &opt, &res, err, cap);
    predict_result_free(&res);
    trace_free(&t);
    return st;
}

Test(schemas, capture_versions)
{
    char err[512] = "";
    cr_assert_eq(predict_capture(CAPTURE_SCHEMA, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(predict_capture("oomlab.capture/2", err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, "capture.json: 'oomlab_capture'.'schema' is 'oomlab.capture/2', not oomlab.capture/1 (a "
                          "capture this oomlab does not read)");
}
