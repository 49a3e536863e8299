/* fuzz_figures.c - libFuzzer harness of what oomlab writes from an input: the gnuplot scripts of the figures and
 * the report's HTML (issue 16: input stays data). The input is fed as a results JSON to plot_run, plot_peaks,
 * plot_segments (`oomlab plot`) and report_html (`oomlab report`), and as a history CSV to plot_trend
 * (`oomlab plot --trend`), the way the commands call them.
 *
 * gnuplot is a stand-in (a shell script first on PATH) that appends each script it is given to a file and draws a
 * minimal whole PNG, so every figure is published and the report completes. Checked:
 *   - every gnuplot script: each line a set, unset or plot command; text only inside single-quoted strings
 *     (closed on their line, '' the only escape), the one double-quoted string "\n" (gp_string's line break);
 *     outside them no backquote, '!', '@', ';' or "system": nothing from the input can run;
 *   - the page: every '<' opens one of the elements report_html writes, no event attribute (on...=), each href a
 *     "#NAME" and each src an "img/NAME.png" of the catalog's names;
 *   - a failure is OOM_EINVAL or OOM_EIO with one error line, and nothing is left in the scratch folder.
 * Seeds: tests/fuzz/corpus/figures (the results corpus, and crafted strings: backquotes, $( ), newlines, quotes,
 * <script>, ../, in results files and history CSVs).
 */
#include "fuzzutil.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/status.h"
#include "figures/plot.h"
#include "figures/report_html.h"

static char bin_dir[128], scripts[160];

/* At exit: the stand-in gnuplot's folder goes. */
static void remove_bin_dir(void)
{
    char gp[192];
    snprintf(gp, sizeof gp, "%s/gnuplot", bin_dir);
    unlink(gp);
    unlink(scripts);
    rmdir(bin_dir);
}

/* The folder's files and folders (one level of folders: the report's img/) removed. */
static void remove_all(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) {
            remove_all(p);
            rmdir(p);
        }
    }
    closedir(d);
}

/* Nothing may remain in the scratch folder after a writer failed. */
static void check_scratch_empty(const char *writer)
{
    DIR *d = opendir(fuzz_scratch_dir());
    if (!d)
        fuzz_fail("cannot list the scratch folder");
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            fuzz_fail("%s failed and left %s behind", writer, e->d_name);
    closedir(d);
}

/* A writer's outcome: a failure is EINVAL or EIO in one line and leaves nothing; after a success, its output
 * goes. */
static void check_status(const char *writer, oom_status st, const char *err)
{
    if (st == OOM_OK) {
        remove_all(fuzz_scratch_dir());
        return;
    }
    if (st != OOM_EINVAL && st != OOM_EIO)
        fuzz_fail("%s returned %s: %s", writer, oom_status_str(st), err);
    fuzz_check_error_line(writer, err);
    check_scratch_empty(writer);
}

/* One line of a gnuplot script, checked as the header says. */
static void check_script_line(const char *l, size_t n)
{
    if (n == 0)
        return;
    if (!(strncmp(l, "set ", 4) == 0 || strncmp(l, "unset ", 6) == 0 || strncmp(l, "plot ", 5) == 0))
        fuzz_fail("a gnuplot line that is not set, unset or plot: %.*s", (int)(n > 200 ? 200 : n), l);
    char outside[4096];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (l[i] == '\'') { /* a single-quoted string: to its closing quote, '' inside */
            for (i++;; i++) {
                if (i >= n)
                    fuzz_fail("an unclosed single-quoted string: %.*s", (int)(n > 200 ? 200 : n), l);
                if (l[i] == '\'' && i + 1 < n && l[i + 1] == '\'')
                    i++;
                else if (l[i] == '\'')
                    break;
                else if ((unsigned char)l[i] < 0x20 || l[i] == 0x7f)
                    fuzz_fail("a control character in a string: %.*s", (int)(n > 200 ? 200 : n), l);
            }
            continue;
        }
        if (l[i] == '"') { /* the one double-quoted string the scripts have: gp_string's "\n" */
            if (!(i + 3 < n && l[i + 1] == '\\' && l[i + 2] == 'n' && l[i + 3] == '"'))
                fuzz_fail("a double-quoted string other than \"\\n\": %.*s", (int)(n > 200 ? 200 : n), l);
            i += 3;
            continue;
        }
        if (o + 1 < sizeof outside)
            outside[o++] = l[i];
    }
    outside[o] = '\0';
    if (strpbrk(outside, "`!@;") || strstr(outside, "system"))
        fuzz_fail("outside the strings of a gnuplot line, something that can run: %.*s", (int)(n > 200 ? 200 : n), l);
}

/* Every script the stand-in gnuplot was given, checked; then the file emptied. */
static void check_scripts(void)
{
    size_t len = 0;
    char *text = fileio_read_all(scripts, &len);
    if (!text)
        return; /* no figure was drawn */
    for (char *l = text, *end = text + len; l < end;) {
        char *nl = memchr(l, '\n', (size_t)(end - l));
        size_t n = nl ? (size_t)(nl - l) : (size_t)(end - l);
        check_script_line(l, n);
        l += n + 1;
    }
    free(text);
    unlink(scripts);
}

static bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

/* The page, checked as the header says. */
static void check_page(const char *page)
{
    static const char *const tags[] = {"!DOCTYPE html>", "html", "head", "meta", "title", "style", "body", "h1", "h2",
                                       "h4", "p", "code", "nav", "ol", "ul", "li", "a", "section", "b", "span", "pre",
                                       "figure", "img", "figcaption", "table", "tr", "th", "td", "details", "summary",
                                       "footer"};
    char *t = fileio_read_all(page, NULL);
    if (!t)
        fuzz_fail("report_html succeeded and wrote no %s", page);
    for (const char *p = t; (p = strchr(p, '<')); p++) {
        const char *name = p + 1 + (p[1] == '/');
        size_t k = 0;
        bool known = false;
        for (; k < sizeof tags / sizeof tags[0] && !known; k++) {
            size_t m = strlen(tags[k]);
            known = strncmp(name, tags[k], m) == 0 && (tags[k][m - 1] == '>' || name[m] == '>' || name[m] == ' ');
        }
        if (!known)
            fuzz_fail("the page has an element it does not write: %.40s", p);
        const char *close = strchr(p, '>');
        if (!close)
            fuzz_fail("an unclosed tag: %.40s", p);
        for (const char *a = p; a < close; a++) {
            if (a[0] == ' ' && a[1] == 'o' && a[2] == 'n' && is_name_char(a[3]))
                fuzz_fail("an event attribute: %.60s", p);
            if (strncmp(a, " href=\"", 7) == 0) {
                const char *v = a + 7;
                size_t m = 0;
                while (is_name_char(v[1 + m]))
                    m++;
                if (v[0] != '#' || m == 0 || v[1 + m] != '"')
                    fuzz_fail("an href that is not #NAME: %.60s", a);
            }
            if (strncmp(a, " src=\"img/", 10) == 0) {
                const char *v = a + 10;
                size_t m = 0;
                while (is_name_char(v[m]) || v[m] == '-' || v[m] == '.')
                    m++;
                bool dots = false;
                for (size_t i = 0; i + 1 < m; i++)
                    dots = dots || (v[i] == '.' && v[i + 1] == '.');
                if (v[m] != '"' || m < 5 || strncmp(v + m - 4, ".png", 4) != 0 || dots)
                    fuzz_fail("an src that is not img/NAME.png: %.60s", a);
            } else if (strncmp(a, " src=", 5) == 0) {
                fuzz_fail("an src outside img/: %.60s", a);
            }
        }
    }
    free(t);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* the stand-in gnuplot, alone on PATH, in a folder of its own beside the scratch folder */
    snprintf(bin_dir, sizeof bin_dir, "%s-bin", fuzz_scratch_dir());
    snprintf(scripts, sizeof scripts, "%s/scripts.gp", bin_dir);
    char gp[192];
    snprintf(gp, sizeof gp, "%s/gnuplot", bin_dir);
    FILE *f = (mkdir(bin_dir, 0700) == 0) ? fopen(gp, "w") : NULL;
    if (!f)
        fuzz_fail("cannot write the stand-in gnuplot in %s", bin_dir);
    fprintf(f, "#!/bin/sh\ncat \"$1\" >> '%s'\nprintf '\\211PNG\\r\\n\\032\\n\\000\\000\\000\\000IEND\\256B`\\202'\n",
            scripts);
    if (fclose(f) != 0 || chmod(gp, 0700) != 0)
        fuzz_fail("cannot write the stand-in gnuplot");
    atexit(remove_bin_dir);
    setenv("PATH", bin_dir, 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], out[256], err[1024];
    const char *scratch = fuzz_scratch_dir();
    int fd = fuzz_input_file(data, size, path, sizeof path);

    oom_error_clear();
    snprintf(out, sizeof out, "%s/t.png", scratch);
    err[0] = '\0';
    check_status("plot_run", plot_run(path, out, err, sizeof err), err);
    snprintf(out, sizeof out, "%s/p.png", scratch);
    check_status("plot_peaks", plot_peaks(path, out, err, sizeof err), err);
    snprintf(out, sizeof out, "%s/s.png", scratch);
    if (plot_has_segments(path))
        check_status("plot_segments", plot_segments(path, out, err, sizeof err), err);
    check_scripts();

    oom_error_clear();
    snprintf(out, sizeof out, "%s/report", scratch);
    const char *inputs[] = {path};
    oom_status st = report_html(inputs, 1, NULL, out, err, sizeof err);
    if (st == OOM_OK) {
        snprintf(out, sizeof out, "%s/report/index.html", scratch);
        check_page(out);
    }
    check_status("report_html", st, err);
    check_scripts();

    oom_error_clear();
    char written[4096];
    check_status("plot_trend", plot_trend(path, scratch, "png", written, sizeof written, err, sizeof err), err);
    check_scripts();

    close(fd);
    oom_error_clear();
    return 0;
}
