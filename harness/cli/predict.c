/* predict.c - `oomlab predict`: find the Python, run the capture as a child, analyse its trace (analysis/predict.h).
 *
 * The Python is --python, else build/venv/bin/python of the checkout this binary runs from, installed on first
 * use by scripts/predict_venv.sh (said on stderr, with the time it took). The capture runs as
 *   PYTHON -m oomlab_capture --gpu NAME --out TMP/trace.json [--quiet] -- SCRIPT ARGS...
 * with PYTHONPATH=<checkout>/scripts in front of the user's, by execv: no word reaches a shell. Its exit status:
 * 0 the trace is written; 2 a bad argument (unknown GPU), 3 the script raised (its traceback), 4 the script never
 * allocated device memory: the capture printed the one line (after the traceback), and predict exits 2. The
 * script's own standard output goes to stderr, so that stdout holds oomlab's report (or its JSON) alone.
 *
 * --nproc N: the script is an N-process torch.distributed job (torchrun --nproc_per_node N). Each rank is captured
 * (--rank K --world-size N: scripts/oomlab_capture/distributed.py), at most as many at once as there are CPUs, each
 * into TMP/trace.K.json; ranks whose traces hold the same allocations and frees are reported once (the first's). NCCL's buffers
 * (devcomm_model_bytes(N), device/devcomm.h) are charged to every rank's GPU outside the allocator. A script that
 * never calls init_process_group is said so and predicted as one process (rank 0's capture, nothing charged).
 */
#include "cli/command.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"
#include "core/echo.h"
#include "core/fileio.h"
#include "core/selfpath.h"
#include "core/units.h"
#include "alloc/memstats.h"
#include "analysis/predict.h"
#include "device/devcomm.h"

/* the checkout: where scripts/ has predict_venv.sh (and the capture package, scripts/oomlab_capture) */
#define CHECKOUT_MARK "scripts/predict_venv.sh"
#define DEFAULT_GPU "H100-80GB"
#define PREDICT_NPROC_MAX 1024 /* --nproc's largest rank count */

static int bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "oomlab: predict: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

typedef struct predict_cli {
    const char *gpu, *python_opt, *alloc_conf, *trace_out, *plot, *sweep;
    size_t budget;
    bool json;
    int nproc;             /* --nproc N: ranks of a torch.distributed job; 0: one process */
    const char *script;
    char **args;
    int nargs;
    char root[PATH_MAX];   /* the checkout: scripts/oomlab_capture is under it */
    char python[PATH_MAX + 32]; /* the Python that runs the capture */
    char tmpdir[PATH_MAX];
    char trace[PATH_MAX + 16];
    char upper[PATH_MAX + 24]; /* the capture's upper trace (--out-upper), written only where it met a range */
    /* --sweep NAME=LO..HI */
    char sweep_name[64];
    int64_t lo, hi;
} predict_cli;

/* The capture's command line up to its options: PYTHON -m oomlab_capture --gpu GPU --out TRACE; returns its length. */
#define ARGV_HEAD 7 /* the entries capture_argv_head writes */

static size_t capture_argv_head(predict_cli *c, const char *trace, char **argv)
{
    size_t n = 0;
    argv[n++] = c->python;
    argv[n++] = "-m";
    argv[n++] = "oomlab_capture";
    argv[n++] = "--gpu";
    argv[n++] = (char *)c->gpu;
    argv[n++] = "--out";
    argv[n++] = (char *)trace;
    return n;
}

/* A folder (or a link to one)? */
static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* In a forked child before exec: PYTHONPATH = pythonpath, then what it held ("a:b"); exits 127 out of memory. */
static void child_prepend_pythonpath(const char *pythonpath)
{
    const char *old = getenv("PYTHONPATH");
    size_t n = strlen(pythonpath) + (old ? strlen(old) : 0) + 2;
    char *pp = malloc(n);
    if (!pp)
        _exit(127);
    snprintf(pp, n, "%s%s%s", pythonpath, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", pp, 1);
}

/* Run argv[0] with argv; stdout to out_path (created) when given, else to our stderr; env_name=env_value added
 * when env_name. The exit status, or -1 on a signal (*sig set), 127 when it could not be started. */
static int run_child(char *const argv[], const char *pythonpath, const char *env_name, const char *env_value,
                     const char *out_path, int *sig)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return 127;
    if (pid == 0) {
        if (pythonpath)
            child_prepend_pythonpath(pythonpath);
        if (env_name)
            setenv(env_name, env_value, 1);
        if (out_path) {
            FILE *f = fopen(out_path, "w");
            if (!f)
                _exit(127);
            dup2(fileno(f), STDOUT_FILENO);
        } else {
            dup2(STDERR_FILENO, STDOUT_FILENO);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 127;
    *sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The Python: --python (an executable file), else the checkout's build/venv, installed now if missing. 0 or the
 * exit status with its line printed. */
static int find_python(predict_cli *c)
{
    if (c->python_opt) {
        if (access(c->python_opt, X_OK) != 0 || is_dir(c->python_opt)) {
            char cut[ECHO_BUF];
            return bad("--python: '%s' is not an executable file", echo_str(c->python_opt, cut));
        }
        snprintf(c->python, sizeof c->python, "%s", c->python_opt);
        return 0;
    }
    snprintf(c->python, sizeof c->python, "%s/build/venv/bin/python", c->root);
    if (access(c->python, X_OK) == 0)
        return 0;
    char script[PATH_MAX + 32], venv[PATH_MAX + 16];
    snprintf(script, sizeof script, "%s/scripts/predict_venv.sh", c->root);
    snprintf(venv, sizeof venv, "%s/build/venv", c->root);
    fprintf(stderr, "oomlab: predict: first use: installing torch 2.11.0 and what its import needs into %s "
                    "(scripts/predict_venv.sh; --python PATH uses your own environment instead)\n",
            venv);
    double t0 = now_s();
    char *argv[] = {"/bin/bash", script, venv, NULL};
    int sig = 0, rc = run_child(argv, NULL, NULL, NULL, NULL, &sig);
    if (rc != 0) {
        fprintf(stderr, "oomlab: predict: scripts/predict_venv.sh failed (status %d; its output is above)\n", rc);
        return 1;
    }
    fprintf(stderr, "oomlab: predict: installed %s in %.0f s\n", venv, now_s() - t0);
    return 0;
}

/* arg with every "{NAME}" replaced by value (malloc'd); NULL when out of memory. */
static char *substitute(const char *arg, const char *name, const char *value)
{
    char key[72];
    snprintf(key, sizeof key, "{%s}", name);
    size_t kl = strlen(key), vl = strlen(value), n = 0;
    for (const char *p = strstr(arg, key); p; p = strstr(p + kl, key))
        n++;
    char *out = malloc(strlen(arg) + n * vl + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = arg;;) {
        const char *q = strstr(p, key);
        if (!q) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, value, vl);
        o += vl;
        p = q + kl;
    }
    return out;
}

/* The status of a capture child as predict's: 0, or the exit status with the capture's line, or ours, printed. */
static int capture_status(const predict_cli *c, int st, int sig)
{
    if (st == 0)
        return 0;
    if (st == 2 || st == 3 || st == 4)
        return 2; /* the capture printed the one line (after the script's traceback) */
    if (st == 127) {
        char cut[ECHO_BUF];
        fprintf(stderr, "oomlab: predict: could not run the capture with '%s' (not a Python with torch 2.11?)\n",
                echo_str(c->python, cut));
        return 2;
    }
    if (st < 0)
        fprintf(stderr, "oomlab: predict: the capture was killed by signal %d\n", sig);
    else
        fprintf(stderr, "oomlab: predict: the capture failed with status %d (its output is above)\n", st);
    return 1;
}

static void rank_trace_path(const predict_cli *c, int rank, char *out, size_t cap)
{
    snprintf(out, cap, "%s/trace.%d.json", c->tmpdir, rank);
}

/* Every rank's capture (--nproc), at most as many children at once as there are CPUs. 0, or the first failing
 * rank's status (the others run to their end). */
static int capture_ranks(predict_cli *c)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int width = ncpu < 1 ? 1 : ncpu > c->nproc ? c->nproc : (int)ncpu;
    char pythonpath[PATH_MAX + 16];
    snprintf(pythonpath, sizeof pythonpath, "%s/scripts", c->root);
    size_t nargv = (size_t)c->nargs + ARGV_HEAD + 8; /* --rank R --world-size N --quiet -- script ... NULL */
    char **argv = calloc(nargv, sizeof *argv);
    pid_t *pids = calloc((size_t)c->nproc, sizeof *pids);
    if (!argv || !pids) {
        free(argv);
        free(pids);
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        return 1;
    }
    int rc = 0, next = 0, running = 0;
    fflush(stdout);
    fflush(stderr);
    while (next < c->nproc || running > 0) {
        if (next < c->nproc && running < width) {
            char rank[16], world[16], trace[PATH_MAX + 32];
            snprintf(rank, sizeof rank, "%d", next);
            snprintf(world, sizeof world, "%d", c->nproc);
            rank_trace_path(c, next, trace, sizeof trace);
            size_t n = capture_argv_head(c, trace, argv);
            argv[n++] = "--rank";
            argv[n++] = rank;
            argv[n++] = "--world-size";
            argv[n++] = world;
            if (c->json)
                argv[n++] = "--quiet";
            argv[n++] = "--";
            argv[n++] = (char *)c->script;
            for (int i = 0; i < c->nargs; i++)
                argv[n++] = c->args[i];
            argv[n] = NULL;
            pid_t pid = fork();
            if (pid == 0) {
                child_prepend_pythonpath(pythonpath);
                dup2(STDERR_FILENO, STDOUT_FILENO);
                execv(argv[0], argv);
                _exit(127);
            }
            if (pid < 0) {
                if (!rc)
                    rc = capture_status(c, 127, 0);
                next = c->nproc; /* start no more; wait for those running */
                continue;
            }
            pids[next++] = pid;
            running++;
            continue;
        }
        int status = 0;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        bool ours = false;
        for (int k = 0; k < c->nproc; k++)
            ours = ours || pids[k] == pid;
        if (!ours)
            continue;
        running--;
        int st = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        int r = capture_status(c, st, sig);
        if (r && !rc)
            rc = r;
    }
    free(argv);
    free(pids);
    return rc;
}

/* One capture of the script (with value substituted when sweeping) into c->trace. 0, or the exit status (the
 * capture's line, or ours, printed). */
static int capture(predict_cli *c, const char *value, bool quiet)
{
    size_t n = 0;
    /* the head, --out-upper PATH --quiet -- script, the script's arguments, NULL */
    char **argv = calloc((size_t)c->nargs + ARGV_HEAD + 6, sizeof *argv);
    char **owned = calloc((size_t)c->nargs + 1, sizeof *owned);
    int rc = 1;
    if (!argv || !owned) {
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        goto out;
    }
    n = capture_argv_head(c, c->trace, argv);
    argv[n++] = "--out-upper";
    argv[n++] = c->upper;
    if (quiet)
        argv[n++] = "--quiet";
    argv[n++] = "--";
    argv[n++] = (char *)c->script;
    for (int i = 0; i < c->nargs; i++) {
        if (value) {
            if (!(owned[i] = substitute(c->args[i], c->sweep_name, value))) {
                fprintf(stderr, "oomlab: predict: out of host memory\n");
                goto out;
            }
            argv[n++] = owned[i];
        } else {
            argv[n++] = c->args[i];
        }
    }
    argv[n] = NULL;
    char pythonpath[PATH_MAX + 16];
    snprintf(pythonpath, sizeof pythonpath, "%s/scripts", c->root);
    int sig = 0;
    int st = run_child(argv, pythonpath, value ? c->sweep_name : NULL, value, NULL, &sig);
    rc = capture_status(c, st, sig);
out:
    for (int i = 0; owned && i < c->nargs; i++)
        free(owned[i]);
    free(owned);
    free(argv);
    return rc;
}

/* The capture's GPU table (--list-gpus --json): --budget must be below the GPU's memory, checked before a capture
 * spends its minutes. 0 or the exit status with its line printed. */
static int check_gpu(predict_cli *c)
{
    char pythonpath[PATH_MAX + 16], out[PATH_MAX + 16];
    snprintf(pythonpath, sizeof pythonpath, "%s/scripts", c->root);
    snprintf(out, sizeof out, "%s/gpus.json", c->tmpdir);
    char *argv[] = {c->python, "-m", "oomlab_capture", "--list-gpus", "--json", NULL};
    int sig = 0, st = run_child(argv, pythonpath, NULL, NULL, out, &sig);
    char *text = st == 0 ? fileio_read_all(out, NULL) : NULL;
    unlink(out);
    cJSON *gpus = text ? cJSON_Parse(text) : NULL;
    free(text);
    int rc = 0;
    char cut[ECHO_BUF];
    if (!cJSON_IsArray(gpus)) {
        fprintf(stderr, "oomlab: predict: '%s -m oomlab_capture --list-gpus --json' %s\n", echo_str(c->python, cut),
                st == 0 ? "printed no JSON list" : "failed (its output is above)");
        cJSON_Delete(gpus);
        return st == 127 ? 2 : 1;
    }
    const cJSON *g, *hit = NULL;
    cJSON_ArrayForEach(g, gpus)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "name");
        if (!cJSON_IsString(name))
            continue;
        if (strcasecmp(name->valuestring, c->gpu) == 0)
            hit = g;
    }
    const cJSON *total = hit ? cJSON_GetObjectItemCaseSensitive(hit, "total_memory") : NULL;
    /* a name not in the table may be an alias (H100, A100): the capture resolves it or refuses it in one line */
    if (hit && c->budget && cJSON_IsNumber(total) && (double)c->budget >= total->valuedouble)
        rc = bad("--budget: %zu bytes is not below the %s's memory, %.0f bytes (PyTorch's memory fraction is at "
                 "most 1)",
                 c->budget, c->gpu, total->valuedouble);
    cJSON_Delete(gpus);
    return rc;
}

/* Load one trace and analyse it. 0 or the exit status with its line printed. */
static int analyse_one(predict_cli *c, const char *path, const predict_options *po, predict_result *res)
{
    trace_file t;
    char err[1024];
    oom_status st = trace_load(path, &t, err, sizeof err);
    if (st == OOM_OK)
        st = predict_run(&t, c->script, po, res, err, sizeof err);
    else
        memset(res, 0, sizeof *res);
    trace_free(&t);
    if (st != OOM_OK) {
        predict_result_free(res);
        return bad("%s", err);
    }
    return 0;
}

/* Analyse c->trace, and the upper trace into res->upper where the capture wrote one (a range). 0 or the exit
 * status with its line printed. */
static int analyse(predict_cli *c, const predict_options *po, predict_result *res)
{
    int rc = analyse_one(c, c->trace, po, res);
    if (rc || access(c->upper, F_OK) != 0)
        return rc;
    predict_result *up = calloc(1, sizeof *up);
    if (!up) {
        predict_result_free(res);
        return bad("out of host memory");
    }
    if ((rc = analyse_one(c, c->upper, po, up)) != 0) {
        free(up);
        predict_result_free(res);
        return rc;
    }
    res->upper = up;
    return 0;
}

/* --trace OUT.json's upper companion: OUT.upper.json (OUT.upper after a name without ".json"). */
static void upper_name(const char *out, char *buf, size_t cap)
{
    size_t n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".json") == 0)
        snprintf(buf, cap, "%.*s.upper.json", (int)(n - 5), out);
    else
        snprintf(buf, cap, "%s.upper", out);
}

/* --sweep's probe: one capture at value, its fit. */
static int sweep_probe(int64_t value, void *ctx, predict_probe *out)
{
    predict_cli *c = ctx;
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)value);
    int rc = capture(c, v, true);
    if (rc)
        return rc;
    predict_options po = {.budget = c->budget, .alloc_conf = c->alloc_conf};
    predict_result res;
    if ((rc = analyse(c, &po, &res)) != 0)
        return rc;
    /* with a range, the sweep goes by its upper end: what fits there fits whatever the bounded allocations are */
    const predict_result *r = res.upper ? res.upper : &res;
    out->fits = r->fits;
    out->peak_allocated = r->peak_allocated;
    out->peak_reserved = r->peak_reserved;
    predict_result_free(&res);
    unlink(c->trace);
    unlink(c->upper);
    FILE *f = c->json ? stderr : stdout;
    fprintf(f, "  %s=%lld: peak allocated %zu, peak reserved %zu%s, fits: %s\n", c->sweep_name, (long long)value,
            out->peak_allocated, out->peak_reserved, r != &res ? " (the range's upper end)" : "",
            out->fits ? "yes" : "no");
    fflush(f);
    return 0;
}

static int do_sweep(predict_cli *c)
{
    bool in_args = false;
    char key[72];
    snprintf(key, sizeof key, "{%s}", c->sweep_name);
    for (int i = 0; i < c->nargs; i++)
        in_args = in_args || strstr(c->args[i], key);
    FILE *f = c->json ? stderr : stdout;
    fprintf(f, "sweep: %s from %lld to %lld on the %s%s, by bisection over fresh captures; each value replaces %s "
               "in ARGS%s and is in the environment as $%s\n",
            c->sweep_name, (long long)c->lo, (long long)c->hi, c->gpu, c->budget ? " under --budget" : "", key,
            in_args ? "" : " (there is none)", c->sweep_name);
    predict_sweep sw;
    int rc = predict_sweep_run(c->lo, c->hi, sweep_probe, c, &sw);
    if (rc)
        return rc;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schema", "oomlab.predict.sweep/1");
        cJSON_AddStringToObject(o, "script", c->script);
        cJSON_AddStringToObject(o, "gpu", c->gpu);
        if (c->budget)
            cJSON_AddNumberToObject(o, "budget", (double)c->budget);
        else
            cJSON_AddNullToObject(o, "budget");
        cJSON_AddStringToObject(o, "name", c->sweep_name);
        cJSON_AddNumberToObject(o, "lo", (double)c->lo);
        cJSON_AddNumberToObject(o, "hi", (double)c->hi);
        cJSON *pr = cJSON_AddArrayToObject(o, "probes");
        for (size_t i = 0; i < sw.nprobes; i++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "value", (double)sw.probes[i].value);
            cJSON_AddNumberToObject(p, "peak_allocated", (double)sw.probes[i].peak_allocated);
            cJSON_AddNumberToObject(p, "peak_reserved", (double)sw.probes[i].peak_reserved);
            cJSON_AddBoolToObject(p, "fits", sw.probes[i].fits);
            cJSON_AddItemToArray(pr, p);
        }
        if (sw.found >= sw.lo)
            cJSON_AddNumberToObject(o, "largest_fit", (double)sw.found);
        else
            cJSON_AddNullToObject(o, "largest_fit");
        cJSON_AddBoolToObject(o, "monotonic", sw.monotonic);
        cli_print_json(o);
        return 0;
    }
    if (sw.found >= sw.lo)
        printf("largest %s that fits: %lld (%zu captures)\n", c->sweep_name, (long long)sw.found, sw.nprobes);
    else
        printf("largest %s that fits: none: %lld already does not fit\n", c->sweep_name, (long long)sw.lo);
    if (!sw.monotonic) {
        const predict_probe *lo = NULL, *hi = NULL;
        for (size_t i = 0; i < sw.nprobes; i++) {
            lo = sw.probes[i].value == sw.nonmono_lo ? &sw.probes[i] : lo;
            hi = sw.probes[i].value == sw.nonmono_hi ? &sw.probes[i] : hi;
        }
        if (hi->fits && !lo->fits)
            printf("not monotonic: %s=%lld fits and %s=%lld does not", c->sweep_name, (long long)hi->value,
                   c->sweep_name, (long long)lo->value);
        else
            printf("not monotonic: %s=%lld has a higher peak reserved (%zu bytes) than %s=%lld (%zu)", c->sweep_name,
                   (long long)lo->value, lo->peak_reserved, c->sweep_name, (long long)hi->value, hi->peak_reserved);
        printf("; the bisection assumes that what fits at a value fits below it\n");
    }
    return 0;
}

/* "ranks 0-3" / "rank 2" / "ranks 0, 2, 5" of the group whose first rank is first (group[k] == first). */
static void ranks_text(const int *group, int n, int first, char *out, size_t cap)
{
    int count = 0, last = -1;
    bool run = true;
    for (int k = 0; k < n; k++)
        if (group[k] == first) {
            run = run && (last < 0 || k == last + 1);
            last = k;
            count++;
        }
    if (count == 1) {
        snprintf(out, cap, "rank %d", first);
        return;
    }
    if (run) {
        snprintf(out, cap, "ranks %d-%d", first, last);
        return;
    }
    size_t len = (size_t)snprintf(out, cap, "ranks ");
    for (int k = 0; k < n && len < cap; k++)
        if (group[k] == first)
            len += (size_t)snprintf(out + len, cap - len, "%s%d", k == first ? "" : ", ", k);
}

/* --nproc: every rank captured, the distinct traces analysed, a report per group of identical ranks and a line per
 * rank (or the JSON of all). */
static int do_nproc(predict_cli *c)
{
    int rc = capture_ranks(c);
    if (rc)
        return rc;
    int n = c->nproc;
    trace_file *t = calloc((size_t)n, sizeof *t);
    predict_result *res = calloc((size_t)n, sizeof *res);
    int *group = calloc((size_t)n, sizeof *group); /* the first rank with the same trace */
    if (!t || !res || !group) {
        free(t);
        free(res);
        free(group);
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        return 1;
    }
    char err[1024], path[PATH_MAX + 32];
    int loaded = 0;
    for (; loaded < n && !rc; loaded++) {
        rank_trace_path(c, loaded, path, sizeof path);
        if (trace_load(path, &t[loaded], err, sizeof err) != OOM_OK)
            rc = bad("rank %d: %s", loaded, err);
    }
    const cJSON *dist = rc ? NULL : cJSON_GetObjectItemCaseSensitive(t[0].capture, "distributed");
    bool initialised = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(dist, "initialised"));
    int nranks = initialised ? n : 1; /* never initialised: one process, rank 0's capture */
    size_t nccl = initialised ? devcomm_model_bytes(n) : 0;
    int ngroups = 0;
    for (int k = 0; k < nranks && !rc; k++) {
        group[k] = k;
        for (int j = 0; j < k; j++)
            if (group[j] == j && predict_traces_same(&t[j], &t[k])) {
                group[k] = j;
                break;
            }
        if (group[k] != k)
            continue;
        ngroups++;
        predict_options po = {.budget = c->budget, .alloc_conf = c->alloc_conf, .advise = true, .external = nccl};
        if (predict_run(&t[k], c->script, &po, &res[k], err, sizeof err) != OOM_OK)
            rc = bad("rank %d: %s", k, err);
    }
    char cut[ECHO_BUF], who[256];
    if (!rc && c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schema", "oomlab.predict.nproc/2");
        cJSON_AddStringToObject(o, "script", c->script);
        cJSON_AddNumberToObject(o, "nproc", n);
        cJSON_AddBoolToObject(o, "distributed", initialised);
        cJSON_AddNumberToObject(o, "nccl_bytes_per_rank", (double)nccl);
        cJSON_AddNumberToObject(o, "distinct_traces", ngroups);
        cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
        for (int k = 0; k < nranks; k++) {
            cJSON *r = predict_json(&res[group[k]], c->script);
            cJSON_AddNumberToObject(r, "rank", k);
            cJSON_AddNumberToObject(r, "same_trace_as", group[k]);
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(t[k].capture, "distributed");
            cJSON_AddItemToObject(r, "distributed", d ? cJSON_Duplicate(d, true) : cJSON_CreateNull());
            cJSON_AddItemToArray(ranks, r);
        }
        cli_print_json(o);
    } else if (!rc) {
        if (!initialised) {
            printf("nproc: %s never called torch.distributed.init_process_group: predicted as one process (rank 0's "
                   "capture; no NCCL buffers charged; each of the %d processes would run it alone)\n",
                   echo_str(c->script, cut), n);
        } else {
            printf("nproc: %d rank%s, each captured as its own process (rank K of %d: RANK, LOCAL_RANK, WORLD_SIZE, "
                   "MASTER_ADDR set as torchrun sets them; init_process_group made a fake process group on the CPU "
                   "whose collectives complete at once)\n",
                   n, n == 1 ? "" : "s", n);
            if (ngroups == 1)
                printf("nproc: the %d ranks recorded the same %zu allocations and frees: one report for all (rank 0's, "
                       "with its op labels)\n",
                       n, res[0].events);
            else
                printf("nproc: the ranks recorded %d different traces: one report for each\n", ngroups);
            if (nccl)
                printf("nccl: NCCL's own buffers, %zu bytes (%.0f MiB) per rank, charged to each rank's GPU outside "
                       "the allocator: NCCL 2.28.9 measured on 2 x H200 (harness/device/devcomm.h; other GPUs, NCCL "
                       "versions and rank counts not measured)\n",
                       nccl, (double)nccl / 1048576.0);
            else
                printf("nccl: none charged: a world of one rank (harness/device/devcomm.h charges NCCL's buffers from "
                       "2 ranks on)\n");
        }
        for (int k = 0; k < nranks; k++) {
            if (group[k] != k)
                continue;
            putchar('\n');
            if (initialised) {
                ranks_text(group, nranks, k, who, sizeof who);
                const cJSON *d = cJSON_GetObjectItemCaseSensitive(t[k].capture, "distributed");
                const cJSON *held = cJSON_GetObjectItemCaseSensitive(d, "stashed_bytes");
                printf("%s:\n", who);
                if (cJSON_IsNumber(held) && held->valuedouble > 0)
                    printf("held: %.0f bytes all-reduced before DDP's bucket rebuild kept until "
                           "destroy_process_group, as ProcessGroupNCCL's Work stashes them "
                           "(scripts/oomlab_capture/distributed.py)\n",
                           held->valuedouble);
            }
            predict_print(&res[k], stdout);
        }
        if (initialised) {
            printf("\nper rank (NCCL's buffers charged):\n");
            char a[32], b[32];
            for (int k = 0; k < n; k++) {
                const predict_result *r = &res[group[k]];
                printf("  rank %d: peak allocated %s (%zu bytes), peak reserved %s (%zu bytes), fits: %s\n", k,
                       memstats_format_size(r->peak_allocated, a, sizeof a), r->peak_allocated,
                       memstats_format_size(r->peak_reserved, b, sizeof b), r->peak_reserved,
                       r->fits ? "yes" : "no (out of memory)");
            }
        }
    }
    for (int k = 0; k < n; k++) {
        if (k < nranks && group[k] == k)
            predict_result_free(&res[k]);
        if (k < loaded)
            trace_free(&t[k]);
        rank_trace_path(c, k, path, sizeof path);
        unlink(path);
    }
    free(t);
    free(res);
    free(group);
    return rc;
}

/* NAME=LO..HI: NAME an identifier, 1 <= LO <= HI. */
static bool parse_sweep(predict_cli *c, const char *s)
{
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || (size_t)(eq - s) >= sizeof c->sweep_name)
        return false;
    if (!isalpha((unsigned char)s[0]) && s[0] != '_')
        return false;
    for (const char *p = s; p < eq; p++)
        if (!isalnum((unsigned char)*p) && *p != '_')
            return false;
    snprintf(c->sweep_name, sizeof c->sweep_name, "%.*s", (int)(eq - s), s);
    char *end = NULL;
    errno = 0;
    long long lo = strtoll(eq + 1, &end, 10);
    if (!isdigit((unsigned char)eq[1]) || !end || strncmp(end, "..", 2) != 0 || errno)
        return false;
    const char *h = end + 2;
    long long hi = strtoll(h, &end, 10);
    if (!isdigit((unsigned char)h[0]) || !end || *end || errno || lo < 1 || hi < lo || hi > 1000000000LL)
        return false;
    c->lo = lo;
    c->hi = hi;
    return true;
}

int cli_predict(int argc, char **argv)
{
    predict_cli c = {.gpu = DEFAULT_GPU};
    char cut[ECHO_BUF];
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        bool takes = strcmp(a, "--gpu") == 0 || strcmp(a, "--budget") == 0 || strcmp(a, "--alloc-conf") == 0 ||
                     strcmp(a, "--trace") == 0 || strcmp(a, "--plot") == 0 || strcmp(a, "--python") == 0 ||
                     strcmp(a, "--sweep") == 0 || strcmp(a, "--nproc") == 0;
        if (takes && i + 1 >= argc)
            return bad("%s needs a value", a);
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "--json") == 0) {
            c.json = true;
        } else if (strcmp(a, "--gpu") == 0) {
            c.gpu = argv[++i];
            if (!c.gpu[0] || c.gpu[0] == '-')
                return bad("--gpu: '%s' is not a GPU name (oomlab help predict lists them)", echo_str(c.gpu, cut));
        } else if (strcmp(a, "--budget") == 0) {
            if (units_parse_size(argv[++i], &c.budget) != OOM_OK || c.budget == 0)
                return bad("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, "
                           "TB)",
                           echo_str(argv[i], cut));
        } else if (strcmp(a, "--alloc-conf") == 0) {
            c.alloc_conf = argv[++i];
        } else if (strcmp(a, "--trace") == 0) {
            c.trace_out = argv[++i];
            if (!c.trace_out[0])
                return bad("--trace needs a file name");
        } else if (strcmp(a, "--plot") == 0) {
            c.plot = argv[++i];
            if (!c.plot[0])
                return bad("--plot needs a file name");
        } else if (strcmp(a, "--nproc") == 0) {
            const char *v = argv[++i];
            long n = 0;
            bool digits = v[0] != 0 && strlen(v) <= 4;
            for (const char *p = v; *p && digits; p++)
                digits = isdigit((unsigned char)*p);
            if (digits)
                n = strtol(v, NULL, 10);
            if (!digits || n < 1 || n > PREDICT_NPROC_MAX)
                return bad("--nproc: '%s' is not a number of ranks from 1 to %d", echo_str(v, cut), PREDICT_NPROC_MAX);
            c.nproc = (int)n;
        } else if (strcmp(a, "--python") == 0) {
            c.python_opt = argv[++i];
        } else if (strcmp(a, "--sweep") == 0) {
            c.sweep = argv[++i];
            if (!parse_sweep(&c, c.sweep))
                return bad("--sweep: '%s' is not NAME=LO..HI (NAME a Python identifier, 1 <= LO <= HI)",
                           echo_str(c.sweep, cut));
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option '%s' (options come before SCRIPT; the words after it are the script's)",
                       echo_str(a, cut));
        } else {
            break;
        }
    }
    if (i >= argc)
        return bad("missing SCRIPT (a PyTorch script to run on the CPU: oomlab predict [OPTIONS] SCRIPT [ARGS...])");
    c.script = argv[i];
    c.args = argv + i + 1;
    c.nargs = argc - i - 1;
    if (c.sweep && (c.trace_out || c.plot))
        return bad("--sweep runs many captures: not with --trace or --plot");
    if (c.nproc && (c.sweep || c.trace_out || c.plot))
        return bad("--nproc runs a capture per rank: not with --sweep, --trace or --plot (not supported yet)");
    if (access(c.script, R_OK) != 0)
        return bad("SCRIPT '%s': %s", echo_str(c.script, cut), strerror(errno));
    if (is_dir(c.script))
        return bad("SCRIPT '%s' is a folder, not a Python script", echo_str(c.script, cut));
    if (c.alloc_conf) { /* checked before the capture: its minutes are not spent on a typo */
        alloc_conf ac;
        char perr[ALLOC_CONF_ERR_MAX];
        alloc_conf_default(&ac);
        if (alloc_conf_parse(&ac, c.alloc_conf, perr, sizeof perr) != OOM_OK)
            return bad("--alloc-conf: %s", perr);
    }
    if (!selfpath_find_up(CHECKOUT_MARK, c.root, sizeof c.root))
        return bad("%s is not in this binary's checkout (oomlab predict runs from a build of the repository)",
                   CHECKOUT_MARK);
    int rc = find_python(&c);
    if (rc)
        return rc;
    const char *tmp = getenv("TMPDIR");
    snprintf(c.tmpdir, sizeof c.tmpdir, "%s/oomlab-predict-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(c.tmpdir)) {
        fprintf(stderr, "oomlab: predict: cannot make a temporary folder in %s: %s\n", tmp && tmp[0] ? tmp : "/tmp",
                strerror(errno));
        return 1;
    }
    snprintf(c.trace, sizeof c.trace, "%s/trace.json", c.tmpdir);
    snprintf(c.upper, sizeof c.upper, "%s/trace.upper.json", c.tmpdir);
    if ((rc = check_gpu(&c)) != 0)
        goto out;
    if (c.sweep) {
        rc = do_sweep(&c);
        goto out;
    }
    if (c.nproc) {
        rc = do_nproc(&c);
        goto out;
    }
    if ((rc = capture(&c, NULL, c.json)) != 0)
        goto out;
    predict_options po = {.budget = c.budget, .alloc_conf = c.alloc_conf, .advise = true, .series = c.plot != NULL};
    predict_result res;
    if ((rc = analyse(&c, &po, &res)) != 0)
        goto out;
    char err[1024];
    if (c.plot && advise_plot(&res.advise, c.plot, err, sizeof err) != OOM_OK) {
        rc = bad("--plot: %s", err);
    } else if (c.trace_out) {
        const char *from[2] = {c.trace, res.upper ? c.upper : NULL};
        char to_upper[PATH_MAX + 16];
        upper_name(c.trace_out, to_upper, sizeof to_upper);
        const char *to[2] = {c.trace_out, to_upper};
        for (int k = 0; k < 2 && rc == 0 && from[k]; k++) {
            size_t len = 0;
            char *text = fileio_read_all(from[k], &len);
            oom_error_clear();
            if (!text || fileio_write_atomic(to[k], text, len) != OOM_OK)
                rc = bad("--trace: %s", oom_error_detail());
            free(text);
        }
    }
    if (rc == 0) {
        if (c.json) {
            cli_print_json(predict_json(&res, c.script));
        } else {
            predict_print(&res, stdout);
            if (c.trace_out) {
                printf("trace: %s (PyTorch's snapshot format: oomlab replay, oomlab advise, memory_viz)\n",
                       c.trace_out);
                if (res.upper) {
                    char to_upper[PATH_MAX + 16];
                    upper_name(c.trace_out, to_upper, sizeof to_upper);
                    printf("upper trace: %s (the range's upper end)\n", to_upper);
                }
            }
            if (c.plot)
                printf("plot: %s\n", c.plot);
        }
    }
    predict_result_free(&res);
out:
    unlink(c.trace);
    unlink(c.upper);
    rmdir(c.tmpdir);
    return rc;
}
