/* report.c - the run table and the results JSON. See report.h. */
#include "results/report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "alloc/memstats.h"
#include "run/isolate.h"

static int64_t stat_of(const memstats *m, const char *key)
{
    int64_t v = 0;
    memstats_get(m, key, &v);
    return v;
}

static const char *size_str(int64_t b, char *buf, size_t cap)
{
    return memstats_format_size((uint64_t)(b < 0 ? 0 : b), buf, cap);
}

/* A metric's value as people read it: bytes as sizes, seconds in s/ms/us, the rest with 4 digits. */
static const char *metric_str(const scn_metric_value *m, char *buf, size_t cap)
{
    if (strcmp(m->unit, "bytes") == 0 || strcmp(m->unit, "bytes/step") == 0) {
        char b[32];
        snprintf(buf, cap, "%s%s%s", m->value < 0 ? "-" : "", size_str((int64_t)(m->value < 0 ? -m->value : m->value), b, sizeof b),
                 m->unit[5] ? "/step" : "");
    } else if (strcmp(m->unit, "s") == 0) {
        double v = m->value;
        if (v >= 1)
            snprintf(buf, cap, "%.3f s", v);
        else if (v >= 1e-3)
            snprintf(buf, cap, "%.3f ms", v * 1e3);
        else
            snprintf(buf, cap, "%.3f us", v * 1e6);
    } else {
        snprintf(buf, cap, "%.6g%s%s", m->value, m->unit[0] && strcmp(m->unit, "1") ? " " : "",
                 strcmp(m->unit, "1") ? m->unit : "");
    }
    return buf;
}

/* Metrics grouped by name, in first-seen order: one value, or a series (first values, "...", the last). */
static void metrics_table(const variant_result *v, FILE *out)
{
    for (size_t i = 0; i < v->nmetrics; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(v->metrics[j].name, v->metrics[i].name) == 0;
        if (seen)
            continue;
        size_t n = 0, last = i;
        for (size_t j = i; j < v->nmetrics; j++)
            if (strcmp(v->metrics[j].name, v->metrics[i].name) == 0)
                n++, last = j;
        char b[48];
        fprintf(out, "  %s: %s", v->metrics[i].name, metric_str(&v->metrics[i], b, sizeof b));
        size_t shown = 1;
        for (size_t j = i + 1; j < v->nmetrics && n > 1; j++) {
            if (strcmp(v->metrics[j].name, v->metrics[i].name) != 0)
                continue;
            if (shown < 4 || j == last)
                fprintf(out, "%s%s", shown == 4 && n > 5 ? ", ..." : ", ", metric_str(&v->metrics[j], b, sizeof b));
            else if (shown == 4)
                fputs(", ...", out);
            shown++;
        }
        fprintf(out, "%s\n", n > 1 ? " (one per step)" : "");
    }
}

static const char *outcome_cell(const variant_result *v)
{
    if (v->outcome == OUTCOME_OOM)
        return v->oom.pinned ? "OOM pin" : "OOM"; /* pinned host memory ran out, not the device */
    return variant_outcome_str(v->outcome);
}

/* ✓ it shows what it must; ◐ a partial fix that shows it (lowers memory, still runs out); ✗ it does not. */
static const char *mark(const variant_result *v, char *buf, size_t cap)
{
    if (!v->passed)
        return "✗";
    if (v->v->kind == VARIANT_PARTIAL && v->outcome == OUTCOME_OOM && v->saved_set) {
        char b[32];
        snprintf(buf, cap, "◐ partial: saves %s, still OOM", size_str(v->saved, b, sizeof b));
        return buf;
    }
    return v->reproduced ? "✓" : "✓ (not reproduced at these parameters)";
}

/* The header; per_scenario: the runs of a catalog have budgets of their own, shown in its table's budget column. */
static void header(const run_result *r, bool per_scenario, FILE *out)
{
    char b1[32];
    fprintf(out, "backend %s (%s)%s, scale %s%s, budget %s\n", r->backend, r->device, r->dry_run ? ", dry run" : "",
            run_scale_str(r->scale),
            r->scale == SCALE_CI ? " (the default on sim: --scale full runs the workload PyTorch's twin runs)" : "",
            per_scenario ? "each scenario's own (its column below)" : size_str((int64_t)r->budget, b1, sizeof b1));
    if (per_scenario)
        fprintf(out, "cap: set_per_process_memory_fraction(budget / %zu), each scenario's budget\n", r->device_total);
    else if (r->cap)
        fprintf(out, "cap %zu bytes: set_per_process_memory_fraction(%zu / %zu)\n", r->cap, r->budget,
                r->device_total);
    else
        fprintf(out, "cap: none (the budget is the device's %zu bytes)\n", r->device_total);
    if (r->model_order)
        fprintf(out, "block order: equal free blocks ranked by where sim's model of the driver puts their segments "
                     "in PyTorch's process, not by this process's addresses (--real-addresses)\n");
    if (strcmp(r->conf_source, "default") == 0)
        fprintf(out, "settings: PyTorch's defaults (no --alloc-conf, OOMLAB_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, "
                     "PYTORCH_HIP_ALLOC_CONF or PYTORCH_ALLOC_CONF)\n");
    else
        fprintf(out, "settings: '%s' from %s, under each variant's own\n", r->conf_user, r->conf_source);
    if (r->isolation)
        fprintf(out, "isolation: %s\n", r->isolation);
    if (r->uncached) /* forceUncachedAllocator(): said, as it changes every number below */
        fprintf(out, "caching: off (%s=1): every malloc a device allocation of its own, every free returned at once; "
                     "memory_stats stay 0 and no cap is enforced, as in PyTorch\n",
                r->uncached_source);
    else if (r->uncached_source[0])
        fprintf(out, "caching: on (%s=0)\n", r->uncached_source);
}

void report_header(const run_result *r, FILE *out) { header(r, false, out); }

/* Under --set or --budget a kind that does not hold is shown, not failed (runner.h, kind_promised): say how many,
 * so that "N of N show what they must" never stands beside an unexplained ✗. */
static void explored_kinds_line(const run_result *runs, size_t n, FILE *out)
{
    size_t k_not = 0;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < runs[k].nvariants; i++)
            k_not += runs[k].variants[i].kind_text[0] && !runs[k].variants[i].kind_holds &&
                     !runs[k].variants[i].kind_promised; /* checked (an outcome to check), not held, not promised */
    if (k_not)
        fprintf(out, "%zu variant(s) do not do what their kind promises at these parameters (✗ above): a kind is a "
                     "promise at the scenario's own parameters and budget, which --set or --budget changed\n",
                k_not);
}

/* What the variant's kind promises (a fix fits; a partial fix saves bytes, not enough), with the outcome. */
static void kind_line(const variant_result *v, FILE *out)
{
    if (v->kind_text[0])
        fprintf(out, "  %s %s\n",
                !v->kind_holds                                                          ? "✗"
                : v->v->kind == VARIANT_PARTIAL && v->outcome == OUTCOME_OOM && v->saved_set ? "◐"
                                                                                          : "✓",
                v->kind_text);
}

/* An error, a crash or a timeout: its line under the variant. */
static void error_line(const variant_result *v, FILE *out)
{
    if (v->outcome == OUTCOME_ERROR)
        fprintf(out, "  error: %s\n", v->error);
    else if (v->outcome == OUTCOME_CRASHED || v->outcome == OUTCOME_TIMEOUT)
        fprintf(out, "  %s\n", v->error);
}

/* The variants that did not finish, when there are any: a crash or a hang is not an expectation that failed. */
static void unfinished_line(const run_result *runs, size_t n, FILE *out)
{
    size_t crashed = 0, timed_out = 0;
    for (size_t k = 0; k < n; k++)
        crashed += runs[k].crashed, timed_out += runs[k].timed_out;
    if (crashed + timed_out)
        fprintf(out, "%zu crashed, %zu timed out (each variant runs in its own process: the others ran)\n", crashed,
                timed_out);
}

/* A variant on several devices (scn_rt_device): one row per device after its own, which is device 0's. */
static void device_rows(const variant_result *v, FILE *out)
{
    char b1[32], b2[32], label[40];
    for (size_t k = 0; k < v->ndevices; k++) {
        const scn_device_result *d = &v->devices[k];
        snprintf(label, sizeof label, "  device %d%s", d->index, d->logical ? " (logical)" : "");
        fprintf(out, "%-26s %-7s %14s %14s\n", label, "",
                size_str(stat_of(&d->stats, "allocated_bytes.all.peak"), b1, sizeof b1),
                size_str(stat_of(&d->stats, "reserved_bytes.all.peak"), b2, sizeof b2));
    }
}

void report_table(const run_result *r, FILE *out)
{
    char b1[32], b2[32], b3[32], b4[32], mk[64];
    fprintf(out, "%s: %s\n", r->sc->name, r->sc->title);
    report_header(r, out);
    fputc('\n', out);
    fprintf(out, "%-26s %-7s %14s %14s %16s %14s  %s\n", "variant", "outcome", "peak alloc", "peak reserved",
            "unalloc at OOM", "largest free", "");
    for (size_t i = 0; i < r->nvariants; i++) {
        const variant_result *v = &r->variants[i];
        bool oom = v->outcome == OUTCOME_OOM && !v->oom.pinned;
        fprintf(out, "%-26s %-7s %14s %14s %16s %14s  %s\n", v->v->name, outcome_cell(v),
                size_str(stat_of(&v->stats, "allocated_bytes.all.peak"), b1, sizeof b1),
                size_str(stat_of(&v->stats, "reserved_bytes.all.peak"), b2, sizeof b2),
                oom ? size_str((int64_t)v->oom.reserved_unallocated, b3, sizeof b3) : "-",
                oom ? size_str((int64_t)v->oom.largest_free_block, b4, sizeof b4) : "-", mark(v, mk, sizeof mk));
        device_rows(v, out);
    }
    for (size_t i = 0; i < r->nvariants; i++) {
        const variant_result *v = &r->variants[i];
        fprintf(out, "\n%s (%s): %s\n", v->v->name, variant_kind_str(v->v->kind), v->v->summary);
        if (v->alloc_conf[0] && strcmp(v->v->alloc_conf, "") != 0)
            fprintf(out, "  settings: %s\n", v->v->alloc_conf);
        if (v->ndevices) {
            fprintf(out, "  devices: 0 = the variant's own row (%s)", r->device);
            for (size_t k = 0; k < v->ndevices; k++)
                fprintf(out, "; %d = %s, cap %zu bytes", v->devices[k].index, v->devices[k].name, v->devices[k].cap);
            fputc('\n', out);
        }
        for (size_t j = 0; j < v->nnotes; j++)
            fprintf(out, "  %s%s\n", !v->reproduced && j == 0 ? "not reproduced at these parameters: " : "note: ",
                    v->notes[j]);
        for (size_t j = 0; j < v->nexpect; j++)
            fprintf(out, "  %s %s\n", v->expect[j].holds ? "✓" : "✗", v->expect[j].text);
        kind_line(v, out);
        metrics_table(v, out);
        error_line(v, out);
        if (v->ooms && v->oom.pinned)
            fprintf(out, "  OOM of pinned host memory at %s: %s\n", v->oom.what, v->oom.message);
        else if (v->ooms && v->oom.device)
            fprintf(out, "  OOM on device %d at %s%s: %s\n", v->oom.device, v->oom.what,
                    v->story_ooms ? " (a step of the story, before the remedy)" : "", v->oom.message);
        else if (v->ooms)
            fprintf(out, "  OOM at %s%s: %s\n", v->oom.what,
                    v->story_ooms ? " (a step of the story, before the remedy)" : "", v->oom.message);
    }
    size_t passed = 0;
    for (size_t i = 0; i < r->nvariants; i++)
        passed += r->variants[i].passed;
    fprintf(out, "\n%zu of %zu variants show what they must%s\n", passed, r->nvariants,
            r->passed ? "" : " (✗ above)");
    explored_kinds_line(r, 1, out);
    unfinished_line(r, 1, out);
}

void report_catalog_table(const run_result *runs, size_t n, FILE *out)
{
    char b1[32], b2[32], b3[32], mk[64];
    if (n == 0)
        return;
    fprintf(out, "the catalog: %zu scenarios\n", n);
    bool same = true; /* one budget for all (--budget, or scenarios that share one), said once */
    for (size_t k = 1; k < n; k++)
        same = same && runs[k].budget == runs[0].budget;
    header(&runs[0], !same, out);
    fprintf(out, "\n%-18s %-26s %-7s %14s %14s %11s  %s\n", "scenario", "variant", "outcome", "peak alloc",
            "peak reserved", "budget", "");
    size_t passed = 0, total = 0;
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < runs[k].nvariants; i++) {
            const variant_result *v = &runs[k].variants[i];
            fprintf(out, "%-18s %-26s %-7s %14s %14s %11s  %s\n", i == 0 ? runs[k].sc->name : "", v->v->name,
                    outcome_cell(v), size_str(stat_of(&v->stats, "allocated_bytes.all.peak"), b1, sizeof b1),
                    size_str(stat_of(&v->stats, "reserved_bytes.all.peak"), b2, sizeof b2),
                    i == 0 ? size_str((int64_t)runs[k].budget, b3, sizeof b3) : "", mark(v, mk, sizeof mk));
            for (size_t d = 0; d < v->ndevices; d++) /* one row per device of the variant */
                fprintf(out, "%-18s   device %-17d %-7s %14s %14s\n", "", v->devices[d].index, "",
                        size_str(stat_of(&v->devices[d].stats, "allocated_bytes.all.peak"), b1, sizeof b1),
                        size_str(stat_of(&v->devices[d].stats, "reserved_bytes.all.peak"), b2, sizeof b2));
            passed += v->passed;
            total++;
        }
    }
    for (size_t k = 0; k < n; k++) { /* what failed, in full: the rest is in `oomlab run SCENARIO` */
        for (size_t i = 0; i < runs[k].nvariants; i++) {
            const variant_result *v = &runs[k].variants[i];
            if (v->passed)
                continue;
            fprintf(out, "\n%s/%s (%s): %s\n", runs[k].sc->name, v->v->name, variant_kind_str(v->v->kind), v->v->summary);
            for (size_t j = 0; j < v->nexpect; j++)
                if (!v->expect[j].holds)
                    fprintf(out, "  ✗ %s\n", v->expect[j].text);
            if (!v->kind_holds)
                kind_line(v, out);
            error_line(v, out);
        }
    }
    fprintf(out, "\n%zu of %zu variants in %zu scenarios show what they must%s\n", passed, total, n,
            passed == total ? "" : " (✗ above)");
    explored_kinds_line(runs, n, out);
    unfinished_line(runs, n, out);
}

/* ---- JSON ------------------------------------------------------------------------------------------------ */

/* cJSON_Add* return NULL when out of host memory; *ok collects that. */
static cJSON *add(cJSON *o, const char *key, cJSON *item, bool *ok)
{
    if (!item || !cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        *ok = false;
        return NULL;
    }
    return item;
}

static void add_int(cJSON *o, const char *key, int64_t v, bool *ok) { add(o, key, cJSON_CreateNumber((double)v), ok); }
static void add_str(cJSON *o, const char *key, const char *v, bool *ok) { add(o, key, cJSON_CreateString(v), ok); }
static void add_bool(cJSON *o, const char *key, bool v, bool *ok) { add(o, key, cJSON_CreateBool(v), ok); }

static void push(cJSON *a, cJSON *item, bool *ok)
{
    if (!a || !item || !cJSON_AddItemToArray(a, item)) {
        cJSON_Delete(item);
        *ok = false;
    }
}

static void samples_json(cJSON *o, const scn_sample *samples, size_t n, bool *ok);

/* "segments": the allocator's layout at the OOM (cachealloc_oom_layout), as memory_viz draws it. */
static void layout_json(cJSON *o, const ca_snap_segment *segs, size_t n, bool *ok)
{
    static const char *const state[] = {[CA_SNAP_INACTIVE] = "free", [CA_SNAP_ALLOCATED] = "allocated",
                                        [CA_SNAP_UNMAPPED] = "unmapped"};
    cJSON *a = add(o, "segments", cJSON_CreateArray(), ok);
    for (size_t i = 0; a && i < n; i++) {
        cJSON *e = cJSON_CreateObject(), *bl = NULL;
        if (e) {
            add_int(e, "address", (int64_t)segs[i].address, ok);
            add_int(e, "size", (int64_t)segs[i].total_size, ok);
            add_str(e, "pool", segs[i].is_small ? "small" : "large", ok);
            add_bool(e, "expandable", segs[i].is_expandable, ok);
            if (segs[i].is_expandable)
                add_int(e, "page", (int64_t)segs[i].page_size, ok);
            bl = add(e, "blocks", cJSON_CreateArray(), ok);
        }
        for (size_t k = 0; bl && k < segs[i].nblocks; k++) {
            cJSON *b = cJSON_CreateArray();
            push(b, cJSON_CreateNumber((double)segs[i].blocks[k].size), ok);
            push(b, cJSON_CreateString(state[segs[i].blocks[k].state]), ok);
            push(bl, b, ok);
        }
        push(a, e, ok);
    }
}

static cJSON *variant_json(const variant_result *v, bool *ok)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        *ok = false;
        return NULL;
    }
    add_str(o, "name", v->v->name, ok);
    add_str(o, "kind", variant_kind_str(v->v->kind), ok);
    add_str(o, "summary", v->v->summary, ok);
    add_str(o, "alloc_conf", v->alloc_conf, ok);
    add_str(o, "outcome", variant_outcome_str(v->outcome), ok);
    add_bool(o, "passed", v->passed, ok);
    bool failed = v->outcome == OUTCOME_ERROR || v->outcome == OUTCOME_CRASHED || v->outcome == OUTCOME_TIMEOUT;
    add(o, "error", failed ? cJSON_CreateString(v->error) : cJSON_CreateNull(), ok);
    if (v->outcome == OUTCOME_CRASHED && v->signal) /* only where there is one: a healthy variant's JSON is as before */
        add_str(o, "signal", isolate_signal_name(v->signal), ok);
    add_int(o, "peak_allocated", stat_of(&v->stats, "allocated_bytes.all.peak"), ok);
    add_int(o, "peak_reserved", stat_of(&v->stats, "reserved_bytes.all.peak"), ok);
    add(o, "seconds", cJSON_CreateNumber(v->seconds), ok);
    add(o, "cpu_seconds", cJSON_CreateNumber(v->cpu_seconds), ok);
    add_bool(o, "reproduced", v->reproduced, ok);
    add_int(o, "story_ooms", v->story_ooms, ok);
    cJSON *kc = add(o, "kind_check", v->kind_text[0] ? cJSON_CreateObject() : cJSON_CreateNull(), ok);
    if (kc && v->kind_text[0]) {
        add_bool(kc, "holds", v->kind_holds, ok);
        add_str(kc, "text", v->kind_text, ok);
    }
    cJSON *saved = add(o, "saved", v->saved_set ? cJSON_CreateObject() : cJSON_CreateNull(), ok);
    if (saved && v->saved_set) {
        add_int(saved, "bytes", v->saved, ok);
        add_str(saved, "what", v->saved_what, ok);
    }
    cJSON *notes = add(o, "notes", cJSON_CreateArray(), ok);
    for (size_t i = 0; i < v->nnotes; i++)
        push(notes, cJSON_CreateString(v->notes[i]), ok);
    cJSON *mets = add(o, "metrics", cJSON_CreateArray(), ok);
    for (size_t i = 0; i < v->nmetrics; i++) {
        cJSON *e = cJSON_CreateObject();
        if (e) {
            add_str(e, "name", v->metrics[i].name, ok);
            add_str(e, "unit", v->metrics[i].unit, ok);
            add(e, "value", cJSON_CreateNumber(v->metrics[i].value), ok);
            add_int(e, "sample", v->metrics[i].sample, ok);
        }
        push(mets, e, ok);
    }
    if (v->ooms) {
        cJSON *d = add(o, "oom", cJSON_CreateObject(), ok);
        if (d) {
            add_int(d, "step", v->oom.step, ok);
            add_str(d, "what", v->oom.what, ok);
            add_int(d, "requested", (int64_t)v->oom.requested, ok);
            add_int(d, "alloc_size", (int64_t)v->oom.alloc_size, ok);
            add_int(d, "allocated", (int64_t)v->oom.allocated, ok);
            add_int(d, "reserved", (int64_t)v->oom.reserved, ok);
            add_int(d, "reserved_unallocated", (int64_t)v->oom.reserved_unallocated, ok);
            add_int(d, "largest_free_block", (int64_t)v->oom.largest_free_block, ok);
            add_int(d, "ooms", v->ooms, ok);
            add_int(d, "device", v->oom.device, ok);
            add_str(d, "kind", v->oom.pinned ? "pinned host" : "device", ok);
            add_str(d, "message", v->oom.message, ok);
            layout_json(d, v->oom_layout, v->oom_nlayout, ok);
        }
        cJSON *marks = add(o, "ooms_caught", cJSON_CreateArray(), ok);
        for (size_t i = 0; i < v->noom_marks; i++) {
            const scn_oom_mark *m = &v->oom_marks[i];
            cJSON *e = cJSON_CreateObject();
            if (e) {
                add_int(e, "step", m->step, ok);
                add_str(e, "what", m->what, ok);
                add_int(e, "requested", (int64_t)m->requested, ok);
                add_int(e, "alloc_size", (int64_t)m->alloc_size, ok);
                add_int(e, "allocated", (int64_t)m->allocated, ok);
                add_int(e, "reserved", (int64_t)m->reserved, ok);
                add_int(e, "device", m->device, ok);
            }
            push(marks, e, ok);
        }
    } else {
        add(o, "oom", cJSON_CreateNull(), ok);
    }
    if (v->fix_step >= 0 && (size_t)v->fix_step < v->nsamples) {
        cJSON *f = add(o, "fix_layout", cJSON_CreateObject(), ok);
        if (f) {
            add_int(f, "step", v->fix_step, ok);
            add_str(f, "label", v->samples[v->fix_step].label, ok);
            add_int(f, "reserved", v->fix_reserved, ok);
            layout_json(f, v->fix_layout, v->fix_nlayout, ok);
        }
    } else {
        add(o, "fix_layout", cJSON_CreateNull(), ok);
    }
    cJSON *ex = add(o, "expectations", cJSON_CreateArray(), ok);
    for (size_t i = 0; i < v->nexpect; i++) {
        cJSON *e = cJSON_CreateObject();
        if (e) {
            add_bool(e, "holds", v->expect[i].holds, ok);
            add_str(e, "text", v->expect[i].text, ok);
        }
        push(ex, e, ok);
    }
    samples_json(o, v->samples, v->nsamples, ok);
    cJSON *ms = add(o, "memory_stats", cJSON_CreateObject(), ok);
    for (size_t i = 0; ms && i < MEMSTATS_NKEYS; i++) {
        const char *key;
        int64_t val;
        memstats_key(&v->stats, i, &key, &val);
        add_int(ms, key, val, ok);
    }
    /* devices 1.. of a variant on several devices (scn_rt_device); device 0 is the variant's own fields */
    cJSON *devs = add(o, "devices", cJSON_CreateArray(), ok);
    for (size_t k = 0; k < v->ndevices; k++) {
        const scn_device_result *d = &v->devices[k];
        cJSON *e = cJSON_CreateObject();
        if (e) {
            add_int(e, "index", d->index, ok);
            add_str(e, "name", d->name, ok);
            add_bool(e, "logical", d->logical, ok);
            add(e, "cap", d->cap ? cJSON_CreateNumber((double)d->cap) : cJSON_CreateNull(), ok);
            add_int(e, "peak_allocated", stat_of(&d->stats, "allocated_bytes.all.peak"), ok);
            add_int(e, "peak_reserved", stat_of(&d->stats, "reserved_bytes.all.peak"), ok);
            samples_json(e, d->samples, d->nsamples, ok);
            cJSON *dms = add(e, "memory_stats", cJSON_CreateObject(), ok);
            for (size_t i = 0; dms && i < MEMSTATS_NKEYS; i++) {
                const char *key;
                int64_t val;
                memstats_key(&d->stats, i, &key, &val);
                add_int(dms, key, val, ok);
            }
        }
        push(devs, e, ok);
    }
    return o;
}

static void samples_json(cJSON *o, const scn_sample *samples, size_t n, bool *ok)
{
    cJSON *sa = add(o, "samples", cJSON_CreateArray(), ok);
    for (size_t i = 0; i < n; i++) {
        const scn_sample *s = &samples[i];
        cJSON *e = cJSON_CreateObject();
        if (e) {
            add_str(e, "label", s->label, ok);
            add_int(e, "allocated", s->allocated, ok);
            add_int(e, "reserved", s->reserved, ok);
            add_int(e, "active", s->active, ok);
            add_int(e, "inactive_split", s->inactive_split, ok);
            add_int(e, "allocated_peak", s->allocated_peak, ok);
            add_int(e, "reserved_peak", s->reserved_peak, ok);
            if (s->step_peak >= 0)
                add_int(e, "step_peak", s->step_peak, ok);
            add_int(e, "segments", s->segments, ok);
            add_int(e, "num_device_alloc", s->device_allocs, ok);
            add_int(e, "num_device_free", s->device_frees, ok);
            add_int(e, "num_alloc_retries", s->alloc_retries, ok);
            add_int(e, "num_ooms", s->ooms, ok);
        }
        push(sa, e, ok);
    }
}

cJSON *report_json(const run_result *r)
{
    bool ok = true;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    add_str(o, "schema", REPORT_SCHEMA, &ok);
    add_str(o, "scenario", r->sc->name, &ok);
    add_str(o, "title", r->sc->title, &ok);
    add_str(o, "backend", r->backend, &ok);
    add_str(o, "device", r->device, &ok);
    add_bool(o, "dry_run", r->dry_run, &ok);
    add_str(o, "block_order", r->model_order ? "model" : "address", &ok);
    add_str(o, "scale", run_scale_str(r->scale), &ok);
    add_int(o, "budget", (int64_t)r->budget, &ok);
    add(o, "cap", r->cap ? cJSON_CreateNumber((double)r->cap) : cJSON_CreateNull(), &ok);
    add_int(o, "device_total", (int64_t)r->device_total, &ok);
    add_str(o, "alloc_conf_source", r->conf_source, &ok);
    add_str(o, "alloc_conf_user", r->conf_user, &ok);
    add_bool(o, "memory_caching", !r->uncached, &ok);
    add(o, "memory_caching_source",
        r->uncached_source[0] ? cJSON_CreateString(r->uncached_source) : cJSON_CreateNull(), &ok);
    add_str(o, "started", r->started, &ok);
    add_bool(o, "passed", r->passed, &ok);
    if (r->isolation)
        add_str(o, "isolation", r->isolation, &ok);
    cJSON *p = add(o, "params", cJSON_CreateObject(), &ok);
    for (size_t i = 0; p && i < r->sc->nparams; i++)
        add_int(p, r->sc->params[i].name, r->params[i], &ok);
    cJSON *vs = add(o, "variants", cJSON_CreateArray(), &ok);
    for (size_t i = 0; i < r->nvariants; i++)
        push(vs, variant_json(&r->variants[i], &ok), &ok);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* j printed (and freed), or NULL with OOM_ENOMEM_HOST in the last-error record. */
static char *json_text(cJSON *j)
{
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!text)
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot write the results: out of host memory");
    return text;
}

oom_status report_write(const run_result *r, const char *dir, char *path, size_t cap)
{
    char name[160];
    snprintf(name, sizeof name, "%s.json", r->sc->name);
    return report_write_file(report_json(r), r->started, r->backend, name, dir, path, cap);
}

oom_status report_write_file(cJSON *j, const char *started, const char *backend, const char *filename,
                             const char *dir, char *path, size_t cap)
{
    char *text = json_text(j);
    if (!text)
        return OOM_ENOMEM_HOST;
    size_t tlen = strlen(text);
    text[tlen] = '\n'; /* newline-terminated; the NUL is not written */
    /* STAMP: 2026-11-23T05:41:00Z -> 20261123T054100Z */
    char stamp[32];
    size_t n = 0;
    for (const char *c = started; *c && n + 1 < sizeof stamp; c++)
        if (*c != '-' && *c != ':')
            stamp[n++] = *c;
    stamp[n] = '\0';
    oom_status st = OOM_OK;
    bool claimed = false;
    for (int k = 1; k < 100 && !claimed && st == OOM_OK; k++) {
        /* DIR/STAMP-BACKEND[-k]/FILENAME; a name another run (of this second) took is skipped */
        int len = k == 1 ? snprintf(path, cap, "%s/%s-%s", dir, stamp, backend)
                         : snprintf(path, cap, "%s/%s-%s-%d", dir, stamp, backend, k);
        int more = len < 0 || (size_t)len >= cap ? -1 : snprintf(path + len, cap - (size_t)len, "/%s", filename);
        if (more < 0 || (size_t)(len + more) >= cap) {
            OOM_ERROR(OOM_EIO, "the results path is too long (%zu bytes of directory): %.200s", strlen(dir), dir);
            st = OOM_EIO;
            break;
        }
        path[len] = '\0'; /* the directory first */
        if ((st = fileio_mkdirs(path)) != OOM_OK)
            break;
        path[len] = '/';
        bool existed = false;
        st = fileio_write_new(path, text, tlen + 1, &existed);
        claimed = st == OOM_OK;
        if (existed)
            st = OOM_OK; /* taken: the next name */
    }
    if (!claimed && st == OOM_OK) {
        OOM_ERROR(OOM_EIO, "cannot write into %s: 99 runs of %s in one second", dir, filename);
        st = OOM_EIO;
    }
    free(text);
    return st;
}

oom_status report_write_in(const run_result *r, const char *rundir, char *path, size_t cap)
{
    int len = snprintf(path, cap, "%s/%s.json", rundir, r->sc->name);
    if (len < 0 || (size_t)len >= cap) {
        OOM_ERROR(OOM_EIO, "the results path is too long: %.200s", rundir);
        return OOM_EIO;
    }
    char *text = json_text(report_json(r));
    if (!text)
        return OOM_ENOMEM_HOST;
    size_t tlen = strlen(text);
    text[tlen] = '\n';
    bool existed = false;
    oom_status st = fileio_write_new(path, text, tlen + 1, &existed);
    if (existed)
        OOM_ERROR(OOM_EIO, "%s exists already: not overwritten", path);
    free(text);
    return st;
}
