/* test_fuzz_regressions.c - what the fuzz harnesses of tests/fuzz found, fed through the same entry point as the
 * harness that found it, so that it stays fixed. Each reproducer is a file under tests/data/fuzz/, named
 * HARNESS-what.EXT (tests/fuzz/README.md).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "figures/plot.h"
#include "testutil.h"

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "fuzz"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(fuzz, .init = setup, .fini = teardown);

/* tmpdir/name in one of four rotating buffers. */
static const char *tpath(const char *name) { return test_path(tmpdir, name); }

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static bool have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

/* fuzz_results: a variant's "oom" without a "step" made plot_run cast NaN to int (undefined behaviour; UBSan's
 * float-cast-overflow). Now it is not a results file, said in one line, and nothing is drawn: plot reads results
 * through runset, which names the first field the file lacks (a step that is not a sample index:
 * untrusted::plot_and_report_refuse_what_compare_refuses). */
Test(fuzz, results_oom_without_step)
{
    const char *in = "tests/data/fuzz/results-oom-without-step.json";
    char err[512];
    cr_assert_eq(plot_run(in, tpath("p.png"), err, sizeof err), OOM_EINVAL, "%s", err);
    cr_assert_str_eq(err, "tests/data/fuzz/results-oom-without-step.json has no \"scenario\"");
    cr_assert(!exists(tpath("p.png")));
}

/* A results file with this variant name, sample label and scenario (JSON string contents) into tmpdir/name. */
static const char *write_results(const char *name, const char *scenario, const char *variant, const char *label)
{
    const char *path = tpath(name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    /* every field runset_validate asks for (plot reads results as compare does) */
#define SAMPLE_REST "\"active\":0,\"inactive_split\":0,\"allocated_peak\":0,\"reserved_peak\":0,\"segments\":0," \
                    "\"num_device_alloc\":0,\"num_device_free\":0,\"num_alloc_retries\":0,\"num_ooms\":0"
    fprintf(f,
            "{\"schema\":\"oomlab.run/1\",\"scenario\":\"%s\",\"backend\":\"sim\",\"device\":\"sim\","
            "\"scale\":\"ci\",\"dry_run\":false,\"budget\":1048576,\"cap\":null,\"device_total\":0,"
            "\"alloc_conf_user\":\"\",\"passed\":true,\"params\":{},"
            "\"variants\":[{\"name\":\"%s\",\"outcome\":\"oom\",\"passed\":true,\"reproduced\":true,"
            "\"peak_allocated\":512,\"peak_reserved\":2097152,\"metrics\":[],\"expectations\":[],"
            "\"memory_stats\":{},\"devices\":[],\"oom\":{\"step\":1,\"what\":\"x\",\"requested\":1},"
            "\"samples\":[{\"label\":\"%s\",\"allocated\":0,\"reserved\":0," SAMPLE_REST "},"
            "{\"label\":\"after\",\"allocated\":512,\"reserved\":2097152," SAMPLE_REST "}]}]}\n",
            scenario, variant, label);
    cr_assert_eq(fclose(f), 0);
    return path;
}

/* Found while writing fuzz_results (the harness does not run gnuplot): gnuplot ends an unclosed string at the
 * end of its line and runs the next line, so a newline in a label of a results file ran that file's text as
 * gnuplot commands, system() included, on `oomlab plot`. Labels are now one line each. */
Test(fuzz, results_labels_cannot_run_commands)
{
    if (!have_gnuplot())
        cr_skip_test("gnuplot is not installed (make deps installs gnuplot-nox)");
    char scenario[256], variant[256], label[256];
    snprintf(scenario, sizeof scenario, "s\\nsystem 'touch %s'", tpath("from_scenario"));
    snprintf(variant, sizeof variant, "v\\nsystem 'touch %s'", tpath("from_variant"));
    snprintf(label, sizeof label, "l\\nsystem 'touch %s'", tpath("from_label"));
    /* a newline in a name is refused by the results reader now (one line, nothing drawn, nothing run) */
    char err[512] = "";
    const char *in = write_results("r.json", scenario, "v", "l");
    cr_assert_eq(plot_run(in, tpath("r.png"), err, sizeof err), OOM_EINVAL);
    cr_assert_not_null(strstr(err, "\"scenario\" holds a control character"), "%s", err);
    in = write_results("r.json", "s", variant, "l");
    cr_assert_eq(plot_run(in, tpath("r.png"), err, sizeof err), OOM_EINVAL);
    cr_assert_not_null(strstr(err, "\"name\" holds a control character"), "%s", err);
    cr_assert(!exists(tpath("r.png")));
    /* a sample label may hold one: drawn as text */
    in = write_results("r.json", "s", "v", label);
    cr_assert_eq(plot_run(in, tpath("r.png"), err, sizeof err), OOM_OK, "%s", err);
    cr_assert(exists(tpath("r.png")));
    cr_assert(!exists(tpath("from_scenario")), "the scenario name ran as a command");
    cr_assert(!exists(tpath("from_variant")), "the variant name ran as a command");
    cr_assert(!exists(tpath("from_label")), "a sample label ran as a command");
}

/* Backslashes and double quotes reach gnuplot as themselves: in labels, and in the output's name (gnuplot reads
 * "\\b" in a string as a backspace, so a path with a backslash went elsewhere and the rename failed). */
Test(fuzz, results_backslashes_and_quotes)
{
    if (!have_gnuplot())
        cr_skip_test("gnuplot is not installed (make deps installs gnuplot-nox)");
    const char *in = write_results("q.json", "a\\\\b\\\"c", "v\\\\\\\"", "l\\\\");
    const char *out = tpath("back\\slash \"quoted\".svg");
    char err[512] = "";
    cr_assert_eq(plot_run(in, out, err, sizeof err), OOM_OK, "%s", err);
    cr_assert(exists(out), "no plot at %s", out);
}
