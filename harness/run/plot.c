/* plot.c - the results JSON drawn with gnuplot. See plot.h. */
#include "run/plot.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"

extern char **environ;

#define MIB 1048576.0

static oom_status fail(char *err, size_t cap, oom_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return st;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Text as a gnuplot double-quoted string that reads back as the same one line: a backslash doubled, control
 * characters as spaces, a double quote escaped in the script and a single one in the data file (whose strings end
 * at any double quote). gnuplot ends an unclosed string at the end of its line and runs the next line as a
 * command, so a raw newline in a label from a results file would run its text, system() included. */
static void put_text(FILE *f, const char *s, bool script)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\\')
            fputs("\\\\", f);
        else if (c == '"')
            fputs(script ? "\\\"" : "'", f);
        else
            fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
    }
    fputc('"', f);
}

static void put_label(FILE *f, const char *s) { put_text(f, s, true); }

/* The formats a plot is written in, by the output's extension: gnuplot's terminal for each. */
static const struct {
    const char *ext, *terminal;
} formats[] = {
    {".png", "pngcairo"},
    {".svg", "svg"},
};

/* Run gnuplot on script; its stderr goes to errfile. 0 when it succeeded, else posix_spawnp's error (ENOENT:
 * gnuplot is not on PATH) or -1 (it ran and failed). */
static int run_gnuplot(const char *script, const char *errfile)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *argv[] = {"gnuplot", (char *)script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return rc;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The last non-empty line of text (gnuplot ends its report with the error itself), in place. */
static const char *last_line(char *text)
{
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
        text[--n] = '\0';
    char *nl = strrchr(text, '\n');
    return nl ? nl + 1 : text;
}

/* The first variant whose OOM has no sample index (oom.step: a whole number in 0..INT_MAX, report.h), or -1. The
 * marker is drawn at that sample, so anything else is not a results file. */
static int bad_oom_step(const cJSON *run)
{
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(run, "variants"))
    {
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
        double step = num(oom, "step");
        if (cJSON_IsObject(oom) && !(step >= 0 && step <= INT_MAX && step == floor(step)))
            return i;
        i++;
    }
    return -1;
}

/* Write the data (one gnuplot index per variant: step, label, allocated MiB, reserved MiB) and the script. */
static bool write_inputs(const cJSON *run, const char *dat, const char *gp, const char *terminal,
                         const char *out_tmp)
{
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(run, "variants");
    int nv = cJSON_GetArraySize(vs);
    FILE *d = fopen(dat, "w"), *g = fopen(gp, "w");
    if (!d || !g) {
        if (d)
            fclose(d);
        if (g)
            fclose(g);
        return false;
    }
    for (int i = 0; i < nv; i++) {
        const cJSON *ss = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(vs, i), "samples");
        if (cJSON_GetArraySize(ss) == 0) /* an empty block would merge into the next: keep one undefined point */
            fprintf(d, "0 \"\" NaN NaN\n");
        for (int k = 0; k < cJSON_GetArraySize(ss); k++) {
            const cJSON *s = cJSON_GetArrayItem(ss, k);
            fprintf(d, "%d ", k);
            put_text(d, str(s, "label"), false);
            fprintf(d, " %.3f %.3f\n", num(s, "allocated") / MIB, num(s, "reserved") / MIB);
        }
        fprintf(d, "\n\n");
    }
    int cols = nv <= 1 ? 1 : nv <= 4 ? 2 : 3, rows = (nv + cols - 1) / cols;
    double budget = num(run, "budget") / MIB;
    fprintf(g, "set terminal %s size %d,%d font 'sans,10'\n", terminal, 520 * cols, 420 * rows + 40);
    fprintf(g, "set output ");
    put_label(g, out_tmp);
    fprintf(g, "\nset multiplot layout %d,%d title ", rows, cols);
    char title[512];
    snprintf(title, sizeof title, "%s on %s (%s), budget %.0f MiB: allocated and reserved bytes at each step",
             str(run, "scenario"), str(run, "backend"), str(run, "device"), budget);
    put_label(g, title);
    fprintf(g, " font 'sans,12'\n");
    fprintf(g, "set termoption noenhanced\n"); /* labels are plain text: torch.cuda.empty_cache() has underscores */
    fprintf(g, "set grid ytics\nset ylabel 'MiB'\nset yrange [0:%.3f]\nset key at graph 0.98, graph 0.62 right "
               "font 'sans,8' box opaque\n",
            budget * 1.15);
    fprintf(g, "set xtics rotate by 35 right font 'sans,7'\nset bmargin 7\n");
    for (int i = 0; i < nv; i++) {
        const cJSON *v = cJSON_GetArrayItem(vs, i);
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(v, "oom");
        snprintf(title, sizeof title, "%s: %s %s", str(v, "name"), strcmp(str(v, "outcome"), "oom") == 0 ? "OOM" : str(v, "outcome"),
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "passed")) ? "(as expected)" : "(NOT as expected)");
        fprintf(g, "set title ");
        put_label(g, title);
        fprintf(g, "\nplot '%s' index %d using 1:4:xtic(2) with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1f77b4' "
                   "title 'reserved', '' index %d using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#ff7f0e' "
                   "title 'allocated', %.3f with lines dt 2 lc rgb '#555555' title 'budget'",
                dat, i, i, budget);
        if (cJSON_IsObject(oom)) /* the sample right after the OOM */
            fprintf(g, ", '' index %d using 1:($1 == %d ? $4 : 1/0) with points pt 6 ps 2.5 lw 2 lc rgb '#d62728' "
                       "title 'OOM'",
                    i, (int)num(oom, "step"));
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    bool ok = !ferror(d) && !ferror(g);
    ok = (fclose(d) == 0) && ok;
    ok = (fclose(g) == 0) && ok;
    return ok;
}

oom_status plot_run(const char *json_path, const char *png_path, char *err, size_t errcap)
{
    const char *dot = strrchr(png_path, '.'), *slash = strrchr(png_path, '/'), *terminal = NULL;
    for (size_t i = 0; dot && dot > (slash ? slash : png_path) && i < sizeof formats / sizeof formats[0]; i++)
        if (strcasecmp(dot, formats[i].ext) == 0)
            terminal = formats[i].terminal;
    if (!terminal)
        return fail(err, errcap, OOM_EINVAL, "%s: a plot is written as .png or .svg", png_path);
    if (slash) { /* the folder must be there: gnuplot would only say it cannot open the file */
        char folder[1024];
        struct stat sb;
        snprintf(folder, sizeof folder, "%.*s", (int)(slash == png_path ? 1 : slash - png_path), png_path);
        if (stat(folder, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return fail(err, errcap, OOM_EIO, "cannot write %s: the folder %s does not exist", png_path, folder);
    }
    char *text = fileio_read_all(json_path, NULL);
    if (!text)
        return fail(err, errcap, OOM_EIO, "%s", oom_error_detail());
    cJSON *run = cJSON_Parse(text);
    free(text);
    if (!run || strcmp(str(run, "schema"), "oomlab.run/1") != 0 ||
        !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(run, "variants")) || isnan(num(run, "budget"))) {
        cJSON_Delete(run);
        return fail(err, errcap, OOM_EINVAL, "%s is not an oomlab results file (schema oomlab.run/1)", json_path);
    }
    int bad = bad_oom_step(run);
    if (bad >= 0) {
        cJSON_Delete(run);
        return fail(err, errcap, OOM_EINVAL, "%s: variants[%d].oom.step is not a sample index (a whole number >= 0)",
                    json_path, bad);
    }
    char dir[] = "/tmp/oomlab_plot.XXXXXX";
    if (!mkdtemp(dir)) {
        cJSON_Delete(run);
        return fail(err, errcap, OOM_EIO, "cannot make a temporary directory");
    }
    char dat[64], gp[64], gerr[64], tmp_png[1100];
    snprintf(dat, sizeof dat, "%s/run.dat", dir);
    snprintf(gp, sizeof gp, "%s/run.gp", dir);
    snprintf(gerr, sizeof gerr, "%s/gnuplot.err", dir);
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%ld", png_path, (long)getpid());
    oom_status st = OOM_OK;
    int gp_rc = 0;
    if (!write_inputs(run, dat, gp, terminal, tmp_png)) {
        st = fail(err, errcap, OOM_EIO, "cannot write the plot's inputs in %s", dir);
    } else if ((gp_rc = run_gnuplot(gp, gerr)) == ENOENT) {
        st = fail(err, errcap, OOM_EIO, "cannot run gnuplot: it is not on PATH (install gnuplot-nox: make deps)");
    } else if (gp_rc != 0) {
        char *why = fileio_read_all(gerr, NULL);
        const char *line = why ? last_line(why) : "";
        st = fail(err, errcap, OOM_EIO, "gnuplot failed%s%s", line[0] ? ": " : "", line);
        free(why);
    } else if (rename(tmp_png, png_path) != 0) {
        st = fail(err, errcap, OOM_EIO, "cannot write %s", png_path);
    }
    unlink(tmp_png);
    unlink(dat);
    unlink(gp);
    unlink(gerr);
    rmdir(dir);
    cJSON_Delete(run);
    return st;
}
