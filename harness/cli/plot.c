/* plot.c - `oomlab plot`: draw a results file, a run's folder, or the nightly history (figures/plot.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "figures/plot.h"
#include "results/history.h"
#include "results/runset.h"

/* plot RUNDIR: the figure of each results file of the folder (runset's reading: NAME.json, in name order, sweeps
 * skipped), beside it as NAME.png (NAME-peaks.png, NAME-segments.png). */
static int plot_folder(const char *in, bool peaks, bool segments)
{
    runset rs;
    char err[512], out[RUNSET_PATH_MAX + 16];
    if (runset_load(in, &rs, err, sizeof err) != OOM_OK)
        return cli_bad_arg("plot: %s", err);
    int rc = 0;
    for (size_t i = 0; i < rs.n && rc == 0; i++) {
        const char *path = rs.docs[i].path;
        snprintf(out, sizeof out, "%.*s%s.png", (int)(strlen(path) - 5), path,
                 peaks ? "-peaks" : segments ? "-segments" : "");
        oom_status st = peaks      ? plot_peaks(path, out, err, sizeof err)
                        : segments ? plot_segments(path, out, err, sizeof err)
                                   : plot_run(path, out, err, sizeof err);
        if (st != OOM_OK)
            rc = cli_bad_arg("plot: %s", err);
        else
            printf("%s\n", out);
    }
    runset_free(&rs);
    return rc;
}

int cli_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *trend = NULL;
    bool peaks = false, segments = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0) {
            if (++i >= argc || !argv[i][0])
                return cli_bad_arg("%s needs a file name", "-o");
            out = argv[i];
        } else if (strcmp(argv[i], "--peaks") == 0) {
            peaks = true;
        } else if (strcmp(argv[i], "--segments") == 0) {
            segments = true;
        } else if (strcmp(argv[i], "--trend") == 0) {
            if (++i >= argc || !argv[i][0])
                return cli_bad_arg("%s needs a file name", "--trend");
            trend = argv[i];
        } else if (argv[i][0] == '-') {
            return cli_bad_arg("plot: unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else {
            return cli_bad_arg("plot: unexpected argument '%s'", argv[i]);
        }
    }
    char def[1100], err[512];
    if (trend) { /* the history's figures into the folder -o (default: beside the CSV, in trend/) */
        if (in || peaks || segments)
            return cli_bad_arg("%s", "plot --trend CSV draws the history alone (no RESULTS.json, --peaks, --segments)");
        if (!out) {
            const char *slash = strrchr(trend, '/');
            snprintf(def, sizeof def, "%.*strend", slash ? (int)(slash - trend + 1) : 0, trend);
            out = def;
        }
        char written[8192]; /* plot_trend makes the folder out once the history is read */
        if (plot_trend(trend, out, "png", written, sizeof written, err, sizeof err) != OOM_OK)
            return cli_bad_arg("plot: %s", err);
        printf("%s", written);
        return 0;
    }
    if (!in)
        return cli_bad_arg("%s", "plot: missing RESULTS.json (oomlab run writes one)");
    if (peaks && segments)
        return cli_bad_arg("%s", "plot: --peaks or --segments, one figure at a time");
    DIR *dir = opendir(in);
    if (dir) { /* a run folder, as compare and report read it: one figure beside each results file */
        closedir(dir);
        if (out)
            return cli_bad_arg("%s", "plot: -o names one figure; a run folder gets one beside each results file");
        return plot_folder(in, peaks, segments);
    }
    if (!out) {
        size_t n = strlen(in);
        bool json = n > 5 && strcmp(in + n - 5, ".json") == 0;
        snprintf(def, sizeof def, "%.*s%s.png", (int)(json ? n - 5 : n), in,
                 peaks ? "-peaks" : segments ? "-segments" : "");
        out = def;
    }
    oom_status st = peaks      ? plot_peaks(in, out, err, sizeof err)
                    : segments ? plot_segments(in, out, err, sizeof err)
                               : plot_run(in, out, err, sizeof err);
    if (st != OOM_OK)
        return cli_bad_arg("plot: %s", err);
    printf("%s\n", out);
    return 0;
}
