/* predict.c - a predicted trace's peaks, fit, OOM and advice. See predict.h. */
#include "analysis/predict.h"

#include <stdlib.h>
#include <string.h>

#include "alloc/memstats.h"
#include "trace/replay.h"
#include "core/check.h"
#include "core/echo.h"
#include "core/fail.h"

#define MIB ((size_t)1 << 20)
/* A device no trace fills: the uncapped replay's (dry run: nothing is backed). Placement does not depend on it. Not
 * larger: under expandable_segments the allocator reserves 1 1/8 of the device's addresses per pool, and the sim
 * keeps a page table for that range (2 MiB pages: 2.25 M entries here; at 2^50 bytes the table did not fit in host
 * memory, the reservation failed and every peak came out 0). */
#define PREDICT_UNCAPPED_TOTAL ((size_t)1 << 42)

static double mib(size_t b) { return (double)b / (double)MIB; }

/* A whole number >= 0 of a JSON object's key; false when absent or not one. */
static bool json_size(const cJSON *o, const char *key, size_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9.0e15 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return false;
    *out = (size_t)v->valuedouble;
    return true;
}

static oom_status read_gpu(const trace_file *t, const char *path, predict_gpu *g, char *err, size_t errcap)
{
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t->capture, "schema");
    if (schema && (!cJSON_IsString(schema) || strcmp(schema->valuestring, CAPTURE_SCHEMA) != 0)) {
        char e[ECHO_BUF];
        errbuf_set(err, errcap, "%s: 'oomlab_capture'.'schema' is '%s', not %s (a capture this oomlab does not read)",
                path, echo_str(cJSON_IsString(schema) ? schema->valuestring : "(not a string)", e), CAPTURE_SCHEMA);
        return OOM_EINVAL;
    }
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(t->capture, "gpu");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(gpu, "name");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(gpu, "arch");
    size_t sm = 0;
    if (!cJSON_IsObject(gpu) || !cJSON_IsString(name) || !trace_capture_gpu(t, &g->total, &g->context)) {
        errbuf_set(err, errcap, "%s: no 'oomlab_capture'.'gpu' {name, total_memory, context_bytes} (not a trace of "
                             "scripts/oomlab_capture)",
                path);
        return OOM_EINVAL;
    }
    snprintf(g->name, sizeof g->name, "%s", name->valuestring);
    snprintf(g->arch, sizeof g->arch, "%s", cJSON_IsString(arch) ? arch->valuestring : "");
    g->sm_count = json_size(gpu, "sm_count", &sm) && sm < 100000 ? (int)sm : 0;
    return OOM_OK;
}

/* "step S: OP at WHERE" (the capture's user_metadata) into the result's step, op and where. */
static void parse_metadata(predict_result *res, const char *md)
{
    snprintf(res->oom_metadata, sizeof res->oom_metadata, "%s", md);
    res->oom_step = -1;
    const char *colon = strstr(md, ": ");
    if (strncmp(md, "step ", 5) != 0 || !colon)
        return;
    char *end = NULL;
    long s = strtol(md + 5, &end, 10);
    if (end != colon || s < 0)
        return;
    res->oom_step = s;
    const char *op = colon + 2, *at = strstr(op, " at ");
    size_t oplen = at ? (size_t)(at - op) : strlen(op);
    snprintf(res->oom_op, sizeof res->oom_op, "%.*s", (int)(oplen < sizeof res->oom_op ? oplen : 127), op);
    snprintf(res->oom_where, sizeof res->oom_where, "%s", at ? at + 4 : "");
}

static int64_t stat_of(const replay_result *r, const char *key)
{
    int64_t v = 0;
    memstats_get(&r->stats, key, &v);
    return v;
}

oom_status predict_run(const trace_file *t, const char *path, const predict_options *opt, predict_result *res,
                       char *err, size_t errcap)
{
    memset(res, 0, sizeof *res);
    res->oom_event = -1;
    res->oom_step = -1;
    snprintf(res->path, sizeof res->path, "%s", path);
    oom_status rc = read_gpu(t, path, &res->gpu, err, errcap);
    if (rc != OOM_OK)
        return rc;
    res->capture = cJSON_Duplicate(t->capture, true);
    if (!res->capture) {
        errbuf_set(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    if (opt->budget >= res->gpu.total) {
        errbuf_set(err, errcap, "--budget: %zu bytes is not below the %s's memory, %zu bytes (PyTorch's memory "
                             "fraction is at most 1)",
                opt->budget, res->gpu.name, res->gpu.total);
        return OOM_EINVAL;
    }
    res->budget = opt->budget;
    res->external = opt->external;
    if (opt->external >= res->gpu.total - res->gpu.context) {
        errbuf_set(err, errcap, "%zu bytes outside the allocator (NCCL's buffers) do not fit beside the CUDA context "
                             "on the %s",
                opt->external, res->gpu.name);
        return OOM_EINVAL;
    }
    /* uncapped: the peaks */
    replay_options ro = {
        .alloc_conf = opt->alloc_conf,
        .one_device = true,
        .device = 0,
        .model_addresses = true,
        .fast = true,
        .device_total = PREDICT_UNCAPPED_TOTAL,
    };
    size_t d = 0;
    while (d < t->ndevices && t->dev[d].n == 0)
        d++;
    ro.device = (int)d; /* the capture records cuda:0; a hand-made trace: its first device with events */
    replay_report rep;
    rc = replay_loaded(t, path, &ro, &rep, err, errcap);
    if (rc == OOM_OK) {
        res->events = rep.devices[0].events;
        res->peak_allocated = (size_t)stat_of(&rep.devices[0], "allocated_bytes.all.peak");
        res->peak_reserved = (size_t)stat_of(&rep.devices[0], "reserved_bytes.all.peak");
    }
    replay_report_free(&rep);
    if (rc != OOM_OK)
        return rc;
    /* on the GPU under the budget: the fit and the OOM */
    ro.device_total = res->gpu.total;
    ro.device_context = res->gpu.context + opt->external;
    ro.budget_bytes = opt->budget;
    ro.stop_at_oom = true;
    rc = replay_loaded(t, path, &ro, &rep, err, errcap);
    if (rc == OOM_OK) {
        const replay_result *r = &rep.devices[0];
        res->cap = r->budget_bytes;
        res->fits = r->model_ooms == 0;
        if (!res->fits) {
            res->oom_event = r->first_oom_event;
            snprintf(res->oom_message, sizeof res->oom_message, "%s", r->oom_message);
            parse_metadata(res, trace_metadata_at(t, d, (size_t)r->first_oom_event));
        }
    }
    replay_report_free(&rep);
    res->layouts_fit = -1;
    if (rc == OOM_OK && opt->budget) { /* the same budget with the segments in other orders (advise.h) */
        res->layouts_fit = 0;
        for (uint64_t s = 1; s <= ADVISE_LAYOUTS && rc == OOM_OK; s++) {
            ro.layout_seed = s;
            rc = replay_loaded(t, path, &ro, &rep, err, errcap);
            if (rc == OOM_OK)
                res->layouts_fit += rep.devices[0].model_ooms == 0;
            replay_report_free(&rep);
        }
        ro.layout_seed = 0;
    }
    if (rc != OOM_OK || !opt->advise)
        return rc;
    advise_options ao = {
        .one_device = true,
        .device = (int)d,
        .budget_bytes = opt->budget,
        .series = opt->series,
        .device_total = res->gpu.total,
        .device_context = res->gpu.context + opt->external,
    };
    if (opt->alloc_conf && opt->alloc_conf[0]) {
        ao.extra[0] = opt->alloc_conf;
        ao.nextra = 1;
        ao.prediction_conf = opt->alloc_conf;
    }
    rc = advise_run(t, path, &ao, &res->advise, err, errcap);
    res->has_advise = true;
    return rc;
}

void predict_result_free(predict_result *res)
{
    if (res->has_advise)
        advise_result_free(&res->advise);
    cJSON_Delete(res->capture);
    if (res->upper) {
        predict_result_free(res->upper);
        free(res->upper);
    }
    if (res->other) {
        predict_result_free(res->other);
        free(res->other);
    }
    memset(res, 0, sizeof *res);
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static oom_status check_one(const predict_result *r, const char *which, char *why, size_t cap)
{
    if (r->peak_allocated > r->peak_reserved) {
        snprintf(why, cap, "P1: %s: peak allocated %zu above peak reserved %zu", which, r->peak_allocated,
                 r->peak_reserved);
        return OOM_ECORRUPT;
    }
    if (r->orders &&
        (r->orders_allocated[0] > r->orders_allocated[1] || r->orders_reserved[0] > r->orders_reserved[1])) {
        snprintf(why, cap, "P4: %s: the span over the orders of its late frees is reversed", which);
        return OOM_ECORRUPT;
    }
    return OOM_OK;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static const trace_event *sort_ev;
static int by_addr(const void *x, const void *y)
{
    size_t i = *(const size_t *)x, j = *(const size_t *)y;
    uint64_t a = sort_ev[i].addr, b = sort_ev[j].addr;
    return a < b ? -1 : a > b ? 1 : i < j ? -1 : i > j;
}

/* owner[i]: the event index of the alloc that event i frees (its own index for an alloc; SIZE_MAX for an event of
 * no allocation: a free of an address never allocated, a mark). By address, then order: O(n log n). false when out
 * of host memory. */
static bool owners(const trace_device *dev, size_t *owner)
{
    size_t *idx = malloc((dev->n + 1) * sizeof *idx);
    if (!idx)
        return false;
    for (size_t i = 0; i < dev->n; i++)
        idx[i] = i;
    sort_ev = dev->ev;
    qsort(idx, dev->n, sizeof *idx, by_addr);
    size_t live = SIZE_MAX;
    for (size_t k = 0; k < dev->n; k++) {
        size_t i = idx[k];
        if (k == 0 || dev->ev[idx[k - 1]].addr != dev->ev[i].addr)
            live = SIZE_MAX;
        if (dev->ev[i].action == CA_ALLOC)
            live = i;
        owner[i] = dev->ev[i].action == CA_ALLOC || dev->ev[i].action == CA_FREE_REQUESTED ||
                           dev->ev[i].action == CA_FREE_COMPLETED
                       ? live
                       : SIZE_MAX;
    }
    free(idx);
    return true;
}

/* ord[i]: the ordinal of alloc event i among the allocs (SIZE_MAX otherwise); with ref (the lower trace) dev's
 * allocs matched to ref's in order by address and size, the ordinals ref's (an alloc ref lacks: SIZE_MAX). free[o]:
 * how many of those allocs precede ordinal o's free_requested (SIZE_MAX: never freed). */
static void free_points(const trace_device *dev, const trace_device *ref, const size_t *owner, size_t n_ord,
                        size_t *ord, size_t *free_at)
{
    size_t k = 0, r = 0;
    for (size_t o = 0; o < n_ord; o++)
        free_at[o] = SIZE_MAX;
    for (size_t i = 0; i < dev->n; i++) {
        const trace_event *e = &dev->ev[i];
        ord[i] = SIZE_MAX;
        if (e->action == CA_ALLOC) {
            if (ref) {
                while (r < ref->n && ref->ev[r].action != CA_ALLOC)
                    r++;
                if (r >= ref->n || ref->ev[r].addr != e->addr || ref->ev[r].size != e->size)
                    continue;
                r++;
            }
            if (k < n_ord)
                ord[i] = k;
            k++;
        } else if (e->action == CA_FREE_REQUESTED && owner[i] != SIZE_MAX && ord[owner[i]] != SIZE_MAX) {
            free_at[ord[owner[i]]] = k;
        }
    }
}

oom_status predict_free_orders(const trace_file *lower, const trace_file *upper, const char *path,
                               const predict_options *opt, predict_result *res, char *err, size_t errcap)
{
    res->late_frees = 0;
    res->orders = 0;
    size_t d = 0;
    while (d < lower->ndevices && lower->dev[d].n == 0)
        d++;
    if (d >= lower->ndevices || d >= upper->ndevices)
        return OOM_OK;
    const trace_device *lo = &lower->dev[d], *up = &upper->dev[d];
    size_t n_ord = 0;
    for (size_t i = 0; i < lo->n; i++)
        n_ord += lo->ev[i].action == CA_ALLOC;
    size_t nmax = lo->n > up->n ? lo->n : up->n;
    size_t *own_lo = malloc((lo->n + 1) * sizeof(size_t)), *own_up = malloc((up->n + 1) * sizeof(size_t));
    size_t *ord_lo = malloc((lo->n + 1) * sizeof(size_t)), *ord_up = malloc((up->n + 1) * sizeof(size_t));
    size_t *f_lo = malloc((n_ord + 1) * sizeof(size_t)), *f_up = malloc((n_ord + 1) * sizeof(size_t));
    size_t *point = malloc((n_ord + 1) * sizeof(size_t)), *start = malloc((n_ord + 2) * sizeof(size_t));
    size_t *bucket = malloc((n_ord + 1) * sizeof(size_t));
    size_t *fr = malloc((n_ord + 1) * sizeof(size_t)), *fc = malloc((n_ord + 1) * sizeof(size_t));
    trace_event *ev = malloc((nmax + 1) * sizeof *ev);
    trace_device *devs = calloc(lower->ndevices, sizeof *devs);
    oom_status rc = OOM_OK;
    if (!own_lo || !own_up || !ord_lo || !ord_up || !f_lo || !f_up || !point || !start || !bucket || !fr || !fc ||
        !ev || !devs || !owners(lo, own_lo) || !owners(up, own_up)) {
        errbuf_set(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        goto out;
    }
    free_points(lo, NULL, own_lo, n_ord, ord_lo, f_lo);
    free_points(up, lo, own_up, n_ord, ord_up, f_up);
    for (size_t o = 0; o < n_ord; o++)
        res->late_frees += f_lo[o] != SIZE_MAX && f_up[o] > f_lo[o]; /* never freed there: later */
    if (res->late_frees == 0)
        goto out;
    for (size_t o = 0; o < n_ord; o++)
        fr[o] = fc[o] = SIZE_MAX;
    for (size_t i = 0; i < lo->n; i++) { /* each allocation's free events in lower */
        size_t a = own_lo[i], o = a != SIZE_MAX ? ord_lo[a] : SIZE_MAX;
        if (o != SIZE_MAX && lo->ev[i].action == CA_FREE_REQUESTED)
            fr[o] = i;
        else if (o != SIZE_MAX && lo->ev[i].action == CA_FREE_COMPLETED)
            fc[o] = i;
    }
    replay_options ro = {.alloc_conf = opt->alloc_conf, .one_device = true, .device = (int)d,
                         .model_addresses = true, .fast = true, .device_total = PREDICT_UNCAPPED_TOTAL};
    trace_file t = *lower;
    t.dev = devs;
    devs[d] = *lo;
    devs[d].ev = ev;
    devs[d].marks = NULL; /* the labels are not needed for the peaks, and the events they point at moved */
    devs[d].nmarks = 0;
    for (int s = 0; s < PREDICT_FREE_ORDERS && rc == OOM_OK; s++) {
        /* each late free's point (how many allocs precede it): the first order all at their latest, then drawn */
        uint64_t seed = (uint64_t)s;
        memset(start, 0, (n_ord + 2) * sizeof *start);
        for (size_t o = 0; o < n_ord; o++) {
            point[o] = SIZE_MAX;
            if (f_lo[o] == SIZE_MAX || f_up[o] <= f_lo[o])
                continue;
            size_t hi = f_up[o] > n_ord ? n_ord : f_up[o];
            point[o] = s == 0 ? hi : f_lo[o] + (size_t)(splitmix64(&seed) % (uint64_t)(hi - f_lo[o] + 1));
            start[point[o] + 1]++;
        }
        for (size_t p = 0; p <= n_ord; p++)
            start[p + 1] += start[p];
        for (size_t o = 0; o < n_ord; o++) /* bucket: the late ordinals by point, each point's in ordinal order */
            if (point[o] != SIZE_MAX)
                bucket[start[point[o]]++] = o;
        for (size_t p = n_ord + 1; p-- > 1;) /* start[p] back to where point p's run begins */
            start[p] = start[p - 1];
        start[0] = 0;
        size_t n = 0, k = 0;
        for (size_t i = 0; i <= lo->n; i++) {
            bool at_alloc = i < lo->n && lo->ev[i].action == CA_ALLOC;
            if (at_alloc || i == lo->n)
                for (size_t b = start[k]; b < start[k + 1]; b++) { /* the late frees whose point is k */
                    ev[n++] = lo->ev[fr[bucket[b]]];
                    if (fc[bucket[b]] != SIZE_MAX)
                        ev[n++] = lo->ev[fc[bucket[b]]];
                }
            if (i == lo->n)
                break;
            size_t a = own_lo[i];
            if (lo->ev[i].action != CA_ALLOC && a != SIZE_MAX && ord_lo[a] != SIZE_MAX && point[ord_lo[a]] != SIZE_MAX)
                continue; /* a late free: moved */
            k += at_alloc;
            ev[n++] = lo->ev[i];
        }
        devs[d].n = n;
        replay_report rep;
        rc = replay_loaded(&t, path, &ro, &rep, err, errcap);
        if (rc == OOM_OK) {
            size_t pa = (size_t)stat_of(&rep.devices[0], "allocated_bytes.all.peak");
            size_t pr = (size_t)stat_of(&rep.devices[0], "reserved_bytes.all.peak");
            res->orders_allocated[0] = s == 0 || pa < res->orders_allocated[0] ? pa : res->orders_allocated[0];
            res->orders_allocated[1] = s == 0 || pa > res->orders_allocated[1] ? pa : res->orders_allocated[1];
            res->orders_reserved[0] = s == 0 || pr < res->orders_reserved[0] ? pr : res->orders_reserved[0];
            res->orders_reserved[1] = s == 0 || pr > res->orders_reserved[1] ? pr : res->orders_reserved[1];
            res->orders++;
        }
        replay_report_free(&rep);
    }
out:
    free(own_lo);
    free(own_up);
    free(ord_lo);
    free(ord_up);
    free(f_lo);
    free(f_up);
    free(point);
    free(start);
    free(bucket);
    free(fr);
    free(fc);
    free(ev);
    free(devs);
    if (rc != OOM_OK)
        res->orders = 0;
    return rc;
}

oom_status predict_result_check(const predict_result *res, bool expensive, char *why, size_t cap)
{
    (void)expensive;
    const predict_result *end[4] = {res, res->upper, res->other, res->other ? res->other->upper : NULL};
    static const char *const name[4] = {"the prediction", "its upper end", "the other choices",
                                        "the other choices' upper end"};
    for (int k = 0; k < 4; k++) {
        if (!end[k])
            continue;
        if (check_one(end[k], name[k], why, cap) != OOM_OK)
            return OOM_ECORRUPT;
        if (k != 0 && k != 2 && (end[k]->upper || end[k]->other)) {
            snprintf(why, cap, "P2: %s has an upper end or other choices of its own", name[k]);
            return OOM_ECORRUPT;
        }
        if (k == 2 && end[k]->other) {
            snprintf(why, cap, "P3: the other choices have other choices of their own");
            return OOM_ECORRUPT;
        }
    }
    return OOM_OK;
}

static const cJSON *compile_timed(const cJSON *cap)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cap, "compile"), "timed");
}

int predict_timed_choices(const predict_result *res)
{
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, compile_timed(res->capture))
    {
        if (cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e9)
            n += (int)v->valuedouble;
    }
    return n;
}

/* "timed choices: ..." where the capture met choices the GPU makes by timing: how many of each, and how they were
 * taken (both ways, or the first way only). */
static void print_timed(const predict_result *res, FILE *out)
{
    int n = predict_timed_choices(res);
    if (n == 0)
        return;
    const cJSON *t = compile_timed(res->capture);
    double pad = num_of(t, "pad_mm"), tune = num_of(t, "max_autotune");
    fprintf(out, "timed choices: the GPU makes %d choice%s by timing during torch.compile (", n, n == 1 ? "" : "s");
    if (pad > 0)
        fprintf(out, "pad_mm: %.0f matmul%s timed unpadded and padded%s", pad, pad == 1 ? "" : "s",
                tune > 0 ? "; " : "");
    if (tune > 0)
        fprintf(out, "max-autotune: %.0f selection%s between ATen's kernel and Triton templates", tune,
                tune == 1 ? "" : "s");
    fprintf(out, "), which the CPU cannot time: ");
    const char *first = pad > 0 && tune > 0 ? "unpadded, ATen's kernels" : pad > 0 ? "unpadded" : "ATen's kernels";
    const char *other = pad > 0 && tune > 0 ? "padded, the Triton templates and their fusions"
                        : pad > 0           ? "padded"
                                            : "the Triton templates and their fusions";
    if (res->other)
        fprintf(out, "predicted both ways, the first (%s) and the other (%s), and the peaks span both; a GPU that "
                     "takes some one way and some the other may lie outside them\n",
                first, other);
    else
        fprintf(out, "predicted the first way only (%s; oomlab predict takes them both ways for one process, not "
                     "under --nproc)\n",
                first);
    if (tune > 0)
        fprintf(out, "  Inductor's AUTOTUNE tables are not printed: their timings are the capture's stand-ins\n");
}

/* The capture's "range": what the upper trace bounds. */
static void print_range(const cJSON *cap, FILE *out)
{
    fprintf(out, "range: what the CPU cannot know, bounded in the upper trace (an allocation the lower trace leaves "
                 "out, or a free it makes later there):\n");
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(cap, "range"))
    {
        fprintf(out, "  %s: %.0f, up to %.0f bytes each (%s)\n", str_of(r, "what"), num_of(r, "count"),
                num_of(r, "largest"), str_of(r, "source"));
    }
}

/* "fits: ..." of one analysis; end names it where there is a range. */
static void print_fit(const predict_result *res, const char *end, FILE *out)
{
    char at[64] = "";
    if (end)
        snprintf(at, sizeof at, " (%s)", end);
    char lay[320] = "";
    if (res->layouts_fit >= 0 && res->layouts_fit != (res->fits ? ADVISE_LAYOUTS : 0))
        snprintf(lay, sizeof lay, "  with the segments in %d other orders, as the driver may place them, %d of them "
                                  "fit: the verdict at this budget depends on where the driver puts segments "
                                  "(docs/parity.md, \"Under a budget: a range over layouts\")\n",
                 ADVISE_LAYOUTS, res->layouts_fit);
    if (res->fits) {
        fprintf(out, "fits%s: yes, on the %s %s\n%s", at, res->gpu.name,
                res->budget ? "under the budget" : "(the whole device)", lay);
        return;
    }
    fprintf(out, "fits%s: no: out of memory at event %ld", at, res->oom_event);
    if (res->oom_step >= 0)
        fprintf(out, ", step %ld, %s%s%s", res->oom_step, res->oom_op, res->oom_where[0] ? " at " : "",
                res->oom_where);
    else if (res->oom_metadata[0])
        fprintf(out, " (%s)", res->oom_metadata);
    fprintf(out, "\n  %s\n%s", res->oom_message, lay);
    /* a request above 2^53 bytes is in the trace as 2^53 (the most a JSON number holds exactly): its own size, and
     * PyTorch's message for it (the capture's "oversized") */
    const cJSON *big = cJSON_GetObjectItemCaseSensitive(res->capture, "oversized");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(big, "bytes");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(big, "message");
    if (cJSON_IsString(bytes) && cJSON_IsString(msg)) {
        char b[ECHO_BUF], m[ECHO_BUF * 2];
        snprintf(m, sizeof m, "%s", msg->valuestring);
        fprintf(out, "  the request that runs out asks for %s bytes, recorded in the trace as 2^53; PyTorch's "
                     "message for it: %s\n",
                echo_str(bytes->valuestring, b), echo_one_line(m));
    }
}

/* A heading, then each {what, count, where} of a capture's list on its own line. */
static void print_values(const char *heading, const cJSON *list, FILE *out)
{
    fprintf(out, "%s\n", heading);
    const cJSON *p;
    cJSON_ArrayForEach(p, list)
    {
        fprintf(out, "  %s x%.0f at %s\n", str_of(p, "what"), num_of(p, "count"), str_of(p, "where"));
    }
}

/* Another end's minimum budgets per setting beside the first's (ref). */
static void print_min_budgets(const predict_result *r, const predict_result *ref, const char *name, FILE *out)
{
    fprintf(out, "\n%s, minimum budget per setting:\n", name);
    for (size_t i = 0; i < r->advise.nrows; i++) {
        const advise_row *row = &r->advise.rows[i];
        const advise_row *lo = ref->has_advise && i < ref->advise.nrows ? &ref->advise.rows[i] : NULL;
        const char *conf = row->conf[0] ? row->conf : "(PyTorch's defaults)";
        if (row->fits && lo && lo->fits)
            fprintf(out, "  %-52s %6zu MiB (%s: %zu MiB)\n", conf, row->min_budget / MIB,
                    ref->other ? "the first choices" : "the lower end", lo->min_budget / MIB);
        else if (row->fits)
            fprintf(out, "  %-52s %6zu MiB\n", conf, row->min_budget / MIB);
        else
            fprintf(out, "  %-52s does not fit the %s\n", conf, r->gpu.name);
    }
}

void predict_print(const predict_result *res, FILE *out)
{
    OOM_VALIDATE("predict", predict_result_check, res);
    char a[32], b[32];
    const cJSON *cap = res->capture;
    char shown[sizeof res->path];
    snprintf(shown, sizeof shown, "%s", res->path);
    echo_one_line(shown); /* a newline in a script's name keeps the report's lines */
    fprintf(out, "predict: %s (torch %s, %.0f ops captured in %.1f s", shown, str_of(cap, "torch"),
            num_of(cap, "ops"), num_of(cap, "seconds"));
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cap, "op_seconds"))) /* the ops' share: the rest is the
                                                                                 script's imports and host work */
        fprintf(out, ", %.1f s of it in the ops, %.0f us the median op", num_of(cap, "op_seconds"),
                num_of(cap, "op_median_us"));
    fprintf(out, ", %zu events, %.0f steps)\n", res->events, num_of(cap, "steps"));
    const cJSON *note = cJSON_GetObjectItemCaseSensitive(cap, "torch_note");
    if (cJSON_IsString(note))
        fprintf(out, "note: %s\n", note->valuestring);
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(cap, "compile");
    if (cJSON_IsObject(comp)) { /* torch.compile's cost on this host: a GPU host pays its own, of the same order */
        char cache[1024];
        snprintf(cache, sizeof cache, "%s", str_of(comp, "triton_cache"));
        echo_one_line(cache);
        fprintf(out, "compile: %.0f graph%s compiled for the GPU in %.1f s of the capture", num_of(comp, "graphs"),
                num_of(comp, "graphs") == 1 ? "" : "s", num_of(comp, "seconds"));
        if (num_of(comp, "triton_kernels") > 0)
            fprintf(out, ", %.1f s of it Triton compiling %.0f kernels for the target (cached in %s)",
                    num_of(comp, "triton_seconds"), num_of(comp, "triton_kernels"), cache);
        fprintf(out, "\n");
    }
    fprintf(out, "gpu: %s (%s, %d SMs): %zu bytes (%.0f MiB), of which the CUDA context holds %zu (%.0f MiB) "
                 "outside the allocator\n",
            res->gpu.name, res->gpu.arch[0] ? res->gpu.arch : "?", res->gpu.sm_count, res->gpu.total,
            mib(res->gpu.total), res->gpu.context, mib(res->gpu.context));
    if (res->external)
        fprintf(out, "outside the allocator: NCCL's buffers, %zu bytes (%.0f MiB) on this rank's GPU beside the "
                     "context (the process's non-PyTorch memory in the fits verdict and its OOM message)\n",
                res->external, mib(res->external));
    if (res->budget)
        fprintf(out, "budget: %zu bytes (--budget; the allocator's cap: set_per_process_memory_fraction(%zu / %zu) "
                     "allows %zu bytes; the context is not inside it)\n",
                res->budget, res->budget, res->gpu.total, res->cap);
    else
        fprintf(out, "budget: the whole device: the allocator may reserve what the context%s leaves, %zu bytes\n",
                res->external ? " and NCCL's buffers" : "", res->gpu.total - res->gpu.context - res->external);
    /* the ends: the capture's (and its upper trace's), then the other choices' capture's (and its upper's) */
    const predict_result *end[4] = {res, res->upper, res->other, res->other ? res->other->upper : NULL};
    static const char *const with_other[4] = {"the first choices", "the first choices' upper end",
                                              "the other choices", "the other choices' upper end"};
    static const char *const alone[4] = {"the lower end", "the upper end", NULL, NULL};
    const char *const *names = res->other ? with_other : alone;
    size_t alo = res->peak_allocated, ahi = alo, rlo = res->peak_reserved, rhi = rlo;
    for (int k = 0; k < 4; k++) {
        if (!end[k])
            continue;
        size_t pa[3] = {end[k]->peak_allocated, end[k]->orders_allocated[0], end[k]->orders_allocated[1]};
        size_t pr[3] = {end[k]->peak_reserved, end[k]->orders_reserved[0], end[k]->orders_reserved[1]};
        for (int j = 0; j < (end[k]->orders ? 3 : 1); j++) {
            alo = pa[j] < alo ? pa[j] : alo;
            ahi = pa[j] > ahi ? pa[j] : ahi;
            rlo = pr[j] < rlo ? pr[j] : rlo;
            rhi = pr[j] > rhi ? pr[j] : rhi;
        }
    }
    if (!res->upper && !res->other) {
        fprintf(out, "peak allocated: %s (%zu bytes)\n", memstats_format_size(res->peak_allocated, a, sizeof a),
                res->peak_allocated);
        fprintf(out, "peak reserved:  %s (%zu bytes), uncapped\n",
                memstats_format_size(res->peak_reserved, b, sizeof b), res->peak_reserved);
    } else {
        char c2[32], d2[32];
        fprintf(out, "peak allocated: between %s and %s (%zu to %zu bytes)\n", memstats_format_size(alo, a, sizeof a),
                memstats_format_size(ahi, c2, sizeof c2), alo, ahi);
        fprintf(out, "peak reserved:  between %s and %s (%zu to %zu bytes), uncapped\n",
                memstats_format_size(rlo, b, sizeof b), memstats_format_size(rhi, d2, sizeof d2), rlo, rhi);
    }
    print_timed(res, out);
    if (res->other)
        for (int k = 0; k < 4; k++)
            if (end[k])
                fprintf(out, "  %s: peak allocated %zu, peak reserved %zu bytes\n", names[k],
                        end[k]->peak_allocated, end[k]->peak_reserved);
    if (res->upper)
        print_range(cap, out);
    if (res->other && res->other->upper && !res->upper)
        print_range(res->other->capture, out);
    for (int k = 0; k < 4; k += 2)
        if (end[k] && end[k]->orders)
            fprintf(out, "free orders%s%s: %zu free%s the upper trace makes later (where the GPU's garbage collector "
                         "frees them is a point the CPU cannot know) replayed in %d orders, each free at a point "
                         "drawn between its two: peak allocated %zu to %zu, peak reserved %zu to %zu bytes\n",
                    res->other ? " of " : "", res->other ? names[k] : "", end[k]->late_frees,
                    end[k]->late_frees == 1 ? "" : "s", end[k]->orders,
                    end[k]->orders_allocated[0], end[k]->orders_allocated[1], end[k]->orders_reserved[0],
                    end[k]->orders_reserved[1]);
    for (int k = 0; k < 4; k++)
        if (end[k])
            print_fit(end[k], k == 0 && !res->upper && !res->other ? NULL : names[k], out);
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(cap, "answered");
    if (cJSON_GetArraySize(an) > 0)
        print_values("answered from the data: values the script read from device tensors, computed on the CPU "
                     "from what they were made of:",
                     an, out);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(cap, "placeholders");
    if (cJSON_GetArraySize(ph) == 0)
        fprintf(out, "placeholders: none (no .item(), .tolist() or data-dependent shape was answered)\n");
    else
        print_values("placeholders: values the CPU could not know, answered with placeholders:", ph, out);
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(cap, "modelled");
    if (cJSON_GetArraySize(mo) == 0) {
        fprintf(out, "modelled: none\n");
    } else {
        fprintf(out, "modelled: allocations the CUDA path makes that the script's ops do not (in the trace):\n");
        const cJSON *m;
        cJSON_ArrayForEach(m, mo)
        {
            fprintf(out, "  %s: %.0f bytes x%.0f (%s)\n", str_of(m, "what"), num_of(m, "bytes"), num_of(m, "count"),
                    str_of(m, "source"));
        }
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cap, "not_modelled");
    if (cJSON_GetArraySize(nm) > 0) {
        fprintf(out, "not modelled: allocations the CUDA path makes that the capture leaves out (NOT in the trace: "
                     "the prediction is low by them):\n");
        const cJSON *m;
        cJSON_ArrayForEach(m, nm)
        {
            fprintf(out, "  %s: %.0f ops (%s)\n", str_of(m, "what"), num_of(m, "ops"), str_of(m, "source"));
        }
    }
    const cJSON *pin = cJSON_GetObjectItemCaseSensitive(cap, "pinned");
    if (num_of(pin, "calls") > 0)
        fprintf(out, "pinned host memory: %.0f Tensor.pin_memory calls, %.0f bytes in all, the largest %.0f (host "
                     "memory, not the GPU's; how much the caching host allocator holds at once depends on the "
                     "loader's timing)\n",
                num_of(pin, "calls"), num_of(pin, "bytes"), num_of(pin, "largest"));
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(cap, "deferred");
    if (num_of(def, "parameters") > 0)
        fprintf(out, "host: %.0f tensors the host never built (parameters made on the CPU, weights read from "
                     "safetensors; %.0f elements, %.0f bytes): each move to CUDA allocates as the real one does; a "
                     "value read from one before its move is a placeholder\n",
                num_of(def, "parameters"), num_of(def, "elements"), num_of(def, "bytes"));
    if (res->has_advise) {
        fputc('\n', out);
        advise_print(&res->advise, out);
    }
    for (int k = 1; k < 4; k++)
        if (end[k] && end[k]->has_advise)
            print_min_budgets(end[k], res, k == 1 && !res->other ? "the range's upper end (the upper trace)"
                                                                : names[k], out);
}

cJSON *predict_json(const predict_result *res, const char *script)
{
    OOM_VALIDATE("predict", predict_result_check, res);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "schema", PREDICT_SCHEMA);
    cJSON_AddStringToObject(o, "script", script);
    cJSON *g = cJSON_AddObjectToObject(o, "gpu");
    cJSON_AddStringToObject(g, "name", res->gpu.name);
    cJSON_AddNumberToObject(g, "total_memory", (double)res->gpu.total);
    cJSON_AddNumberToObject(g, "sm_count", res->gpu.sm_count);
    cJSON_AddStringToObject(g, "arch", res->gpu.arch);
    cJSON_AddNumberToObject(g, "context_bytes", (double)res->gpu.context);
    if (res->budget)
        cJSON_AddNumberToObject(o, "budget", (double)res->budget);
    else
        cJSON_AddNullToObject(o, "budget");
    if (res->cap)
        cJSON_AddNumberToObject(o, "cap", (double)res->cap);
    else
        cJSON_AddNumberToObject(o, "cap", (double)(res->gpu.total - res->gpu.context - res->external));
    cJSON_AddNumberToObject(o, "external_bytes", (double)res->external);
    cJSON_AddNumberToObject(o, "events", (double)res->events);
    cJSON_AddNumberToObject(o, "peak_allocated", (double)res->peak_allocated);
    cJSON_AddNumberToObject(o, "peak_reserved", (double)res->peak_reserved);
    cJSON_AddBoolToObject(o, "fits", res->fits);
    if (res->layouts_fit >= 0)
        cJSON_AddNumberToObject(o, "fits_in_layouts", res->layouts_fit);
    else
        cJSON_AddNullToObject(o, "fits_in_layouts");
    cJSON_AddNumberToObject(o, "layouts", ADVISE_LAYOUTS);
    if (res->fits) {
        cJSON_AddNullToObject(o, "oom");
    } else {
        cJSON *m = cJSON_AddObjectToObject(o, "oom");
        cJSON_AddNumberToObject(m, "event", (double)res->oom_event);
        if (res->oom_step >= 0)
            cJSON_AddNumberToObject(m, "step", (double)res->oom_step);
        else
            cJSON_AddNullToObject(m, "step");
        cJSON_AddStringToObject(m, "op", res->oom_op);
        cJSON_AddStringToObject(m, "where", res->oom_where);
        cJSON_AddStringToObject(m, "metadata", res->oom_metadata);
        cJSON_AddStringToObject(m, "message", res->oom_message);
    }
    static const char *const copied[] = {"placeholders", "answered", "modelled", "not_modelled", "range"};
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(res->capture, copied[i]);
        cJSON_AddItemToObject(o, copied[i], cJSON_IsArray(v) ? cJSON_Duplicate(v, true) : cJSON_CreateArray());
    }
    cJSON *c = cJSON_AddObjectToObject(o, "capture");
    static const char *const keys[] = {"schema", "torch", "torch_note", "ops", "seconds", "steps", "compile"};
    for (size_t i = 0; c && i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(res->capture, keys[i]);
        cJSON_AddItemToObject(c, keys[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    /* the ops' share of the capture's seconds and its median op; the host tensors never materialised (0 from a
     * capture that does not say) */
    cJSON_AddNumberToObject(c, "op_seconds", num_of(res->capture, "op_seconds"));
    cJSON_AddNumberToObject(c, "op_median_us", num_of(res->capture, "op_median_us"));
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(res->capture, "deferred");
    cJSON *d = cJSON_AddObjectToObject(c, "deferred");
    static const char *const dkeys[] = {"parameters", "elements", "bytes"};
    for (size_t i = 0; d && i < sizeof dkeys / sizeof dkeys[0]; i++)
        cJSON_AddNumberToObject(d, dkeys[i], num_of(def, dkeys[i]));
    const cJSON *pin = cJSON_GetObjectItemCaseSensitive(res->capture, "pinned");
    cJSON *p = cJSON_AddObjectToObject(o, "pinned");
    static const char *const pkeys[] = {"calls", "bytes", "largest"};
    for (size_t i = 0; p && i < sizeof pkeys / sizeof pkeys[0]; i++)
        cJSON_AddNumberToObject(p, pkeys[i], num_of(pin, pkeys[i]));
    cJSON *adv = res->has_advise ? advise_json(&res->advise) : cJSON_CreateNull();
    cJSON_AddItemToObject(o, "advise", adv);
    cJSON *up = res->upper ? predict_json(res->upper, script) : cJSON_CreateNull();
    cJSON_AddItemToObject(o, "upper", up);
    cJSON *other = res->other ? predict_json(res->other, script) : cJSON_CreateNull();
    cJSON_AddItemToObject(o, "other", other);
    if (res->orders) {
        cJSON *fo = cJSON_AddObjectToObject(o, "free_orders");
        cJSON_AddNumberToObject(fo, "frees", (double)res->late_frees);
        cJSON_AddNumberToObject(fo, "orders", res->orders);
        const double pa[2] = {(double)res->orders_allocated[0], (double)res->orders_allocated[1]};
        const double pr[2] = {(double)res->orders_reserved[0], (double)res->orders_reserved[1]};
        cJSON_AddItemToObject(fo, "peak_allocated", cJSON_CreateDoubleArray(pa, 2));
        cJSON_AddItemToObject(fo, "peak_reserved", cJSON_CreateDoubleArray(pr, 2));
    } else {
        cJSON_AddNullToObject(o, "free_orders");
    }
    return o;
}

bool predict_traces_same(const trace_file *a, const trace_file *b)
{
    if (a->ndevices != b->ndevices)
        return false;
    for (size_t d = 0; d < a->ndevices; d++) {
        const trace_device *x = &a->dev[d], *y = &b->dev[d];
        if (x->n != y->n)
            return false;
        for (size_t i = 0; i < x->n; i++)
            if (x->ev[i].action != y->ev[i].action || x->ev[i].addr != y->ev[i].addr || x->ev[i].size != y->ev[i].size)
                return false;
    }
    return true;
}

static int probe_at(int64_t v, predict_probe_fn probe, void *ctx, predict_sweep *sw, bool *fits)
{
    for (size_t i = 0; i < sw->nprobes; i++) /* a capture is deterministic: never run one twice */
        if (sw->probes[i].value == v) {
            *fits = sw->probes[i].fits;
            return 0;
        }
    if (sw->nprobes >= PREDICT_SWEEP_MAX)
        return 2;
    predict_probe *p = &sw->probes[sw->nprobes];
    memset(p, 0, sizeof *p);
    p->value = v;
    int rc = probe(v, ctx, p);
    if (rc)
        return rc;
    sw->nprobes++;
    *fits = p->fits;
    for (size_t i = 0; i + 1 < sw->nprobes && sw->monotonic; i++) {
        const predict_probe *q = &sw->probes[i];
        const predict_probe *lo = q->value < v ? q : p, *hi = q->value < v ? p : q;
        if (hi->peak_reserved < lo->peak_reserved || (hi->fits && !lo->fits)) {
            sw->monotonic = false;
            sw->nonmono_lo = lo->value;
            sw->nonmono_hi = hi->value;
        }
    }
    return 0;
}

int predict_sweep_run(int64_t lo, int64_t hi, predict_probe_fn probe, void *ctx, predict_sweep *sw)
{
    memset(sw, 0, sizeof *sw);
    sw->lo = lo;
    sw->hi = hi;
    sw->monotonic = true;
    sw->found = lo - 1;
    bool fits = false;
    int rc = probe_at(lo, probe, ctx, sw, &fits);
    if (rc || !fits)
        return rc;
    sw->found = lo;
    if ((rc = probe_at(hi, probe, ctx, sw, &fits)) != 0)
        return rc;
    if (fits) {
        sw->found = hi;
        return 0;
    }
    int64_t good = lo, bad = hi; /* good fits, bad does not */
    while (bad - good > 1) {
        int64_t mid = good + (bad - good) / 2;
        if ((rc = probe_at(mid, probe, ctx, sw, &fits)) != 0)
            return rc;
        if (fits)
            good = mid;
        else
            bad = mid;
    }
    sw->found = good;
    return 0;
}
