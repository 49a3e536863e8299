/* test_untrusted_figures.c - issue 16's figure and report side: a results file, history CSV, snapshot name or
 * output name crafted with backquotes, $( ), newlines, quotes, <script> or ../ gives a figure or page that shows
 * it literally, or one error line, and never runs or writes anything else (gnuplot.h, report_html.h); a full disk
 * or a planted link publishes nothing; plot and report refuse what compare refuses (runset.h).
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace/trace.h"
#include "core/fileio.h"
#include "analysis/advise.h"
#include "figures/plot.h"
#include "results/report.h"
#include "figures/report_html.h"
#include "run/runner.h"
#include "results/runset.h"
#include "run/scenario.h"
#include "testutil.h"

static char dir[TEST_TMPDIR_MAX], json[1100];

/* fragmentation on sim into a fresh folder: json is its results file. */
static void setup(void)
{
    test_tmpdir_make(dir, "untrusted");
    run_options o = {.backend = DEVICE_SIM};
    run_result r;
    char err[512];
    cr_assert_eq(runner_run(scenario_find("fragmentation"), &o, &r, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(report_write_in(&r, dir, json, sizeof json), OOM_OK, "%s", oom_error_detail());
    run_result_free(&r);
}

static void teardown(void) { test_tmpdir_remove(dir); }

/* Work in dir: a command a crafted string runs (touch NAME) would write there. */
static void in_dir(void) { cr_assert_eq(chdir(dir), 0); }

TestSuite(untrusted, .init = setup, .fini = teardown);

static const char *tpath(const char *name) { return test_path(dir, name); }

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static char *slurp(const char *path)
{
    char *t = fileio_read_all(path, NULL);
    cr_assert_not_null(t, "cannot read %s", path);
    return t;
}

static cJSON *read_json(const char *path)
{
    char *t = slurp(path);
    cJSON *j = cJSON_Parse(t);
    free(t);
    cr_assert_not_null(j);
    return j;
}

static void write_json(cJSON *j, const char *path)
{
    char *t = cJSON_PrintUnformatted(j);
    cr_assert_eq(fileio_write_atomic(path, t, strlen(t)), OOM_OK);
    free(t);
    cJSON_Delete(j);
}

static void set_str(cJSON *o, const char *key, const char *value)
{
    cr_assert(cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(value)), "%s", key);
}

static cJSON *variant(cJSON *run, int i) { return cJSON_GetArrayItem(cJSON_GetObjectItem(run, "variants"), i); }

/* A text that runs "touch NAME" if anything expands it (gnuplot's backquotes, a shell's $( )), with quotes, a
 * newline followed by gnuplot's system and shell escape, and <script>. The tests run in dir (in_dir), so NAME
 * would land there. */
static const char *payload(char *buf, size_t cap, const char *how, const char *name)
{
    const char *p = name;
    if (strcmp(how, "backquote") == 0)
        snprintf(buf, cap, "bug`touch %s`", p);
    else if (strcmp(how, "dollar") == 0)
        snprintf(buf, cap, "s$(touch %s)", p);
    else if (strcmp(how, "newline") == 0)
        snprintf(buf, cap, "n\nsystem 'touch %s'\n!touch %s", p, p);
    else
        snprintf(buf, cap, "q'\"`touch %s`\"' <script>alert(1)</script> ../../escaped", p);
    return buf;
}

/* No file named ranN (N < n) in the folder: nothing ran. */
static void nothing_ran(int n)
{
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "ran%d", i);
        cr_assert(!exists(tpath(name)), "a crafted string ran a command (%s exists)", name);
    }
}

/* Item 1: every string of a results file that a figure draws (the scenario, variant names, sample labels, the
 * outcome) reaches gnuplot as text: gnuplot 5.4 expanded backquotes in the double-quoted labels. */
Test(untrusted, results_strings_are_drawn_literally)
{
    char a[512], b[512], c[512], d[512], e[512];
    in_dir();
    cJSON *run = read_json(json);
    set_str(run, "scenario", payload(a, sizeof a, "backquote", "ran0"));
    set_str(variant(run, 0), "name", payload(b, sizeof b, "quotes", "ran1"));
    /* a newline in a name is refused by the results reader (below); a sample label may hold one */
    set_str(cJSON_GetArrayItem(cJSON_GetObjectItem(variant(run, 0), "samples"), 1), "label",
            payload(c, sizeof c, "newline", "ran2"));
    set_str(variant(run, 2), "outcome", payload(d, sizeof d, "backquote", "ran3"));
    cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(variant(run, 0), "samples"), 0);
    set_str(s0, "label", payload(e, sizeof e, "dollar", "ran4"));
    cr_assert_leq(cJSON_GetArraySize(cJSON_GetObjectItem(variant(run, 0), "samples")), 8, "labelled ticks");
    write_json(run, "crafted.json");
    char err[512] = "";
    cr_assert_eq(plot_run("crafted.json", "t.svg", err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(plot_peaks("crafted.json", "p.svg", err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(plot_segments("crafted.json", "s.svg", err, sizeof err), OOM_OK, "%s", err);
    nothing_ran(5);
    char *t = slurp("t.svg");
    cr_expect(strstr(t, "bug`touch ran0`"), "the scenario's name is not shown literally"); /* in the title */
    cr_expect(strstr(t, ">s$(touch ran4)<"), "the sample's label is not shown literally");
    /* the variant's name, as the SVG writes text (markup escaped) */
    static const char v0[] = "q'\"`touch ran1`\"' &lt;script>alert(1)&lt;/script> ../../escaped";
    cr_expect(strstr(t, v0), "the variant's name is not shown literally");
    cr_expect(strstr(t, ": bug`touch ran3`<"), "the outcome is not shown literally");
    cr_expect(strstr(t, ">system 'touch ran2'<"), "the name after a newline is not on a line of its own");
    free(t);
    t = slurp("p.svg");
    cr_expect(strstr(t, v0), "the variant's name is not a tick of the peaks");
    free(t);
    /* a newline in a variant's name: refused in one line, nothing drawn, nothing run */
    run = read_json(json);
    set_str(variant(run, 1), "name", payload(c, sizeof c, "newline", "ran2"));
    write_json(run, "newline.json");
    cr_assert_eq(plot_run("newline.json", "n.svg", err, sizeof err), OOM_EINVAL);
    cr_assert_not_null(strstr(err, "\"name\" holds a control character"), "%s", err);
    cr_assert_null(strchr(err, '\n'), "one line: %s", err);
    cr_assert(!exists(tpath("n.svg")));
    nothing_ran(5);
}

/* Item 1: the output's name never reaches gnuplot's script (gnuplot draws onto its standard output). */
Test(untrusted, output_name_is_not_expanded)
{
    char err[512] = "";
    in_dir();
    const char *out = "o`touch ran0`$(touch ran1)'\".svg";
    cr_assert_eq(plot_run(json, out, err, sizeof err), OOM_OK, "%s", err);
    cr_assert(exists(out), "the figure is not at its literal name");
    nothing_ran(2);
}

/* Item 1: plot --trend on a history CSV draws its fields as text: the commit, backend, device and scale, which
 * the history's reader takes as they are (it skips a row whose scenario or variant is off the catalog's pattern,
 * whose metric is unknown, or with a control character: sec-files' tests). */
Test(untrusted, trend_fields_are_drawn_literally)
{
    char csv[] = "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
                 "2026-11-01,\"c`touch ran0`\",\"b$(touch ran2)\",\"d`touch ran1` <script>\",\"s'\"\"`touch ran3`\","
                 "fragmentation,bug,peak_reserved,1\n"
                 "2026-11-03,c3,\"b$(touch ran2)\",\"d`touch ran1` <script>\",\"s'\"\"`touch ran3`\",fragmentation,bug,"
                 "peak_reserved,3\n";
    in_dir();
    cr_assert_eq(fileio_write_atomic("history.csv", csv, strlen(csv)), OOM_OK);
    cr_assert_eq(fileio_mkdirs("trend"), OOM_OK);
    char written[2048], err[512] = "";
    oom_status st = plot_trend("history.csv", "trend", "svg", written, sizeof written, err, sizeof err);
    nothing_ran(4);
    cr_assert_eq(st, OOM_OK, "%s", err);
    cr_assert_str_eq(written, "trend/fragmentation-b__touch_ran2_-s___touch_ran3_.svg\n");
    char *t = slurp("trend/fragmentation-b__touch_ran2_-s___touch_ran3_.svg");
    /* the title: "SCENARIO on BACKEND (DEVICE), SCALE scale: ..." as gnuplot's SVG writes text (< escaped) */
    cr_expect(strstr(t, "fragmentation on b$(touch ran2) (d`touch ran1` &lt;script>), s'\"`touch ran3` scale"),
              "the backend, device or scale is not shown literally");
    cr_expect(strstr(t, ">2026-11-01 c`touch<"), "the commit (its first 7 characters) is not shown literally");
    free(t);
}

/* Item 1: advise --plot titles its figure with the snapshot's file name. */
Test(untrusted, advise_plot_shows_the_snapshot_name_literally)
{
    const char *snap = "s`touch ran0`$(touch ran1).json";
    char *t = slurp("tests/data/advise/advise_frag.trace.json");
    in_dir();
    cr_assert_eq(fileio_write_atomic(snap, t, strlen(t)), OOM_OK);
    free(t);
    trace_file tf;
    char err[600] = "";
    cr_assert_eq(trace_load(snap, &tf, err, sizeof err), OOM_OK, "%s", err);
    advise_options opt = {.only = true, .series = true};
    advise_result res;
    cr_assert_eq(advise_run(&tf, snap, &opt, &res, err, sizeof err), OOM_OK, "%s", err);
    oom_status st = advise_plot(&res, "a.svg", err, sizeof err);
    advise_result_free(&res);
    trace_free(&tf);
    cr_assert_eq(st, OOM_OK, "%s", err);
    nothing_ran(2);
    t = slurp("a.svg");
    cr_expect(strstr(t, snap), "the snapshot's name is not shown literally");
    free(t);
}

/* Item 2: gnuplot wrote OUT.tmp.PID, following a link planted there; now its output is a file created O_EXCL
 * beside OUT, and OUT itself is replaced only when it is a regular file. */
Test(untrusted, planted_links_and_devices_are_not_written_through)
{
    char victim[128];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    cr_assert_eq(fileio_write_atomic(victim, "keep", 4), OOM_OK);
    char old_tmp[300], err[512] = "";
    snprintf(old_tmp, sizeof old_tmp, "%s.tmp.%ld", tpath("out.svg"), (long)getpid());
    cr_assert_eq(symlink(victim, old_tmp), 0);
    cr_assert_eq(plot_run(json, tpath("out.svg"), err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(victim);
    cr_expect_str_eq(t, "keep", "the planted link was followed");
    free(t);
    /* OUT a link: refused in one line, the link and its target as they were */
    cr_assert_eq(symlink(victim, tpath("link.svg")), 0);
    cr_assert_eq(plot_run(json, tpath("link.svg"), err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "is a symbolic link, not a regular file") && !strchr(err, '\n'), "%s", err);
    cr_expect_str_eq(fileio_kind(tpath("link.svg")), "a symbolic link");
    t = slurp(victim);
    cr_expect_str_eq(t, "keep");
    free(t);
    /* OUT a FIFO: refused, still a FIFO */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkfifo '%s'", tpath("fifo.png"));
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(plot_peaks(json, tpath("fifo.png"), err, sizeof err), OOM_EINVAL);
    cr_expect_str_eq(fileio_kind(tpath("fifo.png")), "a FIFO");
}

/* Draw fn's figure in a child whose files are limited to limit bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a write
 * past it fails with EFBIG, as on a full disk, gnuplot's included). Returns what the child's draw returned (its
 * oom_status), with its error line in err. */
static int draw_on_a_full_disk(int which, rlim_t limit, char *err, size_t cap)
{
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(100);
        char e[512] = "", written[1024];
        oom_status st = which == 0   ? plot_run(json, tpath("full.png"), e, sizeof e)
                        : which == 1 ? plot_peaks(json, tpath("full.svg"), e, sizeof e)
                                     : plot_trend(tpath("h.csv"), tpath("trend"), "png", written, sizeof written, e,
                                                  sizeof e);
        if (write(pfd[1], e, strlen(e) + 1) < 0)
            _exit(101);
        _exit((int)st);
    }
    close(pfd[1]);
    ssize_t n = read(pfd[0], err, cap - 1);
    err[n > 0 ? n : 0] = '\0';
    close(pfd[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child died");
    return WEXITSTATUS(status);
}

/* No file in folder d but those named in keep (NULL-terminated). */
static void only_files(const char *d, const char *const *keep)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls -A '%s' > '%s.ls'", d, d);
    cr_assert_eq(system(cmd), 0);
    char lsfile[300];
    snprintf(lsfile, sizeof lsfile, "%s.ls", d);
    char *t = slurp(lsfile), *save = NULL;
    for (char *l = strtok_r(t, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        bool ok = false;
        for (int i = 0; keep[i]; i++)
            ok = ok || strcmp(l, keep[i]) == 0;
        cr_expect(ok, "%s left in %s", l, d);
    }
    free(t);
    unlink(lsfile);
}

/* Item 7: a full disk cut gnuplot's figure short and gnuplot still exited 0: a truncated PNG or SVG, or an empty
 * one (plot --trend), was published. Now nothing is published and the error says why in one line. */
Test(untrusted, a_full_disk_publishes_no_figure)
{
    char err[512];
    /* the script and its data fit in 48 KiB; the figures do not (about 90 KiB) */
    int st = draw_on_a_full_disk(0, 48 * 1024, err, sizeof err);
    cr_assert_eq(st, OOM_EIO, "the timeline on a full disk: status %d, '%s'", st, err);
    cr_expect(strstr(err, "full.png: gnuplot's output is cut short") && strstr(err, "no PNG end chunk"), "%s", err);
    cr_expect(!strchr(err, '\n'), "one line");
    st = draw_on_a_full_disk(1, 24 * 1024, err, sizeof err);
    cr_assert_eq(st, OOM_EIO, "the peaks on a full disk: status %d, '%s'", st, err);
    cr_expect(strstr(err, "no </svg> at its end"), "%s", err);
    const char csv[] = "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
                       "2026-11-01,a,sim,sim,ci,fragmentation,bug,peak_reserved,1048576\n"
                       "2026-11-02,b,sim,sim,ci,fragmentation,bug,peak_reserved,2097152\n";
    cr_assert_eq(fileio_write_atomic(tpath("h.csv"), csv, strlen(csv)), OOM_OK);
    cr_assert_eq(fileio_mkdirs(tpath("trend")), OOM_OK);
    st = draw_on_a_full_disk(2, 0, err, sizeof err); /* nothing can be written: gnuplot's output stays empty */
    cr_assert_neq(st, OOM_OK, "plot --trend on a full disk: '%s'", err);
    static const char *const none[] = {NULL};
    only_files(tpath("trend"), none);
    /* nothing beside the input: no figure, no temporary file */
    static const char *const kept[] = {"fragmentation.json", "h.csv", "trend", NULL};
    only_files(dir, kept);
    cr_expect(!exists(tpath("full.png")) && !exists(tpath("full.svg")), "a cut figure was published");
}

/* Item 3: every string of a results file (and of a twin's recording) the page shows is escaped; kinds are a
 * fixed class. */
Test(untrusted, report_escapes_every_string)
{
    cJSON *run = read_json(json);
    set_str(run, "backend", "<b>backend</b>");
    set_str(run, "scale", "<i>scale</i>");
    set_str(run, "device", "<u>device</u>");
    cJSON_AddNumberToObject(cJSON_GetObjectItem(run, "params"), "<img src=x onerror=alert(1)>", 1);
    cJSON *v0 = variant(run, 0), *v1 = variant(run, 1);
    set_str(v0, "outcome", "<script>alert(1)</script>");
    set_str(v0, "kind", "\"><script>alert(2)</script>");
    set_str(v1, "summary", "<script>alert(3)</script>");
    cJSON *notes = cJSON_GetObjectItem(v1, "notes");
    cJSON_AddItemToArray(notes, cJSON_CreateString("it's <script>alert(4)</script> & \"more\""));
    cJSON *ex = cJSON_GetArrayItem(cJSON_GetObjectItem(v1, "expectations"), 0);
    set_str(ex, "text", "<script>alert(5)</script>");
    char runs_dir[128]; /* a copy: test_path's buffers rotate */
    snprintf(runs_dir, sizeof runs_dir, "%s/in", dir);
    cr_assert_eq(fileio_mkdirs(runs_dir), OOM_OK);
    write_json(run, tpath("in/fragmentation.json"));
    /* a twin recording with markup where the page quotes it */
    cr_assert_eq(fileio_mkdirs(tpath("twins")), OOM_OK);
    cJSON *twin = read_json("tests/data/twins/fragmentation.torch.json");
    set_str(twin, "torch", "<script>alert(6)</script>");
    write_json(twin, tpath("twins/fragmentation.torch.json"));
    const char *inputs[] = {runs_dir};
    char err[1024] = "";
    cr_assert_eq(report_html(inputs, 1, tpath("twins"), tpath("report"), err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(tpath("report/index.html"));
    cr_expect_null(strstr(t, "<script"), "markup from the input reached the page");
    cr_expect_null(strstr(t, "<img src=x"), "markup from a parameter's name reached the page");
    cr_expect(!strstr(t, "<b>backend") && !strstr(t, "<i>scale") && !strstr(t, "<u>device"), "markup reached it");
    cr_expect(strstr(t, "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>"), "the outcome, escaped, in the table");
    cr_expect(strstr(t, "&lt;b&gt;backend&lt;/b&gt;") && strstr(t, "&lt;i&gt;scale&lt;/i&gt;"), "backend, scale");
    cr_expect(strstr(t, " &lt;img src=x onerror=alert(1)&gt;=1"), "the parameter's name, escaped");
    cr_expect(strstr(t, "it&#39;s &lt;script&gt;alert(4)&lt;/script&gt; &amp; &quot;more&quot;"), "a note");
    cr_expect(strstr(t, "torch &lt;script&gt;alert(6)&lt;/script&gt;"), "the twin's torch version");
    cr_expect(strstr(t, "<b class=\"kind-other\">"), "an unknown kind is the class kind-other");
    free(t);
}

/* Item 10: plot and report read results through runset, so they refuse what compare refuses, with compare's
 * line: variants that are not objects, a peak that is a string, a variant without samples, a caught OOM without
 * the size of the segment asked for. */
Test(untrusted, plot_and_report_refuse_what_compare_refuses)
{
    static const char *const cases[] = {"variants", "peak", "samples", "caught"};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *run = read_json(json);
        if (k == 0) {
            cJSON *vs = cJSON_CreateArray();
            cJSON_AddItemToArray(vs, cJSON_CreateString("x"));
            cJSON_ReplaceItemInObjectCaseSensitive(run, "variants", vs);
        } else if (k == 1) {
            set_str(variant(run, 0), "peak_allocated", "lots");
        } else if (k == 2) {
            cJSON_DeleteItemFromObjectCaseSensitive(variant(run, 1), "samples");
        } else {
            cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(variant(run, 0), "ooms_caught"), 0);
            cr_assert_not_null(m);
            cJSON_DeleteItemFromObjectCaseSensitive(m, "alloc_size");
        }
        char name[64];
        snprintf(name, sizeof name, "bad-%s.json", cases[k]);
        char in[TEST_TMPDIR_MAX + 64];
        snprintf(in, sizeof in, "%s/%s", dir, name);
        write_json(run, in);
        runset rs;
        char want[1024] = "", err[1024] = "";
        cr_assert_eq(runset_load(in, &rs, want, sizeof want), OOM_EINVAL, "compare takes the %s case", cases[k]);
        cr_expect_eq(plot_run(in, tpath("x.png"), err, sizeof err), OOM_EINVAL, "%s", cases[k]);
        cr_expect_str_eq(err, want, "plot: %s", cases[k]);
        cr_expect_eq(plot_peaks(in, tpath("x.png"), err, sizeof err), OOM_EINVAL, "%s", cases[k]);
        cr_expect_str_eq(err, want);
        const char *inputs[] = {in};
        cr_expect_eq(report_html(inputs, 1, NULL, tpath("report"), err, sizeof err), OOM_EINVAL, "%s", cases[k]);
        cr_expect_str_eq(err, want, "report: %s", cases[k]);
        cr_expect(!exists(tpath("x.png")) && !exists(tpath("report")), "nothing written");
    }
}

/* An OOM's step that is not a sample index (a whole number >= 0, at most INT_MAX: drawn at x = step) is refused
 * in one line by the figures. */
Test(untrusted, plot_refuses_an_oom_step_that_is_not_a_sample_index)
{
    cJSON *run = read_json(json);
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(variant(run, 0), "ooms_caught"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(m, "step", cJSON_CreateNumber(2.5)); /* 1e300: the reader refuses it first */
    write_json(run, tpath("bad.json"));
    char err[1024] = "", want[1100];
    cr_assert_eq(plot_run(tpath("bad.json"), tpath("x.png"), err, sizeof err), OOM_EINVAL);
    snprintf(want, sizeof want, "%s: variants[0]: an OOM's step is not a sample index (a whole number >= 0)",
             tpath("bad.json"));
    cr_expect_str_eq(err, want);
    cr_expect(!exists(tpath("x.png")));
}

/* The figures' rule lives in the one reader: runset_read_file, which plot and report call, refuses the step with
 * the figures' line (plot.c checks nothing of its own). */
Test(untrusted, the_reader_refuses_an_oom_step_that_is_not_a_sample_index)
{
    cJSON *run = read_json(json);
    cr_assert(cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(variant(run, 0), "oom"), "step",
                                                     cJSON_CreateNumber(-1)));
    write_json(run, tpath("bad.json"));
    char want[1100], err[1024] = "";
    snprintf(want, sizeof want, "%s: variants[0]: an OOM's step is not a sample index (a whole number >= 0)",
             tpath("bad.json"));
    cJSON *j = NULL;
    cr_assert_eq(runset_read_file(tpath("bad.json"), false, &j, err, sizeof err), OOM_EINVAL);
    cr_expect_null(j);
    cr_expect_str_eq(err, want, "runset_read_file");
    cr_assert_eq(plot_run(tpath("bad.json"), tpath("x.png"), err, sizeof err), OOM_EINVAL);
    cr_expect_str_eq(err, want, "plot");
    const char *inputs[] = {tpath("bad.json")};
    cr_assert_eq(report_html(inputs, 1, NULL, tpath("report"), err, sizeof err), OOM_EINVAL);
    cr_expect_str_eq(err, want, "report");
    cr_expect(!exists(tpath("x.png")) && !exists(tpath("report")));
}

/* Item 10: a peak of 2^64 bytes was cast to uint64_t (undefined; x86-64 gave 0 bytes). The results reader now
 * refuses any number above 2^53 (not read exactly), in one line, before the report writes anything; the report's
 * casts saturate besides (UBSan checks them under make asan). */
Test(untrusted, report_refuses_a_peak_past_2_53)
{
    cJSON *run = read_json(json);
    cJSON_ReplaceItemInObjectCaseSensitive(variant(run, 0), "peak_reserved", cJSON_CreateNumber(18446744073709551616.0));
    cr_assert_eq(fileio_mkdirs(tpath("in")), OOM_OK);
    write_json(run, tpath("in/fragmentation.json"));
    const char *inputs[] = {tpath("in")};
    char err[1024] = "";
    cr_assert_eq(report_html(inputs, 1, NULL, tpath("report"), err, sizeof err), OOM_EINVAL, "%s", err);
    cr_expect_not_null(strstr(err, "a number is above 2^53 (9007199254740992)"), "%s", err);
    cr_expect_null(strchr(err, '\n'), "one line: %s", err);
    cr_expect(!exists(tpath("report")), "nothing written");
}

/* Item 2, the report: OUT was renamed aside and removed as a folder, so an OUT that is a link to a folder had its
 * target emptied; and OUT.tmp.PID, planted as a link, was written through. Now a link at OUT is refused and the
 * temporary folder is a mkdtemp of ours. */
Test(untrusted, report_never_writes_or_removes_through_a_link)
{
    char victim[128], err[1024] = "";
    snprintf(victim, sizeof victim, "%s/victim", dir);
    cr_assert_eq(fileio_mkdirs(victim), OOM_OK);
    cr_assert_eq(fileio_write_atomic(tpath("victim/keep"), "keep", 4), OOM_OK);
    cr_assert_eq(symlink(victim, tpath("report")), 0);
    const char *inputs[] = {json};
    cr_assert_eq(report_html(inputs, 1, NULL, tpath("report"), err, sizeof err), OOM_EINVAL, "%s", err);
    cr_expect(strstr(err, "is a symbolic link, not a folder: not replaced"), "%s", err);
    cr_expect(exists(tpath("victim/keep")), "the link's target was emptied");
    cr_expect_str_eq(fileio_kind(tpath("report")), "a symbolic link");
    /* a link planted at the old temporary name is not followed */
    char planted[160];
    snprintf(planted, sizeof planted, "%s.tmp.%ld", tpath("out"), (long)getpid());
    cr_assert_eq(symlink(victim, planted), 0);
    cr_assert_eq(report_html(inputs, 1, NULL, tpath("out"), err, sizeof err), OOM_OK, "%s", err);
    cr_expect(!exists(tpath("victim/index.html")) && !exists(tpath("victim/img")), "written through the planted link");
    cr_expect(exists(tpath("out/index.html")));
}
