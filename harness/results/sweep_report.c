/* sweep_report.c - a sweep as people read it (the table) and as programs read it (the results JSON).
 * See sweep_report.h. */
#include "results/sweep_report.h"

#include <string.h>

#include "alloc/memstats.h"
#include "results/report.h"

/* ---- the table --------------------------------------------------------------------------------------------- */

static const char *size_str(int64_t b, char *buf, size_t cap)
{
    return memstats_format_size((uint64_t)(b < 0 ? 0 : b), buf, cap);
}

static void runs_list(const sweep_search *s, FILE *out)
{
    for (int i = 0; i < s->nruns; i++) {
        if (s->nruns > 10 && i == 4) {
            fprintf(out, ", ...");
            i = s->nruns - 4;
        }
        fprintf(out, "%s%lld %s", i ? ", " : "", (long long)s->runs[i], s->fits[i] ? "ok" : "OOM");
    }
}

void sweep_table(const sweep_result *r, FILE *out)
{
    const char *name = r->sc->params[r->param].name;
    char b1[32], b2[32];
    size_t npow = r->nvariants ? r->variants[0].nseries : 0;
    fprintf(out, "%s: --sweep %s=%lld..%lld, %zu powers of two, every run in a fresh runtime\n", r->sc->name, name,
            (long long)r->lo, (long long)r->hi, npow);
    fprintf(out, "backend %s (%s)%s, scale %s%s, budget %s\n", r->backend, r->device, r->dry_run ? ", dry run" : "",
            run_scale_str(r->scale),
            r->scale == SCALE_CI ? " (the default on sim: --scale full runs the workload PyTorch's twin runs)" : "",
            size_str((int64_t)r->budget, b1, sizeof b1));
    if (r->jobs > 1)
        fprintf(out, "jobs: %d (%s)\n", r->jobs, r->jobs_why);
    if (r->uncached) /* no cap is enforced: what fits is the device's, not the budget's */
        fprintf(out, "caching: off (%s=1): no cap is enforced, as in PyTorch\n", r->uncached_source);
    for (size_t k = 0; k < r->nvariants; k++) {
        const sweep_variant *sv = &r->variants[k];
        fprintf(out, "\n%s (%s): %s\n", sv->v->name, variant_kind_str(sv->v->kind), sv->v->summary);
        fprintf(out, "  %10s  %-7s %14s %14s\n", name, "outcome", "peak alloc", "peak reserved");
        for (size_t i = 0; i < sv->nseries; i++) {
            const sweep_point *p = &sv->series[i];
            fprintf(out, "  %10lld  %-7s %14s %14s%s%s%s%s\n", (long long)p->value,
                    p->outcome == OUTCOME_OOM ? "OOM" : variant_outcome_str(p->outcome),
                    size_str(p->peak_allocated, b1, sizeof b1), size_str(p->peak_reserved, b2, sizeof b2),
                    p->oom_what[0] ? "  at " : "", p->oom_what, p->error[0] ? "  " : "", p->error);
        }
        const sweep_search *bs = &sv->bisection, *as = &sv->accelerate;
        if (bs->found) /* not monotonic: a value above it may fit too (the note below) */
            fprintf(out, "  largest %s that fits%s: %lld (bisection, %d more run%s", name,
                    sv->monotonic ? "" : " below the first that does not", (long long)bs->found, bs->nruns,
                    bs->nruns == 1 ? "" : "s");
        else
            fprintf(out, "  no %s in %lld..%lld fits (%d more run%s", name, (long long)r->lo, (long long)r->hi,
                    bs->nruns, bs->nruns == 1 ? "" : "s");
        if (bs->nruns) {
            fputs(": ", out);
            runs_list(bs, out);
        }
        fputs(")\n", out);
        fprintf(out, "  find_executable_batch_size(starting_batch_size=%lld), x%.1f on each OOM: ", (long long)as->start,
                SWEEP_FACTOR);
        if (as->found)
            fprintf(out, "%lld", (long long)as->found);
        else
            fputs("none", out);
        fprintf(out, " after %d run%s (", as->nruns, as->nruns == 1 ? "" : "s");
        runs_list(as, out);
        fputs(")", out);
        if (as->found && bs->found && as->found < bs->found)
            fprintf(out, ", %lld below the largest", (long long)(bs->found - as->found));
        fputc('\n', out);
        if (!sv->monotonic)
            fprintf(out, "  note: not monotonic: %s=%lld fits while %s=%lld does not, so the largest %s that fits is "
                         "at least %lld; the bisection assumes that what fits at a value fits below it, and searched "
                         "below the first value that does not\n",
                    name, (long long)sv->window_fits, name, (long long)sv->window_fails, name,
                    (long long)(as->found > sv->window_fits ? as->found : sv->window_fits));
        for (size_t i = 0; i < sv->nknown; i++)
            if (!sv->known[i].passed)
                fprintf(out, "  ✗ at %s=%lld the variant does not show what it must (oomlab run %s --variant %s --set "
                             "%s=%lld shows why)\n",
                        name, (long long)sv->known[i].value, r->sc->name, sv->v->name, name,
                        (long long)sv->known[i].value);
    }
    fprintf(out, "\n%d runs%s\n", r->runs, r->passed ? ", every one showed what it must" : " (✗ above)");
}

/* ---- JSON --------------------------------------------------------------------------------------------------- */

static void put(cJSON *o, const char *key, cJSON *item, bool *ok)
{
    if (!item || !cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        *ok = false;
    }
}

static void push(cJSON *a, cJSON *item, bool *ok)
{
    if (!a || !item || !cJSON_AddItemToArray(a, item)) {
        cJSON_Delete(item);
        *ok = false;
    }
}

static cJSON *num(int64_t v) { return cJSON_CreateNumber((double)v); }

static cJSON *search_json(const sweep_search *s, bool *ok)
{
    cJSON *o = cJSON_CreateObject(), *runs = cJSON_CreateArray();
    if (!o || !runs) {
        cJSON_Delete(o);
        cJSON_Delete(runs);
        *ok = false;
        return NULL;
    }
    put(o, "value", s->found ? num(s->found) : cJSON_CreateNull(), ok);
    for (int i = 0; i < s->nruns; i++) {
        cJSON *e = cJSON_CreateObject();
        if (e) {
            put(e, "value", num(s->runs[i]), ok);
            put(e, "fits", cJSON_CreateBool(s->fits[i]), ok);
        }
        push(runs, e, ok);
    }
    put(o, "runs", runs, ok);
    return o;
}

cJSON *sweep_json(const sweep_result *r)
{
    bool ok = true;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    put(o, "schema", cJSON_CreateString(SWEEP_SCHEMA), &ok);
    put(o, "scenario", cJSON_CreateString(r->sc->name), &ok);
    put(o, "title", cJSON_CreateString(r->sc->title), &ok);
    put(o, "backend", cJSON_CreateString(r->backend), &ok);
    put(o, "device", cJSON_CreateString(r->device), &ok);
    put(o, "dry_run", cJSON_CreateBool(r->dry_run), &ok);
    put(o, "memory_caching", cJSON_CreateBool(!r->uncached), &ok); /* false: caching off, no cap enforced */
    put(o, "scale", cJSON_CreateString(run_scale_str(r->scale)), &ok);
    put(o, "budget", num((int64_t)r->budget), &ok);
    put(o, "started", cJSON_CreateString(r->started), &ok);
    put(o, "passed", cJSON_CreateBool(r->passed), &ok);
    put(o, "param", cJSON_CreateString(r->sc->params[r->param].name), &ok);
    put(o, "lo", num(r->lo), &ok);
    put(o, "hi", num(r->hi), &ok);
    cJSON *ps = cJSON_CreateObject();
    for (size_t i = 0; ps && i < r->sc->nparams; i++)
        if (i != r->param)
            put(ps, r->sc->params[i].name, num(r->params[i]), &ok);
    put(o, "params", ps, &ok);
    cJSON *vs = cJSON_CreateArray();
    for (size_t k = 0; vs && k < r->nvariants; k++) {
        const sweep_variant *sv = &r->variants[k];
        cJSON *v = cJSON_CreateObject(), *series = cJSON_CreateArray();
        if (!v || !series) {
            cJSON_Delete(v);
            cJSON_Delete(series);
            ok = false;
            break;
        }
        put(v, "name", cJSON_CreateString(sv->v->name), &ok);
        put(v, "kind", cJSON_CreateString(variant_kind_str(sv->v->kind)), &ok);
        put(v, "monotonic", cJSON_CreateBool(sv->monotonic), &ok);
        cJSON *w = sv->monotonic ? cJSON_CreateNull() : cJSON_CreateObject();
        if (w && !sv->monotonic) {
            put(w, "fails", num(sv->window_fails), &ok);
            put(w, "fits", num(sv->window_fits), &ok);
        }
        put(v, "window", w, &ok);
        for (size_t i = 0; i < sv->nseries; i++) {
            const sweep_point *p = &sv->series[i];
            cJSON *e = cJSON_CreateObject();
            if (e) {
                put(e, "value", num(p->value), &ok);
                put(e, "outcome", cJSON_CreateString(variant_outcome_str(p->outcome)), &ok);
                put(e, "peak_allocated", num(p->peak_allocated), &ok);
                put(e, "peak_reserved", num(p->peak_reserved), &ok);
                put(e, "reproduced", cJSON_CreateBool(p->reproduced), &ok);
                put(e, "passed", cJSON_CreateBool(p->passed), &ok);
                put(e, "oom_what", p->oom_what[0] ? cJSON_CreateString(p->oom_what) : cJSON_CreateNull(), &ok);
            }
            push(series, e, &ok);
        }
        put(v, "series", series, &ok);
        put(v, "largest_fit", search_json(&sv->bisection, &ok), &ok);
        cJSON *acc = search_json(&sv->accelerate, &ok);
        if (acc) {
            put(acc, "starting_batch_size", num(sv->accelerate.start), &ok);
            put(acc, "factor", cJSON_CreateNumber(SWEEP_FACTOR), &ok);
        }
        put(v, "find_executable_batch_size", acc, &ok);
        push(vs, v, &ok);
    }
    put(o, "variants", vs, &ok);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

oom_status sweep_write(const sweep_result *r, const char *dir, char *path, size_t cap)
{
    char name[160];
    snprintf(name, sizeof name, "%s.sweep.json", r->sc->name);
    return report_write_file(sweep_json(r), r->started, r->backend, name, dir, path, cap);
}
