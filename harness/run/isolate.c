/* isolate.c - a variant in a child process, its result back through a pipe (see isolate.h). */
#include "run/isolate.h"

#include "alloc/cachealloc.h"
#include "core/child.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ISOLATE_MAGIC 0x564d4f4fu /* "OOMV" */

const char *isolate_signal_name(int sig)
{
    static char name[32];
    return child_signal_name(sig, name, sizeof name);
}

/* ---- the bytes: written by the child, read by the parent ---------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static bool put(buf *b, const void *src, size_t n)
{
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return false;
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
    return true;
}

/* A layout (cachealloc_layout's): its segments, then each segment's blocks in order. */
static bool put_layout(buf *b, const ca_snap_segment *segs, size_t n)
{
    bool ok = put(b, segs, n * sizeof *segs);
    for (size_t k = 0; ok && k < n; k++)
        ok = put(b, segs[k].blocks, segs[k].nblocks * sizeof *segs[k].blocks);
    return ok;
}

/* The result, each array after it, the layouts, then the run's backend fields. */
static bool encode(buf *b, const variant_result *res, const run_result *run)
{
    uint32_t magic = ISOLATE_MAGIC;
    bool ok = put(b, &magic, sizeof magic) && put(b, res, sizeof *res) &&
              put(b, res->samples, res->nsamples * sizeof *res->samples) &&
              put(b, res->expect, res->nexpect * sizeof *res->expect) &&
              put(b, res->metrics, res->nmetrics * sizeof *res->metrics) &&
              put(b, res->notes, res->nnotes * sizeof *res->notes) &&
              put(b, res->devices, res->ndevices * sizeof *res->devices) &&
              put(b, res->oom_marks, res->noom_marks * sizeof *res->oom_marks);
    for (size_t k = 0; ok && k < res->ndevices; k++)
        ok = put(b, res->devices[k].samples, res->devices[k].nsamples * sizeof *res->devices[k].samples);
    ok = ok && put_layout(b, res->oom_layout, res->oom_nlayout) && put_layout(b, res->fix_layout, res->fix_nlayout);
    return ok && put(b, run->backend, sizeof run->backend) && put(b, run->device, sizeof run->device) &&
           put(b, &run->device_total, sizeof run->device_total) && put(b, &run->cap, sizeof run->cap) &&
           put(b, &run->model_order, sizeof run->model_order) && put(b, &magic, sizeof magic);
}

typedef struct reader {
    const char *p;
    size_t n, at;
} reader;

/* The next count elements of size bytes each, copied into fresh memory (NULL for none); false past the end. */
static bool take(reader *r, size_t count, size_t size, void **out)
{
    *out = NULL;
    if (count == 0)
        return true;
    if (size && count > (r->n - r->at) / size)
        return false;
    *out = malloc(count * size);
    if (!*out)
        return false;
    memcpy(*out, r->p + r->at, count * size);
    r->at += count * size;
    return true;
}

static bool take_into(reader *r, void *dst, size_t n)
{
    if (n > r->n - r->at)
        return false;
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return true;
}

static void free_arrays(variant_result *v)
{
    free(v->samples);
    free(v->expect);
    free(v->metrics);
    free(v->notes);
    for (size_t k = 0; v->devices && k < v->ndevices; k++)
        free(v->devices[k].samples);
    free(v->devices);
    free(v->oom_marks);
    cachealloc_snapshot_free(v->oom_layout, v->oom_nlayout);
    cachealloc_snapshot_free(v->fix_layout, v->fix_nlayout);
}

/* A layout written by put_layout, n segments (the child's count): *segs NULL and n 0 when there are none. The
 * blocks are one array, segment after segment (cachealloc_snapshot_free frees the first segment's). */
static bool take_layout(reader *r, ca_snap_segment **segs, size_t *n)
{
    void *p = NULL;
    if (!take(r, *n, sizeof **segs, &p)) {
        *segs = NULL, *n = 0;
        return false;
    }
    *segs = p;
    if (!p)
        *n = 0;
    size_t nblocks = 0;
    bool ok = true;
    for (size_t k = 0; k < *n; k++) {
        (*segs)[k].blocks = NULL;
        ok = ok && (*segs)[k].nblocks <= SIZE_MAX / sizeof(ca_snap_block) - nblocks;
        nblocks += ok ? (*segs)[k].nblocks : 0;
    }
    void *blocks = NULL;
    ok = ok && take(r, nblocks, sizeof(ca_snap_block), &blocks);
    for (size_t k = 0, at = 0; ok && k < *n; at += (*segs)[k].nblocks, k++)
        (*segs)[k].blocks = (ca_snap_block *)blocks + at;
    if (!ok) { /* the blocks were not read: free the segments alone */
        free(blocks);
        free(*segs);
        *segs = NULL, *n = 0;
    }
    return ok;
}

/* Decode into res and run; false (res untouched) when the bytes are not one whole result. */
static bool decode(const buf *b, variant_result *res, run_result *run)
{
    reader r = {b->p, b->n, 0};
    uint32_t magic = 0;
    variant_result v;
    if (!take_into(&r, &magic, sizeof magic) || magic != ISOLATE_MAGIC || !take_into(&r, &v, sizeof v))
        return false;
    /* the pointers are the child's: replace each with a copy of what follows, NULL until read */
    size_t noom = v.oom_nlayout, nfix = v.fix_nlayout;
    v.oom_layout = v.fix_layout = NULL;
    v.oom_nlayout = v.fix_nlayout = 0;
    void *samples = NULL, *expect = NULL, *metrics = NULL, *notes = NULL, *devices = NULL, *marks = NULL;
    bool ok = take(&r, v.nsamples, sizeof *v.samples, &samples) && take(&r, v.nexpect, sizeof *v.expect, &expect) &&
              take(&r, v.nmetrics, sizeof *v.metrics, &metrics) && take(&r, v.nnotes, sizeof *v.notes, &notes) &&
              take(&r, v.ndevices, sizeof *v.devices, &devices) &&
              take(&r, v.noom_marks, sizeof *v.oom_marks, &marks);
    v.samples = samples;
    v.expect = expect;
    v.metrics = metrics;
    v.notes = notes;
    v.devices = devices;
    v.oom_marks = marks;
    if (!v.devices)
        v.ndevices = 0;
    for (size_t k = 0; k < v.ndevices; k++) /* each device's samples follow, in order, then the layouts */
        v.devices[k].samples = NULL;
    for (size_t k = 0; ok && k < v.ndevices; k++) {
        void *ds = NULL;
        ok = take(&r, v.devices[k].nsamples, sizeof *v.devices[k].samples, &ds);
        v.devices[k].samples = ds;
    }
    if (ok) {
        v.oom_nlayout = noom;
        ok = take_layout(&r, &v.oom_layout, &v.oom_nlayout);
    }
    if (ok) {
        v.fix_nlayout = nfix;
        ok = take_layout(&r, &v.fix_layout, &v.fix_nlayout);
    }
    char backend[sizeof run->backend], devname[sizeof run->device];
    size_t total = 0, cap = 0;
    bool model_order = false;
    ok = ok && take_into(&r, backend, sizeof backend) && take_into(&r, devname, sizeof devname) &&
         take_into(&r, &total, sizeof total) && take_into(&r, &cap, sizeof cap) &&
         take_into(&r, &model_order, sizeof model_order) &&
         take_into(&r, &magic, sizeof magic) && magic == ISOLATE_MAGIC && r.at == r.n;
    if (!ok) {
        free_arrays(&v);
        return false;
    }
    *res = v;
    if (!run->backend[0] && backend[0]) { /* where the variants ran, as the first child found it */
        memcpy(run->backend, backend, sizeof backend);
        memcpy(run->device, devname, sizeof devname);
        run->backend[sizeof run->backend - 1] = run->device[sizeof run->device - 1] = '\0';
        run->device_total = total;
        run->cap = cap;
        run->model_order = model_order;
    }
    return true;
}

/* ---- the child and the parent ------------------------------------------------------------------------------- */

static bool write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A child that is running: its job, process, pipe, start time and the bytes read so far. */
typedef struct slot {
    isolate_job *job;
    pid_t pid;
    int fd;
    double t0;
    buf b;
} slot;

/* Fork job's child into sl; false (the job marked crashed) when it could not start. The child closes the read
 * ends of the other running children's pipes (others[0..nothers)); every write end but its own is closed in the
 * parent right after each fork, so a child's end of the pipe is the only one and its exit is the pipe's end. */
static bool start(isolate_job *job, slot *sl, const slot *others, size_t nothers)
{
    variant_result *res = job->res;
    int fd[2];
    if (pipe(fd) != 0) {
        res->outcome = OUTCOME_CRASHED;
        snprintf(res->error, sizeof res->error, "could not start the variant's process: pipe: %s", strerror(errno));
        return false;
    }
    fflush(NULL); /* what this process has buffered is written once, by this process */
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        res->outcome = OUTCOME_CRASHED;
        snprintf(res->error, sizeof res->error, "could not start the variant's process: fork: %s", strerror(errno));
        return false;
    }
    if (pid == 0) { /* the child: run, send, _exit (no atexit handlers: they are the parent's) */
        close(fd[0]);
        for (size_t k = 0; k < nothers; k++)
            close(others[k].fd);
        signal(SIGPIPE, SIG_DFL);
        job->fn(job->arg, res, job->run);
        buf b = {0};
        bool sent = encode(&b, res, job->run) && write_all(fd[1], b.p, b.n);
        fflush(NULL);
        _exit(sent ? 0 : 3);
    }
    close(fd[1]);
    *sl = (slot){.job = job, .pid = pid, .fd = fd[0], .t0 = t0};
    return true;
}

/* The child's pipe is at its end (or its deadline passed: timed_out): reap it and decode its result. */
static void finish(slot *sl, bool timed_out)
{
    isolate_job *job = sl->job;
    variant_result *res = job->res;
    close(sl->fd);
    if (timed_out)
        kill(sl->pid, SIGKILL);
    int wst = 0;
    while (waitpid(sl->pid, &wst, 0) < 0 && errno == EINTR)
        ;
    double seconds = now_s() - sl->t0;
    if (timed_out) {
        res->outcome = OUTCOME_TIMEOUT;
        res->seconds = seconds;
        snprintf(res->error, sizeof res->error, "timed out: still running after %g s (%s), killed", job->timeout_s,
                 job->limit_source);
    } else if (WIFSIGNALED(wst)) {
        res->outcome = OUTCOME_CRASHED;
        res->signal = WTERMSIG(wst);
        res->seconds = seconds;
        snprintf(res->error, sizeof res->error, "crashed: %s (%s)", isolate_signal_name(res->signal),
                 strsignal(res->signal));
    } else if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0 || !decode(&sl->b, res, &job->found)) {
        res->outcome = OUTCOME_CRASHED;
        res->seconds = seconds;
        snprintf(res->error, sizeof res->error, "crashed: the variant's process exited with status %d before it "
                 "reported its result", WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    }
    free(sl->b.p);
    sl->b = (buf){0};
}

void isolate_variants(isolate_job *jobs, size_t n, int max_jobs)
{
    size_t width = max_jobs < 1 ? 1 : (size_t)max_jobs;
    if (width > n)
        width = n;
    slot *run = calloc(width ? width : 1, sizeof *run);
    struct pollfd *pfd = calloc(width ? width : 1, sizeof *pfd);
    if (!run || !pfd)
        width = 1; /* out of host memory: one child at a time, in the slot below */
    slot one;
    slot *slots = run && pfd ? run : &one;
    struct pollfd one_pfd, *pfds = run && pfd ? pfd : &one_pfd;
    size_t next = 0, active = 0;
    for (size_t k = 0; k < n; k++)
        memset(&jobs[k].found, 0, sizeof jobs[k].found);
    while (next < n || active > 0) {
        while (active < width && next < n) { /* fill every free slot, in the jobs' order */
            isolate_job *job = &jobs[next++];
            if (start(job, &slots[active], slots, active))
                active++;
        }
        if (active == 0)
            continue;
        double now = now_s(), wait = -1; /* the nearest deadline */
        for (size_t k = 0; k < active; k++) {
            pfds[k] = (struct pollfd){.fd = slots[k].fd, .events = POLLIN};
            if (slots[k].job->timeout_s > 0) {
                double left = slots[k].job->timeout_s - (now - slots[k].t0);
                if (left < 0)
                    left = 0;
                if (wait < 0 || left < wait)
                    wait = left;
            }
        }
        int wait_ms = wait < 0 ? -1 : wait > 86400 ? 86400000 : (int)(wait * 1000) + 1;
        int pr = poll(pfds, (nfds_t)active, wait_ms);
        if (pr < 0 && errno != EINTR)
            break; /* cannot happen with valid descriptors; the children are reaped below */
        now = now_s();
        for (size_t k = active; k-- > 0;) { /* from the end: a finished slot takes the last one's place */
            bool done = false, timed_out = false;
            if (pr > 0 && (pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                char chunk[65536];
                ssize_t r = read(slots[k].fd, chunk, sizeof chunk);
                if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
                    done = true; /* the child closed its end: exited, or crashed */
                else if (r > 0 && !put(&slots[k].b, chunk, (size_t)r))
                    done = true; /* out of host memory: the result cannot be whole, the child is reported */
            }
            if (!done && slots[k].job->timeout_s > 0 && now - slots[k].t0 >= slots[k].job->timeout_s)
                done = timed_out = true;
            if (done) {
                finish(&slots[k], timed_out);
                slots[k] = slots[active - 1];
                pfds[k] = pfds[active - 1];
                active--;
            }
        }
    }
    for (size_t k = 0; k < active; k++) /* only after a failed poll: nothing is left running */
        finish(&slots[k], true);
    free(run);
    free(pfd);
}

void isolate_variant(isolate_fn fn, void *arg, double timeout_s, const char *limit_source, variant_result *res,
                     run_result *run)
{
    isolate_job job = {.fn = fn, .arg = arg, .timeout_s = timeout_s, .limit_source = limit_source, .res = res,
                       .run = run};
    isolate_variants(&job, 1, 1);
    if (!run->backend[0] && job.found.backend[0]) /* where the variants ran, as the first child found it */
        isolate_found_merge(run, &job.found);
}

void isolate_found_merge(run_result *run, const run_result *found)
{
    memcpy(run->backend, found->backend, sizeof run->backend);
    memcpy(run->device, found->device, sizeof run->device);
    run->device_total = found->device_total;
    run->cap = found->cap;
    run->model_order = found->model_order;
}
