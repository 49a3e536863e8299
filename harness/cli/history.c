/* history.c - `oomlab history FILE.csv [--append RUN --commit C]`: append a run to the nightly history, and print
 * the steps in every series of it (results/history.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "core/fileio.h"
#include "results/compare.h"
#include "results/history.h"
#include "results/runset.h"

int cli_history(int argc, char **argv)
{
    const char *file = NULL, *append = NULL, *commit = NULL;
    double threshold = 0;
    long min_runs = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool value = strcmp(a, "--append") == 0 || strcmp(a, "--commit") == 0 || strcmp(a, "--threshold") == 0 ||
                     strcmp(a, "--min-runs") == 0;
        if (value && i + 1 >= argc)
            return cli_bad_input("%s needs a value", a);
        if (strcmp(a, "--append") == 0) {
            append = argv[++i];
        } else if (strcmp(a, "--commit") == 0) {
            commit = argv[++i];
            if (!commit[0] || strpbrk(commit, "\r\n"))
                return cli_bad_input("--commit: '%.64s' is not a commit", commit);
        } else if (strcmp(a, "--threshold") == 0) {
            if (!compare_parse_percent(argv[++i], &threshold))
                return cli_bad_input("--threshold: '%.64s' is not a percentage (5%%, 0.5%%)", argv[i]);
        } else if (strcmp(a, "--min-runs") == 0) {
            char *end = NULL;
            min_runs = strtol(argv[++i], &end, 10);
            if (!end || *end || min_runs < 1 || min_runs > 1000)
                return cli_bad_input("--min-runs: '%.64s' is not a count from 1 to 1000", argv[i]);
        } else if (a[0] == '-' && a[1]) {
            return cli_bad_input("history: unknown option '%s'", a);
        } else if (!file) {
            file = a;
        } else {
            return cli_bad_input("history: unexpected argument '%s'", a);
        }
    }
    if (!file)
        return cli_bad_input("history: give the history FILE (results/history.csv)");
    if (append && !commit)
        return cli_bad_input("history: --append needs --commit (what was built: git describe --always --dirty)");
    if (commit && !append)
        return cli_bad_input("history: --commit goes with --append");
    char err[768];
    size_t added = 0;
    if (append && fileio_check_target(file) != OOM_OK) /* the file appended to: a regular file, or none yet */
        return cli_bad_input("history: %s", oom_error_detail());
    if (append) {
        runset s;
        if (runset_load(append, &s, err, sizeof err) != OOM_OK)
            return cli_bad_input("history: %s", err);
        oom_status st = history_append(file, &s, commit, &added, err, sizeof err);
        runset_free(&s);
        if (st != OOM_OK)
            return cli_bad_input("history: %s", err);
    }
    history h;
    if (history_read(file, &h, err, sizeof err) != OOM_OK)
        return cli_bad_input("history: %s", err);
    size_t commits = 0; /* where the commit changes from one row to the next: the nightlies, roughly */
    for (size_t i = 0; i < h.n; i++)
        commits += i == 0 || strcmp(h.rows[i].col[1], h.rows[i - 1].col[1]) != 0;
    if (append)
        printf("history: %zu rows of %s appended to %s\n", added, append, file);
    printf("history: %s: %zu rows, %zu commit%s in turn; steps: a change held for at least %ld runs, at the run "
           "where it started%s",
           file, h.n, commits, commits == 1 ? "" : "s", min_runs, threshold > 0 ? "" : "\n");
    if (threshold > 0)
        printf(", larger than %g%%\n", threshold * 100);
    size_t steps = history_print_steps(&h, (size_t)min_runs, threshold, stdout);
    printf("history: %zu step%s\n", steps, steps == 1 ? "" : "s");
    history_free(&h);
    return 0;
}
