/* export.c - a run as JUnit XML, Google Benchmark JSON and a customSmallerIsBetter array. See export.h. */
#include "results/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/strbuf.h"

/* ---- JUnit ------------------------------------------------------------------------------------------------- */

/* s escaped for XML text and attribute values; control characters (not allowed in XML 1.0) as '?'. */
static void xesc(strbuf *b, const char *s)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '&': strbuf_printf(b, "&amp;"); break;
        case '<': strbuf_printf(b, "&lt;"); break;
        case '>': strbuf_printf(b, "&gt;"); break;
        case '"': strbuf_printf(b, "&quot;"); break;
        case '\'': strbuf_printf(b, "&apos;"); break;
        case '\n': strbuf_printf(b, "&#10;"); break;
        case '\t': strbuf_printf(b, " "); break;
        default: strbuf_printf(b, "%c", *c < 0x20 ? '?' : (char)*c);
        }
    }
}

static void hostname_of(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0 || !buf[0])
        snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0';
}

static void prop(strbuf *b, const char *name, const char *value)
{
    strbuf_printf(b, "      <property name=\"");
    xesc(b, name);
    strbuf_printf(b, "\" value=\"");
    xesc(b, value);
    strbuf_printf(b, "\"/>\n");
}

/* One testcase: an expectation (or the kind's verdict) of a variant, a failure when it does not hold. */
static void junit_case(strbuf *b, const char *scenario, const char *vname, int i, const char *text, double each,
                       bool holds)
{
    strbuf_printf(b, "    <testcase classname=\"");
    xesc(b, scenario);
    strbuf_printf(b, ".");
    xesc(b, vname);
    strbuf_printf(b, "\" name=\"%d: ", i);
    xesc(b, text);
    strbuf_printf(b, "\" time=\"%.6f\"", each);
    if (holds) {
        strbuf_printf(b, "/>\n");
        return;
    }
    strbuf_printf(b, ">\n      <failure type=\"expectation\" message=\"does not hold\">");
    xesc(b, text);
    strbuf_printf(b, "</failure>\n    </testcase>\n");
}

char *export_junit(const runset *s)
{
    strbuf b = {0};
    char host[256];
    hostname_of(host, sizeof host);
    strbuf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n");
    for (size_t k = 0; k < s->n; k++) {
        const cJSON *j = s->docs[k].json, *v, *e;
        int tests = 0, failures = 0, errors = 0;
        double secs = 0;
        cJSON_ArrayForEach(v, runset_get(j, "variants"))
        {
            bool err = strcmp(runset_str(v, "outcome", ""), "error") == 0;
            const cJSON *kc = runset_get(v, "kind_check"); /* what a fix or a partial fix promises: one more case */
            tests += cJSON_GetArraySize(runset_get(v, "expectations")) + err + cJSON_IsObject(kc);
            errors += err;
            cJSON_ArrayForEach(e, runset_get(v, "expectations")) failures += !cJSON_IsTrue(runset_get(e, "holds"));
            failures += cJSON_IsObject(kc) && !cJSON_IsTrue(runset_get(kc, "holds"));
            secs += runset_num(v, "seconds", 0);
        }
        /* the run's start without its zone (the schema's timestamp has none; it is UTC) */
        char stamp[32];
        const char *started = runset_str(j, "started", NULL);
        if (started) {
            snprintf(stamp, sizeof stamp, "%.19s", started);
        } else { /* a baseline keeps no start: now */
            time_t now = time(NULL);
            struct tm tmv;
            gmtime_r(&now, &tmv);
            strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tmv);
        }
        strbuf_printf(&b, "  <testsuite name=\"");
        xesc(&b, s->docs[k].scenario);
        strbuf_printf(&b, "\" package=\"oomlab\" id=\"%zu\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"0\" "
                 "time=\"%.6f\" timestamp=\"%s\" hostname=\"",
             k, tests, failures, errors, secs, stamp);
        xesc(&b, host);
        strbuf_printf(&b, "\">\n    <properties>\n");
        prop(&b, "backend", runset_str(j, "backend", ""));
        prop(&b, "device", runset_str(j, "device", ""));
        prop(&b, "scale", runset_str(j, "scale", ""));
        char num[64];
        snprintf(num, sizeof num, "%.0f", runset_num(j, "budget", 0));
        prop(&b, "budget", num);
        prop(&b, "alloc_conf_user", runset_str(j, "alloc_conf_user", ""));
        const cJSON *p;
        cJSON_ArrayForEach(p, runset_get(j, "params"))
        {
            char name[96];
            snprintf(name, sizeof name, "param.%s", p->string);
            snprintf(num, sizeof num, "%.0f", cJSON_IsNumber(p) ? p->valuedouble : 0);
            prop(&b, name, num);
        }
        strbuf_printf(&b, "    </properties>\n");
        strbuf out = {0};
        cJSON_ArrayForEach(v, runset_get(j, "variants"))
        {
            const char *vname = runset_str(v, "name", "");
            bool err = strcmp(runset_str(v, "outcome", ""), "error") == 0;
            const cJSON *kc = runset_get(v, "kind_check");
            int n = cJSON_GetArraySize(runset_get(v, "expectations")) + err + cJSON_IsObject(kc);
            double each = n ? runset_num(v, "seconds", 0) / n : 0;
            if (err) {
                strbuf_printf(&b, "    <testcase classname=\"");
                xesc(&b, s->docs[k].scenario);
                strbuf_printf(&b, ".");
                xesc(&b, vname);
                strbuf_printf(&b, "\" name=\"0: runs without error\" time=\"%.6f\">\n      <error type=\"error\" message=\"", each);
                xesc(&b, runset_str(v, "error", ""));
                strbuf_printf(&b, "\">");
                xesc(&b, runset_str(v, "error", ""));
                strbuf_printf(&b, "</error>\n    </testcase>\n");
            }
            int i = 0;
            cJSON_ArrayForEach(e, runset_get(v, "expectations"))
                junit_case(&b, s->docs[k].scenario, vname, ++i, runset_str(e, "text", ""), each,
                           cJSON_IsTrue(runset_get(e, "holds")));
            if (cJSON_IsObject(kc)) /* the kind's verdict, after the scenario's expectations */
                junit_case(&b, s->docs[k].scenario, vname, ++i, runset_str(kc, "text", ""), each,
                           cJSON_IsTrue(runset_get(kc, "holds")));
            const cJSON *note;
            cJSON_ArrayForEach(note, runset_get(v, "notes"))
            {
                if (!cJSON_IsString(note))
                    continue;
                xesc(&out, vname);
                xesc(&out, cJSON_IsFalse(runset_get(v, "reproduced")) ? ": not reproduced at these parameters: "
                                                                         : ": note: ");
                xesc(&out, note->valuestring);
                xesc(&out, "\n");
            }
        }
        strbuf_printf(&b, "    <system-out>%s</system-out>\n    <system-err></system-err>\n  </testsuite>\n",
             out.s ? out.s : "");
        b.oom = b.oom || out.oom;
        free(out.s);
    }
    strbuf_printf(&b, "</testsuites>\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- Google Benchmark -------------------------------------------------------------------------------------- */

/* The first "cpu MHz" of /proc/cpuinfo; 0 when unknown. */
static double cpu_mhz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    double mhz = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0 && sscanf(strchr(line, ':') ? strchr(line, ':') + 1 : "", "%lf", &mhz) == 1)
            break;
    if (f)
        fclose(f);
    return mhz;
}

/* Whether a frequency governor other than "performance" runs cpu0 (Google Benchmark's test). */
static bool cpu_scaling(void)
{
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "r");
    char gov[64] = "";
    bool on = false;
    if (f) {
        on = fgets(gov, sizeof gov, f) && strncmp(gov, "performance", 11) != 0;
        fclose(f);
    }
    return on;
}

/* The CPU caches of cpu0 from sysfs, as Google Benchmark lists them. */
static void add_caches(cJSON *arr)
{
    for (int i = 0; i < 8; i++) {
        char path[128], type[32] = "", size[32] = "", level[8] = "", shared[256] = "";
        const char *keys[] = {"type", "size", "level", "shared_cpu_list"};
        char *vals[] = {type, size, level, shared};
        size_t caps[] = {sizeof type, sizeof size, sizeof level, sizeof shared};
        bool ok = true;
        for (int k = 0; k < 4 && ok; k++) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, keys[k]);
            FILE *f = fopen(path, "r");
            ok = f && fgets(vals[k], (int)caps[k], f);
            if (f)
                fclose(f);
            vals[k][strcspn(vals[k], "\n")] = '\0';
        }
        if (!ok)
            break;
        long bytes = atol(size) * (strchr(size, 'M') ? 1024L * 1024 : strchr(size, 'K') ? 1024 : 1);
        int sharing = 0; /* CPUs in the list "0-3,8" */
        for (char *t = strtok(shared, ","); t; t = strtok(NULL, ",")) {
            int a = 0, z = 0;
            int got = sscanf(t, "%d-%d", &a, &z);
            sharing += got == 2 ? z - a + 1 : 1;
        }
        cJSON *c = cJSON_CreateObject();
        if (!c)
            return;
        cJSON_AddStringToObject(c, "type", strcmp(type, "Unified") == 0 ? "Unified" : type);
        cJSON_AddNumberToObject(c, "level", atoi(level));
        cJSON_AddNumberToObject(c, "size", (double)bytes);
        cJSON_AddNumberToObject(c, "num_sharing", sharing);
        cJSON_AddItemToArray(arr, c);
    }
}

cJSON *gbench_context(const char *executable, const char *backend, const char *device, int debug_level)
{
    cJSON *c = cJSON_CreateObject();
    if (!c)
        return NULL;
    char date[40], host[256];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", &tmv); /* +0000 -> +00:00 as Google Benchmark writes it */
    size_t dl = strlen(date);
    if (dl >= 5 && dl + 1 < sizeof date) {
        memmove(date + dl - 1, date + dl - 2, 3);
        date[dl - 2] = ':';
    }
    hostname_of(host, sizeof host);
    cJSON_AddStringToObject(c, "date", date);
    cJSON_AddStringToObject(c, "host_name", host);
    cJSON_AddStringToObject(c, "executable", executable);
    cJSON_AddNumberToObject(c, "num_cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(c, "mhz_per_cpu", (double)(long)cpu_mhz());
    cJSON_AddBoolToObject(c, "cpu_scaling_enabled", cpu_scaling());
    add_caches(cJSON_AddArrayToObject(c, "caches"));
    cJSON *load = cJSON_AddArrayToObject(c, "load_avg");
    double la[3];
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) == 3)
        for (int i = 0; i < 3; i++)
            cJSON_AddItemToArray(load, cJSON_CreateNumber(la[i]));
    if (f)
        fclose(f);
    cJSON_AddStringToObject(c, "library_version", "oomlab 0.1");
    cJSON_AddStringToObject(c, "library_build_type", debug_level ? "debug" : "release");
    cJSON_AddNumberToObject(c, "json_schema_version", 1);
    cJSON_AddStringToObject(c, "oomlab_backend", backend);
    cJSON_AddStringToObject(c, "oomlab_device", device);
    cJSON_AddNumberToObject(c, "oomlab_debug_level", debug_level);
    return c;
}

cJSON *gbench_add(cJSON *benchmarks, const char *name, double real_time, double cpu_time, const char *time_unit)
{
    cJSON *b = cJSON_CreateObject();
    if (!b)
        return NULL;
    cJSON_AddStringToObject(b, "name", name);
    cJSON_AddNumberToObject(b, "family_index", cJSON_GetArraySize(benchmarks));
    cJSON_AddNumberToObject(b, "per_family_instance_index", 0);
    cJSON_AddStringToObject(b, "run_name", name);
    cJSON_AddStringToObject(b, "run_type", "iteration");
    cJSON_AddNumberToObject(b, "repetitions", 1);
    cJSON_AddNumberToObject(b, "repetition_index", 0);
    cJSON_AddNumberToObject(b, "threads", 1);
    cJSON_AddNumberToObject(b, "iterations", 1);
    if (real_time < 0) { /* the figure failed (a negative time is the benchmarks' mark for it) */
        cJSON_AddBoolToObject(b, "error_occurred", true);
        cJSON_AddStringToObject(b, "error_message", "the measurement failed");
    }
    cJSON_AddNumberToObject(b, "real_time", real_time);
    if (cpu_time >= 0)
        cJSON_AddNumberToObject(b, "cpu_time", cpu_time);
    else
        cJSON_AddStringToObject(b, "label", "cpu_time not measured: real_time is the wall time");
    cJSON_AddStringToObject(b, "time_unit", time_unit);
    cJSON_AddItemToArray(benchmarks, b);
    return b;
}

cJSON *export_gbench(const runset *s, size_t *untimed)
{
    *untimed = 0;
    const cJSON *first = s->n ? s->docs[0].json : NULL;
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return NULL;
    cJSON *ctx = gbench_context("oomlab run", runset_str(first, "backend", ""), runset_str(first, "device", ""), 0);
    if (ctx) {
        /* the run's own facts: when it started and at which scale; the build's debug level is not recorded */
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "library_build_type");
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "oomlab_debug_level");
        cJSON_AddStringToObject(ctx, "library_build_type", "unknown");
        cJSON_AddStringToObject(ctx, "oomlab_started", runset_str(first, "started", "unknown (a baseline)"));
        cJSON_AddStringToObject(ctx, "oomlab_scale", runset_str(first, "scale", ""));
        cJSON_AddItemToObject(doc, "context", ctx);
    }
    cJSON *arr = cJSON_AddArrayToObject(doc, "benchmarks");
    for (size_t k = 0; arr && k < s->n; k++) {
        const cJSON *v;
        cJSON_ArrayForEach(v, runset_get(s->docs[k].json, "variants"))
        {
            const cJSON *sec = runset_get(v, "seconds");
            if (!cJSON_IsNumber(sec)) {
                (*untimed)++;
                continue;
            }
            char name[160];
            snprintf(name, sizeof name, "%s/%s", s->docs[k].scenario, runset_str(v, "name", ""));
            const cJSON *cpu = runset_get(v, "cpu_seconds"); /* absent in results written before it was recorded */
            cJSON *b = gbench_add(arr, name, sec->valuedouble * 1e3, cJSON_IsNumber(cpu) ? cpu->valuedouble * 1e3 : -1,
                                  "ms");
            if (!b)
                continue;
            cJSON_AddNumberToObject(b, "peak_allocated_bytes", runset_num(v, "peak_allocated", 0));
            cJSON_AddNumberToObject(b, "peak_reserved_bytes", runset_num(v, "peak_reserved", 0));
            const cJSON *m;
            cJSON_ArrayForEach(m, runset_get(v, "metrics"))
            {
                const char *mn = runset_str(m, "name", "");
                if (strcmp(runset_str(m, "unit", ""), "s") != 0 || cJSON_GetObjectItemCaseSensitive(b, mn))
                    continue;
                int count = 0;
                const cJSON *q;
                cJSON_ArrayForEach(q, runset_get(v, "metrics")) count += strcmp(runset_str(q, "name", ""), mn) == 0;
                if (count == 1) /* a series (one per step) is left to the results JSON */
                    cJSON_AddNumberToObject(b, mn, runset_num(m, "value", 0));
            }
        }
    }
    return doc;
}

/* ---- customSmallerIsBetter --------------------------------------------------------------------------------- */

static void sib(cJSON *arr, const char *scenario, const char *variant, const char *what, double value,
                const char *extra)
{
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return;
    char name[200];
    snprintf(name, sizeof name, "%s/%s %s", scenario, variant, what);
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "unit", "bytes");
    cJSON_AddNumberToObject(e, "value", value);
    cJSON_AddStringToObject(e, "extra", extra);
    cJSON_AddItemToArray(arr, e);
}

cJSON *export_smaller_is_better(const runset *s)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t k = 0; arr && k < s->n; k++) {
        const cJSON *j = s->docs[k].json, *v;
        char extra[256];
        snprintf(extra, sizeof extra, "backend %s, scale %s, budget %.0f bytes", runset_str(j, "backend", ""),
                 runset_str(j, "scale", ""), runset_num(j, "budget", 0));
        cJSON_ArrayForEach(v, runset_get(j, "variants"))
        {
            const char *sc = s->docs[k].scenario, *vn = runset_str(v, "name", "");
            sib(arr, sc, vn, "peak_allocated_bytes", runset_num(v, "peak_allocated", 0), extra);
            sib(arr, sc, vn, "peak_reserved_bytes", runset_num(v, "peak_reserved", 0), extra);
            sib(arr, sc, vn, "total_allocated_bytes",
                runset_num(runset_get(v, "memory_stats"), "allocated_bytes.all.allocated", 0), extra);
            const cJSON *oom = runset_get(v, "oom");
            if (cJSON_IsObject(oom))
                sib(arr, sc, vn, "reserved_unallocated_at_oom_bytes", runset_num(oom, "reserved_unallocated", 0),
                    extra);
        }
    }
    return arr;
}
