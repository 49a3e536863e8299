/* gnuplot.c - one figure drawn by gnuplot. See gnuplot.h. */
#include "run/gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"

extern char **environ;

static oom_status fail(char *err, size_t cap, oom_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return st;
}

void gp_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"')
            fputs("\\\"", f);
        else if (c == '\\')
            fputs("\\\\", f);
        else if (c == '\n')
            fputs("\\n", f);
        else
            fputc(c < 0x20 || c == 0x7f ? ' ' : c, f); /* a raw control character could end the line */
    }
    fputc('"', f);
}

double gp_unit(double max_bytes, const char **name)
{
    if (max_bytes >= 10.0 * 1073741824.0) {
        *name = "GiB";
        return 1073741824.0;
    }
    *name = "MiB";
    return 1048576.0;
}

oom_status gp_begin(gp_figure *f, const char *out, int width, int height, int font_pt, char *err, size_t errcap)
{
    memset(f, 0, sizeof *f);
    const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (dot && dot > (slash ? slash : out) && strcasecmp(dot, ".png") == 0)
        f->svg = false;
    else if (dot && dot > (slash ? slash : out) && strcasecmp(dot, ".svg") == 0)
        f->svg = true;
    else
        return fail(err, errcap, OOM_EINVAL, "%s: a plot is written as .png or .svg", out);
    if (strlen(out) >= sizeof f->out)
        return fail(err, errcap, OOM_EINVAL, "%.64s...: the output's name is too long", out);
    if (slash) { /* the folder must be there: gnuplot would only say it cannot open the file */
        char folder[1024];
        struct stat sb;
        snprintf(folder, sizeof folder, "%.*s", (int)(slash == out ? 1 : slash - out), out);
        if (stat(folder, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return fail(err, errcap, OOM_EIO, "cannot write %s: the folder %s does not exist", out, folder);
    }
    snprintf(f->out, sizeof f->out, "%s", out);
    snprintf(f->out_tmp, sizeof f->out_tmp, "%s.tmp.%ld", out, (long)getpid());
    snprintf(f->dir, sizeof f->dir, "/tmp/oomlab_plot.XXXXXX");
    if (!mkdtemp(f->dir))
        return fail(err, errcap, OOM_EIO, "cannot make a temporary directory");
    char gp[128];
    snprintf(gp, sizeof gp, "%s/script.gp", f->dir);
    if (!(f->gp = fopen(gp, "w"))) {
        rmdir(f->dir);
        return fail(err, errcap, OOM_EIO, "cannot write the plot's script in %s", f->dir);
    }
    /* the svg terminal writes no date and no path; pngcairo none either: the same data, the same bytes */
    if (f->svg)
        fprintf(f->gp, "set terminal svg size %d,%d fixed noenhanced font '%s,%d' background rgb 'white'\n", width,
                height, GP_FONT, font_pt);
    else
        fprintf(f->gp, "set terminal pngcairo size %d,%d noenhanced font '%s,%d' background rgb 'white'\n", width,
                height, GP_FONT, font_pt);
    fprintf(f->gp, "set output ");
    gp_string(f->gp, f->out_tmp);
    fprintf(f->gp, "\nset encoding utf8\n");
    return OOM_OK;
}

FILE *gp_data(gp_figure *f, const char *name, char *path, size_t cap)
{
    if (f->nfiles == GP_MAX_FILES)
        return NULL;
    snprintf(f->files[f->nfiles], sizeof f->files[0], "%s", name);
    snprintf(path, cap, "%s/%s", f->dir, name);
    FILE *d = fopen(path, "w");
    if (d)
        f->nfiles++;
    return d;
}

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

static void cleanup(gp_figure *f)
{
    char p[160];
    if (f->gp)
        fclose(f->gp);
    f->gp = NULL;
    for (int i = 0; i < f->nfiles; i++) {
        snprintf(p, sizeof p, "%s/%s", f->dir, f->files[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/script.gp", f->dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/gnuplot.err", f->dir);
    unlink(p);
    rmdir(f->dir);
    unlink(f->out_tmp);
}

void gp_abort(gp_figure *f) { cleanup(f); }

oom_status gp_end(gp_figure *f, char *err, size_t errcap)
{
    char script[128], gerr[128];
    snprintf(script, sizeof script, "%s/script.gp", f->dir);
    snprintf(gerr, sizeof gerr, "%s/gnuplot.err", f->dir);
    fprintf(f->gp, "unset output\n");
    bool ok = !ferror(f->gp);
    ok = fclose(f->gp) == 0 && ok;
    f->gp = NULL;
    oom_status st = OOM_OK;
    int rc = 0;
    if (!ok) {
        st = fail(err, errcap, OOM_EIO, "cannot write the plot's script in %s", f->dir);
    } else if ((rc = run_gnuplot(script, gerr)) == ENOENT) {
        st = fail(err, errcap, OOM_EIO, "cannot run gnuplot: it is not on PATH (install gnuplot-nox: make deps)");
    } else if (rc != 0) {
        char *why = fileio_read_all(gerr, NULL);
        const char *line = why ? last_line(why) : "";
        st = fail(err, errcap, OOM_EIO, "gnuplot failed%s%s", line[0] ? ": " : "", line);
        free(why);
    } else if (rename(f->out_tmp, f->out) != 0) {
        st = fail(err, errcap, OOM_EIO, "cannot write %s", f->out);
    }
    cleanup(f);
    return st;
}
