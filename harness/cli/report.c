/* report.c - `oomlab report RESULTS...`: one static page explaining each scenario with its measurements
 * (figures/report_html.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "figures/report_html.h"
#include "results/runset.h"

int cli_report(int argc, char **argv)
{
    const char *out = "results/report", *twins = NULL, *inputs[64];
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--twins") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return cli_bad_arg("%s needs a folder", argv[i]);
            *(strcmp(argv[i], "-o") == 0 ? &out : &twins) = argv[i + 1];
            i++;
        } else if (argv[i][0] == '-') {
            return cli_bad_arg("report: unknown option '%s'", argv[i]);
        } else if (n == 64) {
            return cli_bad_arg("%s", "report: at most 64 results files or folders");
        } else {
            inputs[n++] = argv[i];
        }
    }
    if (n == 0)
        return cli_bad_arg("%s", "report: missing RESULTS (a run's folder or results files: oomlab run writes them)");
    FILE *probe = twins ? NULL : fopen("tests/data/twins/fragmentation.torch.json", "r");
    if (probe) { /* the default, said: it puts PyTorch's numbers on the page */
        fclose(probe);
        twins = "tests/data/twins";
    }
    char err[1024];
    if (report_html(inputs, n, twins, out, err, sizeof err) != OOM_OK)
        return cli_bad_arg("report: %s", err);
    printf("twins: %s\nreport: %s/index.html\n", twins ? twins : "none (no --twins, no tests/data/twins)", out);
    return 0;
}
