/* history.c - the nightly history and its steps. See history.h. */
#include "run/history.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/echo.h"
#include "core/fileio.h"
#include "core/strbuf.h"

static oom_status fail(oom_status st, char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- reading ----------------------------------------------------------------------------------------------- */

/* Split the line at *p into fields (RFC 4180: "..." with "" for a quote), unquoted in place, NUL-terminated;
 * *p moves past the line's end. Returns the number of fields (at most max stored), -1 on an unterminated quote. */
static int split_line(char **p, char **fields, int max)
{
    char *s = *p;
    int n = 0;
    for (;;) {
        char *w = s, *start = s;
        if (*s == '"') {
            s++;
            for (;;) {
                if (*s == '\0')
                    return -1;
                if (*s == '"' && s[1] == '"') {
                    *w++ = '"';
                    s += 2;
                } else if (*s == '"') {
                    s++;
                    break;
                } else {
                    *w++ = *s++;
                }
            }
        } else {
            while (*s && *s != ',' && *s != '\n' && *s != '\r')
                *w++ = *s++;
        }
        char end = *s;
        if (n < max)
            fields[n] = start;
        n++;
        if (end == ',') {
            *w = '\0';
            s++;
            continue;
        }
        if (end == '\r')
            s++;
        if (*s == '\n')
            s++;
        *w = '\0';
        if (end != '\0' && end != '\n' && end != '\r')
            return -1; /* text after a closing quote */
        break;
    }
    *p = s;
    return n;
}

oom_status history_read(const char *path, history *h, char *err, size_t cap)
{
    memset(h, 0, sizeof *h);
    size_t len = 0;
    fileio_limit lim = runset_input_limit(); /* the bound of every results reader (--max-input) */
    h->text = fileio_read_limited(path, &lim, &len, NULL);
    if (!h->text)
        return fail(OOM_EINVAL, err, cap, "%s", oom_error_detail());
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += h->text[i] == '\n';
    h->rows = calloc(lines, sizeof *h->rows);
    if (!h->rows) {
        history_free(h);
        return fail(OOM_ENOMEM_HOST, err, cap, "out of host memory");
    }
    char *p = h->text;
    char *f[HISTORY_NCOLS];
    size_t line = 1;
    int nf = split_line(&p, f, HISTORY_NCOLS);
    char header[256] = "";
    for (int i = 0; i < nf && i < HISTORY_NCOLS; i++)
        snprintf(header + strlen(header), sizeof header - strlen(header), "%s%s", i ? "," : "", f[i]);
    if (nf != HISTORY_NCOLS || strcmp(header, HISTORY_HEADER) != 0) {
        history_free(h);
        return fail(OOM_EINVAL, err, cap, "%s: line 1 is not the header %s", path, HISTORY_HEADER);
    }
    while (*p) {
        line++;
        if (*p == '\n' || (*p == '\r' && p[1] == '\n')) { /* an empty line */
            p += *p == '\r' ? 2 : 1;
            continue;
        }
        nf = split_line(&p, f, HISTORY_NCOLS);
        if (nf != HISTORY_NCOLS) {
            history_free(h);
            return fail(OOM_EINVAL, err, cap, "%s: line %zu has %d fields, not %d (%s)", path, line, nf < 0 ? 0 : nf,
                        HISTORY_NCOLS, nf < 0 ? "a quote is not closed" : HISTORY_HEADER);
        }
        char *end = NULL;
        double v = strtod(f[8], &end);
        if (!f[8][0] || !end || *end || !isfinite(v)) { /* f[8] points into h's text: say it before freeing it */
            char e1[ECHO_BUF];
            oom_status st = fail(OOM_EINVAL, err, cap, "%s: line %zu: value '%s' is not a number", path, line,
                                 echo_str(f[8], e1));
            history_free(h);
            return st;
        }
        history_row *r = &h->rows[h->n++];
        for (int i = 0; i < HISTORY_NCOLS - 1; i++)
            r->col[i] = f[i];
        r->value = v;
    }
    return OOM_OK;
}

void history_free(history *h)
{
    free(h->rows);
    free(h->text);
    memset(h, 0, sizeof *h);
}

/* ---- appending --------------------------------------------------------------------------------------------- */

/* A CSV field: quoted when it holds a comma, quote or line break. */
static void put_field(strbuf *b, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        strbuf_printf(b, "%s,", s);
        return;
    }
    strbuf_printf(b, "\"");
    for (const char *c = s; *c; c++)
        strbuf_printf(b, *c == '"' ? "\"\"" : "%c", *c);
    strbuf_printf(b, "\",");
}

static void put_row(strbuf *b, const char *const *cols, const char *metric, double value, size_t *added)
{
    for (int i = 0; i < HISTORY_NCOLS - 2; i++)
        put_field(b, cols[i]);
    put_field(b, metric);
    if (value == floor(value) && fabs(value) < 9e15)
        strbuf_printf(b, "%.0f\n", value);
    else
        strbuf_printf(b, "%.9g\n", value);
    (*added)++;
}

oom_status history_append(const char *path, const runset *s, const char *commit, size_t *added, char *err,
                          size_t cap)
{
    *added = 0;
    for (size_t i = 0; i < s->n; i++)
        if (!runset_str(s->docs[i].json, "started", NULL))
            return fail(OOM_EINVAL, err, cap, "%s: no \"started\": a baseline, not a run (history takes runs)",
                        s->docs[i].path);
    strbuf b = {0};
    char *old = NULL;
    FILE *f = fopen(path, "r");
    if (f) {
        fclose(f);
        history h;
        oom_status st = history_read(path, &h, err, cap); /* a damaged history is not appended to */
        if (st != OOM_OK)
            return st;
        history_free(&h);
        size_t len = 0;
        old = fileio_read_all(path, &len);
        if (!old)
            return fail(OOM_EINVAL, err, cap, "%s", oom_error_detail());
        strbuf_printf(&b, "%s%s", old, len && old[len - 1] != '\n' ? "\n" : "");
        free(old);
    } else {
        strbuf_printf(&b, "%s\n", HISTORY_HEADER);
    }
    for (size_t i = 0; i < s->n; i++) {
        const cJSON *j = s->docs[i].json, *v;
        const char *cols[HISTORY_NCOLS - 2] = {runset_str(j, "started", ""), commit, runset_str(j, "backend", ""),
                                               runset_str(j, "device", ""), runset_str(j, "scale", ""),
                                               runset_str(j, "scenario", ""), ""};
        cJSON_ArrayForEach(v, runset_get(j, "variants"))
        {
            cols[6] = runset_str(v, "name", "");
            const cJSON *ms = runset_get(v, "memory_stats"), *oom = runset_get(v, "oom"), *e;
            int failed = 0;
            cJSON_ArrayForEach(e, runset_get(v, "expectations")) failed += !cJSON_IsTrue(runset_get(e, "holds"));
            put_row(&b, cols, "peak_allocated", runset_num(v, "peak_allocated", 0), added);
            put_row(&b, cols, "peak_reserved", runset_num(v, "peak_reserved", 0), added);
            put_row(&b, cols, "total_allocated", runset_num(ms, "allocated_bytes.all.allocated", 0), added);
            put_row(&b, cols, "segments_peak", runset_num(ms, "segment.all.peak", 0), added);
            put_row(&b, cols, "num_alloc_retries", runset_num(ms, "num_alloc_retries", 0), added);
            put_row(&b, cols, "expectations_failed", failed, added);
            if (runset_get(v, "seconds"))
                put_row(&b, cols, "seconds", runset_num(v, "seconds", 0), added);
            if (cJSON_IsObject(oom)) {
                put_row(&b, cols, "oom_step", runset_num(oom, "step", 0), added);
                put_row(&b, cols, "oom_requested", runset_num(oom, "requested", 0), added);
            }
        }
    }
    if (b.oom) {
        free(b.s);
        return fail(OOM_ENOMEM_HOST, err, cap, "out of host memory");
    }
    oom_status st = fileio_write_atomic(path, b.s, b.n);
    free(b.s);
    if (st != OOM_OK)
        return fail(st, err, cap, "%s", oom_error_detail());
    return OOM_OK;
}

/* ---- steps ------------------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(const double *y, size_t n, double *scratch)
{
    memcpy(scratch, y, n * sizeof *y);
    qsort(scratch, n, sizeof *scratch, cmp_double);
    return n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2;
}

/* The penalty per segment: 3 sigma ln(n), sigma from the MAD of successive differences; at least 1e-9 of the
 * series' scale. */
static double penalty(const double *y, size_t n, double *scratch)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fabs(y[i]) > scale ? fabs(y[i]) : scale;
    double floor_ = 1e-9 * (scale > 1 ? scale : 1);
    if (n < 3)
        return floor_;
    double *d = scratch + n;
    for (size_t i = 0; i + 1 < n; i++)
        d[i] = y[i + 1] - y[i];
    for (size_t i = 0; i + 1 < n; i++) /* not centred: a drift is not noise */
        d[i] = fabs(d[i]);
    double mad = median_of(d, n - 1, scratch);
    double sigma = 1.4826 * mad / sqrt(2.0);
    double g = 3.0 * sigma * log((double)n);
    return g > floor_ ? g : floor_;
}

size_t history_segments(const double *y, size_t n, size_t min_runs, size_t *starts, size_t max)
{
    if (min_runs < 1)
        min_runs = 1;
    if (n < 2 * min_runs)
        return 0;
    double *F = malloc((n + 1) * sizeof *F), *sorted = malloc(n * sizeof *sorted),
           *scratch = malloc(2 * n * sizeof *scratch);
    size_t *from = malloc((n + 1) * sizeof *from);
    size_t k = 0;
    if (!F || !sorted || !scratch || !from)
        goto out;
    double gamma = penalty(y, n, scratch);
    F[0] = 0;
    from[0] = 0;
    for (size_t j = 1; j <= n; j++) {
        F[j] = INFINITY;
        from[j] = 0;
        /* the segment [i, j), i going down: y[i] inserted into sorted[0..m), the L1 cost kept from prefix sums */
        size_t m = 0;
        double total = 0, lower = 0; /* lower: the sum of the first floor(m/2) sorted values */
        for (size_t i = j; i-- > 0;) {
            double x = y[i];
            size_t lo = 0, hi = m; /* insertion point */
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (sorted[mid] < x)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            size_t h = m / 2;
            if (m % 2 == 0) /* floor((m+1)/2) = h */
                lower = h == 0 ? 0 : (h <= lo ? lower : lower - sorted[h - 1] + x);
            else /* floor((m+1)/2) = h + 1 */
                lower = h + 1 <= lo ? lower + sorted[h] : lower + x;
            memmove(sorted + lo + 1, sorted + lo, (m - lo) * sizeof *sorted);
            sorted[lo] = x;
            m++;
            total += x;
            double cost = total - 2 * lower - (m % 2 ? sorted[m / 2] : 0);
            size_t len = j - i;
            if (len < min_runs || (i != 0 && i < min_runs) || F[i] == INFINITY)
                continue;
            double f = F[i] + cost + gamma;
            if (f < F[j] - 1e-12 * fabs(F[j] == INFINITY ? 0 : F[j])) {
                F[j] = f;
                from[j] = i;
            }
        }
    }
    /* walk back the segment starts */
    size_t tmp[4096], nt = 0;
    for (size_t j = n; j > 0 && from[j] > 0 && nt < sizeof tmp / sizeof tmp[0]; j = from[j])
        tmp[nt++] = from[j];
    for (size_t i = 0; i < nt && k < max; i++)
        starts[k++] = tmp[nt - 1 - i];
out:
    free(F);
    free(sorted);
    free(scratch);
    free(from);
    return k;
}

/* The key columns of a series: backend, device, scale, scenario, variant, metric. */
static const int key_cols[] = {2, 3, 4, 5, 6, 7};

static bool same_series(const history_row *a, const history_row *b)
{
    for (size_t i = 0; i < sizeof key_cols / sizeof key_cols[0]; i++)
        if (strcmp(a->col[key_cols[i]], b->col[key_cols[i]]) != 0)
            return false;
    return true;
}

size_t history_print_steps(const history *h, size_t min_runs, double threshold, FILE *out)
{
    bool *done = calloc(h->n ? h->n : 1, sizeof *done);
    size_t *idx = malloc((h->n ? h->n : 1) * sizeof *idx);
    double *y = malloc((h->n ? h->n : 1) * sizeof *y), *scratch = malloc((h->n ? h->n : 1) * sizeof *scratch);
    size_t *starts = malloc((h->n ? h->n : 1) * sizeof *starts);
    size_t found = 0;
    if (!done || !idx || !y || !scratch || !starts) {
        fprintf(out, "history: out of host memory\n");
        goto out;
    }
    for (size_t r = 0; r < h->n; r++) {
        if (done[r])
            continue;
        size_t n = 0;
        for (size_t q = r; q < h->n; q++) {
            if (!done[q] && same_series(&h->rows[r], &h->rows[q])) {
                done[q] = true;
                idx[n] = q;
                y[n++] = h->rows[q].value;
            }
        }
        size_t ns = history_segments(y, n, min_runs, starts, n);
        for (size_t s = 0; s < ns; s++) {
            size_t a = s ? starts[s - 1] : 0, b = starts[s], e = s + 1 < ns ? starts[s + 1] : n;
            double before = median_of(y + a, b - a, scratch), after = median_of(y + b, e - b, scratch);
            if (before == after || fabs(after - before) <= threshold * fabs(before))
                continue;
            const history_row *row = &h->rows[idx[b]];
            char pct[32] = "";
            if (before != 0)
                snprintf(pct, sizeof pct, ", %+.2f%%", (after - before) / fabs(before) * 100);
            fprintf(out, "  %s %s %s/%s %s: %.9g -> %.9g (%+.9g%s) at commit %s (%s), held %zu runs\n", row->col[2],
                    row->col[4], row->col[5], row->col[6], row->col[7], before, after, after - before, pct,
                    row->col[1], row->col[0], e - b);
            found++;
        }
    }
out:
    free(done);
    free(idx);
    free(y);
    free(scratch);
    free(starts);
    return found;
}
