/* faultsweep.c - `oomlab faultsweep [SCENARIO]`: SQLite's OOM loop over the device and pinned host allocations
 * (run/faultsweep.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "run/faultsweep.h"
#include "run/runner.h"
#include "run/scenario.h"

/* `oomlab faultsweep [SCENARIO]`: the table, exit 1 when a point was not clean. */
int cli_faultsweep(int argc, char **argv)
{
    faultsweep_options fo = {.run = {.backend = DEVICE_AUTO}, .stride = 1, .device = true, .host = true};
    run_options *o = &fo.run;
    const char *name = NULL;
    static char set_names[RUN_MAX_SETS][64];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = strcmp(a, "--variant") == 0 || strcmp(a, "--backend") == 0 || strcmp(a, "--set") == 0 ||
                         strcmp(a, "--scale") == 0 || strcmp(a, "--only") == 0 || strcmp(a, "--stride") == 0 ||
                         strcmp(a, "--timeout") == 0;
        if (has_value && i + 1 >= argc)
            return cli_bad_arg("%s needs a value", a);
        int rc = 0;
        if (strcmp(a, "--variant") == 0) {
            rc = cli_take_variants(argv[++i], o);
        } else if (strcmp(a, "--backend") == 0) {
            rc = cli_take_backend(argc, argv, &i, &o->backend);
        } else if (strcmp(a, "--scale") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "ci") == 0 || strcmp(v, "full") == 0)
                o->scale = v[0] == 'c' ? SCALE_CI : SCALE_FULL;
            else
                return cli_bad_arg("--scale: '%.64s' is not ci or full", v);
        } else if (strcmp(a, "--set") == 0) {
            if (o->nsets == RUN_MAX_SETS)
                return cli_bad_arg("--set: at most %s settings", "16");
            if (!cli_parse_set(argv[++i], &o->sets[o->nsets], set_names[o->nsets], sizeof set_names[0]))
                return cli_bad_arg("--set: '%s' is not NAME=INTEGER", argv[i]);
            o->nsets++;
        } else if (strcmp(a, "--only") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "device") != 0 && strcmp(v, "host") != 0)
                return cli_bad_arg("--only: '%.64s' is not device or host", v);
            fo.device = v[0] == 'd';
            fo.host = v[0] == 'h';
        } else if (strcmp(a, "--stride") == 0) {
            long v = 0;
            rc = cli_take_count(argc, argv, &i, 1, FAULTSWEEP_MAX_POINT, "a stride", &v);
            fo.stride = (uint64_t)v;
        } else if (strcmp(a, "--timeout") == 0) {
            rc = cli_take_timeout(argv[++i], &o->timeout_s);
        } else if (strcmp(a, "--jobs") == 0) {
            long v = 0;
            rc = cli_take_count(argc, argv, &i, 1, RUN_MAX_JOBS, "a number of jobs", &v);
            o->jobs = (int)v;
        } else if (a[0] == '-' && a[1]) {
            return cli_bad_arg("faultsweep: unknown option '%s'", a);
        } else if (!name) {
            name = a;
        } else {
            return cli_bad_arg("faultsweep: unexpected argument '%s'", a);
        }
        if (rc)
            return rc;
    }
    if (!name && (o->nvariants || o->nsets))
        return cli_bad_arg("%s", "faultsweep: --variant and --set need a SCENARIO");
    const scenario *one = NULL;
    if (name && !(one = cli_find_scenario(name)))
        return CLI_EXIT_BAD_INPUT;
    char err[512];
    o->alloc_conf = alloc_conf_pick(NULL, &o->alloc_conf_source);
    alloc_conf user_conf;
    if (alloc_conf_parse(&user_conf, o->alloc_conf, err, sizeof err) != OOM_OK) {
        fprintf(stderr, "oomlab: %s: %s\n", o->alloc_conf_source, err);
        return CLI_EXIT_BAD_INPUT;
    }
    if (o->alloc_conf && o->alloc_conf[0]) /* the environment's settings change every point: say so */
        printf("settings: '%s' from %s, under each variant's own\n", o->alloc_conf, o->alloc_conf_source);
    faultsweep_result res;
    if (faultsweep_run(one ? &one : scenario_catalog, one ? 1 : scenario_catalog_size, &fo, &res, err, sizeof err) !=
        OOM_OK)
        return cli_bad_arg("%s", err);
    faultsweep_table(&res, stdout);
    int rc = res.passed ? 0 : 1;
    faultsweep_result_free(&res);
    return rc;
}
