/* bench.c - `oomlab bench alloc`. A benchmark, not a test: it prints figures and asserts nothing.
 *
 * For each size and outstanding count k: one warm-up round creates the segments, then timed rounds of
 * k mallocs followed by k frees, all cache hits. ns per pair = round time / k, median of --runs (7) runs of
 * iters/k repetitions. Then the mixed workload: a seeded sequence of mallocs and frees of many sizes with up to
 * BENCH_MIX_LIVE outstanding (bench_workload_make), replayed once to warm up and then timed as whole replays.
 * `--workload-out FILE` writes that sequence as text, so that another allocator (scripts/twins/alloc_bench.py:
 * PyTorch's) replays exactly the same one; the file's lines hash (FNV-1a) to the value the JSON reports.
 * The build's OOM_DEBUG level is printed: only level 0 figures are worth publishing (`make bench` builds that way).
 */
#include "bench/bench.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/cachealloc.h"
#include "core/fileio.h"
#include "core/strbuf.h"
#include "results/export.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define BENCH_MAX_K 64
#define BENCH_MIX_PAIRS 4096 /* mallocs (each with its free) in the mixed workload */
#define BENCH_MIX_LIVE 128   /* the most outstanding at once */

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

/* The value below which 90% of v's n figures lie (nearest rank; v is sorted in place). */
static double bench_p90(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int rank = (9 * n + 9) / 10; /* ceil(0.9 n), 1-based */
    return v[rank > 0 ? rank - 1 : 0];
}

static uint64_t mix_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A size of the mixed workload: 70% small (512 B to 1 MiB), 30% large (1 MiB to 64 MiB), log-uniform in
 * each: an exponent, then a uniform size below the next power of two. Integers only. */
static size_t mix_size(uint64_t *s)
{
    bool small = mix_next(s) % 10 < 7;
    unsigned e = small ? 9 + (unsigned)(mix_next(s) % 11) : 20 + (unsigned)(mix_next(s) % 6);
    size_t lo = (size_t)1 << e;
    return lo + (size_t)(mix_next(s) % lo);
}

oom_status bench_workload_make(uint64_t seed, bench_op **ops_out, size_t *n_out)
{
    size_t cap = 2 * (size_t)BENCH_MIX_PAIRS, n = 0;
    bench_op *ops = malloc(cap * sizeof *ops);
    if (!ops)
        return OOM_ENOMEM_HOST;
    uint32_t live[BENCH_MIX_LIVE], spare[BENCH_MIX_LIVE];
    size_t nlive = 0, nspare = BENCH_MIX_LIVE, pairs = 0;
    for (uint32_t i = 0; i < BENCH_MIX_LIVE; i++)
        spare[i] = BENCH_MIX_LIVE - 1 - i;
    uint64_t s = seed;
    while (pairs < BENCH_MIX_PAIRS || nlive > 0) {
        /* malloc 55% of the time while there is room (the live set climbs to its bound and hovers there), and
         * once every malloc is made, free what is left in random order */
        bool alloc = pairs < BENCH_MIX_PAIRS && nspare > 0 && (nlive == 0 || mix_next(&s) % 100 < 55);
        if (alloc) {
            uint32_t slot = spare[--nspare];
            live[nlive++] = slot;
            ops[n++] = (bench_op){.slot = slot, .bytes = mix_size(&s)};
            pairs++;
        } else {
            size_t at = (size_t)(mix_next(&s) % nlive);
            uint32_t slot = live[at];
            live[at] = live[--nlive];
            spare[nspare++] = slot;
            ops[n++] = (bench_op){.slot = slot, .bytes = 0};
        }
    }
    *ops_out = ops;
    *n_out = n;
    return OOM_OK;
}

/* The workload as text: a header line, then "a SLOT BYTES" or "f SLOT" a line; *hash gets FNV-1a 64 of every
 * line after the header (their bytes, newlines included), what the PyTorch side computes over the lines it read. */
static char *workload_text(const bench_op *ops, size_t n, uint64_t seed, size_t *len, uint64_t *hash)
{
    strbuf body = {0}, all = {0};
    for (size_t i = 0; i < n; i++) {
        if (ops[i].bytes)
            strbuf_printf(&body, "a %u %zu\n", ops[i].slot, ops[i].bytes);
        else
            strbuf_printf(&body, "f %u\n", ops[i].slot);
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < body.n; i++)
        h = (h ^ (unsigned char)body.s[i]) * 0x100000001b3ULL;
    *hash = h;
    strbuf_printf(&all, "oomlab.alloc_workload/1 seed %llu ops %zu slots %d fnv1a %016llx\n%s",
                  (unsigned long long)seed, n, BENCH_MIX_LIVE, (unsigned long long)h, body.s ? body.s : "");
    bool oom = body.oom || all.oom;
    free(body.s);
    if (oom) {
        free(all.s);
        return NULL;
    }
    *len = all.n;
    return all.s;
}

/* One replay of the workload; false on an allocation failure (everything it made is freed). */
static bool replay_workload(cachealloc *ca, const bench_op *ops, size_t n, devptr *slots)
{
    for (size_t i = 0; i < n; i++) {
        if (ops[i].bytes == 0) {
            cachealloc_free(ca, slots[ops[i].slot]);
            slots[ops[i].slot] = 0;
        } else if (cachealloc_malloc(ca, ops[i].bytes, &slots[ops[i].slot]) != OOM_OK) {
            for (size_t j = 0; j < BENCH_MIX_LIVE; j++)
                if (slots[j])
                    cachealloc_free(ca, slots[j]);
            return false;
        }
    }
    return true;
}

/* The figures of one cell: ns per pair, wall median and p90 over the runs, CPU median; negative on an
 * allocation failure. */
typedef struct cell_times {
    double median, p90, cpu;
} cell_times;

static void cell_of(double *runs, double *cpus, int nruns, cell_times *t)
{
    t->cpu = bench_median(cpus, nruns);
    t->median = bench_median(runs, nruns);
    t->p90 = bench_p90(runs, nruns);
}

/* ns per cachealloc malloc+free pair: k outstanding of one size (ops == NULL), or the mixed workload ops. */
static void time_cachealloc(cachealloc *ca, size_t bytes, int k, const bench_op *ops, size_t nops, long iters,
                            int nruns, cell_times *t)
{
    devptr p[BENCH_MIX_LIVE] = {0};
    size_t per_rep = ops ? nops / 2 : (size_t)k; /* pairs in one repetition */
    long reps = iters / (long)per_rep > 0 ? iters / (long)per_rep : 1;
    double runs[BENCH_MAX_RUNS], cpus[BENCH_MAX_RUNS];
    *t = (cell_times){-1, -1, -1};
    /* warm-up: create the segments */
    if (ops && !replay_workload(ca, ops, nops, p))
        return;
    for (int i = 0; !ops && i < k; i++)
        if (cachealloc_malloc(ca, bytes, &p[i]) != OOM_OK)
            return;
    for (int i = 0; !ops && i < k; i++)
        cachealloc_free(ca, p[i]);
    for (int r = 0; r < nruns; r++) {
        double t0 = bench_now_ns(), c0 = bench_cpu_ns();
        for (long rep = 0; rep < reps; rep++) {
            if (ops) {
                if (!replay_workload(ca, ops, nops, p))
                    return;
                continue;
            }
            for (int i = 0; i < k; i++)
                if (cachealloc_malloc(ca, bytes, &p[i]) != OOM_OK)
                    return;
            for (int i = 0; i < k; i++)
                cachealloc_free(ca, p[i]);
        }
        runs[r] = (bench_now_ns() - t0) / ((double)reps * (double)per_rep);
        cpus[r] = (bench_cpu_ns() - c0) / ((double)reps * (double)per_rep);
    }
    cell_of(runs, cpus, nruns, t);
}

oom_status bench_alloc(const bench_options *opt, FILE *out)
{
    static const size_t sizes[] = {1 << 10, 1 << 20, 20 << 20, 256 << 20, 0};
    static const char *const size_names[] = {"1 KiB", "1 MiB", "20 MiB", "256 MiB", "mixed"};
    static const char *const tags[] = {"1KiB", "1MiB", "20MiB", "256MiB", "mixed"};
    static const int ks[] = {1, 64};
    const size_t ncells = sizeof sizes / sizeof sizes[0];
    long iters = opt->iters > 0 ? opt->iters : 200000;
    int nruns = opt->runs > 0 ? opt->runs : BENCH_RUNS;
    uint64_t seed = opt->seed ? opt->seed : 1;

    /* the workload first: a file asked for is written (or refused) before anything is timed */
    bench_op *ops = NULL;
    size_t nops = 0, wlen = 0;
    uint64_t whash = 0;
    if (bench_workload_make(seed, &ops, &nops) != OOM_OK)
        return OOM_ENOMEM_HOST;
    char *wtext = workload_text(ops, nops, seed, &wlen, &whash);
    if (opt->workload_out) {
        oom_status ws = wtext ? fileio_write_atomic(opt->workload_out, wtext, wlen) : OOM_ENOMEM_HOST;
        if (ws != OOM_OK) {
            fprintf(stderr, "oomlab: bench alloc: --workload-out: %s\n", oom_error_msg());
            free(wtext);
            free(ops);
            return OOM_EINVAL;
        }
    }
    free(wtext);

    device *dev = NULL;
    device_options dopt = {.kind = opt->kind, .sim_dry_run = true};
    oom_status st = device_open(&dopt, &dev);
    if (st != OOM_OK) {
        free(ops);
        return st;
    }
    bool cuda = dev->kind == DEVICE_CUDA;
    cJSON *json = opt->json ? cJSON_CreateObject() : NULL;
    cJSON *rows = NULL;
    char hashhex[17];
    snprintf(hashhex, sizeof hashhex, "%016llx", (unsigned long long)whash);
    if (json) {
        cJSON *ctx = gbench_context("oomlab bench alloc", dev->ops->name, dev->name, OOM_DEBUG);
        cJSON_AddStringToObject(ctx, "oomlab_benchmark", "alloc");
        cJSON_AddNumberToObject(ctx, "oomlab_pairs_per_run", (double)iters);
        cJSON_AddNumberToObject(ctx, "oomlab_runs", nruns);
        cJSON_AddNumberToObject(ctx, "oomlab_workload_seed", (double)seed);
        cJSON_AddNumberToObject(ctx, "oomlab_workload_ops", (double)nops);
        cJSON_AddStringToObject(ctx, "oomlab_workload_fnv1a", hashhex);
        cJSON_AddItemToObject(json, "context", ctx);
        rows = cJSON_AddArrayToObject(json, "benchmarks");
    } else {
        fprintf(out, "oomlab bench alloc: backend %s (%s), OOM_DEBUG=%d%s\n", dev->ops->name, dev->name, OOM_DEBUG,
                OOM_DEBUG ? " (checked build: do not publish these figures; use make bench)" : "");
        fprintf(out, "ns per malloc+free pair, median and p90 of %d runs%s\n", nruns,
                cuda ? "" : " (sim runs dry: the allocator's own cost)");
        fprintf(out, "mixed: %zu mallocs and frees of 512 B to 64 MiB, up to %d live, seed %llu (fnv1a %s)\n", nops,
                BENCH_MIX_LIVE, (unsigned long long)seed, hashhex);
        fprintf(out, "%-8s %5s %12s %10s %14s %16s\n", "size", "live", "cachealloc", "p90", cuda ? "cudaMalloc" : "",
                cuda ? "cudaMallocAsync" : "");
    }
    st = OOM_OK;
    for (size_t si = 0; si < ncells && st == OOM_OK; si++) {
        bool mixed = sizes[si] == 0;
        for (size_t ki = 0; ki < (mixed ? 1 : sizeof ks / sizeof ks[0]); ki++) {
            int k = mixed ? BENCH_MIX_LIVE : ks[ki];
            cachealloc_options copt = {0};
            alloc_conf_default(&copt.conf);
            cachealloc *ca = NULL;
            if (cachealloc_new(dev, &copt, &ca) != OOM_OK) {
                st = OOM_ENOMEM_HOST;
                break;
            }
            /* big blocks: fewer pairs, the cost per pair does not depend on size on a hit */
            cell_times t;
            time_cachealloc(ca, sizes[si], k, mixed ? ops : NULL, nops, iters, nruns, &t);
            cachealloc_delete(ca);
            double ns_raw = -1, ns_async = -1;
            if (cuda && !mixed) {
                long raw_pairs = sizes[si] >= (20u << 20) ? 64 : 512;
                if (k == 64)
                    raw_pairs = 128;
                if (device_time_raw_pairs(dev, sizes[si], k, raw_pairs, false, &ns_raw) != OOM_OK)
                    ns_raw = -1;
                if (device_time_raw_pairs(dev, sizes[si], k, iters / 20 > 0 ? iters / 20 : 1, true, &ns_async) !=
                    OOM_OK)
                    ns_async = -1;
            }
            if (json) { /* cachealloc/1KiB/live:1, cudaMalloc/..., cudaMallocAsync/..., cachealloc/mixed/live:128 */
                const char *what[3] = {"cachealloc", "cudaMalloc", "cudaMallocAsync"};
                double wall[3] = {t.median, ns_raw, ns_async};
                for (int w = 0; w < (cuda && !mixed ? 3 : 1); w++) {
                    char name[96];
                    snprintf(name, sizeof name, "%s/%s/live:%d", what[w], tags[si], k);
                    cJSON *b = gbench_add(rows, name, wall[w], w == 0 ? t.cpu : -1, "ns");
                    if (b) {
                        cJSON_AddNumberToObject(b, "bytes", (double)sizes[si]);
                        cJSON_AddNumberToObject(b, "outstanding", k);
                        if (w == 0)
                            cJSON_AddNumberToObject(b, "p90_ns", t.p90);
                    }
                }
            } else {
                fprintf(out, "%-8s %5d %12.1f %10.1f", size_names[si], k, t.median, t.p90);
                if (cuda && !mixed)
                    fprintf(out, " %14.1f %16.1f", ns_raw, ns_async);
                fputc('\n', out);
            }
            if (t.median < 0)
                st = OOM_ENOMEM_DEVICE;
        }
    }
    if (json)
        bench_print_json(json, out);
    device_close(dev);
    free(ops);
    return st;
}
