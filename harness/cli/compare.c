/* compare.c - `oomlab compare BASELINE CURRENT` and `oomlab baseline CURRENT DIR` (results/compare.h,
 * results/baseline.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/command.h"
#include "core/echo.h"
#include "results/baseline.h"
#include "results/compare.h"
#include "results/runset.h"

/* --tolerance / --time-tolerance at argv[*i]: 0, or the exit status of a bad value. */
static int take_percent(int argc, char **argv, int *i, double *out)
{
    const char *o = argv[*i];
    if (++*i >= argc)
        return cli_bad_input("%s needs a value", o);
    if (!compare_parse_percent(argv[*i], out))
        return cli_bad_input("%s: '%.64s' is not a percentage (2%%, 0.5%%)", o, argv[*i]);
    return 0;
}

int cli_compare(int argc, char **argv)
{
    compare_options o = {.tolerance = 0, .time_tolerance = -1};
    const char *paths[2] = {NULL, NULL};
    int np = 0;
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        if (strcmp(argv[i], "--tolerance") == 0)
            rc = take_percent(argc, argv, &i, &o.tolerance);
        else if (strcmp(argv[i], "--time-tolerance") == 0)
            rc = take_percent(argc, argv, &i, &o.time_tolerance);
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_bad_input("compare: unknown option '%s'", argv[i]);
        else if (np < 2)
            paths[np++] = argv[i];
        else
            return cli_bad_input("compare: unexpected argument '%s'", argv[i]);
        if (rc)
            return rc;
    }
    if (np < 2)
        return cli_bad_input("compare: give BASELINE and CURRENT (results files or run folders)");
    runset base, cur;
    char err[768];
    if (runset_load(paths[0], &base, err, sizeof err) != OOM_OK)
        return cli_bad_input("compare: %s", err);
    if (runset_load(paths[1], &cur, err, sizeof err) != OOM_OK) {
        runset_free(&base);
        return cli_bad_input("compare: %s", err);
    }
    compare_result r;
    int rc;
    if (compare_runsets(&base, &cur, &o, &r, err, sizeof err) != OOM_OK) {
        rc = cli_bad_input("compare: %s", err);
    } else {
        printf("compare: baseline %s, current %s\n", paths[0], paths[1]);
        compare_table(&r, &o, stdout);
        rc = r.regressions ? 1 : 0;
        compare_result_free(&r);
    }
    runset_free(&base);
    runset_free(&cur);
    return rc;
}

int cli_baseline(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int np = 0;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1])
            return cli_bad_input("baseline: unknown option '%s'", argv[i]);
        if (np == 2)
            return cli_bad_input("baseline: unexpected argument '%s'", argv[i]);
        paths[np++] = argv[i];
    }
    if (np < 2)
        return cli_bad_input("baseline: give CURRENT (a results file or run folder) and DIR (the baselines' folder)");
    runset cur;
    char err[768];
    if (runset_load(paths[0], &cur, err, sizeof err) != OOM_OK)
        return cli_bad_input("baseline: %s", err);
    if (!baseline_check(&cur, err, sizeof err)) {
        runset_free(&cur);
        return cli_bad_input("baseline: %s", err);
    }
    /* what changes, shown before anything is written */
    struct stat st;
    runset base;
    if (stat(paths[1], &st) != 0) {
        printf("baseline: %s does not exist yet: every file is new\n", paths[1]);
    } else if (runset_load(paths[1], &base, err, sizeof err) != OOM_OK) {
        printf("baseline: the old baseline cannot be read (%s): replaced\n", err);
    } else {
        compare_options o = {.tolerance = 0, .time_tolerance = -1};
        compare_result r;
        if (compare_runsets(&base, &cur, &o, &r, err, sizeof err) != OOM_OK) {
            printf("baseline: the old baseline is not comparable (%s): replaced\n", err);
        } else {
            printf("baseline: what changes in %s\n", paths[1]);
            compare_table(&r, &o, stdout);
            compare_result_free(&r);
        }
        for (size_t i = 0; i < base.n; i++)
            if (!runset_find(&cur, base.docs[i].scenario))
                printf("baseline: %s kept (not in this run)\n", base.docs[i].path);
        runset_free(&base);
    }
    size_t written = 0, unchanged = 0;
    oom_status s = baseline_write(&cur, paths[1], &written, &unchanged, err, sizeof err);
    runset_free(&cur);
    if (s != OOM_OK)
        return cli_bad_input("baseline: %s", err);
    printf("baseline: %zu file%s written to %s, %zu unchanged\n", written, written == 1 ? "" : "s", paths[1],
           unchanged);
    return 0;
}
