/* history.c - the nightly history and its steps. See history.h. */
#include "results/history.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/echo.h"
#include "core/fail.h"
#include "core/fileio.h"
#include "core/strbuf.h"
#include "run/scenario.h"

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

/* The metrics, and the range of each: bytes and counts are integers from 0 to 2^53 (exact in a double), an OOM
 * step an int, seconds from 0 to 1e9. */
typedef enum { M_COUNT, M_STEP, M_SECONDS } metric_kind;
static const struct {
    const char *name;
    metric_kind kind;
} metrics[] = {{"peak_allocated", M_COUNT},      {"peak_reserved", M_COUNT},     {"total_allocated", M_COUNT},
               {"segments_peak", M_COUNT},       {"num_alloc_retries", M_COUNT}, {"expectations_failed", M_COUNT},
               {"seconds", M_SECONDS},           {"oom_step", M_STEP},           {"oom_requested", M_COUNT}};

const char *history_value_problem(const char *metric, double v)
{
    size_t i = 0, n = sizeof metrics / sizeof metrics[0];
    while (i < n && strcmp(metrics[i].name, metric) != 0)
        i++;
    if (i == n)
        return "is not a metric of the history (" HISTORY_METRICS ")";
    if (!isfinite(v))
        return "is not a finite number";
    if (v < 0 || signbit(v))
        return "is negative";
    switch (metrics[i].kind) {
    case M_COUNT:
        return v != floor(v) ? "is not a whole number" : v > 9007199254740992.0 ? "is more than 2^53" : NULL;
    case M_STEP:
        return v != floor(v) ? "is not a whole number" : v > 2147483647.0 ? "is more than 2^31 - 1" : NULL;
    case M_SECONDS:
        return v > 1e9 ? "is more than 1e9 seconds" : NULL;
    }
    return NULL;
}

/* Warn about a row skipped: "history: FILE line N skipped: why", on stderr, the first HISTORY_WARN_MAX of a file. */
enum { HISTORY_WARN_MAX = 5 };
static void skip_row(history *h, const char *path, size_t line, const char *fmt, ...)
{
    if (h->skipped++ >= HISTORY_WARN_MAX)
        return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "history: warning: %s line %zu skipped: %s\n", path, line, why);
}

oom_status history_read(const char *path, history *h, char *err, size_t cap)
{
    memset(h, 0, sizeof *h);
    size_t len = 0;
    fileio_limit lim = runset_input_limit(); /* the bound of every results reader (--max-input) */
    h->text = fileio_read_limited(path, &lim, &len, NULL);
    if (!h->text)
        return errbuf_fail(err, cap, OOM_EINVAL, "%s", oom_error_detail());
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += h->text[i] == '\n';
    h->rows = calloc(lines, sizeof *h->rows);
    if (!h->rows) {
        history_free(h);
        return errbuf_fail(err, cap, OOM_ENOMEM_HOST, "out of host memory");
    }
    /* one row per line: a line is cut out (NUL at its '\n') before it is split, so a bad row (an open quote, a
     * NUL) never reaches into the next */
    if (len == 0) {
        history_free(h);
        return errbuf_fail(err, cap, OOM_EINVAL, "%s: line 1 is not the header %s", path, HISTORY_HEADER);
    }
    char *p = h->text, *end = h->text + len;
    char *f[HISTORY_NCOLS];
    for (size_t line = 1; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *next = nl ? nl + 1 : end;
        if (nl)
            *nl = '\0';
        size_t n = strlen(p);
        bool has_nul = p + n < (nl ? nl : end);
        if (n && p[n - 1] == '\r')
            p[--n] = '\0';
        char *row = p;
        p = next;
        if (line == 1) {
            int nf = split_line(&row, f, HISTORY_NCOLS);
            char header[256] = "";
            for (int i = 0; i < nf && i < HISTORY_NCOLS; i++)
                snprintf(header + strlen(header), sizeof header - strlen(header), "%s%s", i ? "," : "", f[i]);
            if (nf != HISTORY_NCOLS || strcmp(header, HISTORY_HEADER) != 0) {
                history_free(h);
                return errbuf_fail(err, cap, OOM_EINVAL, "%s: line 1 is not the header %s", path, HISTORY_HEADER);
            }
            continue;
        }
        if (n == 0)
            continue; /* an empty line */
        if (has_nul) {
            skip_row(h, path, line, "a NUL byte in it");
            continue;
        }
        int nf = split_line(&row, f, HISTORY_NCOLS);
        if (nf != HISTORY_NCOLS) {
            if (nf < 0)
                skip_row(h, path, line, "a quote is not closed");
            else
                skip_row(h, path, line, "%d fields, not %d (%s)", nf, HISTORY_NCOLS, HISTORY_HEADER);
            continue;
        }
        char *vend = NULL, e1[ECHO_BUF], e2[ECHO_BUF];
        double v = strtod(f[8], &vend);
        if (!scenario_name_ok(f[5]) || !scenario_name_ok(f[6])) { /* never appended; a figure's file is named so */
            bool scn_bad = !scenario_name_ok(f[5]);
            skip_row(h, path, line, "%s '%s' is not a %s name", scn_bad ? "scenario" : "variant",
                     echo_str(f[scn_bad ? 5 : 6], e1), scn_bad ? "scenario" : "variant");
            continue;
        }
        if (history_value_problem(f[7], 0)) { /* 0 fits every metric: the metric is unknown */
            skip_row(h, path, line, "metric '%s' %s", echo_str(f[7], e1), history_value_problem(f[7], 0));
            continue;
        }
        const char *why = !f[8][0] || !vend || *vend ? "is not a number" : history_value_problem(f[7], v);
        if (why) {
            skip_row(h, path, line, "%s value '%s' %s", f[7], echo_str(f[8], e2), why);
            continue;
        }
        history_row *r = &h->rows[h->n++];
        for (int i = 0; i < HISTORY_NCOLS - 1; i++)
            r->col[i] = f[i];
        r->value = v;
    }
    if (h->skipped > HISTORY_WARN_MAX)
        fprintf(stderr, "history: warning: %s: %zu more bad row%s skipped (%zu in all)\n", path,
                h->skipped - HISTORY_WARN_MAX, h->skipped - HISTORY_WARN_MAX == 1 ? "" : "s", h->skipped);
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

/* One row; false (nothing added) with one line in err when the value is out of its metric's range. */
static bool put_row(strbuf *b, const char *const *cols, const char *metric, double value, size_t *added,
                    const char *path, char *err, size_t cap)
{
    const char *why = history_value_problem(metric, value);
    if (why) {
        char e1[ECHO_BUF], num[64];
        snprintf(num, sizeof num, "%.17g", value);
        errbuf_fail(err, cap, OOM_EINVAL, "%s: variant '%s': %s %s %s: nothing appended", path, echo_str(cols[6], e1),
             metric, num, why);
        return false;
    }
    for (int i = 0; i < HISTORY_NCOLS - 2; i++)
        put_field(b, cols[i]);
    put_field(b, metric);
    if (value == floor(value) && fabs(value) < 9e15)
        strbuf_printf(b, "%.0f\n", value);
    else
        strbuf_printf(b, "%.9g\n", value);
    (*added)++;
    return true;
}

/* A text column of a run: no control characters (a newline would split the row). */
static bool text_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

/* The rows of every run of s into b, every value and name checked first: OOM_EINVAL with one line in err (and
 * *added rows in b, to be dropped) at the first that is not right. */
static oom_status rows_of(const runset *s, const char *commit, strbuf *b, size_t *added, char *err, size_t cap)
{
    static const char *const text_keys[] = {"started", "backend", "device", "scale"};
    char e1[ECHO_BUF];
    for (size_t i = 0; i < s->n; i++) {
        const cJSON *j = s->docs[i].json, *v;
        const char *path = s->docs[i].path;
        if (!runset_str(j, "started", NULL))
            return errbuf_fail(err, cap, OOM_EINVAL, "%s: no \"started\": a baseline, not a run (history takes runs)", path);
        for (size_t k = 0; k < sizeof text_keys / sizeof text_keys[0]; k++)
            if (!text_ok(runset_str(j, text_keys[k], "")))
                return errbuf_fail(err, cap, OOM_EINVAL, "%s: \"%s\" '%s' has a control character (a line break?)", path,
                            text_keys[k], echo_str(runset_str(j, text_keys[k], ""), e1));
        const char *scname = runset_str(j, "scenario", "");
        if (!scenario_name_ok(scname))
            return errbuf_fail(err, cap, OOM_EINVAL, "%s: scenario '%s' is not a scenario name (a-z, then a-z, 0-9, '_' or "
                        "'-', at most %d bytes)", path, echo_str(scname, e1), SCENARIO_NAME_MAX);
        const char *cols[HISTORY_NCOLS - 2] = {runset_str(j, "started", ""), commit, runset_str(j, "backend", ""),
                                               runset_str(j, "device", ""), runset_str(j, "scale", ""), scname, ""};
        cJSON_ArrayForEach(v, runset_get(j, "variants"))
        {
            cols[6] = runset_str(v, "name", "");
            if (!scenario_name_ok(cols[6]))
                return errbuf_fail(err, cap, OOM_EINVAL, "%s: variant '%s' is not a variant name (a-z, then a-z, 0-9, '_' "
                            "or '-', at most %d bytes)", path, echo_str(cols[6], e1), SCENARIO_NAME_MAX);
            const cJSON *ms = runset_get(v, "memory_stats"), *oom = runset_get(v, "oom"), *e;
            int failed = 0;
            cJSON_ArrayForEach(e, runset_get(v, "expectations")) failed += !cJSON_IsTrue(runset_get(e, "holds"));
            bool ok = put_row(b, cols, "peak_allocated", runset_num(v, "peak_allocated", 0), added, path, err, cap) &&
                      put_row(b, cols, "peak_reserved", runset_num(v, "peak_reserved", 0), added, path, err, cap) &&
                      put_row(b, cols, "total_allocated", runset_num(ms, "allocated_bytes.all.allocated", 0), added,
                              path, err, cap) &&
                      put_row(b, cols, "segments_peak", runset_num(ms, "segment.all.peak", 0), added, path, err,
                              cap) &&
                      put_row(b, cols, "num_alloc_retries", runset_num(ms, "num_alloc_retries", 0), added, path, err,
                              cap) &&
                      put_row(b, cols, "expectations_failed", failed, added, path, err, cap) &&
                      (!runset_get(v, "seconds") ||
                       put_row(b, cols, "seconds", runset_num(v, "seconds", 0), added, path, err, cap)) &&
                      (!cJSON_IsObject(oom) ||
                       (put_row(b, cols, "oom_step", runset_num(oom, "step", 0), added, path, err, cap) &&
                        put_row(b, cols, "oom_requested", runset_num(oom, "requested", 0), added, path, err, cap)));
            if (!ok)
                return OOM_EINVAL;
        }
    }
    return b->oom ? errbuf_fail(err, cap, OOM_ENOMEM_HOST, "out of host memory") : OOM_OK;
}

oom_status history_append(const char *path, const runset *s, const char *commit, size_t *added, char *err,
                          size_t cap)
{
    *added = 0;
    strbuf rows = {0};
    size_t n = 0;
    oom_status st = rows_of(s, commit, &rows, &n, err, cap); /* every run checked before the file is touched */
    if (st != OOM_OK) {
        free(rows.s);
        return st;
    }
    int fd = -1;
    if ((st = fileio_open_locked(path, &fd)) != OOM_OK) {
        free(rows.s);
        return errbuf_fail(err, cap, st, "%s", oom_error_detail());
    }
    /* under the lock: the header when the file is new, a line break when its last row has none */
    strbuf b = {0};
    off_t size = lseek(fd, 0, SEEK_END);
    char head[sizeof HISTORY_HEADER + 1] = "", last = '\n';
    size_t hlen = strlen(HISTORY_HEADER);
    ssize_t got = size > 0 ? pread(fd, head, hlen + 1, 0) : 0;
    if (size > 0 && pread(fd, &last, 1, size - 1) != 1)
        got = -1;
    if (size < 0 || got < 0) {
        st = errbuf_fail(err, cap, OOM_EIO, "cannot read %s", path);
    } else if (size > 0 && (memcmp(head, HISTORY_HEADER, hlen) != 0 || (got > (ssize_t)hlen && head[hlen] != '\n' &&
                                                                       head[hlen] != '\r'))) {
        st = errbuf_fail(err, cap, OOM_EINVAL, "%s: line 1 is not the header %s: not a history, nothing appended", path,
                  HISTORY_HEADER);
    } else {
        strbuf_printf(&b, "%s%s%s", size == 0 ? HISTORY_HEADER "\n" : "", last != '\n' ? "\n" : "",
                      rows.s ? rows.s : "");
        if (b.oom)
            st = errbuf_fail(err, cap, OOM_ENOMEM_HOST, "out of host memory");
        else if ((st = fileio_append(fd, path, b.s, b.n)) != OOM_OK)
            errbuf_fail(err, cap, st, "%s", oom_error_detail());
    }
    close(fd); /* the lock goes with it */
    free(b.s);
    free(rows.s);
    if (st == OOM_OK)
        *added = n;
    return st;
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
