/* loader.c - a DataLoader of real worker threads and a pin thread on a virtual clock (see loader.h).
 *
 * State, under mu, times in nanoseconds of the virtual clock: batch k (0 <= k < n) is dispatched when
 * k < dispatched (at disp[k], finishing at fin[k] = max(disp[k], fin[k - W]) + produce); made when made[k] (its
 * pageable buffer, or make_st[k] != OK); its pin allowed to start when k < allowed (at ps[k] = max(fin[k],
 * pe[k - 1]) <= now), pinned when k < pinned (pin_memory: its pinned buffer in ready[k], or pin_st[k] != OK),
 * ready for the consumer at pe[k] = ps[k] + pin_ns (a failed pin takes no time); received when k < taken. The
 * device copies holding a stream: copy_s[c], ending at copy_end[c], for copy_done <= c < ncopies.
 * Invariants: taken <= pinned <= allowed <= dispatched <= n (pin_memory; else taken <= dispatched), and
 * pinned == allowed whenever the rt's thread is outside a loader call; dispatched - taken <= P x W; fin, ps, pe
 * and copy_end are nondecreasing; every event at or before now has happened (copy_end[copy_done] > now, and
 * ps[allowed] > now once batch `allowed` is dispatched).
 */
#include "runtime/loader.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

struct loader {
    rt *r;
    loader_options o;
    uint64_t seed;
    int64_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    /* the schedule */
    int64_t *disp, *fin, *ps, *pe;
    int64_t now;
    int64_t dispatched, allowed, pinned, taken;
    int64_t produce_ns, step_ns, pin_ns, h2d_ns, h2d_pageable_ns; /* from the options */
    devstream *copy_s;  /* the device copies holding their stream, in the order they were made */
    int64_t *copy_end;
    int64_t ncopies, copy_done;
    /* the batches */
    hostbuf **made;     /* pageable, made by a worker, not yet pinned (or received, without pin_memory) */
    oom_status *make_st;
    bool *made_done;
    hostbuf **ready;    /* pinned, not yet received */
    oom_status *pin_st;
    int64_t pin_failures;
    /* the threads */
    pthread_t workers[LOADER_MAX_WORKERS];
    int nworkers;
    int64_t next_task[LOADER_MAX_WORKERS];
    pthread_t pin_thread;
    bool pin_started;
};

typedef struct worker_arg {
    loader *l;
    int w;
} worker_arg;


/* _try_put_index: dispatch the next batch at the virtual time `now` (mu held). */
static void dispatch_one(loader *l)
{
    if (l->dispatched >= l->n)
        return;
    int64_t k = l->dispatched++;
    int64_t W = l->o.workers;
    int64_t start = l->now;
    if (k >= W && l->fin[k - W] > start)
        start = l->fin[k - W]; /* the worker is still on its previous batch */
    l->disp[k] = l->now;
    l->fin[k] = start + l->produce_ns;
    pthread_cond_broadcast(&l->cv);
}

#define NEVER INT64_MAX

/* When the pin of batch `allowed` starts: once it is made and the pin thread is done with the one before; NEVER
 * while it is not dispatched (mu held, pinned == allowed). */
static int64_t next_pin_start(const loader *l)
{
    if (!l->o.pin_memory || l->allowed >= l->dispatched)
        return NEVER;
    int64_t k = l->allowed, t = l->fin[k];
    if (k > 0 && l->pe[k - 1] > t)
        t = l->pe[k - 1];
    return t;
}

static int64_t next_copy_end(const loader *l) { return l->copy_done < l->ncopies ? l->copy_end[l->copy_done] : NEVER; }

/* Let everything at or before `now` happen, in time order (mu held, the rt's thread): copies complete (their stream's
 * held work goes), pins start (the rt's thread waits until the pin thread has allocated and copied, so that the
 * next event sees its block). At equal times a copy completes before a pin starts. */
static void advance(loader *l)
{
    for (;;) {
        int64_t tc = next_copy_end(l), tp = next_pin_start(l);
        if (tc <= l->now && tc <= tp) {
            (void)device_stream_complete(l->r->dev, l->copy_s[l->copy_done++], 1);
            continue;
        }
        if (tp > l->now)
            break;
        int64_t k = l->allowed++;
        l->ps[k] = tp;
        pthread_cond_broadcast(&l->cv);
        while (l->pinned < l->allowed)
            pthread_cond_wait(&l->cv, &l->mu);
        l->pe[k] = tp + (l->pin_st[k] == OOM_OK ? l->pin_ns : 0);
    }
}

/* Move the clock on by dt and let what falls within happen (mu held). */
static void run_for(loader *l, int64_t dt)
{
    l->now += dt;
    advance(l);
}

static void *worker_main(void *arg)
{
    worker_arg a = *(worker_arg *)arg;
    free(arg);
    loader *l = a.l;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->done && l->next_task[a.w] >= l->dispatched)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->done)
            break;
        int64_t k = l->next_task[a.w];
        l->next_task[a.w] += l->o.workers;
        pthread_mutex_unlock(&l->mu);
        hostbuf *b = NULL;
        oom_status st = hostbuf_randn(l->r, l->o.dt, l->o.ndim, l->o.shape, oom_rng_hash(l->seed, (uint64_t)k), &b);
        pthread_mutex_lock(&l->mu);
        l->made[k] = b;
        l->make_st[k] = st;
        l->made_done[k] = true;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void *pin_main(void *arg)
{
    loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->done && !(l->pinned < l->allowed && l->made_done[l->pinned]))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->done)
            break;
        int64_t k = l->pinned;
        hostbuf *src = l->made[k];
        oom_status st = l->make_st[k];
        l->made[k] = NULL;
        pthread_mutex_unlock(&l->mu);
        hostbuf *p = NULL;
        if (st == OOM_OK)
            st = hostbuf_pin_memory(src, &p);
        hostbuf_free(src);
        pthread_mutex_lock(&l->mu);
        l->ready[k] = p;
        l->pin_st[k] = st;
        l->pin_failures += st == OOM_ENOMEM_PINNED;
        l->pinned++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* A copy's time on the clock, ns: nbytes at gbps (bytes per ns), 0 for a bandwidth of 0; -1 past LOADER_MAX_MS. */
static int64_t copy_ns(size_t nbytes, double gbps)
{
    if (!(gbps > 0))
        return 0;
    double ns = (double)nbytes / gbps;
    return ns > (double)LOADER_MAX_MS * 1e6 ? -1 : (int64_t)llround(ns);
}

static void free_arrays(loader *l)
{
    free(l->disp), free(l->fin), free(l->ps), free(l->pe), free(l->copy_s), free(l->copy_end);
    free(l->made), free(l->make_st), free(l->made_done), free(l->ready), free(l->pin_st);
}

oom_status loader_new(rt *r, const loader_options *o, uint64_t seed, loader **out)
{
    if (!r || !o || !out || o->workers < 1 || o->workers > LOADER_MAX_WORKERS || o->prefetch < 1 ||
        o->batches < 0 || o->batches > LOADER_MAX_BATCHES || o->produce_ms < 0 || o->step_ms < 0 || o->ndim < 0 ||
        o->ndim > TENSOR_MAX_DIMS || (int64_t)o->prefetch > INT64_MAX / o->workers || !(o->pin_gbps >= 0) ||
        !(o->h2d_gbps >= 0) || !(o->h2d_pageable_gbps >= 0) || o->produce_ms > LOADER_MAX_MS ||
        o->step_ms > LOADER_MAX_MS)
        return OOM_EINVAL;
    loader *l = calloc(1, sizeof *l);
    if (!l)
        return OOM_ENOMEM_HOST;
    l->r = r;
    l->o = *o;
    l->seed = seed;
    l->n = o->batches;
    size_t n = (size_t)l->n + 1;
    l->disp = calloc(n, sizeof *l->disp);
    l->fin = calloc(n, sizeof *l->fin);
    l->ps = calloc(n, sizeof *l->ps);
    l->pe = calloc(n, sizeof *l->pe);
    l->copy_s = calloc(n, sizeof *l->copy_s);
    l->copy_end = calloc(n, sizeof *l->copy_end);
    l->made = calloc(n, sizeof *l->made);
    l->make_st = calloc(n, sizeof *l->make_st);
    l->made_done = calloc(n, sizeof *l->made_done);
    l->ready = calloc(n, sizeof *l->ready);
    l->pin_st = calloc(n, sizeof *l->pin_st);
    if (!l->disp || !l->fin || !l->ps || !l->pe || !l->copy_s || !l->copy_end || !l->made || !l->make_st ||
        !l->made_done || !l->ready || !l->pin_st || pthread_mutex_init(&l->mu, NULL) != 0) {
        free_arrays(l);
        free(l);
        return OOM_ENOMEM_HOST;
    }
    /* the clock's durations: the copies' from one batch's bytes and the bandwidths (GB/s is bytes per ns) */
    size_t nbytes = dtype_size(o->dt);
    for (int i = 0; i < o->ndim; i++)
        nbytes *= o->shape[i] > 0 ? (size_t)o->shape[i] : 0;
    l->produce_ns = o->produce_ms * 1000000;
    l->step_ns = o->step_ms * 1000000;
    l->pin_ns = copy_ns(nbytes, o->pin_gbps);
    l->h2d_ns = copy_ns(nbytes, o->h2d_gbps);
    l->h2d_pageable_ns = copy_ns(nbytes, o->h2d_pageable_gbps);
    if (l->pin_ns < 0 || l->h2d_ns < 0 || l->h2d_pageable_ns < 0) {
        pthread_mutex_destroy(&l->mu);
        free_arrays(l);
        free(l);
        return OOM_EINVAL;
    }
    pthread_cond_init(&l->cv, NULL);
    pthread_mutex_lock(&l->mu);
    for (int64_t i = 0; i < (int64_t)o->prefetch * o->workers; i++)
        dispatch_one(l);
    pthread_mutex_unlock(&l->mu);
    for (int w = 0; w < o->workers; w++)
        l->next_task[w] = w;
    oom_status st = OOM_OK;
    for (int w = 0; w < o->workers && st == OOM_OK; w++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) {
            st = OOM_ENOMEM_HOST;
            break;
        }
        *a = (worker_arg){l, w};
        if (pthread_create(&l->workers[w], NULL, worker_main, a) != 0) {
            free(a);
            st = OOM_ENOMEM_HOST;
        } else {
            l->nworkers++;
        }
    }
    if (st == OOM_OK && o->pin_memory) {
        if (pthread_create(&l->pin_thread, NULL, pin_main, l) != 0)
            st = OOM_ENOMEM_HOST;
        else
            l->pin_started = true;
    }
    if (st != OOM_OK) {
        loader_delete(l);
        return st;
    }
    *out = l;
    return OOM_OK;
}

oom_status loader_next(loader *l, hostbuf **out)
{
    *out = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->taken >= l->n) {
        pthread_mutex_unlock(&l->mu);
        return OOM_OK;
    }
    int64_t i = l->taken;
    oom_status st;
    hostbuf *b;
    if (l->o.pin_memory) {
        /* the consumer waits for batch i: the clock moves to each next event until batch i is pinned and ready */
        for (;;) {
            advance(l);
            if (l->pinned > i) {
                if (l->pe[i] <= l->now)
                    break;
                l->now = l->pe[i];
                continue;
            }
            int64_t tc = next_copy_end(l), tp = next_pin_start(l);
            l->now = tc < tp ? tc : tp; /* batch i is dispatched, so its pin has a start */
        }
        b = l->ready[i];
        st = l->pin_st[i];
        l->ready[i] = NULL;
    } else {
        if (l->fin[i] > l->now)
            run_for(l, l->fin[i] - l->now); /* the consumer waits for batch i */
        while (!l->made_done[i])
            pthread_cond_wait(&l->cv, &l->mu);
        b = l->made[i];
        st = l->make_st[i];
        l->made[i] = NULL;
    }
    l->taken++;
    dispatch_one(l); /* _process_data: _try_put_index() before the batch (or its exception) is handed over */
    pthread_mutex_unlock(&l->mu);
    if (st != OOM_OK) {
        hostbuf_free(b);
        return st;
    }
    *out = b;
    return OOM_OK;
}

oom_status loader_copy(loader *l, devstream s)
{
    oom_status st = OOM_OK;
    pthread_mutex_lock(&l->mu);
    if (!l->o.pin_memory) {
        run_for(l, l->h2d_pageable_ns); /* from pageable memory: the consumer waits for the copy */
    } else if (l->h2d_ns > 0 && l->ncopies < l->n) {
        /* from pinned memory, non_blocking: after the stream's copy before it, for h2d_ns */
        int64_t start = l->now, prev = l->copy_done < l->ncopies ? l->copy_end[l->ncopies - 1] : 0;
        if (prev > start)
            start = prev;
        st = device_stream_hold(l->r->dev, s);
        if (st == OOM_OK) {
            l->copy_s[l->ncopies] = s;
            l->copy_end[l->ncopies++] = start + l->h2d_ns;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return st;
}

void loader_step_done(loader *l)
{
    pthread_mutex_lock(&l->mu);
    run_for(l, l->step_ns);
    pthread_mutex_unlock(&l->mu);
}

int64_t loader_in_flight(const loader *l)
{
    loader *m = (loader *)l;
    pthread_mutex_lock(&m->mu);
    int64_t v = m->dispatched - m->taken;
    pthread_mutex_unlock(&m->mu);
    return v;
}

int64_t loader_ready(const loader *l)
{
    loader *m = (loader *)l;
    pthread_mutex_lock(&m->mu);
    int64_t v = 0;
    if (m->o.pin_memory) {
        v = m->pinned - m->taken;
    } else {
        for (int64_t k = m->taken; k < m->dispatched; k++)
            v += m->made_done[k];
    }
    pthread_mutex_unlock(&m->mu);
    return v;
}

int64_t loader_pin_failures(const loader *l)
{
    loader *m = (loader *)l;
    pthread_mutex_lock(&m->mu);
    int64_t v = m->pin_failures;
    pthread_mutex_unlock(&m->mu);
    return v;
}

void loader_delete(loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->done = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int w = 0; w < l->nworkers; w++)
        pthread_join(l->workers[w], NULL);
    if (l->pin_started)
        pthread_join(l->pin_thread, NULL);
    /* the copies still holding their streams run to their end */
    while (l->copy_done < l->ncopies)
        (void)device_stream_complete(l->r->dev, l->copy_s[l->copy_done++], 1);
    /* the iterator's batches that were never received, in index order */
    for (int64_t k = 0; k < l->n; k++) {
        hostbuf_free(l->ready[k]);
        hostbuf_free(l->made[k]);
    }
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free_arrays(l);
    free(l);
}
