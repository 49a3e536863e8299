/* main.c - the oomlab command line.
 *
 *   oomlab list
 *   oomlab describe SCENARIO
 *   oomlab run SCENARIO [--variant V] [--backend auto|cuda|sim] [--budget SIZE] [--set key=value]...
 *              [--alloc-conf S] [--dry-run] [--json] [--plot] [--out DIR | --no-write]
 *   oomlab plot RESULTS.json [-o OUT.png]
 *   oomlab parity [WORKLOAD...] [--backend auto|cuda|sim]
 *   oomlab replay FILE [--alloc-conf S] [--budget SIZE] [--kernels first|none|EVENT] [--snapshot OUT]
 *                [--json]
 *   oomlab bench alloc [--backend auto|cuda|sim] [--iters N] [--json]
 *   oomlab bench gemm [--backend auto|cuda|sim] [--json]
 *   oomlab bench step [--backend auto|cuda|sim] [--width N] [--batch N] [--json]
 *   oomlab version | help
 *
 * Exit status: 0 success (run: every variant shows what it must; replay: the model agrees with PyTorch's
 * segment actions), 1 a result that fails (run: an expectation does not hold; replay: it diverges), 2 bad input
 * (one error line on stderr, nothing written).
 */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/allocconf.h"
#include "cli/bench.h"
#include "device/device.h"
#include "cli/parity.h"
#include "run/plot.h"
#include "alloc/replay.h"
#include "run/report.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "core/units.h"

#define EXIT_BAD_INPUT 2

static const char usage[] =
    "usage: oomlab COMMAND [ARGS]\n"
    "  list                       the scenario catalog\n"
    "  describe SCENARIO          a scenario's story, variants and parameters\n"
    "  run SCENARIO [--variant V] [--backend auto|cuda|sim] [--budget SIZE] [--set key=value]...\n"
    "               [--alloc-conf S] [--dry-run] [--json] [--plot] [--out DIR | --no-write]\n"
    "      run a scenario's variants, print the table and write results/runs/STAMP-BACKEND/SCENARIO.json\n"
    "      (--plot: and SCENARIO.png beside it)\n"
    "  plot RESULTS.json [-o OUT.png]\n"
    "      draw a run: allocated and reserved bytes at each step, per variant (gnuplot)\n"
    "  parity [WORKLOAD...] [--backend auto|cuda|sim]\n"
    "      the runtime's memory on the workloads of scripts/twins/mlp_parity.py, one JSON object per line\n"
    "  replay FILE [--alloc-conf S] [--budget SIZE] [--kernels first|none|EVENT] [--snapshot OUT] [--json]\n"
    "      replay a PyTorch memory snapshot (JSON from scripts/snapshot2json.py) through the allocator model;\n"
    "      --snapshot writes the model's snapshot after it (OUT.pickle or .pkl: for pytorch.org/memory_viz)\n"
    "  bench alloc [--backend auto|cuda|sim] [--iters N] [--json]\n"
    "      ns per malloc+free pair on a cache hit (cuda: also cudaMalloc and cudaMallocAsync)\n"
    "  bench gemm [--backend auto|cuda|sim] [--json]\n"
    "      ms per call of the CPU reference GEMM; cuda: TFLOP/s of oomlab's GEMM against cuBLAS\n"
    "  bench step [--backend auto|cuda|sim] [--width N] [--batch N] [--json]\n"
    "      ms per training step and per forward of MLP(width, depth 4), CI scale by default (256, batch 64)\n"
    "  version | help\n";

static int bad_input(const char *fmt, const char *arg)
{
    fprintf(stderr, "oomlab: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return EXIT_BAD_INPUT;
}

/* The value of --backend at argv[*i] (advancing *i): 0, or the exit status of a bad one (its line printed). */
static int take_backend(int argc, char **argv, int *i, device_kind *kind)
{
    if (++*i >= argc)
        return bad_input("%s needs a value", "--backend");
    if (device_kind_parse(argv[*i], kind) != OOM_OK)
        return bad_input("--backend: '%s' is not auto, cuda or sim", argv[*i]);
    return 0;
}

/* Print a cJSON object and free it. */
static void print_json(cJSON *o)
{
    char *s = cJSON_Print(o);
    if (s) {
        puts(s);
        free(s);
    }
    cJSON_Delete(o);
}

/* A trace event index: decimal digits only. */
static bool parse_event(const char *s, size_t *out)
{
    if (!*s || strlen(s) > 15 || strspn(s, "0123456789") != strlen(s))
        return false;
    *out = (size_t)strtoull(s, NULL, 10);
    return true;
}

static int cmd_replay(int argc, char **argv)
{
    const char *file = NULL, *conf_cli = NULL, *conf_src = NULL;
    replay_options opt = {0};
    bool json = false, have_conf = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--alloc-conf") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--alloc-conf");
            conf_cli = argv[i];
            have_conf = true;
        } else if (strcmp(argv[i], "--budget") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--budget");
            if (units_parse_size(argv[i], &opt.budget_bytes) != OOM_OK)
                return bad_input("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, "
                                 "MB, GB, TB)",
                                 argv[i]);
        } else if (strcmp(argv[i], "--kernels") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--kernels");
            if (strcmp(argv[i], "none") == 0)
                opt.kernels = REPLAY_KERNELS_NONE;
            else if (strcmp(argv[i], "first") == 0)
                opt.kernels = REPLAY_KERNELS_FIRST_ALLOC;
            else if (parse_event(argv[i], &opt.kernel_at))
                opt.kernels = REPLAY_KERNELS_AT;
            else
                return bad_input("--kernels: '%s' is not first, none or an event number", argv[i]);
        } else if (strcmp(argv[i], "--snapshot") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--snapshot");
            if (!argv[i][0])
                return bad_input("%s needs a file name", "--snapshot");
            opt.snapshot_path = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return bad_input("replay: unknown option '%s'", argv[i]);
        } else if (!file) {
            file = argv[i];
        } else {
            return bad_input("replay: unexpected argument '%s'", argv[i]);
        }
    }
    if (!file)
        return bad_input("%s", "replay: missing FILE (a snapshot JSON)");
    /* --alloc-conf wins; else OOMLAB_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF; else the trace's own settings */
    const char *picked = alloc_conf_pick(conf_cli, &conf_src);
    if (have_conf || (picked && picked[0]))
        opt.alloc_conf = picked;
    replay_result *res = calloc(1, sizeof *res);
    if (!res)
        return bad_input("%s", "out of host memory");
    char err[300];
    oom_status st = replay_file(file, &opt, res, err, sizeof err);
    if (st != OOM_OK) {
        free(res);
        if (opt.alloc_conf && strncmp(err, "--alloc-conf: ", 14) == 0 && conf_src &&
            strcmp(conf_src, "--alloc-conf") != 0)
            return bad_input("%s", err + 14); /* the message already names the key */
        return bad_input("replay: %s", err);
    }
    char conftext[ALLOC_CONF_TEXT_MAX];
    alloc_conf_format(&res->conf, conftext, sizeof conftext);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < MEMSTATS_NKEYS; i++) {
            const char *key;
            int64_t v;
            memstats_key(&res->stats, i, &key, &v);
            cJSON_AddNumberToObject(o, key, (double)v);
        }
        cJSON_AddNumberToObject(o, "replay.events", (double)res->events);
        if (res->first_divergence >= 0)
            cJSON_AddNumberToObject(o, "replay.first_divergence", (double)res->first_divergence);
        else
            cJSON_AddNullToObject(o, "replay.first_divergence");
        cJSON_AddStringToObject(o, "replay.divergence", res->divergence);
        cJSON_AddNumberToObject(o, "replay.model_ooms", (double)res->model_ooms);
        if (res->first_oom_event >= 0)
            cJSON_AddNumberToObject(o, "replay.first_oom_event", (double)res->first_oom_event);
        else
            cJSON_AddNullToObject(o, "replay.first_oom_event");
        cJSON_AddStringToObject(o, "replay.oom_message", res->oom_message);
        cJSON_AddStringToObject(o, "replay.alloc_conf", conftext);
        cJSON_AddNumberToObject(o, "replay.budget", (double)res->budget_bytes);
        if (res->kernel_event >= 0)
            cJSON_AddNumberToObject(o, "replay.kernel_event", (double)res->kernel_event);
        else
            cJSON_AddNullToObject(o, "replay.kernel_event");
        print_json(o);
    } else {
        const memstats *m = &res->stats;
        printf("replay: %s (%zu events)\n", file, res->events);
        printf("config: %s%s\n", conftext, opt.alloc_conf ? "" : " (from the trace)");
        if (res->budget_bytes)
            printf("budget: %zu bytes\n", res->budget_bytes);
        printf("addresses: %s; ", opt.alloc_conf ? "the sim's model of the driver"
                                                  : "PyTorch's where free, else the sim's model of the driver");
        if (opt.kernels == REPLAY_KERNELS_FIRST_ALLOC && res->kernel_event >= 0)
            printf("the first kernel launched after the first allocation, before event %ld (--kernels first, the "
                   "default)\n",
                   res->kernel_event);
        else if (res->kernel_event >= 0)
            printf("the first kernel launched before event %ld (--kernels)\n", res->kernel_event);
        else
            printf("no kernel launched (--kernels)\n");
        if (res->first_divergence < 0)
            printf("segment actions: agree with PyTorch's\n");
        else
            printf("segment actions: diverge at %s\n", res->divergence);
        if (res->model_ooms)
            printf("OOMs: %zu, the first at event %ld:\n  %s\n", res->model_ooms, res->first_oom_event,
                   res->oom_message);
        static const char *const keys[] = {
            "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "reserved_bytes.all.peak",     "segment.all.current",      "num_device_alloc",
            "num_device_free",             "num_alloc_retries",        "num_ooms",
        };
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            int64_t v = 0;
            memstats_get(m, keys[i], &v);
            printf("  %-28s %lld\n", keys[i], (long long)v);
        }
    }
    int rc = res->first_divergence < 0 ? 0 : 1;
    free(res);
    return rc;
}

static int cmd_bench_gemm(int argc, char **argv)
{
    bench_gemm_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = true;
        } else if (strcmp(argv[i], "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &opt.kind);
            if (rc)
                return rc;
        } else {
            return bad_input("bench gemm: unknown option '%s'", argv[i]);
        }
    }
    oom_status st = bench_gemm(&opt, stdout);
    if (st == OOM_ENODEV)
        return bad_input("%s", "bench: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    return st == OOM_OK ? 0 : 1;
}

static int cmd_bench_step(int argc, char **argv)
{
    bench_step_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = true;
        } else if (strcmp(argv[i], "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &opt.kind);
            if (rc)
                return rc;
        } else if (strcmp(argv[i], "--width") == 0 || strcmp(argv[i], "--batch") == 0) {
            const char *o = argv[i];
            if (++i >= argc)
                return bad_input("%s needs a value", o);
            char *end = NULL;
            long v = strtol(argv[i], &end, 10);
            if (!end || *end || v < 1 || v > 65536)
                return bad_input("bench step: '%s' is not a size from 1 to 65536", argv[i]);
            *(strcmp(o, "--width") == 0 ? &opt.width : &opt.batch) = v;
        } else {
            return bad_input("bench step: unknown option '%s'", argv[i]);
        }
    }
    oom_status st = bench_step(&opt, stdout);
    if (st == OOM_ENODEV)
        return bad_input("%s", "bench: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    return st == OOM_OK ? 0 : 1;
}

static int cmd_bench(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "gemm") == 0)
        return cmd_bench_gemm(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "step") == 0)
        return cmd_bench_step(argc - 1, argv + 1);
    if (argc < 1 || strcmp(argv[0], "alloc") != 0)
        return bad_input("%s", "bench: the benchmark to run is 'alloc', 'gemm' or 'step'");
    bench_options opt = {.kind = DEVICE_AUTO, .iters = 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = true;
        } else if (strcmp(argv[i], "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &opt.kind);
            if (rc)
                return rc;
        } else if (strcmp(argv[i], "--iters") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--iters");
            char *end = NULL;
            long v = strtol(argv[i], &end, 10);
            if (!end || *end || v < 1 || v > 100000000)
                return bad_input("--iters: '%s' is not a count from 1 to 100000000", argv[i]);
            opt.iters = v;
        } else {
            return bad_input("bench: unknown option '%s'", argv[i]);
        }
    }
    oom_status st = bench_alloc(&opt, stdout);
    if (st == OOM_ENODEV)
        return bad_input("%s", "bench: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    return st == OOM_OK ? 0 : 1;
}

static int cmd_list(void)
{
    for (size_t i = 0; i < scenario_catalog_size; i++) {
        const scenario *sc = scenario_catalog[i];
        printf("%-16s %s\n", sc->name, sc->title);
    }
    return 0;
}

static const scenario *find_scenario(const char *name)
{
    const scenario *sc = scenario_find(name);
    if (!sc) {
        fprintf(stderr, "oomlab: no scenario '%s' (oomlab list shows the catalog:", name);
        for (size_t i = 0; i < scenario_catalog_size; i++)
            fprintf(stderr, " %s", scenario_catalog[i]->name);
        fprintf(stderr, ")\n");
    }
    return sc;
}

static int cmd_describe(int argc, char **argv)
{
    if (argc != 1)
        return bad_input("%s", "describe: give one SCENARIO");
    const scenario *sc = find_scenario(argv[0]);
    if (!sc)
        return EXIT_BAD_INPUT;
    char budget[32];
    printf("%s: %s\n\n%s\n\nbudget: %s (--budget)\n\nvariants:\n", sc->name, sc->title, sc->story,
           memstats_format_size(sc->default_budget, budget, sizeof budget));
    for (size_t i = 0; i < sc->nvariants; i++) {
        const scenario_variant *v = &sc->variants[i];
        printf("  %-26s %s%s%s%s\n", v->name, v->summary, v->alloc_conf[0] ? " [" : "", v->alloc_conf,
               v->alloc_conf[0] ? "]" : "");
    }
    printf("\nparameters (--set name=value):\n");
    for (size_t i = 0; i < sc->nparams; i++) {
        const scenario_param *p = &sc->params[i];
        printf("  %-12s %-6lld %s (%lld to %lld)\n", p->name, (long long)p->def, p->help, (long long)p->min,
               (long long)p->max);
    }
    return 0;
}

/* --set NAME=VALUE with an integer VALUE. */
static bool parse_set(const char *arg, run_set *out, char *name, size_t cap)
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

static int cmd_run(int argc, char **argv)
{
    run_options o = {.backend = DEVICE_AUTO, .seed = 0};
    const char *name = NULL, *out_dir = "results/runs", *conf_cli = NULL;
    bool json = false, write = true, plot = false;
    static char set_names[RUN_MAX_SETS][64];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = strcmp(a, "--variant") == 0 || strcmp(a, "--backend") == 0 || strcmp(a, "--budget") == 0 ||
                         strcmp(a, "--set") == 0 || strcmp(a, "--alloc-conf") == 0 || strcmp(a, "--out") == 0;
        if (has_value && i + 1 >= argc)
            return bad_input("%s needs a value", a);
        if (strcmp(a, "--variant") == 0) {
            o.variant = argv[++i];
        } else if (strcmp(a, "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &o.backend);
            if (rc)
                return rc;
        } else if (strcmp(a, "--budget") == 0) {
            if (units_parse_size(argv[++i], &o.budget) != OOM_OK)
                return bad_input("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, "
                                 "MB, GB, TB)",
                                 argv[i]);
        } else if (strcmp(a, "--set") == 0) {
            if (o.nsets == RUN_MAX_SETS)
                return bad_input("--set: at most %s settings", "16");
            if (!parse_set(argv[++i], &o.sets[o.nsets], set_names[o.nsets], sizeof set_names[0]))
                return bad_input("--set: '%s' is not NAME=INTEGER", argv[i]);
            o.nsets++;
        } else if (strcmp(a, "--alloc-conf") == 0) {
            conf_cli = argv[++i];
        } else if (strcmp(a, "--out") == 0) {
            out_dir = argv[++i];
            if (!out_dir[0])
                return bad_input("%s needs a directory", "--out");
        } else if (strcmp(a, "--no-write") == 0) {
            write = false;
        } else if (strcmp(a, "--dry-run") == 0) {
            o.dry_run = true;
        } else if (strcmp(a, "--plot") == 0) {
            plot = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (a[0] == '-' && a[1]) {
            return bad_input("run: unknown option '%s'", a);
        } else if (!name) {
            name = a;
        } else {
            return bad_input("run: unexpected argument '%s'", a);
        }
    }
    if (!name)
        return bad_input("%s", "run: missing SCENARIO (oomlab list shows the catalog)");
    if (plot && !write)
        return bad_input("%s", "--plot draws the results file, which --no-write does not write");
    const scenario *sc = find_scenario(name);
    if (!sc)
        return EXIT_BAD_INPUT;
    o.alloc_conf = alloc_conf_pick(conf_cli, NULL);
    char err[512];
    if (runner_validate(sc, &o, err, sizeof err) != OOM_OK) /* a settings error names its key and range */
        return bad_input("%s", err);
    run_result res;
    oom_status st = runner_run(sc, &o, &res, err, sizeof err);
    if (st != OOM_OK) {
        fprintf(stderr, "oomlab: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    char path[1024] = "";
    if (write && report_write(&res, out_dir, path, sizeof path) != OOM_OK) {
        fprintf(stderr, "oomlab: --out: %s\n", oom_error_detail());
        run_result_free(&res);
        return EXIT_BAD_INPUT;
    }
    char png[1100] = "";
    bool plot_failed = false;
    if (plot) { /* the results are written: a plot that fails is a failed result (exit 1), not bad input */
        snprintf(png, sizeof png, "%.*s.png", (int)(strlen(path) - 5), path); /* NAME.json -> NAME.png */
        plot_failed = plot_run(path, png, err, sizeof err) != OOM_OK;
    }
    if (json) {
        cJSON *j = report_json(&res);
        if (j)
            print_json(j);
    } else {
        report_table(&res, stdout);
        if (write)
            printf("results: %s\n", path);
        if (plot && !plot_failed)
            printf("plot: %s\n", png);
    }
    if (plot_failed)
        fprintf(stderr, "oomlab: --plot: %s\n", err);
    int rc = res.passed && !plot_failed ? 0 : 1;
    run_result_free(&res);
    return rc;
}

static int cmd_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0) {
            if (++i >= argc || !argv[i][0])
                return bad_input("%s needs a file name", "-o");
            out = argv[i];
        } else if (argv[i][0] == '-') {
            return bad_input("plot: unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else {
            return bad_input("plot: unexpected argument '%s'", argv[i]);
        }
    }
    if (!in)
        return bad_input("%s", "plot: missing RESULTS.json (oomlab run writes one)");
    char def[1100], err[512];
    if (!out) {
        size_t n = strlen(in);
        bool json = n > 5 && strcmp(in + n - 5, ".json") == 0;
        snprintf(def, sizeof def, "%.*s.png", (int)(json ? n - 5 : n), in);
        out = def;
    }
    if (plot_run(in, out, err, sizeof err) != OOM_OK)
        return bad_input("plot: %s", err);
    printf("%s\n", out);
    return 0;
}

static int cmd_parity(int argc, char **argv)
{
    device_kind kind = DEVICE_AUTO;
    const char *names[16];
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &kind);
            if (rc)
                return rc;
        } else if (argv[i][0] == '-') {
            return bad_input("parity: unknown option '%s'", argv[i]);
        } else {
            size_t w = 0;
            while (w < parity_nworkloads && strcmp(parity_workloads[w], argv[i]) != 0)
                w++;
            if (w == parity_nworkloads || n == 16)
                return bad_input("parity: unknown workload '%s' (eval_leak, eval_item, eval_nograd, train_sgd, "
                                 "train_adam, rnn_chain)",
                                 argv[i]);
            names[n++] = argv[i];
        }
    }
    if (kind == DEVICE_CUDA && (!device_cuda_built() || !device_cuda_visible()))
        return bad_input("%s", "parity: --backend cuda, but no GPU is visible or the cuda backend is not built in");
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

int main(int argc, char **argv)
{
    if (argc < 2)
        return bad_input("%s", "missing COMMAND (oomlab help lists them)");
    const char *cmd = argv[1];
    if (strcmp(cmd, "list") == 0)
        return argc == 2 ? cmd_list() : bad_input("%s", "list takes no arguments");
    if (strcmp(cmd, "describe") == 0)
        return cmd_describe(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "parity") == 0)
        return cmd_parity(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0)
        return cmd_plot(argc - 2, argv + 2);
    if (strcmp(cmd, "replay") == 0)
        return cmd_replay(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0) {
        printf("oomlab 0.1 (allocator model: PyTorch 2.11; cuda backend %s)\n",
               device_cuda_built() ? "built in" : "not built");
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return fputs(usage, stdout), 0;
    return bad_input("unknown command '%s' (oomlab help lists them)", cmd);
}
