/* bench_kernels.c - `oomlab bench kernels`: the memory-bound kernels' achieved bandwidth, against the device's.
 *
 * Each kernel of kernels.h that streams memory (elementwise, casts, reductions, the log-softmax, the Adam step, the
 * random generator) runs on float32 tensors of n elements from the backend's table (kernels_cuda on cuda,
 * kernels_ref on sim) over buffers the device gives directly (device_mem_alloc: not the caching allocator). Time
 * per call: the median of 7 runs, each enough back-to-back calls to take about 20 ms followed by the table's sync.
 * GB/s = the bytes the kernel must move at least (each tensor it reads once, each it writes once) / time. On cuda
 * beside the device's theoretical bandwidth (memory clock x bus width x 2, from the driver) and the share of it.
 * A benchmark: it asserts nothing. Defaults: 64 Mi elements (256 MiB a tensor) on cuda, 4 Mi on sim.
 */
#include "bench/bench.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "results/export.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define RUNS 7
#define MAX_TENSORS 4
#define SOFTMAX_COLS 4096 /* log_softmax and sum_rows: rows of 4096 (a classifier's logits, a Linear's columns) */

#ifndef OOM_HAVE_CUDA
oom_status bench_device_bandwidth(double *gbps, char *how, size_t how_len)
{
    (void)how, (void)how_len;
    *gbps = -1;
    return OOM_EUNSUPPORTED;
}
#endif

typedef enum kcase {
    K_COPY,
    K_FILL,
    K_ADD,
    K_RELU,
    K_RELU_BACKWARD,
    K_CAST_F16,
    K_SUM_ALL,
    K_SUM_ROWS,
    K_LOG_SOFTMAX,
    K_ADAM_STEP,
    K_RAND_NORMAL,
    K_COUNT
} kcase;

/* name, what it computes, float32 tensors of n read and written (K_CAST_F16 writes n halves) */
static const struct {
    const char *name, *what;
    int reads, writes;
} cases[K_COUNT] = {
    [K_COPY] = {"copy", "out = a", 1, 1},
    [K_FILL] = {"fill", "out = 0.5", 0, 1},
    [K_ADD] = {"add", "out = a + b", 2, 1},
    [K_RELU] = {"relu", "out = max(a, 0)", 1, 1},
    [K_RELU_BACKWARD] = {"relu_backward", "gi = go * (y > 0)", 2, 1},
    [K_CAST_F16] = {"cast_f16", "out (float16) = a", 1, 1},
    [K_SUM_ALL] = {"sum_all", "out[1] = sum(a)", 1, 0},
    [K_SUM_ROWS] = {"sum_rows", "out[4096] = a.sum(0), a of n/4096 rows", 1, 0},
    [K_LOG_SOFTMAX] = {"log_softmax", "out = log_softmax(a, 1), rows of 4096", 1, 1},
    [K_ADAM_STEP] = {"adam_step", "Adam on p, g, m, v: p, m, v written", 4, 3},
    [K_RAND_NORMAL] = {"rand_normal", "out = randn", 0, 1},
};

static double case_bytes(kcase c, int64_t n)
{
    double out_elem = c == K_CAST_F16 ? 2.0 : 4.0;
    return (double)n * (4.0 * cases[c].reads + out_elem * cases[c].writes);
}

static oom_status run_case(const kernel_ops *k, kcase c, void *const t[MAX_TENSORS], int64_t n)
{
    switch (c) {
    case K_COPY:
        return k->copy(DT_F32, t[0], t[1], n);
    case K_FILL:
        return k->fill(DT_F32, t[0], n, 0.5f);
    case K_ADD:
        return k->add(DT_F32, t[0], t[1], t[2], 1.0f, n);
    case K_RELU:
        return k->relu(DT_F32, t[0], t[1], n);
    case K_RELU_BACKWARD:
        return k->relu_backward(DT_F32, t[0], t[1], t[2], n);
    case K_CAST_F16:
        return k->cast(DT_F16, t[0], DT_F32, t[1], n);
    case K_SUM_ALL:
        return k->sum_all(DT_F32, t[0], t[1], n);
    case K_SUM_ROWS:
        return k->sum_rows(DT_F32, t[0], t[1], n / SOFTMAX_COLS, SOFTMAX_COLS);
    case K_LOG_SOFTMAX:
        return k->log_softmax(DT_F32, t[0], t[1], n / SOFTMAX_COLS, SOFTMAX_COLS);
    case K_ADAM_STEP:
        return k->adam_step(DT_F32, t[0], t[1], t[2], t[3], n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f);
    case K_RAND_NORMAL:
        return k->rand_normal(DT_F32, t[0], n, 7, 0.0f, 1.0f);
    default:
        return OOM_EINVAL;
    }
}

/* Median ms per call of case c; negative when a call fails (its status in *st). */
static double time_case(const kernel_ops *k, kcase c, void *const t[MAX_TENSORS], int64_t n, oom_status *st)
{
    double t0 = bench_now_ns();
    if ((*st = run_case(k, c, t, n)) != OOM_OK || (*st = k->sync()) != OOM_OK) /* warm-up and a first estimate */
        return -1;
    double once = (bench_now_ns() - t0) * 1e-9;
    long reps = once >= 0.02 ? 1 : (long)(0.02 / (once > 1e-7 ? once : 1e-7)) + 1;
    double runs[RUNS];
    for (int r = 0; r < RUNS; r++) {
        t0 = bench_now_ns();
        for (long i = 0; i < reps; i++)
            if ((*st = run_case(k, c, t, n)) != OOM_OK)
                return -1;
        if ((*st = k->sync()) != OOM_OK)
            return -1;
        runs[r] = (bench_now_ns() - t0) * 1e-6 / (double)reps;
    }
    return bench_median(runs, RUNS);
}

oom_status bench_kernels(const bench_kernels_options *opt, FILE *out)
{
    device *dev = NULL;
    device_options dopt = {.kind = opt->kind};
    oom_status st = device_open(&dopt, &dev);
    if (st != OOM_OK)
        return st;
    bool cuda = dev->kind == DEVICE_CUDA;
#ifdef OOM_HAVE_CUDA
    const kernel_ops *k = cuda ? &kernels_cuda : &kernels_ref;
#else
    const kernel_ops *k = &kernels_ref;
#endif
    int64_t n = opt->elements > 0 ? opt->elements : cuda ? (int64_t)64 << 20 : (int64_t)4 << 20;
    n -= n % SOFTMAX_COLS; /* whole rows for log_softmax and sum_rows */
    if (n <= 0)
        n = SOFTMAX_COLS;
    double peak = -1;
    char how[160] = "";
    if (cuda)
        bench_device_bandwidth(&peak, how, sizeof how);

    devptr p[MAX_TENSORS] = {0};
    void *t[MAX_TENSORS] = {0};
    for (int i = 0; i < MAX_TENSORS && st == OOM_OK; i++) {
        st = device_mem_alloc(dev, (size_t)n * 4, &p[i]);
        if (st == OOM_OK) {
            t[i] = cuda ? (void *)(uintptr_t)p[i] : device_host_view(dev, p[i]);
            st = device_fill(dev, p[i], 0, (size_t)n * 4);
        }
    }
    /* inputs of ones, so Adam's v and log_softmax see ordinary numbers */
    for (int i = 0; i < MAX_TENSORS && st == OOM_OK; i++)
        st = k->fill(DT_F32, t[i], n, 1.0f);
    double ms[K_COUNT];
    for (int c = 0; c < K_COUNT; c++)
        ms[c] = -1;
    for (int c = 0; c < K_COUNT && st == OOM_OK; c++)
        ms[c] = time_case(k, (kcase)c, t, n, &st);

    if (opt->json) { /* kernels/NAME/N: ms per call, with gbps and pct_of_peak */
        cJSON *json = cJSON_CreateObject();
        cJSON *ctx = gbench_context("oomlab bench kernels", dev->ops->name, dev->name, OOM_DEBUG);
        cJSON_AddStringToObject(ctx, "oomlab_benchmark", "kernels");
        cJSON_AddNumberToObject(ctx, "oomlab_elements", (double)n);
        cJSON_AddNumberToObject(ctx, "oomlab_device_gbps", peak);
        cJSON_AddItemToObject(json, "context", ctx);
        cJSON *arr = cJSON_AddArrayToObject(json, "benchmarks");
        for (int c = 0; c < K_COUNT; c++) {
            char name[96];
            snprintf(name, sizeof name, "kernels/%s/%lld", cases[c].name, (long long)n);
            cJSON *b = gbench_add(arr, name, ms[c], -1, "ms");
            if (!b)
                continue;
            double gbps = ms[c] > 0 ? case_bytes((kcase)c, n) / (ms[c] * 1e-3) * 1e-9 : -1;
            cJSON_AddNumberToObject(b, "bytes", case_bytes((kcase)c, n));
            cJSON_AddNumberToObject(b, "gbps", gbps);
            cJSON_AddNumberToObject(b, "pct_of_peak", gbps > 0 && peak > 0 ? 100.0 * gbps / peak : -1);
        }
        bench_print_json(json, out);
    } else {
        fprintf(out, "oomlab bench kernels: backend %s (%s), OOM_DEBUG=%d%s\n", dev->ops->name, dev->name, OOM_DEBUG,
                OOM_DEBUG ? " (checked build: do not publish these figures; use make bench)" : "");
        fprintf(out, "float32 tensors of %lld elements (%.0f MiB each); median of %d runs\n", (long long)n,
                (double)n * 4 / (1 << 20), RUNS);
        if (peak > 0)
            fprintf(out, "device memory bandwidth: %.0f GB/s (%s)\n", peak, how);
        fprintf(out, "%-14s %-42s %10s %10s %9s %9s\n", "kernel", "computes", "MiB moved", "ms", "GB/s",
                "% of dev");
        for (int c = 0; c < K_COUNT; c++) {
            double gbps = ms[c] > 0 ? case_bytes((kcase)c, n) / (ms[c] * 1e-3) * 1e-9 : -1;
            fprintf(out, "%-14s %-42s %10.0f %10.4f %9.1f", cases[c].name, cases[c].what,
                    case_bytes((kcase)c, n) / (1 << 20), ms[c], gbps);
            if (gbps > 0 && peak > 0)
                fprintf(out, " %8.1f%%\n", 100.0 * gbps / peak);
            else
                fprintf(out, " %9s\n", "-");
        }
        if (st != OOM_OK)
            fprintf(out, "stopped: %s %s\n", oom_status_str(st), oom_error_msg());
    }
    for (int i = 0; i < MAX_TENSORS; i++)
        if (p[i])
            device_mem_free(dev, p[i], (size_t)n * 4);
    device_close(dev);
    return st;
}
