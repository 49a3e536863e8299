/* bench_replay.c - `oomlab bench replay`: how fast a snapshot trace is read and replayed. A benchmark, not a test.
 *
 * It makes a seeded trace the way PyTorch would record it: a training-like workload (steps of layer
 * activations freed in reverse, sizes that vary with a drawn sequence length, a few tensors kept across steps) run
 * through the allocator model with history on, written entry by entry in _snapshot()'s JSON shape (every key
 * PyTorch 2.11 writes: stream, time_us, frames, compile_context, user_metadata). Then, from that file:
 *   parse   trace_load, the median of 3 (ms, events/s, MB/s) and the process's peak RSS growth over it against
 *           the file's size;
 *   replay  replay_loaded from the loaded events, fast (advise's replays: no model trace) and as a check
 *           (`oomlab replay`: segment actions compared), the median of 5 each, events/s;
 *   advise  advise_run on the loaded trace, once (s), as `oomlab advise` would.
 * The build's OOM_DEBUG level is printed: only level 0 figures are worth publishing (`make bench`).
 */
#include "bench/bench.h"

#include <cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/cachealloc.h"
#include "trace/replay.h"
#include "trace/trace.h"
#include "analysis/advise.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: seeded, the same trace on every machine */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

#define LAYERS 24

/* Run the workload through a dry-run allocator until its trace has at least events entries. NULL on failure. */
static cachealloc *make_workload(size_t events, uint64_t seed, device **devp)
{
    device_options dopt = {.kind = DEVICE_SIM, .sim_dry_run = true};
    device *dev = NULL;
    cachealloc *ca = NULL;
    cachealloc_options copt = {0};
    alloc_conf_default(&copt.conf);
    if (device_open(&dopt, &dev) != OOM_OK)
        return NULL;
    if (cachealloc_new(dev, &copt, &ca) != OOM_OK) {
        device_close(dev);
        return NULL;
    }
    cachealloc_record_history(ca, true);
    uint64_t s = seed ? seed : 1;
    devptr weights[LAYERS], kept[8] = {0};
    size_t wsize[LAYERS];
    for (int l = 0; l < LAYERS; l++) { /* weights: 1 to 16 MiB, kept for the whole run */
        wsize[l] = ((size_t)1 << 20) * (1 + rng_next(&s) % 16);
        cachealloc_malloc(ca, wsize[l], &weights[l]);
    }
    size_t n = 0;
    for (int step = 0; n < events; step++) {
        size_t seq = 64 + rng_next(&s) % 960; /* a drawn sequence length: activation sizes vary per step */
        devptr act[LAYERS * 2];
        int na = 0;
        for (int l = 0; l < LAYERS; l++) {
            size_t a = seq * (wsize[l] >> 12), b = 512 + rng_next(&s) % 4096; /* an activation, a small temp */
            if (cachealloc_malloc(ca, a, &act[na]) == OOM_OK)
                na++;
            if (cachealloc_malloc(ca, b, &act[na]) == OOM_OK)
                na++;
        }
        for (int k = na - 1; k >= 0; k--) /* backward frees in reverse */
            cachealloc_free(ca, act[k]);
        int slot = step % 8; /* a tensor kept across 8 steps (a logged loss, a cache) */
        cachealloc_free(ca, kept[slot]);
        cachealloc_malloc(ca, 512 + rng_next(&s) % (1 << 20), &kept[slot]);
        cachealloc_trace(ca, &n);
    }
    *devp = dev;
    return ca;
}

/* Write ca's trace as a snapshot JSON, entry by entry. */
static bool write_trace(const cachealloc *ca, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    size_t n = 0;
    const ca_trace_entry *t = cachealloc_trace(ca, &n);
    fputs("{\"segments\": [], \"device_traces\": [[", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f,
                "%s{\"action\": \"%s\", \"%s\": %llu, \"size\": %zu, \"stream\": 0, \"time_us\": %lld, "
                "\"frames\": [], \"compile_context\": \"N/A\", \"user_metadata\": \"\"}",
                i ? ", " : "", ca_action_str(t[i].action), t[i].action == CA_OOM ? "device_free" : "addr",
                (unsigned long long)t[i].addr, t[i].size, (long long)(1764000000000000LL + (long long)i));
    fputs("]], \"allocator_settings\": {\"PYTORCH_CUDA_ALLOC_CONF\": \"\", \"max_split_size\": -1, "
          "\"garbage_collection_threshold\": 0.0, \"expandable_segments\": false}, \"external_annotations\": []}\n",
          f);
    return fclose(f) == 0;
}

/* A line of /proc/self/status ("VmHWM", "VmRSS") in kB; -1 when unreadable. */
static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* Reset the peak RSS (VmHWM) to the current RSS (Linux: clear_refs 5); false when it cannot be. */
static bool reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    bool ok = f && fputs("5", f) >= 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    return ok;
}

/* CPU time of this process in ns: on a shared machine the figure an idle core would give as wall time. */
static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

oom_status bench_replay(const bench_replay_options *opt, FILE *out)
{
    size_t events = opt->events ? opt->events : 1000000;
    const char *tmp = getenv("TMPDIR"); /* the trace is scratch: $TMPDIR, as mktemp(1) */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/oomlab-bench-replay-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return OOM_EIO;
    close(fd);
    device *dev = NULL;
    cachealloc *ca = make_workload(events, opt->seed, &dev);
    if (!ca) {
        unlink(path);
        return OOM_ENOMEM_HOST;
    }
    bool wrote = write_trace(ca, path);
    cachealloc_delete(ca);
    device_close(dev);
    long fsize = -1;
    FILE *sf = fopen(path, "rb");
    if (sf && fseek(sf, 0, SEEK_END) == 0)
        fsize = ftell(sf);
    if (sf)
        fclose(sf);
    if (!wrote || fsize <= 0) {
        unlink(path);
        return OOM_EIO;
    }
    char err[400];
    double parse[3], parse_cpu[3];
    bool hwm = reset_peak_rss();
    long rss0 = status_kib("VmRSS"), rss1 = rss0;
    trace_file t = {0};
    oom_status rc = OOM_OK;
    for (int r = 0; r < 3 && rc == OOM_OK; r++) {
        if (r)
            trace_free(&t);
        double t0 = bench_now_ns(), c0 = cpu_ns();
        rc = trace_load(path, &t, err, sizeof err);
        parse[r] = bench_now_ns() - t0;
        parse_cpu[r] = cpu_ns() - c0;
        if (r == 0)
            rss1 = status_kib("VmHWM");
    }
    unlink(path);
    if (rc != OOM_OK) {
        fprintf(stderr, "bench replay: %s\n", err);
        trace_free(&t);
        return rc;
    }
    size_t nev = t.dev[0].n;
    double fast[5], check[5], fast_cpu[5], check_cpu[5];
    for (int pass = 0; pass < 2 && rc == OOM_OK; pass++) {
        for (int r = 0; r < 5 && rc == OOM_OK; r++) {
            replay_options ro = {.fast = pass == 0, .alloc_conf = ""};
            replay_report rep;
            double t0 = bench_now_ns(), c0 = cpu_ns();
            rc = replay_loaded(&t, path, &ro, &rep, err, sizeof err);
            (pass == 0 ? fast : check)[r] = bench_now_ns() - t0;
            (pass == 0 ? fast_cpu : check_cpu)[r] = cpu_ns() - c0;
            replay_report_free(&rep);
        }
    }
    double adv_s = -1, adv_cpu = -1;
    size_t adv_replays = 0;
    if (rc == OOM_OK) {
        advise_options ao = {0};
        advise_result ar;
        double t0 = bench_now_ns(), c0 = cpu_ns();
        rc = advise_run(&t, path, &ao, &ar, err, sizeof err);
        adv_s = (bench_now_ns() - t0) / 1e9;
        adv_cpu = (cpu_ns() - c0) / 1e9;
        adv_replays = ar.replays;
        advise_result_free(&ar);
    }
    trace_free(&t);
    if (rc != OOM_OK) {
        fprintf(stderr, "bench replay: %s\n", err);
        return rc;
    }
    double p = bench_median(parse, 3), f = bench_median(fast, 5), c = bench_median(check, 5);
    double pc = bench_median(parse_cpu, 3), fc = bench_median(fast_cpu, 5), cc = bench_median(check_cpu, 5);
    double mb = (double)fsize / 1e6, grow_mb = hwm && rss1 >= 0 ? (double)(rss1 - rss0) * 1024 / 1e6 : -1;
    if (opt->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schema", "oomlab.bench_replay/1");
        cJSON_AddStringToObject(o, "benchmark", "replay");
        cJSON_AddNumberToObject(o, "debug_level", OOM_DEBUG);
        cJSON_AddNumberToObject(o, "seed", (double)opt->seed);
        cJSON_AddNumberToObject(o, "events", (double)nev);
        cJSON_AddNumberToObject(o, "file_bytes", (double)fsize);
        cJSON_AddNumberToObject(o, "parse_ms", p / 1e6);
        cJSON_AddNumberToObject(o, "parse_cpu_ms", pc / 1e6);
        cJSON_AddNumberToObject(o, "parse_peak_rss_bytes", grow_mb * 1e6);
        cJSON_AddNumberToObject(o, "replay_fast_ms", f / 1e6);
        cJSON_AddNumberToObject(o, "replay_fast_cpu_ms", fc / 1e6);
        cJSON_AddNumberToObject(o, "replay_check_ms", c / 1e6);
        cJSON_AddNumberToObject(o, "replay_check_cpu_ms", cc / 1e6);
        cJSON_AddNumberToObject(o, "advise_s", adv_s);
        cJSON_AddNumberToObject(o, "advise_cpu_s", adv_cpu);
        cJSON_AddNumberToObject(o, "advise_replays", (double)adv_replays);
        bench_print_json(o, out);
        return OOM_OK;
    }
    fprintf(out, "bench replay (OOM_DEBUG=%d%s): a seeded trace (seed %llu) of %zu events, %.1f MB of JSON\n",
            OOM_DEBUG, OOM_DEBUG ? ": checked build, figures not for publishing" : "",
            (unsigned long long)opt->seed, nev, mb);
    fprintf(out, "  (wall / CPU time: on a busy machine the CPU time is what an idle core takes)\n");
    fprintf(out, "  parse   %7.1f / %7.1f ms  %6.2f M events/s (CPU)  peak RSS over the load %.0f MB (%.2fx the "
                 "file)\n",
            p / 1e6, pc / 1e6, (double)nev / (pc / 1e3), grow_mb, grow_mb / mb);
    fprintf(out, "  replay  %7.1f / %7.1f ms  %6.2f M events/s (CPU)  fast: advise's replays\n", f / 1e6, fc / 1e6,
            (double)nev / (fc / 1e3));
    fprintf(out, "  replay  %7.1f / %7.1f ms  %6.2f M events/s (CPU)  check: oomlab replay, segment actions "
                 "compared\n",
            c / 1e6, cc / 1e6, (double)nev / (cc / 1e3));
    fprintf(out, "  advise  %7.2f / %7.2f s   %zu replays\n", adv_s, adv_cpu, adv_replays);
    return OOM_OK;
}
