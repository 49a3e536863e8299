/* runner.c - runs a scenario's variants in fresh runtimes and records samples, OOMs and expectations. */
#include "run/runner.h"
#include "device/devcomm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/cachealloc.h"
#include "core/echo.h"
#include "core/fail.h"
#include "run/isolate.h"

/* LeakSanitizer's own check, for faultsweep's children (asan builds: `make asan`). */
#if defined(__SANITIZE_ADDRESS__)
#define RUNNER_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RUNNER_LSAN 1
#endif
#endif
#ifdef RUNNER_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* The run of one variant: what scenario code sees as scn. */
struct scn {
    rt *r;
    const scenario *sc;
    const run_result *run;
    const int64_t *params;
    variant_result *res;
    size_t capsamples, capexpect, capmetrics, capnotes;
    /* several devices (scn_rt_device): the runtimes of devices 1.., opened with these options */
    const run_options *o;
    alloc_conf conf;
    rt *extra[SCN_MAX_DEVICES];
    size_t capdevsamples[SCN_MAX_DEVICES];
    device_fault_plan plan; /* under o->fault: shared by every device of the variant */
    struct devcomm *comm;   /* scn_comm's, closed when the variant ends */
};

const char *variant_kind_str(variant_kind k)
{
    switch (k) {
    case VARIANT_BUG:
        return "bug";
    case VARIANT_FIX:
        return "fix";
    case VARIANT_MYTH:
        return "myth";
    case VARIANT_PARTIAL:
        return "partial";
    }
    return "bug";
}

const char *variant_outcome_str(variant_outcome o)
{
    switch (o) {
    case OUTCOME_OK:
        return "ok";
    case OUTCOME_OOM:
        return "oom";
    case OUTCOME_ERROR:
        return "error";
    case OUTCOME_CRASHED:
        return "crashed";
    case OUTCOME_TIMEOUT:
        return "timeout";
    }
    return "error";
}

const char *run_scale_str(run_scale s) { return s == SCALE_CI ? "ci" : s == SCALE_FULL ? "full" : "auto"; }

int64_t scenario_param_default(const scenario_param *p, run_scale s)
{
    return s == SCALE_CI && p->ci ? p->ci : p->def;
}

run_scale runner_resolve_scale(const run_options *o)
{
    if (o->scale != SCALE_AUTO)
        return o->scale;
    if (o->dry_run)
        return SCALE_FULL;
    if (o->backend == DEVICE_CUDA || (o->backend == DEVICE_AUTO && device_cuda_probe()->visible))
        return SCALE_FULL;
    return SCALE_CI;
}

/* ---- scenario-facing API ------------------------------------------------------------------------------ */

rt *scn_rt(scn *s) { return s->r; }

int64_t scn_param(const scn *s, const char *name)
{
    for (size_t i = 0; i < s->sc->nparams; i++)
        if (strcmp(s->sc->params[i].name, name) == 0)
            return s->params[i];
    fprintf(stderr, "oomlab: scenario %s has no parameter '%s'\n", s->sc->name, name);
    abort(); /* a scenario asking for a parameter it did not declare is a programming error */
}

run_scale scn_scale(const scn *s) { return s->run->scale; }
bool scn_computes(const scn *s) { return s->r->computes; }
size_t scn_budget(const scn *s) { return s->run->budget; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The process's CPU time (every thread), s: a variant's cpu_seconds. */
static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double scn_clock(scn *s)
{
    rt_sync(s->r); /* a kernel failure surfaces here and stays recorded in the rt */
    return now_s();
}

void scn_metric(scn *s, const char *name, const char *unit, double value)
{
    variant_result *res = s->res;
    if (res->nmetrics == s->capmetrics) {
        s->capmetrics = s->capmetrics ? s->capmetrics * 2 : 16;
        res->metrics = xrealloc(res->metrics, s->capmetrics * sizeof *res->metrics);
    }
    scn_metric_value *m = &res->metrics[res->nmetrics++];
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->unit, sizeof m->unit, "%s", unit);
    m->value = value;
    m->sample = (int)res->nsamples - 1;
}

static void add_note(scn *s, const char *fmt, va_list ap)
{
    variant_result *res = s->res;
    if (res->nnotes == s->capnotes) {
        s->capnotes = s->capnotes ? s->capnotes * 2 : 4;
        res->notes = xrealloc(res->notes, s->capnotes * sizeof *res->notes);
    }
    vsnprintf(res->notes[res->nnotes++], sizeof res->notes[0], fmt, ap);
}

void scn_note(scn *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_note(s, fmt, ap);
    va_end(ap);
}

/* The note just added moves to the front: a variant's first note is why it is not reproduced (the table, the JSON
 * export and the report read it as the reason), whatever was noted before (a communicator's notes come first). */
static void last_note_first(variant_result *res)
{
    char last[sizeof res->notes[0]];
    memcpy(last, res->notes[res->nnotes - 1], sizeof last);
    memmove(res->notes[1], res->notes[0], (res->nnotes - 1) * sizeof res->notes[0]);
    memcpy(res->notes[0], last, sizeof last);
}

void scn_not_reproduced(scn *s, const char *fmt, ...)
{
    s->res->reproduced = false;
    va_list ap;
    va_start(ap, fmt);
    add_note(s, fmt, ap);
    va_end(ap);
    last_note_first(s->res);
}

const memstats *scn_stats(const scn *s) { return cachealloc_stats(s->r->ca); }

int64_t scn_stat(const scn *s, const char *key)
{
    int64_t v = 0;
    memstats_get(scn_stats(s), key, &v);
    return v;
}

static int64_t stat_in(const memstats *m, const char *key)
{
    int64_t v = 0;
    memstats_get(m, key, &v);
    return v;
}

void runner_sample_of(const memstats *m, scn_sample *smp)
{
    smp->allocated = stat_in(m, "allocated_bytes.all.current");
    smp->reserved = stat_in(m, "reserved_bytes.all.current");
    smp->active = stat_in(m, "active_bytes.all.current");
    smp->inactive_split = stat_in(m, "inactive_split_bytes.all.current");
    smp->allocated_peak = stat_in(m, "allocated_bytes.all.peak");
    smp->reserved_peak = stat_in(m, "reserved_bytes.all.peak");
    smp->segments = stat_in(m, "segment.all.current");
    smp->device_allocs = stat_in(m, "num_device_alloc");
    smp->device_frees = stat_in(m, "num_device_free");
    smp->alloc_retries = stat_in(m, "num_alloc_retries");
    smp->ooms = stat_in(m, "num_ooms");
    smp->step_peak = -1; /* the caller takes it from its allocator */
}

/* Append a sample to device k's series (m NULL: zeros, a step before it was opened). */
static void device_sample(scn *s, int k, const char *label, const memstats *m)
{
    scn_device_result *d = &s->res->devices[k - 1];
    if (d->nsamples == s->capdevsamples[k]) {
        s->capdevsamples[k] = s->capdevsamples[k] ? s->capdevsamples[k] * 2 : 64;
        d->samples = xrealloc(d->samples, s->capdevsamples[k] * sizeof *d->samples);
    }
    scn_sample *smp = &d->samples[d->nsamples++];
    memset(smp, 0, sizeof *smp);
    smp->step_peak = -1;
    snprintf(smp->label, sizeof smp->label, "%s", label);
    if (m)
        runner_sample_of(m, smp);
}

void scn_step(scn *s, const char *fmt, ...)
{
    variant_result *res = s->res;
    if (res->nsamples == s->capsamples) {
        s->capsamples = s->capsamples ? s->capsamples * 2 : 64;
        res->samples = xrealloc(res->samples, s->capsamples * sizeof *res->samples);
    }
    scn_sample *smp = &res->samples[res->nsamples++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(smp->label, sizeof smp->label, fmt, ap);
    va_end(ap);
    runner_sample_of(cachealloc_stats(s->r->ca), smp);
    smp->step_peak = cachealloc_take_window_peak(s->r->ca);
    if (res->v->kind == VARIANT_FIX && smp->reserved > res->fix_reserved) { /* the fix's new peak: its layout */
        cachealloc_snapshot_free(res->fix_layout, res->fix_nlayout);
        res->fix_nlayout = 0;
        res->fix_layout = cachealloc_layout(s->r->ca, &res->fix_nlayout);
        if (!res->fix_layout)
            res->fix_nlayout = 0;
        res->fix_step = (int)res->nsamples - 1;
        res->fix_reserved = smp->reserved;
    }
    for (size_t k = 1; k <= res->ndevices; k++) { /* every other open device, in step */
        device_sample(s, (int)k, smp->label, cachealloc_stats(s->extra[k]->ca));
        scn_device_result *d = &res->devices[k - 1];
        d->samples[d->nsamples - 1].step_peak = cachealloc_take_window_peak(s->extra[k]->ca);
    }
}

void scn_remedy(scn *s, const char *fmt, ...)
{
    char label[sizeof s->res->samples[0].label];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    scn_step(s, "%s", label);
    s->res->story_ooms = s->res->ooms;
}

void scn_saved(scn *s, int64_t bytes, const char *fmt, ...)
{
    variant_result *res = s->res;
    res->saved_set = true;
    res->saved = bytes;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->saved_what, sizeof res->saved_what, fmt, ap);
    va_end(ap);
}

bool scn_caught(scn *s, const char *what)
{
    rt *r = s->r;
    int dev = 0;
    for (size_t k = 1; k <= s->res->ndevices && rt_status(r) != OOM_ENOMEM_DEVICE; k++)
        if (rt_status(s->extra[k]) == OOM_ENOMEM_DEVICE) /* an OOM on another device */
            r = s->extra[k], dev = (int)k;
    if (rt_status(r) != OOM_ENOMEM_DEVICE)
        return false;
    variant_result *res = s->res;
    const ca_oom_info *lo = cachealloc_last_oom(r->ca);
    res->oom_marks = xrealloc(res->oom_marks, (res->noom_marks + 1) * sizeof *res->oom_marks);
    scn_oom_mark *m = &res->oom_marks[res->noom_marks++];
    memset(m, 0, sizeof *m);
    m->step = (int)res->nsamples;
    snprintf(m->what, sizeof m->what, "%s", what);
    m->device = dev;
    if (lo) {
        m->requested = lo->requested;
        m->alloc_size = lo->alloc_size;
        m->allocated = lo->allocated;
        m->reserved = lo->reserved;
    }
    if (res->ooms++ == 0) {
        const ca_oom_info *o = lo;
        res->oom_layout = cachealloc_oom_layout(r->ca, &res->oom_nlayout);
        scn_oom *d = &res->oom;
        d->step = (int)res->nsamples;
        snprintf(d->what, sizeof d->what, "%s", what);
        snprintf(d->message, sizeof d->message, "%s", rt_message(r));
        d->device = dev;
        if (o) {
            d->requested = o->requested;
            d->alloc_size = o->alloc_size;
            d->allocated = o->allocated;
            d->reserved = o->reserved;
            d->reserved_unallocated = o->reserved - o->allocated;
            d->largest_free_block = o->largest_free_block;
        }
    }
    rt_clear(r);
    return true;
}

void scn_caught_pinned(scn *s, const char *what, const char *message)
{
    variant_result *res = s->res;
    if (res->ooms++ == 0) {
        scn_oom *d = &res->oom;
        memset(d, 0, sizeof *d);
        d->step = (int)res->nsamples;
        d->pinned = true;
        snprintf(d->what, sizeof d->what, "%s", what);
        snprintf(d->message, sizeof d->message, "%s", message);
    }
}

void scn_expect(scn *s, bool holds, const char *fmt, ...)
{
    variant_result *res = s->res;
    if (res->nexpect == s->capexpect) {
        s->capexpect = s->capexpect ? s->capexpect * 2 : 8;
        res->expect = xrealloc(res->expect, s->capexpect * sizeof *res->expect);
    }
    scn_expectation *e = &res->expect[res->nexpect++];
    e->holds = holds;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
}

const scn_oom *scn_first_oom(const scn *s) { return s->res->ooms ? &s->res->oom : NULL; }

/* ---- several devices ----------------------------------------------------------------------------------- */

rt *scn_rt_device(scn *s, int k)
{
    if (k == 0)
        return s->r;
    if (k < 0 || k >= SCN_MAX_DEVICES) {
        rt_fail(s->r, OOM_EINVAL, "scn_rt_device: device %d of at most %d", k, SCN_MAX_DEVICES);
        return NULL;
    }
    variant_result *res = s->res;
    if (!res->devices)
        res->devices = xrealloc(NULL, (SCN_MAX_DEVICES - 1) * sizeof *res->devices);
    while ((int)res->ndevices < k) {
        int j = (int)res->ndevices + 1;
        /* the same backend as device 0, budget, settings and seed; cuda: GPU j where the machine has one, else
         * a logical device of GPU 0 */
        bool own_gpu = s->r->dev->kind == DEVICE_CUDA && j < device_cuda_count();
        rt_options ro = {.backend = s->r->dev->kind, .dry_run = s->o->dry_run, .budget_bytes = s->run->budget,
                         .conf = &s->conf, .seed = s->o->seed, .real_addresses = s->o->real_addresses,
                         .cuda_ordinal = own_gpu ? j : 0, .uncached = s->o->uncached};
        rt *r = NULL;
        if (rt_open(&ro, &r) != OOM_OK) {
            rt_fail(s->r, OOM_ENODEV, "cannot open device %d: %s", j, oom_error_msg());
            return NULL;
        }
        cachealloc_record_oom_layout(r->ca, true); /* the layout at an OOM goes into the results (plot.h) */
        scn_device_result *d = &res->devices[j - 1];
        memset(d, 0, sizeof *d);
        d->index = j;
        d->logical = r->dev->kind == DEVICE_CUDA && !own_gpu;
        if (own_gpu)
            snprintf(d->name, sizeof d->name, "cuda:%d (%.64s, its own allocator and budget)", j, r->dev->name);
        else if (d->logical)
            snprintf(d->name, sizeof d->name, "cuda:0 as logical device %d (its own allocator and budget, one GPU)", j);
        else
            snprintf(d->name, sizeof d->name, "%s:%d (another simulated device)", r->dev->ops->name, j);
        d->cap = cachealloc_budget(r->ca);
        s->extra[j] = r;
        s->capdevsamples[j] = 0;
        if (s->o->fault)
            device_fault_plan_attach(r->dev, &s->plan);
        res->ndevices = (size_t)j;
        for (size_t i = 0; i < res->nsamples; i++) /* the steps before it existed */
            device_sample(s, j, res->samples[i].label, NULL);
    }
    return s->extra[k];
}

int scn_devices(const scn *s) { return 1 + (int)s->res->ndevices; }

devcomm *scn_comm(scn *s, int n)
{
    if (s->comm) {
        if (s->comm->n == n)
            return s->comm;
        rt_fail(s->r, OOM_EINVAL, "scn_comm: a communicator of %d ranks is open, not %d", s->comm->n, n);
        return NULL;
    }
    if (n < 1 || n > DEVCOMM_MAX_RANKS || n > SCN_MAX_DEVICES) {
        rt_fail(s->r, OOM_EINVAL, "scn_comm: %d ranks (1 to %d)", n, DEVCOMM_MAX_RANKS);
        return NULL;
    }
    device *devs[DEVCOMM_MAX_RANKS];
    for (int k = 0; k < n; k++) {
        rt *r = scn_rt_device(s, k);
        if (!r)
            return NULL;
        devs[k] = r->dev;
    }
    oom_status st = devcomm_open(devs, n, &s->comm);
    if (st != OOM_OK) {
        rt_fail(s->r, st, "cannot open a communicator over %d devices: %s", n, oom_error_msg());
        return NULL;
    }
    scn_note(s, "%s", s->comm->why);
    char b[32];
    scn_note(s, "NCCL's buffers, outside the caching allocator (non-PyTorch memory): %s per rank, %s",
             memstats_format_size(s->comm->external[0], b, sizeof b),
             s->comm->engine == DEVCOMM_NCCL ? "measured" : s->comm->modelled ? "as measured on 2 x H200" : "none (no NCCL)");
    return s->comm;
}

int64_t scn_stat_device(const scn *s, int k, const char *key)
{
    if (k == 0)
        return scn_stat(s, key);
    if (k < 0 || (size_t)k > s->res->ndevices)
        return 0;
    return stat_in(cachealloc_stats(s->extra[k]->ca), key);
}

/* ---- validation ------------------------------------------------------------------------------------------ */

const scenario_param *runner_param(const scenario *sc, const char *name, size_t *idx)
{
    for (size_t i = 0; i < sc->nparams; i++) {
        if (strcmp(sc->params[i].name, name) == 0) {
            if (idx)
                *idx = i;
            return &sc->params[i];
        }
    }
    return NULL;
}

bool runner_selects(const run_options *o, const scenario_variant *v)
{
    if (o->nvariants == 0)
        return true;
    for (int k = 0; k < o->nvariants; k++)
        if (strcmp(o->variants[k], v->name) == 0)
            return true;
    return false;
}

/* The settings a variant runs under: the user's text, then the variant's keys (later keys win). */
static oom_status variant_conf(const run_options *o, const scenario_variant *v, alloc_conf *c, char *err,
                               size_t errcap)
{
    const char *user = o->alloc_conf ? o->alloc_conf : "";
    size_t n = strlen(user) + strlen(v->alloc_conf) + 2;
    char *text = malloc(n);
    if (!text) {
        snprintf(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    snprintf(text, n, "%s%s%s", user, user[0] && v->alloc_conf[0] ? "," : "", v->alloc_conf);
    alloc_conf_default(c);
    oom_status st = alloc_conf_parse(c, text, err, errcap);
    free(text);
    return st;
}

oom_status runner_validate(const scenario *sc, const run_options *o, char *err, size_t errcap)
{
    if (sc->nparams > RUN_MAX_PARAMS) { /* a scenario's own mistake, caught before it reads past run_result */
        snprintf(err, errcap, "scenario %s declares %zu parameters; at most %d", sc->name, sc->nparams,
                 RUN_MAX_PARAMS);
        return OOM_EINVAL;
    }
    if (o->nvariants > RUN_MAX_VARIANTS) {
        snprintf(err, errcap, "at most %d --variant options", RUN_MAX_VARIANTS);
        return OOM_EINVAL;
    }
    for (int k = 0; k < o->nvariants; k++) {
        if (scenario_variant_find(sc, o->variants[k]))
            continue;
        char cut[ECHO_BUF];
        size_t n = (size_t)snprintf(err, errcap, "scenario %s has no variant '%s' (variants:", sc->name,
                                    echo_str(o->variants[k], cut));
        for (size_t i = 0; i < sc->nvariants && n < errcap; i++)
            n += (size_t)snprintf(err + n, errcap - n, " %s", sc->variants[i].name);
        if (n < errcap)
            snprintf(err + n, errcap - n, ")");
        return OOM_EINVAL;
    }
    if (o->nsets > RUN_MAX_SETS) {
        snprintf(err, errcap, "at most %d --set options", RUN_MAX_SETS);
        return OOM_EINVAL;
    }
    for (int i = 0; i < o->nsets; i++) {
        const scenario_param *p = runner_param(sc, o->sets[i].name, NULL);
        if (!p) {
            size_t n = (size_t)snprintf(err, errcap, "--set: scenario %s has no parameter '%s' (parameters:", sc->name,
                                        o->sets[i].name);
            for (size_t j = 0; j < sc->nparams && n < errcap; j++)
                n += (size_t)snprintf(err + n, errcap - n, " %s", sc->params[j].name);
            if (n < errcap)
                snprintf(err + n, errcap - n, ")");
            return OOM_EINVAL;
        }
        if (o->sets[i].value < p->min || o->sets[i].value > p->max) {
            snprintf(err, errcap, "--set %s: %lld is out of range (%lld to %lld)", p->name,
                     (long long)o->sets[i].value, (long long)p->min, (long long)p->max);
            return OOM_EINVAL;
        }
        for (int j = 0; j < i; j++) /* a second value for one parameter would silently win: refused */
            if (strcmp(o->sets[j].name, o->sets[i].name) == 0) {
                snprintf(err, errcap, "--set %s given twice (%lld, then %lld): give each parameter once", p->name,
                         (long long)o->sets[j].value, (long long)o->sets[i].value);
                return OOM_EINVAL;
            }
    }
    for (size_t i = 0; i < sc->nvariants; i++) {
        const scenario_variant *v = &sc->variants[i];
        if (!runner_selects(o, v))
            continue;
        alloc_conf c;
        if (variant_conf(o, v, &c, err, errcap) != OOM_OK)
            return OOM_EINVAL;
    }
    if (o->dry_run && o->backend == DEVICE_CUDA) {
        snprintf(err, errcap, "--dry-run runs on the sim backend; it cannot be combined with --backend cuda");
        return OOM_EINVAL;
    }
    return OOM_OK;
}

/* ---- running ----------------------------------------------------------------------------------------------- */

/* What a variant is before it runs: its name and settings (what a crashed variant is reported with). */
static void variant_prepare(const run_options *o, const scenario_variant *v, variant_result *res)
{
    memset(res, 0, sizeof *res);
    res->v = v;
    res->reproduced = true;
    res->fix_step = -1;
    alloc_conf c;
    char cerr[512];
    variant_conf(o, v, &c, cerr, sizeof cerr); /* validated already */
    alloc_conf_format(&c, res->alloc_conf, sizeof res->alloc_conf);
}

/* faultsweep's checks on one device of the variant, before it is closed: the first thing unclean goes to detail. */
static void fault_check_device(rt *x, int k, run_fault_findings *f)
{
    int64_t left = 0, ooms = 0;
    memstats_get(cachealloc_stats(x->ca), "allocated_bytes.all.current", &left);
    memstats_get(cachealloc_stats(x->ca), "num_ooms", &ooms);
    f->surfaced = f->surfaced || ooms > 0;
    hostalloc_usage hu;
    hostalloc_usage_get(x->ha, &hu);
    if (x->live_tensors || x->live_nodes || left || hu.live_blocks) {
        if (!f->detail[0])
            snprintf(f->detail, sizeof f->detail,
                     "device %d: not released: %zu tensors, %zu autograd nodes, %lld bytes allocated, %zu pinned "
                     "blocks handed out",
                     k, x->live_tensors, x->live_nodes, (long long)left, hu.live_blocks);
        f->released = false;
    }
    oom_status cs = cachealloc_check(x->ca);
    oom_status hs = cs == OOM_OK ? hostalloc_check(x->ha) : OOM_OK;
    if (cs != OOM_OK || hs != OOM_OK) {
        if (!f->detail[0])
            snprintf(f->detail, sizeof f->detail, "device %d: %s validator: %s", k,
                     cs != OOM_OK ? "cachealloc" : "hostalloc", oom_error_msg());
        f->valid = false;
    }
}

/* faultsweep's checks of the variant as a whole (res->outcome and res->status are final). */
static void fault_check(const scn *s, variant_result *res)
{
    run_fault_findings *f = &res->fault;
    f->device_calls = s->plan.device_calls;
    f->host_calls = __atomic_load_n(&s->plan.host_calls, __ATOMIC_SEQ_CST);
    f->device_fired = s->plan.device_fired > 0;
    f->host_fired = __atomic_load_n(&s->plan.host_fired, __ATOMIC_SEQ_CST) > 0;
    f->status_ok = res->outcome != OUTCOME_ERROR || res->status == OOM_ENOMEM_DEVICE ||
                   res->status == OOM_ENOMEM_PINNED;
    if (!f->status_ok)
        snprintf(f->detail, sizeof f->detail, "ended on %s, not an OOM: %.200s", oom_status_str(res->status),
                 res->error);
    f->released = f->valid = true;
    fault_check_device(s->r, 0, f);
    for (size_t k = 1; k <= res->ndevices; k++)
        fault_check_device(s->extra[k], (int)k, f);
    if (f->device_fired && !f->surfaced && !f->detail[0])
        snprintf(f->detail, sizeof f->detail, "the injected device failure did not surface as an OOM (num_ooms 0)");
}

/* What the variant's kind promises, checked on its outcome (kind_holds, and kind_text saying it): a fix fits the
 * budget at any parameters (one that runs out of memory does not fix: ✗, never "not reproduced"); a partial fix
 * saves bytes against the bug (scn_saved) and, at the scenario's budget, still runs out; where it fits, that
 * shortfall is not reproduced at these parameters. Bugs and myths: the scenario's own expectations say what they
 * show. After an error, a crash or a timeout there is no outcome to check. */
static void kind_check(scn *s, variant_result *res)
{
    res->kind_holds = true;
    res->kind_text[0] = '\0';
    if (res->outcome != OUTCOME_OK && res->outcome != OUTCOME_OOM)
        return;
    char cap[32], b[32];
    memstats_format_size(s->run->budget, cap, sizeof cap);
    const scn_oom_mark *m = res->noom_marks > (size_t)res->story_ooms ? &res->oom_marks[res->story_ooms] : NULL;
    const char *where = m ? m->what : res->ooms ? res->oom.what : "";
    if (res->v->kind == VARIANT_FIX) {
        res->kind_holds = res->outcome == OUTCOME_OK;
        if (res->kind_holds)
            snprintf(res->kind_text, sizeof res->kind_text, "a fix fits: it runs without an OOM in %s", cap);
        else
            snprintf(res->kind_text, sizeof res->kind_text,
                     "a fix fits, and this one runs out of memory in %s (%s): it does not fix at these parameters",
                     cap, where);
    } else if (res->v->kind == VARIANT_PARTIAL) {
        if (!res->saved_set && !res->reproduced)
            return; /* nothing to compare at these parameters, and the scenario said why */
        res->kind_holds = res->saved_set && res->saved > 0;
        char fate[224];
        if (res->outcome == OUTCOME_OOM)
            snprintf(fate, sizeof fate, "not enough: it still runs out of memory in %s (%s)", cap, where);
        else
            snprintf(fate, sizeof fate, "it fits in %s at these parameters", cap);
        if (!res->saved_set)
            snprintf(res->kind_text, sizeof res->kind_text,
                     "a partial fix says what it saves against the bug (scn_saved), and this one does not; %.223s", fate);
        else if (res->saved > 0)
            snprintf(res->kind_text, sizeof res->kind_text, "it lowers memory, %s less than the bug (%.199s); %.223s",
                     memstats_format_size((uint64_t)res->saved, b, sizeof b), res->saved_what, fate);
        else
            snprintf(res->kind_text, sizeof res->kind_text,
                     "a partial fix lowers memory, and at these parameters this one does not: %s more than the bug "
                     "(%.199s); %.223s",
                     memstats_format_size((uint64_t)-res->saved, b, sizeof b), res->saved_what, fate);
        if (res->outcome == OUTCOME_OK && res->reproduced) {
            /* the shortfall it shows does not happen: the reason, as scn_not_reproduced gives it */
            scn_not_reproduced(s, "it fits in %s at these parameters: the shortfall it shows at the scenario's own "
                                  "budget does not happen",
                               cap);
        }
    }
}

/* Run a prepared variant in this process. */
static void run_variant(const scenario *sc, const run_options *o, run_result *run, const scenario_variant *v,
                        variant_result *res)
{
    alloc_conf c;
    char cerr[512];
    variant_conf(o, v, &c, cerr, sizeof cerr); /* validated already */
    rt_options ro = {.backend = o->backend, .dry_run = o->dry_run, .budget_bytes = run->budget, .conf = &c,
                     .seed = o->seed, .real_addresses = o->real_addresses, .uncached = o->uncached};
    rt *r = NULL;
    oom_status st = rt_open(&ro, &r);
    if (st != OOM_OK) {
        res->outcome = OUTCOME_ERROR;
        res->status = st;
        snprintf(res->error, sizeof res->error, "cannot open the %s backend: %s", device_kind_str(o->backend),
                 oom_error_msg());
        return;
    }
    cachealloc_record_oom_layout(r->ca, true); /* the layout at an OOM goes into the results (plot.h) */
    if (!run->backend[0]) { /* where the variants ran, as the first runtime found it */
        snprintf(run->backend, sizeof run->backend, "%s", r->dev->ops->name);
        snprintf(run->device, sizeof run->device, "%s", r->dev->name);
        run->device_total = r->dev->total_bytes;
        run->cap = cachealloc_budget(r->ca);
        run->model_order = r->dev->kind == DEVICE_CUDA && device_orders_by_model(r->dev);
    }
    scn s = {.r = r, .sc = sc, .run = run, .params = run->params, .res = res, .o = o, .conf = c};
    if (o->fault) { /* counted from the first allocation of the variant */
        s.plan.device_at = o->fault->device_at;
        s.plan.host_at = o->fault->host_at;
        device_fault_plan_attach(r->dev, &s.plan);
    }
    double t0 = now_s(), c0 = cpu_now_s();
    st = sc->run(&s, v);
    res->seconds = now_s() - t0;
    res->cpu_seconds = cpu_now_s() - c0;
    devcomm_close(s.comm); /* NCCL's buffers go before the devices do */
    s.comm = NULL;
    for (size_t k = 1; k <= res->ndevices && rt_ok(r); k++) /* a failure left on another device */
        if (!rt_ok(s.extra[k]))
            rt_fail(r, rt_status(s.extra[k]), "device %zu: %s", k, rt_message(s.extra[k]));
    if (st != OOM_OK || !rt_ok(r)) {
        res->outcome = OUTCOME_ERROR;
        res->status = rt_ok(r) ? st : rt_status(r);
        snprintf(res->error, sizeof res->error, "%s", rt_ok(r) ? oom_status_str(st) : rt_message(r));
        if (res->status == OOM_ECUDA) { /* the CUDA context may be lost (a sticky error): the process is done */
            res->outcome = OUTCOME_CRASHED;
            snprintf(res->error, sizeof res->error, "crashed: CUDA error: %.1200s",
                     rt_ok(r) ? oom_status_str(st) : rt_message(r));
        }
    } else {
        res->outcome = res->ooms > res->story_ooms ? OUTCOME_OOM : OUTCOME_OK;
    }
    /* every variant ends clean: a scenario that leaks would misreport its own numbers */
    int64_t left = scn_stat(&s, "allocated_bytes.all.current");
    scn_expect(&s, r->live_tensors == 0 && r->live_nodes == 0 && left == 0,
               "ends with every tensor released (%zu tensors, %zu autograd nodes, %lld bytes left)", r->live_tensors,
               r->live_nodes, (long long)left);
    if (o->fault)
        fault_check(&s, res);
    for (size_t k = 1; k <= res->ndevices; k++) {
        rt *x = s.extra[k];
        int64_t xleft = scn_stat_device(&s, (int)k, "allocated_bytes.all.current");
        scn_expect(&s, x->live_tensors == 0 && x->live_nodes == 0 && xleft == 0,
                   "device %zu ends with every tensor released (%zu tensors, %zu autograd nodes, %lld bytes left)", k,
                   x->live_tensors, x->live_nodes, (long long)xleft);
        res->devices[k - 1].stats = *cachealloc_stats(x->ca);
        rt_close(x);
    }
    res->stats = *cachealloc_stats(r->ca);
    res->expected = res->outcome == OUTCOME_OK || res->outcome == OUTCOME_OOM;
    for (size_t i = 0; i < res->nexpect; i++)
        res->expected = res->expected && res->expect[i].holds;
    kind_check(&s, res);
    /* A kind is a promise at the scenario's own parameters and budget, at every scale (design.md); a user's --set
     * or --budget explores past it: a kind that does not hold there is shown (✗ with its reason), not a failure.
     * But a fix promises to fit at any budget: one that runs out of memory under --budget fails the run. */
    res->kind_promised = o->nsets == 0 && (o->budget == 0 || res->v->kind == VARIANT_FIX);
    res->passed = res->expected && (res->kind_holds || !res->kind_promised);
    rt_close(r);
}

/* One variant to run, as isolate_variant's child (or this process) runs it. */
typedef struct variant_job {
    const scenario *sc;
    const run_options *o;
    const scenario_variant *v;
} variant_job;

static void variant_job_run(void *arg, variant_result *res, run_result *run)
{
    const variant_job *j = arg;
    run_variant(j->sc, j->o, run, j->v, res);
#ifdef RUNNER_LSAN
    if (j->o->fault) { /* every runtime is closed: what is still allocated and unreachable is a leak */
        res->fault.leak_checked = true;
        res->fault.no_leak = __lsan_do_recoverable_leak_check() == 0;
        if (!res->fault.no_leak && !res->fault.detail[0])
            snprintf(res->fault.detail, sizeof res->fault.detail,
                     "LeakSanitizer found a host leak (its report is on stderr)");
    }
#else
    res->fault.no_leak = true;
#endif
}

/* Everything before the variants run: validate, learn the device, fill out's fields (runner_run's errors). */
static oom_status runner_prepare(const scenario *sc, const run_options *o, run_result *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    oom_status st = runner_validate(sc, o, err, errcap);
    if (st != OOM_OK)
        return st;
    /* the GPU as a child process sees it: this process stays free of CUDA, so each variant's child can use it */
    const device_cuda_info *gpu = device_cuda_probe();
    if (o->backend == DEVICE_CUDA && !gpu->visible) {
        snprintf(err, errcap, "--backend cuda: %s",
                 device_cuda_built() ? "no GPU is visible" : "the cuda backend is not built into this binary");
        return OOM_ENODEV;
    }
    out->sc = sc;
    out->scale = runner_resolve_scale(o);
    out->budget = o->budget                                       ? o->budget
                  : out->scale == SCALE_CI && sc->ci_budget != 0 ? sc->ci_budget
                                                                  : sc->default_budget;
    out->dry_run = o->dry_run;
    /* set_per_process_memory_fraction(budget / total) refuses a fraction above 1 */
    bool on_cuda = !o->dry_run && (o->backend == DEVICE_CUDA || (o->backend == DEVICE_AUTO && gpu->visible));
    size_t total = gpu->total_bytes;
    if (!on_cuda) {
        device_options dopt = {.kind = DEVICE_SIM, .sim_dry_run = true};
        device *dev = NULL;
        if (device_open(&dopt, &dev) != OOM_OK) {
            snprintf(err, errcap, "cannot open the sim backend: %s", oom_error_msg());
            return OOM_ENODEV;
        }
        total = dev->total_bytes;
        device_close(dev);
    }
    if (out->budget > total) {
        char b[32], t[32];
        snprintf(err, errcap,
                 "%s %s is more than the device's %s (%zu bytes): set_per_process_memory_fraction takes a fraction "
                 "of at most 1",
                 o->budget ? "--budget" : "the scenario's budget", memstats_format_size(out->budget, b, sizeof b),
                 memstats_format_size(total, t, sizeof t), total);
        return OOM_EINVAL;
    }
    if (cachealloc_budget_allows_nothing(out->budget, total, o->budget ? "--budget" : "the scenario's budget", err,
                                         errcap))
        return OOM_EINVAL;
    out->device_total = total; /* the first variant's allocator confirms both (run_variant) */
    out->cap = cachealloc_budget_cap(out->budget, total);
    snprintf(out->conf_source, sizeof out->conf_source, "%s", o->alloc_conf_source ? o->alloc_conf_source : "default");
    snprintf(out->conf_user, sizeof out->conf_user, "%s", o->alloc_conf ? o->alloc_conf : "");
    out->uncached = o->uncached;
    snprintf(out->uncached_source, sizeof out->uncached_source, "%s", o->uncached_source ? o->uncached_source : "");
    for (size_t i = 0; i < sc->nparams; i++)
        out->params[i] = scenario_param_default(&sc->params[i], out->scale);
    for (int i = 0; i < o->nsets; i++) {
        size_t idx = 0;
        if (runner_param(sc, o->sets[i].name, &idx))
            out->params[idx] = o->sets[i].value;
    }
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(out->started, sizeof out->started, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    out->variants = calloc(sc->nvariants, sizeof *out->variants);
    if (!out->variants) {
        snprintf(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    out->passed = true;
    if (o->no_fork)
        out->isolation = "--no-fork: the variants ran in this process (no crash or hang isolation, no timeout)";
    else if (on_cuda && device_cuda_initialised())
        out->isolation = "CUDA was initialised in this process before the run, so a child could not use it: the "
                         "variants ran in this process (no crash or hang isolation, no timeout)";
    return OOM_OK;
}

/* A variant's time limit, and where it comes from (for the timeout's message). */
static double variant_timeout(const scenario *sc, const run_options *o, const char **limit)
{
    double timeout = o->timeout_s > 0 ? o->timeout_s : o->timeout_s < 0 ? 0 : sc->timeout_s ? (double)sc->timeout_s
                                                                                            : RUN_DEFAULT_TIMEOUT_S;
    *limit = o->timeout_s > 0 ? "--timeout"
             : sc->timeout_s  ? "the scenario's limit; --timeout SECONDS changes it"
                              : "the default limit; --timeout SECONDS changes it";
    return timeout;
}

int runner_jobs(const run_options *o, size_t budget, char *why, size_t whycap)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = o->jobs > 0 ? o->jobs : cores > 0 ? (int)(cores > RUN_MAX_JOBS ? RUN_MAX_JOBS : cores) : 1;
    snprintf(why, whycap, o->jobs > 0 ? "--jobs" : "the online cores");
    if (o->no_fork) {
        snprintf(why, whycap, "--no-fork runs the variants in this process, one at a time");
        return 1;
    }
    const device_cuda_info *gpu = device_cuda_probe();
    bool on_cuda = !o->dry_run && (o->backend == DEVICE_CUDA || (o->backend == DEVICE_AUTO && gpu->visible));
    if (on_cuda && gpu->free_bytes) { /* each child holds a context and at most its budget's cap */
        size_t each = budget + DEVICE_SIM_CONTEXT_BYTES;
        size_t fit = gpu->free_bytes / each;
        if (fit < 1)
            fit = 1;
        if (fit < (size_t)n) {
            char f[32], b[32];
            snprintf(why, whycap, "the GPU's %s free over %s a process: the largest budget and a context",
                     memstats_format_size(gpu->free_bytes, f, sizeof f), memstats_format_size(each, b, sizeof b));
            n = (int)fit;
        }
    }
    return n;
}

/* One variant of one run, as the batch schedules it. */
typedef struct batch_variant {
    variant_job job;
    size_t run;
} batch_variant;

oom_status runner_run_batch(const scenario *const *scs, const run_options *const *opts, size_t n, run_result *outs,
                            int jobs, char *err, size_t errcap)
{
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        oom_status st = runner_prepare(scs[k], opts[k], &outs[k], err, errcap);
        if (st != OOM_OK) {
            for (size_t j = 0; j <= k; j++)
                run_result_free(&outs[j]);
            return st;
        }
        for (size_t i = 0; i < scs[k]->nvariants; i++)
            total += runner_selects(opts[k], &scs[k]->variants[i]);
    }
    batch_variant *bv = calloc(total ? total : 1, sizeof *bv);
    isolate_job *ij = calloc(total ? total : 1, sizeof *ij);
    if (!bv || !ij) {
        free(bv);
        free(ij);
        for (size_t k = 0; k < n; k++)
            run_result_free(&outs[k]);
        snprintf(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    /* each variant's result in its run's order; those that run in this process run now, the rest as children */
    size_t nforked = 0, at = 0;
    for (size_t k = 0; k < n; k++) {
        const scenario *sc = scs[k];
        const char *limit = NULL;
        double timeout = variant_timeout(sc, opts[k], &limit);
        for (size_t i = 0; i < sc->nvariants; i++) {
            const scenario_variant *v = &sc->variants[i];
            if (!runner_selects(opts[k], v))
                continue;
            variant_result *res = &outs[k].variants[outs[k].nvariants++];
            variant_prepare(opts[k], v, res);
            bv[at] = (batch_variant){.job = {sc, opts[k], v}, .run = k};
            if (outs[k].isolation) {
                variant_job_run(&bv[at].job, res, &outs[k]);
            } else {
                ij[nforked++] = (isolate_job){.fn = variant_job_run, .arg = &bv[at].job, .timeout_s = timeout,
                                              .limit_source = limit, .res = res, .run = &outs[k]};
            }
            at++;
        }
    }
    isolate_variants(ij, nforked, jobs);
    for (size_t j = 0; j < nforked; j++) { /* the backend fields of each run's first child that reported them */
        run_result *out = ij[j].run;
        if (!out->backend[0] && ij[j].found.backend[0])
            isolate_found_merge(out, &ij[j].found);
    }
    for (size_t k = 0; k < n; k++) {
        run_result *out = &outs[k];
        for (size_t i = 0; i < out->nvariants; i++) {
            const variant_result *res = &out->variants[i];
            out->crashed += res->outcome == OUTCOME_CRASHED;
            out->timed_out += res->outcome == OUTCOME_TIMEOUT;
            out->passed = out->passed && res->passed;
        }
        if (!out->backend[0]) { /* no variant reported where it ran (each crashed): where they were to run */
            const device_cuda_info *gpu = device_cuda_probe();
            bool on_cuda = !opts[k]->dry_run &&
                           (opts[k]->backend == DEVICE_CUDA || (opts[k]->backend == DEVICE_AUTO && gpu->visible));
            snprintf(out->backend, sizeof out->backend, "%s", on_cuda ? "cuda" : "sim");
            snprintf(out->device, sizeof out->device, "%s", on_cuda ? gpu->name : "sim");
        }
    }
    free(bv);
    free(ij);
    return OOM_OK;
}

oom_status runner_run(const scenario *sc, const run_options *o, run_result *out, char *err, size_t errcap)
{
    char why[RUN_JOBS_WHY_MAX];
    size_t budget = o->budget ? o->budget : sc->default_budget > sc->ci_budget ? sc->default_budget : sc->ci_budget;
    return runner_run_batch(&sc, &o, 1, out, runner_jobs(o, budget, why, sizeof why), err, errcap);
}

void run_result_free(run_result *r)
{
    for (size_t i = 0; i < r->nvariants; i++) {
        free(r->variants[i].samples);
        free(r->variants[i].expect);
        free(r->variants[i].metrics);
        free(r->variants[i].notes);
        free(r->variants[i].oom_marks);
        cachealloc_snapshot_free(r->variants[i].oom_layout, r->variants[i].oom_nlayout);
        cachealloc_snapshot_free(r->variants[i].fix_layout, r->variants[i].fix_nlayout);
        for (size_t k = 0; k < r->variants[i].ndevices; k++)
            free(r->variants[i].devices[k].samples);
        free(r->variants[i].devices);
    }
    free(r->variants);
    memset(r, 0, sizeof *r);
}
