/* bench.c - the `oomlab bench` commands: their options, then the benchmark (bench/bench.h). */
#include "cli/command.h"

#include <stdint.h>
#include <string.h>

#include "bench/bench.h"
#include "core/fileio.h"
#include "core/status.h"

/* The options every benchmark takes, --json and --backend, at argv[*i]: true when it was one of them (*rc: 0, or
 * the exit status of a bad value, its line printed). */
bool cli_bench_common_option(int argc, char **argv, int *i, bool *json, device_kind *kind, int *rc)
{
    *rc = 0;
    if (strcmp(argv[*i], "--json") == 0) {
        *json = true;
        return true;
    }
    if (strcmp(argv[*i], "--backend") == 0) {
        *rc = cli_take_backend(argc, argv, i, kind);
        return true;
    }
    return false;
}

/* A benchmark's exit status: 0, 1 when it failed, 2 when the backend asked for is not there. */
int cli_bench_exit(oom_status st)
{
    if (st == OOM_ENODEV)
        return cli_bad_arg("%s", "bench: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    return st == OOM_OK ? 0 : 1;
}

int cli_bench_alloc(int argc, char **argv)
{
    bench_options opt = {.kind = DEVICE_AUTO, .iters = 0, .runs = BENCH_RUNS, .seed = 1};
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        long v = 0;
        if (cli_bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
        } else if (strcmp(argv[i], "--iters") == 0) {
            rc = cli_take_count(argc, argv, &i, 1, 100000000, "a count", &v);
            opt.iters = v;
        } else if (strcmp(argv[i], "--runs") == 0) {
            rc = cli_take_count(argc, argv, &i, 1, BENCH_MAX_RUNS, "a count", &v);
            opt.runs = (int)v;
        } else if (strcmp(argv[i], "--seed") == 0) {
            rc = cli_take_count(argc, argv, &i, 1, 2147483647, "a seed", &v);
            opt.seed = (uint64_t)v;
        } else if (strcmp(argv[i], "--workload-out") == 0) {
            if (i + 1 >= argc)
                return cli_bad_arg("%s", "bench alloc: --workload-out needs a file name");
            opt.workload_out = argv[++i];
            if (fileio_check_target(opt.workload_out) != OOM_OK)
                return cli_bad_input("bench alloc: --workload-out: %s", oom_error_msg());
        } else {
            return cli_bad_arg("bench: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return cli_bench_exit(bench_alloc(&opt, stdout));
}

int cli_bench_gemm(int argc, char **argv)
{
    bench_gemm_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        int rc;
        if (cli_bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
            if (rc)
                return rc;
        } else {
            return cli_bad_arg("bench gemm: unknown option '%s'", argv[i]);
        }
    }
    return cli_bench_exit(bench_gemm(&opt, stdout));
}

int cli_bench_kernels(int argc, char **argv)
{
    bench_kernels_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        long v = 0;
        if (cli_bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
        } else if (strcmp(argv[i], "--elements") == 0) {
            rc = cli_take_count(argc, argv, &i, 4096, (long)1 << 31, "a count", &v);
            opt.elements = v;
        } else {
            return cli_bad_arg("bench kernels: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return cli_bench_exit(bench_kernels(&opt, stdout));
}

int cli_bench_step(int argc, char **argv)
{
    bench_step_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        if (cli_bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
        } else if (strcmp(argv[i], "--width") == 0 || strcmp(argv[i], "--batch") == 0) {
            long *v = strcmp(argv[i], "--width") == 0 ? &opt.width : &opt.batch;
            rc = cli_take_count(argc, argv, &i, 1, 65536, "a size", v);
        } else {
            return cli_bad_arg("bench step: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return cli_bench_exit(bench_step(&opt, stdout));
}

int cli_bench_replay(int argc, char **argv)
{
    bench_replay_options opt = {.events = 1000000, .seed = 1};
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        long v = 0;
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = true;
        } else if (strcmp(argv[i], "--events") == 0) {
            rc = cli_take_count(argc, argv, &i, 1000, 20000000, "a count", &v);
            opt.events = (size_t)v;
        } else if (strcmp(argv[i], "--seed") == 0) {
            rc = cli_take_count(argc, argv, &i, 1, 2147483647, "a seed", &v);
            opt.seed = (uint64_t)v;
        } else {
            return cli_bad_arg("bench replay: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return cli_bench_exit(bench_replay(&opt, stdout));
}
