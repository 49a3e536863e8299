/* bench_gemm.c - `oomlab bench gemm`: GEMM throughput. A benchmark, not a test: it prints figures and asserts
 * nothing beyond reporting the GPU result's error against cuBLAS.
 *
 * CPU part (here, every backend): ms per f32 k_gemm_ref call at the CI scale (batch 64, width 256: Linear's
 * forward NT, its backward NN and TN, and 64x256x256 TN) and one 256x1024x1024 NT call; each figure the median
 * of 11 runs of enough calls to take about 20 ms. GPU part (bench_gemm_cuda.cu, cuda backend only):
 * k_gemm_cuda against cuBLAS.
 * The build's OOM_DEBUG level is printed: only level 0 figures are worth publishing (`make bench`).
 */
#include "cli/bench.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

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

/* Median ms per f32 k_gemm_ref call for one shape (random operands in [-1, 1)); negative on failure. */
static double time_ref(const cpu_shape *s)
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
    double runs[CPU_RUNS];
    for (int r = 0; r < CPU_RUNS; r++) {
        t0 = (bench_now_ns() * 1e-9);
        for (long i = 0; i < reps; i++)
            CALL();
        runs[r] = ((bench_now_ns() * 1e-9) - t0) * 1e3 / (double)reps;
    }
#undef CALL
    ms = bench_median(runs, CPU_RUNS);
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

    double cpu_ms[N_CPU_SHAPES];
    for (size_t i = 0; i < N_CPU_SHAPES; i++)
        cpu_ms[i] = time_ref(&cpu_shapes[i]);

    bench_gemm_row rows[GPU_MAX_ROWS];
    int n_rows = 0;
    char cublas[256] = "";
    oom_status gst = OOM_OK;
    if (cuda)
        gst = bench_gemm_gpu(rows, GPU_MAX_ROWS, &n_rows, cublas, sizeof cublas);

    if (opt->json) {
        cJSON *json = cJSON_CreateObject();
        cJSON_AddStringToObject(json, "benchmark", "gemm");
        cJSON_AddStringToObject(json, "backend", dev->ops->name);
        cJSON_AddStringToObject(json, "device", dev->name);
        cJSON_AddNumberToObject(json, "debug_level", OOM_DEBUG);
        cJSON *cpu = cJSON_AddArrayToObject(json, "cpu_ref");
        for (size_t i = 0; i < N_CPU_SHAPES; i++) {
            const cpu_shape *s = &cpu_shapes[i];
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "dtype", dtype_str(DT_F32));
            cJSON_AddStringToObject(row, "layout", layout_name(s->ta, s->tb));
            cJSON_AddNumberToObject(row, "m", (double)s->m);
            cJSON_AddNumberToObject(row, "n", (double)s->n);
            cJSON_AddNumberToObject(row, "k", (double)s->k);
            cJSON_AddNumberToObject(row, "ms_per_call", cpu_ms[i]);
            cJSON_AddNumberToObject(row, "gflops", cpu_ms[i] > 0 ? flops(s->m, s->n, s->k) / cpu_ms[i] * 1e-6 : -1);
            cJSON_AddItemToArray(cpu, row);
        }
        if (cuda) {
            cJSON_AddStringToObject(json, "cublas", cublas);
            cJSON *gpu = cJSON_AddArrayToObject(json, "gpu");
            for (int i = 0; i < n_rows; i++) {
                const bench_gemm_row *r = &rows[i];
                cJSON *row = cJSON_CreateObject();
                cJSON_AddStringToObject(row, "dtype", dtype_str(r->dt));
                cJSON_AddStringToObject(row, "layout", layout_name(r->ta, r->tb));
                cJSON_AddNumberToObject(row, "m", (double)r->m);
                cJSON_AddNumberToObject(row, "n", (double)r->n);
                cJSON_AddNumberToObject(row, "k", (double)r->k);
                cJSON_AddNumberToObject(row, "ours_tflops", r->ours_tflops);
                cJSON_AddNumberToObject(row, "cublas_tflops", r->cublas_tflops);
                cJSON_AddNumberToObject(row, "pct_of_cublas", r->ours_tflops > 0 && r->cublas_tflops > 0
                                                                  ? 100.0 * r->ours_tflops / r->cublas_tflops
                                                                  : -1);
                cJSON_AddNumberToObject(row, "rel_err", r->rel_err);
                cJSON_AddItemToArray(gpu, row);
            }
        }
        char *s = cJSON_Print(json);
        if (s)
            fprintf(out, "%s\n", s);
        free(s);
        cJSON_Delete(json);
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
            fprintf(out, "%-9s %-6s %6s %6s %6s %8s %8s %12s %9s\n", "dtype", "layout", "m", "n", "k", "ours",
                    "cuBLAS", "% of cuBLAS", "rel.err");
            for (int i = 0; i < n_rows; i++) {
                const bench_gemm_row *r = &rows[i];
                fprintf(out, "%-9s %-6s %6ld %6ld %6ld %8.2f", dtype_str(r->dt), layout_name(r->ta, r->tb), r->m, r->n,
                        r->k, r->ours_tflops);
                if (r->cublas_tflops > 0)
                    fprintf(out, " %8.2f %11.1f%%", r->cublas_tflops, 100.0 * r->ours_tflops / r->cublas_tflops);
                else
                    fprintf(out, " %8s %12s", "-", "-");
                if (r->rel_err >= 0)
                    fprintf(out, " %9.2e\n", r->rel_err);
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
