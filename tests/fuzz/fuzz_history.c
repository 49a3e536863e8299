/* fuzz_history.c - libFuzzer harness of the nightly history's reader: the input is a history CSV
 * (results/history.csv, results/history.h), fed to the readers the way their commands feed it.
 *
 * Readers: history_read then history_print_steps (`oomlab history FILE`), and plot_trend (`oomlab plot --trend
 * FILE -o DIR`, which reads through history_read) with gnuplot not run (PATH points nowhere). Checked:
 *   - history_read is OOM_OK or OOM_EINVAL (only for line 1 not being the header) with one error line; a bad row
 *     is skipped and counted, never fatal;
 *   - every row read holds a value its metric allows (history_value_problem), scenario and variant names of the
 *     catalog's pattern (scenario_name_ok) and no line break in any column;
 *   - plot_trend is OOM_EINVAL (no header, no rows) or OOM_EIO "cannot run gnuplot", with one error line, and
 *     leaves nothing but the folder it made.
 * history_read warns about each bad row on stderr (the first five): the harness sends stderr to /dev/null around
 * the readers, unless FUZZ_VERBOSE is set (set it to see a finding's report from inside a reader).
 * Seeds: tests/fuzz/corpus/history (a history of the CI-scale catalog, and the bad rows of issue 16).
 */
#include "fuzzutil.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "results/history.h"
#include "figures/plot.h"
#include "run/scenario.h"

static FILE *devnull;
static int quiet_fd = -1, saved_stderr = -1;

/* stderr to /dev/null while a reader runs (unless FUZZ_VERBOSE), and back. */
static void quiet(bool on)
{
    if (quiet_fd < 0)
        return;
    fflush(stderr);
    dup2(on ? quiet_fd : saved_stderr, 2);
}

/* oomlab history FILE: read, then the steps of every series */
static void read_with_history(const char *path)
{
    history h;
    char err[512] = "";
    quiet(true);
    oom_status st = history_read(path, &h, err, sizeof err);
    quiet(false);
    if (st != OOM_OK && st != OOM_EINVAL)
        fuzz_fail("history_read returned %s: %s", oom_status_str(st), err);
    if (st != OOM_OK) {
        fuzz_check_error_line("history_read", err);
        if (!strstr(err, "line 1 is not the header"))
            fuzz_fail("history_read refused a file for something other than its header: %s", err);
        return;
    }
    for (size_t i = 0; i < h.n; i++) {
        const history_row *r = &h.rows[i];
        const char *why = history_value_problem(r->col[7], r->value);
        if (why)
            fuzz_fail("row %zu: %s value %g %s", i, r->col[7], r->value, why);
        if (!scenario_name_ok(r->col[5]) || !scenario_name_ok(r->col[6]))
            fuzz_fail("row %zu: scenario '%s' or variant '%s' off the pattern", i, r->col[5], r->col[6]);
        for (int k = 0; k < HISTORY_NCOLS - 1; k++)
            if (strpbrk(r->col[k], "\r\n"))
                fuzz_fail("row %zu column %d holds a line break", i, k);
    }
    history_print_steps(&h, 2, 0, devnull);
    history_print_steps(&h, 1, 0.05, devnull);
    history_free(&h);
}

/* oomlab plot --trend FILE -o SCRATCH/trend */
static void read_with_trend(const char *path)
{
    char dir[128], written[4096], err[512] = "";
    snprintf(dir, sizeof dir, "%s/trend", fuzz_scratch_dir());
    quiet(true);
    oom_status st = plot_trend(path, dir, "svg", written, sizeof written, err, sizeof err);
    quiet(false);
    if (st == OOM_OK)
        fuzz_fail("plot_trend succeeded without gnuplot");
    if (st != OOM_EINVAL && !(st == OOM_EIO && strstr(err, "cannot run gnuplot")))
        fuzz_fail("plot_trend returned %s: %s", oom_status_str(st), err);
    fuzz_check_error_line("plot_trend", err);
    rmdir(dir); /* made once the history was read; it must be empty */
    DIR *d = opendir(fuzz_scratch_dir());
    if (!d)
        fuzz_fail("cannot list the scratch folder");
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            fuzz_fail("plot_trend left %s behind", e->d_name);
    closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("PATH", "/nonexistent/oomlab-fuzz", 1); /* no gnuplot: the reader, not gnuplot, is under test */
    devnull = fopen("/dev/null", "w");
    if (!devnull)
        fuzz_fail("cannot open /dev/null");
    if (!getenv("FUZZ_VERBOSE")) {
        quiet_fd = fileno(devnull); /* (no <fcntl.h>: its struct stat clashes with memstats.h's) */
        saved_stderr = dup(2);
        if (quiet_fd < 0 || saved_stderr < 0)
            fuzz_fail("cannot set stderr aside");
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    oom_error_clear();
    read_with_history(path);
    oom_error_clear();
    read_with_trend(path);
    close(fd);
    oom_error_clear();
    return 0;
}
