/* cachealloc.c - PyTorch 2.11's CUDA caching allocator (DeviceCachingAllocator), one device, its streams.
 *
 * Names follow c10/cuda/CUDACachingAllocator.cpp so the two can be read side by side: round_size, get_pool,
 * get_allocation_size, get_free_block, alloc_block, alloc_found_block, should_split, free_block,
 * try_merge_blocks, release_available_cached_blocks, release_cached_blocks, release_block,
 * garbage_collect_cached_blocks, find_expandable_block, map_block, unmap_block.
 *
 * Structure.
 *   A segment is one cudaMalloc (or, with expandable segments, one reserved virtual range whose pages are
 *   mapped on demand). Its blocks form a doubly linked list in address order (prev/next). A block is either
 *   allocated (in the active table, keyed by address), free and mapped (in its pool's `blocks` set, ordered by
 *   (size, address): best fit), or free and unmapped (in its pool's `unmapped` set, ordered by address).
 *   Both sets are treaps threaded through the blocks themselves; each block is in at most one of them.
 *
 * Invariants (cachealloc_check recounts them; debug builds run it after every mutating call):
 *   I1  the blocks of a segment tile it: first->ptr == base, b->next->ptr == b->ptr + b->size, sizes sum to
 *       the segment (or range) size, and prev/next agree with address order;
 *   I2  no two adjacent blocks are both free (with the same mapped state, in an expandable range);
 *   I3  allocated blocks are exactly the active table; free mapped blocks exactly the pools' `blocks` sets;
 *       free unmapped blocks exactly the `unmapped` sets;
 *   I4  in an expandable range, every page inside a mapped block is mapped and every page wholly inside an
 *       unmapped block is not;
 *   I5  total_allocated_memory == reserved_bytes.all.current == sum of segment sizes + mapped page bytes;
 *   I6  every stat equals its recount (allocation, allocated/active/requested bytes, segment, reserved,
 *       inactive_split), per pool and in aggregate, and memstats_check holds;
 *   I7  every block's ordering key is its segment's key plus its offset: b->key - b->ptr == first->key - base;
 *   I8  every block of a segment (or range) has the stream its segment was allocated for.
 *
 * Streams. As in PyTorch, a segment belongs to the stream that was current when it was allocated
 * (cachealloc_set_stream), every block of it carries that stream, the pools order blocks by (stream, size, key)
 * (BlockComparatorSize and BlockComparatorAddress compare the stream first), and a free block serves only a request
 * of its own stream: get_free_block, release_available_cached_blocks and find_expandable_block look within the
 * request's stream; garbage collection, empty_cache and the emptying retry cover every stream. A free returns the
 * block to its own stream's part of the pool at once: oomlab records no cross-stream uses (record_stream), so no
 * free waits on an event. With every allocation on stream 0 (the default) nothing differs from one stream.
 *
 * Private pools. As PyTorch's PrivatePool (a CUDA graph's or a MemPool's memory), a private pool has its own small
 * and large free lists; while one is allocated to (beginAllocateToPool, a capture underway) get_pool hands out its
 * lists, so its segments serve only its allocations and a freed block goes back to the pool it came from. Its
 * segments count in every aggregate statistic. While a capture is underway the malloc slow path skips the emptying
 * retry and empty_cache leaves the default pools alone (release_cached_blocks); a pool's own segments are released
 * only once its use count is 0 (releasePool: graph_pools_freeable). One pool is allocated to at a time.
 *   I9  every block's pool is the default small or large pool or one of a private pool's, and a private pool's use
 *       count is never negative.
 */
#include "alloc/cachealloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/fail.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define CA_MAX_REQUEST ((size_t)1 << 60) /* PyTorch refuses "more than 1EB" before any counter moves */

/* --------------------------------------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------------------------------------ */

typedef struct ca_pool ca_pool;
typedef struct expseg expseg;

typedef struct ca_block {
    devptr ptr;
    /* The address that orders blocks of one size (BlockComparatorSize's ptr): ptr on sim; on cuda the address
     * sim's driver model gave the segment, plus the block's offset in it (device_order_key), so that ties break
     * as they do in PyTorch's process and not as the driver happens to place segments in oomlab's.
     * Invariant: key - ptr is the same for every block of a segment. */
    devptr key;
    size_t size;
    size_t requested_size;       /* raw bytes asked for; kept (stale) after free, as PyTorch does */
    struct ca_block *prev, *next; /* neighbours in the segment, address order */
    struct ca_block *left, *right; /* treap links in `blocks` or `unmapped` */
    struct ca_block *hnext;        /* active-table chain */
    ca_pool *pool;
    expseg *es;                    /* the expandable range, or NULL for a cudaMalloc segment */
    int stream;                    /* the stream its segment was allocated for (I8) */
    uint64_t prio;                 /* treap priority */
    uint64_t gc_count_base;        /* pool->get_free_blocks_call_count when it entered the pool */
    bool allocated;
    bool mapped;
} ca_block;

struct ca_pool {
    ca_block *blocks;   /* free mapped blocks by (size, ptr) */
    ca_block *unmapped; /* free unmapped expandable blocks by ptr */
    int owner;          /* 0: the default pools; else the private pool's id (_snapshot()'s segment_pool_id) */
    bool is_small;
    int stat;           /* STAT_SMALL or STAT_LARGE */
    uint64_t get_free_blocks_call_count;
};

/* An expandable segment: a reserved range of max_pages pages, mapped page by page (ExpandableSegment). */
struct expseg {
    devptr base;
    size_t page;        /* segment_size_: 2 MiB small, large_segment_size large */
    size_t max_pages;
    uint8_t *mapped;    /* per page */
    ca_pool *pool;
    int stream; /* owning_stream */
    expseg *next_es;
};

/* A private pool (PrivatePool): its id, its use count (create_or_incref_pool, releasePool) and its free lists. */
typedef struct ca_privpool {
    int id; /* > 0 */
    int use_count;
    ca_pool small_blocks, large_blocks;
} ca_privpool;

/* A cudaMalloc segment, kept in address order for teardown, the validator and snapshots. */
typedef struct seg_rec {
    devptr ptr;
    size_t size;
    ca_pool *pool;
} seg_rec;

struct cachealloc {
    device *dev;
    alloc_conf conf;
    memstats stats;
    int64_t window_peak; /* the most allocated_bytes.all.current since cachealloc_take_window_peak last ran */
    ca_pool small_blocks, large_blocks;
    size_t total_allocated_memory; /* bytes held from the driver */
    bool capped;                   /* allowed_memory_maximum.has_value() */
    bool has_divisions;            /* some roundup_power2_divisions bucket is set */
    size_t allowed;                /* allowed_memory_maximum */
    int device_id;
    bool initialized;              /* CUDA is initialised: a budget was set, or malloc was called */
    int stream;                    /* the current stream: new allocations are made for it (cachealloc_set_stream) */
    int max_stream;                /* the highest stream any allocation was made for */
    ca_privpool **priv;            /* the private pools, in creation order (each stays until the allocator goes) */
    size_t npriv, cappriv;
    ca_privpool *capture;          /* the pool being allocated to (captures_underway), or NULL */
    /* Caching off (cachealloc.h): each live allocation is one block in the active table with no neighbours, no
     * pool membership and no segment record; the pools, segments, stats (but num_sync_all_streams) and trace
     * stay empty, total_allocated_memory 0, and capped false. */
    bool uncached;

    ca_block **table; /* active blocks by address */
    size_t table_mask, nactive;
    unsigned table_shift; /* 64 - log2(table size): table_slot takes the product's top bits */

    ca_block *spare;  /* recycled block structs */
    void **slabs;
    size_t nslabs, capslabs;

    seg_rec *segs;
    size_t nsegs, capsegs;
    expseg *expsegs;

    bool recording;
    ca_trace_entry *trace;
    size_t ntrace, captrace;

    ca_oom_info oom;
    bool have_oom;
    bool keep_oom_layout;       /* cachealloc_record_oom_layout */
    ca_snap_segment *oom_layout; /* the layout at the last OOM since then (owns its blocks: see snapshot_of) */
    size_t oom_nlayout;
    uint64_t rng;
};

/* Parameters of one malloc (PyTorch's AllocParams). */
typedef struct alloc_params {
    size_t size;       /* rounded */
    size_t alloc_size; /* segment size to ask for */
    ca_pool *pool;
    ca_block *block;
    oom_status err;
} alloc_params;

/* --------------------------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool is_split(const ca_block *b) { return b->prev != NULL || b->next != NULL; }

static void debug_check(const cachealloc *ca)
{
#if OOM_DEBUG >= 2
    if (cachealloc_check(ca) != OOM_OK) /* the one way a broken invariant aborts (core/check.h) */
        oom_check_fail("cachealloc", oom_error_msg(), __FILE__, __LINE__);
#else
    (void)ca;
#endif
}

/* --------------------------------------------------------------------------------------------------------
 * Block structs: a free list over slabs, so the hot path never calls malloc.
 * ------------------------------------------------------------------------------------------------------ */

#define SLAB_BLOCKS 256

/* A block at ptr with ordering key `key`: device_order_key(ptr) for a new segment or range, the parent's key plus
 * the offset for a piece split off a block (I7; no address lookup on the hot path). */
static ca_block *block_new(cachealloc *ca, devptr ptr, devptr key, size_t size, ca_pool *pool, int stream)
{
    if (!ca->spare) {
        ca_block *slab = xmalloc(sizeof(ca_block) * SLAB_BLOCKS);
        if (ca->nslabs == ca->capslabs) {
            ca->capslabs = ca->capslabs ? ca->capslabs * 2 : 16;
            ca->slabs = xrealloc(ca->slabs, ca->capslabs * sizeof *ca->slabs);
        }
        ca->slabs[ca->nslabs++] = slab;
        for (size_t i = 0; i < SLAB_BLOCKS; i++) {
            slab[i].hnext = ca->spare;
            ca->spare = &slab[i];
        }
    }
    ca_block *b = ca->spare;
    ca->spare = b->hnext;
    /* field by field: a memset (or a compound literal) of the struct becomes a `rep stos`, whose start-up cost
     * about 10 ns of a 1 KiB pair */
    b->ptr = ptr;
    b->key = key;
    b->size = size;
    b->requested_size = 0;
    b->prev = b->next = b->left = b->right = b->hnext = NULL;
    b->pool = pool;
    b->es = NULL;
    b->stream = stream;
    b->prio = splitmix64(&ca->rng);
    b->gc_count_base = 0;
    b->allocated = false;
    b->mapped = true;
    return b;
}

static void block_delete(cachealloc *ca, ca_block *b)
{
    b->hnext = ca->spare;
    ca->spare = b;
}

/* --------------------------------------------------------------------------------------------------------
 * Treaps. `blocks` compares (stream, size, key) (BlockComparatorSize); `unmapped` compares (stream, key)
 * (BlockComparatorAddress); key is the block's ordering address (ca_block.key).
 * ------------------------------------------------------------------------------------------------------ */

static inline bool key_less(int t1, size_t s1, devptr p1, int t2, size_t s2, devptr p2)
{
    return t1 < t2 || (t1 == t2 && (s1 < s2 || (s1 == s2 && p1 < p2)));
}

/* by_addr: compare by ptr alone (size treated as 0). */
#define KSIZE(b, by_addr) ((by_addr) ? 0 : (b)->size)

/* The treaps are iterative: the allocator's hot path runs through them on every malloc and free. */

/* Split t into keys < (st, s, p) (to *l) and keys >= (st, s, p) (to *r). */
static void treap_split(ca_block *t, int st, size_t s, devptr p, bool by_addr, ca_block **l, ca_block **r)
{
    while (t) {
        if (key_less(t->stream, KSIZE(t, by_addr), t->key, st, s, p)) {
            *l = t;
            l = &t->right;
            t = t->right;
        } else {
            *r = t;
            r = &t->left;
            t = t->left;
        }
    }
    *l = *r = NULL;
}

/* Join a and b, every key of a below every key of b. */
static ca_block *treap_join(ca_block *a, ca_block *b)
{
    ca_block *root = NULL, **link = &root;
    while (a && b) {
        if (a->prio > b->prio) {
            *link = a;
            link = &a->right;
            a = a->right;
        } else {
            *link = b;
            link = &b->left;
            b = b->left;
        }
    }
    *link = a ? a : b;
    return root;
}

static void treap_insert(ca_block **root, ca_block *n, bool by_addr)
{
    ca_block **link = root;
    while (*link && (*link)->prio >= n->prio)
        link = key_less(n->stream, KSIZE(n, by_addr), n->key, (*link)->stream, KSIZE(*link, by_addr), (*link)->key)
                   ? &(*link)->left
                   : &(*link)->right;
    treap_split(*link, n->stream, KSIZE(n, by_addr), n->key, by_addr, &n->left, &n->right);
    *link = n;
}

/* The link (the root or a child pointer) that points at n, which must be in the tree. */
static ca_block **treap_link_of(ca_block **root, const ca_block *n, bool by_addr)
{
    ca_block **link = root;
    while (*link != n)
        link = key_less(n->stream, KSIZE(n, by_addr), n->key, (*link)->stream, KSIZE(*link, by_addr), (*link)->key)
                   ? &(*link)->left
                   : &(*link)->right;
    return link;
}

static void treap_erase(ca_block **root, const ca_block *n, bool by_addr)
{
    ca_block **link = treap_link_of(root, n, by_addr);
    *link = treap_join(n->left, n->right);
}

/* Smallest node with key >= (st, s, p). */
static ca_block *treap_lower_bound(ca_block *t, int st, size_t s, devptr p, bool by_addr)
{
    ca_block *best = NULL;
    while (t) {
        if (key_less(t->stream, KSIZE(t, by_addr), t->key, st, s, p)) {
            t = t->right;
        } else {
            best = t;
            t = t->left;
        }
    }
    return best;
}

/* Smallest node with key > n's key (the in-order successor). */
static ca_block *treap_next(ca_block *t, const ca_block *n, bool by_addr)
{
    ca_block *best = NULL;
    size_t s = KSIZE(n, by_addr);
    while (t) {
        if (key_less(n->stream, s, n->key, t->stream, KSIZE(t, by_addr), t->key)) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

/* Largest node with key < n's key (the in-order predecessor); n == NULL means the maximum. */
static ca_block *treap_prev(ca_block *t, const ca_block *n, bool by_addr)
{
    ca_block *best = NULL;
    while (t) {
        if (!n || key_less(t->stream, KSIZE(t, by_addr), t->key, n->stream, KSIZE(n, by_addr), n->key)) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

static ca_block *treap_first(ca_block *t)
{
    while (t && t->left)
        t = t->left;
    return t;
}

/* BlockPool::insert_into_blocks: stamps the GC age base. */
static void pool_init(ca_pool *pool, int owner, bool is_small)
{
    memset(pool, 0, sizeof *pool);
    pool->owner = owner;
    pool->is_small = is_small;
    pool->stat = is_small ? STAT_SMALL : STAT_LARGE;
}

static void pool_insert(ca_pool *pool, ca_block *b)
{
    b->gc_count_base = pool->get_free_blocks_call_count;
    treap_insert(&pool->blocks, b, false);
}

static void pool_erase(ca_pool *pool, ca_block *b) { treap_erase(&pool->blocks, b, false); }

static void unmapped_insert(ca_pool *pool, ca_block *b) { treap_insert(&pool->unmapped, b, true); }

static void unmapped_erase(ca_pool *pool, ca_block *b) { treap_erase(&pool->unmapped, b, true); }

static uint64_t gc_count(const ca_block *b) { return b->pool->get_free_blocks_call_count - b->gc_count_base; }

/* --------------------------------------------------------------------------------------------------------
 * Active table: allocated blocks by address (PyTorch's allocated_blocks map).
 * ------------------------------------------------------------------------------------------------------ */

/* Fibonacci hashing: the top bits of p x 2^64/phi. (The low bits would all be equal for segments that are a
 * power of two apart, e.g. 256 MiB ones, and put every block in one chain.) */
static size_t table_slot(const cachealloc *ca, devptr p)
{
    uint64_t h = p * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> ca->table_shift);
}

static void table_grow(cachealloc *ca)
{
    size_t old_n = ca->table_mask + 1;
    size_t n = old_n * 2;
    ca_block **old = ca->table;
    ca->table = xmalloc(n * sizeof *ca->table);
    memset(ca->table, 0, n * sizeof *ca->table);
    ca->table_mask = n - 1;
    ca->table_shift--;
    for (size_t i = 0; i < old_n; i++) {
        for (ca_block *b = old[i], *nx; b; b = nx) {
            nx = b->hnext;
            size_t s = table_slot(ca, b->ptr);
            b->hnext = ca->table[s];
            ca->table[s] = b;
        }
    }
    free(old);
}

static void table_insert(cachealloc *ca, ca_block *b)
{
    if (ca->nactive + 1 > ca->table_mask + 1)
        table_grow(ca);
    size_t s = table_slot(ca, b->ptr);
    b->hnext = ca->table[s];
    ca->table[s] = b;
    ca->nactive++;
}

static ca_block *table_find(const cachealloc *ca, devptr p)
{
    for (ca_block *b = ca->table[table_slot(ca, p)]; b; b = b->hnext)
        if (b->ptr == p)
            return b;
    return NULL;
}

static ca_block *table_remove(cachealloc *ca, devptr p)
{
    ca_block **link = &ca->table[table_slot(ca, p)];
    for (ca_block *b = *link; b; link = &b->hnext, b = b->hnext) {
        if (b->ptr == p) {
            *link = b->hnext;
            b->hnext = NULL;
            ca->nactive--;
            return b;
        }
    }
    return NULL;
}

/* --------------------------------------------------------------------------------------------------------
 * Segment registry and trace
 * ------------------------------------------------------------------------------------------------------ */

static void seg_add(cachealloc *ca, devptr p, size_t size, ca_pool *pool)
{
    if (ca->nsegs == ca->capsegs) {
        ca->capsegs = ca->capsegs ? ca->capsegs * 2 : 32;
        ca->segs = xrealloc(ca->segs, ca->capsegs * sizeof *ca->segs);
    }
    size_t i = ca->nsegs;
    while (i > 0 && ca->segs[i - 1].ptr > p) {
        ca->segs[i] = ca->segs[i - 1];
        i--;
    }
    ca->segs[i] = (seg_rec){p, size, pool};
    ca->nsegs++;
}

static void seg_remove(cachealloc *ca, devptr p)
{
    size_t lo = 0, hi = ca->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ca->segs[mid].ptr < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ca->nsegs && ca->segs[lo].ptr == p) {
        memmove(&ca->segs[lo], &ca->segs[lo + 1], (ca->nsegs - lo - 1) * sizeof *ca->segs);
        ca->nsegs--;
    }
}

static void record_trace_slow(cachealloc *ca, ca_action action, devptr addr, size_t size)
{
    if (ca->ntrace == ca->captrace) {
        ca->captrace = ca->captrace ? ca->captrace * 2 : 1024;
        ca->trace = xrealloc(ca->trace, ca->captrace * sizeof *ca->trace);
    }
    ca->trace[ca->ntrace++] = (ca_trace_entry){action, addr, size, now_us()};
}

static inline void record_trace(cachealloc *ca, ca_action action, devptr addr, size_t size)
{
    if (__builtin_expect(ca->recording, 0))
        record_trace_slow(ca, action, addr, size);
}

static const char *const action_names[CA_ACTION_COUNT] = {
    [CA_ALLOC] = "alloc",
    [CA_FREE_REQUESTED] = "free_requested",
    [CA_FREE_COMPLETED] = "free_completed",
    [CA_SEGMENT_ALLOC] = "segment_alloc",
    [CA_SEGMENT_FREE] = "segment_free",
    [CA_SEGMENT_MAP] = "segment_map",
    [CA_SEGMENT_UNMAP] = "segment_unmap",
    [CA_SNAPSHOT] = "snapshot",
    [CA_OOM] = "oom",
    [CA_EMPTY_CACHE] = "empty_cache",
};

const char *ca_action_str(ca_action a) { return (unsigned)a < CA_ACTION_COUNT ? action_names[a] : "unknown"; }

bool ca_action_parse(const char *s, ca_action *out)
{
    for (int i = 0; i < CA_ACTION_COUNT; i++) {
        if (strcmp(s, action_names[i]) == 0) {
            *out = (ca_action)i;
            return true;
        }
    }
    return false;
}

/* --------------------------------------------------------------------------------------------------------
 * Sizes and pools
 * ------------------------------------------------------------------------------------------------------ */

static size_t floor_pow2(size_t x)
{
    return x ? (size_t)1 << (63 - __builtin_clzll((unsigned long long)x)) : 0;
}

/* roundup_power2_next_division */
static size_t roundup_power2_next_division(size_t size, size_t divisions)
{
    if ((size & (size - 1)) == 0)
        return size;
    size_t power2_floor = floor_pow2(size);
    size_t power2_division = power2_floor >> (63 - __builtin_clzll((unsigned long long)divisions));
    if (power2_division == 0)
        return power2_floor << 1;
    size_t round_size_floor = size & ~(power2_division - 1);
    return round_size_floor == size ? size : round_size_floor + power2_division;
}

static size_t round_size(const cachealloc *ca, size_t size)
{
    if (size < CA_MIN_BLOCK_SIZE)
        return CA_MIN_BLOCK_SIZE;
    size_t divisions = ca->has_divisions ? alloc_conf_divisions(&ca->conf, size) : 0;
    if (divisions > 1 && size > CA_MIN_BLOCK_SIZE * divisions)
        return roundup_power2_next_division(size, divisions);
    return CA_MIN_BLOCK_SIZE * ((size + CA_MIN_BLOCK_SIZE - 1) / CA_MIN_BLOCK_SIZE);
}

static ca_pool *get_pool(cachealloc *ca, size_t size)
{
    if (ca->capture)
        return size <= CA_SMALL_SIZE ? &ca->capture->small_blocks : &ca->capture->large_blocks;
    return size <= CA_SMALL_SIZE ? &ca->small_blocks : &ca->large_blocks;
}

static size_t get_allocation_size(const cachealloc *ca, size_t size)
{
    if (size <= CA_SMALL_SIZE)
        return CA_SMALL_BUFFER;
    if (size < CA_MIN_LARGE_ALLOC)
        return ca->conf.large_segment_size;
    return CA_ROUND_LARGE * ((size + CA_ROUND_LARGE - 1) / CA_ROUND_LARGE);
}

static bool should_split(const cachealloc *ca, const ca_block *block, size_t size)
{
    size_t remaining = block->size - size;
    if (block->pool->is_small || ca->conf.expandable_segments)
        return remaining >= CA_MIN_BLOCK_SIZE;
    return size < ca->conf.max_split_size && remaining > CA_SMALL_SIZE;
}

static bool gc_enabled(const cachealloc *ca) { return ca->capped && ca->conf.gc_threshold > 0.0; }

/* --------------------------------------------------------------------------------------------------------
 * Free-block search
 * ------------------------------------------------------------------------------------------------------ */

/* growable size of an expandable block: itself plus the unmapped space right after it */
static size_t expandable_size(const ca_block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* The block get_free_block would take, without side effects (no GC tick, no erase). When it is the lower bound
 * itself (the common case) and link is non-NULL, *link gets the tree link that points at it, so that taking it
 * out costs no second descent. */
static ca_block *find_free_block(const cachealloc *ca, const ca_pool *pool, size_t size, ca_block *const **link)
{
    const int stream = ca->stream;
    ca_block *const *l = &pool->blocks, *const *best = NULL;
    while (*l) { /* lower bound of (stream, size, 0), remembering the link to it */
        if (key_less((*l)->stream, (*l)->size, (*l)->key, stream, size, 0)) {
            l = &(*l)->right;
        } else {
            best = l;
            l = &(*l)->left;
        }
    }
    if (!best || (*best)->stream != stream)
        return NULL; /* a block of another stream is never handed out */
    ca_block *it = *best;
    if (link)
        *link = it->es ? NULL : best;
    if (it->es) {
        if (ca->conf.expandable_segments) {
            /* best fit counts the size the block can grow to, not its current size */
            ca_block *next = treap_next(pool->blocks, it, false);
            while (it->es && next && next->stream == stream && expandable_size(next) < expandable_size(it)) {
                it = next;
                next = treap_next(pool->blocks, next, false);
            }
        } else {
            /* expandable segments were switched off: only non-expandable blocks qualify */
            do {
                it = treap_next(pool->blocks, it, false);
            } while (it && it->es && it->stream == stream);
            if (!it || it->stream != stream)
                return NULL;
        }
    }
    size_t max_split = ca->conf.max_split_size;
    if (size < max_split && it->size >= max_split)
        return NULL; /* do not split an oversize block for a small request */
    if (size >= max_split && it->size >= size + ca->conf.max_non_split_rounding)
        return NULL; /* do not hand out an oversize block that is much larger than the request */
    return it;
}

static bool get_free_block(cachealloc *ca, alloc_params *p)
{
    ca_pool *pool = p->pool;
    if (gc_enabled(ca))
        ++pool->get_free_blocks_call_count; /* block reuse interval, tracked only while GC is on */
    ca_block *const *link = NULL;
    ca_block *b = find_free_block(ca, pool, p->size, &link);
    if (!b)
        return false;
    p->block = b;
    if (link && *link == b)
        *(ca_block **)link = treap_join(b->left, b->right); /* the pool is ours to change */
    else
        pool_erase(pool, b);
    return true;
}

/* --------------------------------------------------------------------------------------------------------
 * Segments: cudaMalloc and expandable ranges
 * ------------------------------------------------------------------------------------------------------ */

static bool would_exceed_budget(const cachealloc *ca, size_t bytes)
{
    return ca->capped && ca->total_allocated_memory + bytes > ca->allowed;
}

/* try_merge_blocks: dst absorbs its free neighbour src; returns the bytes absorbed, or 0. */
static size_t try_merge_blocks(cachealloc *ca, ca_block *dst, ca_block *src, ca_pool *pool)
{
    if (!src || src->allocated || dst->mapped != src->mapped)
        return 0;
    if (dst->prev == src) { /* [src dst] */
        dst->ptr = src->ptr;
        dst->key = src->key;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else { /* [dst src] */
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    size_t subsumed_size = src->size;
    dst->size += subsumed_size;
    if (src->mapped)
        pool_erase(pool, src);
    else
        unmapped_erase(pool, src);
    block_delete(ca, src);
    return subsumed_size;
}

/* A device call of the expandable path failed with st: a device OOM (or the budget) is an OOM, as in PyTorch,
 * where cuMemCreate's CUDA_ERROR_OUT_OF_MEMORY is; anything else (the host could not back the pages, a driver
 * error) is that error, which PyTorch raises as such (C10_CUDA_DRIVER_CHECK). The backends check the driver's
 * rules before calling it (sizes and addresses multiples of the granularity), so OOM_EINVAL is the driver's
 * CUDA_ERROR_INVALID_VALUE, which cuGetErrorString words "invalid argument". */
static void expandable_failed(oom_status st, oom_status *err)
{
    if (st == OOM_ENOMEM_DEVICE || st == OOM_ELIMIT) {
        *err = OOM_ENOMEM_DEVICE;
        return;
    }
    if (st == OOM_EINVAL) {
        OOM_ERROR(OOM_ECUDA, "CUDA driver error: invalid argument");
        st = OOM_ECUDA;
    }
    *err = st;
}

/* ExpandableSegment::map over pages [first, last): all pages or none (*err says why). */
static size_t expseg_map(cachealloc *ca, expseg *es, size_t first, size_t last, oom_status *err)
{
    if (first >= last)
        return 0;
    oom_status st = device_va_map(ca->dev, es->base + first * es->page, (last - first) * es->page, es->page);
    if (st != OOM_OK) {
        expandable_failed(st, err);
        return 0;
    }
    for (size_t i = first; i < last; i++)
        es->mapped[i] = 1;
    return (last - first) * es->page;
}

/* map_block: map the pages covering [to_map->ptr, +size) and merge the result with free neighbours. */
static bool map_block(cachealloc *ca, ca_block *to_map, size_t size, oom_status *err)
{
    expseg *es = to_map->es;
    size_t first = (size_t)(to_map->ptr - es->base) / es->page;
    size_t last = (size_t)(to_map->ptr + size - es->base + es->page - 1) / es->page;
    size_t mapped = expseg_map(ca, es, first, last, err);
    if (mapped == 0)
        return false;
    ca_pool *pool = to_map->pool;
    unmapped_erase(pool, to_map);
    to_map->mapped = true;
    if (mapped < to_map->size) {
        /* to_map -> remaining (unmapped) -> to_map->next */
        ca_block *remaining =
            block_new(ca, to_map->ptr + mapped, to_map->key + mapped, to_map->size - mapped, pool, to_map->stream);
        remaining->mapped = false;
        remaining->es = es;
        remaining->prev = to_map;
        remaining->next = to_map->next;
        if (to_map->next)
            to_map->next->prev = remaining;
        to_map->next = remaining;
        unmapped_insert(pool, remaining);
        to_map->size = mapped;
    }
    try_merge_blocks(ca, to_map, to_map->prev, pool);
    try_merge_blocks(ca, to_map, to_map->next, pool);
    pool_insert(pool, to_map);

    ca->total_allocated_memory += mapped;
    stat_array_update(ca->stats.reserved_bytes, pool->stat, (int64_t)mapped);
    ca->stats.num_device_alloc++;
    record_trace(ca, CA_SEGMENT_MAP, es->base + first * es->page, mapped);
    return true;
}

static expseg *expseg_new(cachealloc *ca, ca_pool *pool, oom_status *err)
{
    size_t page = pool->is_small ? CA_SMALL_BUFFER : ca->conf.large_segment_size;
    size_t total = ca->dev->total_bytes;
    size_t space = total + total / 8; /* 1 1/8 of the device, so pages can move to the end */
    size_t max_pages = (space + page - 1) / page;
    devptr base = 0;
    oom_status st = device_va_reserve(ca->dev, max_pages * page, &base);
    if (st != OOM_OK) {
        expandable_failed(st, err);
        return NULL;
    }
    expseg *es = xmalloc(sizeof *es);
    es->base = base;
    es->page = page;
    es->max_pages = max_pages;
    es->mapped = xmalloc(max_pages);
    memset(es->mapped, 0, max_pages);
    es->pool = pool;
    es->stream = ca->stream;
    es->next_es = ca->expsegs;
    ca->expsegs = es;
    return es;
}

static bool allocatable(const ca_block *b) { return b && !b->allocated; }

/* find_expandable_block: the lowest-address place in an existing range of this pool and stream where a free block
 * and the unmapped space after it reach size; else a fresh range for the stream. */
static ca_block *find_expandable_block(cachealloc *ca, ca_pool *pool, size_t size, oom_status *err)
{
    for (ca_block *it = treap_lower_bound(pool->unmapped, ca->stream, 0, 0, true); it && it->stream == ca->stream;
         it = treap_next(pool->unmapped, it, true)) {
        ca_block *c = it;
        if (allocatable(c->prev))
            c = c->prev; /* a free block right before the unmapped space counts too */
        size_t bytes = 0;
        for (ca_block *b = c; bytes < size && allocatable(b); b = b->next)
            bytes += b->size;
        if (bytes >= size)
            return c;
    }
    expseg *es = expseg_new(ca, pool, err);
    if (!es)
        return NULL;
    ca_block *cand =
        block_new(ca, es->base, device_order_key(ca->dev, es->base), es->max_pages * es->page, pool, es->stream);
    cand->mapped = false;
    cand->es = es;
    unmapped_insert(pool, cand);
    return cand;
}

/* try_allocate_expandable_block: map pages until one free block holds size bytes. NULL with *err: OOM_ENOMEM_DEVICE
 * or the device call's own failure. */
static ca_block *try_allocate_expandable_block(cachealloc *ca, ca_pool *pool, size_t size, oom_status *err)
{
    *err = OOM_ENOMEM_DEVICE;
    ca_block *candidate = find_expandable_block(ca, pool, size, err);
    if (!candidate)
        return NULL;
    /* candidate: unmapped -> *, or free -> unmapped -> * */
    if (!candidate->mapped && !map_block(ca, candidate, candidate->size < size ? candidate->size : size, err))
        return NULL;
    while (candidate->size < size) {
        size_t remaining = size - candidate->size;
        ca_block *new_candidate = candidate->next;
        if (!map_block(ca, new_candidate, remaining < new_candidate->size ? remaining : new_candidate->size, err))
            return NULL;
        candidate = new_candidate;
    }
    pool_erase(pool, candidate);
    return candidate;
}

/* alloc_block: a new segment (or new pages) for p. isRetry counts num_alloc_retries. */
static bool alloc_block(cachealloc *ca, alloc_params *p, bool is_retry)
{
    size_t size = p->alloc_size;
    if (is_retry)
        ca->stats.num_alloc_retries++;
    if (would_exceed_budget(ca, size)) {
        p->err = OOM_ENOMEM_DEVICE;
        return false;
    }
    if (ca->conf.expandable_segments) {
        /* a driver error (large_segment_size_mb not a multiple of the 2 MiB granularity, say) is thrown as
         * PyTorch throws it: no retry, no OOM */
        oom_status err;
        p->block = try_allocate_expandable_block(ca, p->pool, p->size, &err);
        p->err = p->block ? OOM_OK : err;
        return p->block != NULL;
    }
    devptr ptr = 0;
    oom_status st = device_mem_alloc(ca->dev, size, &ptr);
    if (st != OOM_OK) {
        p->err = (st == OOM_ENOMEM_DEVICE || st == OOM_ELIMIT) ? OOM_ENOMEM_DEVICE : st;
        return false;
    }
    ca->total_allocated_memory += size;
    p->block = block_new(ca, ptr, device_order_key(ca->dev, ptr), size, p->pool, ca->stream);
    seg_add(ca, ptr, size, p->pool);
    stat_array_update(ca->stats.segment, p->pool->stat, 1);
    stat_array_update(ca->stats.reserved_bytes, p->pool->stat, (int64_t)size);
    if (size >= ca->conf.max_split_size)
        stat_increase(&ca->stats.oversize_segments, 1);
    ca->stats.num_device_alloc++;
    record_trace(ca, CA_SEGMENT_ALLOC, ptr, size);
    p->err = OOM_OK;
    return true;
}

/* release_block: cudaFree one whole free segment. */
static void release_block(cachealloc *ca, ca_block *block)
{
    ca->stats.num_device_free++;
    record_trace(ca, CA_SEGMENT_FREE, block->ptr, block->size);
    device_mem_free(ca->dev, block->ptr, block->size);
    ca->total_allocated_memory -= block->size;
    ca_pool *pool = block->pool;
    stat_array_update(ca->stats.segment, pool->stat, -1);
    stat_array_update(ca->stats.reserved_bytes, pool->stat, -(int64_t)block->size);
    if (block->size >= ca->conf.max_split_size)
        stat_decrease(&ca->stats.oversize_segments, 1);
    pool_erase(pool, block);
    seg_remove(ca, block->ptr);
    block_delete(ca, block);
}

/* unmap_block: unmap the pages wholly inside a free expandable block; edge pieces stay mapped and free. */
static void unmap_block(cachealloc *ca, ca_block *block)
{
    expseg *es = block->es;
    size_t first = (size_t)(block->ptr - es->base + es->page - 1) / es->page; /* segmentRight */
    size_t last = (size_t)(block->ptr + block->size - es->base) / es->page;   /* segmentLeft */
    if (first >= last)
        return;
    devptr uptr = es->base + first * es->page;
    size_t usize = (last - first) * es->page;
    device_va_unmap(ca->dev, uptr, usize, es->page);
    for (size_t i = first; i < last; i++)
        es->mapped[i] = 0;

    ca_pool *pool = block->pool;
    pool_erase(pool, block);
    size_t before_size = (size_t)(uptr - block->ptr);
    if (before_size > 0) {
        /* prev? -> before_free -> block */
        ca_block *before_free = block_new(ca, block->ptr, block->key, before_size, pool, block->stream);
        before_free->es = es;
        before_free->prev = block->prev;
        before_free->next = block;
        if (block->prev)
            block->prev->next = before_free;
        block->prev = before_free;
        pool_insert(pool, before_free);
    }
    size_t after_size = block->size - (before_size + usize);
    if (after_size > 0) {
        /* block -> after_free -> next? */
        ca_block *after_free =
            block_new(ca, uptr + usize, block->key + (uptr + usize - block->ptr), after_size, pool, block->stream);
        after_free->es = es;
        after_free->prev = block;
        after_free->next = block->next;
        if (block->next)
            block->next->prev = after_free;
        block->next = after_free;
        pool_insert(pool, after_free);
    }
    block->key += uptr - block->ptr;
    block->ptr = uptr;
    block->size = usize;
    block->mapped = false;
    try_merge_blocks(ca, block, block->prev, pool);
    try_merge_blocks(ca, block, block->next, pool);
    unmapped_insert(pool, block);

    ca->total_allocated_memory -= usize;
    stat_array_update(ca->stats.reserved_bytes, pool->stat, -(int64_t)usize);
    ca->stats.num_device_free++;
    record_trace(ca, CA_SEGMENT_UNMAP, uptr, usize);
}

/* release_expandable_segment: a range whose pages are all unmapped gives back its virtual reservation. */
static void release_expandable_segment(cachealloc *ca, ca_block *block)
{
    expseg *es = block->es;
    unmapped_erase(block->pool, block);
    device_va_release(ca->dev, es->base, es->max_pages * es->page);
    for (expseg **link = &ca->expsegs; *link; link = &(*link)->next_es) {
        if (*link == es) {
            *link = es->next_es;
            break;
        }
    }
    free(es->mapped);
    free(es);
    block_delete(ca, block);
}

/* release_blocks: free every whole free segment of the pool, in (size, address) order, then unmap the free
 * expandable blocks gathered on the way. */
static void release_blocks(cachealloc *ca, ca_pool *pool)
{
    size_t nunmap = 0, cap = 0;
    ca_block **to_unmap = NULL;
    ca_block *it = treap_first(pool->blocks);
    while (it) {
        ca_block *block = it;
        it = treap_next(pool->blocks, it, false);
        if (block->es) {
            if (nunmap == cap) {
                cap = cap ? cap * 2 : 16;
                to_unmap = xrealloc(to_unmap, cap * sizeof *to_unmap);
            }
            to_unmap[nunmap++] = block;
        } else if (!block->prev && !block->next) {
            release_block(ca, block);
        }
    }
    for (size_t i = 0; i < nunmap; i++) {
        unmap_block(ca, to_unmap[i]);
        if (!to_unmap[i]->prev && !to_unmap[i]->next)
            release_expandable_segment(ca, to_unmap[i]);
    }
    free(to_unmap);
}

/* release_cached_blocks (mempool {0, 0}): the body of empty_cache(). With no capture underway the default pools,
 * then every private pool whose use count is 0 (graph_pools_freeable), small before large as PyTorch walks them. */
static void release_cached_blocks(cachealloc *ca)
{
    if (!ca->capture) {
        ca->stats.num_sync_all_streams++; /* synchronize_and_free_events */
        release_blocks(ca, &ca->large_blocks);
        release_blocks(ca, &ca->small_blocks);
    }
    for (size_t i = 0; i < ca->npriv; i++) {
        if (ca->priv[i]->use_count == 0) {
            release_blocks(ca, &ca->priv[i]->small_blocks);
            release_blocks(ca, &ca->priv[i]->large_blocks);
        }
    }
}

/* release_available_cached_blocks: with max_split_size set, free one oversize block that covers the
 * request, or oversize blocks from the largest down until they add up to it. */
static bool release_available_cached_blocks(cachealloc *ca, const alloc_params *p)
{
    size_t max_split = ca->conf.max_split_size;
    if (max_split == SIZE_MAX)
        return false;
    ca_pool *pool = p->pool;
    size_t key = p->size < max_split ? max_split : p->size;
    const int stream = ca->stream;
    ca_block *it = treap_lower_bound(pool->blocks, stream, key, 0, false);
    if (!it || it->stream != stream || it->es) {
        /* no single block of the stream is large enough: free its oversize blocks, largest first */
        ca_block *cur = it ? treap_prev(pool->blocks, it, false) : treap_prev(pool->blocks, NULL, false);
        if (!cur)
            return false;
        size_t total_released = 0;
        while (cur && total_released < key && cur->size >= max_split && cur->stream == stream) {
            ca_block *prev = treap_prev(pool->blocks, cur, false);
            if (!cur->es) {
                total_released += cur->size;
                release_block(ca, cur);
            }
            cur = prev;
        }
        if (total_released < key)
            return false;
    } else {
        release_block(ca, it);
    }
    return true;
}

/* garbage_collect_cached_blocks: free aged, unsplit large blocks until held memory drops under
 * gc_threshold x budget. No synchronisation, no retry counter. */
static void garbage_collect_cached_blocks(cachealloc *ca)
{
    size_t gc_threshold = (size_t)(ca->conf.gc_threshold * (double)ca->allowed);
    if (ca->total_allocated_memory <= gc_threshold)
        return;
    size_t target_size = ca->total_allocated_memory - gc_threshold;
    size_t gc_reclaimed = 0;
    size_t total_age = 0;
    int freeable_block_count = 0;
    ca_pool *pool = &ca->large_blocks;
    for (ca_block *b = treap_first(pool->blocks); b; b = treap_next(pool->blocks, b, false)) {
        if (!is_split(b)) { /* PyTorch counts unsplit expandable blocks here too, though it never frees them */
            total_age += gc_count(b);
            ++freeable_block_count;
        }
    }
    if (freeable_block_count == 0)
        return;
    bool block_freed = true;
    while (gc_reclaimed < target_size && block_freed && freeable_block_count > 0) {
        double age_threshold = (double)total_age / freeable_block_count;
        block_freed = false;
        ca_block *it = treap_first(pool->blocks);
        while (it) {
            ca_block *block = it;
            it = treap_next(pool->blocks, it, false);
            if (!is_split(block) && !block->es && (double)gc_count(block) >= age_threshold) {
                block_freed = true;
                gc_reclaimed += block->size;
                total_age -= gc_count(block);
                freeable_block_count--;
                release_block(ca, block);
            }
        }
    }
}

/* --------------------------------------------------------------------------------------------------------
 * Hand-out and free
 * ------------------------------------------------------------------------------------------------------ */

/* alloc_found_block: split off the low part if should_split, and account the hand-out. */
static ca_block *alloc_found_block(cachealloc *ca, alloc_params *p, size_t orig_size, bool split_remainder)
{
    ca_block *block = p->block;
    ca_pool *pool = p->pool;
    int pst = pool->stat;
    bool already_split = is_split(block);
    if (split_remainder) {
        ca_block *remaining = block;
        block = block_new(ca, remaining->ptr, remaining->key, p->size, pool, remaining->stream);
        block->es = remaining->es;
        block->prev = remaining->prev;
        if (block->prev)
            block->prev->next = block;
        block->next = remaining;
        remaining->prev = block;
        remaining->ptr += p->size;
        remaining->key += p->size;
        remaining->size -= p->size;
        pool_insert(pool, remaining);
        if (already_split && !block->es) {
            /* an already-split inactive block shrinks by size bytes */
            stat_array_update(ca->stats.inactive_split_bytes, pst, -(int64_t)block->size);
        } else if (!block->es) {
            /* a new split inactive block is created from an unsplit one */
            stat_array_update(ca->stats.inactive_split_bytes, pst, (int64_t)remaining->size);
            stat_array_update(ca->stats.inactive_split, pst, 1);
        }
    } else if (already_split && !block->es) {
        /* an already-split block becomes active */
        stat_array_update(ca->stats.inactive_split_bytes, pst, -(int64_t)block->size);
        stat_array_update(ca->stats.inactive_split, pst, -1);
    }
    block->allocated = true;
    block->requested_size = orig_size;
    record_trace(ca, CA_ALLOC, block->ptr, orig_size);
    table_insert(ca, block);
    stat_array_increase(ca->stats.allocation, pst, 1);
    stat_array_increase(ca->stats.allocated_bytes, pst, (int64_t)block->size);
    if (ca->stats.allocated_bytes[STAT_ALL].current > ca->window_peak)
        ca->window_peak = ca->stats.allocated_bytes[STAT_ALL].current;
    stat_array_increase(ca->stats.active, pst, 1);
    stat_array_increase(ca->stats.active_bytes, pst, (int64_t)block->size);
    stat_array_increase(ca->stats.requested_bytes, pst, (int64_t)block->requested_size);
    if (block->size >= ca->conf.max_split_size)
        stat_increase(&ca->stats.oversize_allocations, 1);
    return block;
}

/* free_block: return a block to its pool, merging with free neighbours. */
static void free_block(cachealloc *ca, ca_block *block)
{
    record_trace(ca, CA_FREE_COMPLETED, block->ptr, block->requested_size);
    size_t original_block_size = block->size;
    size_t requested_size = block->requested_size;
    ca_pool *pool = block->pool;
    int64_t net_blocks = 0, net_bytes = 0;
    ca_block *cands[2] = {block->prev, block->next};
    for (int i = 0; i < 2; i++) {
        size_t subsumed = try_merge_blocks(ca, block, cands[i], pool);
        if (subsumed > 0) {
            net_blocks -= 1;
            net_bytes -= (int64_t)subsumed;
        }
    }
    pool_insert(pool, block);
    if (is_split(block)) {
        net_blocks += 1;
        net_bytes += (int64_t)block->size;
    }
    int pst = pool->stat;
    if (!block->es) {
        /* expandable blocks are left out of inactive_split: their free pages can always be released */
        stat_array_update(ca->stats.inactive_split, pst, net_blocks);
        stat_array_update(ca->stats.inactive_split_bytes, pst, net_bytes);
    }
    stat_array_decrease(ca->stats.active, pst, 1);
    stat_array_decrease(ca->stats.active_bytes, pst, (int64_t)original_block_size);
    stat_array_decrease(ca->stats.requested_bytes, pst, (int64_t)requested_size);
}

/* --------------------------------------------------------------------------------------------------------
 * OOM
 * ------------------------------------------------------------------------------------------------------ */

size_t cachealloc_largest_free_block(const cachealloc *ca)
{
    size_t best = 0;
    for (int st = 0; st <= ca->max_stream; st++) { /* the largest of each stream: the last block below st + 1 */
        const ca_block *a = treap_lower_bound(ca->small_blocks.blocks, st + 1, 0, 0, false);
        const ca_block *b = treap_lower_bound(ca->large_blocks.blocks, st + 1, 0, 0, false);
        a = a ? treap_prev(ca->small_blocks.blocks, a, false) : treap_prev(ca->small_blocks.blocks, NULL, false);
        b = b ? treap_prev(ca->large_blocks.blocks, b, false) : treap_prev(ca->large_blocks.blocks, NULL, false);
        if (a && a->stream == st && a->size > best)
            best = a->size;
        if (b && b->stream == st && b->size > best)
            best = b->size;
    }
    return best;
}

static void record_oom(cachealloc *ca, const alloc_params *p, size_t orig_size)
{
    size_t dfree = 0, dtotal = 0;
    device_mem_info(ca->dev, &dfree, &dtotal);
    record_trace(ca, CA_OOM, dfree, p->size);
    ca->stats.num_ooms++;

    ca_oom_info *o = &ca->oom;
    memset(o, 0, sizeof *o);
    o->requested = orig_size;
    o->rounded = p->size;
    o->alloc_size = p->alloc_size;
    o->device_total = dtotal;
    o->device_free = dfree;
    o->capped = ca->capped;
    o->allowed = ca->allowed;
    o->allocated = (size_t)ca->stats.allocated_bytes[STAT_ALL].current;
    o->reserved = (size_t)ca->stats.reserved_bytes[STAT_ALL].current;
    o->largest_free_block = cachealloc_largest_free_block(ca);
    o->fragmented_share = o->reserved ? (double)(o->reserved - o->allocated) / (double)o->reserved : 0.0;

    /* reportProcessMemoryInfo: each compute process NVML lists, this one in its own words */
    char proc[512] = "";
    device_proc procs[DEVICE_MAX_PROCS];
    size_t nprocs = 0, poff = 0;
    if (device_processes(ca->dev, procs, DEVICE_MAX_PROCS, &nprocs) == OOM_OK) {
        for (size_t i = 0; i < nprocs && i < DEVICE_MAX_PROCS && poff < sizeof proc; i++) {
            char u[32];
            memstats_format_size(procs[i].used_bytes, u, sizeof u);
            int w = procs[i].self
                        ? snprintf(proc + poff, sizeof proc - poff,
                                   "Including non-PyTorch memory, this process has %s memory in use. ", u)
                        : snprintf(proc + poff, sizeof proc - poff, "Process %u has %s memory in use. ",
                                   procs[i].pid, u);
            if (w < 0)
                break;
            poff += (size_t)w;
            if (procs[i].self)
                o->process_in_use = (size_t)procs[i].used_bytes;
        }
    }
    char a[32], t[32], f[32], al[32], ru[32], cap[64] = "", lf[32], priv[96] = "";
    /* the free cached blocks of private pools count as allocated (PRIV) */
    size_t in_private = cachealloc_private_free_bytes(ca);
    if (in_private > 0) {
        char pb[32];
        snprintf(priv, sizeof priv, "with %s allocated in private pools (e.g., CUDA Graphs), ",
                 memstats_format_size(in_private, pb, sizeof pb));
    }
    memstats_format_size(p->alloc_size, a, sizeof a);
    memstats_format_size(dtotal, t, sizeof t);
    memstats_format_size(dfree, f, sizeof f);
    memstats_format_size(o->allocated + in_private, al, sizeof al);
    memstats_format_size(o->reserved - o->allocated - in_private, ru, sizeof ru);
    memstats_format_size(o->largest_free_block, lf, sizeof lf);
    if (ca->capped) {
        char c[32];
        snprintf(cap, sizeof cap, "%s allowed; ", memstats_format_size(ca->allowed, c, sizeof c));
    }
    /* PyTorch's text, then oomlab's two figures after it (cut short, never overrun, if it ever does not fit) */
    int n = snprintf(o->message, sizeof o->message,
                     "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
                     "free. %s%sOf the allocated memory %s is allocated by PyTorch, %sand %s is reserved by PyTorch but "
                     "unallocated. If reserved but unallocated memory is large try setting "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
                     "for Memory Management  "
                     "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-"
                     "cuda-alloc-conf)",
                     a, ca->device_id, t, f, proc, cap, al, priv, ru);
    if (n >= 0 && (size_t)n < sizeof o->message) {
        int m = snprintf(o->message + n, sizeof o->message - (size_t)n,
                         " [oomlab] Largest free cached block: %s; fragmented: %.1f%% of reserved memory is cached "
                         "but unusable for this request.",
                         lf, 100.0 * o->fragmented_share);
        (void)m;
    }
    ca->have_oom = true;
    if (ca->keep_oom_layout) { /* out of host memory: no layout, said by a count of 0 */
        cachealloc_snapshot_free(ca->oom_layout, ca->oom_nlayout);
        ca->oom_layout = cachealloc_layout(ca, &ca->oom_nlayout);
        if (!ca->oom_layout)
            ca->oom_nlayout = 0;
    }
}

/* --------------------------------------------------------------------------------------------------------
 * Caching off: forceUncachedAllocator()'s uncached_allocate / uncached_delete
 * ------------------------------------------------------------------------------------------------------ */

/* cudaMalloc(nbytes) of its own; no stat, no trace, no budget (cachealloc.h). */
static oom_status uncached_allocate(cachealloc *ca, size_t nbytes, devptr *out)
{
    devptr p = 0;
    oom_status st = device_mem_alloc(ca->dev, nbytes, &p);
    if (st == OOM_ENOMEM_DEVICE || st == OOM_ELIMIT) {
        /* C10_CUDA_CHECK raises the driver's error: no allocator OOM, so num_ooms and the trace stay as they are */
        size_t dfree = 0, dtotal = 0;
        device_mem_info(ca->dev, &dfree, &dtotal);
        ca_oom_info *o = &ca->oom;
        memset(o, 0, sizeof *o);
        o->requested = o->rounded = o->alloc_size = nbytes;
        o->device_total = dtotal;
        o->device_free = dfree;
        snprintf(o->message, sizeof o->message,
                 "CUDA error: out of memory [oomlab] caching off (PYTORCH_NO_CUDA_MEMORY_CACHING): a cudaMalloc of "
                 "%zu bytes failed with %zu bytes free",
                 nbytes, dfree);
        ca->have_oom = true;
        return OOM_ENOMEM_DEVICE;
    }
    if (st != OOM_OK)
        return st;
    ca_block *b = block_new(ca, p, device_order_key(ca->dev, p), nbytes, get_pool(ca, nbytes), ca->stream);
    b->allocated = true;
    b->requested_size = nbytes;
    table_insert(ca, b);
    *out = p;
    debug_check(ca);
    return OOM_OK;
}

/* cudaFree at once; block was taken out of the active table. */
static oom_status uncached_delete(cachealloc *ca, ca_block *block)
{
    oom_status st = device_mem_free(ca->dev, block->ptr, block->size);
    block_delete(ca, block);
    debug_check(ca);
    return st;
}

/* --------------------------------------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------------------------------------ */

oom_status cachealloc_new(device *dev, const cachealloc_options *opt, cachealloc **out)
{
    cachealloc *ca = calloc(1, sizeof *ca);
    if (!ca)
        return OOM_ENOMEM_HOST;
    ca->dev = dev;
    ca->conf = opt->conf;
    ca->device_id = opt->device_id;
    pool_init(&ca->small_blocks, 0, true);
    pool_init(&ca->large_blocks, 0, false);
    ca->rng = 0x6F6F6D6C6162ULL; /* deterministic treap shapes */
    ca->uncached = opt->uncached;
    /* setMemoryFraction: a fraction below 1 caps held memory at fraction x totalGlobalMem. A budget is
     * set_per_process_memory_fraction(budget / total), which also initialises CUDA. */
    if (opt->budget_bytes) {
        ca->allowed = cachealloc_budget_cap(opt->budget_bytes, dev->total_bytes);
        ca->capped = ca->allowed > 0 && !ca->uncached; /* uncached: the cap is set but never asked */
        ca->initialized = true;
    } else if (ca->conf.per_process_memory_fraction < 1.0 && !ca->uncached) {
        ca->capped = true;
        ca->allowed = (size_t)(ca->conf.per_process_memory_fraction * (double)dev->total_bytes);
    }
    for (int i = 0; i < ALLOC_CONF_ROUNDUP_BUCKETS; i++)
        if (ca->conf.roundup_divisions[i] > 1)
            ca->has_divisions = true;
    ca->stats.max_split_size = ca->conf.max_split_size == SIZE_MAX ? -1 : (int64_t)ca->conf.max_split_size;
    ca->table_mask = 255;
    ca->table_shift = 64 - 8;
    ca->table = calloc(256, sizeof *ca->table);
    if (!ca->table) {
        free(ca);
        return OOM_ENOMEM_HOST;
    }
    *out = ca;
    return OOM_OK;
}

void cachealloc_delete(cachealloc *ca)
{
    if (!ca)
        return;
    if (ca->uncached) /* live allocations go back too, as live blocks do with caching on */
        for (size_t i = 0; i <= ca->table_mask; i++)
            for (ca_block *b = ca->table[i]; b; b = b->hnext)
                device_mem_free(ca->dev, b->ptr, b->size);
    for (size_t i = 0; i < ca->nsegs; i++)
        device_mem_free(ca->dev, ca->segs[i].ptr, ca->segs[i].size);
    for (expseg *es = ca->expsegs, *nx; es; es = nx) {
        nx = es->next_es;
        for (size_t i = 0; i < es->max_pages; i++)
            if (es->mapped[i])
                device_va_unmap(ca->dev, es->base + i * es->page, es->page, es->page);
        device_va_release(ca->dev, es->base, es->max_pages * es->page);
        free(es->mapped);
        free(es);
    }
    for (size_t i = 0; i < ca->npriv; i++)
        free(ca->priv[i]);
    free(ca->priv);
    for (size_t i = 0; i < ca->nslabs; i++)
        free(ca->slabs[i]);
    free(ca->slabs);
    free(ca->segs);
    free(ca->table);
    free(ca->trace);
    cachealloc_snapshot_free(ca->oom_layout, ca->oom_nlayout);
    free(ca);
}

size_t cachealloc_budget_cap(size_t budget, size_t total)
{
    if (budget == 0 || total == 0 || budget >= total)
        return 0;
    double fraction = (double)budget / (double)total; /* Python's budget / total */
    return (size_t)(fraction * (double)total);
}

bool cachealloc_budget_allows_nothing(size_t budget, size_t total, const char *what, char *err, size_t errcap)
{
    if (budget == 0 || budget >= total || cachealloc_budget_cap(budget, total) > 0)
        return false;
    size_t least = budget;
    while (cachealloc_budget_cap(least, total) == 0 && least < total)
        least++;
    snprintf(err, errcap,
             "%s: %zu bytes allows 0 bytes on a device of %zu (set_per_process_memory_fraction keeps (size_t)(budget / "
             "total x total)): PyTorch would run out at the first allocation; the least budget that allows any is %zu "
             "bytes",
             what, budget, total, least);
    return true;
}

oom_status cachealloc_malloc(cachealloc *ca, size_t nbytes, devptr *out)
{
    ca->initialized = true; /* a CUDA tensor initialises CUDA, whatever its size */
    if (nbytes == 0) {
        *out = 0;
        return OOM_OK;
    }
    if (nbytes >= CA_MAX_REQUEST) {
        /* PyTorch throws before any counter, trace entry or observer; the record describes this request only */
        memset(&ca->oom, 0, sizeof ca->oom);
        ca->oom.requested = nbytes;
        snprintf(ca->oom.message, sizeof ca->oom.message,
                 "CUDA out of memory. Tried to allocate more than 1EB memory.");
        ca->have_oom = true;
        return OOM_ENOMEM_DEVICE;
    }
    if (ca->uncached)
        return uncached_allocate(ca, nbytes, out);
    size_t size = round_size(ca, nbytes);
    alloc_params p = {.size = size, .alloc_size = get_allocation_size(ca, size), .pool = get_pool(ca, size)};

    bool found = get_free_block(ca, &p);
    if (!found) {
        if (gc_enabled(ca))
            garbage_collect_cached_blocks(ca);
        found = alloc_block(ca, &p, false);
        if (!found && p.err == OOM_ENOMEM_DEVICE && release_available_cached_blocks(ca, &p))
            found = alloc_block(ca, &p, false);
        if (!found && p.err == OOM_ENOMEM_DEVICE && !ca->capture) { /* C10_LIKELY(captures_underway.empty()) */
            release_cached_blocks(ca);
            found = alloc_block(ca, &p, true);
        }
    }
    if (!found) {
        if (p.err == OOM_ENOMEM_DEVICE)
            record_oom(ca, &p, nbytes);
        debug_check(ca);
        return p.err == OOM_OK ? OOM_ENOMEM_DEVICE : p.err;
    }
    bool split = should_split(ca, p.block, size);
    ca_block *b = alloc_found_block(ca, &p, nbytes, split);
    *out = b->ptr;
    debug_check(ca);
    return OOM_OK;
}

oom_status cachealloc_free(cachealloc *ca, devptr ptr)
{
    if (ptr == 0)
        return OOM_OK;
    ca_block *block = table_remove(ca, ptr);
    if (!block) {
        OOM_ERROR(OOM_EINVAL, "free of unknown pointer 0x%llx", (unsigned long long)ptr);
        return OOM_EINVAL;
    }
    if (ca->uncached)
        return uncached_delete(ca, block);
    block->allocated = false;
    int pst = block->pool->stat;
    stat_array_decrease(ca->stats.allocation, pst, 1);
    stat_array_decrease(ca->stats.allocated_bytes, pst, (int64_t)block->size);
    record_trace(ca, CA_FREE_REQUESTED, block->ptr, block->requested_size);
    if (block->size >= ca->conf.max_split_size)
        stat_decrease(&ca->stats.oversize_allocations, 1);
    free_block(ca, block); /* one stream, no recorded events: the free completes at once */
    debug_check(ca);
    return OOM_OK;
}

size_t cachealloc_block_size(const cachealloc *ca, devptr p)
{
    const ca_block *b = table_find(ca, p);
    return b ? b->size : 0;
}

void cachealloc_empty_cache(cachealloc *ca)
{
    if (!ca->initialized)
        return; /* torch.cuda.empty_cache() checks is_initialized() first */
    release_cached_blocks(ca);
    debug_check(ca);
}

bool cachealloc_would_release(const cachealloc *ca, size_t nbytes)
{
    if (nbytes == 0 || nbytes >= CA_MAX_REQUEST || ca->uncached)
        return false; /* caching off: nothing is cached, nothing released */
    size_t size = round_size(ca, nbytes);
    size_t alloc_size = get_allocation_size(ca, size);
    const ca_pool *pool = get_pool((cachealloc *)ca, size);
    if (find_free_block(ca, pool, size, NULL))
        return false;
    if (gc_enabled(ca) && ca->total_allocated_memory > (size_t)(ca->conf.gc_threshold * (double)ca->allowed)) {
        for (const ca_block *b = treap_first(ca->large_blocks.blocks); b;
             b = treap_next(ca->large_blocks.blocks, b, false))
            if (!is_split(b) && !b->es)
                return true;
    }
    if (would_exceed_budget(ca, alloc_size))
        return true;
    size_t dfree = 0, dtotal = 0;
    if (device_mem_info(ca->dev, &dfree, &dtotal) != OOM_OK)
        return false;
    return dfree < alloc_size;
}

static ca_privpool *find_private_pool(const cachealloc *ca, int pool)
{
    for (size_t i = 0; i < ca->npriv; i++)
        if (ca->priv[i]->id == pool)
            return ca->priv[i];
    return NULL;
}

oom_status cachealloc_begin_allocate_to_pool(cachealloc *ca, int pool)
{
    if (pool <= 0 || ca->capture) {
        OOM_ERROR(OOM_EINVAL, "beginAllocateToPool(%d): %s", pool,
                  pool <= 0 ? "a private pool's id is positive" : "another pool is being allocated to");
        return OOM_EINVAL;
    }
    ca_privpool *pp = find_private_pool(ca, pool);
    if (pp) {
        pp->use_count++;
    } else { /* create_or_incref_pool: a new pool starts with one use */
        if (ca->npriv == ca->cappriv) {
            size_t cap = ca->cappriv ? ca->cappriv * 2 : 4;
            ca_privpool **v = realloc(ca->priv, cap * sizeof *v);
            if (!v)
                return OOM_ENOMEM_HOST;
            ca->priv = v;
            ca->cappriv = cap;
        }
        pp = calloc(1, sizeof *pp);
        if (!pp)
            return OOM_ENOMEM_HOST;
        pp->id = pool;
        pp->use_count = 1;
        pool_init(&pp->small_blocks, pool, true);
        pool_init(&pp->large_blocks, pool, false);
        ca->priv[ca->npriv++] = pp;
    }
    ca->capture = pp;
    return OOM_OK;
}

void cachealloc_end_allocate_to_pool(cachealloc *ca, int pool)
{
    if (ca->capture && ca->capture->id == pool)
        ca->capture = NULL;
}

void cachealloc_release_pool(cachealloc *ca, int pool)
{
    ca_privpool *pp = find_private_pool(ca, pool);
    if (pp && pp->use_count > 0)
        pp->use_count--;
}

int cachealloc_allocating_pool(const cachealloc *ca) { return ca->capture ? ca->capture->id : 0; }

size_t cachealloc_private_free_bytes(const cachealloc *ca)
{
    size_t n = 0;
    for (size_t i = 0; i < ca->npriv; i++) {
        const ca_pool *pools[2] = {&ca->priv[i]->small_blocks, &ca->priv[i]->large_blocks};
        for (int k = 0; k < 2; k++)
            for (const ca_block *b = treap_first(pools[k]->blocks); b; b = treap_next(pools[k]->blocks, b, false))
                n += b->size;
    }
    return n;
}

void cachealloc_set_stream(cachealloc *ca, int stream)
{
    ca->stream = stream < 0 ? 0 : stream;
    if (ca->stream > ca->max_stream)
        ca->max_stream = ca->stream;
}

int cachealloc_stream(const cachealloc *ca) { return ca->stream; }

const memstats *cachealloc_stats(const cachealloc *ca) { return &ca->stats; }

void cachealloc_reset_peak(cachealloc *ca) { memstats_reset_peak(&ca->stats); }

int64_t cachealloc_take_window_peak(cachealloc *ca)
{
    int64_t cur = ca->stats.allocated_bytes[STAT_ALL].current, peak = ca->window_peak > cur ? ca->window_peak : cur;
    ca->window_peak = cur;
    return peak;
}

void cachealloc_reset_accumulated(cachealloc *ca) { memstats_reset_accumulated(&ca->stats); }

const alloc_conf *cachealloc_conf(const cachealloc *ca) { return &ca->conf; }

size_t cachealloc_budget(const cachealloc *ca) { return ca->capped ? ca->allowed : 0; }

const ca_oom_info *cachealloc_last_oom(const cachealloc *ca) { return ca->have_oom ? &ca->oom : NULL; }

void cachealloc_record_history(cachealloc *ca, bool enabled) { ca->recording = enabled; }

const ca_trace_entry *cachealloc_trace(const cachealloc *ca, size_t *count)
{
    *count = ca->ntrace;
    return ca->trace;
}

void cachealloc_trace_clear(cachealloc *ca) { ca->ntrace = 0; }

char *cachealloc_summary(const cachealloc *ca, bool abbreviated)
{
    return memstats_summary(&ca->stats, ca->device_id, abbreviated);
}

/* --------------------------------------------------------------------------------------------------------
 * Walking every block: the validator and snapshots
 * ------------------------------------------------------------------------------------------------------ */

typedef struct block_list {
    const ca_block **v;
    size_t n, cap;
} block_list;

static void bl_push(block_list *l, const ca_block *b)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = b;
}

static void bl_tree(block_list *l, const ca_block *t)
{
    if (!t)
        return;
    bl_tree(l, t->left);
    bl_push(l, t);
    bl_tree(l, t->right);
}

static int cmp_ptr(const void *a, const void *b)
{
    devptr x = (*(const ca_block *const *)a)->ptr, y = (*(const ca_block *const *)b)->ptr;
    return x < y ? -1 : x > y;
}

/* All blocks, sorted by address. */
static block_list all_blocks(const cachealloc *ca)
{
    block_list l = {0};
    if (ca->uncached)
        return l; /* nothing is cached: _snapshot() of the device allocator is empty */
    bl_tree(&l, ca->small_blocks.blocks);
    bl_tree(&l, ca->large_blocks.blocks);
    bl_tree(&l, ca->small_blocks.unmapped);
    bl_tree(&l, ca->large_blocks.unmapped);
    for (size_t i = 0; i < ca->npriv; i++) {
        bl_tree(&l, ca->priv[i]->small_blocks.blocks);
        bl_tree(&l, ca->priv[i]->large_blocks.blocks);
        bl_tree(&l, ca->priv[i]->small_blocks.unmapped);
        bl_tree(&l, ca->priv[i]->large_blocks.unmapped);
    }
    for (size_t i = 0; i <= ca->table_mask; i++)
        for (const ca_block *b = ca->table[i]; b; b = b->hnext)
            bl_push(&l, b);
    if (l.n)
        qsort(l.v, l.n, sizeof *l.v, cmp_ptr);
    return l;
}

static bool tree_contains(const ca_block *t, const ca_block *n, bool by_addr)
{
    while (t) {
        if (t == n)
            return true;
        t = key_less(n->stream, KSIZE(n, by_addr), n->key, t->stream, KSIZE(t, by_addr), t->key) ? t->left : t->right;
    }
    return false;
}

/* Walk the blocks of one segment (or range) [base, base+size) starting at l->v[*i]; checks I1, I2, I3, I4 and
 * adds to the recount. */
typedef struct recount {
    int64_t alloc_n[STAT_TYPES], alloc_b[STAT_TYPES], req_b[STAT_TYPES];
    int64_t seg_n[STAT_TYPES], res_b[STAT_TYPES], split_n[STAT_TYPES], split_b[STAT_TYPES];
    int64_t oversize_alloc, oversize_seg;
} recount;

static void rc_add(int64_t *a, int pool, int64_t x)
{
    a[STAT_ALL] += x;
    a[pool] += x;
}

/* Caching off: the invariant stated at cachealloc.uncached. */
static oom_status check_uncached(const cachealloc *ca)
{
    oom_status rc = OOM_OK;
    size_t n = 0;
    OOM_CHECK(!ca->small_blocks.blocks && !ca->large_blocks.blocks && !ca->small_blocks.unmapped &&
              !ca->large_blocks.unmapped && ca->nsegs == 0 && !ca->expsegs,
          "caching off, yet blocks are cached");
    OOM_CHECK(ca->total_allocated_memory == 0 && !ca->capped && ca->ntrace == 0, "caching off, yet memory is counted");
    for (size_t i = 0; i <= ca->table_mask; i++)
        for (const ca_block *b = ca->table[i]; b; b = b->hnext, n++)
            OOM_CHECK(b->allocated && b->mapped && !b->prev && !b->next && !b->es && b->size > 0,
                  "caching off: block 0x%llx is not one whole allocation", (unsigned long long)b->ptr);
    OOM_CHECK(n == ca->nactive, "active table holds %zu blocks, counted %zu", ca->nactive, n);
    memstats zero;
    memset(&zero, 0, sizeof zero);
    zero.num_sync_all_streams = ca->stats.num_sync_all_streams;
    zero.max_split_size = ca->stats.max_split_size;
    zero.accumulated_reset = ca->stats.accumulated_reset;
    OOM_CHECK(memcmp(&zero, &ca->stats, sizeof zero) == 0, "caching off, yet a memory_stats counter moved");
out:
    return rc;
}

oom_status cachealloc_check(const cachealloc *ca)
{
    if (ca->uncached)
        return check_uncached(ca);
    oom_status rc = OOM_OK;
    block_list l = all_blocks(ca);
    recount r = {0};
    size_t i = 0, si = 0;
    expseg *es;
    OOM_CHECK(l.n == 0 || l.v[0] != NULL, "null block");
    for (size_t k = 0; k < ca->npriv; k++) { /* I9 */
        const ca_privpool *pp = ca->priv[k];
        OOM_CHECK(pp->use_count >= 0 && pp->id > 0 && pp->small_blocks.owner == pp->id &&
                      pp->large_blocks.owner == pp->id,
                  "I9: private pool %d: use count %d", pp->id, pp->use_count);
    }
    OOM_CHECK(!ca->capture || find_private_pool(ca, ca->capture->id) == ca->capture, "I9: capture into an unknown pool");
    /* cudaMalloc segments and expandable ranges interleave in address order; walk blocks in order. */
    while (i < l.n) {
        const ca_block *first = l.v[i];
        devptr base;
        size_t size;
        ca_pool *pool;
        if (first->es) {
            es = first->es;
            base = es->base;
            size = es->max_pages * es->page;
            pool = es->pool;
        } else {
            OOM_CHECK(si < ca->nsegs && ca->segs[si].ptr == first->ptr, "block 0x%llx starts no known segment",
                  (unsigned long long)first->ptr);
            base = ca->segs[si].ptr;
            size = ca->segs[si].size;
            pool = ca->segs[si].pool;
            si++;
            rc_add(r.seg_n, pool->stat, 1);
            rc_add(r.res_b, pool->stat, (int64_t)size);
            if (size >= ca->conf.max_split_size)
                r.oversize_seg++;
        }
        OOM_CHECK(first->prev == NULL, "segment 0x%llx: first block has a prev", (unsigned long long)base);
        OOM_CHECK(first->ptr == base, "segment 0x%llx: first block at wrong address", (unsigned long long)base);
        size_t sum = 0;
        bool split = first->next != NULL;
        const ca_block *b = first;
        for (;; i++) {
            OOM_CHECK(i < l.n && l.v[i] == b, "segment 0x%llx: list and address order disagree at 0x%llx",
                  (unsigned long long)base, (unsigned long long)b->ptr);
            OOM_CHECK(b->pool == pool && b->es == first->es, "block 0x%llx: wrong pool or range",
                  (unsigned long long)b->ptr);
            OOM_CHECK(pool == &ca->small_blocks || pool == &ca->large_blocks ||
                          (find_private_pool(ca, pool->owner) &&
                           (pool == &find_private_pool(ca, pool->owner)->small_blocks ||
                            pool == &find_private_pool(ca, pool->owner)->large_blocks)),
                      "I9: block 0x%llx in no pool of this allocator", (unsigned long long)b->ptr);
            OOM_CHECK(b->key - b->ptr == first->key - first->ptr, "block 0x%llx: ordering key off its segment's",
                  (unsigned long long)b->ptr); /* I7 */
            OOM_CHECK(b->stream == first->stream && (!b->es || b->stream == b->es->stream) && b->stream >= 0 &&
                          b->stream <= ca->max_stream,
                      "I8: block 0x%llx: stream %d, its segment's %d", (unsigned long long)b->ptr, b->stream,
                      first->stream);
            OOM_CHECK(b->size > 0, "block 0x%llx: empty", (unsigned long long)b->ptr);
            sum += b->size;
            if (b->allocated) {
                OOM_CHECK(b->mapped, "allocated block 0x%llx unmapped", (unsigned long long)b->ptr);
                OOM_CHECK(table_find(ca, b->ptr) == b, "allocated block 0x%llx not in the active table",
                      (unsigned long long)b->ptr);
                rc_add(r.alloc_n, pool->stat, 1);
                rc_add(r.alloc_b, pool->stat, (int64_t)b->size);
                rc_add(r.req_b, pool->stat, (int64_t)b->requested_size);
                if (b->size >= ca->conf.max_split_size)
                    r.oversize_alloc++;
            } else if (b->mapped) {
                OOM_CHECK(tree_contains(pool->blocks, b, false), "free block 0x%llx not in its pool",
                      (unsigned long long)b->ptr);
                if (split && !b->es) {
                    rc_add(r.split_n, pool->stat, 1);
                    rc_add(r.split_b, pool->stat, (int64_t)b->size);
                }
            } else {
                OOM_CHECK(b->es, "unmapped block 0x%llx outside a range", (unsigned long long)b->ptr);
                OOM_CHECK(tree_contains(pool->unmapped, b, true), "unmapped block 0x%llx not in unmapped set",
                      (unsigned long long)b->ptr);
            }
            if (b->es) {
                /* I4: pages inside mapped blocks are mapped; pages wholly inside unmapped ones are not */
                size_t pg = b->es->page, off = (size_t)(b->ptr - base);
                size_t lo = b->mapped ? off / pg : (off + pg - 1) / pg;
                size_t hi = b->mapped ? (off + b->size + pg - 1) / pg : (off + b->size) / pg;
                for (size_t k = lo; k < hi; k++)
                    OOM_CHECK(b->es->mapped[k] == (b->mapped ? 1 : 0), "range 0x%llx page %zu: mapped state wrong",
                          (unsigned long long)base, k);
            }
            const ca_block *n = b->next;
            if (!n)
                break;
            OOM_CHECK(n->prev == b, "block 0x%llx: next->prev broken", (unsigned long long)b->ptr);
            OOM_CHECK(n->ptr == b->ptr + b->size, "block 0x%llx: gap or overlap before next", (unsigned long long)b->ptr);
            OOM_CHECK(b->allocated || n->allocated || b->mapped != n->mapped, "blocks 0x%llx and 0x%llx both free",
                  (unsigned long long)b->ptr, (unsigned long long)n->ptr);
            b = n;
        }
        i++;
        OOM_CHECK(sum == size, "segment 0x%llx: blocks sum to %zu, segment is %zu", (unsigned long long)base, sum, size);
    }
    OOM_CHECK(si == ca->nsegs, "%zu segments have no blocks", ca->nsegs - si);
    /* reserved bytes of expandable ranges are their mapped pages */
    for (es = ca->expsegs; es; es = es->next_es) {
        size_t pages = 0;
        for (size_t k = 0; k < es->max_pages; k++)
            pages += es->mapped[k];
        rc_add(r.res_b, es->pool->stat, (int64_t)(pages * es->page));
    }
    OOM_CHECK(ca->nactive == (size_t)r.alloc_n[STAT_ALL], "active table holds %zu blocks, %lld allocated", ca->nactive,
          (long long)r.alloc_n[STAT_ALL]);
    OOM_CHECK((int64_t)ca->total_allocated_memory == r.res_b[STAT_ALL], "held %zu bytes, recount %lld",
          ca->total_allocated_memory, (long long)r.res_b[STAT_ALL]);
    const memstats *m = &ca->stats;
    for (int k = 0; k < STAT_TYPES; k++) {
        OOM_CHECK(m->allocation[k].current == r.alloc_n[k], "allocation[%d] %lld != %lld", k,
              (long long)m->allocation[k].current, (long long)r.alloc_n[k]);
        OOM_CHECK(m->active[k].current == r.alloc_n[k], "active[%d] wrong", k);
        OOM_CHECK(m->allocated_bytes[k].current == r.alloc_b[k], "allocated_bytes[%d] %lld != %lld", k,
              (long long)m->allocated_bytes[k].current, (long long)r.alloc_b[k]);
        OOM_CHECK(m->active_bytes[k].current == r.alloc_b[k], "active_bytes[%d] wrong", k);
        OOM_CHECK(m->requested_bytes[k].current == r.req_b[k], "requested_bytes[%d] wrong", k);
        OOM_CHECK(m->segment[k].current == r.seg_n[k], "segment[%d] %lld != %lld", k, (long long)m->segment[k].current,
              (long long)r.seg_n[k]);
        OOM_CHECK(m->reserved_bytes[k].current == r.res_b[k], "reserved_bytes[%d] %lld != %lld", k,
              (long long)m->reserved_bytes[k].current, (long long)r.res_b[k]);
        OOM_CHECK(m->inactive_split[k].current == r.split_n[k], "inactive_split[%d] %lld != %lld", k,
              (long long)m->inactive_split[k].current, (long long)r.split_n[k]);
        OOM_CHECK(m->inactive_split_bytes[k].current == r.split_b[k], "inactive_split_bytes[%d] %lld != %lld", k,
              (long long)m->inactive_split_bytes[k].current, (long long)r.split_b[k]);
    }
    OOM_CHECK(m->oversize_allocations.current == r.oversize_alloc, "oversize_allocations wrong");
    OOM_CHECK(m->oversize_segments.current == r.oversize_seg, "oversize_segments wrong");
    rc = memstats_check(m);
out:
    free(l.v);
    return rc;
}

/* --------------------------------------------------------------------------------------------------------
 * Snapshot
 * ------------------------------------------------------------------------------------------------------ */

/* The segments in address order, block by block. whole_ranges false: _snapshot()'s view, one segment per run of
 * mapped blocks (unmapped blocks are left out); true: cachealloc_layout's, a segment per cudaMalloc segment or
 * expandable range, its unmapped blocks included. The first segment owns the block array. */
static ca_snap_segment *snapshot_of(const cachealloc *ca, bool whole_ranges, size_t *count)
{
    block_list l = all_blocks(ca);
    ca_snap_segment *segs = calloc(l.n ? l.n : 1, sizeof *segs);
    ca_snap_block *blocks = calloc(l.n ? l.n : 1, sizeof *blocks);
    size_t ns = 0, nb = 0;
    if (!segs || !blocks) {
        free(segs);
        free(blocks);
        free(l.v);
        return NULL;
    }
    ca_snap_segment *cur = NULL;
    const ca_block *prevb = NULL;
    for (size_t i = 0; i < l.n; i++) {
        const ca_block *b = l.v[i];
        if (!b->mapped && !whole_ranges) {
            cur = NULL;
            prevb = b;
            continue;
        }
        bool starts = whole_ranges ? b->prev == NULL || b->prev != prevb
                                   : b->prev == NULL || b->prev != prevb || !b->prev->mapped;
        if (!cur || starts) {
            cur = &segs[ns++];
            cur->address = b->ptr;
            cur->is_small = b->pool->is_small;
            cur->is_expandable = b->es != NULL;
            cur->stream = b->stream;
            cur->pool = b->pool->owner;
            cur->page_size = b->es ? b->es->page : 0;
            cur->blocks = &blocks[nb];
        }
        ca_snap_block *sb = &blocks[nb++];
        sb->addr = b->ptr;
        sb->size = b->size;
        sb->requested_size = b->requested_size;
        sb->state = b->allocated ? CA_SNAP_ALLOCATED : b->mapped ? CA_SNAP_INACTIVE : CA_SNAP_UNMAPPED;
        cur->nblocks++;
        cur->total_size += b->size;
        if (b->allocated) {
            cur->allocated_size += b->size;
            cur->active_size += b->size;
            cur->requested_size += b->requested_size;
        }
        prevb = b;
    }
    free(l.v);
    if (ns == 0) {
        free(blocks);
        segs[0].blocks = NULL;
    }
    *count = ns;
    return segs;
}

ca_snap_segment *cachealloc_snapshot(const cachealloc *ca, size_t *count) { return snapshot_of(ca, false, count); }

ca_snap_segment *cachealloc_layout(const cachealloc *ca, size_t *count) { return snapshot_of(ca, true, count); }

void cachealloc_record_oom_layout(cachealloc *ca, bool enabled) { ca->keep_oom_layout = enabled; }

ca_snap_segment *cachealloc_oom_layout(const cachealloc *ca, size_t *count)
{
    *count = 0;
    if (!ca->oom_layout || ca->oom_nlayout == 0)
        return NULL;
    size_t nb = 0;
    for (size_t i = 0; i < ca->oom_nlayout; i++)
        nb += ca->oom_layout[i].nblocks;
    ca_snap_segment *segs = malloc(ca->oom_nlayout * sizeof *segs);
    ca_snap_block *blocks = malloc((nb ? nb : 1) * sizeof *blocks);
    if (!segs || !blocks) {
        free(segs);
        free(blocks);
        return NULL;
    }
    memcpy(segs, ca->oom_layout, ca->oom_nlayout * sizeof *segs);
    memcpy(blocks, ca->oom_layout[0].blocks, nb * sizeof *blocks);
    for (size_t i = 0, off = 0; i < ca->oom_nlayout; off += segs[i].nblocks, i++)
        segs[i].blocks = &blocks[off];
    *count = ca->oom_nlayout;
    return segs;
}

void cachealloc_snapshot_free(ca_snap_segment *segs, size_t count)
{
    if (!segs)
        return;
    if (count > 0)
        free(segs[0].blocks);
    free(segs);
}
