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

/* One run of variant v under fault f: its result in *vr (run_result kept in *rr for the caller to free). */
static oom_status run_point(const scenario *sc, const faultsweep_options *o, const scenario_variant *v,
                            const run_fault *f, run_result *rr, char *err, size_t errcap)
{
    run_options one = o->run;
    one.nvariants = 1;
    one.variants[0] = v->name;
    one.fault = f;
    one.no_fork = false; /* a crash at a point is a finding, not the end of the sweep */
    return runner_run(sc, &one, rr, err, errcap);
}

/* Points n = 1, 1 + stride, ... of one kind, until a run does not reach its fault. */
static oom_status sweep_kind(const scenario *sc, const faultsweep_options *o, faultsweep_row *row, bool host,
                             uint64_t baseline_calls, char *err, size_t errcap)
{
    uint64_t stride = o->stride > 1 ? o->stride : 1;
    uint64_t *points = host ? &row->host_points : &row->device_points;
    const char *kind = host ? "host" : "device";
    if (baseline_calls == 0) /* a run with the fault armed is the run without one: nothing to fail */
        return OOM_OK;
    for (uint64_t n = 1;; n += stride) {
        if (n > FAULTSWEEP_MAX_POINT) {
            if (!add_failure(row, kind, n, "the sweep did not stop: every run reached its fault"))
                return OOM_ENOMEM_HOST;
            return OOM_OK;
        }
        run_fault f = {.device_at = host ? 0 : n, .host_at = host ? n : 0};
        run_result rr;
        oom_status st = run_point(sc, o, row->v, &f, &rr, err, errcap);
        if (st != OOM_OK)
            return st;
        const variant_result *vr = &rr.variants[0];
        bool finished = vr->outcome != OUTCOME_CRASHED && vr->outcome != OUTCOME_TIMEOUT;
        bool fired = host ? vr->fault.host_fired : vr->fault.device_fired;
        /* a point that crashed or hung counts while the run without a fault gets that far */
        bool counts = finished ? fired : n <= baseline_calls;
        const char *why = counts ? unclean(vr) : NULL;
        bool ok = !why || add_failure(row, kind, n, why);
        *points += counts;
        run_result_free(&rr);
        if (!ok)
            return OOM_ENOMEM_HOST;
        if (!counts)
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
    for (size_t k = 0; k < n; k++) /* every scenario's options are checked before anything runs */
        if (runner_validate(list[k], &o->run, err, errcap) != OOM_OK)
            return OOM_EINVAL;
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
                st = sweep_kind(sc, o, row, false, row->device_allocs, err, errcap);
            if (st == OOM_OK && o->host)
                st = sweep_kind(sc, o, row, true, row->host_allocs, err, errcap);
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
