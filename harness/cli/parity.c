/* parity.c - `oomlab parity [WORKLOAD...]`: one JSON object per workload (bench/parity.h). */
#include "cli/command.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/parity.h"

int cli_parity(int argc, char **argv)
{
    device_kind kind = DEVICE_AUTO;
    const char *names[16];
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0) {
            int rc = cli_take_backend(argc, argv, &i, &kind);
            if (rc)
                return rc;
        } else if (argv[i][0] == '-') {
            return cli_bad_arg("parity: unknown option '%s'", argv[i]);
        } else {
            size_t w = 0;
            while (w < parity_nworkloads && strcmp(parity_workloads[w], argv[i]) != 0)
                w++;
            if (w == parity_nworkloads || n == 16)
                return cli_bad_arg("parity: unknown workload '%s' (eval_leak, eval_item, eval_nograd, train_sgd, "
                                 "train_adam, rnn_chain)",
                                 argv[i]);
            names[n++] = argv[i];
        }
    }
    if (kind == DEVICE_CUDA && (!device_cuda_built() || !device_cuda_visible()))
        return cli_bad_arg("%s", "parity: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    if (n == 0)
        for (; n < parity_nworkloads; n++)
            names[n] = parity_workloads[n];
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *o = NULL;
        if (parity_run(names[i], kind, &o) != OOM_OK) {
            fprintf(stderr, "oomlab: parity %s\n", oom_error_msg());
            rc = 1;
            continue;
        }
        char *s = cJSON_PrintUnformatted(o);
        if (s)
            puts(s);
        free(s);
        cJSON_Delete(o);
    }
    return rc;
}
