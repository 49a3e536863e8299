/* export.c - `oomlab export RUN --junit F --gbench F --smaller-is-better F` (results/export.h): every file is made
 * before any is written, and each is written atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "core/fileio.h"
#include "results/export.h"
#include "results/runset.h"

static char *print_json(cJSON *j)
{
    char *s = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (s) { /* newline-terminated */
        size_t n = strlen(s);
        char *t = realloc(s, n + 2);
        if (!t) {
            free(s);
            return NULL;
        }
        t[n] = '\n';
        t[n + 1] = '\0';
        s = t;
    }
    return s;
}

int cli_export(int argc, char **argv)
{
    const char *run = NULL, *out[3] = {NULL, NULL, NULL};
    static const char *const opts[3] = {"--junit", "--gbench", "--smaller-is-better"};
    for (int i = 0; i < argc; i++) {
        int k = 0;
        while (k < 3 && strcmp(argv[i], opts[k]) != 0)
            k++;
        if (k < 3) {
            if (++i >= argc || !argv[i][0])
                return cli_bad_input("%s needs a file name", opts[k]);
            out[k] = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_bad_input("export: unknown option '%s'", argv[i]);
        } else if (!run) {
            run = argv[i];
        } else {
            return cli_bad_input("export: unexpected argument '%s'", argv[i]);
        }
    }
    if (!run)
        return cli_bad_input("export: give RUN (a results file or run folder)");
    if (!out[0] && !out[1] && !out[2])
        return cli_bad_input("export: give at least one of --junit, --gbench, --smaller-is-better");
    runset s;
    char err[768];
    if (runset_load(run, &s, err, sizeof err) != OOM_OK)
        return cli_bad_input("export: %s", err);
    char *text[3] = {NULL, NULL, NULL};
    size_t untimed = 0;
    if (out[0])
        text[0] = export_junit(&s);
    if (out[1])
        text[1] = print_json(export_gbench(&s, &untimed));
    if (out[2])
        text[2] = print_json(export_smaller_is_better(&s));
    runset_free(&s);
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++)
        if (out[k] && !text[k])
            rc = cli_bad_input("export: out of host memory");
    for (int k = 0; k < 3 && rc == 0; k++) {
        if (!out[k])
            continue;
        if (fileio_write_atomic(out[k], text[k], strlen(text[k])) != OOM_OK)
            rc = cli_bad_input("export: %s", oom_error_detail());
        else
            printf("%s: %s%s\n", opts[k] + 2, out[k],
                   k == 1 && untimed ? " (variants without a time left out: a baseline keeps none on sim)" : "");
    }
    for (int k = 0; k < 3; k++)
        free(text[k]);
    return rc;
}
