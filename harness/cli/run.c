/* run.c - `oomlab run [SCENARIO]`: run a scenario's variants, each in its own process (run/runner.h,
 * run/isolate.h), or sweep a parameter (run/sweep.h); print the table and write the results file. */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "alloc/allocconf.h"
#include "core/echo.h"
#include "core/fileio.h"
#include "core/units.h"
#include "figures/plot.h"
#include "results/report.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "results/sweep_report.h"

/* --set NAME=VALUE with an integer VALUE. */
bool cli_parse_set(const char *arg, run_set *out, char *name, size_t cap)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) >= cap)
        return false;
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    char *end = NULL;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (!eq[1] || !end || *end || errno)
        return false;
    out->name = name;
    out->value = v;
    return true;
}

/* --variant V (repeatable) or --variant A,B: append each name. */
int cli_take_variants(char *arg, run_options *o)
{
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
        if (o->nvariants == RUN_MAX_VARIANTS)
            return cli_bad_arg("--variant: at most %s variants", "32");
        o->variants[o->nvariants++] = tok;
    }
    return 0;
}

/* --timeout SECONDS: a positive number of seconds, or 0 for no limit (stored as -1). 0, or the exit status. */
int cli_take_timeout(const char *arg, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(arg, &end);
    if (!arg[0] || !end || *end || errno || !(v >= 0) || v > 1e6)
        return cli_bad_arg("--timeout: '%.64s' is not a number of seconds from 0 (no limit) to 1000000", arg);
    *out = v == 0 ? -1 : v;
    return 0;
}

/* The "jobs: N (why)" line of a run's header, when the variants run more than one at a time. */
static void print_jobs(FILE *f, int jobs, const char *why)
{
    if (jobs != 1)
        fprintf(f, "jobs: %d (%s)\n", jobs, why);
}

/* Write one run's results file (into *rundir once one is claimed, else claims one in out_dir). Returns 0 or
 * CLI_EXIT_BAD_INPUT (the line printed). */
static int write_one(const run_result *res, const char *out_dir, bool write, char *rundir, size_t rundircap,
                     char *path, size_t pathcap)
{
    path[0] = '\0';
    if (!write)
        return 0;
    oom_status st = rundir[0] ? report_write_in(res, rundir, path, pathcap) : report_write(res, out_dir, path, pathcap);
    if (st != OOM_OK) {
        fprintf(stderr, "oomlab: --out: %s\n", oom_error_detail());
        return CLI_EXIT_BAD_INPUT;
    }
    const char *slash = strrchr(path, '/');
    snprintf(rundir, rundircap, "%.*s", (int)(slash ? slash - path : 0), path);
    return 0;
}

/* `oomlab run SCENARIO --sweep PARAM=LO..HI`: the sweep's table or JSON, and its results file. */
static int run_sweep(const scenario *sc, const run_options *o, const char *arg, const char *out_dir, bool write,
                     bool json, bool plot)
{
    char param[64], err[ALLOC_CONF_ERR_MAX + 256];
    int64_t lo = 0, hi = 0;
    if (!sweep_parse(arg, param, sizeof param, &lo, &hi))
        return cli_bad_arg("--sweep: '%s' is not PARAM=LO..HI (integers)", arg);
    if (sweep_validate(sc, o, param, lo, hi, err, sizeof err) != OOM_OK)
        return cli_bad_arg("%s", err);
    sweep_result res;
    if (runner_sweep(sc, o, param, lo, hi, &res, err, sizeof err) != OOM_OK)
        return cli_bad_arg("%s", err);
    char path[1024] = "";
    if (write && sweep_write(&res, out_dir, path, sizeof path) != OOM_OK) {
        fprintf(stderr, "oomlab: --out: %s\n", oom_error_detail());
        sweep_result_free(&res);
        return CLI_EXIT_BAD_INPUT;
    }
    if (json) {
        cJSON *j = sweep_json(&res);
        if (j)
            cli_print_json(j);
        if (write)
            fprintf(stderr, "results: %s\n", path);
    } else {
        sweep_table(&res, stdout);
        if (write)
            printf("results: %s\n", path);
    }
    int rc = res.passed ? 0 : 1;
    char drawn[2048];
    if (plot && plot_all(path, drawn, sizeof drawn, err, sizeof err) != OOM_OK) { /* a failed result, exit 1 */
        fprintf(stderr, "oomlab: --plot: %s\n", err);
        rc = 1;
    } else if (plot && !json) {
        printf("plot: %s", drawn);
    }
    sweep_result_free(&res);
    return rc;
}

/* --scale full on sim computes every kernel on CPU references: minutes for the catalog. Said before it starts,
 * with the way to the same counters in a second. */
static void full_scale_hint(const run_options *o)
{
    if (o->scale != SCALE_FULL || o->dry_run)
        return;
    if (o->backend == DEVICE_SIM || (o->backend == DEVICE_AUTO && !device_cuda_probe()->visible))
        fprintf(stderr, "oomlab: note: --scale full on sim computes every kernel on the CPU, which takes minutes; "
                        "--dry-run gives the same allocator counters in a second\n");
}

int cli_run(int argc, char **argv)
{
    run_options o = {.backend = DEVICE_AUTO, .seed = 0};
    const char *name = NULL, *out_dir = "results/runs", *conf_cli = NULL, *sweep = NULL;
    bool json = false, write = true, plot = false, out_given = false;
    static char set_names[RUN_MAX_SETS][64];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = strcmp(a, "--variant") == 0 || strcmp(a, "--backend") == 0 || strcmp(a, "--budget") == 0 ||
                         strcmp(a, "--set") == 0 || strcmp(a, "--alloc-conf") == 0 || strcmp(a, "--out") == 0 ||
                         strcmp(a, "--scale") == 0 || strcmp(a, "--sweep") == 0 || strcmp(a, "--timeout") == 0 ||
                         strcmp(a, "--jobs") == 0;
        if (has_value && i + 1 >= argc)
            return cli_bad_arg("%s needs a value", a);
        if (strcmp(a, "--variant") == 0) {
            int rc = cli_take_variants(argv[++i], &o);
            if (rc)
                return rc;
        } else if (strcmp(a, "--backend") == 0) {
            int rc = cli_take_backend(argc, argv, &i, &o.backend);
            if (rc)
                return rc;
        } else if (strcmp(a, "--scale") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "ci") == 0)
                o.scale = SCALE_CI;
            else if (strcmp(v, "full") == 0)
                o.scale = SCALE_FULL;
            else
                return cli_bad_arg("--scale: '%.64s' is not ci or full", v);
        } else if (strcmp(a, "--budget") == 0) {
            if (units_parse_size(argv[++i], &o.budget) != OOM_OK)
                return cli_bad_arg("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, "
                                 "MB, GB, TB)",
                                 argv[i]);
        } else if (strcmp(a, "--set") == 0) {
            if (o.nsets == RUN_MAX_SETS)
                return cli_bad_arg("--set: at most %s settings", "16");
            if (!cli_parse_set(argv[++i], &o.sets[o.nsets], set_names[o.nsets], sizeof set_names[0]))
                return cli_bad_arg("--set: '%s' is not NAME=INTEGER", argv[i]);
            o.nsets++;
        } else if (strcmp(a, "--alloc-conf") == 0) {
            conf_cli = argv[++i];
        } else if (strcmp(a, "--sweep") == 0) {
            if (sweep)
                return cli_bad_arg("%s", "--sweep: one parameter at a time");
            sweep = argv[++i];
        } else if (strcmp(a, "--out") == 0) {
            out_dir = argv[++i];
            out_given = true;
            if (!out_dir[0])
                return cli_bad_arg("%s needs a directory", "--out");
        } else if (strcmp(a, "--no-write") == 0) {
            write = false;
        } else if (strcmp(a, "--timeout") == 0) {
            int rc = cli_take_timeout(argv[++i], &o.timeout_s);
            if (rc)
                return rc;
        } else if (strcmp(a, "--no-fork") == 0) {
            o.no_fork = true;
        } else if (strcmp(a, "--jobs") == 0) {
            long v = 0;
            int rc = cli_take_count(argc, argv, &i, 1, RUN_MAX_JOBS, "a number of jobs", &v);
            if (rc)
                return rc;
            o.jobs = (int)v;
        } else if (strcmp(a, "--dry-run") == 0) {
            o.dry_run = true;
        } else if (strcmp(a, "--real-addresses") == 0) {
            o.real_addresses = true;
        } else if (strcmp(a, "--plot") == 0) {
            plot = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_bad_arg("run: unknown option '%s'", a);
        } else if (!name) {
            name = a;
        } else {
            return cli_bad_arg("run: unexpected argument '%s'", a);
        }
    }
    if (plot && !write)
        return cli_bad_arg("%s", "--plot draws the results file, which --no-write does not write");
    if (out_given && !write)
        return cli_bad_arg("%s", "--out names where results are written, and --no-write writes none: give one");
    if (!name && (o.nvariants || o.nsets))
        return cli_bad_arg("%s", "run: --variant and --set need a SCENARIO (variants and parameters are a scenario's)");
    if (sweep && !name)
        return cli_bad_arg("%s", "run: --sweep needs a SCENARIO (parameters are a scenario's)");
    const scenario *one = NULL;
    if (name && !(one = cli_find_scenario(name)))
        return CLI_EXIT_BAD_INPUT;
    /* the user's settings, from the most specific source that is set; a bad one is named with its source */
    o.alloc_conf = alloc_conf_pick(conf_cli, &o.alloc_conf_source);
    char err[ALLOC_CONF_ERR_MAX + 256];
    alloc_conf user_conf;
    if (alloc_conf_parse(&user_conf, o.alloc_conf, err, sizeof err) != OOM_OK) {
        fprintf(stderr, "oomlab: %s: %s\n", o.alloc_conf_source, err);
        return CLI_EXIT_BAD_INPUT;
    }
    if (alloc_no_caching_pick(&o.uncached, &o.uncached_source, err, sizeof err) != OOM_OK)
        return cli_bad_arg("%s", err);
    if (sweep) {
        full_scale_hint(&o);
        return run_sweep(one, &o, sweep, out_dir, write, json, plot);
    }
    const scenario *const *list = one ? &one : scenario_catalog;
    size_t n = one ? 1 : scenario_catalog_size;
    for (size_t k = 0; k < n; k++) /* every scenario's options are checked before anything runs or is written */
        if (runner_validate(list[k], &o, err, sizeof err) != OOM_OK) /* a settings error names its key and range */
            return cli_bad_arg("%s", err);
    full_scale_hint(&o);
    run_result *res = calloc(n, sizeof *res);
    char (*paths)[1024] = calloc(n, sizeof *paths);
    if (!res || !paths) {
        free(res);
        free(paths);
        return cli_bad_arg("%s", "out of host memory");
    }
    /* every variant of every scenario as a child, --jobs at a time; the results are written in catalog order */
    const run_options **opts = calloc(n, sizeof *opts);
    size_t budget = 0;
    for (size_t k = 0; opts && k < n; k++) {
        opts[k] = &o;
        size_t b = o.budget ? o.budget : list[k]->default_budget > list[k]->ci_budget ? list[k]->default_budget
                                                                                       : list[k]->ci_budget;
        budget = b > budget ? b : budget;
    }
    char why[RUN_JOBS_WHY_MAX];
    int jobs = runner_jobs(&o, budget, why, sizeof why);
    size_t nvar = 0; /* no more jobs than variants to run (each --variant names one, checked above) */
    for (size_t k = 0; k < n; k++)
        nvar += o.nvariants ? (size_t)o.nvariants : list[k]->nvariants;
    if (nvar && (size_t)jobs > nvar)
        jobs = (int)nvar;
    if (!opts || runner_run_batch(list, opts, n, res, jobs, err, sizeof err) != OOM_OK) {
        if (!opts)
            snprintf(err, sizeof err, "out of host memory");
        free(opts);
        free(res);
        free(paths);
        return cli_bad_arg("%s", err);
    }
    free(opts);
    char rundir[1024] = "";
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = write_one(&res[k], out_dir, write, rundir, sizeof rundir, paths[k], sizeof paths[0]);
    if (rc) {
        for (size_t k = 0; k < n; k++)
            run_result_free(&res[k]);
        free(res);
        free(paths);
        return rc;
    }
    bool passed = true, plot_failed = false;
    for (size_t k = 0; k < n; k++) {
        passed = passed && res[k].passed;
        if (plot) { /* the results are written: a plot that fails is a failed result (exit 1), not bad input */
            char drawn[4096]; /* NAME.png, NAME-peaks.png, NAME-segments.png beside NAME.json */
            if (plot_all(paths[k], drawn, sizeof drawn, err, sizeof err) != OOM_OK) {
                fprintf(stderr, "oomlab: --plot: %s\n", err);
                plot_failed = true;
            } else if (!json) {
                for (char *line = drawn, *nl; (nl = strchr(line, '\n')); line = nl + 1)
                    printf("plot: %.*s\n", (int)(nl - line), line);
            }
        }
    }
    if (json) { /* the results JSON on stdout (an array for the catalog); the file is written all the same */
        cJSON *j = one ? report_json(&res[0]) : cJSON_CreateArray();
        for (size_t k = 0; !one && j && k < n; k++) {
            cJSON *e = report_json(&res[k]);
            if (!e || !cJSON_AddItemToArray(j, e)) {
                cJSON_Delete(e);
                cJSON_Delete(j);
                j = NULL;
            }
        }
        if (j)
            cli_print_json(j);
        for (size_t k = 0; write && k < n; k++)
            fprintf(stderr, "results: %s\n", paths[k]);
    } else {
        print_jobs(stdout, jobs, why); /* the header's first line; the JSON has none (it is --jobs 1's) */
        if (one)
            report_table(&res[0], stdout);
        else
            report_catalog_table(res, n, stdout);
        if (write)
            printf("results: %s\n", one ? paths[0] : rundir);
    }
    rc = passed && !plot_failed ? 0 : 1;
    for (size_t k = 0; k < n; k++)
        run_result_free(&res[k]);
    free(res);
    free(paths);
    return rc;
}
