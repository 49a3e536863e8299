/* plot.c - the figures of plot.h, as gnuplot scripts (gnuplot.h draws them). */
#include "figures/plot.h"

#include <cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/memstats.h"
#include "core/echo.h"
#include "core/fail.h"
#include "core/fileio.h"
#include "core/jsonfile.h"
#include "figures/gnuplot.h"
#include "results/history.h"
#include "results/runset.h"

#define WIDTH 1280 /* every figure: readable projected, and in a README */

/* Colours, one meaning each across the figures. */
#define C_RESERVED "#1f5fa8"
#define C_ALLOCATED "#ff7f0e"
#define C_GAP "#c6dbef"   /* reserved but unallocated; a free cached block in the segment map */
#define C_BUDGET "#333333"
#define C_OOM "#d62728"
#define C_UNMAPPED "#e0e0e0"
#define C_PEAK "#fdae6b" /* the allocated peak between two samples */
#define C_HOST "#7b3fa0" /* pinned host memory */

/* A byte count as people read it: "100.00 MiB" (PyTorch's format_size). */
static const char *gp_size(double bytes, char *buf, size_t cap)
{
    /* saturated: a double at or past 2^64 cast to uint64_t is undefined */
    return memstats_format_size(bytes >= 18446744073709551616.0 ? UINT64_MAX : bytes > 0 ? (uint64_t)bytes : 0, buf,
                                cap);
}

/* A sample index: a whole number from 0 to INT_MAX. */
static bool is_index(double x) { return x >= 0.0 && x <= 2147483647.0 && x == floor(x); }

/* Read a results file through the one validating reader (runset.h), as compare reads it: a run file, or with
 * sweeps also a sweep file. */
static oom_status load(const char *path, bool sweeps, cJSON **out, char *err, size_t errcap)
{
    return runset_read_file(path, sweeps, out, err, errcap);
}

/* A figure's panels, in pixels: a header across the top (the title, and the legend in one row under it, so the
 * legend never covers data), then rows x cols cells. Each panel's plot area is its cell less the pads, where its
 * tick labels, axis labels and title go; the areas are set exactly (margins at screen), so panels align. */
typedef struct layout {
    int height, header, cols, rows, cell_h, pad_l, pad_r, pad_t, pad_b;
    int pad_l0; /* more left padding in the first column (0 unless the caller sets it) */
} layout;

static void layout_init(layout *L, int n, int maxcols, int header, int cell_h, int pad_l, int pad_r, int pad_t,
                        int pad_b)
{
    int cols = n <= 1 ? 1 : n <= 4 ? 2 : 3;
    cols = cols > maxcols ? maxcols : cols;
    cols = cols > n ? (n > 0 ? n : 1) : cols;
    *L = (layout){.header = header, .cols = cols, .rows = (n + cols - 1) / cols, .cell_h = cell_h,
                  .pad_l = pad_l, .pad_r = pad_r, .pad_t = pad_t, .pad_b = pad_b};
    L->rows = L->rows > 0 ? L->rows : 1;
    L->height = header + L->rows * cell_h;
}

/* A legend entry, drawn by hand at screen coordinates: gnuplot's own key gives every column the width of the
 * longest entry, which wraps a legend of five short entries into rows. */
typedef enum key_style { KEY_LINE, KEY_DASH, KEY_DOTS, KEY_BOX, KEY_ARROW, KEY_CROSS, KEY_LINEPOINT } key_style;

typedef struct key_entry {
    key_style style;
    const char *colour; /* "#rrggbb" */
    char text[96];
} key_entry;

#define KEY_CHAR_PX 8.3 /* DejaVu Sans at 12 pt, an average character's advance at 96 dpi */
#define KEY_SAMPLE_PX 34
#define KEY_GAP_PX 26

/* Start the figure: the title at the top, then the legend centred under it, in rows that fit the width. */
static void layout_header(FILE *g, const layout *L, const char *title, const key_entry *keys, int nkeys)
{
    double H = L->height;
    fprintf(g, "set multiplot\n");
    fprintf(g, "set label 1001 ");
    gp_string(g, title);
    fprintf(g, " at screen 0.5, screen %.5f center font ',15'\n", 1 - 24.0 / H);
    /* rows of entries, each row centred */
    int first = 0, row = 0, obj = 1, lab = 1002;
    while (first < nkeys) {
        double w = 0;
        int last = first;
        while (last < nkeys) {
            double ew = KEY_SAMPLE_PX + 8 + KEY_CHAR_PX * (double)strlen(keys[last].text);
            if (last > first && w + KEY_GAP_PX + ew > WIDTH - 40)
                break;
            w += (last > first ? KEY_GAP_PX : 0) + ew;
            last++;
        }
        double x = (WIDTH - w) / 2, y = (H - 58 - 22.0 * row) / H;
        for (int k = first; k < last; k++) {
            const key_entry *e = &keys[k];
            double x0 = x / WIDTH, x1 = (x + KEY_SAMPLE_PX) / WIDTH, xm = (x + KEY_SAMPLE_PX / 2.0) / WIDTH;
            switch (e->style) {
            case KEY_BOX:
                fprintf(g, "set object %d rect from screen %.5f, screen %.5f to screen %.5f, screen %.5f fc rgb '%s' "
                           "fs solid 1.0 border lc rgb '#999999' front\n",
                        obj++, x0, y - 7 / H, x1, y + 7 / H, e->colour);
                break;
            case KEY_ARROW:
                fprintf(g, "set arrow %d from screen %.5f, screen %.5f to screen %.5f, screen %.5f lc rgb '%s' lw 3 "
                           "filled size screen 0.008,25 front\n",
                        obj++, xm, y - 9 / H, xm, y + 9 / H, e->colour);
                break;
            case KEY_CROSS:
                fprintf(g, "set label %d '' at screen %.5f, screen %.5f point pt 2 ps 2 lw 2.5 lc rgb '%s' front\n",
                        lab++, xm, y, e->colour);
                break;
            default:
                fprintf(g, "set arrow %d from screen %.5f, screen %.5f to screen %.5f, screen %.5f nohead lc rgb '%s' "
                           "lw 2.5 %s front\n",
                        obj++, x0, y, x1, y, e->colour,
                        e->style == KEY_DASH ? "dt 2" : e->style == KEY_DOTS ? "dt 3" : "dt 1");
                if (e->style == KEY_LINEPOINT)
                    fprintf(g, "set label %d '' at screen %.5f, screen %.5f point pt 7 ps 0.9 lc rgb '%s' front\n",
                            lab++, xm, y, e->colour);
                break;
            }
            fprintf(g, "set label %d ", lab++);
            gp_string(g, e->text);
            fprintf(g, " at screen %.5f, screen %.5f left font ',12' front\n", (x + KEY_SAMPLE_PX + 8) / WIDTH, y);
            x += KEY_SAMPLE_PX + 8 + KEY_CHAR_PX * (double)strlen(e->text) + KEY_GAP_PX;
        }
        first = last;
        row++;
    }
    /* an empty plot carries them: labels, arrows and objects are drawn with the next plot */
    fprintf(g, "unset border\nunset tics\nunset key\nset lmargin at screen 0.01\nset rmargin at screen 0.02\n"
               "set tmargin at screen 0.99\nset bmargin at screen 0.98\nset xrange [0:1]\nset yrange [0:1]\n"
               "plot NaN notitle\nunset label\nunset arrow\nunset object\n"
               "set border 31 lc rgb '#555555'\nset xtics nomirror\nset ytics nomirror\n");
}

/* Place panel i's plot area. */
static void layout_panel(FILE *g, const layout *L, int i)
{
    int c = i % L->cols, r = i / L->cols;
    double cw = (double)WIDTH / L->cols, x0 = c * cw, top = L->height - L->header - (double)r * L->cell_h;
    fprintf(g, "set lmargin at screen %.5f\nset rmargin at screen %.5f\nset tmargin at screen %.5f\n"
               "set bmargin at screen %.5f\n",
            (x0 + L->pad_l + (c == 0 ? L->pad_l0 : 0)) / WIDTH, (x0 + cw - L->pad_r) / WIDTH, (top - L->pad_t) / L->height,
            (top - L->cell_h + L->pad_b) / L->height);
}

/* "sim, ci scale, budget 1024 MiB" */
static void run_context(const cJSON *run, char *buf, size_t cap)
{
    char b[32];
    snprintf(buf, cap, "%s%s, %s scale, budget %s", json_str(run, "backend"),
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(run, "dry_run")) ? " (dry run)" : "", json_str(run, "scale"),
             gp_size(json_num(run, "budget"), b, sizeof b));
}

/* A variant's panel title: its name, its outcome, and what is unusual about it. */
static void variant_title(const cJSON *v, char *buf, size_t cap)
{
    const char *oc = json_str(v, "outcome");
    bool passed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "passed"));
    bool reproduced = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "reproduced"));
    snprintf(buf, cap, "%s: %s%s%s", json_str(v, "name"), strcmp(oc, "oom") == 0 ? "OOM" : oc,
             passed ? "" : " (NOT as expected)", reproduced ? "" : " (not reproduced)");
}

/* ---- timeline --------------------------------------------------------------------------------------------- */

#define LABELLED_MAX 8 /* samples per variant up to which the x ticks are the samples' labels */

/* The part of a label that fits a tick: up to 44 characters (the samples' labels are up to 40 or so: whole),
 * cut at a character boundary. */
static void tick_label(FILE *g, const char *s)
{
    char buf[56];
    size_t n = strlen(s);
    if (n <= 44) {
        gp_string(g, s);
        return;
    }
    size_t k = 41;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) /* not inside a UTF-8 sequence */
        k--;
    snprintf(buf, sizeof buf, "%.*s...", (int)k, s);
    gp_string(g, buf);
}

/* The pinned host memory at each sample, from the metrics the host allocator's counters gave
 * ("host.allocated_bytes.current" with its "sample"), NaN where a sample has none; false when the variant has none. */
static bool host_series(const cJSON *v, double *host, int n)
{
    bool any = false;
    for (int k = 0; k < n; k++)
        host[k] = NAN;
    const cJSON *m;
    cJSON_ArrayForEach(m, json_arr(v, "metrics"))
    {
        double k = json_num(m, "sample");
        if (strcmp(json_str(m, "name"), "host.allocated_bytes.current") == 0 && is_index(k) && k < n)
            host[(int)k] = json_num(m, "value"), any = true;
    }
    return any;
}

/* The run's pinned host budget: its parameter pinned_mib (pinned_memory's, the budget the host allocator was given:
 * rt_set_pinned_budget), NaN when it has none or it is 0 (no budget but the host's). */
static double host_budget(const cJSON *run)
{
    double mib = json_num(cJSON_GetObjectItemCaseSensitive(run, "params"), "pinned_mib");
    return mib > 0 ? mib * 1048576.0 : NAN;
}

/* Sample k's allocated peak since sample k - 1 ("step_peak", the allocator's window counter), when it is above
 * both samples' allocated: a peak the samples alone do not show. NaN otherwise, or in an older file without it. */
static double hidden_peak(const cJSON *smp, double prev_alloc)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(smp, "step_peak");
    if (!cJSON_IsNumber(p))
        return NAN;
    double pk = p->valuedouble;
    return pk > json_num(smp, "allocated") && pk > prev_alloc ? pk : NAN;
}

#define SUMMARY_MIN 300 /* samples past which a variant's training steps are drawn one value each */

/* N of a sample label "step N ..." (a training step's sample), or -1. */
static long step_of(const char *label)
{
    if (strncmp(label, "step ", 5) != 0 || label[5] < '0' || label[5] > '9')
        return -1;
    return strtol(label + 5, NULL, 10);
}

static oom_status timeline(const cJSON *run, const char *out, char *err, size_t errcap)
{
    const cJSON *vs = json_arr(run, "variants");
    int nv = cJSON_GetArraySize(vs);
    if (nv == 0)
        return errbuf_fail(err, errcap, OOM_EINVAL, "the results have no variants to draw");
    double budget = json_num(run, "budget"), top = budget;
    int maxn = 0;
    for (int i = 0; i < nv; i++) {
        const cJSON *v = cJSON_GetArrayItem(vs, i), *s;
        int n = cJSON_GetArraySize(json_arr(v, "samples"));
        maxn = n > maxn ? n : maxn;
        cJSON_ArrayForEach(s, json_arr(v, "samples"))
        {
            top = fmax(top, fmax(json_num(s, "reserved"), json_num(s, "allocated")));
            if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(s, "step_peak")))
                top = fmax(top, json_num(s, "step_peak"));
        }
        cJSON_ArrayForEach(s, json_arr(v, "ooms_caught")) top = fmax(top, json_num(s, "reserved") + json_num(s, "alloc_size"));
    }
    /* a shared y axis, so panels compare; a request far above the budget is cut at 1.6 x and still labelled */
    double base = budget, cut = 0;
    int minn = maxn;
    for (int i = 0; i < nv; i++) {
        int n = cJSON_GetArraySize(json_arr(cJSON_GetArrayItem(vs, i), "samples"));
        minn = n < minn ? n : minn;
    }
    for (int i = 0; i < nv; i++) {
        const cJSON *s;
        cJSON_ArrayForEach(s, json_arr(cJSON_GetArrayItem(vs, i), "samples")) base = fmax(base, json_num(s, "reserved"));
    }
    top = fmin(top, base * 1.6);
    cut = top;
    const char *uname;
    double unit = gp_unit(top, &uname), ymax = top / unit * 1.24; /* room for an OOM's label */
    bool labelled = minn <= LABELLED_MAX; /* some panel names its samples: room for their labels */
    /* what the legend needs besides: a peak between samples, pinned host memory (a right axis of its own) */
    bool any_peak = false, any_host = false;
    double host_top = 0, hbudget = NAN;
    for (int i = 0; i < nv; i++) {
        const cJSON *v = cJSON_GetArrayItem(vs, i), *s;
        double prev = 0;
        cJSON_ArrayForEach(s, json_arr(v, "samples"))
        {
            any_peak = any_peak || !isnan(hidden_peak(s, prev));
            prev = json_num(s, "allocated");
        }
        int n = cJSON_GetArraySize(json_arr(v, "samples"));
        double *h = malloc(((size_t)n + 1) * sizeof *h);
        if (!h)
            abort(); /* host bookkeeping without memory: CONTRIBUTING's rule */
        if (host_series(v, h, n)) {
            any_host = true;
            for (int k = 0; k < n; k++)
                host_top = isnan(h[k]) ? host_top : fmax(host_top, h[k]);
            double hb = host_budget(run);
            if (!isnan(hb))
                hbudget = hb, host_top = fmax(host_top, hb);
        }
        free(h);
    }
    const char *hname = "MiB";
    double hunit = any_host ? gp_unit(host_top, &hname) : 1048576.0, h2max = host_top / hunit * 1.5; /* the pinned budget well under the device's */
    layout L;
    layout_init(&L, nv, 3, 96, labelled ? 440 : 330, 78, any_host ? 70 : 22, 42, labelled ? 190 : 62);
    /* labelled: the first sample's label, rotated 30 degrees, reaches left of its panel: room for about 20
     * characters ("model and optimizer") in the first column, whose panels alone move right */
    L.pad_l0 = labelled ? 40 : 0;
    gp_figure f;
    oom_status st = gp_begin(&f, out, WIDTH, L.height, 12, err, errcap);
    if (st != OOM_OK)
        return st;
    FILE *g = f.gp;
    char title[512], ctx[160], path[160], b1[32], b2[32];
    run_context(run, ctx, sizeof ctx);
    snprintf(title, sizeof title, "%s: allocated and reserved memory at each sample (%s)", json_str(run, "scenario"), ctx);
    key_entry keys[] = {{KEY_LINE, C_RESERVED, "reserved"},
                        {KEY_LINE, C_ALLOCATED, "allocated"},
                        {KEY_BOX, C_GAP, "reserved but unallocated"},
                        {KEY_DASH, C_BUDGET, "budget"},
                        {KEY_ARROW, C_OOM, "OOM: the segment asked for, on top of reserved"},
                        {KEY_BOX, C_PEAK, "allocated peak between samples"},
                        {KEY_LINE, C_HOST, "pinned host memory (right axis)"},
                        {KEY_DASH, C_HOST, "pinned budget"},
                        {KEY_CROSS, C_OOM, "pin OOM"}};
    snprintf(keys[3].text, sizeof keys[3].text, "budget (%s)", gp_size(budget, b1, sizeof b1));
    int nkeys = 5;
    if (any_peak)
        keys[nkeys++] = keys[5];
    if (any_host) {
        keys[nkeys++] = keys[6];
        if (!isnan(hbudget)) {
            keys[nkeys] = keys[7];
            snprintf(keys[nkeys++].text, sizeof keys[0].text, "pinned budget (%s)", gp_size(hbudget, b1, sizeof b1));
        }
        keys[nkeys++] = keys[8];
    }
    layout_header(g, &L, title, keys, nkeys);
    if (any_host)
        fprintf(g, "set y2range [0:%.6g]\nset y2tics font ',11' tc rgb '" C_HOST "'\n", h2max);
    fprintf(g, "set grid ytics lc rgb '#dddddd'\nset yrange [0:%.6g]\nset ytics font ',11'\n", ymax);
    fprintf(g, "set style fill solid 1.0 noborder\nset border lc rgb '#555555'\n");
    for (int i = 0; i < nv; i++) {
        const cJSON *v = cJSON_GetArrayItem(vs, i), *ss = json_arr(v, "samples"), *s;
        int n = cJSON_GetArraySize(ss);
        /* the samples' values in arrays, read in one pass: cJSON_GetArrayItem walks its list from the start, and
         * once per sample that made a timeline quadratic in its samples */
        double *al = malloc(((size_t)n + 1) * sizeof *al), *re = malloc(((size_t)n + 1) * sizeof *re);
        const char *labels[LABELLED_MAX];
        if (!al || !re)
            abort(); /* host bookkeeping without memory: CONTRIBUTING's rule */
        int k0 = 0;
        cJSON_ArrayForEach(s, ss)
        {
            al[k0] = json_num(s, "allocated") / unit;
            re[k0] = json_num(s, "reserved") / unit;
            if (k0 < LABELLED_MAX)
                labels[k0] = json_str(s, "label");
            k0++;
        }
        /* a long series (a step's forward, backward and optimizer samples, thousands of them) would draw a solid
         * band: each training step's samples ("step N ...") are drawn at the step's largest allocated and
         * reserved, so the line moves only from step to step */
        bool summarised = n > SUMMARY_MIN;
        if (summarised) {
            long cur = -1;
            int first = 0, k = 0;
            cJSON_ArrayForEach(s, ss)
            {
                long step = step_of(json_str(s, "label"));
                if (step < 0 || step != cur) {
                    first = k;
                    cur = step;
                }
                for (int j = first; j < k; j++) { /* the group so far takes the new maximum */
                    al[j] = fmax(al[j], al[k]);
                    re[j] = fmax(re[j], re[k]);
                }
                if (k > first)
                    al[k] = al[first], re[k] = re[first];
                k++;
            }
        }
        char name[32];
        snprintf(name, sizeof name, "v%d.dat", i);
        FILE *d = gp_data(&f, name, path, sizeof path);
        if (!d) {
            free(al);
            free(re);
            gp_abort(&f);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        /* steps: sample k's values hold from x = k to x = k + 1, where the next sample's take over */
        double best_gap = -1;
        int best_k = -1;
        for (int k = 0; k < n; k++) {
            double a = al[k], r = re[k];
            fprintf(d, "%d %.6f %.6f\n", k, a, r);
            if (k + 1 < n) {
                fprintf(d, "%d %.6f %.6f\n", k + 1, a, r);
                if (r - a > best_gap)
                    best_gap = r - a, best_k = k;
            }
        }
        if (n == 0)
            fprintf(d, "0 NaN NaN\n");
        bool ok = gp_data_close(d);
        /* the sample instants, as dots, where they are few enough to see */
        snprintf(name, sizeof name, "v%d.pts", i);
        FILE *p = gp_data(&f, name, path + 80, sizeof path - 80);
        if (!p || !ok) {
            if (p)
                fclose(p);
            free(al);
            free(re);
            gp_abort(&f);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        for (int k = 0; k < n; k++)
            fprintf(p, "%d %.6f %.6f\n", k, al[k], re[k]);
        if (n == 0)
            fprintf(p, "0 NaN NaN\n");
        if (!gp_data_close(p)) {
            free(al);
            free(re);
            gp_abort(&f);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        /* the peaks between samples the samples do not show: a bar from the earlier sample's allocated up to the
         * peak, in the interval before sample k; and the pinned host memory as steps, like the device's */
        char pkpath[160], hpath[160];
        double *h = malloc(((size_t)n + 1) * sizeof *h);
        if (!h)
            abort(); /* host bookkeeping without memory: CONTRIBUTING's rule */
        bool has_host = host_series(v, h, n);
        snprintf(name, sizeof name, "v%d.pk", i);
        FILE *pk = gp_data(&f, name, pkpath, sizeof pkpath);
        snprintf(name, sizeof name, "v%d.host", i);
        FILE *hd = pk ? gp_data(&f, name, hpath, sizeof hpath) : NULL;
        int peaks = 0; /* hidden peaks drawn in this panel */
        if (pk) {
            int k = 0, wrote = 0;
            cJSON_ArrayForEach(s, ss)
            {
                double lo = k > 0 ? al[k - 1] : 0,
                       hp = summarised ? NAN : hidden_peak(s, k > 0 ? al[k - 1] * unit : 0);
                if (!isnan(hp))
                    fprintf(pk, "%.2f %.6f %.6f\n", k > 0 ? k - 0.5 : -0.3, lo, hp / unit), wrote++;
                k++;
            }
            if (!wrote)
                fprintf(pk, "0 NaN NaN\n");
            peaks = wrote;
        }
        if (hd) {
            int wrote = 0;
            for (int k = 0; k < n && has_host; k++)
                if (!isnan(h[k])) {
                    fprintf(hd, "%d %.6f\n", k, h[k] / hunit);
                    if (k + 1 < n)
                        fprintf(hd, "%d %.6f\n", k + 1, h[k] / hunit);
                    wrote++;
                }
            if (!wrote)
                fprintf(hd, "0 NaN\n");
        }
        ok = pk && hd;
        ok = (pk ? gp_data_close(pk) : false) && ok;
        ok = (hd ? gp_data_close(hd) : false) && ok;
        if (!ok) {
            free(al);
            free(re);
            free(h);
            gp_abort(&f);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        variant_title(v, title, sizeof title);
        layout_panel(g, &L, i);
        fprintf(g, "set title ");
        gp_string(g, title);
        fprintf(g, " font ',13'\nunset label\nunset arrow\n");
        fprintf(g, i % L.cols == 0 ? "set ylabel '%s' offset 1.2,0\n" : "unset ylabel\n", uname);
        if (any_host)
            fprintf(g, i % L.cols == L.cols - 1 || i == nv - 1 ? "set y2label 'pinned %s' tc rgb '" C_HOST
                                                                 "' offset -1.2,0\n"
                                                               : "unset y2label\n",
                    hname);
        double xmax = n > 0 ? n - 1 : 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, json_arr(v, "ooms_caught")) xmax = fmax(xmax, json_num(m, "step") - 0.5);
        fprintf(g, "set xrange [-0.6:%.1f]\n", xmax + 0.6);
        if (n <= LABELLED_MAX) {
            fprintf(g, "unset xlabel\nset xtics (");
            for (int k = 0; k < n; k++) {
                tick_label(g, labels[k]);
                fprintf(g, " %d%s", k, k + 1 < n ? ", " : "");
            }
            fprintf(g, ") rotate by 30 right font ',10' nomirror\n");
        } else {
            fprintf(g, "set xlabel '%s' font ',11' offset 0,0.5\nset xtics autofreq font ',11' norotate "
                       "nomirror\n",
                    summarised ? "sample (each training step at its largest)" : "sample");
        }
        /* the gap named where it is widest, if it is wide enough to hold the words */
        /* (not where peak bars stand in the gap: the words would cover them; the legend names the gap anyway) */
        if (!peaks && best_k >= 0 && best_gap > 0.2 * ymax) { /* ... and over at least a sixth of the width */
            double a = al[best_k], r = re[best_k];
            int lo = best_k, hi = best_k; /* the run of intervals around it with nearly the same gap */
            while (lo > 0 && !(re[lo - 1] - al[lo - 1] < 0.8 * best_gap || fabs(al[lo - 1] - a) > 0.25 * best_gap))
                lo--;
            while (hi + 2 < n && !(re[hi + 1] - al[hi + 1] < 0.8 * best_gap || fabs(al[hi + 1] - a) > 0.25 * best_gap))
                hi++;
            if ((hi - lo + 1) / (xmax + 1.2) >= 0.15) {
                fprintf(g, "set label ");
                gp_string(g, "reserved but\nunallocated");
                fprintf(g, " at %.3f, %.6f center front font ',11' tc rgb '" C_RESERVED "'\n", (lo + hi + 1) / 2.0,
                        (a + r) / 2);
            }
        }
        /* each OOM: an arrow on reserved at that moment, as tall as the segment the allocator tried to get */
        /* One OOM: its label beside the arrow's head, toward the middle. Several: one label over all the arrows
         * ("2 OOMs: 20.00 MiB asked each"), centred above their heads, so labels never overlap. */
        int nm = cJSON_GetArraySize(json_arr(v, "ooms_caught"));
        double xsum = 0, ytop = 0, req0 = -1;
        bool same = true;
        cJSON_ArrayForEach(m, json_arr(v, "ooms_caught"))
        {
            double x = json_num(m, "step") - 0.5, y0 = json_num(m, "reserved"), y1 = fmin(y0 + json_num(m, "alloc_size"), cut);
            fprintf(g, "set arrow from %.2f, %.6f to %.2f, %.6f lc rgb '" C_OOM "' lw 3 filled size char 0.8,25 "
                       "front\n",
                    x, y0 / unit, x, y1 / unit);
            same = same && (req0 < 0 || json_num(m, "requested") == req0);
            req0 = json_num(m, "requested");
            xsum += x;
            ytop = fmax(ytop, y1);
        }
        if (nm == 1) {
            m = cJSON_GetArrayItem(json_arr(v, "ooms_caught"), 0);
            double x = json_num(m, "step") - 0.5, req = json_num(m, "requested"), seg = json_num(m, "alloc_size");
            char text[96];
            gp_size(req, b1, sizeof b1);
            if (seg > req * 1.01)
                snprintf(text, sizeof text, "OOM: %s asked\n(a %s segment)", b1, gp_size(seg, b2, sizeof b2));
            else
                snprintf(text, sizeof text, "OOM: %s asked", b1);
            bool right_half = (x + 0.6) / (xmax + 1.2) > 0.5;
            fprintf(g, "set label ");
            gp_string(g, text);
            /* above the arrow's head and the budget line, beside the arrow: never on the data or the budget */
            fprintf(g, " at %.2f, %.6f %s offset %s,%s front font ',10' tc rgb '" C_OOM "'\n", x,
                    fmin(fmax(ytop, budget), cut) / unit, right_half ? "right" : "left", right_half ? "-0.8" : "0.8",
                    seg > req * 1.01 ? "1.6" : "0.9");
        } else if (nm > 1) {
            char text[96];
            if (same)
                snprintf(text, sizeof text, "%d OOMs: %s asked each", nm, gp_size(req0, b1, sizeof b1));
            else
                snprintf(text, sizeof text, "%d OOMs", nm);
            fprintf(g, "set label ");
            gp_string(g, text);
            fprintf(g, " at %.2f, %.6f center offset 0,1.1 front font ',10' tc rgb '" C_OOM "'\n", xsum / nm,
                    ytop / unit);
        }
        /* a pin OOM (the host allocator refused): a cross on the pinned budget line at the step, labelled below */
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
        if (has_host && cJSON_IsObject(oom) && strcmp(json_str(oom, "kind"), "pinned host") == 0) {
            double x = json_num(oom, "step") - 0.5, y = isnan(hbudget) ? h2max / 1.5 : hbudget / hunit;
            bool right_half = (x + 0.6) / (xmax + 1.2) > 0.5;
            fprintf(g, "set label '' at %.2f, second %.6f point pt 2 ps 2.2 lw 3 lc rgb '" C_OOM "' front\n", x, y);
            fprintf(g, "set label ");
            gp_string(g, "pin OOM: cudaHostAlloc refused");
            fprintf(g, " at %.2f, second %.6f %s offset %s,-1.4 front font ',10' tc rgb '" C_OOM "'\n", x, y,
                    right_half ? "right" : "left", right_half ? "-0.5" : "0.5");
        }
        fprintf(g, "plot '%s' using 1:2:3 with filledcurves fc rgb '" C_GAP "' notitle, "
                   "'' using 1:3 with lines lw 2.5 lc rgb '" C_RESERVED "' notitle, "
                   "'' using 1:2 with lines lw 2.5 lc rgb '" C_ALLOCATED "' notitle, "
                   "'%s' using 1:(($2+$3)/2):(0.18):(($3-$2)/2) with boxxyerror fs solid 1.0 border lc rgb '"
                   C_ALLOCATED "' fc rgb '" C_PEAK "' notitle, "
                   "%.6f with lines dt 2 lw 2 lc rgb '" C_BUDGET "' notitle",
                path, pkpath, budget / unit);
        if (has_host) {
            fprintf(g, ", '%s' using 1:2 axes x1y2 with lines lw 2.5 lc rgb '" C_HOST "' notitle", hpath);
            if (!isnan(hbudget))
                fprintf(g, ", %.6f axes x1y2 with lines dt 2 lw 2 lc rgb '" C_HOST "' notitle", hbudget / hunit);
        }
        free(h);
        if (n <= 60)
            fprintf(g, ", '%s' using 1:3 with points pt 7 ps 0.55 lc rgb '" C_RESERVED "' notitle, "
                       "'' using 1:2 with points pt 7 ps 0.55 lc rgb '" C_ALLOCATED "' notitle",
                    path + 80);
        fprintf(g, "\n");
        free(al);
        free(re);
    }
    fprintf(g, "unset multiplot\n");
    return gp_end(&f, err, errcap);
}

/* ---- sweep ------------------------------------------------------------------------------------------------- */

static oom_status sweep(const cJSON *sw, const char *out, char *err, size_t errcap)
{
    const cJSON *vs = json_arr(sw, "variants");
    int nv = cJSON_GetArraySize(vs);
    if (nv == 0)
        return errbuf_fail(err, errcap, OOM_EINVAL, "the sweep has no variants to draw");
    double budget = json_num(sw, "budget"), top = budget;
    for (int i = 0; i < nv; i++) {
        const cJSON *p;
        cJSON_ArrayForEach(p, json_arr(cJSON_GetArrayItem(vs, i), "series")) top = fmax(top, json_num(p, "peak_reserved"));
    }
    const char *uname;
    double unit = gp_unit(top, &uname);
    layout L;
    layout_init(&L, nv, 3, 96, 400, 78, 22, 42, 70);
    gp_figure f;
    oom_status st = gp_begin(&f, out, WIDTH, L.height, 12, err, errcap);
    if (st != OOM_OK)
        return st;
    FILE *g = f.gp;
    char title[512], b1[32], path[160];
    const char *param = json_str(sw, "param");
    snprintf(title, sizeof title, "%s: peak memory against %s, %g..%g, each value a fresh run (%s%s, %s scale, budget %s)",
             json_str(sw, "scenario"), param, json_num(sw, "lo"), json_num(sw, "hi"), json_str(sw, "backend"),
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sw, "dry_run")) ? " (dry run)" : "", json_str(sw, "scale"),
             gp_size(budget, b1, sizeof b1));
    const key_entry keys[] = {{KEY_LINEPOINT, C_RESERVED, "peak reserved"},
                              {KEY_LINEPOINT, C_ALLOCATED, "peak allocated"},
                              {KEY_CROSS, C_OOM, "OOM (its peak until it failed)"},
                              {KEY_DASH, C_BUDGET, "budget"},
                              {KEY_LINE, "#2ca02c", "the largest value that fits (bisection)"},
                              {KEY_DOTS, "#9467bd", "accelerate's find_executable_batch_size"}};
    layout_header(g, &L, title, keys, 6);
    fprintf(g, "set grid ytics xtics lc rgb '#dddddd'\nset ylabel '%s' offset 1.2,0\nset yrange [0:%.6g]\nset logscale x 2\n"
               "set xtics font ',11' nomirror\nset ytics font ',11'\nset format x '%%g'\nset xrange [%g:%g]\n",
            uname, top / unit * 1.12, json_num(sw, "lo") / 1.3, json_num(sw, "hi") * 1.3);
    /* a tick every power of two while they are few; else every 4th or 16th, so the labels never run together */
    double octaves = log2(json_num(sw, "hi") / json_num(sw, "lo"));
    fprintf(g, "set xtics %g, %d\n", json_num(sw, "lo"), !(octaves > 5) ? 2 : octaves <= 10 ? 4 : 16);
    fprintf(g, "set xlabel ");
    gp_string(g, param);
    fprintf(g, " font ',12' offset 0,0.4\n");
    for (int i = 0; i < nv; i++) {
        const cJSON *v = cJSON_GetArrayItem(vs, i), *p;
        char name[32];
        snprintf(name, sizeof name, "s%d.dat", i);
        FILE *d = gp_data(&f, name, path, sizeof path);
        if (!d) {
            gp_abort(&f);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        int n = 0;
        cJSON_ArrayForEach(p, json_arr(v, "series"))
        {
            bool oom = strcmp(json_str(p, "outcome"), "oom") == 0;
            fprintf(d, "%g %.6f %.6f %s\n", json_num(p, "value"), json_num(p, "peak_allocated") / unit,
                    json_num(p, "peak_reserved") / unit, oom ? "1" : "0");
            n++;
        }
        if (n == 0)
            fprintf(d, "1 NaN NaN 0\n");
        if (!gp_data_close(d)) {
            gp_abort(&f);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        layout_panel(g, &L, i);
        fprintf(g, "set title ");
        gp_string(g, json_str(v, "name"));
        fprintf(g, " font ',13'\nunset label\nunset arrow\n");
        const cJSON *fit = cJSON_GetObjectItemCaseSensitive(v, "largest_fit");
        const cJSON *acc = cJSON_GetObjectItemCaseSensitive(v, "find_executable_batch_size");
        double found = json_num(fit, "value"), accv = json_num(acc, "value");
        if (!isnan(found)) {
            fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead lw 2 lc rgb '#2ca02c' front\n", found, found);
            fprintf(g, "set label 'largest that fits: %g' at %g, graph 0.95 right offset -0.6,0 font ',11' tc rgb "
                       "'#2ca02c' front\n",
                    found, found);
        } else {
            fprintf(g, "set label 'nothing in range fits' at graph 0.03, graph 0.95 font ',11' tc rgb '" C_OOM
                       "' front\n");
        }
        if (!isnan(accv) && accv != found) {
            fprintf(g, "set arrow from %g, graph 0 to %g, graph 0.82 nohead lw 2 dt 3 lc rgb '#9467bd' front\n", accv,
                    accv);
            fprintf(g, "set label 'accelerate finds %g' at %g, graph 0.85 right offset -0.6,0 font ',11' tc rgb "
                       "'#9467bd' front\n",
                    accv, accv);
        }
        fprintf(g, "plot '%s' using 1:3 with linespoints lw 2.5 pt 7 ps 0.8 lc rgb '" C_RESERVED "' notitle, "
                   "'' using 1:2 with linespoints lw 2.5 pt 7 ps 0.8 lc rgb '" C_ALLOCATED "' notitle, "
                   "'' using 1:($4 > 0 ? $3 : 1/0) with points pt 2 ps 2.2 lw 2.5 lc rgb '" C_OOM "' notitle, "
                   "%.6f with lines dt 2 lw 2 lc rgb '" C_BUDGET "' notitle",
                path, budget / unit);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    return gp_end(&f, err, errcap);
}

oom_status plot_run(const char *json_path, const char *out_path, char *err, size_t errcap)
{
    cJSON *j = NULL;
    oom_status st = load(json_path, true, &j, err, errcap);
    if (st != OOM_OK)
        return st;
    st = strcmp(json_str(j, "schema"), "oomlab.sweep/1") == 0 ? sweep(j, out_path, err, errcap)
                                                          : timeline(j, out_path, err, errcap);
    cJSON_Delete(j);
    return st;
}

/* ---- peaks ------------------------------------------------------------------------------------------------- */

/* Bar colours by kind: the dark one for allocated, the light one for reserved. */
static void kind_colours(const char *kind, unsigned *dark, unsigned *light)
{
    if (strcmp(kind, "bug") == 0)
        *dark = 0xb2182b, *light = 0xf4b6b6;
    else if (strcmp(kind, "fix") == 0)
        *dark = 0x1b7837, *light = 0xb7e0b0;
    else if (strcmp(kind, "partial") == 0)
        *dark = 0x8c6d1f, *light = 0xf3dfa2;
    else
        *dark = 0x5f5f5f, *light = 0xd4d4d4;
}

/* A bar's value label: inside its top when the bar is tall enough to hold it (white on the dark bar, dark on the
 * light one), else just above it in dark grey. Columns: x, y of the text's centre, text, colour. */
static void bar_label(FILE *d, double x, double y, double ymax, bool dark, const char *text)
{
    bool inside = y > 0.09 * ymax;
    fprintf(d, "%.2f %.6f \"%s\" %u\n", x, inside ? y - 0.035 * ymax : y + 0.03 * ymax, text,
            inside && dark ? 0xffffffu : 0x222222u);
}

/* The request that failed at a variant's OOM, stacked on reserved at that moment: the segment the allocator tried
 * to get (alloc_size, or the request when none was recorded); 0 when the OOM asked nothing of the device. */
static double failed_request(const cJSON *v, double *base)
{
    const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
    if (!cJSON_IsObject(oom) || strcmp(json_str(v, "outcome"), "oom") != 0)
        return 0;
    double seg = json_num(oom, "alloc_size"), req = json_num(oom, "requested");
    *base = json_num(oom, "reserved");
    double asked = seg > 0 ? seg : req > 0 ? req : 0;
    return isnan(*base) || isnan(asked) ? 0 : asked;
}

oom_status plot_peaks(const char *json_path, const char *out, char *err, size_t errcap)
{
    cJSON *run = NULL;
    oom_status st = load(json_path, false, &run, err, errcap);
    if (st != OOM_OK)
        return st;
    const cJSON *vs = json_arr(run, "variants"), *v;
    int nv = cJSON_GetArraySize(vs);
    double budget = json_num(run, "budget"), top = budget, base = budget;
    cJSON_ArrayForEach(v, vs)
    {
        double b0 = 0, asked = failed_request(v, &b0);
        base = fmax(base, json_num(v, "peak_reserved"));
        top = fmax(top, fmax(json_num(v, "peak_reserved"), json_num(v, "peak_allocated")));
        top = fmax(top, b0 + asked);
    }
    double cut = fmin(top, base * 1.6); /* a request far past the budget is cut, its label still says its size */
    const char *uname;
    double unit = gp_unit(cut, &uname), ymax = cut / unit * 1.14;
    gp_figure f;
    layout L;
    layout_init(&L, 1, 1, 110, 540, 90, 30, 20, 150);
    if ((st = gp_begin(&f, out, WIDTH, L.height, 12, err, errcap)) != OOM_OK) {
        cJSON_Delete(run);
        return st;
    }
    FILE *g = f.gp;
    char path[160], lpath[160], rpath[160], title[512], ctx[160], b1[32], b2[48];
    FILE *d = gp_data(&f, "peaks.dat", path, sizeof path), *lab = gp_data(&f, "peaks.lab", lpath, sizeof lpath);
    FILE *rq = gp_data(&f, "peaks.req", rpath, sizeof rpath);
    if (!d || !lab || !rq) {
        gp_abort(&f);
        cJSON_Delete(run);
        return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
    }
    /* per variant two bars side by side: peak reserved (light, left), peak allocated (dark, right); each labelled
     * with its size; an OOM's failed request a red box on reserved at the OOM, labelled above it */
    int i = 0, nreq = 0;
    cJSON_ArrayForEach(v, vs)
    {
        unsigned dark, light;
        kind_colours(json_str(v, "kind"), &dark, &light);
        double r = json_num(v, "peak_reserved"), a = json_num(v, "peak_allocated");
        fprintf(d, "%d %.6f %.6f %u %u\n", i, r / unit, a / unit, light, dark);
        bar_label(lab, i - 0.19, r / unit, ymax, false, gp_size(r, b1, sizeof b1));
        bar_label(lab, i + 0.19, a / unit, ymax, true, gp_size(a, b1, sizeof b1));
        double b0 = 0, asked = failed_request(v, &b0);
        if (asked > 0) {
            double y1 = fmin(b0 + asked, cut);
            fprintf(rq, "%.2f %.6f %.6f\n", i - 0.19, b0 / unit, y1 / unit);
            snprintf(b2, sizeof b2, "OOM: +%s", gp_size(asked, b1, sizeof b1));
            fprintf(lab, "%.2f %.6f \"%s\" %u\n", i - 0.19, y1 / unit + 0.03 * ymax, b2, 0xd62728u);
            nreq++;
        } else if (strcmp(json_str(v, "outcome"), "oom") == 0) { /* an OOM that asked nothing of the device */
            fprintf(lab, "%.2f %.6f \"OOM\" %u\n", i - 0.19, r / unit + 0.075 * ymax, 0xd62728u);
        }
        i++;
    }
    if (nv == 0)
        fprintf(d, "0 NaN NaN 0 0\n");
    fprintf(lab, "0 NaN \"\" 0\n"); /* never empty: gnuplot stops on a file with no points */
    if (!nreq)
        fprintf(rq, "0 NaN NaN\n");
    bool ok = gp_data_close(d);
    ok = gp_data_close(lab) && ok;
    ok = gp_data_close(rq) && ok;
    if (!ok) {
        gp_abort(&f);
        cJSON_Delete(run);
        return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
    }
    run_context(run, ctx, sizeof ctx);
    snprintf(title, sizeof title, "%s: peak memory per variant (%s)", json_str(run, "scenario"), ctx);
    key_entry keys[] = {{KEY_BOX, "#f4b6b6", "bug"},
                        {KEY_BOX, "#b7e0b0", "fix"},
                        {KEY_BOX, "#d4d4d4", "myth"},
                        {KEY_BOX, "#ffffff", "left bar: peak reserved, right bar (dark): peak allocated"},
                        {KEY_BOX, "#f8c0c0", "OOM: the request that failed, on reserved at the OOM"},
                        {KEY_DASH, C_BUDGET, "budget"}};
    snprintf(keys[5].text, sizeof keys[5].text, "budget (%s)", gp_size(budget, b1, sizeof b1));
    layout_header(g, &L, title, keys, 6);
    layout_panel(g, &L, 0);
    fprintf(g, "set style fill solid 1.0 border lc rgb 'white'\nset grid ytics lc rgb '#dddddd'\n");
    fprintf(g, "set ylabel '%s'\nset yrange [0:%.6g]\nset xrange [-0.6:%d.6]\nset border lc rgb '#555555'\n", uname,
            ymax, nv > 0 ? nv - 1 : 0);
    fprintf(g, "set xtics (");
    i = 0;
    cJSON_ArrayForEach(v, vs)
    {
        gp_string(g, json_str(v, "name"));
        fprintf(g, " %d%s", i, i + 1 < nv ? ", " : "");
        i++;
    }
    fprintf(g, ") rotate by 30 right font ',11' nomirror\nset ytics font ',11'\n");
    fprintf(g, "plot '%s' using ($1-0.19):2:(0.36):4 with boxes lc rgb variable notitle, "
               "'' using ($1+0.19):3:(0.36):5 with boxes lc rgb variable notitle, "
               "'%s' using 1:(($2+$3)/2):(0.18):(($3-$2)/2) with boxxyerror fs solid 1.0 border lc rgb '" C_OOM
               "' fc rgb '#f8c0c0' notitle, "
               "%.6f with lines dt 2 lw 2 lc rgb '" C_BUDGET "' notitle, "
               "'%s' using 1:2:3:4 with labels font ',%d' tc rgb variable notitle\n",
            path, rpath, budget / unit, lpath, nv > 8 ? 8 : 9);
    fprintf(g, "unset multiplot\n");
    cJSON_Delete(run);
    return gp_end(&f, err, errcap);
}

/* ---- segments ---------------------------------------------------------------------------------------------- */

static const cJSON *segments_of(const cJSON *v)
{
    const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
    return cJSON_IsObject(oom) ? json_arr(oom, "segments") : NULL;
}

int plot_has_segments(const char *json_path)
{
    char err[256];
    cJSON *run = NULL;
    if (load(json_path, false, &run, err, sizeof err) != OOM_OK)
        return 0;
    const cJSON *v;
    int n = 0;
    cJSON_ArrayForEach(v, json_arr(run, "variants")) n += segments_of(v) && cJSON_GetArraySize(segments_of(v)) > 0;
    cJSON_Delete(run);
    return n;
}

/* One row of the map: a segment, or one page of an expandable range; x0..x1 in bytes from the row's start. */
typedef struct map_writer {
    FILE *d;
    int row;
    double width; /* the widest row, bytes */
} map_writer;

static void map_block(map_writer *w, double x0, double x1, const char *state)
{
    unsigned c = strcmp(state, "allocated") == 0 ? 0xff7f0e : strcmp(state, "free") == 0 ? 0xc6dbef : 0xe0e0e0;
    fprintf(w->d, "%d %.6f %.6f %u\n", w->row, x0 / 1048576.0, x1 / 1048576.0, c);
}

#define MAP_ROWS_MAX 100000 /* rows a segment map may have: a 2 MiB page maps 195 GiB in that many */

/* Write a variant's rows; returns the number of rows, or -1 when they would be more than MAP_ROWS_MAX. An expandable range is cut into rows of its page, through
 * its last mapped byte, then one row for the unmapped rest, labelled with its size in labels. */
static int map_rows(map_writer *w, const cJSON *segs, FILE *labels)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, segs)
    {
        int first = w->row;
        if (first >= MAP_ROWS_MAX)
            return -1;
        bool exp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "expandable"));
        const cJSON *b;
        if (!exp) {
            double x = 0;
            cJSON_ArrayForEach(b, json_arr(s, "blocks"))
            {
                double sz = cJSON_GetArrayItem(b, 0)->valuedouble;
                map_block(w, x, x + sz, cJSON_GetArrayItem(b, 1)->valuestring);
                x += sz;
            }
            w->width = fmax(w->width, x);
            w->row++;
            continue;
        }
        double page = json_num(s, "page"), mapped_end = 0, x = 0;
        if (!(page > 0))
            page = strcmp(json_str(s, "pool"), "small") == 0 ? 2097152.0 : 20971520.0; /* PyTorch's defaults */
        cJSON_ArrayForEach(b, json_arr(s, "blocks"))
        {
            double sz = cJSON_GetArrayItem(b, 0)->valuedouble;
            if (strcmp(cJSON_GetArrayItem(b, 1)->valuestring, "unmapped") != 0)
                mapped_end = x + sz;
            x += sz;
        }
        double total = x, shown = ceil(mapped_end / page) * page;
        if (shown / page > MAP_ROWS_MAX - w->row) /* a page tiny against the segment: rows past any figure */
            return -1;
        x = 0;
        cJSON_ArrayForEach(b, json_arr(s, "blocks"))
        {
            double sz = cJSON_GetArrayItem(b, 0)->valuedouble, lo = x, hi = fmin(x + sz, shown);
            const char *state = cJSON_GetArrayItem(b, 1)->valuestring;
            while (lo < hi) { /* the part of the block on each page row */
                double row_start = floor(lo / page) * page, end = fmin(hi, row_start + page);
                int row = first + (int)(row_start / page);
                int keep = w->row;
                w->row = row;
                map_block(w, lo - row_start, end - row_start, state);
                w->row = keep;
                lo = end;
            }
            x += sz;
        }
        w->row = first + (int)(shown / page);
        w->width = fmax(w->width, page);
        if (total > shown) {
            char b1[32];
            map_block(w, 0, page, "unmapped");
            fprintf(labels, "%d \"+%s unmapped\"\n", w->row, gp_size(total - shown, b1, sizeof b1));
            w->row++;
        }
    }
    return w->row;
}

/* A fix's layout at its peak ("fix_layout", oomlab.run/3), NULL when it has none. */
static const cJSON *fix_segments_of(const cJSON *v)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "fix_layout");
    return cJSON_IsObject(f) ? json_arr(f, "segments") : NULL;
}

/* The map's panels: the first variant's layout at its OOM (the bug's), and beside it the first fix's at its peak
 * (what the fix does instead); the other OOMs are named under the first, not drawn: most are myths whose layout is
 * the bug's, four identical panels that say nothing. */
typedef struct map_panel {
    const cJSON *v, *segs;
    bool fix;
} map_panel;

oom_status plot_segments(const char *json_path, const char *out, char *err, size_t errcap)
{
    cJSON *run = NULL;
    oom_status st = load(json_path, false, &run, err, errcap);
    if (st != OOM_OK)
        return st;
    const cJSON *vs = json_arr(run, "variants"), *v;
    map_panel pan[2];
    int np = 0;
    cJSON_ArrayForEach(v, vs) if (segments_of(v) && cJSON_GetArraySize(segments_of(v)) > 0)
    {
        pan[np++] = (map_panel){v, segments_of(v), false};
        break;
    }
    if (np == 0) {
        cJSON_Delete(run);
        return errbuf_fail(err, errcap, OOM_EINVAL, "%s: no variant ran out of memory, so there is no segment map to draw",
                    json_path);
    }
    cJSON_ArrayForEach(v, vs) if (fix_segments_of(v) && cJSON_GetArraySize(fix_segments_of(v)) > 0)
    {
        pan[np++] = (map_panel){v, fix_segments_of(v), true};
        break;
    }
    /* the OOM panel's title: what it shows, then the other OOMs, the same layout as the one drawn or another,
     * their names wrapped so that no line is wider than its panel */
    char oom_title[1024], b1[32], b3[32];
    const cJSON *oom0 = cJSON_GetObjectItemCaseSensitive(pan[0].v, "oom");
    int nseg0 = cJSON_GetArraySize(pan[0].segs);
    snprintf(oom_title, sizeof oom_title, "%s: OOM with %d segment%s\nasked %s, largest free block %s",
             json_str(pan[0].v, "name"), nseg0, nseg0 == 1 ? "" : "s",
             gp_size(json_num(oom0, "requested"), b1, sizeof b1),
             gp_size(json_num(oom0, "largest_free_block"), b3, sizeof b3));
    for (int same = 1; same >= 0; same--) {
        bool first = true;
        size_t line = 0; /* the current line's length */
        cJSON_ArrayForEach(v, vs)
        {
            const cJSON *segs = segments_of(v);
            if (v == pan[0].v || !segs || cJSON_GetArraySize(segs) == 0 ||
                (bool)cJSON_Compare(segs, pan[0].segs, true) != (bool)same)
                continue;
            size_t n = strlen(oom_title);
            const char *name = json_str(v, "name");
            if (first)
                line = (size_t)snprintf(oom_title + n, sizeof oom_title - n, "\n%s %s",
                                        same ? "the same at the OOM of" : "other segments (not drawn) at the OOM of",
                                        name) - 1;
            else if (line + strlen(name) + 2 > 64)
                line = (size_t)snprintf(oom_title + n, sizeof oom_title - n, ",\n%s", name) - 2;
            else
                line += (size_t)snprintf(oom_title + n, sizeof oom_title - n, ", %s", name);
            first = false;
        }
    }
    int title_lines = 1;
    for (const char *c = oom_title; *c; c++)
        title_lines += *c == '\n';
    title_lines = title_lines < 3 ? 3 : title_lines;
    /* the rows of each map first (a pass that writes nowhere), to size the canvas */
    gp_figure f;
    int maxrows = 0;
    for (int k = 0; k < np; k++) {
        map_writer w = {.d = fopen("/dev/null", "w")};
        FILE *nul = fopen("/dev/null", "w");
        if (!w.d || !nul) {
            if (w.d)
                fclose(w.d);
            if (nul)
                fclose(nul);
            cJSON_Delete(run);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot open /dev/null");
        }
        int n = map_rows(&w, pan[k].segs, nul);
        fclose(w.d);
        fclose(nul);
        if (n < 0) {
            char e1[ECHO_BUF];
            cJSON_Delete(run);
            return errbuf_fail(err, errcap, OOM_EINVAL, "%s: variant '%s': its segments would take more than %d rows "
                        "(an expandable segment's \"page\" too small)", json_path, echo_str(json_str(pan[k].v, "name"), e1),
                        MAP_ROWS_MAX);
        }
        maxrows = n > maxrows ? n : maxrows;
    }
    double row_px = fmax(3.0, fmin(14.0, 620.0 / (maxrows > 0 ? maxrows : 1)));
    layout L; /* the OOM's map beside the fix's */
    int pad_t = 46 + 16 * title_lines;
    layout_init(&L, np, 2, 96, (int)(row_px * maxrows) + pad_t + 56, 62, 18, pad_t, 54);
    if ((st = gp_begin(&f, out, WIDTH, L.height, 12, err, errcap)) != OOM_OK) {
        cJSON_Delete(run);
        return st;
    }
    FILE *g = f.gp;
    char title[512], ctx[160], path[160], lpath[160], b2[32];
    run_context(run, ctx, sizeof ctx);
    snprintf(title, sizeof title, "%s: the allocator's segments at the OOM of %s%s (%s)", json_str(run, "scenario"),
             json_str(pan[0].v, "name"), np > 1 ? " and at a fix's peak" : "", ctx);
    const key_entry keys[] = {{KEY_BOX, C_ALLOCATED, "allocated"},
                              {KEY_BOX, C_GAP, "free, cached (reserved but unallocated)"},
                              {KEY_BOX, C_UNMAPPED, "unmapped (expandable segments)"}};
    layout_header(g, &L, title, keys, 3);
    fprintf(g, "set style fill solid 1.0 border lc rgb 'white'\nset border lc rgb '#555555'\nset xtics font ',11' "
               "nomirror\nset ytics font ',10' nomirror\nset xlabel 'MiB from the start of the segment' font ',11' "
               "offset 0,0.4\n");
    for (int p = 0; p < np; p++) {
        const cJSON *segs = pan[p].segs;
        char name[32], lname[32];
        snprintf(name, sizeof name, "m%d.dat", p);
        snprintf(lname, sizeof lname, "m%d.lab", p);
        map_writer w = {.d = gp_data(&f, name, path, sizeof path)};
        FILE *labels = gp_data(&f, lname, lpath, sizeof lpath);
        if (!w.d || !labels) {
            if (w.d)
                fclose(w.d);
            if (labels)
                fclose(labels);
            gp_abort(&f);
            cJSON_Delete(run);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        int n = map_rows(&w, segs, labels);
        fprintf(labels, "-10 \"\"\n"); /* never empty: gnuplot stops on a file with no points */
        bool ok = gp_data_close(w.d);
        ok = gp_data_close(labels) && ok;
        if (!ok) {
            gp_abort(&f);
            cJSON_Delete(run);
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
        }
        int nseg = cJSON_GetArraySize(segs);
        if (!pan[p].fix) {
            snprintf(title, sizeof title, "%s", oom_title);
        } else {
            const cJSON *fl = cJSON_GetObjectItemCaseSensitive(pan[p].v, "fix_layout");
            const cJSON *s0 = cJSON_GetArrayItem(segs, 0);
            bool exp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s0, "expandable"));
            snprintf(title, sizeof title, "%s: no OOM, %d segment%s%s\nat its peak, '%s': %s reserved",
                     json_str(pan[p].v, "name"), nseg, nseg == 1 ? "" : "s",
                     exp ? " (expandable: a row per page)" : "", json_str(fl, "label"),
                     gp_size(json_num(fl, "reserved"), b2, sizeof b2));
        }
        layout_panel(g, &L, p);
        fprintf(g, "set title ");
        gp_string(g, title);
        fprintf(g, " font ',11'\n");
        fprintf(g, p % L.cols == 0 ? "set ylabel 'segment' font ',11' offset 1,0\n" : "unset ylabel\n");
        /* the first segment at the top, as memory_viz lists them */
        fprintf(g, "set yrange [%d.5:-0.5]\nset xrange [0:%.6f]\n", maxrows > 0 ? maxrows - 1 : 0,
                w.width / 1048576.0 * 1.001);
        int step = maxrows <= 12 ? 1 : maxrows <= 60 ? 5 : maxrows <= 150 ? 10 : 50; /* the panels' common scale */
        fprintf(g, "set ytics (");
        for (int k = 0; k < n; k += step)
            fprintf(g, "'%d' %d%s", k + 1, k, k + step < n ? ", " : "");
        fprintf(g, ")\n");
        fprintf(g, "plot '%s' using (($2+$3)/2):1:(($3-$2)/2):(0.42):4 with boxxyerror lc rgb variable notitle, "
                   "'%s' using (0):1:2 with labels left offset 0.5,0 font ',10' notitle\n",
                path, lpath);
    }
    fprintf(g, "unset multiplot\n");
    cJSON_Delete(run);
    return gp_end(&f, err, errcap);
}

/* ---- trend ------------------------------------------------------------------------------------------------- */

enum { T_DATE, T_COMMIT, T_BACKEND, T_DEVICE, T_SCALE, T_SCENARIO, T_VARIANT, T_METRIC, T_VALUE, T_FIELDS };

typedef struct trend_row {
    const char *f[T_FIELDS]; /* into the history's text (history_read); f[T_VALUE] unused */
    double value;
    int run; /* index into the sorted runs */
} trend_row;

static bool is_bytes_metric(const char *m)
{
    return strstr(m, "bytes") || strncmp(m, "peak_", 5) == 0 || strstr(m, "allocated") || strstr(m, "reserved") ||
           strstr(m, "requested");
}

/* A name for a file: letters, digits, '.', '_' and '-' kept, anything else '_'. */
static void file_part(char *dst, size_t cap, const char *s)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
        dst[i] = ok ? c : '_';
    }
    dst[i] = '\0';
}

/* The distinct values of one field over rows (in order of first appearance), for rows matching a group. */
typedef struct strset {
    const char **v;
    int n, cap;
} strset;

static int strset_add(strset *s, const char *x)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i], x) == 0)
            return i;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        const char **nv = realloc(s->v, (size_t)s->cap * sizeof *nv);
        if (!nv)
            abort(); /* host bookkeeping without memory: CONTRIBUTING's rule */
        s->v = nv;
    }
    s->v[s->n] = x;
    return s->n++;
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b",
                                      "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e"};

typedef struct run_key {
    const char *date, *commit;
    int first; /* the row it first appears in */
} run_key;

static int cmp_run(const void *a, const void *b)
{
    const run_key *x = a, *y = b;
    int c = strcmp(x->date, y->date);
    return c ? c : x->first - y->first;
}

/* One figure: the rows of one scenario, backend and scale. */
static oom_status trend_figure(trend_row *rows, int nrows, const char *scn, const char *backend, const char *scale,
                               const run_key *runs, int nruns, const char *out, char *err, size_t errcap)
{
    strset metrics = {0}, variants = {0}, devices = {0};
    bool *used = calloc((size_t)nruns, sizeof *used);
    if (!used)
        abort();
    for (int i = 0; i < nrows; i++) {
        trend_row *r = &rows[i];
        if (strcmp(r->f[T_SCENARIO], scn) || strcmp(r->f[T_BACKEND], backend) || strcmp(r->f[T_SCALE], scale))
            continue;
        strset_add(&metrics, r->f[T_METRIC]);
        strset_add(&variants, r->f[T_VARIANT]);
        strset_add(&devices, r->f[T_DEVICE]);
        used[r->run] = true;
    }
    /* x: the runs this figure has, in order */
    int *xof = calloc((size_t)nruns, sizeof *xof), nx = 0;
    if (!xof)
        abort();
    for (int k = 0; k < nruns; k++)
        xof[k] = used[k] ? nx++ : -1;
    /* this figure's rows by run, then file order (a counting sort): each line of the figure is one pass over them,
     * where a pass over every run and every row for each line took minutes on a year of nightly history */
    int *mine = malloc(((size_t)nrows + 1) * sizeof *mine), *start = calloc((size_t)nruns + 1, sizeof *start), nmine = 0;
    if (!mine || !start)
        abort();
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].f[T_SCENARIO], scn) && !strcmp(rows[i].f[T_BACKEND], backend) &&
            !strcmp(rows[i].f[T_SCALE], scale))
            start[rows[i].run + 1]++, nmine++;
    for (int k = 0; k < nruns; k++)
        start[k + 1] += start[k];
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].f[T_SCENARIO], scn) && !strcmp(rows[i].f[T_BACKEND], backend) &&
            !strcmp(rows[i].f[T_SCALE], scale))
            mine[start[rows[i].run]++] = i;
    layout L;
    layout_init(&L, metrics.n, 2, variants.n > 6 ? 120 : 96, 380, 90, 24, 42, 110);
    gp_figure f;
    oom_status st = gp_begin(&f, out, WIDTH, L.height, 12, err, errcap);
    if (st != OOM_OK)
        goto done;
    FILE *g = f.gp;
    char title[512], path[160];
    snprintf(title, sizeof title, "%s on %s (%s%s), %s scale: each metric over the nightly runs", scn, backend,
             devices.n == 1 ? devices.v[0] : "several devices", "", scale);
    key_entry *keys = calloc((size_t)variants.n + 1, sizeof *keys);
    if (!keys)
        abort();
    for (int v = 0; v < variants.n; v++) {
        keys[v].style = KEY_LINEPOINT;
        keys[v].colour = palette[v % 10];
        snprintf(keys[v].text, sizeof keys[v].text, "%s", variants.v[v]);
    }
    layout_header(g, &L, title, keys, variants.n);
    free(keys);
    fprintf(g, "set grid ytics lc rgb '#dddddd'\nset border lc rgb '#555555'\nset ytics font ',11'\n"
               "set xrange [-0.5:%d.5]\n",
            nx > 0 ? nx - 1 : 0);
    int every = nx <= 10 ? 1 : (nx + 9) / 10;
    fprintf(g, "set xtics (");
    for (int k = 0, first = 1; k < nruns; k++) {
        if (xof[k] < 0 || xof[k] % every)
            continue;
        char lab[96];
        snprintf(lab, sizeof lab, "%.10s %.7s", runs[k].date, runs[k].commit);
        fprintf(g, "%s", first ? "" : ", ");
        gp_string(g, lab);
        fprintf(g, " %d", xof[k]);
        first = 0;
    }
    fprintf(g, ") rotate by 30 right font ',10' nomirror\n");
    for (int m = 0; m < metrics.n; m++) {
        bool bytes = is_bytes_metric(metrics.v[m]);
        double top = 0;
        for (int i = 0; i < nrows; i++)
            if (!strcmp(rows[i].f[T_SCENARIO], scn) && !strcmp(rows[i].f[T_BACKEND], backend) &&
                !strcmp(rows[i].f[T_SCALE], scale) && !strcmp(rows[i].f[T_METRIC], metrics.v[m]))
                top = fmax(top, fabs(rows[i].value));
        const char *uname = "";
        double unit = bytes ? gp_unit(top, &uname) : 1.0;
        char name[32];
        snprintf(name, sizeof name, "t%d.dat", m);
        FILE *d = gp_data(&f, name, path, sizeof path);
        if (!d) {
            gp_abort(&f);
            st = errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
            goto done;
        }
        for (int v = 0; v < variants.n; v++) { /* one gnuplot index per variant, its runs in x order */
            int wrote = 0;
            for (int j = 0; j < nmine; j++) {
                const trend_row *r = &rows[mine[j]];
                if (strcmp(r->f[T_METRIC], metrics.v[m]) || strcmp(r->f[T_VARIANT], variants.v[v]))
                    continue;
                fprintf(d, "%d %.9g\n", xof[r->run], r->value / unit);
                wrote++;
            }
            if (!wrote)
                fprintf(d, "0 NaN\n");
            fprintf(d, "\n\n");
        }
        if (!gp_data_close(d)) {
            gp_abort(&f);
            st = errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's data in %s", f.dir);
            goto done;
        }
        layout_panel(g, &L, m);
        fprintf(g, "set title ");
        gp_string(g, metrics.v[m]);
        fprintf(g, " font ',13'\nset ylabel ");
        gp_string(g, bytes ? uname : "");
        /* from 0 (the history's values are never negative: history_value_problem), room above the highest point;
         * a count's axis whole numbers, at least 0..1 */
        if (bytes)
            fprintf(g, "\nset yrange [0:%.9g]\nset format y '%%g'\n", top > 0 ? top / unit * 1.12 : 1.0);
        else
            fprintf(g, "\nset yrange [0:%.9g]\nset format y '%%g'\n", fmax(top * 1.12, 1.0));
        fprintf(g, "plot ");
        for (int v = 0; v < variants.n; v++)
            fprintf(g, "%s'%s' index %d using 1:2 with linespoints lw 2 pt 7 ps 0.7 lc rgb '%s' notitle",
                    v ? ", " : "", path, v, palette[v % 10]);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    st = gp_end(&f, err, errcap);
done:
    free(metrics.v);
    free(variants.v);
    free(devices.v);
    free(used);
    free(xof);
    free(mine);
    free(start);
    return st;
}

oom_status plot_trend(const char *csv_path, const char *out_dir, const char *ext, char *written, size_t cap,
                      char *err, size_t errcap)
{
    if (strcmp(ext, "png") != 0 && strcmp(ext, "svg") != 0)
        return errbuf_fail(err, errcap, OOM_EINVAL, "trend plots are written as png or svg, not '%s'", ext);
    history h; /* the one reader of the history: a bad row is skipped with a warning naming its line */
    oom_status st = history_read(csv_path, &h, err, errcap);
    if (st != OOM_OK)
        return st;
    written[0] = '\0';
    int nrows = (int)h.n;
    trend_row *rows = NULL;
    if (nrows == 0) {
        st = errbuf_fail(err, errcap, OOM_EINVAL, "%s: no rows under the header: nothing to plot", csv_path);
        goto out;
    }
    rows = calloc(h.n, sizeof *rows);
    if (!rows)
        abort(); /* host bookkeeping without memory: CONTRIBUTING's rule */
    for (size_t i = 0; i < h.n; i++) {
        for (int k = 0; k < T_VALUE; k++)
            rows[i].f[k] = h.rows[i].col[k];
        rows[i].value = h.rows[i].value;
    }
    if (fileio_mkdirs(out_dir) != OOM_OK) { /* only once the history is read: nothing is made for bad input */
        st = errbuf_fail(err, errcap, OOM_EIO, "%s", oom_error_detail());
        goto out;
    }
    /* the runs: distinct (date, commit), by date, then by first appearance */
    run_key *runs = calloc((size_t)nrows, sizeof *runs);
    if (!runs)
        abort();
    int nruns = 0;
    for (int i = 0; i < nrows; i++) {
        int k = 0;
        while (k < nruns && (strcmp(runs[k].date, rows[i].f[T_DATE]) || strcmp(runs[k].commit, rows[i].f[T_COMMIT])))
            k++;
        if (k == nruns)
            runs[nruns++] = (run_key){rows[i].f[T_DATE], rows[i].f[T_COMMIT], i};
    }
    qsort(runs, (size_t)nruns, sizeof *runs, cmp_run);
    for (int i = 0; i < nrows; i++)
        for (int k = 0; k < nruns; k++)
            if (!strcmp(runs[k].date, rows[i].f[T_DATE]) && !strcmp(runs[k].commit, rows[i].f[T_COMMIT]))
                rows[i].run = k;
    /* one figure per (scenario, backend, scale), in order of first appearance */
    size_t used = 0;
    for (int i = 0; i < nrows && st == OOM_OK; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(rows[j].f[T_SCENARIO], rows[i].f[T_SCENARIO]) &&
                   !strcmp(rows[j].f[T_BACKEND], rows[i].f[T_BACKEND]) &&
                   !strcmp(rows[j].f[T_SCALE], rows[i].f[T_SCALE]);
        if (seen)
            continue;
        char a[96], b[32], c[32], out[1200];
        file_part(a, sizeof a, rows[i].f[T_SCENARIO]);
        file_part(b, sizeof b, rows[i].f[T_BACKEND]);
        file_part(c, sizeof c, rows[i].f[T_SCALE]);
        snprintf(out, sizeof out, "%s/%s-%s-%s.%s", out_dir, a, b, c, ext);
        st = trend_figure(rows, nrows, rows[i].f[T_SCENARIO], rows[i].f[T_BACKEND], rows[i].f[T_SCALE], runs, nruns,
                          out, err, errcap);
        if (st == OOM_OK) {
            int w = snprintf(written + used, cap - used, "%s\n", out);
            if (w > 0 && (size_t)w < cap - used)
                used += (size_t)w;
        }
    }
    free(runs);
out:
    free(rows);
    history_free(&h);
    return st;
}

/* ---- every figure of a results file ------------------------------------------------------------------------ */

oom_status plot_all(const char *json_path, char *written, size_t cap, char *err, size_t errcap)
{
    size_t n = strlen(json_path), used = 0;
    if (n < 6 || strcmp(json_path + n - 5, ".json") != 0)
        return errbuf_fail(err, errcap, OOM_EINVAL, "%s: a results file's name ends in .json", json_path);
    int stem = (int)(n - 5);
    char out[1100];
    written[0] = '\0';
    snprintf(out, sizeof out, "%.*s.png", stem, json_path);
    oom_status st = plot_run(json_path, out, err, errcap);
    if (st == OOM_OK)
        used += (size_t)snprintf(written + used, cap - used, "%s\n", out);
    bool is_run = st == OOM_OK && !(n > 11 && strcmp(json_path + n - 11, ".sweep.json") == 0);
    if (is_run) {
        snprintf(out, sizeof out, "%.*s-peaks.png", stem, json_path);
        st = plot_peaks(json_path, out, err, errcap);
        if (st == OOM_OK && used < cap)
            used += (size_t)snprintf(written + used, cap - used, "%s\n", out);
    }
    if (is_run && st == OOM_OK && plot_has_segments(json_path)) {
        snprintf(out, sizeof out, "%.*s-segments.png", stem, json_path);
        st = plot_segments(json_path, out, err, errcap);
        if (st == OOM_OK && used < cap)
            snprintf(written + used, cap - used, "%s\n", out);
    }
    return st;
}
