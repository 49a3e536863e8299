/* loader.c - a DataLoader of real worker threads and a pin thread on a virtual clock (see loader.h).
 *
 * The state and its invariants (L1-L7) are in loader_state.h; loader_check validates them.
 */
#include "training/loader.h"
#include "training/loader_state.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "kernels.h"

typedef struct worker_arg {
    loader *l;
    int w;
} worker_arg;


/* ---- the validator (loader_state.h: L1-L7) ---- */

oom_status loader_check_locked(const loader *l, bool expensive, char *why, size_t cap)
{
    OOM_REQUIRE(l && l->r, why, cap, "L1: no loader, or no rt behind it");
    bool pin = l->o.pin_memory;
    OOM_REQUIRE(0 <= l->taken && l->taken <= l->dispatched && l->dispatched <= l->n && l->allowed <= l->dispatched,
                why, cap, "L1: taken %lld, allowed %lld, dispatched %lld of %lld", (long long)l->taken,
                (long long)l->allowed, (long long)l->dispatched, (long long)l->n);
    OOM_REQUIRE(pin ? l->taken <= l->pinned && l->pinned <= l->allowed : l->pinned == 0 && l->allowed == 0, why, cap,
                "L1: taken %lld, pinned %lld, allowed %lld with pin_memory %d", (long long)l->taken,
                (long long)l->pinned, (long long)l->allowed, (int)pin);
    int64_t window = (int64_t)l->o.prefetch * l->o.workers;
    int64_t want = l->taken > l->n - window ? l->n : window + l->taken;
    OOM_REQUIRE(l->dispatched == want, why, cap, "L2: %lld dispatched, %lld received: not min(%lld, %lld x %d + %lld)",
                (long long)l->dispatched, (long long)l->taken, (long long)l->n, (long long)l->o.prefetch,
                l->o.workers, (long long)l->taken);
    OOM_REQUIRE(l->allowed == 0 || l->fin[l->allowed - 1] <= l->now, why, cap,
                "L3: batch %lld is allowed at %lld ns, before it finishes at %lld ns", (long long)(l->allowed - 1),
                (long long)l->now, (long long)l->fin[l->allowed - 1]);
    OOM_REQUIRE(0 <= l->copy_done && l->copy_done <= l->ncopies, why, cap, "L3: %lld of %lld copies done",
                (long long)l->copy_done, (long long)l->ncopies);
    OOM_REQUIRE(l->pin_failures >= 0 && l->pin_failures <= l->pinned, why, cap, "L4: %lld pin failures, %lld pinned",
                (long long)l->pin_failures, (long long)l->pinned);
    for (int w = 0; w < l->nworkers; w++)
        OOM_REQUIRE(l->next_task[w] % l->o.workers == w && l->next_task[w] < l->dispatched + l->o.workers, why, cap,
                    "L4: worker %d's next task is %lld (%lld dispatched)", w, (long long)l->next_task[w],
                    (long long)l->dispatched);
    if (!expensive)
        return OOM_OK;
    for (int64_t c = 1; c < l->ncopies; c++)
        OOM_REQUIRE(l->copy_end[c] >= l->copy_end[c - 1], why, cap, "L5: copy %lld ends before copy %lld",
                    (long long)c, (long long)(c - 1));
    int64_t failures = 0;
    for (int64_t k = 0; k < l->n; k++) {
        bool disp = k < l->dispatched;
        if (disp && k > 0)
            OOM_REQUIRE(l->disp[k] >= l->disp[k - 1] && l->fin[k] >= l->fin[k - 1], why, cap,
                        "L5: batch %lld is dispatched or finishes before batch %lld", (long long)k, (long long)(k - 1));
        OOM_REQUIRE(!disp || l->fin[k] >= l->disp[k] + l->produce_ns, why, cap,
                    "L5: batch %lld finishes at %lld ns, less than produce_ms after its dispatch at %lld ns",
                    (long long)k, (long long)l->fin[k], (long long)l->disp[k]);
        /* pe[k] is set once batch k's pin is done (advance), so the last allowed batch's may not be yet */
        bool allowed = k < l->allowed, ended = k + 1 < l->allowed;
        OOM_REQUIRE(!allowed || (l->ps[k] >= l->fin[k] && (k == 0 || l->ps[k] >= l->pe[k - 1]) &&
                                 (!ended || l->pe[k] >= l->ps[k])),
                    why, cap, "L5: batch %lld's pin starts at %lld ns: before it is made or before the pin of batch %lld ends",
                    (long long)k, (long long)l->ps[k], (long long)(k - 1));
        OOM_REQUIRE(disp || (!l->made_done[k] && !l->made[k] && !l->ready[k]), why, cap,
                    "L5: batch %lld is made before it is dispatched", (long long)k);
        OOM_REQUIRE(!l->made[k] || (l->made_done[k] && l->make_st[k] == OOM_OK && k >= l->taken &&
                                    (!pin || k >= l->pinned)),
                    why, cap, "L6: batch %lld's pageable buffer is still held after it was %s", (long long)k,
                    k < l->taken ? "received" : "pinned or failed");
        bool want_ready = pin && l->taken <= k && k < l->pinned && l->pin_st[k] == OOM_OK;
        OOM_REQUIRE((l->ready[k] != NULL) == want_ready, why, cap, "L6: batch %lld %s a pinned buffer", (long long)k,
                    want_ready ? "lacks" : "holds");
        char sub[160];
        if (l->ready[k] && (hostbuf_check(l->ready[k], true, sub, sizeof sub) != OOM_OK || !l->ready[k]->pinned))
            return snprintf(why, cap, "L6: batch %lld's pinned buffer: %s", (long long)k,
                            l->ready[k]->pinned ? sub : "not pinned"),
                   OOM_ECORRUPT;
        failures += k < l->pinned && l->pin_st[k] == OOM_ENOMEM_PINNED;
    }
    OOM_REQUIRE(failures == l->pin_failures, why, cap, "L7: %lld pin failures counted, %lld recorded",
                (long long)failures, (long long)l->pin_failures);
    return OOM_OK;
}

oom_status loader_check(const loader *l, bool expensive, char *why, size_t cap)
{
    OOM_REQUIRE(l, why, cap, "L1: no loader");
    loader *m = (loader *)l; /* the lock, not the state */
    pthread_mutex_lock(&m->mu);
    oom_status st = loader_check_locked(l, expensive, why, cap);
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* Checked builds: the state is valid after this thread changed it (mu held). */
#define debug_check(l) OOM_VALIDATE("loader", loader_check_locked, (l))

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
        debug_check(l);
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
        debug_check(l);
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
    pthread_mutex_lock(&l->mu);
    debug_check(l);
    pthread_mutex_unlock(&l->mu);
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
    debug_check(l);
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
    debug_check(l);
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
    debug_check(l);
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
