/* report_html.c - the catalog as one static page. See report_html.h. */
#include "figures/report_html.h"

#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/memstats.h"
#include "core/echo.h"
#include "core/fail.h"
#include "core/fileio.h"
#include "core/jsonfile.h"
#include "figures/plot.h"
#include "results/runset.h"
#include "run/scenario.h"
#include "run/story.h"


static const char *size_str(double b, char *buf, size_t cap)
{
    if (isnan(b))
        return "-";
    /* saturated: a double at or past 2^64 cast to uint64_t is undefined */
    return memstats_format_size(b >= 18446744073709551616.0 ? UINT64_MAX : b > 0 ? (uint64_t)b : 0, buf, cap);
}

/* Text into HTML, the one escaping of the page: every text and every attribute value that is not a constant of
 * this file goes through it (a results file is input: its strings are data). Safe in an element and in a
 * double- or single-quoted attribute; a control character other than a tab or newline becomes a space. */
static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ? ' ' : c, f);
        }
    }
}

/* A variant's kind as a class name: one of the three the style sheet knows, never text from the file. */
static const char *kind_class(const cJSON *v)
{
    const char *k = json_str(v, "kind");
    return strcmp(k, "bug") == 0 ? "bug" : strcmp(k, "fix") == 0 ? "fix" : strcmp(k, "myth") == 0 ? "myth" : "other";
}

/* One scenario's inputs. */
typedef struct entry {
    const scenario *sc;
    char run_path[1024], sweep_path[1024];
    cJSON *run, *sweep;
} entry;

/* A results or sweep file through the one validating reader (runset.h), as compare reads it. */
static cJSON *load(const char *path, char *err, size_t errcap, oom_status *st)
{
    cJSON *j = NULL;
    *st = runset_read_file(path, true, &j, err, errcap);
    return j;
}

static int catalog_index(const char *name)
{
    for (size_t i = 0; i < scenario_catalog_size; i++)
        if (strcmp(scenario_catalog[i]->name, name) == 0)
            return (int)i;
    return -1;
}

/* Add one results file to its scenario's entry. */
static oom_status take(entry *es, const char *path, char *err, size_t errcap)
{
    oom_status st = OOM_OK;
    cJSON *j = load(path, err, errcap, &st);
    if (!j)
        return st;
    int k = catalog_index(json_str(j, "scenario"));
    if (k < 0) {
        char e1[ECHO_BUF];
        errbuf_fail(err, errcap, OOM_EINVAL, "%s: scenario '%s' is not in the catalog", path,
             echo_str(json_str(j, "scenario"), e1));
        cJSON_Delete(j);
        return OOM_EINVAL;
    }
    entry *e = &es[k];
    e->sc = scenario_catalog[k];
    bool sweep = strcmp(json_str(j, "schema"), "oomlab.sweep/1") == 0;
    const char *had = sweep ? (e->sweep ? e->sweep_path : NULL) : (e->run ? e->run_path : NULL);
    if (had && fileio_same_file(had, path)) { /* the same file named twice (a folder and its sweep file): one input */
        cJSON_Delete(j);
        return OOM_OK;
    }
    if (had) {
        cJSON_Delete(j);
        return errbuf_fail(err, errcap, OOM_EINVAL, "%s: a second %s of %s (%s has one): give one of each", path,
                    sweep ? "sweep" : "run", e->sc->name, sweep ? e->sweep_path : e->run_path);
    }
    if (sweep) {
        e->sweep = j;
        snprintf(e->sweep_path, sizeof e->sweep_path, "%s", path);
    } else {
        e->run = j;
        snprintf(e->run_path, sizeof e->run_path, "%s", path);
    }
    return OOM_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A folder's *.json files, by name. */
static oom_status take_dir(entry *es, DIR *d, const char *dir, char *err, size_t errcap)
{
    char *names[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256) {
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0 && !(names[n] = strdup(de->d_name)))
            abort();
        n += l > 5 && strcmp(de->d_name + l - 5, ".json") == 0;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    oom_status st = OOM_OK;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (st == OOM_OK)
            st = take(es, path, err, errcap);
        free(names[i]);
    }
    return st;
}

/* Remove a folder of files and one level of folders (the report's own layout). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0)
            remove_tree(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- the page ------------------------------------------------------------------------------------------ */

static const char *const css =
    "body{font-family:'DejaVu Sans',sans-serif;max-width:1320px;margin:0 auto;padding:0 1em 3em;color:#222;"
    "line-height:1.45}\n"
    "h1{font-size:1.8em}h2{margin-top:2.2em;border-bottom:2px solid #1f5fa8;padding-bottom:.2em}\n"
    "nav ol{padding-left:1.6em}nav li{margin:.15em 0}nav a{font-weight:bold;margin-right:.4em}\n"
    "details{margin:.8em 0;border:1px solid #dde5f0;border-radius:4px;padding:.3em .8em}"
    "summary{cursor:pointer;color:#1f5fa8;font-weight:bold}\n"
    "pre{background:#f4f4f4;padding:.6em .9em;overflow-x:auto;font-size:.92em}\n"
    "img{max-width:100%;height:auto;border:1px solid #ddd}figure{margin:1.2em 0}figcaption{color:#555;"
    "font-size:.92em}\n"
    "table{border-collapse:collapse;margin:1em 0;font-size:.92em}th,td{border:1px solid #ccc;padding:.25em .5em;"
    "text-align:right}th{background:#eef3fa}td.l,th.l{text-align:left}td.same{background:#e6f4e3}"
    "td.diff{background:#fbe3e3}\n"
    ".measured{display:block;margin:.2em 0 .6em 1.5em;color:#1f5fa8;font-size:.95em}\n"
    ".kind-bug{color:#d62728;font-weight:bold}.kind-fix{color:#2ca02c;font-weight:bold}"
    ".kind-myth{color:#666;font-weight:bold}\n"
    ".lead{font-size:1.1em;font-style:italic}.ctx{color:#555}.no{color:#d62728}\n";

story_claim report_story_claim(const char *text)
{
    if (strstr(text, "still OOMs") || strstr(text, "It OOMs") || strstr(text, "OOMs in step"))
        return CLAIM_OOM;
    if (strstr(text, "it fits") || strstr(text, "It fits"))
        return CLAIM_FITS;
    return CLAIM_NONE;
}

/* What the run measured for variant v, in one line; and, when the story's item (its claim) says otherwise, that
 * it does, in red: a story must never contradict the row beside it. */
static void measured_line(FILE *f, const cJSON *v, story_claim claim)
{
    bool oomed = strcmp(json_str(v, "outcome"), "oom") == 0;
    if ((claim == CLAIM_OOM && !oomed) || (claim == CLAIM_FITS && oomed))
        fprintf(f, "<span class=\"measured no contradiction\">the story says %s; this run measured otherwise</span>\n",
                claim == CLAIM_OOM ? "it runs out of memory" : "it fits");
    char a[32], r[32], q[32];
    const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
    bool passed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "passed"));
    fprintf(f, "<span class=\"measured\">measured: ");
    if (cJSON_IsObject(oom)) {
        fprintf(f, "OOM in ");
        esc(f, json_str(oom, "what"));
        fprintf(f, " (%s asked, %s reserved but unallocated, largest free block %s)",
                size_str(json_num(oom, "requested"), q, sizeof q), size_str(json_num(oom, "reserved_unallocated"), a, sizeof a),
                size_str(json_num(oom, "largest_free_block"), r, sizeof r));
    } else {
        esc(f, strcmp(json_str(v, "outcome"), "ok") == 0 ? "no OOM" : json_str(v, "outcome"));
    }
    fprintf(f, "; peak allocated %s, peak reserved %s; %s</span>\n",
            size_str(json_num(v, "peak_allocated"), a, sizeof a), size_str(json_num(v, "peak_reserved"), r, sizeof r),
            passed ? "every expectation holds &#10003;" : "<span class=\"no\">an expectation fails &#10007;</span>");
}

static const cJSON *variant_named(const cJSON *run, const char *name, size_t len)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, json_arr(run, "variants")) if (strlen(json_str(v, "name")) == len &&
                                                    strncmp(json_str(v, "name"), name, len) == 0) return v;
    return NULL;
}

/* The story, its paragraphs, code and variant lists as HTML; each variant's item ends with what was measured. */
static void story_html(FILE *f, const scenario_story *s, const cJSON *run)
{
    enum { NONE, PARA, CODE, ITEM } mode = NONE;
    char itext[4096] = ""; /* the open item's text, its lines joined by spaces: what it claims */
    const cJSON *item = NULL, *bug = NULL, *v0;
    bool sees = false; /* in the paragraph "What the user sees.": the bug's measurement goes after it */
    cJSON_ArrayForEach(v0, json_arr(run, "variants")) if (!bug && strcmp(json_str(v0, "kind"), "bug") == 0) bug = v0;
    int i0 = 0;
    while (s->lines[i0] && s->lines[i0][0]) /* the first paragraph, "NAME.c - title", is the section's lead */
        i0++;
    for (int i = i0; s->lines[i]; i++) {
        const char *l = s->lines[i];
        size_t ind = strspn(l, " ");
        const char *word = l + ind;
        size_t wl = strcspn(word, " ");
        const cJSON *v = ind == 2 ? variant_named(run, word, wl) : NULL;
        if (!*word) { /* a blank line ends what is open */
            if (mode == PARA && sees && bug)
                measured_line(f, bug, CLAIM_NONE);
            sees = false;
            if (mode == PARA)
                fprintf(f, "</p>\n");
            if (mode == CODE)
                fprintf(f, "</pre>\n");
            if (mode == ITEM) {
                measured_line(f, item, report_story_claim(itext));
                fprintf(f, "</li></ul>\n");
            }
            mode = NONE;
            continue;
        }
        if (v) { /* a variant's paragraph: "  NAME  text" */
            if (mode == PARA)
                fprintf(f, "</p>\n");
            if (mode == CODE)
                fprintf(f, "</pre>\n");
            if (mode == ITEM) {
                measured_line(f, item, report_story_claim(itext));
                fprintf(f, "</li>\n");
            } else {
                fprintf(f, "<ul>\n");
            }
            fprintf(f, "<li><b class=\"kind-%s\">", kind_class(v));
            esc(f, json_str(v, "name"));
            fprintf(f, "</b> ");
            esc(f, word + wl + strspn(word + wl, " "));
            fprintf(f, "\n");
            snprintf(itext, sizeof itext, "%s", word + wl + strspn(word + wl, " "));
            mode = ITEM;
            item = v;
            continue;
        }
        if (mode == ITEM && ind >= 4) { /* the item goes on */
            size_t used = strlen(itext);
            snprintf(itext + used, sizeof itext - used, " %s", word);
            esc(f, word);
            fprintf(f, "\n");
            continue;
        }
        if (mode == ITEM) { /* text at the margin ends the list */
            measured_line(f, item, report_story_claim(itext));
            fprintf(f, "</li></ul>\n");
            mode = NONE;
        }
        if (ind >= 4) { /* code */
            if (mode == PARA)
                fprintf(f, "</p>\n");
            if (mode != CODE)
                fprintf(f, "<pre>");
            esc(f, l + 4);
            fprintf(f, "\n");
            mode = CODE;
            continue;
        }
        if (mode == CODE)
            fprintf(f, "</pre>\n");
        if (mode != PARA) {
            fprintf(f, "<p>");
            sees = strncmp(word, "What the user sees", 18) == 0;
        }
        esc(f, word);
        fprintf(f, "\n");
        mode = PARA;
    }
    if (mode == PARA)
        fprintf(f, "</p>\n");
    if (mode == CODE)
        fprintf(f, "</pre>\n");
    if (mode == ITEM) {
        measured_line(f, item, report_story_claim(itext));
        fprintf(f, "</li></ul>\n");
    }
}

/* The twin's recording, when it was made at this run's parameters and budget; else NULL with why. */
static cJSON *twin_for(const char *twins_dir, const cJSON *run, char *why, size_t cap)
{
    char path[1100];
    if (!twins_dir) {
        snprintf(why, cap, "no folder of PyTorch recordings was given (--twins)");
        return NULL;
    }
    snprintf(path, sizeof path, "%s/%s.torch.json", twins_dir, json_str(run, "scenario"));
    char *text = fileio_read_all(path, NULL);
    if (!text) {
        snprintf(why, cap, "no recording of its PyTorch twin (%s)", path);
        return NULL;
    }
    cJSON *t = cJSON_Parse(text);
    free(text);
    if (!t || !json_arr(t, "variants")) {
        cJSON_Delete(t);
        snprintf(why, cap, "%s is not a twin recording", path);
        return NULL;
    }
    if (json_num(t, "budget") != json_num(run, "budget")) {
        snprintf(why, cap, "PyTorch's twin (%s) ran under another budget (%.0f bytes, this run %.0f): run at full "
                           "scale (--scale full or --dry-run) to compare",
                 path, json_num(t, "budget"), json_num(run, "budget"));
        cJSON_Delete(t);
        return NULL;
    }
    const cJSON *p, *rp = cJSON_GetObjectItemCaseSensitive(run, "params");
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(t, "params"))
    {
        if (json_num(rp, p->string) != p->valuedouble) {
            snprintf(why, cap, "PyTorch's twin (%s) ran at %s=%g, this run at %s=%g", path, p->string, p->valuedouble,
                     p->string, json_num(rp, p->string));
            cJSON_Delete(t);
            return NULL;
        }
    }
    return t;
}

static const cJSON *twin_variant(const cJSON *t, const char *name)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, json_arr(t, "variants")) if (strcmp(json_str(v, "variant"), name) == 0) return v;
    return NULL;
}

static void cell_bytes(FILE *f, double ours, double theirs)
{
    char b[32];
    fprintf(f, "<td class=\"%s\">%s</td>", isnan(theirs) ? "" : ours == theirs ? "same" : "diff",
            size_str(theirs, b, sizeof b));
}

/* The most pinned host memory a variant held: its largest "host.allocated_bytes.peak" metric (the host allocator's
 * counter), NaN when it recorded none. */
static double pinned_peak(const cJSON *v)
{
    double best = NAN;
    const cJSON *m;
    cJSON_ArrayForEach(m, json_arr(v, "metrics")) if (strcmp(json_str(m, "name"), "host.allocated_bytes.peak") == 0 &&
                                                    (isnan(best) || json_num(m, "value") > best)) best =
        json_num(m, "value");
    return best;
}

/* Ours ran out of pinned host memory where the twin's recording has no OOM at all: the recording was made before
 * the twin emulated the pinned budget (scripts/twins/pinned_memory.py), so its outcome is no measurement of it. */
static bool twin_predates_pin_oom(const cJSON *v, const cJSON *tv)
{
    const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
    return tv && cJSON_IsObject(oom) && strcmp(json_str(oom, "kind"), "pinned host") == 0 &&
           !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(tv, "oom")) && strcmp(json_str(tv, "outcome"), "oom") != 0;
}

static void table_html(FILE *f, const cJSON *run, const cJSON *twin, const char *why)
{
    char b1[32], b2[32], b3[32], b4[32];
    bool pinned = false, predates = false; /* a column of pinned peaks; a note under the table */
    const cJSON *v0;
    cJSON_ArrayForEach(v0, json_arr(run, "variants")) pinned = pinned || !isnan(pinned_peak(v0));
    fprintf(f, "<table>\n<tr><th class=\"l\">variant</th><th>outcome</th><th>peak allocated</th>"
               "<th>peak reserved</th><th>reserved but unallocated at the OOM</th><th>largest free block at the OOM"
               "</th><th>as expected</th>");
    if (pinned)
        fprintf(f, "<th>peak pinned host</th>");
    if (twin)
        fprintf(f, "<th>PyTorch: outcome</th><th>PyTorch: peak allocated</th><th>PyTorch: peak reserved</th>%s",
                pinned ? "<th>PyTorch: peak pinned host</th>" : "");
    fprintf(f, "</tr>\n");
    const cJSON *v;
    cJSON_ArrayForEach(v, json_arr(run, "variants"))
    {
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
        bool has = cJSON_IsObject(oom);
        fprintf(f, "<tr><td class=\"l\"><b class=\"kind-%s\">", kind_class(v));
        esc(f, json_str(v, "name"));
        fprintf(f, "</b></td><td>");
        esc(f, strcmp(json_str(v, "outcome"), "oom") == 0 ? "OOM" : json_str(v, "outcome"));
        fprintf(f, "%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>",
                cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(v, "reproduced")) ? " (not reproduced)" : "",
                size_str(json_num(v, "peak_allocated"), b1, sizeof b1), size_str(json_num(v, "peak_reserved"), b2, sizeof b2),
                has ? size_str(json_num(oom, "reserved_unallocated"), b3, sizeof b3) : "-",
                has ? size_str(json_num(oom, "largest_free_block"), b4, sizeof b4) : "-",
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "passed")) ? "&#10003;"
                                                                             : "<span class=\"no\">&#10007;</span>");
        if (pinned)
            fprintf(f, "<td>%s</td>", isnan(pinned_peak(v)) ? "-" : size_str(pinned_peak(v), b1, sizeof b1));
        if (twin) {
            const cJSON *tv = twin_variant(twin, json_str(v, "name"));
            const cJSON *ss = tv ? json_arr(tv, "samples") : NULL;
            const cJSON *last = ss ? cJSON_GetArrayItem(ss, cJSON_GetArraySize(ss) - 1) : NULL;
            const char *to = tv ? json_str(tv, "outcome") : "";
            bool old = twin_predates_pin_oom(v, tv);
            predates = predates || old;
            fprintf(f, "<td class=\"%s\">", !tv || old ? "" : strcmp(to, json_str(v, "outcome")) == 0 ? "same" : "diff");
            esc(f, !tv ? "not recorded" : strcmp(to, "oom") == 0 ? "OOM" : to);
            fprintf(f, "%s</td>", old ? " (recorded without the pinned budget*)" : "");
            cell_bytes(f, json_num(v, "peak_allocated"), last ? json_num(last, "allocated_bytes.all.peak") : NAN);
            cell_bytes(f, json_num(v, "peak_reserved"), last ? json_num(last, "reserved_bytes.all.peak") : NAN);
            if (pinned)
                cell_bytes(f, pinned_peak(v), tv ? pinned_peak(tv) : NAN);
        }
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
    if (twin) {
        fprintf(f, "<p class=\"ctx\">PyTorch's numbers: its twin, scripts/twins/");
        esc(f, json_str(run, "scenario"));
        fprintf(f, ".py, recorded with torch ");
        esc(f, json_str(twin, "torch"));
        fprintf(f, " on ");
        esc(f, json_str(twin, "device"));
        fprintf(f, " (the last sample's <code>memory_stats()</code> peaks); green where they equal oomlab's.</p>\n");
        if (predates)
            fprintf(f, "<p class=\"ctx\">* The twin's recording was made before it emulated the pinned budget "
                       "(scripts/twins/pinned_memory.py now refuses a block past pinned_mib, as oomlab does): its "
                       "outcome is what it recorded, not a measurement of the pin OOM. Compare the pinned peaks: "
                       "the blocks held when the next one is refused.</p>\n");
    } else {
        fprintf(f, "<p class=\"ctx\">No PyTorch numbers beside these: ");
        esc(f, why);
        fprintf(f, ".</p>\n");
    }
}

static void details_html(FILE *f, const cJSON *run)
{
    const cJSON *v, *e;
    fprintf(f, "<details><summary>Each variant's expectations and OOM message</summary>\n");
    cJSON_ArrayForEach(v, json_arr(run, "variants"))
    {
        fprintf(f, "<h4><b class=\"kind-%s\">", kind_class(v));
        esc(f, json_str(v, "name"));
        fprintf(f, "</b>: ");
        esc(f, json_str(v, "summary"));
        fprintf(f, "</h4>\n<ul>\n");
        cJSON_ArrayForEach(e, json_arr(v, "expectations"))
        {
            fprintf(f, "<li>%s ", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "holds"))
                                      ? "&#10003;"
                                      : "<span class=\"no\">&#10007;</span>");
            esc(f, json_str(e, "text"));
            fprintf(f, "</li>\n");
        }
        cJSON_ArrayForEach(e, json_arr(v, "notes"))
        {
            fprintf(f, "<li>note: ");
            esc(f, cJSON_IsString(e) ? e->valuestring : "");
            fprintf(f, "</li>\n");
        }
        fprintf(f, "</ul>\n");
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
        if (cJSON_IsObject(oom)) {
            fprintf(f, "<pre>");
            esc(f, json_str(oom, "message"));
            fprintf(f, "</pre>\n");
        }
    }
    fprintf(f, "</details>\n");
}

/* file is built from the catalog's name of the scenario (take() matched it), never from the results file. */
static void figure(FILE *f, const char *file, const char *alt, const char *caption)
{
    fprintf(f, "<figure><img src=\"img/%s\" alt=\"", file);
    esc(f, alt);
    fprintf(f, "\" loading=\"lazy\"><figcaption>");
    esc(f, caption);
    fprintf(f, "</figcaption></figure>\n");
}

/* The figures of one entry into DIR/img, named in names (for the page). */
static oom_status draw(const entry *e, const char *dir, char *err, size_t errcap)
{
    char out[1400];
    const char *n = e->sc->name;
    snprintf(out, sizeof out, "%s/img/%s.png", dir, n);
    oom_status st = plot_run(e->run_path, out, err, errcap);
    if (st == OOM_OK) {
        snprintf(out, sizeof out, "%s/img/%s-peaks.png", dir, n);
        st = plot_peaks(e->run_path, out, err, errcap);
    }
    if (st == OOM_OK && plot_has_segments(e->run_path)) {
        snprintf(out, sizeof out, "%s/img/%s-segments.png", dir, n);
        st = plot_segments(e->run_path, out, err, errcap);
    }
    if (st == OOM_OK && e->sweep) {
        snprintf(out, sizeof out, "%s/img/%s.sweep.png", dir, n);
        st = plot_run(e->sweep_path, out, err, errcap);
    }
    return st;
}

static void section_html(FILE *f, const entry *e, const char *twins_dir)
{
    const cJSON *run = e->run, *p;
    const char *n = e->sc->name;
    char b[32], why[2400] = "", cap[512];
    const scenario_story *s = NULL;
    for (size_t i = 0; i < scenario_nstories; i++)
        if (strcmp(scenario_stories[i].name, n) == 0)
            s = &scenario_stories[i];
    fprintf(f, "<section id=\"%s\">\n<h2>%s</h2>\n", n, n);
    if (s && s->lines[0]) {
        const char *lead = strstr(s->lines[0], " - ");
        fprintf(f, "<p class=\"lead\">");
        esc(f, lead ? lead + 3 : s->lines[0]);
        for (int i = 1; s->lines[i] && s->lines[i][0]; i++) {
            fprintf(f, " ");
            esc(f, s->lines[i]);
        }
        fprintf(f, "</p>\n");
    }
    fprintf(f, "<p class=\"ctx\">Measured on ");
    esc(f, json_str(run, "backend"));
    fprintf(f, " (");
    esc(f, json_str(run, "device"));
    fprintf(f, ")%s, ", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(run, "dry_run"))
                            ? ", a dry run (the allocator's accounting, no compute)"
                            : "");
    esc(f, json_str(run, "scale"));
    fprintf(f, " scale, budget %s; parameters:", size_str(json_num(run, "budget"), b, sizeof b));
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(run, "params"))
    {
        fprintf(f, " ");
        esc(f, p->string);
        fprintf(f, "=%g", cJSON_IsNumber(p) ? p->valuedouble : NAN);
    }
    fprintf(f, ".</p>\n");
    /* one screen: the lead, the measured table and the timeline; the story and the other figures folded below */
    cJSON *twin = twin_for(twins_dir, run, why, sizeof why);
    table_html(f, run, twin, why);
    cJSON_Delete(twin);
    snprintf(cap, sizeof cap, "%s: allocated and reserved memory at each sample, per variant; the shaded gap is "
                              "reserved but unallocated; red arrows are the OOMs, as tall as the segment asked for.",
             n);
    char file[128];
    snprintf(file, sizeof file, "%s.png", n);
    figure(f, file, "allocated and reserved memory at each sample, per variant", cap);
    if (s) {
        fprintf(f, "<details><summary>The story: the cause, what the user sees, each variant against its "
                   "measurement</summary>\n");
        story_html(f, s, run);
        fprintf(f, "</details>\n");
    }
    fprintf(f, "<details><summary>More figures: the peaks%s%s</summary>\n",
            plot_has_segments(e->run_path) ? ", the segments at the OOM" : "", e->sweep ? ", the sweep" : "");
    snprintf(file, sizeof file, "%s-peaks.png", n);
    snprintf(cap, sizeof cap, "%s: each variant's peak allocated and reserved memory against the budget.", n);
    figure(f, file, "peak memory per variant", cap);
    if (plot_has_segments(e->run_path)) {
        snprintf(file, sizeof file, "%s-segments.png", n);
        snprintf(cap, sizeof cap, "%s: the allocator's segments at each variant's first OOM, block by block, as "
                                  "PyTorch's memory_viz draws them.",
                 n);
        figure(f, file, "the allocator's segments at the OOM", cap);
    }
    if (e->sweep) {
        snprintf(file, sizeof file, "%s.sweep.png", n);
        snprintf(cap, sizeof cap, "%s: peak memory against %s, each value a fresh run, and the largest value that "
                                  "fits.",
                 n, json_str(e->sweep, "param"));
        figure(f, file, "peak memory against the swept parameter", cap);
    }
    fprintf(f, "</details>\n");
    details_html(f, run);
    fprintf(f, "</section>\n");
}

static oom_status page(entry *es, const char *dir, const char *twins_dir, char *err, size_t errcap)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/index.html", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return errbuf_fail(err, errcap, OOM_EIO, "cannot write %s", path);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" "
               "content=\"width=device-width, initial-scale=1\">\n<title>oomlab: GPU out-of-memory failures, "
               "measured</title>\n<style>\n%s</style>\n</head>\n<body>\n",
               css);
    fprintf(f, "<h1>oomlab: GPU out-of-memory failures, measured</h1>\n<p>Each section reproduces one classic PyTorch "
               "OOM failure next to its fixes and the popular advice that does not help (myths), with the caching "
               "allocator's own counters. Written by <code>oomlab report</code> from the results files named below; "
               "every number and figure on this page comes from them.</p>\n<nav><ol>\n");
    for (size_t k = 0; k < scenario_catalog_size; k++)
        if (es[k].run) {
            fprintf(f, "<li><a href=\"#%s\">%s</a>: ", es[k].sc->name, es[k].sc->name);
            esc(f, es[k].sc->title);
            fprintf(f, "</li>\n");
        }
    fprintf(f, "</ol></nav>\n");
    for (size_t k = 0; k < scenario_catalog_size; k++)
        if (es[k].run)
            section_html(f, &es[k], twins_dir);
    fprintf(f, "<footer><p class=\"ctx\">Results files:");
    for (size_t k = 0; k < scenario_catalog_size; k++) {
        if (es[k].run) {
            fprintf(f, " ");
            esc(f, es[k].run_path);
        }
        if (es[k].sweep) {
            fprintf(f, " ");
            esc(f, es[k].sweep_path);
        }
    }
    fprintf(f, "</p></footer>\n</body>\n</html>\n");
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    return ok ? OOM_OK : errbuf_fail(err, errcap, OOM_EIO, "cannot write %s", path);
}

oom_status report_html(const char *const *inputs, size_t n, const char *twins_dir, const char *out_dir, char *err,
                       size_t errcap)
{
    entry *es = calloc(scenario_catalog_size, sizeof *es);
    if (!es)
        abort();
    oom_status st = OOM_OK;
    for (size_t i = 0; i < n && st == OOM_OK; i++) {
        DIR *d = opendir(inputs[i]);
        st = d ? take_dir(es, d, inputs[i], err, errcap) : take(es, inputs[i], err, errcap);
    }
    size_t nruns = 0;
    for (size_t k = 0; k < scenario_catalog_size; k++) {
        nruns += es[k].run != NULL;
        if (st == OOM_OK && es[k].sweep && !es[k].run)
            st = errbuf_fail(err, errcap, OOM_EINVAL, "%s: a sweep of %s without a run of it (give its SCENARIO.json too)",
                      es[k].sweep_path, es[k].sc->name);
    }
    if (st == OOM_OK && nruns == 0)
        st = errbuf_fail(err, errcap, OOM_EINVAL, "no run results among the inputs (oomlab run writes SCENARIO.json)");
    /* OUT is replaced only when it is a folder: never a link (the old one is removed, and removing through a link
     * would empty its target) nor a file */
    const char *kind = fileio_kind(out_dir);
    char e1[ECHO_BUF];
    if (st == OOM_OK && kind && strcmp(kind, "a directory") != 0)
        st = errbuf_fail(err, errcap, OOM_EINVAL, "%s is %s, not a folder: not replaced (the report is a folder)",
                  echo_str(out_dir, e1), kind);
    /* everything into OUT.tmp.XXXXXX/report (mkdtemp: a folder of ours, never one planted there), which replaces
     * OUT when complete */
    char base[1100], tmp[1110], img[1120], old[1100];
    bool made = false;
    snprintf(base, sizeof base, "%s.tmp.XXXXXX", out_dir);
    snprintf(old, sizeof old, "%s.old.%ld", out_dir, (long)getpid());
    if (st == OOM_OK && !(made = mkdtemp(base) != NULL))
        st = errbuf_fail(err, errcap, OOM_EIO, "cannot write %s: cannot create a temporary folder beside it",
                  echo_str(out_dir, e1));
    snprintf(tmp, sizeof tmp, "%s/report", base);
    snprintf(img, sizeof img, "%s/img", tmp);
    if (st == OOM_OK && fileio_mkdirs(img) != OOM_OK)
        st = errbuf_fail(err, errcap, OOM_EIO, "%s", oom_error_detail());
    for (size_t k = 0; k < scenario_catalog_size && st == OOM_OK; k++)
        if (es[k].run)
            st = draw(&es[k], tmp, err, errcap);
    if (st == OOM_OK)
        st = page(es, tmp, twins_dir, err, errcap);
    if (st == OOM_OK) {
        bool had = rename(out_dir, old) == 0;
        if (rename(tmp, out_dir) != 0) {
            if (had)
                rename(old, out_dir);
            st = errbuf_fail(err, errcap, OOM_EIO, "cannot write %s", echo_str(out_dir, e1));
        } else if (had) {
            remove_tree(old);
        }
    }
    if (made)
        remove_tree(base); /* what is left of it: all of it on failure, the empty folder on success */
    for (size_t k = 0; k < scenario_catalog_size; k++) {
        cJSON_Delete(es[k].run);
        cJSON_Delete(es[k].sweep);
    }
    free(es);
    return st;
}
