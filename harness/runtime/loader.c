/* loader.c - a DataLoader of real worker threads and a pin thread on a virtual clock (see loader.h).
 *
 * The state and its invariants (L1-L7) are in loader_state.h; loader_check validates them.
 */
#include "runtime/loader.h"
#include "runtime/loader_state.h"

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
                "L3: batch %lld is allowed at %lld ms, before it finishes at %lld ms", (long long)(l->allowed - 1),
                (long long)l->now, (long long)l->fin[l->allowed - 1]);
    OOM_REQUIRE(l->pin_failures >= 0 && l->pin_failures <= l->pinned, why, cap, "L4: %lld pin failures, %lld pinned",
                (long long)l->pin_failures, (long long)l->pinned);
    for (int w = 0; w < l->nworkers; w++)
        OOM_REQUIRE(l->next_task[w] % l->o.workers == w && l->next_task[w] < l->dispatched + l->o.workers, why, cap,
                    "L4: worker %d's next task is %lld (%lld dispatched)", w, (long long)l->next_task[w],
                    (long long)l->dispatched);
    if (!expensive)
        return OOM_OK;
    int64_t failures = 0;
    for (int64_t k = 0; k < l->n; k++) {
        bool disp = k < l->dispatched;
        if (disp && k > 0)
            OOM_REQUIRE(l->disp[k] >= l->disp[k - 1] && l->fin[k] >= l->fin[k - 1], why, cap,
                        "L5: batch %lld is dispatched or finishes before batch %lld", (long long)k, (long long)(k - 1));
        OOM_REQUIRE(!disp || l->fin[k] >= l->disp[k] + l->o.produce_ms, why, cap,
                    "L5: batch %lld finishes at %lld ms, less than produce_ms after its dispatch at %lld ms",
                    (long long)k, (long long)l->fin[k], (long long)l->disp[k]);
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
    debug_check(l);
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
