/* bench.c - `oomlab bench alloc`. A benchmark, not a test: it prints figures and asserts nothing.
 *
 * For each size and outstanding count k: one warm-up round creates the segments, then timed rounds of
 * k mallocs followed by k frees, all cache hits. ns per pair = round time / k, median of 7 rounds of
 * iters/k repetitions. The build's OOM_DEBUG level is printed: only level 0 figures are worth publishing
 * (`make bench` builds that way).
 */
#include "bench/bench.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/cachealloc.h"
#include "results/export.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define BENCH_RUNS 7
#define BENCH_MAX_K 64

#ifndef OOM_HAVE_CUDA
oom_status device_time_raw_pairs(device *dev, size_t bytes, int outstanding, long pairs, bool async, double *ns)
{
    (void)dev, (void)bytes, (void)outstanding, (void)pairs, (void)async, (void)ns;
    return OOM_EUNSUPPORTED;
}
#endif

double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double bench_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

void bench_print_json(cJSON *j, FILE *out)
{
    char *s = cJSON_Print(j);
    if (s)
        fprintf(out, "%s\n", s);
    free(s);
    cJSON_Delete(j);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Median ns per cachealloc malloc+free pair (and the median CPU ns into *cpu); NAN-free: returns a negative value
 * on an allocation failure. */
static double time_cachealloc(cachealloc *ca, size_t bytes, int k, long iters, double *cpu)
{
    devptr p[BENCH_MAX_K];
    long reps = iters / k > 0 ? iters / k : 1;
    double runs[BENCH_RUNS], cpus[BENCH_RUNS];
    for (int i = 0; i < k; i++) /* warm-up: create the segments */
        if (cachealloc_malloc(ca, bytes, &p[i]) != OOM_OK)
            return -1;
    for (int i = 0; i < k; i++)
        cachealloc_free(ca, p[i]);
    for (int r = 0; r < BENCH_RUNS; r++) {
        double t0 = bench_now_ns(), c0 = bench_cpu_ns();
        for (long rep = 0; rep < reps; rep++) {
            for (int i = 0; i < k; i++)
                if (cachealloc_malloc(ca, bytes, &p[i]) != OOM_OK)
                    return -1;
            for (int i = 0; i < k; i++)
                cachealloc_free(ca, p[i]);
        }
        runs[r] = (bench_now_ns() - t0) / ((double)reps * k);
        cpus[r] = (bench_cpu_ns() - c0) / ((double)reps * k);
    }
    *cpu = bench_median(cpus, BENCH_RUNS);
    return bench_median(runs, BENCH_RUNS);
}

oom_status bench_alloc(const bench_options *opt, FILE *out)
{
    static const size_t sizes[] = {1 << 10, 1 << 20, 20 << 20, 256 << 20};
    static const char *const size_names[] = {"1 KiB", "1 MiB", "20 MiB", "256 MiB"};
    static const int ks[] = {1, 64};
    long iters = opt->iters > 0 ? opt->iters : 200000;

    device *dev = NULL;
    device_options dopt = {.kind = opt->kind, .sim_dry_run = true};
    oom_status st = device_open(&dopt, &dev);
    if (st != OOM_OK)
        return st;
    bool cuda = dev->kind == DEVICE_CUDA;
    cJSON *json = opt->json ? cJSON_CreateObject() : NULL;
    cJSON *rows = NULL;
    if (json) {
        cJSON *ctx = gbench_context("oomlab bench alloc", dev->ops->name, dev->name, OOM_DEBUG);
        cJSON_AddStringToObject(ctx, "oomlab_benchmark", "alloc");
        cJSON_AddNumberToObject(ctx, "oomlab_pairs_per_run", (double)iters);
        cJSON_AddItemToObject(json, "context", ctx);
        rows = cJSON_AddArrayToObject(json, "benchmarks");
    } else {
        fprintf(out, "oomlab bench alloc: backend %s (%s), OOM_DEBUG=%d%s\n", dev->ops->name, dev->name, OOM_DEBUG,
                OOM_DEBUG ? " (checked build: do not publish these figures; use make bench)" : "");
        fprintf(out, "ns per malloc+free pair, median of %d runs%s\n", BENCH_RUNS,
                cuda ? "" : " (sim runs dry: the allocator's own cost)");
        fprintf(out, "%-8s %5s %12s %14s %16s\n", "size", "live", "cachealloc", cuda ? "cudaMalloc" : "",
                cuda ? "cudaMallocAsync" : "");
    }
    st = OOM_OK;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && st == OOM_OK; si++) {
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            int k = ks[ki];
            cachealloc_options copt = {0};
            alloc_conf_default(&copt.conf);
            cachealloc *ca = NULL;
            if (cachealloc_new(dev, &copt, &ca) != OOM_OK) {
                st = OOM_ENOMEM_HOST;
                break;
            }
            /* big blocks: fewer pairs, the cost per pair does not depend on size on a hit */
            double cpu = -1, ns = time_cachealloc(ca, sizes[si], k, iters, &cpu);
            cachealloc_delete(ca);
            double ns_raw = -1, ns_async = -1;
            if (cuda) {
                long raw_pairs = sizes[si] >= (20u << 20) ? 64 : 512;
                if (k == 64)
                    raw_pairs = 128;
                if (device_time_raw_pairs(dev, sizes[si], k, raw_pairs, false, &ns_raw) != OOM_OK)
                    ns_raw = -1;
                if (device_time_raw_pairs(dev, sizes[si], k, iters / 20 > 0 ? iters / 20 : 1, true, &ns_async) !=
                    OOM_OK)
                    ns_async = -1;
            }
            if (json) { /* cachealloc/1KiB/live:1, cudaMalloc/..., cudaMallocAsync/...: ns per pair */
                static const char *const tags[] = {"1KiB", "1MiB", "20MiB", "256MiB"};
                const char *what[3] = {"cachealloc", "cudaMalloc", "cudaMallocAsync"};
                double wall[3] = {ns, ns_raw, ns_async};
                for (int w = 0; w < (cuda ? 3 : 1); w++) {
                    char name[96];
                    snprintf(name, sizeof name, "%s/%s/live:%d", what[w], tags[si], k);
                    cJSON *b = gbench_add(rows, name, wall[w], w == 0 ? cpu : -1, "ns");
                    if (b) {
                        cJSON_AddNumberToObject(b, "bytes", (double)sizes[si]);
                        cJSON_AddNumberToObject(b, "outstanding", k);
                    }
                }
            } else {
                fprintf(out, "%-8s %5d %12.1f", size_names[si], k, ns);
                if (cuda)
                    fprintf(out, " %14.1f %16.1f", ns_raw, ns_async);
                fputc('\n', out);
            }
            if (ns < 0)
                st = OOM_ENOMEM_DEVICE;
        }
    }
    if (json) {
        bench_print_json(json, out);
    }
    device_close(dev);
    return st;
}
