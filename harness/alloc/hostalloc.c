/* hostalloc.c - PyTorch 2.11's pinned host caching allocator (see hostalloc.h).
 *
 * Names follow ATen/core/CachingHostAllocator.h and ATen/cuda/CachingHostAllocator.cpp so the two can be read
 * side by side: allocate, free, record_event, empty_cache, process_events, get_free_block,
 * add_allocated_block, allocate_host_memory(_slowpath), allocWithCudaHostRegister, mapPagesForRegister,
 * free_block(_slowpath), getStats, resetAccumulatedStats, resetPeakStats.
 *
 * Structure. Every block is on `all` (a doubly linked list) and in the pointer table. A block is in exactly
 * one of three states:
 *   live     handed out: allocated, no pending event; its streams are those record_event added;
 *   pending  freed, event_count > 0 events of it in the queue, no streams;
 *   cached   freed, no event: on the free list of its power (a stack: push and pop at the top, LIFO).
 * The event queue is a deque of (event, block): free pushes at the front, process_events takes from the back,
 * as PyTorch's std::deque.
 * Stats are staged as PyTorch stages them (HostStatsStaged): allocations and allocated_bytes in aggregate, the
 * active and allocation stats per power of two; hostalloc_get_stats folds them like getStats.
 *
 * Invariants (hostalloc_check recounts them; debug builds run it after every mutating call):
 *   H1 every block: size a power of two, index == log2(size), its pointer maps to it in the table, and the
 *      table holds nothing else; a reserve block lies inside the carved part of the reserve segment;
 *   H2 states: live => no event; not live => no stream; cached <=> not live and no event <=> on the free list
 *      of its index, once;
 *   H3 the queue holds exactly event_count entries of each block, and only blocks that are not live;
 *   H4 allocations.current == blocks, allocated_bytes.current == their bytes, and per power i the allocation
 *      stats count its blocks and bytes;
 *   H5 per power i, with n_i = live + pending blocks + unreturned[i] (blocks freed with no stream: Q1) and
 *      r_i = returned[i] (blocks returned through their events): active.current == n_i, and
 *      active_bytes.current == (n_i + r_i) x 2^i + r_i, since a return adds 1 byte instead of taking 2^i (Q2);
 *   H6 pinned_bytes == bytes of the blocks outside the reserve + the reserve segment;
 *   H7 every stat has current >= 0 and peak >= current (active_bytes: peak + r_i >= current, since Q2 raises
 *      current through decrease(), which leaves the peak alone), and current == allocated - freed until a reset
 *      of the accumulated stats; num_host_alloc/num_host_free are derived (getStats), so they cannot drift.
 */
#include "alloc/hostalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/fail.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define NB HOSTALLOC_BUCKETS

typedef struct ha_block {
    void *ptr;
    size_t size;    /* a power of two */
    unsigned index; /* log2(size): its free list and stats bucket */
    bool allocated; /* live */
    bool registered; /* malloc + cudaHostRegister (use_host_register[ptr] in PyTorch) */
    bool in_reserve; /* carved from the reserve segment: never given back */
    size_t event_count;
    devstream *streams; /* record_event's set, while live */
    size_t nstreams, capstreams;
    struct ha_block *free_next;   /* free-list stack */
    struct ha_block *hnext;       /* pointer table chain */
    struct ha_block *prev, *next; /* `all` */
    uint64_t mark;                /* validator scratch: on a free list in this pass */
    size_t queued;                /* validator scratch: entries in the queue */
} ha_block;

typedef struct ha_event {
    devevent ev;
    ha_block *block;
} ha_event;

struct hostalloc {
    device *dev;
    hostalloc_options opt;
    pthread_mutex_t mu; /* guards everything but the reserve segment */

    ha_block *all;
    size_t nblocks;
    ha_block **table; /* pointer -> block, chained */
    size_t table_mask;
    ha_block *free_list[NB];

    ha_event *q; /* ring: the front is q[head], the back q[(head + qn - 1) % qcap] */
    size_t head, qn, qcap;

    /* HostStatsStaged */
    memstat allocations, allocated_bytes;
    memstat active_bucket[NB], active_bytes_bucket[NB], allocation_bucket[NB], allocated_bytes_bucket[NB];
    hostalloc_duration host_alloc_time, host_free_time;
    bool accumulated_reset;
    uint64_t check_epoch; /* the validator's pass number */

    /* the recount of H5 */
    int64_t unreturned[NB]; /* blocks freed with no stream (Q1) */
    int64_t returned[NB];   /* blocks returned through their events (Q2) */
    size_t pinned_bytes;

    /* PinnedReserveSegment, under its own mutex as in PyTorch */
    pthread_mutex_t reserve_mu;
    void *reserve;
    size_t reserve_size, reserve_carved;
    bool reserve_registered;
};

static void debug_check(hostalloc *ha)
{
#if OOM_DEBUG >= 2
    if (hostalloc_check(ha) != OOM_OK) /* the one way a broken invariant aborts (core/check.h) */
        oom_check_fail("hostalloc", oom_error_msg(), __FILE__, __LINE__);
#else
    (void)ha;
#endif
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void duration_increase(hostalloc_duration *d, int64_t x)
{
    d->total += x;
    d->count += 1;
    d->max = x > d->max ? x : d->max;
    d->min = d->min == 0 ? x : (x < d->min ? x : d->min);
}

/* c10::llvm::PowerOf2Ceil and Log2_64_Ceil. n >= 1 and n <= 2^63. */
static size_t pow2_ceil(size_t n)
{
    size_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static unsigned log2_exact(size_t p)
{
    unsigned i = 0;
    while (((size_t)1 << i) < p)
        i++;
    return i;
}

/* ---- the pointer table (mu held) ---- */

static size_t slot(const hostalloc *ha, const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 32) & ha->table_mask;
}

static ha_block *table_find(const hostalloc *ha, const void *p)
{
    for (ha_block *b = ha->table[slot(ha, p)]; b; b = b->hnext)
        if (b->ptr == p)
            return b;
    return NULL;
}

static void table_insert(hostalloc *ha, ha_block *b)
{
    if (ha->nblocks + 1 > ha->table_mask + 1) { /* keep the load factor <= 1 */
        size_t old = ha->table_mask + 1, cap = old * 2;
        ha_block **t = calloc(cap, sizeof *t);
        if (!t)
            xrealloc(NULL, (size_t)-1 / 2); /* abort with the message */
        ha_block **ot = ha->table;
        ha->table = t;
        ha->table_mask = cap - 1;
        for (size_t i = 0; i < old; i++)
            for (ha_block *x = ot[i], *n; x; x = n) {
                n = x->hnext;
                size_t k = slot(ha, x->ptr);
                x->hnext = t[k];
                t[k] = x;
            }
        free(ot);
    }
    size_t k = slot(ha, b->ptr);
    b->hnext = ha->table[k];
    ha->table[k] = b;
}

static void table_remove(hostalloc *ha, ha_block *b)
{
    for (ha_block **pp = &ha->table[slot(ha, b->ptr)]; *pp; pp = &(*pp)->hnext)
        if (*pp == b) {
            *pp = b->hnext;
            return;
        }
}

/* ---- blocks (mu held) ---- */

static void link_block(hostalloc *ha, ha_block *b)
{
    b->prev = NULL;
    b->next = ha->all;
    if (ha->all)
        ha->all->prev = b;
    ha->all = b;
    table_insert(ha, b);
    ha->nblocks++;
}

static void unlink_block(hostalloc *ha, ha_block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        ha->all = b->next;
    if (b->next)
        b->next->prev = b->prev;
    table_remove(ha, b);
    ha->nblocks--;
}

static void free_list_push(hostalloc *ha, ha_block *b)
{
    b->free_next = ha->free_list[b->index];
    ha->free_list[b->index] = b;
}

/* ---- the event queue (mu held) ---- */

static void queue_push_front(hostalloc *ha, devevent ev, ha_block *b)
{
    if (ha->qn == ha->qcap) {
        size_t cap = ha->qcap ? ha->qcap * 2 : 16;
        ha_event *nq = xrealloc(NULL, cap * sizeof *nq);
        for (size_t i = 0; i < ha->qn; i++)
            nq[i] = ha->q[(ha->head + i) % ha->qcap];
        free(ha->q);
        ha->q = nq;
        ha->qcap = cap;
        ha->head = 0;
    }
    ha->head = (ha->head + ha->qcap - 1) % ha->qcap;
    ha->q[ha->head] = (ha_event){ev, b};
    ha->qn++;
}

static ha_event *queue_back(hostalloc *ha) { return &ha->q[(ha->head + ha->qn - 1) % ha->qcap]; }

/* process_events(): from the back (the oldest event), stop at the first that is not complete. A block whose
 * last event completes joins its free list and leaves the active stats (with Q2's +1). */
static oom_status process_events(hostalloc *ha)
{
    while (ha->qn) {
        ha_event e = *queue_back(ha);
        bool done = false;
        oom_status st = device_event_query(ha->dev, e.ev, &done);
        if (st != OOM_OK)
            return st;
        if (!done)
            return OOM_OK;
        ha->qn--;
        (void)device_event_destroy(ha->dev, e.ev); /* PyTorch returns it to its event pool */
        ha_block *b = e.block;
        if (--b->event_count == 0) {
            free_list_push(ha, b);
            stat_decrease(&ha->active_bucket[b->index], 1);
            /* Q2: PyTorch passes size (-1 here) where it means block->size_. */
            stat_decrease(&ha->active_bytes_bucket[b->index], -1);
            ha->returned[b->index]++;
        }
    }
    return OOM_OK;
}

/* ---- device memory: allocate_host_memory and free_block ---- */

typedef struct map_job {
    unsigned char *ptr;
    size_t size, i, n;
} map_job;

/* mapPagesForRegister: fault in thread i's share of the pages by writing their first byte. */
static void *map_pages(void *arg)
{
    const map_job *j = arg;
    uintptr_t start = (uintptr_t)j->ptr + j->size * j->i / j->n;
    uintptr_t end = start + j->size / j->n;
    if (j->i == j->n - 1)
        end = (uintptr_t)j->ptr + j->size;
    uintptr_t p = (start + HOSTALLOC_PAGE - 1) & ~(uintptr_t)(HOSTALLOC_PAGE - 1);
    for (; p < end; p += HOSTALLOC_PAGE)
        *(volatile unsigned char *)p = 0;
    return NULL;
}

/* allocWithCudaHostRegister: malloc, touch every page (on n threads when the block has at least n pages), then
 * cudaHostRegister. Unlike PyTorch, a failed register frees the malloc'd memory. */
static oom_status alloc_with_host_register(hostalloc *ha, size_t size, void **out)
{
    unsigned char *p = malloc(size);
    if (!p)
        return OOM_ENOMEM_PINNED; /* the host cannot back it, so it cannot be pinned */
    size_t n = ha->opt.num_register_threads;
    if (n > 1 && size >= HOSTALLOC_PAGE * n) {
        pthread_t th[HOSTALLOC_MAX_REGISTER_THREADS];
        map_job jobs[HOSTALLOC_MAX_REGISTER_THREADS];
        size_t started = 0;
        for (size_t i = 0; i < n; i++) {
            jobs[i] = (map_job){p, size, i, n};
            if (pthread_create(&th[i], NULL, map_pages, &jobs[i]) == 0)
                started = i + 1;
            else
                break;
        }
        for (size_t i = started; i < n; i++) /* no thread: this one does the share */
            map_pages(&jobs[i]);
        for (size_t i = 0; i < started; i++)
            pthread_join(th[i], NULL);
    } else {
        map_job j = {p, size, 0, 1};
        map_pages(&j);
    }
    oom_status st = device_host_register(ha->dev, p, size);
    if (st != OOM_OK) {
        free(p);
        return st;
    }
    *out = p;
    return OOM_OK;
}

/* allocate_host_memory_slowpath: cudaHostAlloc or the register path, timed into host_alloc_time. */
static oom_status alloc_slowpath(hostalloc *ha, size_t size, void **out, bool *registered)
{
    int64_t t0 = now_us();
    bool reg = ha->opt.use_host_register;
    oom_status st = reg ? alloc_with_host_register(ha, size, out) : device_host_alloc(ha->dev, size, out);
    if (st != OOM_OK)
        return st;
    int64_t dt = now_us() - t0;
    pthread_mutex_lock(&ha->mu);
    duration_increase(&ha->host_alloc_time, dt);
    pthread_mutex_unlock(&ha->mu);
    *registered = reg;
    return OOM_OK;
}

/* allocate_host_memory: the reserve segment first (made on the first call), then the slow path. */
static oom_status allocate_host_memory(hostalloc *ha, size_t size, void **out, bool *registered, bool *in_reserve)
{
    *in_reserve = false;
    if (ha->opt.reserve_segment_bytes) {
        pthread_mutex_lock(&ha->reserve_mu);
        oom_status st = OOM_OK;
        if (!ha->reserve) { /* a failed creation is tried again by the next miss, as PyTorch's static init */
            void *r = NULL;
            bool reg = false;
            st = alloc_slowpath(ha, ha->opt.reserve_segment_bytes, &r, &reg);
            if (st == OOM_OK) {
                pthread_mutex_lock(&ha->mu);
                ha->reserve = r;
                ha->reserve_size = ha->opt.reserve_segment_bytes;
                ha->reserve_registered = reg;
                ha->pinned_bytes += ha->reserve_size;
                pthread_mutex_unlock(&ha->mu);
            }
        }
        if (st == OOM_OK) {
            size_t rounded = (size + HOSTALLOC_PAGE - 1) & ~(HOSTALLOC_PAGE - 1);
            if (size <= SIZE_MAX - HOSTALLOC_PAGE && rounded <= ha->reserve_size - ha->reserve_carved) {
                *out = (unsigned char *)ha->reserve + ha->reserve_carved;
                pthread_mutex_lock(&ha->mu);
                ha->reserve_carved += rounded;
                pthread_mutex_unlock(&ha->mu);
                *in_reserve = true;
                *registered = false;
            }
        }
        pthread_mutex_unlock(&ha->reserve_mu);
        if (st != OOM_OK || *in_reserve)
            return st;
    }
    return alloc_slowpath(ha, size, out, registered);
}

/* Give a segment back to the device: cudaHostUnregister + free, or cudaFreeHost. */
static oom_status release_memory(hostalloc *ha, void *p, bool registered)
{
    if (!registered)
        return device_host_free(ha->dev, p);
    oom_status st = device_host_unregister(ha->dev, p);
    if (st == OOM_OK)
        free(p);
    return st;
}

/* free_block: reserve blocks stay; others go back to the device, timed into host_free_time. */
static oom_status free_block(hostalloc *ha, ha_block *b)
{
    if (b->in_reserve)
        return OOM_OK;
    int64_t t0 = now_us();
    oom_status st = release_memory(ha, b->ptr, b->registered);
    int64_t dt = now_us() - t0;
    if (st == OOM_OK) {
        pthread_mutex_lock(&ha->mu);
        duration_increase(&ha->host_free_time, dt);
        pthread_mutex_unlock(&ha->mu);
    }
    return st;
}

/* ---- the public calls ---- */

void hostalloc_options_from_conf(const alloc_conf *c, hostalloc_options *o)
{
    memset(o, 0, sizeof *o);
    o->use_host_register = c->pinned_use_host_register;
    o->num_register_threads = c->pinned_num_register_threads;
    o->reserve_segment_bytes = c->pinned_reserve_segment_size;
}

oom_status hostalloc_new(device *dev, const hostalloc_options *opt, hostalloc **out)
{
    if (!dev || !out)
        return OOM_EINVAL;
    hostalloc_options o = {0};
    if (opt)
        o = *opt;
    if (o.num_register_threads == 0)
        o.num_register_threads = 1;
    if (o.num_register_threads > HOSTALLOC_MAX_REGISTER_THREADS ||
        (o.num_register_threads & (o.num_register_threads - 1)) != 0)
        return OOM_EINVAL;
    hostalloc *ha = calloc(1, sizeof *ha);
    if (!ha)
        return OOM_ENOMEM_HOST;
    ha->table = calloc(64, sizeof *ha->table);
    if (!ha->table || pthread_mutex_init(&ha->mu, NULL) != 0) {
        free(ha->table);
        free(ha);
        return OOM_ENOMEM_HOST;
    }
    if (pthread_mutex_init(&ha->reserve_mu, NULL) != 0) {
        pthread_mutex_destroy(&ha->mu);
        free(ha->table);
        free(ha);
        return OOM_ENOMEM_HOST;
    }
    ha->table_mask = 63;
    ha->dev = dev;
    ha->opt = o;
    *out = ha;
    return OOM_OK;
}

void hostalloc_delete(hostalloc *ha)
{
    if (!ha)
        return;
    for (size_t i = 0; i < ha->qn; i++)
        (void)device_event_destroy(ha->dev, ha->q[(ha->head + i) % ha->qcap].ev);
    for (ha_block *b = ha->all, *n; b; b = n) {
        n = b->next;
        if (!b->in_reserve)
            (void)release_memory(ha, b->ptr, b->registered);
        free(b->streams);
        free(b);
    }
    if (ha->reserve)
        (void)release_memory(ha, ha->reserve, ha->reserve_registered);
    free(ha->q);
    free(ha->table);
    pthread_mutex_destroy(&ha->mu);
    pthread_mutex_destroy(&ha->reserve_mu);
    free(ha);
}

oom_status hostalloc_malloc(hostalloc *ha, size_t nbytes, void **out)
{
    if (!ha || !out)
        return OOM_EINVAL;
    if (nbytes == 0) {
        *out = NULL;
        return OOM_OK;
    }
    if (nbytes > ((size_t)1 << 63))
        return OOM_ENOMEM_PINNED; /* no power of two holds it */
    size_t size = pow2_ceil(nbytes);
    unsigned index = log2_exact(size);

    /* process_events, then get_free_block: the top of the list (LIFO). */
    pthread_mutex_lock(&ha->mu);
    oom_status st = process_events(ha);
    ha_block *b = st == OOM_OK ? ha->free_list[index] : NULL;
    if (b) {
        ha->free_list[index] = b->free_next;
        b->free_next = NULL;
        b->allocated = true;
        stat_increase(&ha->active_bucket[index], 1);
        stat_increase(&ha->active_bytes_bucket[index], (int64_t)size);
        *out = b->ptr;
    }
    pthread_mutex_unlock(&ha->mu);
    if (st != OOM_OK || b) {
        debug_check(ha);
        return st;
    }

    /* The slow path, outside the lock. */
    void *p = NULL;
    bool registered = false, in_reserve = false;
    st = allocate_host_memory(ha, size, &p, &registered, &in_reserve);
    if (st != OOM_OK)
        return st;
    b = calloc(1, sizeof *b);
    if (!b)
        xrealloc(NULL, (size_t)-1 / 2); /* abort with the message */
    *b = (ha_block){.ptr = p, .size = size, .index = index, .allocated = true, .registered = registered,
                    .in_reserve = in_reserve};

    /* add_allocated_block */
    pthread_mutex_lock(&ha->mu);
    link_block(ha, b);
    if (!in_reserve)
        ha->pinned_bytes += size;
    stat_increase(&ha->allocations, 1);
    stat_increase(&ha->allocated_bytes, (int64_t)size);
    stat_increase(&ha->allocation_bucket[index], 1);
    stat_increase(&ha->allocated_bytes_bucket[index], (int64_t)size);
    stat_increase(&ha->active_bucket[index], 1);
    stat_increase(&ha->active_bytes_bucket[index], (int64_t)size);
    pthread_mutex_unlock(&ha->mu);
    *out = p;
    debug_check(ha);
    return OOM_OK;
}

oom_status hostalloc_free(hostalloc *ha, void *ptr)
{
    if (!ha)
        return OOM_EINVAL;
    if (!ptr)
        return OOM_OK;
    oom_status first = OOM_OK;
    pthread_mutex_lock(&ha->mu);
    ha_block *b = table_find(ha, ptr);
    if (!b || !b->allocated) {
        pthread_mutex_unlock(&ha->mu);
        return OOM_EINVAL;
    }
    b->allocated = false;
    for (size_t i = 0; i < b->nstreams; i++) {
        devevent ev = 0;
        oom_status st = device_event_record(ha->dev, b->streams[i], &ev);
        if (st == OOM_OK) {
            queue_push_front(ha, ev, b);
            b->event_count++;
        } else {
            /* Without an event, wait for the stream: the block is then safe to reuse. */
            (void)device_stream_synchronize(ha->dev, b->streams[i]);
            if (first == OOM_OK)
                first = st;
        }
    }
    b->nstreams = 0;
    if (b->event_count == 0) {
        free_list_push(ha, b);
        ha->unreturned[b->index]++; /* Q1: the active stats keep it */
    }
    pthread_mutex_unlock(&ha->mu);
    debug_check(ha);
    return first;
}

oom_status hostalloc_record_event(hostalloc *ha, void *ptr, devstream s)
{
    if (!ha || !ptr)
        return OOM_EINVAL;
    pthread_mutex_lock(&ha->mu);
    ha_block *b = table_find(ha, ptr);
    oom_status st = (b && b->allocated) ? OOM_OK : OOM_EINVAL;
    if (st == OOM_OK) {
        bool known = false;
        for (size_t i = 0; i < b->nstreams; i++)
            known |= b->streams[i] == s;
        if (!known) {
            if (b->nstreams == b->capstreams) {
                b->capstreams = b->capstreams ? b->capstreams * 2 : 2;
                b->streams = xrealloc(b->streams, b->capstreams * sizeof *b->streams);
            }
            b->streams[b->nstreams++] = s;
        }
    }
    pthread_mutex_unlock(&ha->mu);
    debug_check(ha);
    return st;
}

size_t hostalloc_block_size(hostalloc *ha, const void *ptr)
{
    if (!ha || !ptr)
        return 0;
    pthread_mutex_lock(&ha->mu);
    const ha_block *b = table_find(ha, ptr);
    size_t n = (b && b->allocated) ? b->size : 0;
    pthread_mutex_unlock(&ha->mu);
    return n;
}

oom_status hostalloc_empty_cache(hostalloc *ha)
{
    if (!ha)
        return OOM_EINVAL;
    /* Under the lock: process the events, take every cached block out of the allocator and out of the stats
     * (free_from_pool); then give the memory back without it. */
    pthread_mutex_lock(&ha->mu);
    oom_status first = process_events(ha);
    ha_block *gone = NULL;
    for (unsigned i = 0; i < NB; i++) {
        while (ha->free_list[i]) {
            ha_block *b = ha->free_list[i];
            ha->free_list[i] = b->free_next;
            unlink_block(ha, b);
            if (!b->in_reserve)
                ha->pinned_bytes -= b->size; /* gone from us, even if the device refuses it */
            stat_decrease(&ha->allocations, 1);
            stat_decrease(&ha->allocated_bytes, (int64_t)b->size);
            stat_decrease(&ha->allocation_bucket[i], 1);
            stat_decrease(&ha->allocated_bytes_bucket[i], (int64_t)b->size);
            b->free_next = gone;
            gone = b;
        }
    }
    pthread_mutex_unlock(&ha->mu);
    for (ha_block *b = gone, *n; b; b = n) {
        n = b->free_next;
        oom_status st = free_block(ha, b);
        if (first == OOM_OK)
            first = st;
        free(b->streams);
        free(b);
    }
    debug_check(ha);
    return first;
}

/* getStats' add_bucket_stats: peaks add up too (Q3). */
static void add_bucket(memstat *acc, const memstat *s)
{
    acc->allocated += s->allocated;
    acc->current += s->current;
    acc->freed += s->freed;
    acc->peak += s->peak;
}

void hostalloc_get_stats(hostalloc *ha, hostalloc_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!ha)
        return;
    pthread_mutex_lock(&ha->mu);
    out->allocations = ha->allocations;
    out->allocated_bytes = ha->allocated_bytes;
    out->num_host_alloc = ha->allocations.allocated;
    out->num_host_free = ha->allocations.freed;
    for (unsigned i = 0; i < NB; i++) {
        add_bucket(&out->active_requests, &ha->active_bucket[i]);
        add_bucket(&out->active_bytes, &ha->active_bytes_bucket[i]);
    }
    out->host_alloc_time = ha->host_alloc_time;
    out->host_free_time = ha->host_free_time;
    pthread_mutex_unlock(&ha->mu);
}

static void reset_accumulated(memstat *s) { s->allocated = s->freed = 0; }
static void reset_peak(memstat *s) { s->peak = s->current; }

void hostalloc_reset_accumulated(hostalloc *ha)
{
    if (!ha)
        return;
    pthread_mutex_lock(&ha->mu);
    reset_accumulated(&ha->allocations);
    reset_accumulated(&ha->allocated_bytes);
    for (unsigned i = 0; i < NB; i++) {
        reset_accumulated(&ha->active_bucket[i]);
        reset_accumulated(&ha->active_bytes_bucket[i]);
        reset_accumulated(&ha->allocation_bucket[i]);
        reset_accumulated(&ha->allocated_bytes_bucket[i]);
    }
    ha->host_alloc_time.total = ha->host_alloc_time.count = 0;
    ha->host_free_time.total = ha->host_free_time.count = 0;
    ha->accumulated_reset = true;
    pthread_mutex_unlock(&ha->mu);
    debug_check(ha);
}

void hostalloc_reset_peak(hostalloc *ha)
{
    if (!ha)
        return;
    pthread_mutex_lock(&ha->mu);
    reset_peak(&ha->allocations);
    reset_peak(&ha->allocated_bytes);
    for (unsigned i = 0; i < NB; i++) {
        reset_peak(&ha->active_bucket[i]);
        reset_peak(&ha->active_bytes_bucket[i]);
        reset_peak(&ha->allocation_bucket[i]);
        reset_peak(&ha->allocated_bytes_bucket[i]);
    }
    ha->host_alloc_time.min = ha->host_alloc_time.max = 0;
    ha->host_free_time.min = ha->host_free_time.max = 0;
    pthread_mutex_unlock(&ha->mu);
    debug_check(ha);
}

void hostalloc_usage_get(hostalloc *ha, hostalloc_usage *out)
{
    memset(out, 0, sizeof *out);
    if (!ha)
        return;
    pthread_mutex_lock(&ha->mu);
    for (const ha_block *b = ha->all; b; b = b->next) {
        if (b->allocated) {
            out->live_blocks++;
            out->live_bytes += b->size;
        } else if (b->event_count) {
            out->pending_blocks++;
            out->pending_bytes += b->size;
        } else {
            out->cached_blocks++;
            out->cached_bytes += b->size;
        }
    }
    out->reserve_bytes = ha->reserve_size;
    out->reserve_carved = ha->reserve_carved;
    out->pinned_bytes = ha->pinned_bytes;
    pthread_mutex_unlock(&ha->mu);
}

const hostalloc_options *hostalloc_get_options(const hostalloc *ha) { return ha ? &ha->opt : NULL; }

/* ---- host_memory_stats() keys ---- */

/* Module.cpp's nested dict flattened with "." and sorted, as torch.cuda.host_memory_stats() returns it. */
static const char *const key_names[HOSTALLOC_NKEYS] = {
    "active_bytes.allocated",    "active_bytes.current",    "active_bytes.freed",    "active_bytes.peak",
    "active_requests.allocated", "active_requests.current", "active_requests.freed", "active_requests.peak",
    "allocated_bytes.allocated", "allocated_bytes.current", "allocated_bytes.freed", "allocated_bytes.peak",
    "allocations.allocated",     "allocations.current",     "allocations.freed",     "allocations.peak",
    "host_alloc_time.avg",       "host_alloc_time.count",   "host_alloc_time.max",   "host_alloc_time.min",
    "host_alloc_time.total",     "host_free_time.avg",      "host_free_time.count",  "host_free_time.max",
    "host_free_time.min",        "host_free_time.total",    "num_host_alloc",        "num_host_free",
};

static int64_t stat_field(const memstat *s, size_t f)
{
    return f == 0 ? s->allocated : f == 1 ? s->current : f == 2 ? s->freed : s->peak;
}

/* durationStatToDict, fields in sorted order: avg, count, max, min, total. */
static int64_t dur_field(const hostalloc_duration *d, size_t f)
{
    switch (f) {
    case 0:
        return d->count == 0 ? 0 : d->total / d->count;
    case 1:
        return d->count;
    case 2:
        return d->max;
    case 3:
        return d->min;
    default:
        return d->total;
    }
}

bool hostalloc_stats_key(const hostalloc_stats *s, size_t i, const char **key, int64_t *value)
{
    if (!s || i >= HOSTALLOC_NKEYS)
        return false;
    const memstat *st[4] = {&s->active_bytes, &s->active_requests, &s->allocated_bytes, &s->allocations};
    const hostalloc_duration *du[2] = {&s->host_alloc_time, &s->host_free_time};
    int64_t v;
    if (i < 16)
        v = stat_field(st[i / 4], i % 4);
    else if (i < 26)
        v = dur_field(du[(i - 16) / 5], (i - 16) % 5);
    else
        v = i == 26 ? s->num_host_alloc : s->num_host_free;
    if (key)
        *key = key_names[i];
    if (value)
        *value = v;
    return true;
}

bool hostalloc_stats_get(const hostalloc_stats *s, const char *key, int64_t *value)
{
    if (!s || !key)
        return false;
    for (size_t i = 0; i < HOSTALLOC_NKEYS; i++)
        if (strcmp(key, key_names[i]) == 0)
            return hostalloc_stats_key(s, i, NULL, value);
    return false;
}

/* ---- the validator ---- */

/* H7 for one stat; slack: how far Q2 may have lifted current above the peak. */
static bool stat_ok(const memstat *s, bool identity, int64_t slack)
{
    return s->peak + slack >= s->current && s->current >= 0 &&
           (!identity || s->current == s->allocated - s->freed);
}

oom_status hostalloc_check(hostalloc *ha)
{
    if (!ha)
        return OOM_EINVAL;
    oom_status rc = OOM_OK;
    pthread_mutex_lock(&ha->mu);
    uint64_t mark = ++ha->check_epoch;
    int64_t n_blocks[NB] = {0}, n_bytes[NB] = {0}, n_active[NB] = {0};
    size_t total = 0, nblocks = 0, outside = 0;
    bool identity = !ha->accumulated_reset;

    /* H2: the free lists (each block once, cached, of the right index) */
    for (unsigned i = 0; i < NB; i++)
        for (ha_block *b = ha->free_list[i]; b; b = b->free_next) {
            OOM_CHECK(b->index == i, "block %p on free list %u has index %u", b->ptr, i, b->index);
            OOM_CHECK(b->mark != mark, "block %p twice on the free lists", b->ptr);
            OOM_CHECK(!b->allocated && b->event_count == 0, "block %p on a free list is live or pending", b->ptr);
            OOM_CHECK(table_find(ha, b->ptr) == b, "block %p on a free list is not in the table", b->ptr);
            b->mark = mark;
        }
    /* H3: the queue, counted per block */
    for (ha_block *b = ha->all; b; b = b->next)
        b->queued = 0;
    for (size_t k = 0; k < ha->qn; k++) {
        ha_event *e = &ha->q[(ha->head + k) % ha->qcap];
        OOM_CHECK(e->ev != 0 && e->block && table_find(ha, e->block->ptr) == e->block, "queue entry %zu: bad", k);
        OOM_CHECK(!e->block->allocated, "queue entry %zu: block %p is live", k, e->block->ptr);
        e->block->queued++;
    }
    /* H1, H2, H3 per block */
    for (ha_block *b = ha->all; b; b = b->next) {
        OOM_CHECK(b->ptr && b->size && (b->size & (b->size - 1)) == 0 && b->index < NB &&
                  ((size_t)1 << b->index) == b->size,
              "block %p: size %zu, index %u", b->ptr, b->size, b->index);
        OOM_CHECK(table_find(ha, b->ptr) == b, "block %p not in the table", b->ptr);
        OOM_CHECK(!b->allocated || b->event_count == 0, "live block %p has pending events", b->ptr);
        OOM_CHECK(b->allocated || b->nstreams == 0, "freed block %p still has streams", b->ptr);
        bool cached = !b->allocated && b->event_count == 0;
        OOM_CHECK(cached == (b->mark == mark), "block %p: cached %d but on a free list %d", b->ptr, cached,
              b->mark == mark);
        OOM_CHECK(b->queued == b->event_count, "block %p: %zu events queued, event_count %zu", b->ptr, b->queued,
              b->event_count);
        if (b->in_reserve)
            OOM_CHECK(ha->reserve && (unsigned char *)b->ptr >= (unsigned char *)ha->reserve &&
                      (unsigned char *)b->ptr + b->size <= (unsigned char *)ha->reserve + ha->reserve_carved,
                  "reserve block %p outside the carved reserve", b->ptr);
        else
            outside += b->size;
        n_blocks[b->index]++;
        n_bytes[b->index] += (int64_t)b->size;
        if (!cached)
            n_active[b->index]++;
        total += b->size;
        nblocks++;
    }
    OOM_CHECK(nblocks == ha->nblocks, "%zu blocks listed, %zu counted", nblocks, ha->nblocks);
    {
        size_t in_table = 0;
        for (size_t i = 0; i <= ha->table_mask; i++)
            for (const ha_block *b = ha->table[i]; b; b = b->hnext)
                in_table++;
        OOM_CHECK(in_table == nblocks, "table holds %zu blocks, %zu listed", in_table, nblocks);
    }
    /* H4 */
    OOM_CHECK(ha->allocations.current == (int64_t)nblocks, "allocations.current %lld != %zu blocks",
          (long long)ha->allocations.current, nblocks);
    OOM_CHECK(ha->allocated_bytes.current == (int64_t)total, "allocated_bytes.current %lld != %zu",
          (long long)ha->allocated_bytes.current, total);
    /* H6 */
    OOM_CHECK(ha->pinned_bytes == outside + ha->reserve_size, "pinned %zu != %zu outside the reserve + %zu",
          ha->pinned_bytes, outside, ha->reserve_size);
    OOM_CHECK(ha->reserve_carved <= ha->reserve_size, "reserve carved past its end");
    /* H4, H5, H7 per power */
    OOM_CHECK(stat_ok(&ha->allocations, identity, 0) && stat_ok(&ha->allocated_bytes, identity, 0),
          "aggregate stat broken");
    for (unsigned i = 0; i < NB; i++) {
        OOM_CHECK(ha->allocation_bucket[i].current == n_blocks[i], "allocation[2^%u] %lld != %lld", i,
              (long long)ha->allocation_bucket[i].current, (long long)n_blocks[i]);
        OOM_CHECK(ha->allocated_bytes_bucket[i].current == n_bytes[i], "allocated_bytes[2^%u] wrong", i);
        int64_t n = n_active[i] + ha->unreturned[i];
        OOM_CHECK(ha->active_bucket[i].current == n, "active[2^%u] %lld != %lld live+pending+unreturned", i,
              (long long)ha->active_bucket[i].current, (long long)n);
        int64_t r = ha->returned[i], want_bytes = r + (int64_t)((uint64_t)(n + r) << i);
        OOM_CHECK(ha->active_bytes_bucket[i].current == want_bytes, "active_bytes[2^%u] %lld != %lld", i,
              (long long)ha->active_bytes_bucket[i].current, (long long)want_bytes);
        OOM_CHECK(stat_ok(&ha->active_bucket[i], identity, 0) && stat_ok(&ha->active_bytes_bucket[i], identity, r) &&
                  stat_ok(&ha->allocation_bucket[i], identity, 0) &&
                  stat_ok(&ha->allocated_bytes_bucket[i], identity, 0),
              "stat of 2^%u broken (peak, sign or identity)", i);
    }
    OOM_CHECK(ha->host_alloc_time.count >= 0 && ha->host_free_time.count >= 0, "negative timing count");
out:
    pthread_mutex_unlock(&ha->mu);
    return rc;
}
