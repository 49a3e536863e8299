/* loader.c - a DataLoader of real worker threads and a pin thread on a virtual clock (see loader.h).
 *
 * State, under mu: batch k (0 <= k < n) is dispatched when k < dispatched (at virtual time disp[k], finishing at
 * fin[k] = max(disp[k], fin[k - W]) + produce_ms); made when made[k] (its pageable buffer, or make_st[k] != OK);
 * pinned when k < pinned (pin_memory: its pinned buffer in ready[k], or pin_st[k] != OK); received when k < taken.
 * Invariants: taken <= pinned <= allowed <= dispatched <= n (pin_memory; else taken <= dispatched);
 * dispatched - taken <= P x W; allowed counts the dispatched batches with fin <= now, the virtual clock; fin is
 * nondecreasing in k, so those are a prefix.
 */
#include "runtime/loader.h"

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
    int64_t *disp, *fin;
    int64_t now;
    int64_t dispatched, allowed, pinned, taken;
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
    l->fin[k] = start + l->o.produce_ms;
    pthread_cond_broadcast(&l->cv);
}

/* Move `allowed` up to the dispatched batches finished by `now` (mu held). */
static void advance(loader *l)
{
    while (l->allowed < l->dispatched && l->fin[l->allowed] <= l->now)
        l->allowed++;
    pthread_cond_broadcast(&l->cv);
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

oom_status loader_new(rt *r, const loader_options *o, uint64_t seed, loader **out)
{
    if (!r || !o || !out || o->workers < 1 || o->workers > LOADER_MAX_WORKERS || o->prefetch < 1 ||
        o->batches < 0 || o->batches > LOADER_MAX_BATCHES || o->produce_ms < 0 || o->step_ms < 0 || o->ndim < 0 ||
        o->ndim > TENSOR_MAX_DIMS || (int64_t)o->prefetch > INT64_MAX / o->workers)
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
    l->made = calloc(n, sizeof *l->made);
    l->make_st = calloc(n, sizeof *l->make_st);
    l->made_done = calloc(n, sizeof *l->made_done);
    l->ready = calloc(n, sizeof *l->ready);
    l->pin_st = calloc(n, sizeof *l->pin_st);
    if (!l->disp || !l->fin || !l->made || !l->make_st || !l->made_done || !l->ready || !l->pin_st ||
        pthread_mutex_init(&l->mu, NULL) != 0) {
        free(l->disp), free(l->fin), free(l->made), free(l->make_st), free(l->made_done), free(l->ready);
        free(l->pin_st);
        free(l);
        return OOM_ENOMEM_HOST;
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
    if (l->fin[i] > l->now)
        l->now = l->fin[i]; /* the consumer waits for batch i */
    oom_status st;
    hostbuf *b;
    if (l->o.pin_memory) {
        advance(l);
        while (l->pinned < l->allowed)
            pthread_cond_wait(&l->cv, &l->mu);
        b = l->ready[i];
        st = l->pin_st[i];
        l->ready[i] = NULL;
    } else {
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

void loader_step_done(loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->now += l->o.step_ms;
    if (l->o.pin_memory) {
        advance(l);
        while (l->pinned < l->allowed)
            pthread_cond_wait(&l->cv, &l->mu);
    }
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
    /* the iterator's batches that were never received, in index order */
    for (int64_t k = 0; k < l->n; k++) {
        hostbuf_free(l->ready[k]);
        hostbuf_free(l->made[k]);
    }
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->disp), free(l->fin), free(l->made), free(l->make_st), free(l->made_done), free(l->ready);
    free(l->pin_st);
    free(l);
}
