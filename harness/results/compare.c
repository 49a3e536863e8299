/* compare.c - what moved between two runs. See compare.h. */
#include "results/compare.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/echo.h"

/* The memory_stats() keys compared beside the samples: segments and retries at the end, device calls, and the
 * bytes ever allocated (a temporary that does not move a peak still moves it). */
static const char *const compare_stats[] = {
    "segment.all.peak",         "num_alloc_retries",        "num_ooms",        "num_device_alloc",
    "num_device_free",          "allocated_bytes.all.allocated", "allocation.all.allocated",
};

/* The integer fields of a sample, compared as series. */
static const char *const sample_keys[] = {"allocated",      "reserved",      "active",           "inactive_split",
                                          "allocated_peak", "reserved_peak", "segments",         "num_device_alloc",
                                          "num_device_free", "num_alloc_retries", "num_ooms"};

#define N(a) (sizeof a / sizeof a[0])

/* Every key of a results document (report.h) and of a baseline (baseline.h adds "baseline"), by object: a key
 * outside these is reported (a row, not compared), never silently ignored. NULL-terminated. */
static const char *const known_top[] = {
    "schema", "scenario", "title", "backend", "device", "dry_run", "scale", "budget", "cap", "device_total",
    "alloc_conf_source", "alloc_conf_user", "memory_caching", "memory_caching_source", "block_order", "started",
    "passed", "params", "variants", "baseline", NULL};
static const char *const known_variant[] = {
    "name", "kind", "summary", "alloc_conf", "outcome", "passed", "error", "peak_allocated", "peak_reserved",
    "seconds", "cpu_seconds", "reproduced", "story_ooms", "kind_check", "saved", "notes", "metrics", "oom",
    "ooms_caught", "fix_layout", "expectations", "samples", "memory_stats", "devices", NULL};
static const char *const known_sample[] = {"label", "allocated", "reserved", "active", "inactive_split",
                                           "allocated_peak", "reserved_peak", "segments", "num_device_alloc",
                                           "num_device_free", "num_alloc_retries", "num_ooms", "step_peak", NULL};
static const char *const known_oom[] = {"step", "what", "kind", "requested", "alloc_size", "allocated", "reserved",
                                        "reserved_unallocated", "largest_free_block", "ooms", "device", "message",
                                        "segments", NULL};
static const char *const known_device[] = {"index", "name", "logical", "cap", "peak_allocated", "peak_reserved",
                                           "samples", "memory_stats", NULL};
static const char *const known_metric[] = {"name", "unit", "value", "sample", NULL};
static const char *const known_expect[] = {"holds", "text", NULL};

bool compare_parse_percent(const char *s, double *out)
{
    size_t n = strlen(s);
    if (n < 2 || n > 16 || s[n - 1] != '%' || !isdigit((unsigned char)s[0]))
        return false;
    size_t digits = 0, dots = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (isdigit((unsigned char)s[i]))
            digits++;
        else if (s[i] == '.' && dots == 0)
            dots++;
        else
            return false;
    }
    if (s[n - 2] == '.')
        return false;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != s + n - 1 || !isfinite(v) || v < 0 || v > 1e6)
        return false;
    *out = v / 100.0;
    return true;
}

typedef struct ctx {
    compare_result *r;
    const compare_options *o;
    const char *scenario, *variant;
    bool sim; /* the runs are on sim: times never fail */
    bool oom; /* out of host memory */
} ctx;

static compare_row *add_row(ctx *c, const char *metric, bool regression)
{
    compare_result *r = c->r;
    if (r->nrows == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;
        compare_row *grown = realloc(r->rows, cap * sizeof *grown);
        if (!grown) {
            c->oom = true;
            return NULL;
        }
        r->rows = grown;
        r->cap = cap;
    }
    compare_row *row = &r->rows[r->nrows++];
    memset(row, 0, sizeof *row);
    snprintf(row->scenario, sizeof row->scenario, "%s", c->scenario);
    snprintf(row->variant, sizeof row->variant, "%s", c->variant ? c->variant : "-");
    snprintf(row->metric, sizeof row->metric, "%s", metric);
    row->regression = regression;
    r->regressions += regression;
    return row;
}

static void add_text_row(ctx *c, const char *metric, const char *base, const char *cur, bool regression,
                         const char *note)
{
    compare_row *row = add_row(c, metric, regression);
    if (!row)
        return;
    snprintf(row->base, sizeof row->base, "%s", base);
    snprintf(row->cur, sizeof row->cur, "%s", cur);
    snprintf(row->change, sizeof row->change, "changed");
    snprintf(row->note, sizeof row->note, "%s", note ? note : "");
}

static void num_str(double v, char *buf, size_t cap)
{
    if (v == floor(v) && fabs(v) < 9e15)
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, "%.6g", v);
}

/* "+1048576 (+0.11%)" */
static void change_str(double b, double c, char *buf, size_t cap)
{
    char d[40];
    num_str(c - b, d, sizeof d);
    if (b != 0)
        snprintf(buf, cap, "%s%s (%+.2f%%)", c >= b ? "+" : "", d, (c - b) / fabs(b) * 100.0);
    else
        snprintf(buf, cap, "%s%s (from 0)", c >= b ? "+" : "", d);
}

static bool beyond(double b, double c, double tol) { return fabs(c - b) > tol * fabs(b); }

/* A byte counter or count: a row when it moved, a regression beyond the tolerance. */
static void cmp_count(ctx *c, const char *metric, double b, double cur, const char *extra)
{
    if (b == cur)
        return;
    bool reg = beyond(b, cur, c->o->tolerance);
    compare_row *row = add_row(c, metric, reg);
    if (!row)
        return;
    num_str(b, row->base, sizeof row->base);
    num_str(cur, row->cur, sizeof row->cur);
    char ch[80];
    change_str(b, cur, ch, sizeof ch);
    snprintf(row->change, sizeof row->change, "%.60s%.50s", ch, extra ? extra : "");
    if (!reg)
        snprintf(row->note, sizeof row->note, "within --tolerance");
}

/* A time: only with --time-tolerance; slower beyond it is a regression except on sim. */
static void cmp_time(ctx *c, const char *metric, double b, double cur)
{
    double tol = c->o->time_tolerance;
    if (tol < 0 || !beyond(b, cur, tol))
        return;
    bool slower = cur > b;
    compare_row *row = add_row(c, metric, slower && !c->sim);
    if (!row)
        return;
    snprintf(row->base, sizeof row->base, "%.4g s", b);
    snprintf(row->cur, sizeof row->cur, "%.4g s", cur);
    if (b > 0)
        snprintf(row->change, sizeof row->change, "%+.1f%%", (cur - b) / b * 100.0);
    else
        snprintf(row->change, sizeof row->change, "from 0");
    snprintf(row->note, sizeof row->note, "%s", !slower ? "faster" : c->sim ? "slower; sim times never fail" : "");
}

/* A series of numbers by index (same length): one row, at the first element beyond the tolerance (else the first
 * that moved), with how many moved. labels: the samples' labels, or NULL. */
static void cmp_series(ctx *c, const char *metric, const double *b, const double *cur, size_t n,
                       const char *const *labels)
{
    size_t moved = 0, first = n, first_beyond = n;
    for (size_t i = 0; i < n; i++) {
        if (b[i] == cur[i])
            continue;
        moved++;
        if (first == n)
            first = i;
        if (first_beyond == n && beyond(b[i], cur[i], c->o->tolerance))
            first_beyond = i;
    }
    if (!moved)
        return;
    size_t at = first_beyond < n ? first_beyond : first;
    char name[112], extra[64];
    if (labels)
        snprintf(name, sizeof name, "%s @ %zu '%.48s'", metric, at, labels[at]);
    else
        snprintf(name, sizeof name, "%s [%zu]", metric, at);
    snprintf(extra, sizeof extra, "; %zu of %zu moved", moved, n);
    /* the row is a regression when any element is beyond the tolerance */
    if (first_beyond < n) {
        compare_row *row = add_row(c, name, true);
        if (!row)
            return;
        num_str(b[at], row->base, sizeof row->base);
        num_str(cur[at], row->cur, sizeof row->cur);
        char ch[80];
        change_str(b[at], cur[at], ch, sizeof ch);
        snprintf(row->change, sizeof row->change, "%.60s%.50s", ch, extra);
    } else {
        cmp_count(c, name, b[at], cur[at], extra);
    }
}

static double num(const cJSON *o, const char *key) { return runset_num(o, key, 0); }

/* The samples of two variants (or devices): count and labels must agree, then every counter as a series. */
static void cmp_samples(ctx *c, const char *prefix, const cJSON *bs, const cJSON *cs)
{
    size_t nb = (size_t)cJSON_GetArraySize(bs), nc = (size_t)cJSON_GetArraySize(cs);
    char metric[112];
    if (nb != nc) {
        char b[40], cur[40];
        snprintf(b, sizeof b, "%zu", nb);
        snprintf(cur, sizeof cur, "%zu", nc);
        snprintf(metric, sizeof metric, "%ssamples", prefix);
        add_text_row(c, metric, b, cur, true, "the steps differ");
        return;
    }
    if (nb == 0)
        return;
    const char **labels = calloc(nb, sizeof *labels);
    double *vb = calloc(nb, sizeof *vb), *vc = calloc(nb, sizeof *vc);
    if (!labels || !vb || !vc) {
        c->oom = true;
        goto out;
    }
    size_t i = 0;
    for (const cJSON *sb = bs->child, *sc = cs->child; sb && sc; sb = sb->next, sc = sc->next, i++) {
        labels[i] = runset_str(sb, "label", "");
        if (strcmp(labels[i], runset_str(sc, "label", "")) != 0) {
            snprintf(metric, sizeof metric, "%ssample %zu label", prefix, i);
            add_text_row(c, metric, labels[i], runset_str(sc, "label", ""), true, "the steps differ");
            goto out;
        }
    }
    for (size_t k = 0; k < N(sample_keys); k++) {
        i = 0;
        for (const cJSON *sb = bs->child, *sc = cs->child; sb && sc; sb = sb->next, sc = sc->next, i++) {
            vb[i] = num(sb, sample_keys[k]);
            vc[i] = num(sc, sample_keys[k]);
        }
        snprintf(metric, sizeof metric, "%s%s", prefix, sample_keys[k]);
        cmp_series(c, metric, vb, vc, nb, labels);
    }
out:
    free(labels);
    free(vb);
    free(vc);
}

/* The values of metric name in a variant's "metrics", in order; *n of them (caller frees). */
static double *metric_values(const cJSON *mets, const char *name, size_t *n)
{
    size_t cap = 0, k = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, mets) cap += strcmp(runset_str(m, "name", ""), name) == 0;
    double *v = malloc((cap ? cap : 1) * sizeof *v);
    if (!v)
        return NULL;
    cJSON_ArrayForEach(m, mets) if (strcmp(runset_str(m, "name", ""), name) == 0) v[k++] = num(m, "value");
    *n = k;
    return v;
}

static bool is_time(const cJSON *m) { return strcmp(runset_str(m, "unit", ""), "s") == 0; }

/* The scenario's metrics (scn_metric): one series per name, in first-seen order of the baseline; then names only
 * the current run has (new: information). */
static void cmp_metrics(ctx *c, const cJSON *bm, const cJSON *cm)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, bm)
    {
        const char *name = runset_str(m, "name", "");
        bool seen = false;
        for (const cJSON *p = bm->child; p != m && !seen; p = p->next)
            seen = strcmp(runset_str(p, "name", ""), name) == 0;
        if (seen)
            continue;
        size_t nb = 0, nc = 0;
        double *vb = metric_values(bm, name, &nb), *vc = metric_values(cm, name, &nc);
        if (!vb || !vc) {
            free(vb);
            free(vc);
            c->oom = true;
            return;
        }
        char metric[112];
        if (is_time(m)) {
            double sb = 0, sc = 0;
            for (size_t i = 0; i < nb; i++)
                sb += vb[i];
            for (size_t i = 0; i < nc; i++)
                sc += vc[i];
            if (nb > 1)
                snprintf(metric, sizeof metric, "%s (sum of %zu)", name, nb);
            else
                snprintf(metric, sizeof metric, "%s", name);
            if (nc > 0)
                cmp_time(c, metric, sb, sc);
        } else if (nb != nc) {
            char b[40], cur[40];
            snprintf(b, sizeof b, "%zu values", nb);
            snprintf(cur, sizeof cur, "%zu values", nc);
            snprintf(metric, sizeof metric, "metric %s", name);
            add_text_row(c, metric, b, cur, true, nc ? "the steps differ" : "not measured");
        } else if (nb == 1) {
            snprintf(metric, sizeof metric, "metric %s", name);
            cmp_count(c, metric, vb[0], vc[0], NULL);
        } else {
            snprintf(metric, sizeof metric, "metric %s", name);
            cmp_series(c, metric, vb, vc, nb, NULL);
        }
        free(vb);
        free(vc);
    }
    cJSON_ArrayForEach(m, cm)
    {
        const char *name = runset_str(m, "name", "");
        bool known = false;
        const cJSON *p;
        cJSON_ArrayForEach(p, bm) known = known || strcmp(runset_str(p, "name", ""), name) == 0;
        bool seen = false;
        for (p = cm->child; p != m && !seen; p = p->next)
            seen = strcmp(runset_str(p, "name", ""), name) == 0;
        if (known || seen || is_time(m)) /* a baseline on sim keeps no times: not new */
            continue;
        char metric[112];
        snprintf(metric, sizeof metric, "metric %s", name);
        add_text_row(c, metric, "-", "measured", false, "new: make baseline records it");
    }
}

static const char *bool_word(bool v, const char *yes, const char *no) { return v ? yes : no; }

static void cmp_variant(ctx *c, const cJSON *bv, const cJSON *cv)
{
    c->r->variants++;
    const char *bo = runset_str(bv, "outcome", ""), *co = runset_str(cv, "outcome", "");
    if (strcmp(bo, co) != 0)
        add_text_row(c, "outcome", bo, co, true, NULL);
    bool br = cJSON_IsTrue(runset_get(bv, "reproduced")), cr = cJSON_IsTrue(runset_get(cv, "reproduced"));
    if (br != cr)
        add_text_row(c, "reproduced", bool_word(br, "yes", "no"), bool_word(cr, "yes", "no"), true, NULL);
    const cJSON *boom = runset_get(bv, "oom"), *coom = runset_get(cv, "oom");
    if (cJSON_IsObject(boom) != cJSON_IsObject(coom)) {
        add_text_row(c, "oom", cJSON_IsObject(boom) ? "OOM" : "none", cJSON_IsObject(coom) ? "OOM" : "none", true,
                     NULL);
    } else if (cJSON_IsObject(boom)) {
        double bstep = num(boom, "step"), cstep = num(coom, "step");
        const char *bw = runset_str(boom, "what", ""), *cw = runset_str(coom, "what", "");
        if (bstep != cstep || strcmp(bw, cw) != 0) {
            char b[40], cur[40];
            snprintf(b, sizeof b, "%.0f (%.28s)", bstep, bw);
            snprintf(cur, sizeof cur, "%.0f (%.28s)", cstep, cw);
            add_text_row(c, "oom step", b, cur, true, NULL);
        }
        cmp_count(c, "oom requested", num(boom, "requested"), num(coom, "requested"), NULL);
    }
    cmp_count(c, "story_ooms", num(bv, "story_ooms"), num(cv, "story_ooms"), NULL);
    /* what the kind promises (a fix fits, a partial saves): whether it holds is an outcome; the bytes a partial fix
     * saves are a byte counter */
    const cJSON *bk = runset_get(bv, "kind_check"), *ck = runset_get(cv, "kind_check");
    bool bkh = !cJSON_IsObject(bk) || cJSON_IsTrue(runset_get(bk, "holds"));
    bool ckh = !cJSON_IsObject(ck) || cJSON_IsTrue(runset_get(ck, "holds"));
    if (bkh != ckh)
        add_text_row(c, "kind check", bool_word(bkh, "holds", "fails"), bool_word(ckh, "holds", "fails"), true, NULL);
    cmp_count(c, "saved", num(runset_get(bv, "saved"), "bytes"), num(runset_get(cv, "saved"), "bytes"), NULL);
    const cJSON *be = runset_get(bv, "expectations"), *ce = runset_get(cv, "expectations");
    int nbe = cJSON_GetArraySize(be), nce = cJSON_GetArraySize(ce);
    if (nbe != nce) {
        char b[40], cur[40];
        snprintf(b, sizeof b, "%d", nbe);
        snprintf(cur, sizeof cur, "%d", nce);
        add_text_row(c, "expectations", b, cur, true, NULL);
    } else {
        int i = 0;
        for (const cJSON *x = be->child, *y = ce->child; x && y; x = x->next, y = y->next, i++) {
            bool hx = cJSON_IsTrue(runset_get(x, "holds")), hy = cJSON_IsTrue(runset_get(y, "holds"));
            if (hx == hy)
                continue;
            char metric[112];
            snprintf(metric, sizeof metric, "expectation %d: %.80s", i + 1, runset_str(y, "text", ""));
            add_text_row(c, metric, bool_word(hx, "holds", "fails"), bool_word(hy, "holds", "fails"), true, NULL);
        }
    }
    cmp_count(c, "peak_allocated", num(bv, "peak_allocated"), num(cv, "peak_allocated"), NULL);
    cmp_count(c, "peak_reserved", num(bv, "peak_reserved"), num(cv, "peak_reserved"), NULL);
    cmp_samples(c, "", runset_get(bv, "samples"), runset_get(cv, "samples"));
    const cJSON *bms = runset_get(bv, "memory_stats"), *cms = runset_get(cv, "memory_stats");
    for (size_t k = 0; k < N(compare_stats); k++)
        cmp_count(c, compare_stats[k], num(bms, compare_stats[k]), num(cms, compare_stats[k]), NULL);
    cmp_metrics(c, runset_get(bv, "metrics"), runset_get(cv, "metrics"));
    /* the variant's extra devices, matched by index */
    const cJSON *bd, *cd;
    cJSON_ArrayForEach(bd, runset_get(bv, "devices"))
    {
        double idx = num(bd, "index");
        const cJSON *match = NULL;
        cJSON_ArrayForEach(cd, runset_get(cv, "devices")) if (num(cd, "index") == idx) match = cd;
        char prefix[32], metric[112];
        snprintf(prefix, sizeof prefix, "device %.0f ", idx);
        if (!match) {
            snprintf(metric, sizeof metric, "%sdevice", prefix);
            add_text_row(c, metric, "present", "absent", true, NULL);
            continue;
        }
        snprintf(metric, sizeof metric, "%speak_allocated", prefix);
        cmp_count(c, metric, num(bd, "peak_allocated"), num(match, "peak_allocated"), NULL);
        snprintf(metric, sizeof metric, "%speak_reserved", prefix);
        cmp_count(c, metric, num(bd, "peak_reserved"), num(match, "peak_reserved"), NULL);
        cmp_samples(c, prefix, runset_get(bd, "samples"), runset_get(match, "samples"));
    }
    if (cJSON_GetArraySize(runset_get(cv, "devices")) > cJSON_GetArraySize(runset_get(bv, "devices")))
        add_text_row(c, "devices", "fewer", "more", true, NULL);
    const cJSON *bsec = runset_get(bv, "seconds"), *csec = runset_get(cv, "seconds");
    if (cJSON_IsNumber(bsec) && cJSON_IsNumber(csec))
        cmp_time(c, "seconds", bsec->valuedouble, csec->valuedouble);
}

static const cJSON *find_variant(const cJSON *doc, const char *name)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, runset_get(doc, "variants")) if (strcmp(runset_str(v, "name", ""), name) == 0) return v;
    return NULL;
}

/* The runs of one scenario can be compared: same backend, scale, dry run, budget, cap, device total, user
 * settings and parameters. false with one line in err naming the first difference. */
static bool comparable(const runset_doc *b, const runset_doc *c, char *err, size_t cap)
{
    const cJSON *bj = b->json, *cj = c->json;
    if (strcmp(b->backend, c->backend) != 0) {
        snprintf(err, cap, "%s: runs of different backends: %s in the baseline (%s), %s in this run (%s)", b->scenario,
                 b->backend, b->path, c->backend, c->path);
        return false;
    }
    static const char *const strs[] = {"scale", "alloc_conf_user", "block_order"}; /* absent (older runs): "" */
    for (size_t i = 0; i < N(strs); i++) {
        const char *x = runset_str(bj, strs[i], ""), *y = runset_str(cj, strs[i], "");
        if (strcmp(x, y) != 0) {
            char e1[ECHO_BUF], e2[ECHO_BUF];
            snprintf(err, cap, "%s: runs of different parameters: %s '%s' in the baseline, '%s' in this run",
                     b->scenario, strs[i], echo_str(x, e1), echo_str(y, e2));
            return false;
        }
    }
    if (cJSON_IsTrue(runset_get(bj, "dry_run")) != cJSON_IsTrue(runset_get(cj, "dry_run"))) {
        snprintf(err, cap, "%s: runs of different parameters: dry_run %s in the baseline, %s in this run", b->scenario,
                 cJSON_IsTrue(runset_get(bj, "dry_run")) ? "true" : "false",
                 cJSON_IsTrue(runset_get(cj, "dry_run")) ? "true" : "false");
        return false;
    }
    const cJSON *bm = runset_get(bj, "memory_caching"), *cm = runset_get(cj, "memory_caching");
    if (!cJSON_Compare(bm, cm, true) && (bm || cm)) { /* absent in one: a results file older than the key */
        snprintf(err, cap, "%s: runs of different parameters: memory_caching %s in the baseline, %s in this run",
                 b->scenario, !bm ? "absent" : cJSON_IsTrue(bm) ? "true" : "false",
                 !cm ? "absent" : cJSON_IsTrue(cm) ? "true" : "false");
        return false;
    }
    static const char *const nums[] = {"budget", "cap", "device_total"};
    for (size_t i = 0; i < N(nums); i++) {
        double x = runset_num(bj, nums[i], -1), y = runset_num(cj, nums[i], -1);
        if (x != y) {
            snprintf(err, cap, "%s: runs of different parameters: %s %.0f in the baseline, %.0f in this run",
                     b->scenario, nums[i], x, y);
            return false;
        }
    }
    const cJSON *bp = runset_get(bj, "params"), *cp = runset_get(cj, "params"), *p;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass ? cp : bp;
        cJSON_ArrayForEach(p, from)
        {
            const cJSON *q = runset_get(pass ? bp : cp, p->string);
            if (!q || !cJSON_IsNumber(q) || !cJSON_IsNumber(p) || q->valuedouble != p->valuedouble) {
                char have[32] = "absent";
                if (q && cJSON_IsNumber(q))
                    snprintf(have, sizeof have, "%.0f", q->valuedouble);
                snprintf(err, cap, "%s: runs of different parameters: %s %.0f in %s, %s in %s", b->scenario,
                         p->string, p->valuedouble, pass ? "this run" : "the baseline", have,
                         pass ? "the baseline" : "this run");
                return false;
            }
        }
    }
    return true;
}

static bool known(const char *const *keys, const char *k)
{
    for (; *keys; keys++)
        if (strcmp(*keys, k) == 0)
            return true;
    return false;
}

/* A row for each key of o outside keys (where: "" or "samples[3]." before it), in the baseline's or this run's
 * (in_base) document. */
static void unknown_in(ctx *c, const cJSON *o, const char *const *keys, const char *where, bool in_base)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, o)
    {
        if (!k->string || known(keys, k->string))
            continue;
        char e1[ECHO_BUF], metric[112];
        snprintf(metric, sizeof metric, "key %s'%s'", where, echo_str(k->string, e1));
        add_text_row(c, metric, in_base ? "present" : "-", in_base ? "-" : "present", false,
                     "a key compare does not know: not compared");
    }
}

/* The keys compare does not know in one document, each reported with the scenario and variant it is in. */
static void unknown_keys(ctx *c, const runset_doc *d, bool in_base)
{
    c->scenario = d->scenario;
    c->variant = NULL;
    unknown_in(c, d->json, known_top, "", in_base);
    const cJSON *v;
    cJSON_ArrayForEach(v, runset_get(d->json, "variants"))
    {
        c->variant = runset_str(v, "name", "");
        unknown_in(c, v, known_variant, "", in_base);
        char where[48];
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, runset_get(v, "samples"))
        {
            snprintf(where, sizeof where, "samples[%d].", i++);
            unknown_in(c, e, known_sample, where, in_base);
        }
        i = 0;
        cJSON_ArrayForEach(e, runset_get(v, "metrics"))
        {
            snprintf(where, sizeof where, "metrics[%d].", i++);
            unknown_in(c, e, known_metric, where, in_base);
        }
        i = 0;
        cJSON_ArrayForEach(e, runset_get(v, "expectations"))
        {
            snprintf(where, sizeof where, "expectations[%d].", i++);
            unknown_in(c, e, known_expect, where, in_base);
        }
        if (cJSON_IsObject(runset_get(v, "oom")))
            unknown_in(c, runset_get(v, "oom"), known_oom, "oom.", in_base);
        i = 0;
        cJSON_ArrayForEach(e, runset_get(v, "devices"))
        {
            snprintf(where, sizeof where, "devices[%d].", i++);
            unknown_in(c, e, known_device, where, in_base);
            const cJSON *ds;
            int j = 0;
            cJSON_ArrayForEach(ds, runset_get(e, "samples"))
            {
                snprintf(where, sizeof where, "devices[%d].samples[%d].", i - 1, j++);
                unknown_in(c, ds, known_sample, where, in_base);
            }
        }
    }
}

static void note(compare_result *r, const char *fmt, ...)
{
    if (r->nnotes == N(r->notes))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes[r->nnotes++], sizeof r->notes[0], fmt, ap);
    va_end(ap);
}

oom_status compare_runsets(const runset *base, const runset *cur, const compare_options *o, compare_result *out,
                           char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    out->backend = cur->n ? cur->docs[0].backend : "";
    size_t common = 0;
    for (size_t i = 0; i < cur->n; i++) {
        const runset_doc *b = runset_find(base, cur->docs[i].scenario);
        if (b && !comparable(b, &cur->docs[i], err, errcap))
            return OOM_EINVAL;
        common += b != NULL;
    }
    if (common == 0) {
        snprintf(err, errcap, "nothing to compare: no scenario of %s is in %s", cur->path, base->path);
        return OOM_EINVAL;
    }
    ctx c = {.r = out, .o = o};
    bool times_absent = false;
    for (size_t i = 0; i < cur->n && !c.oom; i++) {
        const runset_doc *cd = &cur->docs[i], *bd = runset_find(base, cd->scenario);
        c.scenario = cd->scenario;
        c.variant = NULL;
        c.sim = strcmp(cd->backend, "sim") == 0;
        if (!bd) {
            add_text_row(&c, "scenario", "-", "run", false, "new: make baseline records it");
            continue;
        }
        out->scenarios++;
        unknown_keys(&c, bd, true);
        unknown_keys(&c, cd, false);
        c.scenario = cd->scenario;
        c.variant = NULL;
        const cJSON *v;
        cJSON_ArrayForEach(v, runset_get(bd->json, "variants"))
        {
            c.variant = runset_str(v, "name", "");
            const cJSON *match = find_variant(cd->json, c.variant);
            if (!match)
                add_text_row(&c, "variant", "run", "absent", true, NULL);
            else
                cmp_variant(&c, v, match);
            times_absent = times_absent || (match && !runset_get(v, "seconds"));
        }
        cJSON_ArrayForEach(v, runset_get(cd->json, "variants"))
        {
            c.variant = runset_str(v, "name", "");
            if (!find_variant(bd->json, c.variant))
                add_text_row(&c, "variant", "-", "run", false, "new: make baseline records it");
        }
    }
    if (c.oom) {
        compare_result_free(out);
        snprintf(err, errcap, "out of host memory");
        return OOM_ENOMEM_HOST;
    }
    /* what was not compared, said */
    if (cur->folder) {
        for (size_t i = 0; i < base->n; i++) {
            if (runset_find(cur, base->docs[i].scenario))
                continue;
            c.scenario = base->docs[i].scenario;
            c.variant = NULL;
            add_text_row(&c, "scenario", "run", "absent", true, "in the baseline, not in this run");
        }
    } else if (base->n > 1) {
        note(out, "compared %zu of the baseline's %zu scenarios (CURRENT is one file)", common, base->n);
    }
    if (o->time_tolerance < 0)
        note(out, "times: not compared (--time-tolerance P%% compares them)");
    else if (times_absent)
        note(out, "times: the baseline has none to compare (a baseline on sim keeps no times)");
    else if (strcmp(out->backend, "sim") == 0)
        note(out, "times: compared within %g%%, but on sim they never fail (the CPU references' times)",
             o->time_tolerance * 100);
    if (base->skipped_sweeps || cur->skipped_sweeps)
        note(out, "skipped: %zu sweep file(s) (SCENARIO.sweep.json, not runs)", base->skipped_sweeps + cur->skipped_sweeps);
    return OOM_OK;
}

void compare_result_free(compare_result *r)
{
    free(r->rows);
    r->rows = NULL;
    r->nrows = r->cap = 0;
}

void compare_table(const compare_result *r, const compare_options *o, FILE *out)
{
    fprintf(out, "bytes and counts: %s", o->tolerance > 0 ? "within " : "exact");
    if (o->tolerance > 0)
        fprintf(out, "%g%% (--tolerance)", o->tolerance * 100);
    fprintf(out, "; outcomes, OOM steps and expectations: unchanged\n");
    for (size_t i = 0; i < r->nnotes; i++)
        fprintf(out, "%s\n", r->notes[i]);
    if (r->nrows) {
        int ws = 8, wv = 7, wm = 6, wb = 8, wc = 7;
        for (size_t i = 0; i < r->nrows; i++) {
            const compare_row *x = &r->rows[i];
#define W(w, s) w = (int)strlen(s) > w ? (int)strlen(s) : w
            W(ws, x->scenario);
            W(wv, x->variant);
            W(wm, x->metric);
            W(wb, x->base);
            W(wc, x->cur);
#undef W
        }
        fprintf(out, "\n%-*s %-*s %-*s %*s %*s  %s\n", ws, "scenario", wv, "variant", wm, "metric", wb, "baseline", wc,
                "current", "change");
        for (size_t i = 0; i < r->nrows; i++) {
            const compare_row *x = &r->rows[i];
            fprintf(out, "%-*s %-*s %-*s %*s %*s  %s  %s%s%s\n", ws, x->scenario, wv, x->variant, wm, x->metric, wb,
                    x->base, wc, x->cur, x->change, x->regression ? "✗" : "·", x->note[0] ? " " : "", x->note);
        }
        fputc('\n', out);
    }
    if (r->regressions == 0) {
        fprintf(out, "no regression: %zu variants in %zu scenarios compared%s\n", r->variants, r->scenarios,
                r->nrows ? "" : ", nothing moved");
        return;
    }
    fprintf(out, "%zu regression%s in %zu variants of %zu scenarios:", r->regressions, r->regressions == 1 ? "" : "s",
            r->variants, r->scenarios);
    size_t shown = 0;
    for (size_t i = 0; i < r->nrows && shown < 3; i++) {
        const compare_row *x = &r->rows[i];
        if (!x->regression)
            continue;
        fprintf(out, "%s %s/%s %s", shown ? "," : "", x->scenario, x->variant, x->metric);
        shown++;
    }
    fprintf(out, "%s\n", r->regressions > shown ? ", ..." : "");
}
