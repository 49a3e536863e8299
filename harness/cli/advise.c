/* advise.c - `oomlab advise`: parse the options, load the snapshot once, advise, print or plot. See advise.h. */
#include "cli/advise.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/trace.h"
#include "core/fileio.h"
#include "core/units.h"
#include "run/advise.h"

static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "oomlab: advise: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* True when path holds a pickle (protocol 2+ starts with PROTO, 0x80). */
static bool is_pickle(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    int c = fgetc(f);
    fclose(f);
    return c == 0x80;
}

/* scripts/snapshot2json.py beside this binary's checkout (build/oomlab or build/bench/oomlab), into buf. */
static bool find_converter(char *buf, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *dir = dirname(exe);
    for (int up = 0; up < 4; up++) {
        snprintf(buf, cap, "%s/scripts/snapshot2json.py", dir);
        if (access(buf, R_OK) == 0)
            return true;
        dir = dirname(dir);
    }
    return false;
}

/* Convert a pickle with scripts/snapshot2json.py --strip-frames into tmp (a mkstemp name). 0, or the exit
 * status of the failure with its line printed. */
static int convert_pickle(const char *path, char *tmp, size_t cap)
{
    char conv[PATH_MAX + 64];
    if (!find_converter(conv, sizeof conv))
        return bad("%s is a pickle and scripts/snapshot2json.py is not beside this binary: convert it first "
                   "(scripts/snapshot2json.py %s -o OUT.json)",
                   path, path);
    snprintf(tmp, cap, "/tmp/oomlab-advise-XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0)
        return bad("cannot make a temporary file for the converted %s", path);
    close(fd);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("python3", "python3", conv, path, "--strip-frames", "-o", tmp, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(tmp);
        return bad("%s is a pickle and python3 %s could not convert it (its message is above)", path, conv);
    }
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
                     strcmp(a, "--try") == 0 || strcmp(a, "--step-marker") == 0 || strcmp(a, "--plot") == 0;
        if (takes && i + 1 >= argc)
            return bad("%s needs a value", a);
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
                return bad("--device: '%s' is not a device index (0, 1, ... or cuda:N)", argv[i]);
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
                return bad("--kernels: '%s' is not first, none or an event number", v);
            }
        } else if (strcmp(a, "--budget") == 0) {
            if (units_parse_size(argv[++i], &opt.budget_bytes) != OOM_OK || opt.budget_bytes == 0)
                return bad("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, "
                           "TB)",
                           argv[i]);
        } else if (strcmp(a, "--try") == 0) {
            if (opt.nextra >= ADVISE_MAX_EXTRA)
                return bad("--try: at most %d", ADVISE_MAX_EXTRA);
            opt.extra[opt.nextra++] = argv[++i];
        } else if (strcmp(a, "--step-marker") == 0) {
            opt.step_marker = argv[++i];
            if (!opt.step_marker[0])
                return bad("--step-marker needs a text");
        } else if (strcmp(a, "--plot") == 0) {
            plot = argv[++i];
            opt.series = true;
            if (fileio_check_target(plot) != OOM_OK) /* before the bisection, not after it */
                return bad("--plot: %s", oom_error_detail());
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option '%s'", a);
        } else if (!file) {
            file = a;
        } else {
            return bad("unexpected argument '%s'", a);
        }
    }
    if (!file)
        return bad("missing FILE (a snapshot: the JSON of scripts/snapshot2json.py, or the pickle of "
                   "torch.cuda.memory._dump_snapshot)");
    char tmp[64] = "";
    const char *load = file;
    if (is_pickle(file)) {
        int rc = convert_pickle(file, tmp, sizeof tmp);
        if (rc)
            return rc;
        load = tmp;
    }
    trace_file t;
    char err[REPLAY_ERR_MAX];
    oom_status st = trace_load(load, &t, err, sizeof err);
    if (tmp[0])
        unlink(tmp);
    if (st != OOM_OK) {
        trace_free(&t);
        return bad("%s", err);
    }
    advise_result res;
    st = advise_run(&t, file, &opt, &res, err, sizeof err);
    trace_free(&t);
    if (st == OOM_OK && plot)
        st = advise_plot(&res, plot, err, sizeof err);
    if (st != OOM_OK) {
        advise_result_free(&res);
        return bad("%s", err);
    }
    if (json) {
        cJSON *o = advise_json(&res);
        char *s = o ? cJSON_Print(o) : NULL;
        if (s)
            puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        if (tmp[0])
            printf("converted: %s with scripts/snapshot2json.py --strip-frames\n", file);
        advise_print(&res, stdout);
        if (plot)
            printf("plot: %s\n", plot);
    }
    advise_result_free(&res);
    return 0;
}
