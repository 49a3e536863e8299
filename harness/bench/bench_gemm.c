/* bench_gemm.c - `oomlab bench gemm`: GEMM throughput. A benchmark, not a test: it prints figures and asserts
 * nothing beyond reporting the GPU result's error against cuBLAS.
 *
 * CPU part (here, every backend): ms per f32 k_gemm_ref call at the CI scale (batch 64, width 256: Linear's
 * forward NT, its backward NN and TN, and 64x256x256 TN) and one 256x1024x1024 NT call; each figure the median
 * of 11 runs of enough calls to take about 20 ms. GPU part (bench_gemm_cuda.cu, cuda backend only):
 * k_gemm_cuda against cuBLAS.
 * The build's OOM_DEBUG level is printed: only level 0 figures are worth publishing (`make bench`).
 */
#include "bench/bench.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "results/export.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define CPU_RUNS 11
#define GPU_MAX_ROWS 16

#ifndef OOM_HAVE_CUDA
oom_status bench_gemm_gpu(bench_gemm_row *rows, int max_rows, int *n_rows, char *cublas_info, size_t info_len)
{
    (void)rows, (void)max_rows, (void)cublas_info, (void)info_len;
    *n_rows = 0;
    return OOM_EUNSUPPORTED;
}
#endif

typedef struct cpu_shape {
    bool ta, tb;
    long m, n, k;
} cpu_shape;

static const cpu_shape cpu_shapes[] = {
    {false, true, 64, 256, 256},    /* Linear forward: x W^T */
    {false, false, 64, 256, 256},   /* dX = g W */
    {true, false, 64, 256, 256},    /* the same size, A transposed */
    {true, false, 256, 256, 64},    /* dW = g^T x */
    {false, true, 256, 1024, 1024}, /* a wider layer */
};
#define N_CPU_SHAPES (sizeof cpu_shapes / sizeof cpu_shapes[0])

static const char *layout_name(bool ta, bool tb)
{
    static const char *const names[4] = {"NN", "NT", "TN", "TT"};
    return names[(ta ? 2 : 0) + (tb ? 1 : 0)];
}

/* Median ms per f32 k_gemm_ref call for one shape (random operands in [-1, 1)), and the median CPU ms into *cpu;
 * negative on failure. */
static double time_ref(const cpu_shape *s, double *cpu)
{
    size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    double ms = -1;
    if (!a || !b || !c)
        goto out;
    for (size_t i = 0; i < na; i++)
        a[i] = -1.0f + 2.0f * (float)(oom_rng_hash(1, i) >> 40) * 0x1p-24f;
    for (size_t i = 0; i < nb; i++)
        b[i] = -1.0f + 2.0f * (float)(oom_rng_hash(2, i) >> 40) * 0x1p-24f;
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
#define CALL() k_gemm_ref(DT_F32, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n)
    double t0 = (bench_now_ns() * 1e-9);
    if (CALL() != OOM_OK) /* warm-up, and a first estimate of the cost */
        goto out;
    double once = (bench_now_ns() * 1e-9) - t0;
    long reps = once > 0.02 ? 1 : (long)(0.02 / (once > 1e-7 ? once : 1e-7)) + 1;
    double runs[CPU_RUNS], cpus[CPU_RUNS];
    for (int r = 0; r < CPU_RUNS; r++) {
        t0 = (bench_now_ns() * 1e-9);
        double c0 = bench_cpu_ns();
        for (long i = 0; i < reps; i++)
            CALL();
        runs[r] = ((bench_now_ns() * 1e-9) - t0) * 1e3 / (double)reps;
        cpus[r] = (bench_cpu_ns() - c0) * 1e-6 / (double)reps;
    }
#undef CALL
    ms = bench_median(runs, CPU_RUNS);
    *cpu = bench_median(cpus, CPU_RUNS);
out:
    free(a);
    free(b);
    free(c);
    return ms;
}

static double flops(long m, long n, long k) { return 2.0 * (double)m * (double)n * (double)k; }

oom_status bench_gemm(const bench_gemm_options *opt, FILE *out)
{
    device *dev = NULL;
    device_options dopt = {.kind = opt->kind, .sim_dry_run = true};
    oom_status st = device_open(&dopt, &dev);
    if (st != OOM_OK)
        return st;
    bool cuda = dev->kind == DEVICE_CUDA;

    double cpu_ms[N_CPU_SHAPES], cpu_cpu_ms[N_CPU_SHAPES];
    for (size_t i = 0; i < N_CPU_SHAPES; i++)
        cpu_ms[i] = time_ref(&cpu_shapes[i], &cpu_cpu_ms[i]);

    bench_gemm_row rows[GPU_MAX_ROWS];
    int n_rows = 0;
    char cublas[256] = "";
    oom_status gst = OOM_OK;
    if (cuda)
        gst = bench_gemm_gpu(rows, GPU_MAX_ROWS, &n_rows, cublas, sizeof cublas);

    if (opt->json) { /* gemm_ref/f32/NT/64x256x256; gemm_cuda/... and gemm_cublas/... from TFLOP/s: ms per call */
        cJSON *json = cJSON_CreateObject();
        cJSON *ctx = gbench_context("oomlab bench gemm", dev->ops->name, dev->name, OOM_DEBUG);
        cJSON_AddStringToObject(ctx, "oomlab_benchmark", "gemm");
        if (cuda)
            cJSON_AddStringToObject(ctx, "oomlab_cublas", cublas);
        cJSON_AddItemToObject(json, "context", ctx);
        cJSON *arr = cJSON_AddArrayToObject(json, "benchmarks");
        char name[128];
        for (size_t i = 0; i < N_CPU_SHAPES; i++) {
            const cpu_shape *s = &cpu_shapes[i];
            snprintf(name, sizeof name, "gemm_ref/%s/%s/%ldx%ldx%ld", dtype_str(DT_F32), layout_name(s->ta, s->tb),
                     s->m, s->n, s->k);
            cJSON *b = gbench_add(arr, name, cpu_ms[i], cpu_ms[i] < 0 ? -1 : cpu_cpu_ms[i], "ms");
            if (b)
                cJSON_AddNumberToObject(b, "gflops",
                                        cpu_ms[i] > 0 ? flops(s->m, s->n, s->k) / cpu_ms[i] * 1e-6 : -1);
        }
        for (int i = 0; cuda && i < n_rows; i++) {
            const bench_gemm_row *r = &rows[i];
            double f = flops(r->m, r->n, r->k);
            const char *who[2] = {"gemm_cuda", "gemm_cublas"};
            double tf[2] = {r->ours_tflops, r->cublas_tflops};
            for (int w = 0; w < 2; w++) {
                snprintf(name, sizeof name, "%s/%s/%s/%ldx%ldx%ld", who[w], dtype_str(r->dt), layout_name(r->ta, r->tb),
                         r->m, r->n, r->k);
                cJSON *b = gbench_add(arr, name, tf[w] > 0 ? f / (tf[w] * 1e12) * 1e3 : -1, -1, "ms");
                if (!b)
                    continue;
                cJSON_AddNumberToObject(b, "tflops", tf[w]);
                if (w == 0) {
                    cJSON_AddStringToObject(b, "kernel", r->kernel);
                    cJSON_AddNumberToObject(b, "mma_sync_tflops", r->portable_tflops);
                    cJSON_AddNumberToObject(b, "pct_of_cublas",
                                            r->ours_tflops > 0 && r->cublas_tflops > 0
                                                ? 100.0 * r->ours_tflops / r->cublas_tflops
                                                : -1);
                    cJSON_AddNumberToObject(b, "rel_err", r->rel_err);
                }
            }
        }
        bench_print_json(json, out);
    } else {
        fprintf(out, "oomlab bench gemm: backend %s (%s), OOM_DEBUG=%d%s\n", dev->ops->name, dev->name, OOM_DEBUG,
                OOM_DEBUG ? " (checked build: do not publish these figures; use make bench)" : "");
        fprintf(out, "\nk_gemm_ref (CPU, one thread): ms per call, median of %d runs\n", CPU_RUNS);
        fprintf(out, "%-9s %-6s %6s %6s %6s %10s %9s\n", "dtype", "layout", "m", "n", "k", "ms", "GFLOP/s");
        for (size_t i = 0; i < N_CPU_SHAPES; i++) {
            const cpu_shape *s = &cpu_shapes[i];
            fprintf(out, "%-9s %-6s %6ld %6ld %6ld %10.3f %9.1f\n", dtype_str(DT_F32), layout_name(s->ta, s->tb), s->m,
                    s->n, s->k, cpu_ms[i], cpu_ms[i] > 0 ? flops(s->m, s->n, s->k) / cpu_ms[i] * 1e-6 : -1.0);
        }
        if (cuda) {
            fprintf(out, "\nk_gemm_cuda vs cuBLAS (%s): TFLOP/s, median of timed calls (CUDA events)\n", cublas);
            fprintf(out, "%-9s %-6s %6s %6s %6s %-13s %8s %8s %12s %9s %9s\n", "dtype", "layout", "m", "n", "k",
                    "kernel", "ours", "cuBLAS", "% of cuBLAS", "rel.err", "mma.sync");
            for (int i = 0; i < n_rows; i++) {
                const bench_gemm_row *r = &rows[i];
                fprintf(out, "%-9s %-6s %6ld %6ld %6ld %-13s %8.2f", dtype_str(r->dt), layout_name(r->ta, r->tb), r->m,
                        r->n, r->k, r->kernel, r->ours_tflops);
                if (r->cublas_tflops > 0)
                    fprintf(out, " %8.2f %11.1f%%", r->cublas_tflops, 100.0 * r->ours_tflops / r->cublas_tflops);
                else
                    fprintf(out, " %8s %12s", "-", "-");
                if (r->rel_err >= 0)
                    fprintf(out, " %9.2e", r->rel_err);
                else
                    fprintf(out, " %9s", "-");
                if (r->portable_tflops > 0)
                    fprintf(out, " %9.2f\n", r->portable_tflops);
                else
                    fprintf(out, " %9s\n", "-");
            }
            if (gst != OOM_OK)
                fprintf(out, "GPU part stopped: %s %s\n", oom_status_str(gst), oom_error_msg());
        }
    }
    device_close(dev);
    for (size_t i = 0; i < N_CPU_SHAPES; i++)
        if (cpu_ms[i] < 0)
            return OOM_ENOMEM_HOST;
    return gst;
}
