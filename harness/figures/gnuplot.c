/* gnuplot.c - one figure drawn by gnuplot. See gnuplot.h. */
#include "figures/gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/echo.h"
#include "core/fail.h"
#include "core/fileio.h"

extern char **environ;

void gp_string(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'')
            fputs("''", f); /* the one escape a single-quoted string has */
        else if (c == '\n')
            fputs("'.\"\\n\".'", f); /* a line break: the constant "\n" joined on, the line never broken */
        else
            fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
    }
    fputc('\'', f);
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

/* Remove the figure's folder and, unless it was published, gnuplot's output. */
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
    if (f->out_fd >= 0) {
        close(f->out_fd);
        unlink(f->out_tmp);
    }
    f->out_fd = -1;
}

oom_status gp_begin(gp_figure *f, const char *out, int width, int height, int font_pt, char *err, size_t errcap)
{
    memset(f, 0, sizeof *f);
    f->out_fd = -1;
    char e1[ECHO_BUF];
    const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (dot && dot > (slash ? slash : out) && strcasecmp(dot, ".png") == 0)
        f->svg = false;
    else if (dot && dot > (slash ? slash : out) && strcasecmp(dot, ".svg") == 0)
        f->svg = true;
    else
        return errbuf_fail(err, errcap, OOM_EINVAL, "%s: a plot is written as .png or .svg", echo_str(out, e1));
    if (strlen(out) >= sizeof f->out)
        return errbuf_fail(err, errcap, OOM_EINVAL, "%s: the output's name is too long", echo_str(out, e1));
    if (slash) { /* the folder must be there: gnuplot would only say it cannot open the file */
        char folder[1024];
        struct stat sb;
        snprintf(folder, sizeof folder, "%.*s", (int)(slash == out ? 1 : slash - out), out);
        if (stat(folder, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return errbuf_fail(err, errcap, OOM_EIO, "cannot write %s: its folder does not exist", echo_str(out, e1));
    }
    snprintf(f->out, sizeof f->out, "%s", out);
    snprintf(f->dir, sizeof f->dir, "/tmp/oomlab_plot.XXXXXX");
    if (!mkdtemp(f->dir))
        return errbuf_fail(err, errcap, OOM_EIO, "cannot make a temporary directory");
    char gp[128];
    snprintf(gp, sizeof gp, "%s/script.gp", f->dir);
    if (!(f->gp = fopen(gp, "w"))) {
        rmdir(f->dir);
        return errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's script in %s", f->dir);
    }
    /* gnuplot draws onto its standard output, this file (created O_EXCL: a link planted at the name is never
     * followed), so no name from the input is in its script and it opens nothing itself */
    if ((f->out_fd = fileio_temp_beside(out, f->out_tmp, sizeof f->out_tmp)) < 0) {
        errbuf_fail(err, errcap, OOM_EIO, "cannot write %s: cannot create a temporary file beside it", echo_str(out, e1));
        cleanup(f);
        return OOM_EIO;
    }
    /* the svg terminal writes no date and no path; pngcairo none either: the same data, the same bytes */
    if (f->svg)
        fprintf(f->gp, "set terminal svg size %d,%d fixed noenhanced font '%s,%d' background rgb 'white'\n", width,
                height, GP_FONT, font_pt);
    else
        fprintf(f->gp, "set terminal pngcairo size %d,%d noenhanced font '%s,%d' background rgb 'white'\n", width,
                height, GP_FONT, font_pt);
    fprintf(f->gp, "set encoding utf8\n");
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

bool gp_data_close(FILE *d)
{
    bool ok = !ferror(d); /* a write that failed before the last flush */
    return fclose(d) == 0 && ok;
}

/* Run gnuplot on script, drawing onto out_fd; its stderr goes to errfile. 0 when it exited with status 0; else
 * posix_spawnp's error (ENOENT: gnuplot is not on PATH), or -1 with *status its wait status. */
static int run_gnuplot(const char *script, int out_fd, const char *errfile, int *status)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    char *argv[] = {"gnuplot", (char *)script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return rc;
    *status = 0;
    while (waitpid(pid, status, 0) != pid)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(*status) && WEXITSTATUS(*status) == 0 ? 0 : -1;
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

/* Is what gnuplot wrote onto fd a whole figure, on the disk? false with why (one phrase) when not: a full disk
 * cuts a figure short and gnuplot still exits 0. A PNG starts with its signature and ends with the IEND chunk
 * (length 0, type, CRC); an SVG ends with its closing tag and at most white space. */
static bool output_complete(int fd, bool svg, char *why, size_t cap)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    struct stat sb;
    if (fsync(fd) != 0 && errno != EINVAL) {
        snprintf(why, cap, "it cannot be flushed to the disk (%s)", strerror(errno));
        return false;
    }
    if (fstat(fd, &sb) != 0) {
        snprintf(why, cap, "it cannot be read back (%s)", strerror(errno));
        return false;
    }
    if (sb.st_size == 0) {
        snprintf(why, cap, "gnuplot wrote nothing (is the disk full?)");
        return false;
    }
    unsigned char head[8] = {0}, tail[64];
    size_t n = sb.st_size < (off_t)sizeof tail ? (size_t)sb.st_size : sizeof tail;
    char self[64]; /* fd is write-only (fileio_temp_beside): the same file opened again to read */
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int rfd = open(self, O_RDONLY | O_CLOEXEC);
    bool read_ok = rfd >= 0 && pread(rfd, head, sizeof head, 0) >= 0 &&
                   pread(rfd, tail, n, sb.st_size - (off_t)n) == (ssize_t)n;
    int read_errno = errno;
    if (rfd >= 0)
        close(rfd);
    if (!read_ok) {
        snprintf(why, cap, "it cannot be read back (%s)", strerror(read_errno));
        return false;
    }
    bool whole;
    if (svg) {
        while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == ' ' || tail[n - 1] == '\r' || tail[n - 1] == '\t'))
            n--;
        whole = n >= 6 && memcmp(tail + n - 6, "</svg>", 6) == 0;
    } else {
        whole = sb.st_size >= 20 && memcmp(head, sig, 8) == 0 && memcmp(tail + n - 12, iend, 12) == 0;
    }
    if (!whole)
        snprintf(why, cap, "gnuplot's output is cut short (%lld bytes, %s: is the disk full?)", (long long)sb.st_size,
                 svg ? "no </svg> at its end" : "no PNG end chunk");
    return whole;
}

void gp_abort(gp_figure *f) { cleanup(f); }

oom_status gp_end(gp_figure *f, char *err, size_t errcap)
{
    char script[128], gerr[128], e1[ECHO_BUF], why[160];
    snprintf(script, sizeof script, "%s/script.gp", f->dir);
    snprintf(gerr, sizeof gerr, "%s/gnuplot.err", f->dir);
    fprintf(f->gp, "unset output\n");
    bool ok = !ferror(f->gp);
    ok = fclose(f->gp) == 0 && ok;
    f->gp = NULL;
    oom_status st = OOM_OK;
    int rc = 0, status = 0;
    if (!ok) {
        st = errbuf_fail(err, errcap, OOM_EIO, "cannot write the plot's script in %s", f->dir);
    } else if ((rc = run_gnuplot(script, f->out_fd, gerr, &status)) == ENOENT) {
        st = errbuf_fail(err, errcap, OOM_EIO, "cannot run gnuplot: it is not on PATH (install gnuplot-nox: make deps)");
    } else if (rc != 0 && WIFSIGNALED(status)) {
        st = errbuf_fail(err, errcap, OOM_EIO, "cannot write %s: gnuplot was killed by signal %d", echo_str(f->out, e1),
                  WTERMSIG(status));
    } else if (rc != 0) {
        char *why_gp = fileio_read_all(gerr, NULL);
        const char *line = why_gp ? last_line(why_gp) : "";
        char e2[ECHO_BUF];
        st = errbuf_fail(err, errcap, OOM_EIO, "gnuplot failed%s%s", line[0] ? ": " : "", echo_str(line, e2));
        free(why_gp);
    } else if (!output_complete(f->out_fd, f->svg, why, sizeof why)) {
        st = errbuf_fail(err, errcap, OOM_EIO, "cannot write %s: %s", echo_str(f->out, e1), why);
    } else {
        int fd = f->out_fd;
        f->out_fd = -1;
        if (close(fd) != 0) {
            unlink(f->out_tmp);
            st = errbuf_fail(err, errcap, OOM_EIO, "cannot write %s: %s", echo_str(f->out, e1), strerror(errno));
        } else if ((st = fileio_publish(f->out_tmp, f->out)) != OOM_OK) { /* it removed the temporary file */
            st = errbuf_fail(err, errcap, st, "%s", oom_error_detail());
        }
    }
    cleanup(f);
    return st;
}
