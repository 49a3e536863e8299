/* sweep.c - a parameter swept over powers of two, each value in fresh runtimes, and the largest value that fits.
 * See sweep.h. */
#include "run/sweep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/fail.h"

/* An integer spanning exactly [s, end). */
static bool parse_int(const char *s, const char *end, int64_t *out)
{
    if (s == end)
        return false;
    char buf[32];
    if ((size_t)(end - s) >= sizeof buf)
        return false;
    memcpy(buf, s, (size_t)(end - s));
    buf[end - s] = '\0';
    char *stop = NULL;
    errno = 0;
    long long v = strtoll(buf, &stop, 10);
    if (errno || !stop || *stop)
        return false;
    *out = v;
    return true;
}

bool sweep_parse(const char *arg, char *param, size_t cap, int64_t *lo, int64_t *hi)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) >= cap)
        return false;
    const char *dots = strstr(eq + 1, "..");
    if (!dots || !parse_int(eq + 1, dots, lo) || !parse_int(dots + 2, dots + 2 + strlen(dots + 2), hi))
        return false;
    memcpy(param, arg, (size_t)(eq - arg));
    param[eq - arg] = '\0';
    return true;
}

/* The smallest power of two >= lo, or 0 when none is <= hi. */
static int64_t first_power(int64_t lo, int64_t hi)
{
    int64_t p = 1;
    while (p < lo && p <= INT64_MAX / 2)
        p *= 2;
    return p >= lo && p <= hi ? p : 0;
}

oom_status sweep_validate(const scenario *sc, const run_options *o, const char *param, int64_t lo, int64_t hi,
                          char *err, size_t errcap)
{
    size_t idx = 0;
    const scenario_param *p = runner_param(sc, param, &idx);
    if (!p) {
        size_t n = (size_t)snprintf(err, errcap, "--sweep: scenario %s has no parameter '%.64s' (parameters:",
                                    sc->name, param);
        for (size_t j = 0; j < sc->nparams && n < errcap; j++)
            n += (size_t)snprintf(err + n, errcap - n, " %s", sc->params[j].name);
        if (n < errcap)
            snprintf(err + n, errcap - n, ")");
        return OOM_EINVAL;
    }
    if (lo > hi) {
        snprintf(err, errcap, "--sweep %s: %lld..%lld is empty (LO..HI with LO <= HI)", p->name, (long long)lo,
                 (long long)hi);
        return OOM_EINVAL;
    }
    if (lo < p->min || hi > p->max) {
        snprintf(err, errcap, "--sweep %s: %lld..%lld is out of range (%lld to %lld)", p->name, (long long)lo,
                 (long long)hi, (long long)p->min, (long long)p->max);
        return OOM_EINVAL;
    }
    if (!first_power(lo, hi)) {
        snprintf(err, errcap, "--sweep %s: no power of two in %lld..%lld", p->name, (long long)lo, (long long)hi);
        return OOM_EINVAL;
    }
    for (int i = 0; i < o->nsets; i++) {
        if (strcmp(o->sets[i].name, p->name) == 0) {
            snprintf(err, errcap, "--sweep %s and --set %s: the sweep sets it; give one", p->name, p->name);
            return OOM_EINVAL;
        }
    }
    if (o->nsets >= RUN_MAX_SETS) {
        snprintf(err, errcap, "--sweep: at most %d --set options beside it", RUN_MAX_SETS - 1);
        return OOM_EINVAL;
    }
    return runner_validate(sc, o, err, errcap);
}

/* ---- running ---------------------------------------------------------------------------------------------- */

static bool fits(const sweep_point *p) { return p->outcome == OUTCOME_OK; }

/* Every run made (the series and both searches): the smallest value that fits above one that does not, and the
 * largest value below it that does not. accelerate's search can land above the bisection's answer this way (the
 * bisection assumes that what fits at a value fits below it). */
static void non_monotonic_window(sweep_variant *sv)
{
    for (size_t i = 0; i < sv->nknown; i++) {
        const sweep_point *b = &sv->known[i];
        if (!fits(b) || (!sv->monotonic && sv->window_fits && b->value >= sv->window_fits))
            continue;
        int64_t below = 0; /* the largest value under b that does not fit */
        for (size_t j = 0; j < sv->nknown; j++)
            if (!fits(&sv->known[j]) && sv->known[j].value < b->value && sv->known[j].value > below)
                below = sv->known[j].value;
        if (below) {
            sv->monotonic = false;
            sv->window_fits = b->value;
            sv->window_fails = below;
        }
    }
}

/* The run of sv's variant at value: made now in a fresh runtime, or the one made before. NULL on a failure that
 * is not a measured result (err says why). */
static const sweep_point *known(const sweep_variant *sv, int64_t value)
{
    for (size_t i = 0; i < sv->nknown; i++)
        if (sv->known[i].value == value)
            return &sv->known[i];
    return NULL;
}

/* The options of sv's run at value. */
static run_options probe_options(const sweep_result *res, const sweep_variant *sv, const run_options *o,
                                 int64_t value)
{
    run_options one = *o;
    one.variants[0] = sv->v->name;
    one.nvariants = 1;
    one.sets[one.nsets].name = res->sc->params[res->param].name;
    one.sets[one.nsets].value = value;
    one.nsets++;
    return one;
}

static const sweep_point *record(sweep_result *res, sweep_variant *sv, int64_t value, run_result *rr);

static const sweep_point *probe(sweep_result *res, sweep_variant *sv, const run_options *o, int64_t value, char *err,
                                size_t errcap)
{
    const sweep_point *had = known(sv, value);
    if (had)
        return had;
    run_options one = probe_options(res, sv, o, value);
    run_result rr;
    if (runner_run(res->sc, &one, &rr, err, errcap) != OOM_OK)
        return NULL;
    return record(res, sv, value, &rr);
}

/* Record the run rr of sv at value (and free it); the first run recorded gives where the runs ran. */
static const sweep_point *record(sweep_result *res, sweep_variant *sv, int64_t value, run_result *rr)
{
    if (res->runs++ == 0) { /* where the runs ran, as the first one found it */
        memcpy(res->backend, rr->backend, sizeof res->backend);
        memcpy(res->device, rr->device, sizeof res->device);
        res->budget = rr->budget;
        res->scale = rr->scale;
        res->dry_run = rr->dry_run;
        res->uncached = rr->uncached;
        memcpy(res->uncached_source, rr->uncached_source, sizeof res->uncached_source);
        memcpy(res->started, rr->started, sizeof res->started);
        memcpy(res->params, rr->params, sizeof res->params);
        res->params[res->param] = scenario_param_default(&res->sc->params[res->param], rr->scale);
    }
    const variant_result *vr = &rr->variants[0];
    if (sv->nknown == sv->capknown) {
        sv->capknown = sv->capknown ? sv->capknown * 2 : 32;
        sv->known = xrealloc(sv->known, sv->capknown * sizeof *sv->known);
    }
    sweep_point *p = &sv->known[sv->nknown++];
    memset(p, 0, sizeof *p);
    p->value = value;
    p->outcome = vr->outcome;
    memstats_get(&vr->stats, "allocated_bytes.all.peak", &p->peak_allocated);
    memstats_get(&vr->stats, "reserved_bytes.all.peak", &p->peak_reserved);
    p->reproduced = vr->reproduced;
    /* the scenario's own expectations: a fix that runs out at a value is what a sweep explores, not a failure */
    p->passed = vr->expected;
    if (vr->ooms)
        snprintf(p->oom_what, sizeof p->oom_what, "%s", vr->oom.what);
    if (vr->outcome == OUTCOME_ERROR)
        snprintf(p->error, sizeof p->error, "%.150s", vr->error);
    res->passed = res->passed && vr->expected;
    run_result_free(rr);
    return p;
}

/* A search's run: recorded, and whether it fits. -1: the run failed (err says why). */
static int search_probe(sweep_result *res, sweep_variant *sv, const run_options *o, sweep_search *s, int64_t value,
                        char *err, size_t errcap)
{
    const sweep_point *p = probe(res, sv, o, value, err, errcap);
    if (!p)
        return -1;
    if (s->nruns < (int)(sizeof s->runs / sizeof s->runs[0])) {
        s->runs[s->nruns] = value;
        s->fits[s->nruns++] = fits(p);
    }
    return fits(p);
}

/* find_executable_batch_size(starting_batch_size=hi): on an OOM, batch_size = int(batch_size * 0.9). */
static oom_status search_accelerate(sweep_result *res, sweep_variant *sv, const run_options *o, char *err,
                                    size_t errcap)
{
    sweep_search *s = &sv->accelerate;
    int64_t min = res->sc->params[res->param].min;
    s->start = res->hi;
    for (int64_t b = res->hi; b >= 1 && b >= min && s->nruns < 128; b = (int64_t)((double)b * SWEEP_FACTOR)) {
        int f = search_probe(res, sv, o, s, b, err, errcap);
        if (f < 0)
            return OOM_EINVAL;
        if (f) {
            s->found = b;
            break;
        }
    }
    return OOM_OK;
}

/* The largest value that fits: bisection between a value that fits and one that does not. */
static oom_status search_bisection(sweep_result *res, sweep_variant *sv, const run_options *o, char *err,
                                   size_t errcap)
{
    sweep_search *s = &sv->bisection;
    size_t first_fail = sv->nseries;
    for (size_t i = 0; i < sv->nseries && first_fail == sv->nseries; i++)
        if (!fits(&sv->series[i]))
            first_fail = i;
    int64_t a, b;
    if (first_fail == sv->nseries) { /* every power of two fits: the top of the range? */
        a = sv->series[sv->nseries - 1].value;
        b = res->hi;
        if (a == b) {
            s->found = a;
            return OOM_OK;
        }
        int f = search_probe(res, sv, o, s, b, err, errcap);
        if (f < 0)
            return OOM_EINVAL;
        if (f) {
            s->found = b;
            return OOM_OK;
        }
    } else if (first_fail == 0) { /* the smallest power of two does not fit: does the bottom of the range? */
        a = res->lo;
        b = sv->series[0].value;
        if (a == b) {
            s->found = 0;
            return OOM_OK;
        }
        int f = search_probe(res, sv, o, s, a, err, errcap);
        if (f < 0)
            return OOM_EINVAL;
        if (!f) {
            s->found = 0;
            return OOM_OK;
        }
    } else {
        a = sv->series[first_fail - 1].value;
        b = sv->series[first_fail].value;
    }
    while (b - a > 1) { /* a fits, b does not */
        int64_t m = a + (b - a) / 2;
        int f = search_probe(res, sv, o, s, m, err, errcap);
        if (f < 0)
            return OOM_EINVAL;
        if (f)
            a = m;
        else
            b = m;
    }
    s->found = a;
    return OOM_OK;
}

oom_status runner_sweep(const scenario *sc, const run_options *o, const char *param, int64_t lo, int64_t hi,
                        sweep_result *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    oom_status st = sweep_validate(sc, o, param, lo, hi, err, errcap);
    if (st != OOM_OK)
        return st;
    if (o->backend == DEVICE_CUDA && !device_cuda_probe()->visible) { /* the runner forks: no CUDA here */
        snprintf(err, errcap, "--backend cuda: %s",
                 device_cuda_built() ? "no GPU is visible" : "the cuda backend is not built into this binary");
        return OOM_ENODEV;
    }
    out->sc = sc;
    runner_param(sc, param, &out->param);
    out->lo = lo;
    out->hi = hi;
    out->passed = true;
    out->variants = calloc(sc->nvariants, sizeof *out->variants);
    if (!out->variants) {
        snprintf(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    for (size_t i = 0; i < sc->nvariants; i++) {
        if (!runner_selects(o, &sc->variants[i]))
            continue;
        sweep_variant *sv = &out->variants[out->nvariants++];
        sv->v = &sc->variants[i];
        sv->monotonic = true;
    }
    size_t npow = 0;
    for (int64_t p = first_power(lo, hi); p && p <= hi; p = p <= INT64_MAX / 2 ? p * 2 : 0)
        npow++;
    for (size_t k = 0; k < out->nvariants; k++)
        out->variants[k].series = calloc(npow, sizeof(sweep_point));
    /* the series: every value, each selected variant at it, run --jobs at a time and recorded in this order */
    size_t nrun = npow * out->nvariants, at = 0;
    const scenario **scs = calloc(nrun ? nrun : 1, sizeof *scs);
    run_options *opts = calloc(nrun ? nrun : 1, sizeof *opts);
    const run_options **optp = calloc(nrun ? nrun : 1, sizeof *optp);
    run_result *rr = calloc(nrun ? nrun : 1, sizeof *rr);
    for (int64_t p = first_power(lo, hi); scs && opts && optp && rr && p && p <= hi;
         p = p <= INT64_MAX / 2 ? p * 2 : 0) {
        for (size_t k = 0; k < out->nvariants; k++, at++) {
            scs[at] = sc;
            opts[at] = probe_options(out, &out->variants[k], o, p);
            optp[at] = &opts[at];
        }
    }
    size_t budget = o->budget                                        ? o->budget
                    : runner_resolve_scale(o) == SCALE_CI && sc->ci_budget ? sc->ci_budget
                                                                           : sc->default_budget;
    out->jobs = runner_jobs(o, budget, out->jobs_why, sizeof out->jobs_why);
    bool ran = scs && opts && optp && rr && runner_run_batch(scs, optp, nrun, rr, out->jobs, err, errcap) == OOM_OK;
    if (!scs || !opts || !optp || !rr)
        snprintf(err, errcap, "out of host memory");
    at = 0;
    for (int64_t p = first_power(lo, hi); ran && p && p <= hi; p = p <= INT64_MAX / 2 ? p * 2 : 0) {
        for (size_t k = 0; k < out->nvariants; k++, at++) {
            sweep_variant *sv = &out->variants[k];
            const sweep_point *pt = record(out, sv, p, &rr[at]);
            if (!sv->series) {
                ran = false;
                snprintf(err, errcap, "out of host memory");
                break;
            }
            sv->series[sv->nseries++] = *pt;
        }
    }
    for (size_t j = at; ran == false && j < nrun && rr && scs; j++) /* what was not recorded */
        run_result_free(&rr[j]);
    free(scs);
    free(opts);
    free(optp);
    free(rr);
    if (!ran) {
        sweep_result_free(out);
        return OOM_EINVAL;
    }
    for (size_t k = 0; k < out->nvariants; k++) {
        sweep_variant *sv = &out->variants[k];
        bool seen_fail = false;
        for (size_t i = 0; i < sv->nseries; i++) {
            if (!fits(&sv->series[i]))
                seen_fail = true;
            else if (seen_fail)
                sv->monotonic = false;
        }
        if (search_accelerate(out, sv, o, err, errcap) != OOM_OK ||
            search_bisection(out, sv, o, err, errcap) != OOM_OK) {
            sweep_result_free(out);
            return OOM_EINVAL;
        }
        non_monotonic_window(sv);
    }
    return OOM_OK;
}

void sweep_result_free(sweep_result *r)
{
    for (size_t k = 0; k < r->nvariants; k++) {
        free(r->variants[k].series);
        free(r->variants[k].known);
    }
    free(r->variants);
    memset(r, 0, sizeof *r);
}
