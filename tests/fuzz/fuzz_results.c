/* fuzz_results.c - libFuzzer harness of the results-file readers: the input is a results JSON (schema
 * oomlab.run/1, report.h) as `oomlab run` writes it, fed to each reader the way its command feeds it.
 *
 * Readers today: plot_run (`oomlab plot RESULTS.json -o P.png`), which parses the file, checks its schema and
 * writes gnuplot's data and script from it. gnuplot itself is not run: PATH points nowhere, so every
 * well-formed input ends at "cannot run gnuplot" after the whole file has been read and written out. Checked:
 *   - the status is OOM_EINVAL (not a results file) or OOM_EIO (gnuplot not found), with one error line;
 *   - no plot and no temporary file is left beside the output.
 *
 * Also `oomlab compare`'s reader of results and baseline files (runset_load), so that this harness and its
 * corpus drive both.
 * Seeds: tests/fuzz/corpus/results (results files of the CI-scale catalog, merged with -merge=1).
 */
#include "fuzzutil.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "figures/plot.h"
#include "results/runset.h"

/* Nothing may remain in the scratch folder after a reader ran. */
static void check_scratch_empty(const char *reader)
{
    DIR *d = opendir(fuzz_scratch_dir());
    if (!d)
        fuzz_fail("cannot list the scratch folder");
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            fuzz_fail("%s left %s behind", reader, e->d_name);
    closedir(d);
}

/* oomlab plot PATH -o SCRATCH/plot.png */
static void read_with_plot(const char *path)
{
    char png[128], err[512] = "";
    snprintf(png, sizeof png, "%s/plot.png", fuzz_scratch_dir());
    oom_status st = plot_run(path, png, err, sizeof err);
    if (st == OOM_OK)
        fuzz_fail("plot_run succeeded without gnuplot");
    if (st != OOM_EINVAL && !(st == OOM_EIO && strstr(err, "cannot run gnuplot")))
        fuzz_fail("plot_run returned %s: %s", oom_status_str(st), err);
    fuzz_check_error_line("plot_run", err);
    check_scratch_empty("plot_run");
}

/* oomlab compare's (and baseline's, history's, export's) reader: a results file is loaded or refused in one line */
static void read_with_runset(const char *path)
{
    runset rs;
    char err[512] = "";
    oom_status st = runset_load(path, &rs, err, sizeof err);
    if (st != OOM_OK && st != OOM_EINVAL)
        fuzz_fail("runset_load returned %s: %s", oom_status_str(st), err);
    if (st != OOM_OK)
        fuzz_check_error_line("runset_load", err);
    runset_free(&rs);
}

static void (*const readers[])(const char *path) = {
    read_with_plot,
    read_with_runset,
};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("PATH", "/nonexistent/oomlab-fuzz", 1); /* no gnuplot: the readers, not gnuplot, are under test */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        oom_error_clear();
        readers[i](path);
    }
    close(fd);
    oom_error_clear();
    return 0;
}
