/* main.c - the oomlab command line.
 *
 *   oomlab replay FILE [--alloc-conf S] [--budget SIZE] [--snapshot OUT] [--json]
 *   oomlab bench alloc [--backend auto|cuda|sim] [--iters N] [--json]
 *   oomlab bench gemm [--backend auto|cuda|sim] [--json]
 *   oomlab version | help
 *
 * Exit status: 0 success (replay: the model agrees with PyTorch's segment actions), 1 a result that fails
 * (replay: it diverges), 2 bad input (one error line on stderr, nothing written).
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocconf.h"
#include "bench.h"
#include "device.h"
#include "replay.h"
#include "units.h"

#define EXIT_BAD_INPUT 2

static const char usage[] =
    "usage: oomlab COMMAND [ARGS]\n"
    "  replay FILE [--alloc-conf S] [--budget SIZE] [--snapshot OUT] [--json]\n"
    "      replay a PyTorch memory snapshot (JSON from scripts/snapshot2json.py) through the allocator model;\n"
    "      --snapshot writes the model's snapshot after it (OUT.pickle or .pkl: for pytorch.org/memory_viz)\n"
    "  bench alloc [--backend auto|cuda|sim] [--iters N] [--json]\n"
    "      ns per malloc+free pair on a cache hit (cuda: also cudaMalloc and cudaMallocAsync)\n"
    "  bench gemm [--backend auto|cuda|sim] [--json]\n"
    "      ms per call of the CPU reference GEMM; cuda: TFLOP/s of oomlab's GEMM against cuBLAS\n"
    "  version | help\n";

static int bad_input(const char *fmt, const char *arg)
{
    fprintf(stderr, "oomlab: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return EXIT_BAD_INPUT;
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
        print_json(o);
    } else {
        const memstats *m = &res->stats;
        printf("replay: %s (%zu events)\n", file, res->events);
        printf("config: %s%s\n", conftext, opt.alloc_conf ? "" : " (from the trace)");
        if (res->budget_bytes)
            printf("budget: %zu bytes\n", res->budget_bytes);
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
            if (++i >= argc)
                return bad_input("%s needs a value", "--backend");
            if (device_kind_parse(argv[i], &opt.kind) != OOM_OK)
                return bad_input("--backend: '%s' is not auto, cuda or sim", argv[i]);
        } else {
            return bad_input("bench gemm: unknown option '%s'", argv[i]);
        }
    }
    oom_status st = bench_gemm(&opt, stdout);
    if (st == OOM_ENODEV)
        return bad_input("%s", "bench: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    return st == OOM_OK ? 0 : 1;
}

static int cmd_bench(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "gemm") == 0)
        return cmd_bench_gemm(argc - 1, argv + 1);
    if (argc < 1 || strcmp(argv[0], "alloc") != 0)
        return bad_input("%s", "bench: the benchmark to run is 'alloc' or 'gemm'");
    bench_options opt = {.kind = DEVICE_AUTO, .iters = 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = true;
        } else if (strcmp(argv[i], "--backend") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--backend");
            if (device_kind_parse(argv[i], &opt.kind) != OOM_OK)
                return bad_input("--backend: '%s' is not auto, cuda or sim", argv[i]);
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

int main(int argc, char **argv)
{
    if (argc < 2)
        return fputs(usage, stderr), EXIT_BAD_INPUT;
    const char *cmd = argv[1];
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
    fprintf(stderr, "oomlab: unknown command '%s'\n%s", cmd, usage);
    return EXIT_BAD_INPUT;
}
