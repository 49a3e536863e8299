/* faultsweep.c - SQLite's OOM loop over scenario variants (see faultsweep.h). */
#include "run/faultsweep.h"

#include <stdlib.h>
#include <string.h>

static bool add_failure(faultsweep_row *row, const char *kind, uint64_t at, const char *what)
{
    faultsweep_failure *f = realloc(row->failures, (row->nfailures + 1) * sizeof *f);
    if (!f)
        return false;
    row->failures = f;
    f = &row->failures[row->nfailures++];
    f->kind = kind;
    f->at = at;
    /* The detail is cut to the field: a bounded copy, not snprintf's "%s" (which -O3 reads as an accidental cut). */
    size_t n = strnlen(what, sizeof f->what - 1);
    memcpy(f->what, what, n);
    f->what[n] = '\0';
    return true;
}

/* Why a finished point is not clean; NULL when it is. */
static const char *unclean(const variant_result *vr)
{
    if (vr->outcome == OUTCOME_CRASHED || vr->outcome == OUTCOME_TIMEOUT)
        return vr->error;
    if (vr->outcome == OUTCOME_ERROR && vr->status != OOM_ENOMEM_DEVICE && vr->status != OOM_ENOMEM_PINNED)
        return vr->error; /* also a runtime that could not be opened, which the checks never saw */
    return vr->fault.detail[0] ? vr->fault.detail : NULL;
}

/* The options of one run of variant v under fault f. */
static run_options point_options(const faultsweep_options *o, const scenario_variant *v, const run_fault *f)
{
    run_options one = o->run;
    one.nvariants = 1;
    one.variants[0] = v->name;
    one.fault = f;
    one.no_fork = false; /* a crash at a point is a finding, not the end of the sweep */
    return one;
}

/* One run of variant v under fault f: its result in *rr (for the caller to free). */
static oom_status run_point(const scenario *sc, const faultsweep_options *o, const scenario_variant *v,
                            const run_fault *f, run_result *rr, char *err, size_t errcap)
{
    run_options one = point_options(o, v, f);
    return runner_run(sc, &one, rr, err, errcap);
}

/* Points run together: up to this many at a time, past the last the run without a fault reaches by one. */
#define FAULTSWEEP_BATCH 64

/* Points n = 1, 1 + stride, ... of one kind, until a run does not reach its fault. The points expected to fire
 * (up to baseline_calls, and the first past it) run in batches of jobs at once; each batch's results are taken in
 * point order and the sweep stops at the same point, with the same rows, as one point at a time would (a point
 * run past the stop is dropped: each run is a fork of this process and independent of the others). */
static oom_status sweep_kind(const scenario *sc, const faultsweep_options *o, faultsweep_row *row, bool host,
                             uint64_t baseline_calls, int jobs, char *err, size_t errcap)
{
    uint64_t stride = o->stride > 1 ? o->stride : 1;
    uint64_t *points = host ? &row->host_points : &row->device_points;
    const char *kind = host ? "host" : "device";
    if (baseline_calls == 0) /* a run with the fault armed is the run without one: nothing to fail */
        return OOM_OK;
    run_fault f[FAULTSWEEP_BATCH];
    run_options opts[FAULTSWEEP_BATCH];
    const run_options *optp[FAULTSWEEP_BATCH];
    const scenario *scs[FAULTSWEEP_BATCH];
    run_result rr[FAULTSWEEP_BATCH];
    for (uint64_t n = 1;;) {
        if (n > FAULTSWEEP_MAX_POINT) {
            if (!add_failure(row, kind, n, "the sweep did not stop: every run reached its fault"))
                return OOM_ENOMEM_HOST;
            return OOM_OK;
        }
        size_t nb = 0; /* this batch: n, n + stride, ... through the first point past baseline_calls */
        for (uint64_t p = n; nb < FAULTSWEEP_BATCH && p <= FAULTSWEEP_MAX_POINT; p += stride) {
            f[nb] = (run_fault){.device_at = host ? 0 : p, .host_at = host ? p : 0};
            opts[nb] = point_options(o, row->v, &f[nb]);
            optp[nb] = &opts[nb];
            scs[nb] = sc;
            nb++;
            if (p > baseline_calls || nb >= (size_t)jobs * 8)
                break;
        }
        oom_status st = runner_run_batch(scs, optp, nb, rr, jobs, err, errcap);
        if (st != OOM_OK)
            return st;
        bool stop = false, ok = true;
        for (size_t k = 0; k < nb; k++, n += stride) {
            if (stop || !ok || n > FAULTSWEEP_MAX_POINT) { /* past the stop: dropped */
                run_result_free(&rr[k]);
                continue;
            }
            const variant_result *vr = &rr[k].variants[0];
            bool finished = vr->outcome != OUTCOME_CRASHED && vr->outcome != OUTCOME_TIMEOUT;
            bool fired = host ? vr->fault.host_fired : vr->fault.device_fired;
            /* a point that crashed or hung counts while the run without a fault gets that far */
            bool counts = finished ? fired : n <= baseline_calls;
            const char *why = counts ? unclean(vr) : NULL;
            ok = !why || add_failure(row, kind, n, why);
            *points += counts;
            stop = !counts;
            run_result_free(&rr[k]);
        }
        if (!ok)
            return OOM_ENOMEM_HOST;
        if (stop)
            return OOM_OK;
    }
}

oom_status faultsweep_run(const scenario *const *list, size_t n, const faultsweep_options *o, faultsweep_result *out,
                          char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    out->stride = o->stride > 1 ? o->stride : 1;
    out->scale = runner_resolve_scale(&o->run);
    out->passed = true;
    size_t budget = 0;
    for (size_t k = 0; k < n; k++) { /* every scenario's options are checked before anything runs */
        if (runner_validate(list[k], &o->run, err, errcap) != OOM_OK)
            return OOM_EINVAL;
        size_t b = o->run.budget                                ? o->run.budget
                   : list[k]->default_budget > list[k]->ci_budget ? list[k]->default_budget
                                                                  : list[k]->ci_budget;
        budget = b > budget ? b : budget;
    }
    out->jobs = runner_jobs(&o->run, budget, out->jobs_why, sizeof out->jobs_why);
    size_t cap = 0;
    for (size_t k = 0; k < n; k++)
        cap += list[k]->nvariants;
    out->rows = calloc(cap ? cap : 1, sizeof *out->rows);
    if (!out->rows) {
        snprintf(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    for (size_t k = 0; k < n; k++) {
        const scenario *sc = list[k];
        for (size_t i = 0; i < sc->nvariants; i++) {
            const scenario_variant *v = &sc->variants[i];
            bool selected = o->run.nvariants == 0;
            for (int j = 0; j < o->run.nvariants && !selected; j++)
                selected = strcmp(o->run.variants[j], v->name) == 0;
            if (!selected)
                continue;
            faultsweep_row *row = &out->rows[out->nrows++];
            row->sc = sc;
            row->v = v;
            /* the run without a fault: what there is to fail, and whether it is clean itself */
            run_fault none = {0};
            run_result rr;
            oom_status st = run_point(sc, o, v, &none, &rr, err, errcap);
            if (st != OOM_OK) {
                faultsweep_result_free(out);
                return st;
            }
            const variant_result *vr = &rr.variants[0];
            if (!out->backend[0])
                snprintf(out->backend, sizeof out->backend, "%s", rr.backend);
            row->device_allocs = vr->fault.device_calls;
            row->host_allocs = vr->fault.host_calls;
            const char *why = unclean(vr);
            bool ok = !why || add_failure(row, "none", 0, why);
            run_result_free(&rr);
            st = ok ? OOM_OK : OOM_ENOMEM_HOST;
            if (st == OOM_OK && o->device)
                st = sweep_kind(sc, o, row, false, row->device_allocs, out->jobs, err, errcap);
            if (st == OOM_OK && o->host)
                st = sweep_kind(sc, o, row, true, row->host_allocs, out->jobs, err, errcap);
            if (st != OOM_OK) {
                if (st == OOM_ENOMEM_HOST)
                    snprintf(err, errcap, "out of host memory");
                faultsweep_result_free(out);
                return st;
            }
            out->passed = out->passed && row->nfailures == 0;
        }
    }
    return OOM_OK;
}

void faultsweep_table(const faultsweep_result *r, FILE *out)
{
    if (r->stride > 1)
        fprintf(out, "faultsweep: backend %s, scale %s, one fault point in %llu (--stride)\n", r->backend,
                run_scale_str(r->scale), (unsigned long long)r->stride);
    else
        fprintf(out, "faultsweep: backend %s, scale %s, every fault point\n", r->backend, run_scale_str(r->scale));
    if (r->jobs > 1)
        fprintf(out, "jobs: %d (%s)\n", r->jobs, r->jobs_why);
    fprintf(out, "\n%-18s %-26s %14s %12s %9s\n", "scenario", "variant", "device points", "host points", "failures");
    uint64_t points = 0;
    size_t failures = 0;
    for (size_t i = 0; i < r->nrows; i++) {
        const faultsweep_row *row = &r->rows[i];
        bool first = i == 0 || r->rows[i - 1].sc != row->sc;
        fprintf(out, "%-18s %-26s %14llu %12llu %9zu  %s\n", first ? row->sc->name : "", row->v->name,
                (unsigned long long)row->device_points, (unsigned long long)row->host_points, row->nfailures,
                row->nfailures ? "✗" : "✓");
        points += row->device_points + row->host_points;
        failures += row->nfailures;
    }
    for (size_t i = 0; i < r->nrows; i++) {
        const faultsweep_row *row = &r->rows[i];
        for (size_t j = 0; j < row->nfailures; j++) {
            const faultsweep_failure *f = &row->failures[j];
            if (f->at)
                fprintf(out, "\n%s/%s, %s allocation %llu and later failing: %s", row->sc->name, row->v->name, f->kind,
                        (unsigned long long)f->at, f->what);
            else
                fprintf(out, "\n%s/%s, with no fault: %s", row->sc->name, row->v->name, f->what);
        }
    }
    fprintf(out, "%s\n%llu fault points in %zu variant%s: ", failures ? "\n" : "", (unsigned long long)points, r->nrows,
            r->nrows == 1 ? "" : "s");
    if (failures)
        fprintf(out, "%zu not clean (✗ above)\n", failures);
    else
        fprintf(out, "every one clean (no crash, no leak, counters back to 0, validators pass)\n");
}

void faultsweep_result_free(faultsweep_result *r)
{
    for (size_t i = 0; i < r->nrows; i++)
        free(r->rows[i].failures);
    free(r->rows);
    memset(r, 0, sizeof *r);
}
