/* test_cachealloc_random.c - seeded random operation sequences under budget pressure.
 *
 * Suite "cachealloc_random": 100,000 mixed operations per configuration (malloc across every size band, free of
 * random live blocks, empty_cache, reset_peak) with cachealloc_check after every step and the byte counters
 * compared with an independent tally: requested, allocated (sum of block sizes), allocation count, peaks,
 * num_ooms, and reserved against the budget. OOMs and retries must happen.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "alloc/cachealloc.h"
#include "testutil.h"

#define STEPS 100000
#define MAXLIVE 128
#define BUDGET (256 * MiB)

static uint64_t sm64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static const size_t edge[] = {512,          513,          MiB,      MiB + 1,  2 * MiB,  10 * MiB - 1,
                              10 * MiB,     10 * MiB + 1, 11 * MiB, 20 * MiB, 40 * MiB, 40 * MiB + 1,
                              60 * MiB + 1, 1,            511,      2 * MiB + 1};

static size_t pick_size(uint64_t *s)
{
    uint64_t r = sm64(s) % 100;
    if (r < 12)
        return 1 + sm64(s) % 511;               /* below the quantum */
    if (r < 40)
        return 512 + sm64(s) % (MiB - 511);     /* small pool, up to 1 MiB */
    if (r < 70)
        return MiB + 1 + sm64(s) % (9 * MiB);   /* 20 MiB segments */
    if (r < 90)
        return 10 * MiB + sm64(s) % (30 * MiB); /* own segments */
    if (r < 96)
        return 40 * MiB + sm64(s) % (40 * MiB); /* oversize with max_split_size_mb:40 */
    return edge[sm64(s) % (sizeof edge / sizeof edge[0])];
}


/* ---- reference model -----------------------------------------------------------------------------------------
 * An independent, deliberately naive transcription of DeviceCachingAllocator (CUDACachingAllocator.cpp, 2.11) for
 * one stream: linear scans instead of std::set, the same decisions and Stat updates, cudaMalloc segments and
 * expandable ranges. Addresses of new segments and ranges are taken from the allocator under test (the returned
 * block is the segment's, or the range's, low end). */

typedef struct rblock {
    uint64_t ptr, size, req;
    int64_t gc_base;
    int prev, next, pool; /* pool: 0 small, 1 large */
    int es;               /* expandable range index, -1 for a cudaMalloc segment */
    bool alloc, used, mapped;
    uint64_t kd; /* ordering key - ptr, fixed when its segment was made (device_order_key, I7) */
} rblock;

typedef struct rrange {
    uint64_t base, page, npages;
    bool used;
} rrange;

typedef struct ref {
    rblock *b;
    int nb, cap;
    rrange es[8];
    memstats st;
    alloc_conf conf;
    size_t budget, held, total;
    int64_t gcount[2];
} ref;

/* The device under test: ties break by its ordering key (device_order_key: the address on sim, sim's model of the
 * driver's placement on cuda), as the allocator's do. The model runs after the allocator's call, when a segment
 * the call released no longer has a key, so each block keeps the offset its segment had when it was made. */
static const device *ref_dev;

static int stat_of(int pool) { return pool ? STAT_LARGE : STAT_SMALL; }

static void r_upd(memstat *a, int pool, int64_t x) { stat_array_update(a, stat_of(pool), x); }

static int r_new(ref *r, uint64_t ptr, uint64_t size, int pool, int es)
{
    int i = 0;
    while (i < r->nb && r->b[i].used)
        i++;
    if (i == r->nb) {
        if (r->nb == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 256;
            r->b = realloc(r->b, (size_t)r->cap * sizeof *r->b);
            cr_assert_not_null(r->b);
        }
        r->nb++;
    }
    r->b[i] = (rblock){.ptr = ptr, .size = size, .prev = -1, .next = -1, .pool = pool, .es = es, .used = true,
                       .mapped = true, .kd = device_order_key(ref_dev, ptr) - ptr};
    return i;
}

static bool r_split(const ref *r, int i) { return r->b[i].prev >= 0 || r->b[i].next >= 0; }

static bool r_gc_on(const ref *r) { return r->budget && r->conf.gc_threshold > 0.0; }

/* in the pool's `blocks` set: free and mapped */
static bool r_free_in(const ref *r, int i, int pool)
{
    const rblock *x = &r->b[i];
    return x->used && !x->alloc && x->mapped && x->pool == pool;
}

/* A block's ordering key, as the allocator ranks it (ca_block.key). */
static uint64_t K(const rblock *x) { return x->ptr + x->kd; }

static bool r_less(const rblock *x, const rblock *y)
{
    return x->size < y->size || (x->size == y->size && K(x) < K(y));
}

static size_t r_round(const ref *r, size_t n)
{
    if (n < 512)
        return 512;
    size_t d = alloc_conf_divisions(&r->conf, n);
    if (d > 1 && n > 512 * d) {
        if ((n & (n - 1)) == 0)
            return n;
        size_t fl = (size_t)1 << (63 - __builtin_clzll(n));
        size_t step = fl >> (63 - __builtin_clzll(d));
        if (step == 0)
            return fl << 1;
        size_t lo = n & ~(step - 1);
        return lo == n ? n : lo + step;
    }
    return 512 * ((n + 511) / 512);
}

/* first block of the `blocks` set with (size, ptr) >= (key, 0); -1 if none */
static int r_lower_bound(const ref *r, int pool, uint64_t key)
{
    int best = -1;
    for (int i = 0; i < r->nb; i++)
        if (r_free_in(r, i, pool) && r->b[i].size >= key && (best < 0 || r_less(&r->b[i], &r->b[best])))
            best = i;
    return best;
}

/* in-order successor of cur in the `blocks` set */
static int r_next(const ref *r, int pool, int cur)
{
    int best = -1;
    for (int i = 0; i < r->nb; i++)
        if (r_free_in(r, i, pool) && r_less(&r->b[cur], &r->b[i]) && (best < 0 || r_less(&r->b[i], &r->b[best])))
            best = i;
    return best;
}

/* in-order predecessor of cur (the maximum if cur < 0) */
static int r_prev(const ref *r, int pool, int cur)
{
    int best = -1;
    for (int i = 0; i < r->nb; i++)
        if (r_free_in(r, i, pool) && (cur < 0 || r_less(&r->b[i], &r->b[cur])) &&
            (best < 0 || r_less(&r->b[best], &r->b[i])))
            best = i;
    return best;
}

static uint64_t r_exp_size(const ref *r, int i)
{
    int n = r->b[i].next;
    return r->b[i].size + (n >= 0 && !r->b[n].mapped ? r->b[n].size : 0);
}

static int r_get_free_block(ref *r, int pool, size_t size)
{
    if (r_gc_on(r))
        r->gcount[pool]++;
    int it = r_lower_bound(r, pool, size);
    if (it < 0)
        return -1;
    if (r->b[it].es >= 0) {
        if (r->conf.expandable_segments) {
            int nx = r_next(r, pool, it);
            while (r->b[it].es >= 0 && nx >= 0 && r_exp_size(r, nx) < r_exp_size(r, it)) {
                it = nx;
                nx = r_next(r, pool, nx);
            }
        } else {
            do
                it = r_next(r, pool, it);
            while (it >= 0 && r->b[it].es >= 0);
            if (it < 0)
                return -1;
        }
    }
    size_t ms = r->conf.max_split_size;
    if (size < ms && r->b[it].size >= ms)
        return -1;
    if (size >= ms && r->b[it].size >= size + r->conf.max_non_split_rounding)
        return -1;
    return it;
}

/* try_merge_blocks: dst absorbs src; returns the bytes absorbed */
static uint64_t r_merge(ref *r, int dst, int src)
{
    if (src < 0 || r->b[src].alloc || r->b[src].mapped != r->b[dst].mapped)
        return 0;
    rblock *x = &r->b[dst], *s = &r->b[src];
    if (x->prev == src) {
        x->ptr = s->ptr;
        x->prev = s->prev;
        if (x->prev >= 0)
            r->b[x->prev].next = dst;
    } else {
        x->next = s->next;
        if (x->next >= 0)
            r->b[x->next].prev = dst;
    }
    x->size += s->size;
    s->used = false;
    return s->size;
}

/* put a fresh block j between a and c (either may be -1) */
static void r_splice(ref *r, int j, int a, int c)
{
    r->b[j].prev = a;
    r->b[j].next = c;
    if (a >= 0)
        r->b[a].next = j;
    if (c >= 0)
        r->b[c].prev = j;
}

static void r_release_block(ref *r, int i)
{
    rblock *x = &r->b[i];
    r->st.num_device_free++;
    r->held -= x->size;
    r_upd(r->st.segment, x->pool, -1);
    r_upd(r->st.reserved_bytes, x->pool, -(int64_t)x->size);
    if (x->size >= r->conf.max_split_size)
        stat_decrease(&r->st.oversize_segments, 1);
    x->used = false;
}

static void r_garbage_collect(ref *r)
{
    size_t thr = (size_t)(r->conf.gc_threshold * (double)r->budget);
    if (r->held <= thr)
        return;
    size_t target = r->held - thr, reclaimed = 0, total_age = 0;
    int count = 0;
    for (int i = 0; i < r->nb; i++)
        if (r_free_in(r, i, 1) && !r_split(r, i)) {
            total_age += (size_t)(r->gcount[1] - r->b[i].gc_base);
            count++;
        }
    if (count == 0)
        return;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double thr_age = (double)total_age / count;
        freed = false;
        for (int i = 0; i < r->nb; i++) {
            if (!r_free_in(r, i, 1) || r_split(r, i) || r->b[i].es >= 0)
                continue;
            size_t age = (size_t)(r->gcount[1] - r->b[i].gc_base);
            if ((double)age >= thr_age) {
                freed = true;
                reclaimed += r->b[i].size;
                total_age -= age;
                count--;
                r_release_block(r, i);
            }
        }
    }
}

/* map_block: map the pages covering [b->ptr, +size) of an unmapped block, merge with free neighbours */
static int r_map_block(ref *r, int i, uint64_t size)
{
    rblock *x = &r->b[i];
    const rrange *g = &r->es[x->es];
    uint64_t mapped = (size + g->page - 1) / g->page * g->page;
    x->mapped = true;
    if (mapped < x->size) {
        int j = r_new(r, x->ptr + mapped, x->size - mapped, x->pool, x->es);
        x = &r->b[i];
        r->b[j].mapped = false;
        r_splice(r, j, i, x->next);
        x->size = mapped;
    }
    int prev = x->prev;
    if (r_merge(r, i, prev) == 0)
        prev = -1;
    r_merge(r, i, r->b[i].next);
    r->b[i].gc_base = r->gcount[r->b[i].pool];
    r->held += mapped;
    r_upd(r->st.reserved_bytes, r->b[i].pool, (int64_t)mapped);
    r->st.num_device_alloc++;
    return i;
}

/* find_expandable_block + try_allocate_expandable_block; p is the address the allocator returned */
static int r_alloc_expandable(ref *r, int pool, uint64_t size, devptr p)
{
    int cand = -1;
    /* unmapped blocks of the pool, lowest address first */
    uint64_t after = 0;
    for (;;) {
        int c = -1;
        for (int i = 0; i < r->nb; i++) {
            const rblock *x = &r->b[i];
            if (x->used && !x->mapped && x->pool == pool && K(x) >= after && (c < 0 || K(x) < K(&r->b[c])))
                c = i;
        }
        if (c < 0)
            break;
        after = K(&r->b[c]) + 1;
        int start = c;
        int pv = r->b[c].prev;
        if (pv >= 0 && !r->b[pv].alloc)
            start = pv;
        uint64_t bytes = 0;
        for (int k = start; bytes < size && k >= 0 && !r->b[k].alloc; k = r->b[k].next)
            bytes += r->b[k].size;
        if (bytes >= size) {
            cand = start;
            break;
        }
    }
    if (cand < 0) { /* a new range; its first page lands at the returned address */
        int g = 0;
        while (g < 8 && r->es[g].used)
            g++;
        cr_assert_lt(g, 8);
        uint64_t page = pool == 0 ? CA_SMALL_BUFFER : r->conf.large_segment_size;
        uint64_t space = r->total + r->total / 8;
        r->es[g] = (rrange){.base = p, .page = page, .npages = (space + page - 1) / page, .used = true};
        cand = r_new(r, p, r->es[g].npages * page, pool, g);
        r->b[cand].mapped = false;
    }
    if (!r->b[cand].mapped)
        cand = r_map_block(r, cand, r->b[cand].size < size ? r->b[cand].size : size);
    while (r->b[cand].size < size) {
        uint64_t rem = size - r->b[cand].size;
        int nc = r->b[cand].next;
        cand = r_map_block(r, nc, rem < r->b[nc].size ? rem : r->b[nc].size);
    }
    return cand;
}

static bool r_budget_ok(ref *r, size_t alloc_size, bool retry)
{
    if (retry)
        r->st.num_alloc_retries++;
    return !(r->budget && r->held + alloc_size > r->budget); /* the device itself never runs out here */
}

static bool r_release_available(ref *r, int pool, size_t size)
{
    size_t ms = r->conf.max_split_size;
    if (ms == SIZE_MAX)
        return false;
    size_t key = size < ms ? ms : size;
    int it = r_lower_bound(r, pool, key);
    if (it >= 0 && r->b[it].es < 0) {
        r_release_block(r, it);
        return true;
    }
    size_t released = 0;
    for (int cur = r_prev(r, pool, it); cur >= 0 && released < key && r->b[cur].size >= ms;) {
        int nx = r_prev(r, pool, cur);
        if (r->b[cur].es < 0) {
            released += r->b[cur].size;
            r_release_block(r, cur);
        }
        cur = nx;
    }
    return released >= key;
}

static void r_unmap_block(ref *r, int i)
{
    rblock *x = &r->b[i];
    const rrange *g = &r->es[x->es];
    uint64_t first = (x->ptr - g->base + g->page - 1) / g->page, last = (x->ptr + x->size - g->base) / g->page;
    if (first >= last)
        return;
    uint64_t uptr = g->base + first * g->page, usize = (last - first) * g->page;
    uint64_t before = uptr - x->ptr, after = x->size - before - usize;
    if (before) {
        int j = r_new(r, x->ptr, before, x->pool, x->es);
        x = &r->b[i];
        r_splice(r, j, x->prev, i);
        r->b[j].gc_base = r->gcount[x->pool];
    }
    if (after) {
        int j = r_new(r, uptr + usize, after, x->pool, x->es);
        x = &r->b[i];
        r_splice(r, j, i, x->next);
        r->b[j].gc_base = r->gcount[x->pool];
    }
    x->ptr = uptr;
    x->size = usize;
    x->mapped = false;
    r_merge(r, i, r->b[i].prev);
    r_merge(r, i, r->b[i].next);
    r->held -= usize;
    r_upd(r->st.reserved_bytes, r->b[i].pool, -(int64_t)usize);
    r->st.num_device_free++;
}

static void r_release_blocks(ref *r, int pool)
{
    int list[4096], n = 0;
    for (int it = r_lower_bound(r, pool, 0); it >= 0;) {
        int nx = r_next(r, pool, it);
        if (r->b[it].es >= 0) {
            cr_assert_lt(n, 4096);
            list[n++] = it;
        } else if (!r_split(r, it)) {
            r_release_block(r, it);
        }
        it = nx;
    }
    for (int k = 0; k < n; k++) {
        int i = list[k];
        cr_assert(r->b[i].used, "model: a listed block was merged away");
        r_unmap_block(r, i);
        if (!r_split(r, i)) { /* the whole range is unmapped: release_expandable_segment */
            r->es[r->b[i].es].used = false;
            r->b[i].used = false;
        }
    }
}

static void r_release_cached(ref *r)
{
    r->st.num_sync_all_streams++;
    r_release_blocks(r, 1);
    r_release_blocks(r, 0);
}

/* Mirror one malloc; st/p are what the allocator under test returned. */
static void r_malloc(ref *r, size_t n, oom_status st, devptr p, long step)
{
    size_t size = r_round(r, n);
    int pool = size > CA_SMALL_SIZE;
    size_t alloc_size = size <= CA_SMALL_SIZE ? CA_SMALL_BUFFER
                        : size < CA_MIN_LARGE_ALLOC ? r->conf.large_segment_size
                                                    : CA_ROUND_LARGE * ((size + CA_ROUND_LARGE - 1) / CA_ROUND_LARGE);
    int i = r_get_free_block(r, pool, size);
    if (i >= 0) {
        if (st != OOM_OK || p != r->b[i].ptr)
            cr_assert_fail("step %ld: malloc(%zu) should reuse the free block at %#llx, got %s %#llx", step, n,
                           (unsigned long long)r->b[i].ptr, oom_status_str(st), (unsigned long long)p);
    } else {
        if (r_gc_on(r))
            r_garbage_collect(r);
        bool ok = r_budget_ok(r, alloc_size, false);
        if (!ok && r_release_available(r, pool, size))
            ok = r_budget_ok(r, alloc_size, false);
        if (!ok) {
            r_release_cached(r);
            ok = r_budget_ok(r, alloc_size, true);
        }
        if (!ok) {
            r->st.num_ooms++;
            if (st != OOM_ENOMEM_DEVICE)
                cr_assert_fail("step %ld: malloc(%zu) should OOM, got %s", step, n, oom_status_str(st));
            return;
        }
        if (st != OOM_OK)
            cr_assert_fail("step %ld: malloc(%zu) should succeed, got %s", step, n, oom_status_str(st));
        if (r->conf.expandable_segments) {
            i = r_alloc_expandable(r, pool, size, p);
        } else {
            for (int k = 0; k < r->nb; k++)
                if (r->b[k].used && p < r->b[k].ptr + r->b[k].size && r->b[k].ptr < p + alloc_size)
                    cr_assert_fail("step %ld: malloc(%zu) should get a new segment, got %#llx inside a cached one",
                                   step, n, (unsigned long long)p);
            i = r_new(r, p, alloc_size, pool, -1);
            r->held += alloc_size;
            r_upd(r->st.segment, pool, 1);
            r_upd(r->st.reserved_bytes, pool, (int64_t)alloc_size);
            if (alloc_size >= r->conf.max_split_size)
                stat_increase(&r->st.oversize_segments, 1);
            r->st.num_device_alloc++;
        }
    }
    /* alloc_found_block */
    bool already_split = r_split(r, i), exp = r->b[i].es >= 0;
    size_t remaining = r->b[i].size - size;
    bool split = (pool == 0 || r->conf.expandable_segments)
                     ? remaining >= 512
                     : (size < r->conf.max_split_size && remaining > CA_SMALL_SIZE);
    if (split) {
        int j = r_new(r, r->b[i].ptr, size, pool, r->b[i].es);
        r_splice(r, j, r->b[i].prev, i);
        rblock *rem = &r->b[i];
        rem->ptr += size;
        rem->size -= size;
        rem->gc_base = r->gcount[pool];
        if (already_split && !exp) {
            r_upd(r->st.inactive_split_bytes, pool, -(int64_t)size);
        } else if (!exp) {
            r_upd(r->st.inactive_split_bytes, pool, (int64_t)rem->size);
            r_upd(r->st.inactive_split, pool, 1);
        }
        i = j;
    } else if (already_split && !exp) {
        r_upd(r->st.inactive_split_bytes, pool, -(int64_t)r->b[i].size);
        r_upd(r->st.inactive_split, pool, -1);
    }
    rblock *x = &r->b[i];
    x->alloc = true;
    x->req = n;
    r_upd(r->st.allocation, pool, 1);
    r_upd(r->st.allocated_bytes, pool, (int64_t)x->size);
    r_upd(r->st.active, pool, 1);
    r_upd(r->st.active_bytes, pool, (int64_t)x->size);
    r_upd(r->st.requested_bytes, pool, (int64_t)n);
    if (x->size >= r->conf.max_split_size)
        stat_increase(&r->st.oversize_allocations, 1);
    if (x->ptr != p)
        cr_assert_fail("step %ld: malloc(%zu): block at %#llx, model %#llx", step, n, (unsigned long long)p,
                       (unsigned long long)x->ptr);
}

/* free + free_block */
static void r_free(ref *r, devptr p, long step)
{
    int i = 0;
    while (i < r->nb && !(r->b[i].used && r->b[i].alloc && r->b[i].ptr == p))
        i++;
    if (i == r->nb)
        cr_assert_fail("step %ld: the model has no block at %#llx", step, (unsigned long long)p);
    rblock *x = &r->b[i];
    int pool = x->pool;
    x->alloc = false;
    r_upd(r->st.allocation, pool, -1);
    r_upd(r->st.allocated_bytes, pool, -(int64_t)x->size);
    if (x->size >= r->conf.max_split_size)
        stat_decrease(&r->st.oversize_allocations, 1);
    uint64_t orig = x->size, req = x->req;
    int64_t nblocks = 0, nbytes = 0;
    int cand[2] = {x->prev, x->next};
    for (int k = 0; k < 2; k++) {
        uint64_t sub = r_merge(r, i, cand[k]);
        if (sub) {
            nblocks -= 1;
            nbytes -= (int64_t)sub;
        }
    }
    x = &r->b[i];
    x->gc_base = r->gcount[pool];
    if (r_split(r, i)) {
        nblocks += 1;
        nbytes += (int64_t)x->size;
    }
    if (x->es < 0) {
        r_upd(r->st.inactive_split, pool, nblocks);
        r_upd(r->st.inactive_split_bytes, pool, nbytes);
    }
    r_upd(r->st.active, pool, -1);
    r_upd(r->st.active_bytes, pool, -(int64_t)orig);
    r_upd(r->st.requested_bytes, pool, -(int64_t)req);
}

/* All 122 memory_stats() keys agree. */
static void r_compare(const ref *r, const memstats *m, long step, const char *what)
{
    for (size_t k = 0; k < MEMSTATS_NKEYS; k++) {
        const char *key = NULL;
        int64_t want = 0, got = 0;
        memstats_key(&r->st, k, &key, &want);
        memstats_key(m, k, NULL, &got);
        if (got != want)
            cr_assert_fail("step %ld (%s): %s = %lld, PyTorch model %lld", step, what, key, (long long)got,
                           (long long)want);
    }
}

typedef struct blk {
    devptr p;
    size_t n, bs;
} blk;

static void random_run(const char *conf, uint64_t seed, size_t slack, bool model)
{
    device *dev = test_device_open(0); /* an H100's size on both backends; the budget binds first */
    ref_dev = dev;
    cr_assert_not_null(dev);
    cachealloc_options o = {.budget_bytes = BUDGET};
    alloc_conf_default(&o.conf);
    char err[256] = "";
    cr_assert_eq(alloc_conf_parse(&o.conf, conf, err, sizeof err), OOM_OK, "%s", err);
    cachealloc *ca = NULL;
    cr_assert_eq(cachealloc_new(dev, &o, &ca), OOM_OK);
    const memstats *m = cachealloc_stats(ca);
    /* the cap is set_per_process_memory_fraction(BUDGET / total)'s: a byte short of BUDGET on an H100 */
    ref mdl = {.conf = o.conf, .budget = cachealloc_budget_cap(BUDGET, dev->total_bytes), .total = dev->total_bytes};
    mdl.st.max_split_size = o.conf.max_split_size == SIZE_MAX ? -1 : (int64_t)o.conf.max_split_size;

    blk live[MAXLIVE];
    size_t nlive = 0;
    int64_t req = 0, alloc = 0, peak_alloc = 0, peak_req = 0, ooms = 0, empties = 0;
    uint64_t s = seed;
    for (long step = 0; step < STEPS; step++) {
        uint64_t r = sm64(&s) % 1000;
        const char *what = "malloc";
        if ((r < 500 && nlive < MAXLIVE) || nlive == 0) {
            size_t n = pick_size(&s);
            devptr p = 0;
            oom_status st = cachealloc_malloc(ca, n, &p);
            if (model)
                r_malloc(&mdl, n, st, p, step);
            if (st == OOM_OK) {
                size_t bs = cachealloc_block_size(ca, p);
                if (p == 0 || bs < n || bs % 512 != 0)
                    cr_assert_fail("step %ld: malloc(%zu) gave %#llx, block %zu", step, n, (unsigned long long)p, bs);
                live[nlive++] = (blk){p, n, bs};
                req += (int64_t)n;
                alloc += (int64_t)bs;
            } else if (st == OOM_ENOMEM_DEVICE) {
                ooms++;
                if (cachealloc_last_oom(ca)->requested != n)
                    cr_assert_fail("step %ld: OOM record for %zu", step, cachealloc_last_oom(ca)->requested);
            } else {
                cr_assert_fail("step %ld: malloc(%zu): %s", step, n, oom_status_str(st));
            }
        } else if (r < 985) {
            what = "free";
            size_t i = (size_t)(sm64(&s) % nlive);
            if (cachealloc_free(ca, live[i].p) != OOM_OK)
                cr_assert_fail("step %ld: free failed", step);
            if (model)
                r_free(&mdl, live[i].p, step);
            req -= (int64_t)live[i].n;
            alloc -= (int64_t)live[i].bs;
            live[i] = live[--nlive];
        } else if (r < 993) {
            what = "empty_cache";
            cachealloc_empty_cache(ca);
            empties++;
            if (model)
                r_release_cached(&mdl);
        } else {
            what = "reset_peak";
            cachealloc_reset_peak(ca);
            memstats_reset_peak(&mdl.st);
            peak_alloc = alloc;
            peak_req = req;
        }
        if (alloc > peak_alloc)
            peak_alloc = alloc;
        if (req > peak_req)
            peak_req = req;

        if (cachealloc_check(ca) != OOM_OK)
            cr_assert_fail("step %ld: cachealloc_check: %s", step, oom_error_msg());
        if (m->requested_bytes[STAT_ALL].current != req || m->allocated_bytes[STAT_ALL].current != alloc ||
            m->allocation[STAT_ALL].current != (int64_t)nlive || m->allocated_bytes[STAT_ALL].peak != peak_alloc ||
            m->requested_bytes[STAT_ALL].peak != peak_req || m->num_ooms != ooms)
            cr_assert_fail("step %ld: requested %lld/%lld allocated %lld/%lld count %lld/%zu peak %lld/%lld "
                     "req.peak %lld/%lld ooms %lld/%lld",
                     step, (long long)m->requested_bytes[STAT_ALL].current, (long long)req,
                     (long long)m->allocated_bytes[STAT_ALL].current, (long long)alloc,
                     (long long)m->allocation[STAT_ALL].current, nlive, (long long)m->allocated_bytes[STAT_ALL].peak,
                     (long long)peak_alloc, (long long)m->requested_bytes[STAT_ALL].peak, (long long)peak_req,
                     (long long)m->num_ooms, (long long)ooms);
        if (model)
            r_compare(&mdl, m, step, what);
        if ((size_t)m->reserved_bytes[STAT_ALL].current > BUDGET + slack)
            cr_assert_fail("step %ld: reserved %lld over the budget", step, (long long)m->reserved_bytes[STAT_ALL].current);
        if (step % 1000 == 0) { /* the snapshot adds up to the same figures */
            size_t ns = 0;
            ca_snap_segment *sg = cachealloc_snapshot(ca, &ns);
            cr_assert(sg != NULL);
            int64_t tot = 0, al = 0, rq = 0;
            for (size_t i = 0; i < ns; i++) {
                tot += (int64_t)sg[i].total_size;
                al += (int64_t)sg[i].allocated_size;
                rq += (int64_t)sg[i].requested_size;
            }
            cachealloc_snapshot_free(sg, ns);
            cr_assert_eq(tot, m->reserved_bytes[STAT_ALL].current, "step %ld", step);
            cr_assert_eq(al, alloc, "step %ld", step);
            cr_assert_eq(rq, req, "step %ld", step);
        }
    }
    cr_assert_gt(ooms, 0, "[%s] no OOM happened", conf);
    cr_assert_gt(m->num_alloc_retries, 0, "[%s] no retry happened", conf);
    cr_assert_geq(m->num_alloc_retries, m->num_ooms, "every OOM went through the retry");
    cr_assert_geq(m->num_sync_all_streams, empties + ooms);
    cr_log_info("[%s] %lld OOMs, %lld retries, %lld device allocs, %lld device frees", conf, (long long)ooms,
                (long long)m->num_alloc_retries, (long long)m->num_device_alloc, (long long)m->num_device_free);
    while (nlive)
        cr_assert_eq(cachealloc_free(ca, live[--nlive].p), OOM_OK);
    cachealloc_empty_cache(ca);
    cr_assert_eq(cachealloc_check(ca), OOM_OK, "%s", oom_error_msg());
    cr_assert_eq(m->allocated_bytes[STAT_ALL].current, 0);
    cr_assert_eq(m->requested_bytes[STAT_ALL].current, 0);
    cr_assert_eq(m->reserved_bytes[STAT_ALL].current, 0);
    cr_assert_eq(m->segment[STAT_ALL].current, 0);
    cr_assert_eq(m->inactive_split_bytes[STAT_ALL].current, 0);
    free(mdl.b);
    cachealloc_delete(ca);
    device_close(dev);
}

Test(cachealloc_random, default_config, .timeout = 120) { random_run("", 0x0A110CA7ED5EEDULL, 0, true); }

/* expandable: the budget test uses the segment size, but whole pages are mapped (at most one more large page) */
Test(cachealloc_random, expandable_segments, .timeout = 120)
{
    random_run("expandable_segments:True", 0xE4A1DAB1E5EEDULL, 20 * MiB, true);
}

Test(cachealloc_random, max_split_and_gc, .timeout = 120)
{
    random_run("max_split_size_mb:40,garbage_collection_threshold:0.6", 0x6C5EEDULL, 0, true);
}

Test(cachealloc_random, roundup_and_knobs, .timeout = 120)
{
    random_run("roundup_power2_divisions:[1:4,>:8],max_split_size_mb:64,max_non_split_rounding_mb:32,"
               "garbage_collection_threshold:0.8,large_segment_size_mb:24",
               0x4B4E0B5ULL, 0, true);
}

Test(cachealloc_random, expandable_with_max_split_and_gc, .timeout = 120)
{
    random_run("expandable_segments:True,max_split_size_mb:40,garbage_collection_threshold:0.6", 0xE5C0FFEEULL,
               20 * MiB, true);
}
