/* advise.c - minimum budgets per allocator setting by bisection over replays, fragmentation, growth. See advise.h. */
#include "analysis/advise.h"

#include <stdlib.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "alloc/memstats.h"
#include "device/device.h"
#include "figures/gnuplot.h"
#include "core/fail.h"

#define MIB ((size_t)1 << 20)

/* The settings tried, after the recording's own and before the user's: the keys PyTorch's documentation offers
 * against fragmentation, at a few values each. */
static const struct {
    const char *conf, *why;
} candidates[] = {
    {"", "PyTorch's defaults"},
    {"expandable_segments:True", "segments grow in place"},
    {"max_split_size_mb:32", "large cached blocks not split"},
    {"max_split_size_mb:128", "large cached blocks not split"},
    {"max_split_size_mb:512", "large cached blocks not split"},
    {"roundup_power2_divisions:4", "sizes rounded to 4 steps a power of two"},
    {"roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", "PyTorch's documented example"},
    {"garbage_collection_threshold:0.6", "cached blocks freed above 60% of the budget"},
    {"garbage_collection_threshold:0.8", "cached blocks freed above 80% of the budget"},
};
#define NCANDIDATES (sizeof candidates / sizeof candidates[0])

/* ---- one replay ---- */

typedef struct ctx {
    const trace_file *t;
    const char *path;
    const advise_options *opt;
    advise_result *res;
    char *err;
    size_t errcap;
    uint64_t seed; /* the layout replays are ordered by (replay_options.layout_seed): 0 the model's */
} ctx;

/* Replay the device under conf and budget (0: none). *ooms: the model's OOMs (the first one ends a replay with
 * stop). rep's device result is copied to *out when given. */
static oom_status replay_at(ctx *c, const char *conf, size_t budget, bool stop, replay_series *ser, size_t *ooms,
                            replay_result *out)
{
    replay_options ro = {
        .alloc_conf = conf,
        .budget_bytes = budget,
        .one_device = true,
        .device = c->res->device,
        .kernels = c->opt->kernels,
        .kernel_at = c->opt->kernel_at,
        .model_addresses = true,
        .fast = true,
        .stop_at_oom = stop,
        .series = ser,
        .device_total = c->opt->device_total,
        .device_context = c->opt->device_context,
        .layout_seed = c->seed,
    };
    replay_report rep;
    oom_status rc = replay_loaded(c->t, c->path, &ro, &rep, c->err, c->errcap);
    c->res->replays++;
    if (rc == OOM_OK) {
        *ooms = rep.devices[0].model_ooms;
        if (out)
            *out = rep.devices[0];
    }
    replay_report_free(&rep);
    return rc;
}

static int64_t stat_of(const replay_result *r, const char *key)
{
    int64_t v = 0;
    memstats_get(&r->stats, key, &v);
    return v;
}

/* Bisection on whole MiB under conf, with c->seed's layout, between a budget below the need (it fails: reserved
 * bytes never exceed the cap, and allocated never exceed reserved) and one above peak_reserved (the uncapped
 * replay's) that is checked to pass (doubled up to the device's memory if it does not). *budget: the boundary in
 * bytes, 0 when nothing up to the device's memory passes. */
static oom_status bisect(ctx *c, const char *conf, size_t peak_reserved, size_t *budget)
{
    *budget = 0;
    size_t total_mib = c->res->device_total / MIB, ooms = 0;
    size_t lo = (c->res->need - 1) / MIB; /* cap(lo MiB) <= lo MiB < need: fails */
    size_t hi = (peak_reserved + MIB - 1) / MIB + 1;
    if (hi <= lo)
        hi = lo + 1;
    oom_status rc;
    bool found = false;
    while (hi <= total_mib) { /* the device's whole memory is tried too: on a GPU smaller than twice the first
                               * probe, doubling reaches it at once */
        if ((rc = replay_at(c, conf, hi * MIB, true, NULL, &ooms, NULL)) != OOM_OK)
            return rc;
        if (ooms == 0) {
            found = true;
            break;
        }
        if (hi == total_mib)
            break;
        lo = hi;
        hi = hi * 2 < total_mib ? hi * 2 : total_mib;
    }
    if (!found)
        return OOM_OK;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((rc = replay_at(c, conf, mid * MIB, true, NULL, &ooms, NULL)) != OOM_OK)
            return rc;
        if (ooms == 0)
            hi = mid;
        else
            lo = mid;
    }
    *budget = hi * MIB;
    return OOM_OK;
}

/* Under c->seed's layout, the boundary nearest the model's minimum budget `from` (MiB): the budget B that runs
 * with B - 1 MiB running out, found by galloping from `from` (down while it runs, up while it does not: 1, 2, 4 ...
 * MiB) and bisecting the last step. Two replays where the layout agrees with the model's. *budget: bytes; the
 * device's memory when nothing up to it runs. */
static oom_status nearest_boundary(ctx *c, const char *conf, size_t from, size_t *budget)
{
    size_t total_mib = c->res->device_total / MIB, floor_mib = (c->res->need - 1) / MIB, ooms = 0;
    oom_status rc;
    if ((rc = replay_at(c, conf, from * MIB, true, NULL, &ooms, NULL)) != OOM_OK)
        return rc;
    size_t pass, fail; /* pass runs, fail (below it) runs out of memory; pass - fail shrinks to 1 */
    if (ooms == 0) {
        pass = from;
        fail = floor_mib; /* below the need: fails */
        for (size_t step = 1; pass - step > floor_mib; step *= 2) {
            size_t b = pass - step;
            if ((rc = replay_at(c, conf, b * MIB, true, NULL, &ooms, NULL)) != OOM_OK)
                return rc;
            if (ooms) {
                fail = b;
                break;
            }
            pass = b;
        }
    } else {
        fail = from;
        pass = 0;
        for (size_t step = 1; fail < total_mib; step *= 2) {
            size_t b = fail + step < total_mib ? fail + step : total_mib;
            if ((rc = replay_at(c, conf, b * MIB, true, NULL, &ooms, NULL)) != OOM_OK)
                return rc;
            if (!ooms) {
                pass = b;
                break;
            }
            fail = b;
        }
        if (!pass) {
            *budget = c->res->device_total;
            return OOM_OK;
        }
    }
    while (pass - fail > 1) {
        size_t mid = fail + (pass - fail) / 2;
        if ((rc = replay_at(c, conf, mid * MIB, true, NULL, &ooms, NULL)) != OOM_OK)
            return rc;
        if (ooms)
            fail = mid;
        else
            pass = mid;
    }
    *budget = pass * MIB;
    return OOM_OK;
}

/* The row's figures: its replay without a budget, the bisection with the model's layout (min_budget), then under
 * res->layouts seeded layouts the boundary nearest it (layout_lo, layout_hi). */
static oom_status fill_row(ctx *c, advise_row *row)
{
    advise_result *res = c->res;
    size_t ooms = 0;
    replay_result rr;
    size_t before = res->replays;
    c->seed = 0;
    oom_status rc = replay_at(c, row->conf, 0, true, NULL, &ooms, &rr);
    if (rc != OOM_OK)
        return rc;
    row->peak_reserved = (size_t)stat_of(&rr, "reserved_bytes.all.peak");
    row->peak_allocated = (size_t)stat_of(&rr, "allocated_bytes.all.peak");
    row->at_recorded = -1;
    if (ooms == 0 && res->need > 0) {
        if ((rc = bisect(c, row->conf, row->peak_reserved, &row->min_budget)) != OOM_OK)
            return rc;
        row->fits = row->min_budget > 0;
    }
    if (row->fits) {
        row->layout_lo = row->layout_hi = row->min_budget;
        for (uint64_t s = 1; s <= (uint64_t)res->layouts; s++) {
            c->seed = s;
            size_t b = 0;
            if ((rc = nearest_boundary(c, row->conf, row->min_budget / MIB, &b)) != OOM_OK)
                break;
            row->layout_lo = b < row->layout_lo ? b : row->layout_lo;
            row->layout_hi = b > row->layout_hi ? b : row->layout_hi;
        }
        c->seed = 0;
        if (rc != OOM_OK)
            return rc;
    }
    if (res->recorded_budget) {
        if ((rc = replay_at(c, row->conf, res->recorded_budget, true, NULL, &ooms, NULL)) != OOM_OK)
            return rc;
        row->at_recorded = ooms == 0;
    }
    row->replays = res->replays - before;
    return OOM_OK;
}

/* ---- the trace itself: lifetimes, need, steps, accumulation ---- */

typedef struct life {
    uint64_t addr;
    size_t ev; /* event index */
} life;

static int cmp_life(const void *a, const void *b)
{
    const life *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->ev < y->ev ? -1 : x->ev > y->ev;
}

/* For each alloc event, the index of the free_requested that ends it (SIZE_MAX: live at the end), in freed_at
 * (indexed by event; other events unset). */
static size_t *lifetimes(const trace_device *d)
{
    size_t *freed_at = malloc((d->n ? d->n : 1) * sizeof *freed_at);
    life *l = malloc((d->n ? d->n : 1) * sizeof *l);
    if (!freed_at || !l) {
        free(freed_at);
        free(l);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < d->n; i++) {
        freed_at[i] = SIZE_MAX;
        if (d->ev[i].action == CA_ALLOC || d->ev[i].action == CA_FREE_REQUESTED)
            l[n++] = (life){.addr = d->ev[i].addr, .ev = i};
    }
    qsort(l, n, sizeof *l, cmp_life);
    for (size_t k = 0; k + 1 < n; k++)
        if (l[k].addr == l[k + 1].addr && d->ev[l[k].ev].action == CA_ALLOC &&
            d->ev[l[k + 1].ev].action == CA_FREE_REQUESTED)
            freed_at[l[k].ev] = l[k + 1].ev;
    free(l);
    return freed_at;
}

static size_t round512(uint64_t n) { return n == 0 ? 0 : (size_t)((n + 511) / 512 * 512); }

/* The need: the peak of live bytes, each request rounded to 512 (an oom entry's rounded size on top). */
static void find_need(const trace_device *d, const size_t *freed_at, advise_result *res)
{
    /* a free ends what its alloc started: walk events, adding at allocs and subtracting at their frees */
    size_t live = 0, peak = 0;
    long at = -1;
    size_t *ends = calloc(d->n ? d->n : 1, sizeof *ends); /* bytes that end at event i */
    if (!ends)
        return;
    for (size_t i = 0; i < d->n; i++) {
        const trace_event *e = &d->ev[i];
        live -= ends[i];
        if (e->action == CA_ALLOC) {
            live += round512(e->size);
            if (freed_at[i] != SIZE_MAX)
                ends[freed_at[i]] += round512(e->size);
        }
        size_t now = live + (e->action == CA_OOM ? round512(e->size) : 0);
        if (now > peak) {
            peak = now;
            at = (long)i;
        }
    }
    free(ends);
    res->need = peak;
    res->need_event = at;
}

typedef struct win {
    uint64_t hash;
    size_t pos;
} win;

static int cmp_win(const void *a, const void *b)
{
    const win *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

#define STEP_WINDOW 12 /* allocations a repeated phase is recognised by */

/* Step starts from the pattern: windows of STEP_WINDOW consecutive allocation sizes that recur. The number of
 * times c that covers the most windows (c >= 3) is taken as the step count (a phase repeated inside a step, a
 * layer, recurs more often but covers less); among the windows that recur c times, the one seen first marks the
 * step starts. */
static bool steps_from_pattern(const trace_device *d, advise_result *res)
{
    size_t m = 0;
    for (size_t i = 0; i < d->n; i++)
        m += d->ev[i].action == CA_ALLOC;
    if (m < STEP_WINDOW * 3)
        return true;
    size_t *ev = malloc(m * sizeof *ev);
    size_t nw = m - STEP_WINDOW + 1;
    win *w = malloc(nw * sizeof *w);
    size_t *cover = calloc(nw + 1, sizeof *cover);
    if (!ev || !w || !cover) {
        free(ev);
        free(w);
        free(cover);
        return false;
    }
    for (size_t i = 0, k = 0; i < d->n; i++)
        if (d->ev[i].action == CA_ALLOC)
            ev[k++] = i;
    for (size_t j = 0; j < nw; j++) {
        uint64_t h = 1469598103934665603ULL;
        for (size_t k = 0; k < STEP_WINDOW; k++)
            h = (h ^ d->ev[ev[j + k]].size) * 1099511628211ULL;
        w[j] = (win){.hash = h, .pos = j};
    }
    qsort(w, nw, sizeof *w, cmp_win);
    for (size_t a = 0, b; a < nw; a = b) {
        for (b = a; b < nw && w[b].hash == w[a].hash; b++)
            ;
        size_t cnt = b - a;
        if (cnt >= 3)
            cover[cnt] += cnt;
    }
    size_t best_c = 0;
    for (size_t cnt = 3; cnt <= nw; cnt++)
        if (cover[cnt] > cover[best_c])
            best_c = cnt;
    size_t first = SIZE_MAX, ga = 0;
    for (size_t a = 0, b; best_c && a < nw; a = b) {
        for (b = a; b < nw && w[b].hash == w[a].hash; b++)
            ;
        if (b - a == best_c && w[a].pos < first) {
            first = w[a].pos;
            ga = a;
        }
    }
    bool ok = true;
    if (best_c) {
        res->step_event = malloc(best_c * sizeof *res->step_event);
        ok = res->step_event != NULL;
        for (size_t k = 0; ok && k < best_c; k++)
            res->step_event[k] = ev[w[ga + k].pos];
        res->nsteps = ok ? best_c : 0;
    }
    free(ev);
    free(w);
    free(cover);
    return ok;
}

/* Step starts where user_metadata changes to a text that starts with the marker. */
static bool steps_from_marker(const trace_file *t, int dev, const char *marker, advise_result *res)
{
    const trace_device *d = &t->dev[dev];
    size_t n = 0, len = strlen(marker);
    for (size_t k = 0; k < d->nmarks; k++)
        n += strncmp(t->strpool + d->marks[k].text, marker, len) == 0;
    res->steps_from_marker = true;
    if (!n)
        return true;
    res->step_event = malloc(n * sizeof *res->step_event);
    if (!res->step_event)
        return false;
    for (size_t k = 0; k < d->nmarks; k++)
        if (strncmp(t->strpool + d->marks[k].text, marker, len) == 0)
            res->step_event[res->nsteps++] = d->marks[k].event;
    return true;
}

static int cmp_accum(const void *a, const void *b)
{
    const advise_accum *x = a, *y = b;
    size_t bx = x->size * x->count, by = y->size * y->count;
    return bx > by ? -1 : bx < by;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* A leak: allocated bytes at step starts never fall from step 2 on, rise at 3 in 4 of the steps at least and
 * grow in all; the blocks that accumulate are the ones allocated in steps 2..n-1 and live at the last start. */
static void find_leak(const trace_device *d, const size_t *freed_at, advise_result *res)
{
    size_t n = res->nsteps;
    if (n < 4)
        return;
    size_t rises = 0;
    for (size_t k = 1; k + 1 < n; k++) {
        if (res->step_alloc[k + 1] < res->step_alloc[k])
            return;
        rises += res->step_alloc[k + 1] > res->step_alloc[k];
    }
    if (rises * 4 < (n - 2) * 3 || res->step_alloc[n - 1] <= res->step_alloc[1])
        return;
    res->leak = true;
    res->leak_per_step = (double)(res->step_alloc[n - 1] - res->step_alloc[1]) / (double)(n - 2);
    size_t from = res->step_event[1], to = res->step_event[n - 1], cnt = 0;
    size_t *sizes = malloc((to - from + 1) * sizeof *sizes);
    if (!sizes)
        return;
    for (size_t i = from; i < to; i++)
        if (d->ev[i].action == CA_ALLOC && (freed_at[i] == SIZE_MAX || freed_at[i] >= to))
            sizes[cnt++] = (size_t)d->ev[i].size;
    qsort(sizes, cnt, sizeof *sizes, cmp_size);
    advise_accum all[64];
    size_t na = 0;
    for (size_t a = 0, b; a < cnt; a = b) {
        for (b = a; b < cnt && sizes[b] == sizes[a]; b++)
            ;
        advise_accum x = {.size = sizes[a], .count = b - a};
        if (na < 64) {
            all[na++] = x;
        } else { /* keep the 64 largest totals */
            qsort(all, na, sizeof *all, cmp_accum);
            if (x.size * x.count > all[na - 1].size * all[na - 1].count)
                all[na - 1] = x;
        }
    }
    qsort(all, na, sizeof *all, cmp_accum);
    res->naccum = na < ADVISE_MAX_ACCUM ? na : ADVISE_MAX_ACCUM;
    memcpy(res->accum, all, res->naccum * sizeof *all);
    free(sizes);
}

/* ---- the run ---- */

/* The setting in alloc_conf_format's full form, which two spellings of one setting share. */
static void normal_form(const char *conf, char *buf, size_t cap)
{
    alloc_conf c;
    char perr[200];
    alloc_conf_default(&c);
    if (alloc_conf_parse(&c, conf, perr, sizeof perr) != OOM_OK)
        snprintf(buf, cap, "%s", conf);
    else
        alloc_conf_format(&c, buf, cap);
}

/* Add a row unless the same setting is there; false when the table is full. */
static bool add_row(advise_result *res, const char *conf, const char *why)
{
    char a[ALLOC_CONF_TEXT_MAX], b[ALLOC_CONF_TEXT_MAX], r[ALLOC_CONF_TEXT_MAX];
    normal_form(conf, a, sizeof a);
    for (size_t i = 0; i < res->nrows; i++) {
        normal_form(res->rows[i].conf, b, sizeof b);
        if (strcmp(a, b) == 0)
            return true;
    }
    if (res->nrows >= ADVISE_MAX_ROWS)
        return false;
    advise_row *row = &res->rows[res->nrows++];
    memset(row, 0, sizeof *row);
    snprintf(row->conf, sizeof row->conf, "%s", conf);
    row->why = why;
    row->at_recorded = -1;
    row->recorded = strcmp(a, alloc_conf_format(&res->recorded, r, sizeof r)) == 0;
    return true;
}

oom_status advise_run(const trace_file *t, const char *path, const advise_options *opt, advise_result *res,
                      char *err, size_t errcap)
{
    memset(res, 0, sizeof *res);
    /* a predicted trace is advised on the GPU it was predicted for, unless the caller names one */
    advise_options on_gpu = *opt;
    if (!opt->device_total && trace_capture_gpu(t, &on_gpu.device_total, &on_gpu.device_context))
        opt = &on_gpu;
    res->best = -1;
    res->recorded_oom_event = -1;
    res->device_total = opt->device_total ? opt->device_total : DEVICE_SIM_DEFAULT_CAPACITY;
    res->kernels = opt->kernels;
    res->layouts = opt->layouts == 0 ? ADVISE_LAYOUTS : opt->layouts < 0 ? 0 : opt->layouts;
    if (res->layouts > ADVISE_MAX_LAYOUTS) {
        errbuf_set(err, errcap, "%d layouts: at most %d", res->layouts, ADVISE_MAX_LAYOUTS);
        return OOM_EINVAL;
    }
    res->kernel_at = opt->kernel_at;
    snprintf(res->path, sizeof res->path, "%s", path);
    snprintf(res->prediction_conf, sizeof res->prediction_conf, "%s",
             opt->prediction_conf ? opt->prediction_conf : "");
    char with[200];
    trace_devices_with_events(t, with, sizeof with);
    size_t nwith = 0;
    for (size_t i = 0; i < t->ndevices; i++)
        if (t->dev[i].n) {
            nwith++;
            res->device = (int)i;
        }
    if (nwith == 0) {
        errbuf_set(err, errcap, "%s: no trace events on any device (call torch.cuda.memory._record_memory_history() "
                             "before the program allocates, then _dump_snapshot())",
                path);
        return OOM_EINVAL;
    }
    if (opt->one_device) {
        if (opt->device < 0 || (size_t)opt->device >= t->ndevices || t->dev[opt->device].n == 0) {
            errbuf_set(err, errcap, "--device: %s has no events on cuda:%d (it has events on %s)", path, opt->device,
                    with);
            return OOM_EINVAL;
        }
        res->device = opt->device;
    } else if (nwith > 1) {
        errbuf_set(err, errcap, "%s has events on %s: pick one with --device", path, with);
        return OOM_EINVAL;
    }
    const trace_device *d = &t->dev[res->device];
    res->events = d->n;
    res->prediction = !trace_has_segment_events(t, (size_t)res->device);
    res->recorded = t->recorded;
    snprintf(res->recorded_error, sizeof res->recorded_error, "%s", t->recorded_error);
    alloc_conf def;
    alloc_conf_default(&def);
    char a[ALLOC_CONF_TEXT_MAX], b[ALLOC_CONF_TEXT_MAX];
    alloc_conf_format(&t->recorded, a, sizeof a);
    res->recorded_default = !t->recorded_error[0] && strcmp(a, alloc_conf_format(&def, b, sizeof b)) == 0;
    if (opt->budget_bytes) {
        res->recorded_budget = opt->budget_bytes;
        res->budget_source = "--budget";
    } else if (t->budget == TRACE_BUDGET_BYTES) {
        res->recorded_budget = t->budget_bytes;
        res->budget_source = "file";
    } else if (t->budget == TRACE_BUDGET_BAD) {
        errbuf_set(err, errcap, "%s: 'budget' must be a whole number of bytes > 0 (scripts/snapshot2json.py --budget "
                             "writes it)",
                path);
        return OOM_EINVAL;
    } else {
        res->budget_source = "none";
    }
    if (res->recorded_budget >= res->device_total) {
        errbuf_set(err, errcap, "--budget: %zu bytes is more than the device's %zu (%s)", res->recorded_budget,
                res->device_total, opt->device_total ? "the GPU's memory" : "an H100's memory, which the sim models");
        return OOM_EINVAL;
    }
    if (cachealloc_budget_allows_nothing(res->recorded_budget, res->device_total,
                                         strcmp(res->budget_source, "file") == 0 ? "the file's 'budget'" : "--budget", err,
                                         errcap))
        return OOM_EINVAL;
    for (size_t i = 0; i < d->n; i++)
        if (d->ev[i].action == CA_OOM) {
            res->recorded_oom_event = (long)i;
            break;
        }

    /* the rows: defaults, the candidates, the recording's own, the user's */
    for (size_t i = 0; i < (opt->only ? 1 : NCANDIDATES); i++)
        add_row(res, candidates[i].conf, candidates[i].why);
    if (!res->recorded_default && !t->recorded_error[0])
        add_row(res, t->recorded.text, "the recording's own");
    for (size_t i = 0; i < opt->nextra; i++) {
        alloc_conf c;
        char perr[200];
        alloc_conf_default(&c);
        if (alloc_conf_parse(&c, opt->extra[i], perr, sizeof perr) != OOM_OK) {
            errbuf_set(err, errcap, "--try '%s': %s", opt->extra[i], perr);
            return OOM_EINVAL;
        }
        if (!add_row(res, opt->extra[i], "--try")) {
            errbuf_set(err, errcap, "--try: at most %d settings in all", ADVISE_MAX_ROWS);
            return OOM_EINVAL;
        }
    }

    size_t *freed_at = lifetimes(d);
    if (!freed_at) {
        errbuf_set(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    find_need(d, freed_at, res);
    ctx c = {.t = t, .path = path, .opt = opt, .res = res, .err = err, .errcap = errcap};
    oom_status rc = OOM_OK;
    for (size_t i = 0; i < res->nrows && rc == OOM_OK; i++) {
        rc = fill_row(&c, &res->rows[i]);
        if (rc == OOM_OK && res->rows[i].fits &&
            (res->best < 0 || res->rows[i].min_budget < res->rows[res->best].min_budget))
            res->best = (long)i;
    }
    bool ok = true;
    if (rc == OOM_OK)
        ok = opt->step_marker ? steps_from_marker(t, res->device, opt->step_marker, res)
                              : steps_from_pattern(d, res);
    /* the defaults' replay at its minimum budget (uncapped if none), sampled at the step starts and for the plot */
    if (rc == OOM_OK && ok) {
        size_t np = opt->series ? ADVISE_PLOT_POINTS : 0;
        res->step_alloc = calloc(res->nsteps ? res->nsteps : 1, sizeof *res->step_alloc);
        for (int k = 0; k < 4; k++)
            res->series[k] = calloc(np ? np : 1, sizeof *res->series[k]);
        ok = res->step_alloc && res->series[0] && res->series[1] && res->series[2] && res->series[3];
        res->npoints = np;
        for (int s = 0; ok && rc == OOM_OK && s < 2; s++) {
            const advise_row *row = s == 0 ? &res->rows[0] : res->best >= 0 ? &res->rows[res->best] : &res->rows[0];
            replay_series ser = {.nbuckets = np,
                                 .alloc_max = res->series[2 * s],
                                 .reserved_max = res->series[2 * s + 1],
                                 .nprobes = s == 0 ? res->nsteps : 0,
                                 .probe_at = res->step_event,
                                 .probe_alloc = res->step_alloc};
            size_t ooms;
            if (s == 0 || np)
                rc = replay_at(&c, row->conf, row->fits ? row->min_budget : 0, false, &ser, &ooms, NULL);
        }
    }
    if (rc == OOM_OK && ok)
        find_leak(d, freed_at, res);
    free(freed_at);
    if (rc == OOM_OK && !ok) {
        errbuf_set(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
    }
    return rc;
}

void advise_result_free(advise_result *res)
{
    free(res->step_event);
    free(res->step_alloc);
    for (int k = 0; k < 4; k++)
        free(res->series[k]);
    memset(res, 0, sizeof *res);
}

/* ---- presentation ---- */

static double mib(size_t b) { return (double)b / (double)MIB; }

static const char *row_name(const advise_row *r) { return r->conf[0] ? r->conf : "(PyTorch's defaults)"; }

void advise_verdict(const advise_result *res, char *buf, size_t cap)
{
    size_t n = 0;
#define PUT(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__))
    buf[0] = '\0';
    const advise_row *def = &res->rows[0];
    if (res->need == 0) {
        PUT("the trace allocates nothing: there is nothing to fit.");
        return;
    }
    if (!def->fits) {
        PUT("under PyTorch's defaults the workload does not fit on the device (%.0f MiB) at any budget.",
            mib(res->device_total));
    } else {
        size_t frag = def->min_budget > res->need ? def->min_budget - res->need : 0;
        PUT("fragmentation is %.2f MiB of the defaults' minimum budget of %.0f MiB (%.1f%%): the budget beyond the "
            "%.2f MiB the workload needs at its peak.",
            mib(frag), mib(def->min_budget), 100.0 * (double)frag / (double)def->min_budget, mib(res->need));
        if (res->best >= 0 && res->rows[res->best].min_budget < def->min_budget) {
            const advise_row *b = &res->rows[res->best];
            size_t save = def->min_budget - b->min_budget;
            PUT(" %s recovers %.0f MiB of it (%.0f%%): its minimum budget is %.0f MiB.", row_name(b), mib(save),
                frag ? 100.0 * (double)save / (double)frag : 0.0, mib(b->min_budget));
        } else {
            PUT(" No setting tried needs less than the defaults: %s", frag * 20 < def->min_budget
                                                                        ? "there is little fragmentation to recover."
                                                                        : "the fragmentation is in the workload's "
                                                                          "order of allocations, which a setting "
                                                                          "does not change.");
        }
    }
    if (res->recorded_oom_event >= 0) {
        if (!res->recorded_budget) {
            PUT(" The recorded run ran out of memory (event %ld), but the trace has no budget: give the bytes "
                "set_per_process_memory_fraction allowed (--budget) to learn whether another setting fits there.",
                res->recorded_oom_event);
        } else {
            PUT(" The recorded run ran out of memory (event %ld) under %zu bytes; there,", res->recorded_oom_event,
                res->recorded_budget);
            size_t fits = 0;
            for (size_t i = 0; i < res->nrows; i++) {
                if (res->rows[i].at_recorded == 1)
                    PUT("%s %s", fits++ ? "," : "", row_name(&res->rows[i]));
            }
            if (fits)
                PUT(" would have fitted.");
            else if (res->need > res->recorded_budget)
                PUT(" no setting can fit: the workload needs %.2f MiB, more than the budget.", mib(res->need));
            else
                PUT(" no setting tried fits.");
        }
    }
    if (res->leak)
        PUT(" Allocated memory grows by %.0f bytes a step: a leak, which no allocator setting fixes.",
            res->leak_per_step);
#undef PUT
}

void advise_print(const advise_result *res, FILE *out)
{
    fprintf(out, "advise: %s (cuda:%d, %zu events)\n", res->path, res->device, res->events);
    if (res->prediction)
        fprintf(out, "mode: prediction (the trace has no segment events: the model places every segment)\n");
    if (res->recorded_error[0]) /* replay refuses them too (trace.h reads them once for both) */
        fprintf(out, "%s settings: unreadable (%s): their row is left out\n", res->prediction ? "the trace's" : "recorded",
                res->recorded_error);
    else if (res->prediction && res->prediction_conf[0])
        fprintf(out, "the prediction's settings: %s (--alloc-conf: the peaks and the fit above are under them; the "
                     "table tries each setting on the same trace)\n",
                res->prediction_conf);
    else
        fprintf(out, "%s settings: %s\n", res->prediction ? "the trace's" : "recorded",
                res->recorded_default ? "PyTorch's defaults" : res->recorded.text);
    if (res->prediction && res->recorded_budget)
        fprintf(out, "budget: %zu bytes (%s): the 'at recorded budget' column says whether each setting fits "
                     "under it\n",
                res->recorded_budget, strcmp(res->budget_source, "file") == 0 ? "the file's \"budget\"" : "--budget");
    else if (res->prediction)
        fprintf(out, "budget: none given (--budget: whether each setting fits under it)\n");
    else if (res->recorded_budget)
        fprintf(out, "recorded budget: %zu bytes (%s)\n", res->recorded_budget,
                strcmp(res->budget_source, "file") == 0 ? "the file's \"budget\"" : "--budget");
    else
        fprintf(out, "recorded budget: none (a recording made under set_per_process_memory_fraction needs --budget)\n");
    fprintf(out, "minimum budget: the whole-MiB budget B, applied as set_per_process_memory_fraction(B / %zu), that\n"
                 "  bisection ends on: the replay runs without an OOM at B and runs out of memory at B - 1 MiB\n"
                 "  (a run can also pass in a window below B: docs/parity.md); ",
            res->device_total);
    if (res->layouts)
        fprintf(out,
                "over layouts: the least and the greatest\n"
                "  B with the segments in %d other orders than the model's, as the driver may place them (its own\n"
                "  allocations move them: docs/parity.md, \"Under a budget: a range over layouts\")\n",
                res->layouts);
    else
        fprintf(out, "over layouts: not tried (--layouts 0)\n");
    if (res->kernels == REPLAY_KERNELS_FIRST_ALLOC)
        fprintf(out, "addresses: the sim's model of the driver; the first kernel launched after the first allocation "
                     "(--kernels first, the default)\n");
    else if (res->kernels == REPLAY_KERNELS_NONE)
        fprintf(out, "addresses: the sim's model of the driver; no kernel launched (--kernels none)\n");
    else
        fprintf(out, "addresses: the sim's model of the driver; the first kernel launched before event %zu "
                     "(--kernels)\n",
                res->kernel_at);
    if (res->prediction)
        fprintf(out, "  a prediction has no addresses of its own: where the driver puts each segment, and so which of two "
                     "free\n  blocks a request takes under pressure, is the model's; PyTorch's minimum budget can lie "
                     "anywhere in\n  the range over layouts (docs/parity.md, \"Under a budget: a range over layouts\")\n");
    fprintf(out, "need: %.2f MiB (%zu bytes) at event %ld, the peak of live bytes with each request rounded to 512 "
                 "bytes: no setting runs below it\n\n",
            mib(res->need), res->need, res->need_event);
    fprintf(out, "%-52s %12s %13s %18s %13s", "setting", "min budget", "over layouts", "saving vs default",
            "peak reserved");
    if (res->recorded_budget)
        fprintf(out, "  %s", "at recorded budget");
    fputc('\n', out);
    const advise_row *def = &res->rows[0];
    for (size_t i = 0; i < res->nrows; i++) {
        const advise_row *r = &res->rows[i];
        char mb[32] = "does not fit", sv[40] = "-", lay[48] = "-";
        if (r->fits)
            snprintf(mb, sizeof mb, "%.0f MiB", mib(r->min_budget));
        if (r->fits && res->layouts == 0)
            snprintf(lay, sizeof lay, "-");
        else if (r->fits && r->layout_lo == r->layout_hi)
            snprintf(lay, sizeof lay, "the same");
        else if (r->fits)
            snprintf(lay, sizeof lay, "%.0f-%.0f", mib(r->layout_lo), mib(r->layout_hi));
        if (i > 0 && r->fits && def->fits) {
            long long d = (long long)def->min_budget - (long long)r->min_budget;
            snprintf(sv, sizeof sv, "%+.0f MiB (%+.1f%%)", (double)d / (double)MIB,
                     100.0 * (double)d / (double)def->min_budget);
        }
        fprintf(out, "%-52s %12s %13s %18s %9.0f MiB", row_name(r), mb, lay, sv, mib(r->peak_reserved));
        if (res->recorded_budget)
            fprintf(out, "  %s", r->at_recorded == 1 ? "fits" : r->at_recorded == 0 ? "OOM" : "-");
        fprintf(out, "%s%s\n", (long)i == res->best ? "  <- best" : "", r->recorded && i > 0 ? "  (recorded)" : "");
    }
    char v[2048];
    advise_verdict(res, v, sizeof v);
    fprintf(out, "\nverdict: %s\n", v);
    if (res->nsteps == 0) {
        fprintf(out, "\nsteps: %s\n",
                res->steps_from_marker ? "no user_metadata starts with the --step-marker text"
                                       : "no repeated phase found in the allocation pattern (--step-marker TEXT: "
                                         "steps where torch.cuda.memory._set_memory_metadata set a text starting "
                                         "with TEXT)");
    } else {
        fprintf(out, "\nsteps: %zu, %s, the first at event %zu\n", res->nsteps,
                res->steps_from_marker ? "where user_metadata starts with the --step-marker text"
                                       : "found from the repeated pattern of allocation sizes",
                res->step_event[0]);
        fprintf(out, "allocated at each step start (MiB):");
        for (size_t k = 0; k < res->nsteps; k++) {
            if (k == 12 && res->nsteps > 16) {
                fprintf(out, " ... (%zu more)", res->nsteps - 16);
                k = res->nsteps - 4;
            }
            fprintf(out, " %.2f", mib((size_t)res->step_alloc[k]));
        }
        fputc('\n', out);
        if (res->leak) {
            fprintf(out, "leak: +%.0f bytes a step from step 2 to step %zu; still live at the last step's start:\n",
                    res->leak_per_step, res->nsteps);
            for (size_t k = 0; k < res->naccum; k++)
                fprintf(out, "  %zu blocks of %zu bytes (%.2f a step)\n", res->accum[k].count, res->accum[k].size,
                        (double)res->accum[k].count / (double)(res->nsteps - 2));
        } else {
            fprintf(out, "growth: none steady across the steps\n");
        }
    }
    fprintf(out, "replays: %zu\n", res->replays);
}

cJSON *advise_json(const advise_result *res)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    char v[2048];
    cJSON_AddStringToObject(o, "schema", "oomlab.advise/2");
    cJSON_AddStringToObject(o, "file", res->path);
    cJSON_AddNumberToObject(o, "device", res->device);
    cJSON_AddNumberToObject(o, "events", (double)res->events);
    cJSON_AddStringToObject(o, "mode", res->prediction ? "prediction" : "recording");
    cJSON_AddNumberToObject(o, "device_total", (double)res->device_total);
    cJSON_AddStringToObject(o, "min_budget_definition",
                            "the whole-MiB budget B (set_per_process_memory_fraction(B / device_total)) that "
                            "bisection ends on: no OOM at B, an OOM at B - 1 MiB");
    cJSON_AddNumberToObject(o, "layouts", res->layouts);
    cJSON_AddStringToObject(o, "layouts_definition",
                            "min_budget_mib_over_layouts: the least and greatest B over the model's order of the "
                            "segments and `layouts` seeded others (where the driver puts segments decides which of "
                            "two equal free blocks is reused)");
    if (res->recorded_error[0]) {
        cJSON_AddNullToObject(o, "recorded_alloc_conf");
        cJSON_AddStringToObject(o, "recorded_alloc_conf_error", res->recorded_error);
    } else {
        cJSON_AddStringToObject(o, "recorded_alloc_conf", res->recorded.text);
    }
    if (res->recorded_budget)
        cJSON_AddNumberToObject(o, "recorded_budget", (double)res->recorded_budget);
    else
        cJSON_AddNullToObject(o, "recorded_budget");
    cJSON_AddStringToObject(o, "budget_source", res->budget_source ? res->budget_source : "none");
    if (res->recorded_oom_event >= 0)
        cJSON_AddNumberToObject(o, "recorded_oom_event", (double)res->recorded_oom_event);
    else
        cJSON_AddNullToObject(o, "recorded_oom_event");
    cJSON_AddStringToObject(o, "kernels", res->kernels == REPLAY_KERNELS_FIRST_ALLOC ? "first"
                                          : res->kernels == REPLAY_KERNELS_NONE      ? "none"
                                                                                     : "event");
    if (res->kernels == REPLAY_KERNELS_AT)
        cJSON_AddNumberToObject(o, "kernel_event", (double)res->kernel_at);
    cJSON_AddNumberToObject(o, "need", (double)res->need);
    cJSON_AddNumberToObject(o, "need_event", (double)res->need_event);
    cJSON *rows = cJSON_AddArrayToObject(o, "settings");
    for (size_t i = 0; rows && i < res->nrows; i++) {
        const advise_row *r = &res->rows[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "alloc_conf", r->conf);
        cJSON_AddStringToObject(x, "why", r->why);
        cJSON_AddBoolToObject(x, "recorded", r->recorded);
        cJSON_AddBoolToObject(x, "fits", r->fits);
        if (r->fits) {
            cJSON_AddNumberToObject(x, "min_budget", (double)r->min_budget);
            cJSON_AddNumberToObject(x, "min_budget_mib", (double)(r->min_budget / MIB));
            cJSON *lay = cJSON_AddArrayToObject(x, "min_budget_mib_over_layouts");
            cJSON_AddItemToArray(lay, cJSON_CreateNumber((double)(r->layout_lo / MIB)));
            cJSON_AddItemToArray(lay, cJSON_CreateNumber((double)(r->layout_hi / MIB)));
            if (res->rows[0].fits)
                cJSON_AddNumberToObject(x, "saving", (double)res->rows[0].min_budget - (double)r->min_budget);
            else
                cJSON_AddNullToObject(x, "saving");
        } else {
            cJSON_AddNullToObject(x, "min_budget");
            cJSON_AddNullToObject(x, "min_budget_mib");
            cJSON_AddNullToObject(x, "min_budget_mib_over_layouts");
            cJSON_AddNullToObject(x, "saving");
        }
        cJSON_AddNumberToObject(x, "peak_reserved_uncapped", (double)r->peak_reserved);
        cJSON_AddNumberToObject(x, "peak_allocated_uncapped", (double)r->peak_allocated);
        if (r->at_recorded < 0)
            cJSON_AddNullToObject(x, "fits_at_recorded_budget");
        else
            cJSON_AddBoolToObject(x, "fits_at_recorded_budget", r->at_recorded == 1);
        cJSON_AddNumberToObject(x, "replays", (double)r->replays);
        cJSON_AddItemToArray(rows, x);
    }
    if (res->best >= 0)
        cJSON_AddStringToObject(o, "best", res->rows[res->best].conf);
    else
        cJSON_AddNullToObject(o, "best");
    if (res->rows[0].fits)
        cJSON_AddNumberToObject(o, "fragmentation", (double)res->rows[0].min_budget - (double)res->need);
    else
        cJSON_AddNullToObject(o, "fragmentation");
    advise_verdict(res, v, sizeof v);
    cJSON_AddStringToObject(o, "verdict", v);
    cJSON *g = cJSON_AddObjectToObject(o, "steps");
    if (g) {
        cJSON_AddStringToObject(g, "found_by", res->steps_from_marker ? "--step-marker" : "pattern");
        cJSON *se = cJSON_AddArrayToObject(g, "start_event"), *sa = cJSON_AddArrayToObject(g, "allocated");
        for (size_t k = 0; se && sa && k < res->nsteps; k++) {
            cJSON_AddItemToArray(se, cJSON_CreateNumber((double)res->step_event[k]));
            cJSON_AddItemToArray(sa, cJSON_CreateNumber((double)res->step_alloc[k]));
        }
        cJSON_AddBoolToObject(g, "leak", res->leak);
        cJSON_AddNumberToObject(g, "leak_bytes_per_step", res->leak ? res->leak_per_step : 0);
        cJSON *ac = cJSON_AddArrayToObject(g, "accumulating_blocks");
        for (size_t k = 0; ac && k < res->naccum; k++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "size", (double)res->accum[k].size);
            cJSON_AddNumberToObject(x, "count", (double)res->accum[k].count);
            cJSON_AddItemToArray(ac, x);
        }
    }
    cJSON_AddNumberToObject(o, "replays", (double)res->replays);
    return o;
}

/* ---- the plot ---- */


/* The figure's data (index 0: the bars; index 1: the series, event and four columns in MiB) and its script after
 * gp_begin's terminal and output. false when they cannot be written. */
static bool write_plot(const advise_result *res, gp_figure *f)
{
    char dat[128];
    FILE *d = gp_data(f, "advise.dat", dat, sizeof dat), *g = f->gp;
    if (!d)
        return false;
    double top = mib(res->need);
    for (size_t i = 0; i < res->nrows; i++) /* the settings' names are the x ticks, in the script (gp_string) */
        top = res->rows[i].fits && mib(res->rows[i].min_budget) > top ? mib(res->rows[i].min_budget) : top;
    for (size_t i = 0; i < res->nrows; i++)
        fprintf(d, "%zu %.3f\n", i, res->rows[i].fits ? mib(res->rows[i].min_budget) : 0.0);
    fprintf(d, "\n\n");
    for (size_t k = 0; k < res->npoints; k++)
        fprintf(d, "%.0f %.3f %.3f %.3f %.3f\n", (double)res->events * ((double)k + 0.5) / (double)res->npoints,
                mib((size_t)res->series[0][k]), mib((size_t)res->series[1][k]), mib((size_t)res->series[2][k]),
                mib((size_t)res->series[3][k]));
    fprintf(d, "\n\n");
    for (size_t i = 0; i < res->nrows; i++) { /* index 2: each bar's label just above it, or that nothing fits */
        char lab[48];
        double v = res->rows[i].fits ? mib(res->rows[i].min_budget) : 0.0;
        if (res->rows[i].fits)
            snprintf(lab, sizeof lab, "%.0f MiB", v);
        else
            snprintf(lab, sizeof lab, "does not fit");
        fprintf(d, "%zu %.3f \"%s\"\n", i, v + 0.035 * top * 1.15, lab);
    }
    const advise_row *def = &res->rows[0], *best = res->best >= 0 ? &res->rows[res->best] : def;
    fprintf(g, "set multiplot layout 2,1 title ");
    char title[700];
    snprintf(title, sizeof title, "oomlab advise: %s (cuda:%d)", res->path, res->device);
    gp_string(g, title);
    fprintf(g, " font ',15'\n");
    /* the house style (plot.c): white background, grey border and grid, one colour per meaning, every bar
     * labelled, the legend outside the data */
    fprintf(g, "set border lc rgb '#555555'\nset grid ytics lc rgb '#dddddd'\nset xtics nomirror\nset ytics nomirror "
               "font ',11'\nset lmargin 12\nset rmargin 4\n"); /* fixed: both panels align, whatever the ticks */
    fprintf(g, "set title 'minimum budget per setting (the allocator replaying the trace); dashed: the need (its "
               "peak allocated)' font ',13'\nset style fill solid 1.0 border lc rgb 'white'\n"
               "set boxwidth 0.7\nset ylabel 'MiB'\nset yrange [0:%.3f]\n"
               "set xtics rotate by 25 right font ',10'\nset bmargin 9\nunset key\n",
            top * 1.15 > 0 ? top * 1.15 : 1.0);
    fprintf(g, "set xtics (");
    for (size_t i = 0; i < res->nrows; i++) {
        gp_string(g, res->rows[i].conf[0] ? res->rows[i].conf : "defaults");
        fprintf(g, " %zu%s", i, i + 1 < res->nrows ? ", " : "");
    }
    fprintf(g, ")\n");
    fprintf(g, "plot '%s' index 0 using 1:2 with boxes lc rgb '#1f5fa8', %.3f with lines dt 2 lw 2 lc rgb "
               "'#d62728', '%s' index 2 using 1:2:3 with labels font ',10' tc rgb '#222222'\n",
            dat, mib(res->need), dat);
    fprintf(g, "unset label\n");
    fprintf(g, "set title ");
    snprintf(title, sizeof title, "over the trace: defaults at %.0f MiB, %s at %.0f MiB (highest per %zu-event run)",
             mib(def->min_budget), best->conf[0] ? best->conf : "defaults", mib(best->min_budget),
             res->npoints ? (res->events + res->npoints - 1) / res->npoints : 0);
    gp_string(g, title);
    fprintf(g, " font ',13'\nset xlabel 'trace event' font ',11'\nset xtics auto norotate font ',11'\nset bmargin 5\n"
               "set yrange [0:*]\nset key outside top center horizontal font ',11'\n");
    fprintf(g, "plot '%s' index 1 using 1:3 with lines lw 2.5 lc rgb '#1f5fa8' title 'defaults: reserved', "
               "'' index 1 using 1:2 with lines lw 1.5 lc rgb '#1f5fa8' dt 2 title 'defaults: allocated', "
               "'' index 1 using 1:5 with lines lw 2.5 lc rgb '#2ca02c' title 'best: reserved', "
               "'' index 1 using 1:4 with lines lw 1.5 lc rgb '#2ca02c' dt 2 title 'best: allocated'\n",
            dat);
    fprintf(g, "unset multiplot\n");
    bool ok = !ferror(g);
    return gp_data_close(d) && ok;
}

oom_status advise_plot(const advise_result *res, const char *out_path, char *err, size_t errcap)
{
    if (res->npoints == 0) {
        errbuf_set(err, errcap, "advise ran without series: nothing to plot");
        return OOM_EINVAL;
    }
    gp_figure f;
    oom_status st = gp_begin(&f, out_path, 1280, 960, 12, err, errcap);
    if (st != OOM_OK)
        return st;
    if (!write_plot(res, &f)) {
        gp_abort(&f);
        errbuf_set(err, errcap, "cannot write the plot's inputs");
        return OOM_EIO;
    }
    return gp_end(&f, err, errcap);
}
