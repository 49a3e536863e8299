/* advise.c - `oomlab advise`: parse the options, load the snapshot once, advise, print or plot (analysis/advise.h). */
#include "cli/command.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"
#include "core/echo.h"
#include "core/fileio.h"
#include "core/selfpath.h"
#include "core/units.h"
#include "analysis/advise.h"
#include "results/runset.h"

/* scripts/snapshot2json.py beside this binary's checkout (build/oomlab or build/bench/oomlab), into buf. */
static bool find_converter(char *buf, size_t cap)
{
    char root[PATH_MAX];
    if (!selfpath_find_up("scripts/snapshot2json.py", root, sizeof root))
        return false;
    int n = snprintf(buf, cap, "%s/scripts/snapshot2json.py", root);
    return n > 0 && (size_t)n < cap;
}

#define CONVERT_TIMEOUT_S 600 /* a pickle of a million events converts in about a minute */
#define CONVERT_ERR_MAX 1024  /* the converter's stderr kept for the error line */

/* The last line of text (the converter's own line, or a traceback's last), control characters as spaces. */
static const char *last_line(char *text)
{
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
        text[--n] = '\0';
    char *line = strrchr(text, '\n');
    line = line ? line + 1 : text;
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    return line;
}

/* Convert the pickle in[0..inlen) with `python3 scripts/snapshot2json.py - --strip-frames`, through pipes: the
 * pickle goes to its stdin, the JSON comes back from its stdout into *json (NUL-terminated, at most lim->bytes,
 * the caller frees it). Nothing touches the disk, so nothing is left behind whatever ends this process, and the
 * converter dies with it (PR_SET_PDEATHSIG). Bounded: the converter refuses a pickle that nests too deep or expands
 * past its bounds, more JSON than lim is refused here, and a conversion still running after CONVERT_TIMEOUT_S is
 * killed. 0, or the exit status of a failure with its one line printed. */
static int convert_pickle(const char *path, const char *in, size_t inlen, const fileio_limit *lim, char **json,
                          size_t *jlen)
{
    char conv[PATH_MAX + 64];
    *json = NULL;
    if (!find_converter(conv, sizeof conv))
        return cli_bad_input("advise: %s is a pickle and scripts/snapshot2json.py is not beside this binary: convert "
                             "it first (scripts/snapshot2json.py %s -o OUT.json)",
                             path, path);
    int p[6] = {-1, -1, -1, -1, -1, -1}; /* the converter's stdin, stdout and stderr: read end, write end */
    int *pin = p, *pout = p + 2, *perr = p + 4;
    if (pipe(pin) != 0 || pipe(pout) != 0 || pipe(perr) != 0) {
        int e = errno;
        for (int k = 0; k < 6; k++)
            if (p[k] >= 0)
                close(p[k]);
        return cli_bad_input("advise: %s is a pickle and it cannot be converted: %s", path, strerror(e));
    }
    char maxb[32];
    snprintf(maxb, sizeof maxb, "%zu", lim->bytes);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the converter never outlives advise */
        if (getppid() != parent)
            _exit(127);
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        for (int k = 0; k < 6; k++)
            if (p[k] > 2) /* not one just made stdin, stdout or stderr */
                close(p[k]);
        execlp("python3", "python3", conv, "-", "--strip-frames", "--max-bytes", maxb, "--name", path, (char *)NULL);
        fprintf(stderr, "cannot run python3: %s\n", strerror(errno));
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (pid < 0) {
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        return cli_bad_input("advise: %s is a pickle and it cannot be converted: cannot start python3", path);
    }
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN); /* a converter that stops reading: EPIPE, not death */
    size_t cap = 1 << 16, n = 0, sent = 0, nerr = 0;
    char *out = malloc(cap + 1), errtext[CONVERT_ERR_MAX + 1];
    const char *why = out ? NULL : "out of host memory";
    struct pollfd fds[3] = {{.fd = pin[1], .events = POLLOUT}, {.fd = pout[0], .events = POLLIN},
                            {.fd = perr[0], .events = POLLIN}};
    if (inlen == 0) {
        close(pin[1]);
        fds[0].fd = -1;
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!why && (fds[1].fd >= 0 || fds[2].fd >= 0)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left_ms = CONVERT_TIMEOUT_S * 1000L - (long)(now.tv_sec - t0.tv_sec) * 1000L -
                       (long)(now.tv_nsec - t0.tv_nsec) / 1000000L;
        if (left_ms <= 0) {
            why = "timeout";
            break;
        }
        if (poll(fds, 3, (int)(left_ms > 1000 ? 1000 : left_ms)) < 0 && errno != EINTR) {
            why = "poll failed";
            break;
        }
        if (fds[0].fd >= 0 && fds[0].revents) {
            /* at most PIPE_BUF at a time: poll said there is that much room, so the write does not block */
            ssize_t w = write(pin[1], in + sent, inlen - sent < PIPE_BUF ? inlen - sent : PIPE_BUF);
            if (w > 0)
                sent += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent == inlen) { /* all sent, or it stopped reading */
                close(pin[1]);
                fds[0].fd = -1;
            }
        }
        if (fds[1].fd >= 0 && fds[1].revents) {
            if (n == cap) {
                size_t ncap = cap > lim->bytes / 2 ? lim->bytes + 1 : 2 * cap;
                char *nb = realloc(out, ncap + 1);
                if (!nb) {
                    why = "out of host memory";
                    break;
                }
                out = nb;
                cap = ncap;
            }
            ssize_t r = read(pout[0], out + n, cap - n);
            if (r > 0)
                n += (size_t)r;
            else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(pout[0]);
                fds[1].fd = -1;
            }
            if (n > lim->bytes)
                why = "too much";
        }
        if (fds[2].fd >= 0 && fds[2].revents) {
            char sink[4096];
            ssize_t r = read(perr[0], nerr < CONVERT_ERR_MAX ? errtext + nerr : sink,
                             nerr < CONVERT_ERR_MAX ? CONVERT_ERR_MAX - nerr : sizeof sink);
            if (r > 0 && nerr < CONVERT_ERR_MAX)
                nerr += (size_t)r;
            else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                close(perr[0]);
                fds[2].fd = -1;
            }
        }
    }
    errtext[nerr] = '\0';
    for (int k = 0; k < 3; k++)
        if (fds[k].fd >= 0)
            close(fds[k].fd);
    int status = 0;
    /* a converter that closed its output but lingers is waited for until the deadline too, then killed */
    for (;;) {
        pid_t w = why ? -1 : waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && !why && errno != EINTR))
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (why || now.tv_sec - t0.tv_sec >= CONVERT_TIMEOUT_S) {
            why = why ? why : "timeout";
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL); /* 10 ms */
    }
    signal(SIGPIPE, old_pipe);
    int rc = 0;
    if (why && strcmp(why, "timeout") == 0)
        rc = cli_bad_input("advise: %s is a pickle and its conversion (python3 %s) did not finish in %d s: stopped",
                           path, conv, CONVERT_TIMEOUT_S);
    else if (why && strcmp(why, "too much") == 0)
        rc = cli_bad_input("advise: %s is a pickle whose JSON is more than %s: stopped converting it", path, lim->what);
    else if (why)
        rc = cli_bad_input("advise: %s is a pickle and it cannot be converted: %s", path, why);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n == 0) {
        const char *line = nerr ? last_line(errtext) : "";
        if (strncmp(line, "snapshot2json: ", 15) == 0) /* its own line: "snapshot2json: PATH: why" */
            rc = cli_bad_input("advise: %s (a pickle: scripts/snapshot2json.py refused it)", line + 15);
        else
            rc = cli_bad_input("advise: %s is a pickle and python3 %s could not convert it: %s", path, conv,
                     line[0] ? line : WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "no output");
    }
    if (rc) {
        free(out);
        return rc;
    }
    out[n] = '\0';
    *json = out;
    *jlen = n;
    return 0;
}

int cli_advise(int argc, char **argv)
{
    const char *file = NULL, *plot = NULL;
    advise_options opt = {0};
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool takes = strcmp(a, "--device") == 0 || strcmp(a, "--kernels") == 0 || strcmp(a, "--budget") == 0 ||
                     strcmp(a, "--try") == 0 || strcmp(a, "--step-marker") == 0 || strcmp(a, "--plot") == 0 ||
                     strcmp(a, "--device-memory") == 0 || strcmp(a, "--layouts") == 0;
        if (takes && i + 1 >= argc)
            return cli_bad_input("advise: %s needs a value", a);
        if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--only") == 0) {
            opt.only = true;
        } else if (strcmp(a, "--device") == 0) {
            const char *s = strncmp(argv[++i], "cuda:", 5) == 0 ? argv[i] + 5 : argv[i];
            char *end = NULL;
            errno = 0;
            long v = strtol(s, &end, 10);
            if (!isdigit((unsigned char)s[0]) || !end || *end || errno || v > 65535)
                return cli_bad_input("advise: --device: '%s' is not a device index (0, 1, ... or cuda:N)", argv[i]);
            opt.one_device = true;
            opt.device = (int)v;
        } else if (strcmp(a, "--kernels") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "none") == 0) {
                opt.kernels = REPLAY_KERNELS_NONE;
            } else if (strcmp(v, "first") == 0) {
                opt.kernels = REPLAY_KERNELS_FIRST_ALLOC;
            } else if (*v && strlen(v) <= 15 && strspn(v, "0123456789") == strlen(v)) {
                opt.kernels = REPLAY_KERNELS_AT;
                opt.kernel_at = (size_t)strtoull(v, NULL, 10);
            } else {
                return cli_bad_input("advise: --kernels: '%s' is not first, none or an event number", v);
            }
        } else if (strcmp(a, "--budget") == 0) {
            if (units_parse_size(argv[++i], &opt.budget_bytes) != OOM_OK || opt.budget_bytes == 0)
                return cli_bad_input("advise: --budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, "
                                     "TiB, KB, MB, GB, TB)",
                                     argv[i]);
        } else if (strcmp(a, "--device-memory") == 0) {
            if (units_parse_size(argv[++i], &opt.device_total) != OOM_OK || opt.device_total < ((size_t)1 << 20))
                return cli_bad_input("advise: --device-memory: '%s' is not a size of 1 MiB or more (bytes, or a "
                                     "number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                                     argv[i]);
        } else if (strcmp(a, "--layouts") == 0) {
            const char *v = argv[++i];
            char *end = NULL;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (!isdigit((unsigned char)v[0]) || !end || *end || errno || n > ADVISE_MAX_LAYOUTS)
                return cli_bad_input("advise: --layouts: '%s' is not a number from 0 to %d", v, ADVISE_MAX_LAYOUTS);
            opt.layouts = n == 0 ? -1 : (int)n;
        } else if (strcmp(a, "--try") == 0) {
            if (opt.nextra >= ADVISE_MAX_EXTRA)
                return cli_bad_input("advise: --try: at most %d", ADVISE_MAX_EXTRA);
            opt.extra[opt.nextra++] = argv[++i];
        } else if (strcmp(a, "--step-marker") == 0) {
            opt.step_marker = argv[++i];
            if (!opt.step_marker[0])
                return cli_bad_input("advise: --step-marker needs a text");
        } else if (strcmp(a, "--plot") == 0) {
            plot = argv[++i];
            opt.series = true;
            if (fileio_check_target(plot) != OOM_OK) /* before the bisection, not after it */
                return cli_bad_input("advise: --plot: %s", oom_error_detail());
        } else if (a[0] == '-' && a[1]) {
            return cli_bad_input("advise: unknown option '%s'", a);
        } else if (!file) {
            file = a;
        } else {
            return cli_bad_input("advise: unexpected argument '%s'", a);
        }
    }
    if (!file)
        return cli_bad_input("advise: missing FILE (a snapshot: the JSON of scripts/snapshot2json.py, or the pickle of "
                   "torch.cuda.memory._dump_snapshot)");
    /* FILE is opened once (a FIFO or `advise <(...)` included) and read within --max-input; a pickle is converted
     * in memory */
    fileio_limit lim = runset_input_limit();
    trace_text in;
    char err[REPLAY_ERR_MAX];
    oom_status st = trace_read(file, &lim, &in, err, sizeof err);
    if (st != OOM_OK)
        return cli_bad_input("advise: %s", err);
    char *conv = NULL;
    size_t clen = 0;
    bool pickle = in.len > 0 && (unsigned char)in.text[0] == 0x80; /* protocol 2 and later start with PROTO */
    if (pickle) {
        int rc = convert_pickle(file, in.text, in.len, &lim, &conv, &clen);
        trace_text_free(&in);
        if (rc)
            return rc;
    }
    trace_file t;
    st = trace_parse(file, pickle ? conv : in.text, pickle ? clen : in.len, &t, err, sizeof err);
    if (pickle)
        free(conv);
    else
        trace_text_free(&in);
    if (st != OOM_OK) {
        trace_free(&t);
        return cli_bad_input("advise: %s", err);
    }
    advise_result res;
    st = advise_run(&t, file, &opt, &res, err, sizeof err);
    trace_free(&t);
    if (st == OOM_OK && plot)
        st = advise_plot(&res, plot, err, sizeof err);
    if (st != OOM_OK) {
        advise_result_free(&res);
        return cli_bad_input("advise: %s", err);
    }
    if (json) {
        cli_print_json(advise_json(&res));
    } else {
        if (pickle)
            printf("converted: %s with scripts/snapshot2json.py --strip-frames\n", file);
        advise_print(&res, stdout);
        if (plot)
            printf("plot: %s\n", plot);
    }
    advise_result_free(&res);
    return 0;
}
