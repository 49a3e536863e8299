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
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"
#include "core/child.h"
#include "core/echo.h"
#include "core/fileio.h"
#include "core/selfpath.h"
#include "core/units.h"
#include "alloc/allocconf.h"
#include "alloc/cachealloc.h"
#include "alloc/memstats.h"
#include "analysis/predict.h"
#include "device/devcomm.h"

/* the checkout: where scripts/ has predict_venv.sh (and the capture package, scripts/oomlab_capture) */
#define CHECKOUT_MARK "scripts/predict_venv.sh"
#define DEFAULT_GPU "H100-80GB"
#define PREDICT_NPROC_MAX 1024 /* --nproc's largest rank count */
/* --timeout's default, seconds per capture: the zoo's captures take 0.5 to 3 minutes on two cores, a first
 * extension build 2 more; an hour stops an endless loop without cutting off a large real script */
#define PREDICT_TIMEOUT_DEFAULT 3600
#define PREDICT_TIMEOUT_MAX 604800 /* a week */

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
    const char *conf_source; /* where alloc_conf came from (alloc_conf_pick) */
    size_t budget;
    double timeout;          /* --timeout: seconds each capture may run; 0: no limit */
    bool json;
    int nproc;             /* --nproc N: ranks of a torch.distributed job; 0: one process */
    int jobs;              /* --jobs J: --nproc's captures at once; 0: as many as CPUs */
    const char *script;
    char **args;
    int nargs;
    char root[PATH_MAX];   /* the checkout: scripts/oomlab_capture is under it */
    char python[PATH_MAX + 32]; /* the Python that runs the capture */
    char tmpdir[PATH_MAX];
    char trace[PATH_MAX + 16];
    char upper[PATH_MAX + 24]; /* the capture's upper trace (--out-upper), written only where it met a range */
    char trace2[PATH_MAX + 24], upper2[PATH_MAX + 32]; /* the other choices' capture's traces */
    bool other;            /* the capture being run takes the choices made by timing the other way */
    char status[PATH_MAX + 24]; /* the capture's status (--status): how it ended */
    char rank_trace[PATH_MAX + 32], rank_status[PATH_MAX + 32]; /* --nproc: the rank being started */
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

/* What a capture child gets before exec (child_setup): PYTHONPATH = pythonpath, then what it held ("a:b");
 * env_name=env_value when env_name; TMPDIR = tmpdir (what the script and torch leave in $TMPDIR goes with predict's
 * own folder); the allocator-settings variables unset (predict read them: torch must never abort on one); stdin
 * from /dev/null (the script has no terminal: it leads a session of its own); stdout to out_path (created)
 * when given, else to our stderr. Exits 127 when it cannot. */
typedef struct child_env {
    const char *pythonpath, *env_name, *env_value, *out_path, *tmpdir;
} child_env;

static void child_env_setup(void *ctx)
{
    const child_env *e = ctx;
    if (e->pythonpath) {
        const char *old = getenv("PYTHONPATH");
        size_t n = strlen(e->pythonpath) + (old ? strlen(old) : 0) + 2;
        char *pp = malloc(n);
        if (!pp)
            _exit(127);
        snprintf(pp, n, "%s%s%s", e->pythonpath, old && *old ? ":" : "", old && *old ? old : "");
        setenv("PYTHONPATH", pp, 1);
    }
    if (e->env_name)
        setenv(e->env_name, e->env_value, 1);
    if (e->tmpdir)
        setenv("TMPDIR", e->tmpdir, 1);
    static const char *const conf_vars[] = {ALLOC_CONF_ENV_VARS};
    for (size_t i = 0; i < sizeof conf_vars / sizeof conf_vars[0]; i++)
        unsetenv(conf_vars[i]);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        close(null);
    }
    if (e->out_path) {
        int fd = open(e->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            _exit(127);
        dup2(fd, STDOUT_FILENO);
    } else {
        dup2(STDERR_FILENO, STDOUT_FILENO);
    }
}

/* Run argv with e's set-up and a time limit (0: none), as the leader of a session of its own (core/child.h). */
static child run_child(char *const argv[], const child_env *e, double timeout_s)
{
    fflush(stdout);
    fflush(stderr);
    child k;
    child_start(&k, argv, child_env_setup, (void *)e, timeout_s);
    child_wait(&k);
    return k;
}

/* A child stopped because oomlab was (child_stop_signal): the one line, and the exit status 128 + the signal. */
static int stopped_status(const char *what)
{
    char name[32];
    int sig = child_stop_signal();
    fprintf(stderr, "oomlab: predict: stopped by %s: %s and everything it started ended; nothing written\n",
            child_signal_name(sig, name, sizeof name), what);
    return 128 + sig;
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
    char stamp[PATH_MAX + 32];
    snprintf(stamp, sizeof stamp, "%s/build/venv/.oomlab-predict", c->root);
    if (access(c->python, X_OK) == 0 && access(stamp, F_OK) == 0)
        return 0; /* installed whole: the stamp is written last (another predict may be installing it now) */
    char script[PATH_MAX + 32], venv[PATH_MAX + 16];
    snprintf(script, sizeof script, "%s/scripts/predict_venv.sh", c->root);
    snprintf(venv, sizeof venv, "%s/build/venv", c->root);
    fprintf(stderr, "oomlab: predict: first use: installing torch 2.11.0 and what its import needs into %s "
                    "(scripts/predict_venv.sh; --python PATH uses your own environment instead)\n",
            venv);
    double t0 = child_now();
    char *argv[] = {"/bin/bash", script, venv, NULL};
    child_env e = {0};
    child k = run_child(argv, &e, 0);
    if (k.end == CHILD_STOPPED)
        return stopped_status("scripts/predict_venv.sh");
    if (k.end != CHILD_EXITED || k.code != 0) {
        fprintf(stderr, "oomlab: predict: scripts/predict_venv.sh failed (status %d; its output is above)\n", k.code);
        return 1;
    }
    fprintf(stderr, "oomlab: predict: installed %s in %.0f s\n", venv, child_now() - t0);
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

/* How a capture ended, as predict's exit status: 0 the trace is written; else the one line said (by the capture,
 * whose status file names its ending: scripts/oomlab_capture/__main__.py's Status, or here) and 2 (the script or
 * its input), 1 (something outside it killed the capture), 128 + N (oomlab was stopped by signal N). who prefixes
 * predict's own lines ("rank 3: "). */
static int capture_status(const predict_cli *c, const child *k, const char *status_path, const char *who)
{
    char *text = fileio_read_all(status_path, NULL);
    oom_error_clear();
    cJSON *st = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(st, "ended");
    const char *ended = cJSON_IsString(e) ? e->valuestring : NULL;
    bool os_exit = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "os_exit"));
    char cut[ECHO_BUF], name[32];
    int rc;
    if (k->end == CHILD_STOPPED) {
        rc = stopped_status("the capture");
    } else if (k->end == CHILD_TIMED_OUT) {
        fprintf(stderr, "oomlab: predict: %sthe capture ran past --timeout %.0f s: stopped, with everything it "
                        "started; nothing written (a larger --timeout, or --timeout 0 for none)\n",
                who, c->timeout);
        rc = 2;
    } else if (k->end == CHILD_NOT_RUN) {
        fprintf(stderr, "oomlab: predict: %scannot start the capture: %s\n", who, strerror(errno));
        rc = 1;
    } else if (ended) { /* the capture said its line */
        rc = strcmp(ended, "returned") == 0 && k->end == CHILD_EXITED && k->code == 0 ? 0 : 2;
        if (rc == 0 && os_exit)
            fprintf(stderr, "oomlab: predict: %s%s ended with os._exit(0): predicted up to there\n", who,
                    echo_str(c->script, cut));
    } else if (k->end == CHILD_SIGNALED) {
        fprintf(stderr, "oomlab: predict: %sthe capture was killed by %s, not by oomlab (the kernel's OOM killer, or "
                        "a kill from outside); nothing written\n",
                who, child_signal_name(k->sig, name, sizeof name));
        rc = 1;
    } else if (k->code == 127) {
        fprintf(stderr, "oomlab: predict: could not run the capture with '%s' (not a Python with torch 2.11?)\n",
                echo_str(c->python, cut));
        rc = 2;
    } else if (k->code == 2) {
        rc = 2; /* the capture's usage line, said before it could keep a status */
    } else {
        fprintf(stderr, "oomlab: predict: %s%s ended its process with status %d before the capture finished (an exit "
                        "that skips Python's, or a crash in native code); nothing written\n",
                who, echo_str(c->script, cut), k->code);
        rc = 2;
    }
    cJSON_Delete(st);
    return rc;
}

static void rank_trace_path(const predict_cli *c, int rank, char *out, size_t cap)
{
    snprintf(out, cap, "%s/trace.%d.json", c->tmpdir, rank);
}

static void rank_status_path(const predict_cli *c, int rank, char *out, size_t cap)
{
    snprintf(out, cap, "%s/status.%d.json", c->tmpdir, rank);
}

/* The capture's command line for rank (or -1: one process, with the upper trace) with the sweep's value
 * substituted (NULL: none): argv (n_args + ARGV_MAX_EXTRA entries), the substituted strings in owned (nargs), to
 * be freed. false when out of memory. */
#define ARGV_MAX_EXTRA (ARGV_HEAD + 12)
static bool capture_argv(predict_cli *c, int rank, const char *value, char **argv, char **owned)
{
    static char rank_s[16], world_s[16];
    char *trace = c->other ? c->trace2 : c->trace, *status = c->status;
    size_t n;
    if (rank >= 0) {
        rank_trace_path(c, rank, c->rank_trace, sizeof c->rank_trace);
        rank_status_path(c, rank, c->rank_status, sizeof c->rank_status);
        trace = c->rank_trace;
        status = c->rank_status;
    }
    n = capture_argv_head(c, trace, argv);
    argv[n++] = "--status";
    argv[n++] = status;
    if (rank >= 0) {
        snprintf(rank_s, sizeof rank_s, "%d", rank);
        snprintf(world_s, sizeof world_s, "%d", c->nproc);
        argv[n++] = "--rank";
        argv[n++] = rank_s;
        argv[n++] = "--world-size";
        argv[n++] = world_s;
    } else {
        argv[n++] = "--out-upper";
        argv[n++] = c->other ? c->upper2 : c->upper;
    }
    if (c->other) {
        argv[n++] = "--timed-choices";
        argv[n++] = "other";
    }
    if (c->json || value)
        argv[n++] = "--quiet";
    argv[n++] = "--";
    argv[n++] = (char *)c->script;
    for (int i = 0; i < c->nargs; i++) {
        if (value) {
            if (!(owned[i] = substitute(c->args[i], c->sweep_name, value)))
                return false;
            argv[n++] = owned[i];
        } else {
            argv[n++] = c->args[i];
        }
    }
    argv[n] = NULL;
    return true;
}

/* Did rank 0's trace initialise torch.distributed? Then cls[r] is the rank that rank r is alike to (the capture's
 * "rank_class": the first rank with its shard sizes and place in the mesh, distributed.py rank_classes), or r itself
 * for every rank where the trace names none (a capture that does not say: every rank captured). */
static bool rank0_classes(const char *path, int n, int *cls)
{
    for (int r = 0; r < n; r++)
        cls[r] = r;
    trace_file t;
    char err[256];
    if (trace_load(path, &t, err, sizeof err) != OOM_OK)
        return true; /* do_nproc says what is wrong with it */
    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(t.capture, "distributed");
    bool init = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(dist, "initialised"));
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(dist, "rank_class");
    bool valid = cJSON_IsArray(rc) && cJSON_GetArraySize(rc) == n;
    for (int r = 0; valid && r < n; r++) {
        const cJSON *v = cJSON_GetArrayItem(rc, r);
        /* a class names its first rank: cls[r] <= r, and that rank is its own */
        valid = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= r && v->valuedouble == (int)v->valuedouble &&
                cls[(int)v->valuedouble] == (int)v->valuedouble;
        if (valid)
            cls[r] = (int)v->valuedouble;
    }
    if (!valid) {
        if (rc)
            fprintf(stderr, "oomlab: predict: rank 0's trace names no valid rank classes: every rank captured\n");
        for (int r = 0; r < n; r++)
            cls[r] = r;
    }
    trace_free(&t);
    return init;
}

/* Every rank's capture (--nproc): rank 0 alone first, and only when its script initialised torch.distributed the
 * ranks it names as the first of their class (cls, rank0_classes), at most --jobs (else as many as CPUs) at once, each
 * said on stderr as it ends. 0 (*ranks: 1, or N with the captured ones those where cls[r] == r), or the first failing
 * rank's status (the others are stopped). */
static int capture_ranks(predict_cli *c, int *cls, int *ranks)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int width = c->jobs ? c->jobs : ncpu < 1 ? 1 : (int)ncpu;
    if (width > c->nproc)
        width = c->nproc;
    char pythonpath[PATH_MAX + 16];
    snprintf(pythonpath, sizeof pythonpath, "%s/scripts", c->root);
    char **argv = calloc((size_t)c->nargs + ARGV_MAX_EXTRA, sizeof *argv);
    child *kids = calloc((size_t)c->nproc, sizeof *kids);
    if (!argv || !kids) {
        free(argv);
        free(kids);
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        return 1;
    }
    child_env env = {.pythonpath = pythonpath, .tmpdir = c->tmpdir};
    int rc = 0, next = 0, running = 0, done = 0, total = c->nproc, planned = 1;
    double t0 = child_now();
    char who[32], path[PATH_MAX + 32];
    fflush(stdout);
    fflush(stderr);
    while (!rc && (next < total || running > 0)) {
        /* rank 0 alone: whether the others run at all, and which, depends on its trace */
        bool may_start = next == 0 || (done >= 1 && next < total);
        if (may_start && next > 0 && cls[next] != next) {
            next++; /* alike to an earlier rank: predicted as that one */
            continue;
        }
        if (may_start && running < width) {
            capture_argv(c, next, NULL, argv, NULL);
            child_start(&kids[next], argv, child_env_setup, &env, c->timeout);
            if (!kids[next].running) {
                snprintf(who, sizeof who, "rank %d: ", next);
                rank_status_path(c, next, path, sizeof path);
                rc = capture_status(c, &kids[next], path, who);
                break;
            }
            next++;
            running++;
            continue;
        }
        int i = child_wait_any(kids, next);
        if (i < 0)
            break;
        running--;
        done++;
        snprintf(who, sizeof who, "rank %d: ", i);
        rank_status_path(c, i, path, sizeof path);
        if ((rc = capture_status(c, &kids[i], path, who)) != 0)
            break;
        if (i == 0) {
            rank_trace_path(c, 0, path, sizeof path);
            if (!rank0_classes(path, c->nproc, cls))
                total = 1; /* one process: the others would each run it alone */
            planned = 0;
            for (int r = 0; r < total; r++)
                planned += cls[r] == r;
        }
        fprintf(stderr, "oomlab: predict: rank %d captured (%d of %d, %.0f s)\n", i, done, planned, child_now() - t0);
    }
    child_stop_all(kids, next); /* after a failure: the ranks still running */
    *ranks = total;
    free(argv);
    free(kids);
    return rc;
}

/* One capture of the script (with value substituted when sweeping) into c->trace. 0, or the exit status (the
 * capture's line, or ours, printed). */
static int capture(predict_cli *c, const char *value)
{
    char **argv = calloc((size_t)c->nargs + ARGV_MAX_EXTRA, sizeof *argv);
    char **owned = calloc((size_t)c->nargs + 1, sizeof *owned);
    int rc = 1;
    if (!argv || !owned || !capture_argv(c, -1, value, argv, owned)) {
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        goto out;
    }
    char pythonpath[PATH_MAX + 16];
    snprintf(pythonpath, sizeof pythonpath, "%s/scripts", c->root);
    child_env env = {.pythonpath = pythonpath, .env_name = value ? c->sweep_name : NULL, .env_value = value,
                     .tmpdir = c->tmpdir};
    unlink(c->status);
    child k = run_child(argv, &env, c->timeout);
    rc = capture_status(c, &k, c->status, "");
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
    child_env env = {.pythonpath = pythonpath, .out_path = out, .tmpdir = c->tmpdir};
    child k = run_child(argv, &env, c->timeout);
    if (k.end == CHILD_STOPPED) {
        unlink(out);
        return stopped_status("the capture's Python");
    }
    int st = k.end == CHILD_EXITED ? k.code : 1;
    char *text = st == 0 ? fileio_read_all(out, NULL) : NULL;
    unlink(out);
    cJSON *gpus = text ? cJSON_Parse(text) : NULL;
    free(text);
    int rc = 0;
    char cut[ECHO_BUF], why[512];
    if (!cJSON_IsArray(gpus)) {
        fprintf(stderr, "oomlab: predict: '%s -m oomlab_capture --list-gpus --json' %s (is it a Python with torch "
                        "2.11?)\n",
                echo_str(c->python, cut), st == 0 ? "printed no JSON list" : "failed (its output is above)");
        cJSON_Delete(gpus);
        return 2;
    }
    const cJSON *g, *hit = NULL;
    cJSON_ArrayForEach(g, gpus)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "name");
        if (!cJSON_IsString(name))
            continue;
        if (strcasecmp(name->valuestring, c->gpu) == 0)
            hit = g;
        const cJSON *alias;
        cJSON_ArrayForEach(alias, cJSON_GetObjectItemCaseSensitive(g, "aliases"))
        {
            if (cJSON_IsString(alias) && strcasecmp(alias->valuestring, c->gpu) == 0)
                hit = g;
        }
    }
    const cJSON *total = hit ? cJSON_GetObjectItemCaseSensitive(hit, "total_memory") : NULL;
    /* a name in neither the table nor its aliases: the capture refuses it in one line, naming the known ones */
    if (hit && c->budget && cJSON_IsNumber(total) && (double)c->budget >= total->valuedouble)
        rc = bad("--budget: %zu bytes is not below the %s's memory, %.0f bytes (PyTorch's memory fraction is at "
                 "most 1)",
                 c->budget, c->gpu, total->valuedouble);
    else if (hit && cJSON_IsNumber(total) &&
             cachealloc_budget_allows_nothing(c->budget, (size_t)total->valuedouble, "--budget", why, sizeof why))
        rc = bad("%s", why);
    cJSON_Delete(gpus);
    return rc;
}

/* Load one trace and analyse it. 0 or the exit status with its line printed. */
/* Load one trace into t and analyse it. 0 or the exit status with its line printed (res and t freed). */
static int analyse_one(predict_cli *c, const char *path, const predict_options *po, trace_file *t,
                       predict_result *res)
{
    char err[1024];
    oom_status st = trace_load(path, t, err, sizeof err);
    if (st == OOM_OK)
        st = predict_run(t, c->script, po, res, err, sizeof err);
    else
        memset(res, 0, sizeof *res);
    if (st != OOM_OK) {
        trace_free(t);
        predict_result_free(res);
        return bad("%s", err);
    }
    return 0;
}

/* Analyse c->trace (c->trace2 for the other choices' capture), and the upper trace into res->upper where the
 * capture wrote one (a range), with the orders of the frees the upper trace makes later. 0 or the exit status with
 * its line printed. */
static int analyse(predict_cli *c, const predict_options *po, predict_result *res)
{
    const char *trace = c->other ? c->trace2 : c->trace, *upper = c->other ? c->upper2 : c->upper;
    trace_file lo, hi;
    int rc = analyse_one(c, trace, po, &lo, res);
    if (rc || access(upper, F_OK) != 0) {
        if (!rc)
            trace_free(&lo);
        return rc;
    }
    predict_result *up = calloc(1, sizeof *up);
    if (!up) {
        trace_free(&lo);
        predict_result_free(res);
        return bad("out of host memory");
    }
    if ((rc = analyse_one(c, upper, po, &hi, up)) != 0) {
        trace_free(&lo);
        free(up);
        predict_result_free(res);
        return rc;
    }
    res->upper = up;
    char err[1024];
    oom_status st = predict_free_orders(&lo, &hi, c->script, po, res, err, sizeof err);
    trace_free(&lo);
    trace_free(&hi);
    if (st != OOM_OK) {
        predict_result_free(res);
        return bad("%s", err);
    }
    return 0;
}

/* The capture (value substituted when sweeping) analysed into res; where it made choices the GPU makes by timing
 * (pad_mm, max-autotune), a second capture taking each the other way (--timed-choices other) into res->other,
 * said on stderr. 0 or the exit status with its line printed (res freed). */
static int predict_once(predict_cli *c, const char *value, const predict_options *po, predict_result *res)
{
    c->other = false;
    int rc = capture(c, value);
    if (rc || (rc = analyse(c, po, res)) != 0)
        return rc;
    int n = predict_timed_choices(res);
    if (n == 0)
        return 0;
    predict_result *o = calloc(1, sizeof *o);
    if (!o) {
        predict_result_free(res);
        return bad("out of host memory");
    }
    if (!value)
        fprintf(stderr, "oomlab: predict: torch.compile made %d choice%s by timing on the GPU: capturing the script "
                        "again with them taken the other way\n",
                n, n == 1 ? "" : "s");
    c->other = true;
    rc = capture(c, value);
    if (rc == 0)
        rc = analyse(c, po, o);
    c->other = false;
    if (rc) {
        free(o);
        predict_result_free(res);
        return rc;
    }
    res->other = o;
    return 0;
}

/* --trace OUT.json's companions: OUT.SUFFIX.json (OUT.SUFFIX after a name without ".json"), suffix "upper" (the
 * upper trace), "other" and "other.upper" (the other choices' capture's). */
static void companion_name(const char *out, const char *suffix, char *buf, size_t cap)
{
    size_t n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".json") == 0)
        snprintf(buf, cap, "%.*s.%s.json", (int)(n - 5), out, suffix);
    else
        snprintf(buf, cap, "%s.%s", out, suffix);
}

/* --sweep's probe: one capture at value, its fit. */
static int sweep_probe(int64_t value, void *ctx, predict_probe *out)
{
    predict_cli *c = ctx;
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)value);
    predict_options po = {.budget = c->budget, .alloc_conf = c->alloc_conf};
    predict_result res;
    int rc = predict_once(c, v, &po, &res);
    if (rc) {
        if (rc != 128 + child_stop_signal())
            fprintf(stderr, "oomlab: predict: --sweep stopped at %s=%s: that capture failed (above)\n", c->sweep_name,
                    v);
        return rc;
    }
    /* with a range, the sweep goes by its highest end: what fits there fits whatever the bounded allocations are,
     * and both ways of the choices made by timing */
    const predict_result *end[4] = {&res, res.upper, res.other, res.other ? res.other->upper : NULL};
    *out = (predict_probe){.value = out->value, .fits = true};
    for (int k = 0; k < 4; k++) {
        if (!end[k])
            continue;
        out->fits = out->fits && end[k]->fits;
        out->peak_allocated = end[k]->peak_allocated > out->peak_allocated ? end[k]->peak_allocated
                                                                           : out->peak_allocated;
        out->peak_reserved = end[k]->peak_reserved > out->peak_reserved ? end[k]->peak_reserved : out->peak_reserved;
    }
    const char *which = res.other ? " (the range's highest end)" : res.upper ? " (the range's upper end)" : "";
    predict_result_free(&res);
    unlink(c->trace);
    unlink(c->upper);
    unlink(c->trace2);
    unlink(c->upper2);
    FILE *f = c->json ? stderr : stdout;
    fprintf(f, "  %s=%lld: peak allocated %zu, peak reserved %zu%s, fits: %s\n", c->sweep_name, (long long)value,
            out->peak_allocated, out->peak_reserved, which,
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

/* "rank 2" / "ranks 0-3" / "ranks 1-6, 8-1023": the ranks k where of[k] == first, as runs. */
static void ranks_text(const int *of, int n, int first, char *out, size_t cap)
{
    int count = 0;
    for (int k = 0; k < n; k++)
        count += of[k] == first;
    size_t len = (size_t)snprintf(out, cap, count == 1 ? "rank " : "ranks ");
    bool any = false;
    for (int k = 0; k < n && len < cap; k++) {
        if (of[k] != first)
            continue;
        int last = k;
        while (last + 1 < n && of[last + 1] == first)
            last++;
        len += (size_t)snprintf(out + len, cap - len, last > k ? "%s%d-%d" : "%s%d", any ? ", " : "", k, last);
        any = true;
        k = last;
    }
}

#define PER_RANK_LINES 64 /* up to this many ranks a line each in the text report; beyond, a line per run of ranks */

/* --nproc: the ranks captured (one of each class, capture_ranks), the distinct traces analysed, a report per group of
 * ranks with the same trace and a line per rank (or the JSON of all). */
static int do_nproc(predict_cli *c)
{
    int n = c->nproc;
    int *cls = calloc((size_t)n, sizeof *cls); /* the rank each rank is predicted as (itself where captured) */
    if (!cls) {
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        return 1;
    }
    int nranks = 0;
    int rc = capture_ranks(c, cls, &nranks);
    if (rc) {
        free(cls);
        return rc;
    }
    trace_file *t = calloc((size_t)n, sizeof *t);
    predict_result *res = calloc((size_t)n, sizeof *res);
    int *group = calloc((size_t)n, sizeof *group); /* the first captured rank with the same trace */
    bool *loaded = calloc((size_t)n, sizeof *loaded);
    if (!t || !res || !group || !loaded) {
        free(t);
        free(res);
        free(group);
        free(loaded);
        free(cls);
        fprintf(stderr, "oomlab: predict: out of host memory\n");
        return 1;
    }
    char err[1024], path[PATH_MAX + 32];
    for (int k = 0; k < nranks && !rc; k++) {
        if (cls[k] != k)
            continue;
        rank_trace_path(c, k, path, sizeof path);
        if (trace_load(path, &t[k], err, sizeof err) != OOM_OK)
            rc = bad("rank %d: %s", k, err);
        else
            loaded[k] = true;
    }
    const cJSON *dist = rc ? NULL : cJSON_GetObjectItemCaseSensitive(t[0].capture, "distributed");
    bool initialised = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(dist, "initialised"));
    if (!initialised)
        nranks = 1; /* never initialised: one process, rank 0's capture (the others were not run) */
    size_t nccl = initialised ? devcomm_model_bytes(n) : 0;
    int ngroups = 0, ncaptured = 0;
    for (int k = 0; k < nranks && !rc; k++) {
        if (cls[k] != k) {
            group[k] = group[cls[k]]; /* not captured: its class's first rank's */
            continue;
        }
        ncaptured++;
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
    char cut[ECHO_BUF], who[512];
    if (!rc && c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schema", "oomlab.predict.nproc/7");
        cJSON_AddStringToObject(o, "script", c->script);
        cJSON_AddNumberToObject(o, "nproc", n);
        cJSON_AddBoolToObject(o, "distributed", initialised);
        cJSON_AddNumberToObject(o, "nccl_bytes_per_rank", (double)nccl);
        cJSON_AddNumberToObject(o, "captured_ranks", initialised ? ncaptured : 1);
        cJSON_AddNumberToObject(o, "distinct_traces", ngroups);
        cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
        for (int k = 0; k < nranks; k++) {
            cJSON *r = predict_json(&res[group[k]], c->script);
            cJSON_AddNumberToObject(r, "rank", k);
            cJSON_AddBoolToObject(r, "captured", cls[k] == k);
            cJSON_AddNumberToObject(r, "alike_to", cls[k]);
            cJSON_AddNumberToObject(r, "same_trace_as", group[k]);
            const cJSON *d = cls[k] == k ? cJSON_GetObjectItemCaseSensitive(t[k].capture, "distributed") : NULL;
            cJSON *dc = d ? cJSON_Duplicate(d, true) : cJSON_CreateNull();
            cJSON_DeleteItemFromObjectCaseSensitive(dc, "rank_class"); /* the ranks' alike_to */
            cJSON_AddItemToObject(r, "distributed", dc);
            cJSON_AddItemToArray(ranks, r);
        }
        cli_print_json(o);
    } else if (!rc) {
        if (!initialised) {
            printf("nproc: %s never called torch.distributed.init_process_group: predicted as one process (rank 0's "
                   "capture; no NCCL buffers charged; each of the %d processes would run it alone)\n",
                   echo_str(c->script, cut), n);
        } else {
            if (ncaptured == n)
                printf("nproc: %d rank%s, each captured as its own process", n, n == 1 ? "" : "s");
            else
                printf("nproc: %d ranks, %d captured, each as its own process", n, ncaptured);
            printf(" (rank K of %d: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR set as torchrun sets them; "
                   "init_process_group made a fake process group on the CPU whose collectives complete at once)\n",
                   n);
            if (ncaptured < n)
                for (int k = 1; k < n; k++) {
                    if (cls[k] != k)
                        continue;
                    int alike = 0;
                    for (int j = k + 1; j < n; j++)
                        alike += cls[j] == k;
                    if (!alike)
                        continue;
                    ranks_text(cls, n, k, who, sizeof who);
                    printf("nproc: %s alike in their shard sizes and place in the mesh: rank %d captured for all "
                           "(a script that branches on its rank otherwise is not seen)\n",
                           who, k);
                }
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
                int last = k;
                if (n > PER_RANK_LINES)
                    while (last + 1 < n && group[last + 1] == group[k])
                        last++;
                if (last > k)
                    printf("  ranks %d-%d", k, last);
                else
                    printf("  rank %d", k);
                printf(": peak allocated %s (%zu bytes), peak reserved %s (%zu bytes), fits: %s\n",
                       memstats_format_size(r->peak_allocated, a, sizeof a), r->peak_allocated,
                       memstats_format_size(r->peak_reserved, b, sizeof b), r->peak_reserved,
                       r->fits ? "yes" : "no (out of memory)");
                k = last;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        if (k < nranks && group[k] == k)
            predict_result_free(&res[k]);
        if (loaded[k])
            trace_free(&t[k]);
        rank_trace_path(c, k, path, sizeof path);
        unlink(path);
    }
    free(t);
    free(res);
    free(group);
    free(loaded);
    free(cls);
    return rc;
}

/* --nproc's and --jobs' value: 1 to PREDICT_NPROC_MAX in decimal digits, or 0 when it is not. */
static int parse_count(const char *v)
{
    bool digits = v[0] != 0 && strlen(v) <= 4;
    for (const char *p = v; *p && digits; p++)
        digits = isdigit((unsigned char)*p);
    long n = digits ? strtol(v, NULL, 10) : 0;
    return n >= 1 && n <= PREDICT_NPROC_MAX ? (int)n : 0;
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
    /* the value is also in the environment: never a variable the capture, Python, torch or the loader read */
    static const char *const names[] = {"PATH", "HOME", "TMPDIR"};
    static const char *const prefixes[] = {"PYTHON", "LD_", "OOMLAB_", "PYTORCH_", "TORCH", "CUDA", "CUBLAS",
                                           "NCCL", "OMP_", "MKL_", "HF_", "TRANSFORMERS_"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (strcasecmp(c->sweep_name, names[k]) == 0)
            return false;
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (strncasecmp(c->sweep_name, prefixes[k], strlen(prefixes[k])) == 0)
            return false;
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

/* One output option's path, checked before the capture spends its minutes: nothing there or a regular file
 * (fileio_check_target), in a folder that exists and can be written. 0 or 2 with the line said. */
static int check_output(const char *opt, const char *path)
{
    char cut[ECHO_BUF];
    if (fileio_check_target(path) != OOM_OK)
        return bad("%s: %s", opt, oom_error_detail());
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    if (!is_dir(dir))
        return bad("%s: cannot write '%s': the folder %s does not exist", opt, echo_str(path, cut), dir);
    if (access(dir, W_OK) != 0)
        return bad("%s: cannot write '%s': %s", opt, echo_str(path, cut), strerror(errno));
    return 0;
}

#define TRACE_FILES 4 /* the trace, its upper trace, the other choices' trace and its upper trace */
static const char *const companion[TRACE_FILES] = {NULL, "upper", "other", "other.upper"};

/* --trace (and its companions) and --plot, checked before the capture. */
static int check_outputs(const predict_cli *c)
{
    int rc = 0;
    for (int k = 0; c->trace_out && k < TRACE_FILES; k++) {
        char path[PATH_MAX + 24];
        if (companion[k])
            companion_name(c->trace_out, companion[k], path, sizeof path);
        else
            snprintf(path, sizeof path, "%s", c->trace_out);
        if ((rc = check_output("--trace", path)) != 0)
            return rc;
    }
    if (c->plot && (rc = check_output("--plot", c->plot)) != 0)
        return rc;
    if (c->plot && c->trace_out && strcmp(c->plot, c->trace_out) == 0)
        return bad("--plot and --trace name the same file");
    return 0;
}

/* The traces (the trace, and those of the upper end and the other choices that were made) and the plot, published
 * together or not at all: the traces written to temporary files beside their names, then the plot drawn (gnuplot
 * publishes it), then the traces renamed into place; any failure removes what was made. 0 or 2 with the line
 * said. */
static int publish_outputs(const predict_cli *c, const predict_result *res)
{
    const predict_result *o = res->other;
    const char *from[TRACE_FILES] = {c->trace, res->upper ? c->upper : NULL, o ? c->trace2 : NULL,
                                     o && o->upper ? c->upper2 : NULL};
    char to[TRACE_FILES][PATH_MAX + 24], tmp[TRACE_FILES][PATH_MAX + 48];
    int fd[TRACE_FILES], rc = 0;
    for (int k = 0; k < TRACE_FILES; k++) {
        fd[k] = -1;
        tmp[k][0] = 0;
        if (c->trace_out && companion[k])
            companion_name(c->trace_out, companion[k], to[k], sizeof to[k]);
        else if (c->trace_out)
            snprintf(to[k], sizeof to[k], "%s", c->trace_out);
    }
    for (int k = 0; c->trace_out && k < TRACE_FILES && rc == 0; k++) {
        if (!from[k])
            continue;
        size_t len = 0;
        char *text = fileio_read_all(from[k], &len);
        oom_error_clear();
        if (!text || (fd[k] = fileio_temp_beside(to[k], tmp[k], sizeof tmp[k])) < 0 ||
            write(fd[k], text, len) != (ssize_t)len || fsync(fd[k]) != 0)
            rc = bad("--trace: cannot write %s: %s", tmp[k][0] ? tmp[k] : to[k],
                     oom_error_detail()[0] ? oom_error_detail() : strerror(errno));
        free(text);
    }
    char err[1024];
    bool plotted = false;
    if (rc == 0 && c->plot) {
        if (advise_plot(&res->advise, c->plot, err, sizeof err) != OOM_OK)
            rc = bad("--plot: %s", err);
        else
            plotted = true;
    }
    for (int k = 0; k < TRACE_FILES; k++) {
        if (fd[k] < 0)
            continue;
        if (rc == 0 && fileio_publish(tmp[k], to[k]) != OOM_OK) {
            rc = bad("--trace: %s", oom_error_detail());
            if (plotted)
                unlink(c->plot);
            for (int j = 0; j < k; j++) /* those published before it */
                if (fd[j] >= 0)
                    unlink(to[j]);
        } else if (rc != 0) {
            unlink(tmp[k]);
        }
        close(fd[k]);
    }
    return rc;
}

int cli_predict(int argc, char **argv)
{
    child_catch_stops(); /* from the start: a stop before the first child is still one line and no leftover */
    predict_cli c = {.gpu = DEFAULT_GPU, .timeout = PREDICT_TIMEOUT_DEFAULT};
    char cut[ECHO_BUF];
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        bool takes = strcmp(a, "--gpu") == 0 || strcmp(a, "--budget") == 0 || strcmp(a, "--alloc-conf") == 0 ||
                     strcmp(a, "--trace") == 0 || strcmp(a, "--plot") == 0 || strcmp(a, "--python") == 0 ||
                     strcmp(a, "--sweep") == 0 || strcmp(a, "--nproc") == 0 || strcmp(a, "--timeout") == 0 ||
                     strcmp(a, "--jobs") == 0;
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
            if ((c.nproc = parse_count(v)) == 0)
                return bad("--nproc: '%s' is not a number of ranks from 1 to %d", echo_str(v, cut), PREDICT_NPROC_MAX);
        } else if (strcmp(a, "--jobs") == 0) {
            const char *v = argv[++i];
            if ((c.jobs = parse_count(v)) == 0)
                return bad("--jobs: '%s' is not a number of captures at once from 1 to %d", echo_str(v, cut),
                           PREDICT_NPROC_MAX);
        } else if (strcmp(a, "--timeout") == 0) {
            const char *v = argv[++i];
            bool digits = v[0] != 0 && strlen(v) <= 7;
            for (const char *p = v; *p && digits; p++)
                digits = isdigit((unsigned char)*p);
            long t = digits ? strtol(v, NULL, 10) : -1;
            if (t < 0 || t > PREDICT_TIMEOUT_MAX)
                return bad("--timeout: '%s' is not a number of seconds from 0 (no limit) to %d", echo_str(v, cut),
                           PREDICT_TIMEOUT_MAX);
            c.timeout = (double)t;
        } else if (strcmp(a, "--python") == 0) {
            c.python_opt = argv[++i];
        } else if (strcmp(a, "--sweep") == 0) {
            c.sweep = argv[++i];
            if (!parse_sweep(&c, c.sweep))
                return bad("--sweep: '%s' is not NAME=LO..HI (NAME a Python identifier that is no variable Python, "
                           "torch or oomlab read, such as PYTHONPATH or CUDA_*; 1 <= LO <= HI)",
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
    int rc = 0;
    if (c.sweep && (c.trace_out || c.plot))
        return bad("--sweep runs many captures: not with --trace or --plot");
    if (c.nproc && (c.sweep || c.trace_out || c.plot))
        return bad("--nproc runs a capture per rank: not with --sweep, --trace or --plot (not supported yet)");
    if (c.jobs && !c.nproc)
        return bad("--jobs is how many of --nproc's captures run at once: not without --nproc");
    if (access(c.script, R_OK) != 0)
        return bad("SCRIPT '%s': %s", echo_str(c.script, cut), strerror(errno));
    if (is_dir(c.script))
        return bad("SCRIPT '%s' is a folder, not a Python script", echo_str(c.script, cut));
    /* the settings as run reads them (--alloc-conf, else the variables of ALLOC_CONF_ENV_VARS), checked before the
     * capture (its minutes are not spent on a typo); the capture itself never sees the variables */
    c.alloc_conf = alloc_conf_pick(c.alloc_conf, &c.conf_source);
    if (c.alloc_conf && !c.alloc_conf[0])
        c.alloc_conf = NULL;
    if (c.alloc_conf) {
        alloc_conf ac;
        char perr[ALLOC_CONF_ERR_MAX];
        alloc_conf_default(&ac);
        if (alloc_conf_parse(&ac, c.alloc_conf, perr, sizeof perr) != OOM_OK)
            return bad("%s: %s", c.conf_source, perr);
    }
    if ((rc = check_outputs(&c)) != 0)
        return rc;
    if (!selfpath_find_up(CHECKOUT_MARK, c.root, sizeof c.root))
        return bad("%s is not in this binary's checkout (oomlab predict runs from a build of the repository)",
                   CHECKOUT_MARK);
    if ((rc = find_python(&c)) != 0)
        return rc;
    const char *tmp = getenv("TMPDIR");
    int lockfd = -1; /* held while predict runs: a later predict removes the folder only once it is gone */
    if (fileio_owned_temp_dir(tmp && tmp[0] ? tmp : "/tmp", "oomlab-predict", "predict", c.tmpdir, sizeof c.tmpdir,
                              &lockfd) != OOM_OK) {
        fprintf(stderr, "oomlab: predict: %s\n", oom_error_detail());
        return 1;
    }
    snprintf(c.trace, sizeof c.trace, "%s/trace.json", c.tmpdir);
    snprintf(c.upper, sizeof c.upper, "%s/trace.upper.json", c.tmpdir);
    snprintf(c.trace2, sizeof c.trace2, "%s/trace.other.json", c.tmpdir);
    snprintf(c.upper2, sizeof c.upper2, "%s/trace.other.upper.json", c.tmpdir);
    snprintf(c.status, sizeof c.status, "%s/status.json", c.tmpdir);
    if (c.alloc_conf && strcmp(c.conf_source, "--alloc-conf") != 0)
        fprintf(stderr, "oomlab: predict: allocator settings from %s: %s\n", c.conf_source,
                echo_str(c.alloc_conf, cut));
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
    predict_options po = {.budget = c.budget, .alloc_conf = c.alloc_conf, .advise = true, .series = c.plot != NULL};
    predict_result res;
    if ((rc = predict_once(&c, NULL, &po, &res)) != 0)
        goto out;
    rc = publish_outputs(&c, &res);
    if (rc == 0) {
        if (c.json) {
            cli_print_json(predict_json(&res, c.script));
        } else {
            predict_print(&res, stdout);
            if (c.trace_out) {
                printf("trace: %s (PyTorch's snapshot format: oomlab replay, oomlab advise, memory_viz)\n",
                       c.trace_out);
                const predict_result *o = res.other;
                static const char *const what[TRACE_FILES] = {NULL, "the range's upper end", "the other choices",
                                                              "the other choices' upper end"};
                const bool made[TRACE_FILES] = {true, res.upper != NULL, o != NULL, o && o->upper};
                for (int k = 1; k < TRACE_FILES; k++) {
                    char path[PATH_MAX + 24];
                    companion_name(c.trace_out, companion[k], path, sizeof path);
                    if (made[k])
                        printf("%s trace: %s (%s)\n", companion[k], path, what[k]);
                }
            }
            if (c.plot)
                printf("plot: %s\n", c.plot);
        }
    }
    predict_result_free(&res);
out:
    fileio_remove_tree(c.tmpdir);
    close(lockfd);
    if (child_stop_signal() && rc == 0) /* stopped after the last capture: what was finished is printed */
        rc = 128 + child_stop_signal();
    return rc;
}
