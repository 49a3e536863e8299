/* test_cachealloc.c - the caching allocator against PyTorch 2.11's DeviceCachingAllocator, byte for byte.
 *
 * Suite "cachealloc". Every expectation is derived by hand from CUDACachingAllocator.cpp (malloc, get_free_block,
 * should_split, alloc_found_block, free_block, release_*, garbage_collect_cached_blocks, map_block, unmap_block)
 * and ../shared/reference/pytorch-allocator.md. The tests run on the backend under test (sim, or cuda with
 * OOMLAB_TEST_BACKEND=cuda): only relative addresses are asserted, and OOMs come from a budget, not the device.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------------------------------------------- */

typedef struct env {
    device *dev;
    cachealloc *ca;
} env;

static env mk(const char *conf, size_t budget, int device_id)
{
    env e = {0};
    e.dev = test_device_open(0);
    cr_assert_not_null(e.dev, "cannot open the %s backend", device_kind_str(test_backend()));
    cachealloc_options o = {.budget_bytes = budget, .device_id = device_id};
    alloc_conf_default(&o.conf);
    char err[256] = "";
    cr_assert_eq(alloc_conf_parse(&o.conf, conf, err, sizeof err), OOM_OK, "conf '%s': %s", conf, err);
    cr_assert_eq(cachealloc_new(e.dev, &o, &e.ca), OOM_OK);
    return e;
}

static env mkc(const char *conf) { return mk(conf, 0, 0); }

static void rm(env *e)
{
    cachealloc_delete(e->ca);
    device_close(e->dev);
}

static const memstats *ST(const cachealloc *ca) { return cachealloc_stats(ca); }

#define CHECK_OK(ca) cr_assert_eq(cachealloc_check(ca), OOM_OK, "cachealloc_check: %s", oom_error_msg())

static devptr A(cachealloc *ca, size_t n)
{
    devptr p = 0;
    oom_status st = cachealloc_malloc(ca, n, &p);
    cr_assert_eq(st, OOM_OK, "malloc(%zu): %s", n, oom_status_str(st));
    cr_assert_neq(p, 0);
    CHECK_OK(ca);
    return p;
}

static void F(cachealloc *ca, devptr p)
{
    cr_assert_eq(cachealloc_free(ca, p), OOM_OK);
    CHECK_OK(ca);
}

static void EC(cachealloc *ca)
{
    cachealloc_empty_cache(ca);
    CHECK_OK(ca);
}

/* malloc that must fail with a recorded OOM */
static void A_OOM(cachealloc *ca, size_t n)
{
    devptr p = 0x5a5a;
    cr_assert_eq(cachealloc_malloc(ca, n, &p), OOM_ENOMEM_DEVICE, "malloc(%zu) should OOM", n);
    cr_assert_eq(p, 0x5a5a, "*out written on failure");
    CHECK_OK(ca);
}

typedef struct kv {
    const char *key;
    int64_t val;
} kv;

static void expect_kv(const cachealloc *ca, const kv *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        cr_assert(memstats_get(ST(ca), e[i].key, &v), "unknown stat key %s", e[i].key);
        cr_assert_eq(v, e[i].val, "%s = %lld, want %lld", e[i].key, (long long)v, (long long)e[i].val);
    }
}

/* EXPECT(ca, {"key", value}, ...) */
#define EXPECT(ca, ...) expect_kv((ca), (const kv[]){__VA_ARGS__}, sizeof((const kv[]){__VA_ARGS__}) / sizeof(kv))

/* Every array's `pool` entry equals its `all` entry and the other pool is all zero. */
static void expect_only_pool(const cachealloc *ca, int pool)
{
    const memstats *m = ST(ca);
    const memstat *arr[9] = {m->allocation,     m->segment,        m->active,
                          m->inactive_split, m->allocated_bytes, m->reserved_bytes,
                          m->active_bytes,   m->inactive_split_bytes, m->requested_bytes};
    int other = pool == STAT_SMALL ? STAT_LARGE : STAT_SMALL;
    for (int i = 0; i < 9; i++) {
        cr_assert_eq(memcmp(&arr[i][pool], &arr[i][STAT_ALL], sizeof(memstat)), 0, "array %d: pool != all", i);
        cr_assert_eq(arr[i][other].current, 0, "array %d: other pool current", i);
        cr_assert_eq(arr[i][other].peak, 0, "array %d: other pool peak", i);
        cr_assert_eq(arr[i][other].allocated, 0, "array %d: other pool allocated", i);
        cr_assert_eq(arr[i][other].freed, 0, "array %d: other pool freed", i);
    }
}

static char *fmt(uint64_t bytes, char *buf) { return memstats_format_size(bytes, buf, 32); }

/* PyTorch's NVML line for this process ("" when the backend lists no processes): the sim of the H100 models it,
 * the cuda backend reads NVML. */
static const char *proc_of(const ca_oom_info *o)
{
    static char line[128];
    char u[32];
    line[0] = '\0';
    if (o->process_in_use)
        snprintf(line, sizeof line, "Including non-PyTorch memory, this process has %s memory in use. ",
                 fmt(o->process_in_use, u));
    return line;
}

/* PyTorch's OOM text (with this process's NVML line, where the backend lists it) up to and including the URL. */
static void pytorch_oom_text(char *out, size_t cap, const ca_oom_info *o, int device_id)
{
    char a[32], t[32], f[32], al[32], ru[32], cap_s[48] = "";
    if (o->capped) {
        char c[32];
        snprintf(cap_s, sizeof cap_s, "%s allowed; ", fmt(o->allowed, c));
    }
    snprintf(out, cap,
             "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "
             "%s%sOf the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated."
             " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
             "True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/"
             "stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
             fmt(o->alloc_size, a), device_id, fmt(o->device_total, t), fmt(o->device_free, f), proc_of(o), cap_s,
             fmt(o->allocated, al), fmt(o->reserved - o->allocated, ru));
}

/* The message starts with want_prefix (hand-computed, through "...but unallocated.") and then the full PyTorch
 * text recomputed from the record. */
static void expect_oom_message(const env *e, const char *want_prefix, int device_id)
{
    const ca_oom_info *o = cachealloc_last_oom(e->ca);
    cr_assert_not_null(o);
    size_t n = strlen(want_prefix);
    char head[1024];
    cr_assert_lt(n, sizeof head);
    memcpy(head, o->message, n);
    head[n] = 0;
    cr_assert_str_eq(head, want_prefix);
    char full[1024];
    pytorch_oom_text(full, sizeof full, o, device_id);
    cr_assert_eq(strncmp(o->message, full, strlen(full)), 0, "message:\n%s\nwant prefix:\n%s", o->message, full);
    cr_assert_eq(o->device_total, e->dev->total_bytes);
    if (test_backend() == DEVICE_SIM)
        cr_assert_eq(o->device_free, e->dev->total_bytes - o->reserved - DEVICE_SIM_CONTEXT_BYTES,
                     "sim free = capacity - held - the CUDA context's");
}

/* ---- 1. rounding ------------------------------------------------------------------------------------------ */

typedef struct rcase {
    size_t n, block, reserved;
} rcase;

static void run_rounding(const char *conf, const rcase *c, size_t nc)
{
    env e = mkc(conf);
    for (size_t i = 0; i < nc; i++) {
        devptr p = A(e.ca, c[i].n);
        cr_assert_eq(cachealloc_block_size(e.ca, p), c[i].block, "[%s] %zu: block %zu, want %zu", conf, c[i].n,
                     cachealloc_block_size(e.ca, p), c[i].block);
        EXPECT(e.ca, {"allocated_bytes.all.current", (int64_t)c[i].block},
               {"active_bytes.all.current", (int64_t)c[i].block}, {"requested_bytes.all.current", (int64_t)c[i].n},
               {"reserved_bytes.all.current", (int64_t)c[i].reserved});
        int pool = c[i].block <= CA_SMALL_SIZE ? STAT_SMALL : STAT_LARGE;
        cr_assert_eq(ST(e.ca)->allocated_bytes[pool].current, (int64_t)c[i].block, "%zu: wrong pool", c[i].n);
        F(e.ca, p);
        EC(e.ca); /* back to an empty allocator */
        EXPECT(e.ca, {"reserved_bytes.all.current", 0}, {"allocated_bytes.all.current", 0});
    }
    rm(&e);
}

Test(cachealloc, rounding_512_quantum_and_segment_bands)
{
    const rcase c[] = {
        {1, 512, 2 * MiB},
        {511, 512, 2 * MiB},
        {512, 512, 2 * MiB},
        {513, 1024, 2 * MiB},
        {1000, 1024, 2 * MiB},
        {1048575, 1048576, 2 * MiB},
        {1048576, 1048576, 2 * MiB},          /* kSmallSize is still small */
        {1048577, 1049088, 20 * MiB},         /* large pool, 20 MiB segment */
        {10485248, 10485248, 20 * MiB},       /* just under kMinLargeAlloc */
        {10485759, 10485760, 10485760},       /* kMinLargeAlloc: segment = size rounded to 2 MiB */
        {10485761, 10486272, 12 * MiB},
        {64 * MiB + 1, 64 * MiB + 512, 66 * MiB},
    };
    run_rounding("", c, sizeof c / sizeof c[0]);
}

Test(cachealloc, rounding_power2_divisions_single)
{
    /* d = 4 everywhere: above 512*d, round up to floor_pow2(n)/4; powers of two are kept */
    const rcase c[] = {
        {1200, 1536, 2 * MiB},     /* 1200 <= 2048: plain 512 rounding */
        {2048, 2048, 2 * MiB},
        {2049, 2560, 2 * MiB},
        {5000, 5120, 2 * MiB},
        {9000, 10240, 2 * MiB},    /* plain would be 9216 */
        {4096, 4096, 2 * MiB},
        {1200000, 1310720, 20 * MiB}, /* plain would be 1200128 */
        {1048577, 1310720, 20 * MiB},
        {2097152, 2097152, 20 * MiB},
        {3000000, 3145728, 20 * MiB},  /* bucket 1: step 512 KiB */
        {13000000, 14680064, 14 * MiB}, /* bucket 3: step 2 MiB */
        {16 * MiB, 16 * MiB, 16 * MiB},
    };
    run_rounding("roundup_power2_divisions:4", c, sizeof c / sizeof c[0]);
}

Test(cachealloc, rounding_power2_divisions_list)
{
    /* [1:4,>:8]: bucket 0 (< 2 MiB) d=4, the rest d=8 */
    const rcase a[] = {
        {1200, 1536, 2 * MiB},
        {9000, 10240, 2 * MiB},
        {1200000, 1310720, 20 * MiB},
        {2200000, 2359296, 20 * MiB}, /* d=8: step 256 KiB (d=4 would give 2621440, plain 2200064) */
        {2097152, 2097152, 20 * MiB},
    };
    run_rounding("roundup_power2_divisions:[1:4,>:8]", a, sizeof a / sizeof a[0]);
    /* [1:0,>:4]: bucket 0 plain, the rest d=4 */
    const rcase b[] = {
        {1200000, 1200128, 20 * MiB},
        {9000, 9216, 2 * MiB},
        {2097151, 2097152, 20 * MiB}, /* bucket 0 */
        {2097153, 2621440, 20 * MiB}, /* bucket 1: step 512 KiB */
        {2200000, 2621440, 20 * MiB},
    };
    run_rounding("roundup_power2_divisions:[1:0,>:4]", b, sizeof b / sizeof b[0]);
}

/* ---- 2. pools, segment sizes, split and merge -------------------------------------------------------------- */

Test(cachealloc, small_request_worked_case)
{
    /* reference section 8: empty(1000 B) */
    env e = mkc("");
    devptr p = A(e.ca, 1000);
    cr_assert_eq(cachealloc_block_size(e.ca, p), 1024);
    EXPECT(e.ca, {"allocation.all.current", 1}, {"allocation.all.peak", 1}, {"allocation.all.allocated", 1},
           {"allocation.all.freed", 0}, {"allocated_bytes.all.current", 1024}, {"allocated_bytes.all.peak", 1024},
           {"allocated_bytes.all.allocated", 1024}, {"requested_bytes.all.current", 1000},
           {"active.all.current", 1}, {"active_bytes.all.current", 1024}, {"reserved_bytes.all.current", 2097152},
           {"reserved_bytes.all.peak", 2097152}, {"segment.all.current", 1}, {"inactive_split.all.current", 1},
           {"inactive_split_bytes.all.current", 2096128}, {"num_device_alloc", 1}, {"num_device_free", 0},
           {"num_alloc_retries", 0}, {"num_ooms", 0}, {"num_sync_all_streams", 0}, {"max_split_size", -1},
           {"oversize_allocations.current", 0}, {"oversize_segments.current", 0});
    expect_only_pool(e.ca, STAT_SMALL);
    F(e.ca, p);
    /* the remainder merges back: inactive_split 0/0, the segment stays cached */
    EXPECT(e.ca, {"allocation.all.current", 0}, {"allocation.all.freed", 1}, {"allocated_bytes.all.current", 0},
           {"allocated_bytes.all.freed", 1024}, {"allocated_bytes.all.peak", 1024},
           {"requested_bytes.all.current", 0}, {"requested_bytes.all.freed", 1000}, {"active.all.current", 0},
           {"active_bytes.all.current", 0}, {"active_bytes.all.freed", 1024}, {"inactive_split.all.current", 0},
           {"inactive_split.all.allocated", 1}, {"inactive_split.all.freed", 1},
           {"inactive_split_bytes.all.current", 0}, {"inactive_split_bytes.all.allocated", 2096128},
           {"inactive_split_bytes.all.freed", 2096128}, {"reserved_bytes.all.current", 2097152},
           {"segment.all.current", 1}, {"num_device_free", 0});
    expect_only_pool(e.ca, STAT_SMALL);
    /* the same request reuses the cached segment at the same address */
    cr_assert_eq(A(e.ca, 1000), p);
    EXPECT(e.ca, {"num_device_alloc", 1}, {"segment.all.allocated", 1});
    rm(&e);
}

Test(cachealloc, mid_band_request_gets_20MiB_segment_and_splits)
{
    env e = mkc("");
    devptr p = A(e.ca, 1572864);
    EXPECT(e.ca, {"allocated_bytes.all.current", 1572864}, {"requested_bytes.all.current", 1572864},
           {"reserved_bytes.all.current", 20971520}, {"segment.all.current", 1}, {"inactive_split.all.current", 1},
           {"inactive_split_bytes.all.current", 19398656}, {"num_device_alloc", 1});
    expect_only_pool(e.ca, STAT_LARGE);
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 19398656);
    F(e.ca, p);
    EXPECT(e.ca, {"inactive_split.all.current", 0}, {"inactive_split_bytes.all.current", 0},
           {"reserved_bytes.all.current", 20971520});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 20971520);
    rm(&e);
}

Test(cachealloc, eleven_MiB_takes_whole_12MiB_segment)
{
    /* remainder exactly 1 MiB: not > kSmallSize, so no split and allocated_bytes counts the whole block */
    env e = mkc("");
    devptr p = A(e.ca, 11534336);
    cr_assert_eq(cachealloc_block_size(e.ca, p), 12582912);
    EXPECT(e.ca, {"allocated_bytes.all.current", 12582912}, {"active_bytes.all.current", 12582912},
           {"requested_bytes.all.current", 11534336}, {"reserved_bytes.all.current", 12582912},
           {"segment.all.current", 1}, {"inactive_split.all.current", 0}, {"inactive_split.all.allocated", 0},
           {"inactive_split_bytes.all.allocated", 0});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 0);
    F(e.ca, p);
    EXPECT(e.ca, {"allocated_bytes.all.current", 0}, {"allocated_bytes.all.freed", 12582912},
           {"inactive_split.all.allocated", 0});
    rm(&e);
}

Test(cachealloc, ten_MiB_plus_one_splits_12MiB_segment)
{
    env e = mkc("");
    devptr p = A(e.ca, 10485761);
    cr_assert_eq(cachealloc_block_size(e.ca, p), 10486272);
    EXPECT(e.ca, {"allocated_bytes.all.current", 10486272}, {"requested_bytes.all.current", 10485761},
           {"reserved_bytes.all.current", 12582912}, {"inactive_split.all.current", 1},
           {"inactive_split_bytes.all.current", 2096640});
    expect_only_pool(e.ca, STAT_LARGE);
    F(e.ca, p);
    EXPECT(e.ca, {"inactive_split.all.current", 0}, {"inactive_split_bytes.all.current", 0});
    rm(&e);
}

Test(cachealloc, twelve_MiB_carved_from_free_tail_of_20MiB_segment)
{
    env e = mkc("");
    devptr a = A(e.ca, 1572864);
    devptr b = A(e.ca, 12582912);
    cr_assert_eq(b, a + 1572864, "the tail of a's segment is used");
    EXPECT(e.ca, {"reserved_bytes.all.current", 20971520}, {"segment.all.current", 1}, {"num_device_alloc", 1},
           {"allocated_bytes.all.current", 14155776}, {"inactive_split.all.current", 1},
           {"inactive_split.all.allocated", 1}, {"inactive_split_bytes.all.current", 6815744},
           {"inactive_split_bytes.all.allocated", 19398656}, {"inactive_split_bytes.all.freed", 12582912});
    F(e.ca, a); /* a becomes a second inactive split block */
    EXPECT(e.ca, {"inactive_split.all.current", 2}, {"inactive_split_bytes.all.current", 8388608});
    F(e.ca, b); /* merges both neighbours: one net decrease of 2 blocks / 8 MiB */
    EXPECT(e.ca, {"inactive_split.all.current", 0}, {"inactive_split.all.allocated", 2},
           {"inactive_split.all.freed", 2}, {"inactive_split_bytes.all.current", 0},
           {"inactive_split_bytes.all.allocated", 20971520}, {"inactive_split_bytes.all.freed", 20971520},
           {"reserved_bytes.all.current", 20971520});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 20971520);
    cr_assert_eq(A(e.ca, 20971520), a, "one whole free block again");
    rm(&e);
}

Test(cachealloc, large_segment_size_mb_sets_the_mid_band_segment)
{
    env e = mkc("large_segment_size_mb:32");
    devptr p = A(e.ca, 1572864);
    EXPECT(e.ca, {"reserved_bytes.all.current", 33554432}, {"inactive_split_bytes.all.current", 31981568});
    devptr q = A(e.ca, 10485761); /* >= kMinLargeAlloc: best fit from the 32 MiB tail */
    cr_assert_eq(q, p + 1572864);
    EXPECT(e.ca, {"reserved_bytes.all.current", 33554432}, {"num_device_alloc", 1});
    rm(&e);
}

/* ---- 3. best fit by (size, address) ------------------------------------------------------------------------ */

Test(cachealloc, best_fit_takes_smallest_adequate_large_block)
{
    env e = mkc("");
    devptr x = A(e.ca, 14680064); /* 14 MiB segment, allocated first */
    devptr y = A(e.ca, 12582912); /* 12 MiB segment */
    F(e.ca, x);
    F(e.ca, y);
    devptr w = A(e.ca, 11534336); /* both fit: the 12 MiB block wins, whole (1 MiB remainder) */
    cr_assert_eq(w, y);
    EXPECT(e.ca, {"allocated_bytes.all.current", 12582912}, {"num_device_alloc", 2});
    devptr v = A(e.ca, 12583424); /* only the 14 MiB block fits; remainder 2096640 > 1 MiB: split */
    cr_assert_eq(v, x);
    EXPECT(e.ca, {"allocated_bytes.all.current", 25166336}, {"inactive_split_bytes.all.current", 2096640},
           {"num_device_alloc", 2});
    rm(&e);
}

Test(cachealloc, best_fit_takes_smallest_adequate_small_block)
{
    env e = mkc("");
    devptr a = A(e.ca, 512);
    devptr b = A(e.ca, 1024);
    devptr c = A(e.ca, 512);
    devptr d = A(e.ca, 512);
    devptr f = A(e.ca, 512);
    cr_assert_eq(b, a + 512);
    cr_assert_eq(c, a + 1536);
    cr_assert_eq(d, a + 2048);
    cr_assert_eq(f, a + 2560);
    F(e.ca, b); /* 1024 free, lower address */
    F(e.ca, d); /* 512 free */
    EXPECT(e.ca, {"inactive_split.all.current", 3}, {"inactive_split_bytes.all.current", 2097152 - 3072 + 1536});
    cr_assert_eq(A(e.ca, 512), d, "512 fits exactly: smaller than the 1024 block");
    cr_assert_eq(A(e.ca, 512), b, "then the 1024 block, split");
    cr_assert_eq(A(e.ca, 512), b + 512, "then its 512 remainder");
    EXPECT(e.ca, {"num_device_alloc", 1}, {"inactive_split.all.current", 1},
           {"inactive_split_bytes.all.current", 2097152 - 3072});
    rm(&e);
}

Test(cachealloc, best_fit_equal_sizes_take_lower_address)
{
    env e = mkc("");
    devptr x = A(e.ca, 12582912);
    devptr y = A(e.ca, 12582912);
    devptr lo = x < y ? x : y, hi = x < y ? y : x;
    F(e.ca, lo);
    F(e.ca, hi);
    cr_assert_eq(A(e.ca, 12582912), lo);
    cr_assert_eq(A(e.ca, 12582912), hi);
    /* small pool: two free 512 B blocks of one segment */
    devptr a = A(e.ca, 512);
    devptr b = A(e.ca, 512);
    devptr c = A(e.ca, 512);
    cr_assert_eq(b, a + 512);
    cr_assert_eq(c, a + 1024);
    F(e.ca, c);
    F(e.ca, a);
    /* c merged with the tail; a is the only free 512 B block below it */
    cr_assert_eq(A(e.ca, 512), a);
    cr_assert_eq(A(e.ca, 512), c);
    EXPECT(e.ca, {"num_device_alloc", 3});
    rm(&e);
}

Test(cachealloc, best_fit_equal_sizes_small_pool_lower_address_first)
{
    env e = mkc("");
    devptr a = A(e.ca, 512);
    devptr b = A(e.ca, 512);
    devptr c = A(e.ca, 512);
    devptr d = A(e.ca, 512);
    (void)b;
    (void)d;
    F(e.ca, c); /* freed first, higher address */
    F(e.ca, a);
    cr_assert_eq(A(e.ca, 512), a);
    cr_assert_eq(A(e.ca, 512), c);
    rm(&e);
}

/* ---- 4. max_split_size ------------------------------------------------------------------------------------- */

Test(cachealloc, max_split_small_request_never_splits_oversize_block)
{
    env e = mkc("max_split_size_mb:40");
    EXPECT(e.ca, {"max_split_size", 41943040});
    devptr p = A(e.ca, 52428800); /* 50 MiB: oversize, never split */
    EXPECT(e.ca, {"oversize_allocations.current", 1}, {"oversize_segments.current", 1},
           {"allocated_bytes.all.current", 52428800}, {"reserved_bytes.all.current", 52428800});
    F(e.ca, p);
    EXPECT(e.ca, {"oversize_allocations.current", 0}, {"oversize_allocations.allocated", 1},
           {"oversize_allocations.freed", 1}, {"oversize_allocations.peak", 1}, {"oversize_segments.current", 1});
    devptr q = A(e.ca, 1572864); /* < max_split: the 50 MiB block is refused, a new 20 MiB segment */
    cr_assert(q < p || q >= p + 52428800);
    EXPECT(e.ca, {"reserved_bytes.all.current", 73400320}, {"segment.all.current", 2}, {"num_device_alloc", 2},
           {"oversize_segments.current", 1}, {"oversize_allocations.current", 0});
    devptr r = A(e.ca, 31457280); /* 30 MiB, also < max_split */
    cr_assert(r < p || r >= p + 52428800);
    EXPECT(e.ca, {"reserved_bytes.all.current", 104857600}, {"segment.all.current", 3}, {"num_device_alloc", 3});
    devptr s = A(e.ca, 41943040); /* >= max_split and 50 MiB < 40 + 20 MiB: the whole block */
    cr_assert_eq(s, p);
    cr_assert_eq(cachealloc_block_size(e.ca, s), 52428800);
    EXPECT(e.ca, {"allocated_bytes.all.current", 1572864 + 31457280 + 52428800}, {"num_device_alloc", 3},
           {"oversize_allocations.current", 1}, {"oversize_allocations.allocated", 2},
           {"requested_bytes.all.current", 1572864 + 31457280 + 41943040});
    rm(&e);
}

Test(cachealloc, max_non_split_rounding_limits_oversize_reuse)
{
    env e = mkc("max_split_size_mb:40");
    devptr p = A(e.ca, 67108864); /* 64 MiB */
    F(e.ca, p);
    devptr q = A(e.ca, 44040192); /* 42 MiB: 64 >= 42 + 20: refused */
    cr_assert_neq(q, p);
    EXPECT(e.ca, {"num_device_alloc", 2}, {"oversize_segments.current", 2});
    F(e.ca, q);
    devptr r = A(e.ca, 46137344); /* 44 MiB: 64 >= 44 + 20 exactly: refused; the 42 MiB block is too small */
    cr_assert(r != p && r != q);
    EXPECT(e.ca, {"num_device_alloc", 3});
    devptr s = A(e.ca, 46137856); /* 44 MiB + 512: 64 < 44 MiB + 512 + 20 MiB: the whole 64 MiB block */
    cr_assert_eq(s, p);
    EXPECT(e.ca, {"num_device_alloc", 3}, {"allocated_bytes.all.current", 46137344 + 67108864},
           {"oversize_allocations.current", 2});
    rm(&e);

    e = mkc("max_split_size_mb:40,max_non_split_rounding_mb:30");
    p = A(e.ca, 67108864);
    F(e.ca, p);
    cr_assert_eq(A(e.ca, 44040192), p, "64 < 42 + 30 MiB: reused whole");
    EXPECT(e.ca, {"num_device_alloc", 1}, {"allocated_bytes.all.current", 67108864});
    rm(&e);
}

Test(cachealloc, release_available_frees_one_oversize_block_under_budget)
{
    env e = mk("max_split_size_mb:40", 134217728, 0);
    cachealloc_record_history(e.ca, true);
    devptr p = A(e.ca, 83886080); /* 80 MiB */
    F(e.ca, p);
    /* 60 MiB: the 80 MiB block is >= 60 + 20 (refused); 80 + 60 > 128 MiB; release_available_cached_blocks frees
     * the 80 MiB block, and the second alloc_block (not a retry) succeeds */
    devptr q = A(e.ca, 62914560);
    (void)q;
    EXPECT(e.ca, {"num_device_free", 1}, {"num_device_alloc", 2}, {"num_alloc_retries", 0},
           {"num_sync_all_streams", 0}, {"num_ooms", 0}, {"reserved_bytes.all.current", 62914560},
           {"reserved_bytes.all.peak", 83886080}, {"segment.all.current", 1}, {"oversize_segments.current", 1},
           {"oversize_segments.allocated", 2}, {"oversize_segments.freed", 1});
    size_t n = 0;
    const ca_trace_entry *t = cachealloc_trace(e.ca, &n);
    cr_assert_eq(n, 7);
    const ca_action want[7] = {CA_SEGMENT_ALLOC,  CA_ALLOC,        CA_FREE_REQUESTED, CA_FREE_COMPLETED,
                               CA_SEGMENT_FREE, CA_SEGMENT_ALLOC, CA_ALLOC};
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(t[i].action, want[i], "trace[%zu] = %s", i, ca_action_str(t[i].action));
    cr_assert_eq(t[4].size, 83886080);
    cr_assert_eq(t[5].size, 62914560);
    rm(&e);
}

Test(cachealloc, release_available_frees_oversize_blocks_largest_first)
{
    env e = mk("max_split_size_mb:40", 134217728, 0);
    devptr a = A(e.ca, 44040192); /* 42 MiB */
    devptr b = A(e.ca, 46137344); /* 44 MiB */
    F(e.ca, a);
    F(e.ca, b);
    /* 80 MiB: no single block >= 80 MiB; 44 + 42 MiB >= 80 MiB are released, then alloc_block succeeds */
    A(e.ca, 83886080);
    EXPECT(e.ca, {"num_device_free", 2}, {"num_alloc_retries", 0}, {"num_sync_all_streams", 0},
           {"reserved_bytes.all.current", 83886080}, {"segment.all.current", 1}, {"oversize_segments.current", 1});
    rm(&e);
}

Test(cachealloc, release_available_short_of_the_key_falls_back_to_the_retry)
{
    env e = mk("max_split_size_mb:40", 134217728, 0);
    devptr a = A(e.ca, 44040192);
    devptr b = A(e.ca, 46137344);
    F(e.ca, a);
    F(e.ca, b);
    /* 100 MiB: both oversize blocks are released (86 MiB < 100 MiB: no second alloc_block), then
     * release_cached_blocks + the retry: num_alloc_retries +1 although the retry had nothing left to free */
    A(e.ca, 104857600);
    EXPECT(e.ca, {"num_device_free", 2}, {"num_alloc_retries", 1}, {"num_sync_all_streams", 1}, {"num_ooms", 0},
           {"reserved_bytes.all.current", 104857600});
    rm(&e);
}

/* ---- 5. slow path and OOM ---------------------------------------------------------------------------------- */

Test(cachealloc, slow_path_releases_cache_then_retries)
{
    env e = mk("", 67108864, 0);
    cachealloc_record_history(e.ca, true);
    devptr a = A(e.ca, 1572864);  /* 20 MiB segment */
    devptr b = A(e.ca, 31457280); /* 30 MiB segment */
    (void)b;
    F(e.ca, a);
    size_t n0 = 0;
    cachealloc_trace(e.ca, &n0);
    /* 22 MiB: no free block fits, 50 + 22 > 64 MiB; empty the cache (-20 MiB), retry: 30 + 22 <= 64 */
    A(e.ca, 23068672);
    EXPECT(e.ca, {"num_alloc_retries", 1}, {"num_sync_all_streams", 1}, {"num_device_free", 1}, {"num_ooms", 0},
           {"num_device_alloc", 3}, {"reserved_bytes.all.current", 54525952},
           {"reserved_bytes.all.peak", 54525952}, /* the release came before the new segment */
           {"segment.all.current", 2});
    size_t n = 0;
    const ca_trace_entry *t = cachealloc_trace(e.ca, &n);
    cr_assert_eq(n, n0 + 3);
    cr_assert_eq(t[n0].action, CA_SEGMENT_FREE);
    cr_assert_eq(t[n0].size, 20971520);
    cr_assert_eq(t[n0 + 1].action, CA_SEGMENT_ALLOC);
    cr_assert_eq(t[n0 + 1].size, 23068672);
    cr_assert_eq(t[n0 + 2].action, CA_ALLOC);

    /* 16 MiB: 52 + 16 > 64 MiB and nothing is releasable: OOM after one more retry */
    A_OOM(e.ca, 16777216);
    EXPECT(e.ca, {"num_alloc_retries", 2}, {"num_sync_all_streams", 2}, {"num_ooms", 1}, {"num_device_free", 1},
           {"reserved_bytes.all.current", 54525952});
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o);
    cr_assert_eq(o->requested, 16777216);
    cr_assert_eq(o->alloc_size, 16777216);
    cr_assert_eq(o->allocated, 54525952);
    cr_assert_eq(o->reserved, 54525952);
    cr_assert_eq(o->largest_free_block, 0);
    expect_oom_message(&e,
                       "CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity of ", 0);
    char want[512], t1[32], f1[32];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity of %s of which %s is "
             "free. %s64.00 MiB allowed; Of the allocated memory 52.00 MiB is allocated by PyTorch, and 0 bytes is "
             "reserved by PyTorch but unallocated.",
             fmt(e.dev->total_bytes, t1), fmt(o->device_free, f1), proc_of(o));
    expect_oom_message(&e, want, 0);
    n0 = n;
    t = cachealloc_trace(e.ca, &n);
    cr_assert_eq(n, n0 + 1);
    cr_assert_eq(t[n0].action, CA_OOM);
    cr_assert_eq(t[n0].size, 16777216);
    cr_assert_eq(t[n0].addr, o->device_free);
    rm(&e);
}

Test(cachealloc, oom_message_for_mid_band_request_reports_segment_size)
{
    env e = mk("", 67108864, 0);
    devptr s1 = A(e.ca, 1048576); /* small segment A, split */
    devptr s2 = A(e.ca, 1048576); /* the exact remainder: no split */
    cr_assert_eq(s2, s1 + 1048576);
    A(e.ca, 1000);                /* small segment B */
    A(e.ca, 52428800);            /* 50 MiB */
    F(e.ca, s1);
    F(e.ca, s2); /* segment A is whole and free again */
    EXPECT(e.ca, {"reserved_bytes.all.current", 56623104}, {"segment.all.current", 3});
    /* 1.5 MiB -> 20 MiB segment: 54 + 20 > 64 MiB; the emptying frees segment A (2 MiB); 52 + 20 > 64: OOM */
    A_OOM(e.ca, 1572864);
    EXPECT(e.ca, {"num_ooms", 1}, {"num_alloc_retries", 1}, {"num_sync_all_streams", 1}, {"num_device_free", 1},
           {"num_device_alloc", 3}, {"reserved_bytes.all.current", 54525952}, {"reserved_bytes.all.peak", 56623104},
           {"allocated_bytes.all.current", 52429824}, {"segment.all.current", 2}, {"segment.small_pool.current", 1});
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o);
    cr_assert_eq(o->requested, 1572864);
    cr_assert_eq(o->rounded, 1572864);
    cr_assert_eq(o->alloc_size, 20971520);
    cr_assert(o->capped);
    cr_assert_eq(o->allowed, cachealloc_budget_cap(67108864, e.dev->total_bytes));
    if (test_backend() == DEVICE_SIM) /* set_per_process_memory_fraction(64 MiB / total) of the H100 */
        cr_assert_eq(o->allowed, 67108863);
    cr_assert_eq(o->allocated, 52429824);
    cr_assert_eq(o->reserved, 54525952);
    cr_assert_eq(o->largest_free_block, 2096128);
    char want[512], t[32], f[32];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of %s of which %s is "
             "free. %s64.00 MiB allowed; Of the allocated memory 50.00 MiB is allocated by PyTorch, and 2.00 MiB is "
             "reserved by PyTorch but unallocated.",
             fmt(e.dev->total_bytes, t), fmt(o->device_free, f), proc_of(o));
    expect_oom_message(&e, want, 0);
    if (test_backend() == DEVICE_SIM) /* H100 80GB: 85017493504 B total, 54525952 B held, 552402944 B context */
        cr_assert_eq(strncmp(want + 79, "79.18 GiB of which 78.61 GiB is free.", 37), 0, "%s", want); /* context */
    /* oomlab's two figures follow PyTorch's text */
    cr_assert_float_eq(o->fragmented_share, 2096128.0 / 54525952.0, 1e-12);
    const char *tail = ") [oomlab] Largest free cached block: 2.00 MiB; fragmented: 3.8% of reserved memory is cached "
                       "but unusable for this request.";
    size_t lm = strlen(o->message), lt = strlen(tail);
    cr_assert(lm > lt && strcmp(o->message + lm - lt, tail) == 0, "%s", o->message);
    rm(&e);
}

Test(cachealloc, budget_from_per_process_memory_fraction)
{
    env e = mkc("per_process_memory_fraction:0.5");
    cr_assert_eq(cachealloc_budget(e.ca), (size_t)(0.5 * (double)e.dev->total_bytes));
    rm(&e);
    e = mkc("per_process_memory_fraction:1");
    cr_assert_eq(cachealloc_budget(e.ca), 0, "a fraction of 1 sets no cap");
    rm(&e);
    e = mk("per_process_memory_fraction:0.5", 64 * MiB, 0);
    cr_assert_eq(cachealloc_budget(e.ca), cachealloc_budget_cap(64 * MiB, e.dev->total_bytes), "budget_bytes wins");
    A_OOM(e.ca, 65 * MiB);
    cr_assert_eq(cachealloc_last_oom(e.ca)->allowed, cachealloc_budget_cap(64 * MiB, e.dev->total_bytes));
    rm(&e);
    e = mkc("");
    cr_assert_eq(cachealloc_budget(e.ca), 0);
    rm(&e);
}

Test(cachealloc, oom_message_fractional_sizes_and_device_id)
{
    env e = mk("", 67108864, 3);
    A(e.ca, 1572864);  /* 20 MiB segment, 1.5 MiB used */
    A(e.ca, 1000);     /* 2 MiB small segment */
    A(e.ca, 31457280); /* 30 MiB */
    A_OOM(e.ca, 20971520); /* the 18.5 MiB tail is too small; 52 + 20 > 64 MiB */
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_eq(o->allocated, 33031168);
    cr_assert_eq(o->reserved, 54525952);
    char want[512], t[32], f[32];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a total capacity of %s of which %s is "
             "free. %s64.00 MiB allowed; Of the allocated memory 31.50 MiB is allocated by PyTorch, and 20.50 MiB is "
             "reserved by PyTorch but unallocated.",
             fmt(e.dev->total_bytes, t), fmt(o->device_free, f), proc_of(o));
    expect_oom_message(&e, want, 3);
    rm(&e);
}

Test(cachealloc, oom_request_larger_than_budget)
{
    env e = mk("", 67108864, 0);
    A_OOM(e.ca, 104857600);
    EXPECT(e.ca, {"num_ooms", 1}, {"num_alloc_retries", 1}, {"num_sync_all_streams", 1}, {"num_device_alloc", 0},
           {"reserved_bytes.all.current", 0}, {"allocation.all.allocated", 0});
    char want[512], t[32], f[32];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total capacity of %s of which %s is "
             "free. %s64.00 MiB allowed; Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is "
             "reserved by PyTorch but unallocated.",
             fmt(e.dev->total_bytes, t), fmt(cachealloc_last_oom(e.ca)->device_free, f),
             proc_of(cachealloc_last_oom(e.ca)));
    expect_oom_message(&e, want, 0);
    /* the allocator keeps working */
    A(e.ca, 62914560);
    EXPECT(e.ca, {"reserved_bytes.all.current", 62914560}, {"num_ooms", 1});
    rm(&e);
}

Test(cachealloc, oom_without_budget_has_no_allowed_part)
{
    env e = mkc("");
    device_fault_arm(e.dev, 1, true); /* every device allocation fails */
    A_OOM(e.ca, 1000);
    EXPECT(e.ca, {"num_ooms", 1}, {"num_alloc_retries", 1}, {"num_device_alloc", 0});
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not(o->capped);
    cr_assert_eq(o->alloc_size, 2097152);
    char want[512], t[32], f[32];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of %s of which %s is "
             "free. %sOf the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
             "unallocated.",
             fmt(e.dev->total_bytes, t), fmt(o->device_free, f), proc_of(o));
    expect_oom_message(&e, want, 0);
    device_fault_arm(e.dev, 0, false);
    A(e.ca, 1000);
    rm(&e);
}

Test(cachealloc, huge_requests_fail_without_counters)
{
    env e = mk("", 67108864, 0);
    devptr p = 7;
    cr_assert_eq(cachealloc_malloc(e.ca, (size_t)1 << 60, &p), OOM_ENOMEM_DEVICE);
    cr_assert_eq(cachealloc_malloc(e.ca, SIZE_MAX, &p), OOM_ENOMEM_DEVICE);
    cr_assert_eq(p, 7);
    CHECK_OK(e.ca);
    EXPECT(e.ca, {"num_ooms", 0}, {"num_alloc_retries", 0}, {"num_sync_all_streams", 0}, {"num_device_alloc", 0});
    /* 2^60 - 1 is an ordinary request: rounded to 2^60, refused by the budget, counted */
    A_OOM(e.ca, ((size_t)1 << 60) - 1);
    EXPECT(e.ca, {"num_ooms", 1}, {"num_alloc_retries", 1}, {"num_sync_all_streams", 1});
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_eq(o->rounded, (size_t)1 << 60);
    cr_assert_eq(o->alloc_size, (size_t)1 << 60);
    cr_assert_eq(strncmp(o->message, "CUDA out of memory. Tried to allocate 1073741824.00 GiB. GPU 0 ", 63), 0, "%s",
                 o->message);
    rm(&e);
}

/* PyTorch raises OutOfMemoryError "Tried to allocate more than 1EB memory." (NativeCachingAllocator::allocate)
 * with no counter, trace or observer. The model writes that text into the last-OOM record, but cachealloc_last_oom
 * is NULL on a fresh allocator (the text is lost), and after an earlier OOM the record mixes the new text with the
 * old request's figures. The record must describe the request that failed. */
Test(cachealloc, huge_request_oom_record_is_coherent)
{
    const char *eb = "CUDA out of memory. Tried to allocate more than 1EB memory.";
    env e = mk("", 67108864, 0);
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(e.ca, (size_t)1 << 60, &p), OOM_ENOMEM_DEVICE);
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o, "the 1EB OOM left no record on a fresh allocator");
    cr_assert_str_eq(o->message, eb);
    cr_assert_eq(o->requested, (size_t)1 << 60);

    A_OOM(e.ca, 104857600); /* an ordinary OOM */
    cr_assert_eq(cachealloc_malloc(e.ca, (size_t)1 << 61, &p), OOM_ENOMEM_DEVICE);
    o = cachealloc_last_oom(e.ca);
    cr_assert_str_eq(o->message, eb);
    cr_assert_eq(o->requested, (size_t)1 << 61, "the record still describes the 100 MiB request (requested %zu)",
                 o->requested);
    EXPECT(e.ca, {"num_ooms", 1});
    rm(&e);
}

Test(cachealloc, zero_bytes_touch_nothing)
{
    env e = mkc("");
    devptr p = 0x1234;
    cr_assert_eq(cachealloc_malloc(e.ca, 0, &p), OOM_OK);
    cr_assert_eq(p, 0);
    CHECK_OK(e.ca);
    EXPECT(e.ca, {"allocation.all.allocated", 0}, {"requested_bytes.all.allocated", 0}, {"num_device_alloc", 0},
           {"reserved_bytes.all.peak", 0});
    cr_assert_eq(cachealloc_free(e.ca, 0), OOM_OK);
    EXPECT(e.ca, {"allocation.all.freed", 0});
    cr_assert_null(cachealloc_last_oom(e.ca));
    rm(&e);
}

Test(cachealloc, free_of_unknown_pointer_is_einval)
{
    env e = mkc("");
    devptr a = A(e.ca, 1000);
    cr_assert_eq(cachealloc_free(e.ca, a + 512), OOM_EINVAL, "interior pointer");
    cr_assert_eq(cachealloc_free(e.ca, a + 2 * MiB), OOM_EINVAL, "outside every segment");
    cr_assert_eq(cachealloc_block_size(e.ca, a + 512), 0);
    CHECK_OK(e.ca);
    EXPECT(e.ca, {"allocation.all.current", 1}, {"allocation.all.freed", 0}, {"allocated_bytes.all.current", 1024});
    F(e.ca, a);
    cr_assert_eq(cachealloc_free(e.ca, a), OOM_EINVAL, "double free");
    CHECK_OK(e.ca);
    EXPECT(e.ca, {"allocation.all.current", 0}, {"allocation.all.freed", 1}, {"allocated_bytes.all.freed", 1024});
    rm(&e);
}

/* ---- 6. garbage collection --------------------------------------------------------------------------------- */

/* Returns B's address. Large-pool get_free_block calls: G 1, A 2, B 3, four 1.5 MiB requests 4-7, H 8:
 * at H, A has age 5 and B age 1 (mean 3). */
static devptr gc_scenario(env *e)
{
    devptr g = A(e->ca, 1572864);  /* 20 MiB segment, stays split */
    devptr a = A(e->ca, 25165824); /* 24 MiB */
    devptr b = A(e->ca, 20971520); /* 20 MiB (the 18.5 MiB tail is too small) */
    (void)g;
    EXPECT(e->ca, {"reserved_bytes.all.current", 67108864});
    F(e->ca, a);
    for (int i = 0; i < 4; i++) /* best fit: the tail of g's segment, then merged back */
        F(e->ca, A(e->ca, 1572864));
    F(e->ca, b);
    EXPECT(e->ca, {"num_device_alloc", 3}, {"num_device_free", 0});
    A(e->ca, 31457280); /* H: 30 MiB, no free block fits */
    return b;
}

Test(cachealloc, gc_releases_aged_unsplit_blocks_before_new_segment)
{
    env e = mk("garbage_collection_threshold:0.6", 104857600, 0);
    devptr b = gc_scenario(&e);
    /* held 64 MiB > 0.6 x 100 MiB: target 4 MiB; A (age 5 >= 3) goes, B (age 1) stays; no sync, no retry */
    EXPECT(e.ca, {"num_device_free", 1}, {"num_alloc_retries", 0}, {"num_sync_all_streams", 0}, {"num_ooms", 0},
           {"num_device_alloc", 4}, {"reserved_bytes.all.current", 73400320}, {"segment.all.current", 3});
    cr_assert_eq(A(e.ca, 20971520), b, "B is still cached");
    EXPECT(e.ca, {"num_device_alloc", 4});
    rm(&e);
}

Test(cachealloc, gc_needs_threshold_and_budget)
{
    env e = mk("", 104857600, 0); /* budget, no threshold: 64 + 30 <= 100 MiB, nothing released */
    gc_scenario(&e);
    EXPECT(e.ca, {"num_device_free", 0}, {"reserved_bytes.all.current", 98566144});
    rm(&e);
    e = mk("garbage_collection_threshold:0.6", 0, 0); /* threshold, no budget */
    gc_scenario(&e);
    EXPECT(e.ca, {"num_device_free", 0}, {"reserved_bytes.all.current", 98566144});
    rm(&e);
}

/* ---- 7. empty_cache ---------------------------------------------------------------------------------------- */

Test(cachealloc, empty_cache_releases_whole_free_segments_only)
{
    env e = mkc("");
    devptr r = A(e.ca, 12582912); /* whole 12 MiB segment (first: q's tail would serve it) */
    devptr p = A(e.ca, 512);      /* pins its 2 MiB segment */
    devptr q = A(e.ca, 1572864);  /* pins its 20 MiB segment */
    F(e.ca, r);
    EXPECT(e.ca, {"reserved_bytes.all.current", 35651584});
    EC(e.ca);
    EXPECT(e.ca, {"reserved_bytes.all.current", 23068672}, {"segment.all.current", 2}, {"num_device_free", 1},
           {"num_sync_all_streams", 1}, {"inactive_split.all.current", 2},
           {"inactive_split_bytes.all.current", 2096640 + 19398656}, {"allocated_bytes.all.current", 1573376});
    EC(e.ca); /* nothing left to release */
    EXPECT(e.ca, {"reserved_bytes.all.current", 23068672}, {"num_device_free", 1}, {"num_sync_all_streams", 2});
    F(e.ca, p);
    EXPECT(e.ca, {"inactive_split.all.current", 1}, {"inactive_split_bytes.all.current", 19398656});
    EC(e.ca);
    EXPECT(e.ca, {"reserved_bytes.all.current", 20971520}, {"reserved_bytes.small_pool.current", 0},
           {"segment.small_pool.current", 0}, {"num_device_free", 2}, {"num_sync_all_streams", 3});
    F(e.ca, q);
    EC(e.ca);
    EXPECT(e.ca, {"reserved_bytes.all.current", 0}, {"segment.all.current", 0}, {"num_device_free", 3},
           {"num_sync_all_streams", 4}, {"inactive_split.all.current", 0}, {"reserved_bytes.all.peak", 35651584});
    size_t n = 9;
    ca_snap_segment *s = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 0);
    cachealloc_snapshot_free(s, n);
    rm(&e);
}

/* ---- 8. expandable segments -------------------------------------------------------------------------------- */

#define EXP "expandable_segments:True"

Test(cachealloc, expandable_mid_band_maps_one_large_page)
{
    env e = mkc(EXP);
    devptr a = A(e.ca, 1572864);
    EXPECT(e.ca, {"reserved_bytes.all.current", 20971520}, {"reserved_bytes.large_pool.current", 20971520},
           {"allocated_bytes.all.current", 1572864}, {"segment.all.current", 0}, {"segment.all.allocated", 0},
           {"num_device_alloc", 1}, {"inactive_split.all.current", 0}, {"inactive_split.all.allocated", 0},
           {"inactive_split_bytes.all.allocated", 0});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 19398656);
    /* 30 MiB more: the 18.5 MiB free tail plus one new page, contiguous */
    devptr b = A(e.ca, 31457280);
    cr_assert_eq(b, a + 1572864);
    EXPECT(e.ca, {"reserved_bytes.all.current", 41943040}, {"num_device_alloc", 2}, {"segment.all.current", 0},
           {"allocated_bytes.all.current", 33030144}, {"inactive_split.all.allocated", 0});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 8912896);
    F(e.ca, a);
    F(e.ca, b);
    EXPECT(e.ca, {"reserved_bytes.all.current", 41943040}, {"num_device_free", 0}, /* free never unmaps */
           {"inactive_split.all.allocated", 0}, {"inactive_split_bytes.all.allocated", 0});
    rm(&e);
}

Test(cachealloc, expandable_30MiB_maps_two_pages_with_10MiB_free)
{
    env e = mkc(EXP);
    devptr b = A(e.ca, 31457280);
    EXPECT(e.ca, {"reserved_bytes.all.current", 41943040}, {"allocated_bytes.all.current", 31457280},
           {"num_device_alloc", 1}, {"segment.all.current", 0});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 10485760);
    size_t n = 0;
    ca_snap_segment *s = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(s[0].address, b);
    cr_assert(s[0].is_expandable);
    cr_assert_not(s[0].is_small);
    cr_assert_eq(s[0].total_size, 41943040);
    cr_assert_eq(s[0].allocated_size, 31457280);
    cr_assert_eq(s[0].nblocks, 2);
    cr_assert_eq(s[0].blocks[0].state, 1);
    cr_assert_eq(s[0].blocks[1].size, 10485760);
    cr_assert_eq(s[0].blocks[1].state, 0);
    cachealloc_snapshot_free(s, n);
    rm(&e);
}

Test(cachealloc, expandable_small_pool_pages_are_2MiB)
{
    env e = mkc(EXP);
    devptr s = A(e.ca, 1000);
    EXPECT(e.ca, {"reserved_bytes.small_pool.current", 2097152}, {"reserved_bytes.large_pool.current", 0},
           {"allocated_bytes.small_pool.current", 1024}, {"segment.all.current", 0}, {"num_device_alloc", 1});
    devptr t = A(e.ca, 1048576); /* fits in the free 2096128 */
    cr_assert_eq(t, s + 1024);
    devptr u = A(e.ca, 1048576); /* 1047552 free + one more page, contiguous */
    cr_assert_eq(u, t + 1048576);
    EXPECT(e.ca, {"reserved_bytes.small_pool.current", 4194304}, {"num_device_alloc", 2},
           {"allocated_bytes.all.current", 1024 + 2 * 1048576}, {"inactive_split.all.allocated", 0});
    F(e.ca, s);
    F(e.ca, t);
    F(e.ca, u);
    EXPECT(e.ca, {"reserved_bytes.all.current", 4194304}, {"num_device_free", 0});
    EC(e.ca);
    EXPECT(e.ca, {"reserved_bytes.all.current", 0}, {"num_device_free", 1}, {"num_sync_all_streams", 1});
    rm(&e);
}

Test(cachealloc, expandable_empty_cache_unmaps_whole_free_pages_only)
{
    env e = mkc(EXP);
    devptr a = A(e.ca, 31457280); /* pages 0-1 mapped; [30, 40) MiB free */
    devptr b = A(e.ca, 8388608);  /* from the free tail; [38, 40) MiB free */
    cr_assert_eq(b, a + 31457280);
    F(e.ca, a);
    EXPECT(e.ca, {"reserved_bytes.all.current", 41943040}, {"num_device_free", 0});
    EC(e.ca); /* [0, 30) MiB free: page 0 unmapped, [20, 30) stays mapped; [38, 40) holds no whole page */
    EXPECT(e.ca, {"reserved_bytes.all.current", 20971520}, {"num_device_free", 1}, {"num_sync_all_streams", 1},
           {"allocated_bytes.all.current", 8388608}, {"inactive_split.all.current", 0});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 10485760);
    size_t n = 0;
    ca_snap_segment *s = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(s[0].address, a + 20971520);
    cr_assert_eq(s[0].total_size, 20971520);
    cr_assert_eq(s[0].nblocks, 3);
    cr_assert_eq(s[0].blocks[0].size, 10485760);
    cr_assert_eq(s[0].blocks[0].state, 0);
    cr_assert_eq(s[0].blocks[1].addr, b);
    cr_assert_eq(s[0].blocks[1].state, 1);
    cr_assert_eq(s[0].blocks[2].size, 2097152);
    cachealloc_snapshot_free(s, n);
    /* 16 MiB: the lowest-address spot is the unmapped page 0 plus the free [20, 30) */
    devptr c = A(e.ca, 16777216);
    cr_assert_eq(c, a);
    EXPECT(e.ca, {"reserved_bytes.all.current", 41943040}, {"num_device_alloc", 2});
    F(e.ca, b);
    F(e.ca, c);
    EC(e.ca); /* one free block of two pages: unmapped at once, the range is released */
    EXPECT(e.ca, {"reserved_bytes.all.current", 0}, {"num_device_free", 2}, {"num_sync_all_streams", 2});
    s = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 0);
    cachealloc_snapshot_free(s, n);
    rm(&e);
}

Test(cachealloc, expandable_unmap_counts_one_per_free_block)
{
    env e = mkc(EXP);
    devptr a = A(e.ca, 41943040); /* exactly two pages: no split */
    devptr b = A(e.ca, 20971520);
    devptr c = A(e.ca, 41943040);
    cr_assert_eq(b, a + 41943040);
    cr_assert_eq(c, b + 20971520);
    EXPECT(e.ca, {"reserved_bytes.all.current", 104857600}, {"num_device_alloc", 3});
    F(e.ca, a);
    F(e.ca, c);
    EC(e.ca);
    EXPECT(e.ca, {"reserved_bytes.all.current", 20971520}, {"num_device_free", 2});
    size_t n = 0;
    ca_snap_segment *s = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(s[0].address, b);
    cr_assert_eq(s[0].nblocks, 1);
    cachealloc_snapshot_free(s, n);
    F(e.ca, b);
    EC(e.ca);
    EXPECT(e.ca, {"reserved_bytes.all.current", 0}, {"num_device_free", 3}, {"reserved_bytes.all.peak", 104857600},
           {"segment.all.peak", 0});
    rm(&e);
}

Test(cachealloc, expandable_splits_any_remainder_of_512_or_more)
{
    /* should_split with expandable segments: remaining >= 512 in the large pool too, whatever max_split_size */
    env e = mkc(EXP ",max_split_size_mb:40");
    devptr a = A(e.ca, 20447232); /* 19.5 MiB in one 20 MiB page: 512 KiB left, split */
    cr_assert_eq(cachealloc_block_size(e.ca, a), 20447232);
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 524288);
    devptr b = A(e.ca, 52428800); /* oversize: the 512 KiB + three new pages, split although >= max_split */
    cr_assert_eq(b, a + 20447232);
    cr_assert_eq(cachealloc_block_size(e.ca, b), 52428800);
    EXPECT(e.ca, {"reserved_bytes.all.current", 83886080}, {"num_device_alloc", 2},
           {"allocated_bytes.all.current", 20447232 + 52428800}, {"oversize_allocations.current", 1},
           {"oversize_segments.current", 0}, {"inactive_split.all.allocated", 0});
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 11010048);
    rm(&e);
}

Test(cachealloc, expandable_oom_under_budget)
{
    env e = mk(EXP, 67108864, 0);
    A(e.ca, 52428800); /* 50 MiB: three pages, 60 MiB mapped */
    A(e.ca, 1572864);  /* from the 10 MiB tail */
    EXPECT(e.ca, {"reserved_bytes.all.current", 62914560});
    /* 12 MiB: the 8.5 MiB tail is too small; 60 + 12 > 64 MiB; the tail holds no whole page: OOM */
    A_OOM(e.ca, 12582912);
    EXPECT(e.ca, {"num_ooms", 1}, {"num_alloc_retries", 1}, {"num_device_free", 0},
           {"reserved_bytes.all.current", 62914560});
    char want[512], t[32], f[32];
    snprintf(want, sizeof want,
             "CUDA out of memory. Tried to allocate 12.00 MiB. GPU 0 has a total capacity of %s of which %s is "
             "free. %s64.00 MiB allowed; Of the allocated memory 51.50 MiB is allocated by PyTorch, and 8.50 MiB is "
             "reserved by PyTorch but unallocated.",
             fmt(e.dev->total_bytes, t), fmt(cachealloc_last_oom(e.ca)->device_free, f),
             proc_of(cachealloc_last_oom(e.ca)));
    expect_oom_message(&e, want, 0);
    rm(&e);
}

/* ---- 9. resets, summary, snapshot -------------------------------------------------------------------------- */

Test(cachealloc, reset_peak_exact)
{
    env e = mkc("max_split_size_mb:40");
    devptr a = A(e.ca, 52428800); /* 50 MiB, oversize */
    devptr b = A(e.ca, 1000);
    F(e.ca, a);
    EXPECT(e.ca, {"allocated_bytes.all.current", 1024}, {"allocated_bytes.all.peak", 52429824},
           {"allocated_bytes.large_pool.peak", 52428800}, {"reserved_bytes.all.peak", 54525952},
           {"oversize_allocations.peak", 1}, {"oversize_allocations.current", 0});
    cachealloc_reset_peak(e.ca);
    CHECK_OK(e.ca);
    EXPECT(e.ca, {"allocated_bytes.all.peak", 1024}, {"allocated_bytes.large_pool.peak", 0},
           {"allocated_bytes.small_pool.peak", 1024}, {"allocation.all.peak", 1}, {"active_bytes.all.peak", 1024},
           {"requested_bytes.all.peak", 1000}, {"reserved_bytes.all.peak", 54525952},
           {"inactive_split.all.peak", 1}, {"inactive_split_bytes.all.peak", 2096128},
           {"oversize_allocations.peak", 0}, {"oversize_segments.peak", 1},
           /* accumulations untouched */
           {"allocated_bytes.all.allocated", 52429824}, {"allocated_bytes.all.freed", 52428800},
           {"num_device_alloc", 2});
    A(e.ca, 2048);
    EXPECT(e.ca, {"allocated_bytes.all.peak", 3072}, {"allocated_bytes.all.current", 3072});
    (void)b;
    rm(&e);
}

Test(cachealloc, reset_accumulated_exact)
{
    env e = mk("max_split_size_mb:40", 67108864, 0);
    devptr a = A(e.ca, 52428800);
    devptr b = A(e.ca, 1000);
    F(e.ca, a);
    A_OOM(e.ca, 104857600); /* empties the cache (50 MiB), retries, OOMs */
    EXPECT(e.ca, {"num_ooms", 1}, {"num_alloc_retries", 1}, {"num_sync_all_streams", 1}, {"num_device_alloc", 2},
           {"num_device_free", 1});
    cachealloc_reset_accumulated(e.ca);
    CHECK_OK(e.ca);
    EXPECT(e.ca, {"num_ooms", 0}, {"num_alloc_retries", 0}, {"num_sync_all_streams", 0}, {"num_device_alloc", 0},
           {"num_device_free", 0}, {"allocated_bytes.all.allocated", 0}, {"allocated_bytes.all.freed", 0},
           {"allocation.small_pool.allocated", 0}, {"reserved_bytes.all.freed", 0},
           {"oversize_segments.allocated", 0}, {"oversize_segments.freed", 0},
           {"oversize_allocations.allocated", 0},
           /* currents, peaks and the setting stay */
           {"allocated_bytes.all.current", 1024}, {"allocated_bytes.all.peak", 52429824},
           {"reserved_bytes.all.current", 2097152}, {"reserved_bytes.all.peak", 54525952},
           {"oversize_allocations.peak", 1}, {"max_split_size", 41943040});
    cr_assert(ST(e.ca)->accumulated_reset);
    F(e.ca, b);
    EXPECT(e.ca, {"allocated_bytes.all.current", 0}, {"allocated_bytes.all.allocated", 0},
           {"allocated_bytes.all.freed", 1024});
    cr_assert_eq(memstats_check(ST(e.ca)), OOM_OK);
    rm(&e);
}

Test(cachealloc, summary_starts_with_pytorch_title)
{
    env e = mk("", 67108864, 3);
    A_OOM(e.ca, 104857600);
    char want[1024];
    char eq[76], dash[76];
    memset(eq, '=', 75);
    eq[75] = 0;
    memset(dash, '-', 75);
    dash[75] = 0;
    snprintf(want, sizeof want,
             "|%s|\n|%18sPyTorch CUDA memory summary, device ID %-17d |\n|%s|\n|%12sCUDA OOMs: %-12d | %7scudaMalloc "
             "retries: %-8d  |\n|%s|\n",
             eq, "", 3, dash, "", 1, "", 1, eq);
    for (int abbreviated = 0; abbreviated < 2; abbreviated++) {
        char *s = cachealloc_summary(e.ca, abbreviated);
        cr_assert_not_null(s);
        cr_assert_eq(strncmp(s, want, strlen(want)), 0, "summary:\n%s\nwant prefix:\n%s", s, want);
        free(s);
    }
    rm(&e);
}

Test(cachealloc, snapshot_known_pattern)
{
    env e = mkc("");
    devptr d = A(e.ca, 11534336); /* first, or it would be carved from c's tail */
    devptr a = A(e.ca, 1000);
    devptr b = A(e.ca, 3000);
    devptr c = A(e.ca, 1572864);
    cr_assert_eq(b, a + 1024);
    F(e.ca, a);
    size_t n = 0;
    ca_snap_segment *s = cachealloc_snapshot(e.ca, &n);
    cr_assert_not_null(s);
    cr_assert_eq(n, 3);
    for (size_t i = 0; i + 1 < n; i++)
        cr_assert_lt(s[i].address, s[i + 1].address, "segments in address order");
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        const ca_snap_segment *g = &s[i];
        cr_assert_not(g->is_expandable);
        if (g->address == a) {
            seen |= 1;
            cr_assert(g->is_small);
            cr_assert_eq(g->total_size, 2097152);
            cr_assert_eq(g->allocated_size, 3072);
            cr_assert_eq(g->active_size, 3072);
            cr_assert_eq(g->requested_size, 3000);
            cr_assert_eq(g->nblocks, 3);
            const ca_snap_block want[3] = {{a, 1024, 1000, 0}, {b, 3072, 3000, 1}, {b + 3072, 2093056, 0, 0}};
            for (int k = 0; k < 3; k++) {
                cr_assert_eq(g->blocks[k].addr, want[k].addr, "block %d", k);
                cr_assert_eq(g->blocks[k].size, want[k].size, "block %d", k);
                cr_assert_eq(g->blocks[k].requested_size, want[k].requested_size, "block %d", k);
                cr_assert_eq(g->blocks[k].state, want[k].state, "block %d", k);
            }
        } else if (g->address == c) {
            seen |= 2;
            cr_assert_not(g->is_small);
            cr_assert_eq(g->total_size, 20971520);
            cr_assert_eq(g->nblocks, 2);
            cr_assert_eq(g->blocks[0].requested_size, 1572864);
            cr_assert_eq(g->blocks[0].state, 1);
            cr_assert_eq(g->blocks[1].addr, c + 1572864);
            cr_assert_eq(g->blocks[1].size, 19398656);
            cr_assert_eq(g->blocks[1].requested_size, 0);
            cr_assert_eq(g->blocks[1].state, 0);
        } else if (g->address == d) {
            seen |= 4;
            cr_assert_eq(g->total_size, 12582912);
            cr_assert_eq(g->allocated_size, 12582912);
            cr_assert_eq(g->requested_size, 11534336);
            cr_assert_eq(g->nblocks, 1);
        }
    }
    cr_assert_eq(seen, 7);
    cachealloc_snapshot_free(s, n);
    /* free b: it absorbs both neighbours and keeps its stale requested_size */
    F(e.ca, b);
    s = cachealloc_snapshot(e.ca, &n);
    for (size_t i = 0; i < n; i++) {
        if (s[i].address != a)
            continue;
        cr_assert_eq(s[i].nblocks, 1);
        cr_assert_eq(s[i].blocks[0].size, 2097152);
        cr_assert_eq(s[i].blocks[0].requested_size, 3000);
        cr_assert_eq(s[i].blocks[0].state, 0);
        cr_assert_eq(s[i].requested_size, 0);
    }
    cachealloc_snapshot_free(s, n);
    rm(&e);
}

/* A device opened with dopt and an allocator of PyTorch's defaults on it (the tie-breaking tests). */
static cachealloc *open_dry(const device_options *dopt, device **dev)
{
    cr_assert_eq(device_open(dopt, dev), OOM_OK);
    cachealloc_options o = {0};
    alloc_conf_default(&o.conf);
    cachealloc *ca = NULL;
    cr_assert_eq(cachealloc_new(*dev, &o, &ca), OOM_OK);
    return ca;
}

/* Best fit breaks ties between equal free blocks by the ordering key (device_order_key), not the raw pointer: with
 * the model beside a sim whose second segment a hint put on the other side of the first, the allocator reuses the
 * segment the model ranks lower, as PyTorch does in the process the model describes. */
Test(cachealloc, ties_break_by_the_models_address)
{
    for (int model = 0; model <= 1; model++) {
        device_options dopt = {.kind = DEVICE_SIM, .sim_dry_run = true, .sim_model_order = model};
        device *dev = NULL;
        cachealloc *ca = open_dry(&dopt, &dev);
        devptr p1 = A(ca, 20 * MiB);
        /* the model puts the second segment beside the first; the hint puts it 8 GiB on the other side */
        device *probe = NULL;
        device_options po = {.kind = DEVICE_SIM, .sim_dry_run = true};
        cr_assert_eq(device_open(&po, &probe), OOM_OK);
        devptr q1, q2;
        cr_assert_eq(device_mem_alloc(probe, 20 * MiB, &q1), OOM_OK);
        cr_assert_eq(device_mem_alloc(probe, 20 * MiB, &q2), OOM_OK);
        device_close(probe);
        cr_assert_eq(q1, p1);
        devptr spot = q2 < q1 ? p1 + 8 * GiB : p1 - 8 * GiB;
        device_addr_hint(dev, spot, 20 * MiB);
        devptr p2 = A(ca, 20 * MiB);
        cr_assert_eq(p2, spot);
        F(ca, p1);
        F(ca, p2);
        devptr want = model ? (q2 < q1 ? p2 : p1) : (p2 < p1 ? p2 : p1);
        devptr got = A(ca, 20 * MiB);
        cr_assert_eq(got, want, "model %d: reused 0x%llx, want 0x%llx", model, (unsigned long long)got,
                     (unsigned long long)want);
        F(ca, got);
        cachealloc_delete(ca);
        device_close(dev);
    }
}

/* Under a seeded layout the allocator reuses, of two equal free blocks, the one the seed's key ranks lower, and
 * the keys of the blocks split off a segment keep its offsets (I7, checked by the validator in checked builds):
 * over eight seeds both segments are picked first at least once. */
Test(cachealloc, ties_break_by_the_layout_seed)
{
    int first_picked = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        device_options dopt = {.kind = DEVICE_SIM, .sim_dry_run = true, .sim_layout_seed = seed};
        device *dev = NULL;
        cachealloc *ca = open_dry(&dopt, &dev);
        devptr p1 = A(ca, 20 * MiB), p2 = A(ca, 20 * MiB);
        F(ca, p1);
        F(ca, p2);
        devptr want = device_order_key(dev, p1) < device_order_key(dev, p2) ? p1 : p2;
        devptr got = A(ca, 8 * MiB); /* best fit: a 20 MiB block either way, split */
        cr_assert_eq(got, want, "seed %llu: reused 0x%llx, want 0x%llx", (unsigned long long)seed,
                     (unsigned long long)got, (unsigned long long)want);
        first_picked += got == p1;
        F(ca, got);
        cachealloc_delete(ca);
        device_close(dev);
    }
    cr_assert(first_picked > 0 && first_picked < 8, "the first segment picked under %d of 8 seeds", first_picked);
}

/* ---- caching off (PYTORCH_NO_CUDA_MEMORY_CACHING=1: forceUncachedAllocator) --------------------------------- */

static env mk_uncached(size_t budget)
{
    env e = {0};
    e.dev = test_device_open(0);
    cr_assert_not_null(e.dev, "cannot open the %s backend", device_kind_str(test_backend()));
    cachealloc_options o = {.budget_bytes = budget, .uncached = true};
    alloc_conf_default(&o.conf);
    cr_assert_eq(cachealloc_new(e.dev, &o, &e.ca), OOM_OK);
    return e;
}

/* Every counter memory_stats() reports is 0 but num_sync_all_streams (== sync) and max_split_size (-1). */
static void expect_stats_untouched(const cachealloc *ca, int64_t sync)
{
    memstats want;
    memset(&want, 0, sizeof want);
    want.max_split_size = -1;
    want.num_sync_all_streams = sync;
    cr_assert_eq(memcmp(&want, ST(ca), sizeof want), 0, "a memory_stats counter moved with caching off");
}

Test(cachealloc, uncached_every_malloc_is_a_device_allocation_freed_at_once)
{
    env e = mk_uncached(0);
    cachealloc_record_history(e.ca, true);
    uint64_t calls = e.dev->alloc_calls;
    devptr p = A(e.ca, 1000), q = A(e.ca, 1000);
    /* uncached_allocate: cudaMalloc(size) of exactly the request, one per malloc, nothing rounded or split */
    cr_assert_eq(e.dev->alloc_calls, calls + 2);
    cr_assert_eq(cachealloc_block_size(e.ca, p), 1000);
    cr_assert_neq(p, q);
    devptr big = A(e.ca, 25 * MiB + 1);
    cr_assert_eq(cachealloc_block_size(e.ca, big), 25 * MiB + 1);
    F(e.ca, p);
    cr_assert_eq(cachealloc_block_size(e.ca, p), 0);
    /* nothing was cached: the same request goes to the device again */
    devptr p2 = A(e.ca, 1000);
    cr_assert_eq(e.dev->alloc_calls, calls + 4);
    F(e.ca, p2);
    F(e.ca, q);
    F(e.ca, big);
    cr_assert_eq(cachealloc_free(e.ca, q), OOM_EINVAL, "a pointer freed already is unknown");
    devptr z = 1;
    cr_assert_eq(cachealloc_malloc(e.ca, 0, &z), OOM_OK);
    cr_assert_eq(z, 0);
    cr_assert_eq(e.dev->alloc_calls, calls + 4, "malloc(0) asks the device for nothing");
    /* DeviceCachingAllocator never ran: no stat, no trace entry, an empty snapshot, no free block */
    expect_stats_untouched(e.ca, 0);
    size_t ntrace = 9, nseg = 9;
    cachealloc_trace(e.ca, &ntrace);
    cr_assert_eq(ntrace, 0);
    ca_snap_segment *segs = cachealloc_snapshot(e.ca, &nseg);
    cr_assert_eq(nseg, 0);
    cachealloc_snapshot_free(segs, nseg);
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 0);
    cr_assert_not(cachealloc_would_release(e.ca, 100 * MiB));
    CHECK_OK(e.ca);
    rm(&e);
}

Test(cachealloc, uncached_enforces_no_cap_and_empty_cache_only_counts_its_sync)
{
    /* set_per_process_memory_fraction caps the device allocator, which the uncached path never asks */
    env e = mk_uncached(4 * MiB);
    cr_assert_eq(cachealloc_budget(e.ca), 0);
    devptr p = A(e.ca, 8 * MiB); /* twice the budget */
    /* empty_cache still runs release_cached_blocks (synchronize_and_free_events) over the empty pools */
    cachealloc_empty_cache(e.ca);
    expect_stats_untouched(e.ca, 1);
    cr_assert_eq(cachealloc_block_size(e.ca, p), 8 * MiB, "a live allocation is not the cache's to release");
    F(e.ca, p);
    rm(&e);
}

Test(cachealloc, uncached_device_failure_is_the_drivers_error_not_an_allocator_oom)
{
    env e = mk_uncached(0);
    devptr live = A(e.ca, 4096);
    device_fault_arm(e.dev, 1, false); /* the next device allocation fails */
    devptr p = 7;
    cr_assert_eq(cachealloc_malloc(e.ca, 2 * MiB, &p), OOM_ENOMEM_DEVICE);
    cr_assert_eq(p, 7, "*out is written on success only");
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o);
    cr_assert_eq(strncmp(o->message, "CUDA error: out of memory", 25), 0, "%s", o->message);
    cr_assert_eq(o->requested, 2 * MiB);
    /* C10_CUDA_CHECK raised it: num_ooms, the trace and every other stat stay as they were */
    expect_stats_untouched(e.ca, 0);
    CHECK_OK(e.ca);
    F(e.ca, live);
    rm(&e);
}

Test(cachealloc, uncached_setting_from_the_environment)
{
    static const char *const vars[] = {ALLOC_NO_CACHING_ENV_VARS};
    for (size_t i = 0; i < 3; i++)
        unsetenv(vars[i]);
    bool on = true;
    const char *src = "x";
    char err[128] = "";
    cr_assert_eq(alloc_no_caching_pick(&on, &src, err, sizeof err), OOM_OK);
    cr_assert(!on && src == NULL);
    /* PyTorch: has_cuda_env || has_rocm_env, each c10::utils::check_env: exactly "1" */
    setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "0", 1);
    setenv("PYTORCH_NO_HIP_MEMORY_CACHING", "1", 1);
    cr_assert_eq(alloc_no_caching_pick(&on, &src, err, sizeof err), OOM_OK);
    cr_assert(on);
    cr_assert_str_eq(src, "PYTORCH_NO_HIP_MEMORY_CACHING");
    setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 1);
    cr_assert_eq(alloc_no_caching_pick(&on, &src, err, sizeof err), OOM_OK);
    cr_assert_str_eq(src, "PYTORCH_NO_CUDA_MEMORY_CACHING");
    /* oomlab's own decides either way */
    setenv("OOMLAB_NO_CUDA_MEMORY_CACHING", "0", 1);
    cr_assert_eq(alloc_no_caching_pick(&on, &src, err, sizeof err), OOM_OK);
    cr_assert(!on);
    cr_assert_str_eq(src, "OOMLAB_NO_CUDA_MEMORY_CACHING");
    /* anything but 0 or 1 is bad input, named (PyTorch warns and ignores it) */
    setenv("OOMLAB_NO_CUDA_MEMORY_CACHING", "true", 1);
    cr_assert_eq(alloc_no_caching_pick(&on, &src, err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, "OOMLAB_NO_CUDA_MEMORY_CACHING must be 0 or 1 (got 'true')");
}

/* ---- streams ------------------------------------------------------------------------------------------------ */

/* PyTorch's pools order blocks by stream first and get_free_block takes a block only of the request's stream: a
 * segment made for one stream is never split for another, whatever its free space. FSDP2 allocates its all-gather
 * output on its copy-in stream and its reduce-scatter output on the reduce-scatter stream, so these counters decide
 * its reserved bytes. */
Test(cachealloc, a_free_block_serves_only_its_own_stream)
{
    env e = mkc("");
    cachealloc_set_stream(e.ca, 1);
    devptr a = A(e.ca, 4 * MiB); /* a 20 MiB segment for stream 1 */
    cachealloc_set_stream(e.ca, 0);
    F(e.ca, a); /* freed under stream 0: it goes back to stream 1's part of the pool */
    devptr b = A(e.ca, 4 * MiB);
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 2, "stream 0 must not take stream 1's free segment");
    cr_assert_eq(ST(e.ca)->reserved_bytes[STAT_ALL].current, 40 * (int64_t)MiB);
    cr_assert_neq(b, a);
    cachealloc_set_stream(e.ca, 1);
    devptr c = A(e.ca, 4 * MiB); /* stream 1 finds its own block again */
    cr_assert_eq(c, a);
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 2);
    cr_assert_eq(cachealloc_stream(e.ca), 1);
    size_t n = 0;
    ca_snap_segment *segs = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 2);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(segs[i].stream, segs[i].address == a ? 1 : 0, "segment %zu's stream", i);
    cachealloc_snapshot_free(segs, n);
    F(e.ca, c);
    cachealloc_set_stream(e.ca, 0);
    F(e.ca, b);
    /* the largest free block looks at every stream; empty_cache releases every stream's segments */
    cr_assert_eq(cachealloc_largest_free_block(e.ca), 20 * MiB);
    cachealloc_empty_cache(e.ca);
    cr_assert_eq(ST(e.ca)->reserved_bytes[STAT_ALL].current, 0);
    CHECK_OK(e.ca);
    rm(&e);
}

/* The last resort (release every cached block and retry) covers every stream: a budget that holds one segment
 * lets stream 0 allocate once stream 1's free segment is released. */
Test(cachealloc, the_emptying_retry_releases_other_streams_segments)
{
    env e = mk("", 24 * MiB, 0);
    cachealloc_set_stream(e.ca, 2);
    F(e.ca, A(e.ca, 4 * MiB));
    cachealloc_set_stream(e.ca, 0);
    devptr b = A(e.ca, 4 * MiB);
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 1);
    cr_assert_eq(ST(e.ca)->num_alloc_retries, 1, "the new segment came only after the retry emptied the cache");
    F(e.ca, b);
    rm(&e);
}

/* ---- private pools (a CUDA graph's memory: beginAllocateToPool, endAllocateToPool, releasePool) ------------- */

/* While a pool is allocated to, a request takes its blocks and makes its segments; a block freed afterwards goes back
 * to the pool it came from, and serves only that pool again; every aggregate counter holds both. */
Test(cachealloc, a_private_pool_keeps_its_own_segments)
{
    env e = mkc("");
    devptr d = A(e.ca, 4 * MiB); /* the default large pool: a 20 MiB segment */
    F(e.ca, d);
    cr_assert_eq(cachealloc_begin_allocate_to_pool(e.ca, 1), OOM_OK);
    cr_assert_eq(cachealloc_allocating_pool(e.ca), 1);
    devptr p = A(e.ca, 4 * MiB); /* the free default block is not the pool's: a segment of its own */
    devptr s = A(e.ca, 1000);    /* and a small one */
    cr_assert_neq(p, d);
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 3);
    cr_assert_eq(ST(e.ca)->reserved_bytes[STAT_ALL].current, 42 * (int64_t)MiB);
    cr_assert_eq(ST(e.ca)->allocated_bytes[STAT_ALL].current, 4 * (int64_t)MiB + 1024);
    cachealloc_end_allocate_to_pool(e.ca, 1);
    cr_assert_eq(cachealloc_allocating_pool(e.ca), 0);
    F(e.ca, p); /* freed outside the capture: back to the pool */
    cr_assert_eq(cachealloc_private_free_bytes(e.ca), 22 * MiB - 1024, "its large segment and its small one's rest");
    devptr d2 = A(e.ca, 4 * MiB); /* the default pool takes its own block, never the pool's */
    cr_assert_eq(d2, d);
    cr_assert_eq(cachealloc_begin_allocate_to_pool(e.ca, 1), OOM_OK);
    devptr p2 = A(e.ca, 4 * MiB);
    cr_assert_eq(p2, p, "the pool reuses its own free block");
    cachealloc_end_allocate_to_pool(e.ca, 1);
    size_t n = 0;
    ca_snap_segment *segs = cachealloc_snapshot(e.ca, &n);
    cr_assert_eq(n, 3);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(segs[i].pool, segs[i].address == d ? 0 : 1, "segment %zu's pool", i);
    cachealloc_snapshot_free(segs, n);
    F(e.ca, p2);
    F(e.ca, s);
    F(e.ca, d2);
    rm(&e);
}

/* empty_cache releases a private pool's free segments only once its use count is 0 (graph_pools_freeable), and,
 * while a capture is underway, leaves the default pools alone. */
Test(cachealloc, empty_cache_spares_a_live_private_pool)
{
    env e = mkc("");
    cr_assert_eq(cachealloc_begin_allocate_to_pool(e.ca, 1), OOM_OK); /* made with one use */
    F(e.ca, A(e.ca, 4 * MiB));
    cachealloc_end_allocate_to_pool(e.ca, 1);
    F(e.ca, A(e.ca, 4 * MiB)); /* one free segment in each */
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 2);
    cr_assert_eq(cachealloc_begin_allocate_to_pool(e.ca, 1), OOM_OK); /* a second use */
    cachealloc_empty_cache(e.ca); /* during a capture: nothing */
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 2);
    cr_assert_eq(ST(e.ca)->num_sync_all_streams, 0, "no synchronize_and_free_events during a capture");
    cachealloc_end_allocate_to_pool(e.ca, 1);
    cachealloc_release_pool(e.ca, 1);
    cachealloc_empty_cache(e.ca); /* the pool still has a use: only the default segment goes */
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 1);
    cr_assert_eq(cachealloc_private_free_bytes(e.ca), 20 * MiB);
    cachealloc_release_pool(e.ca, 1);
    cachealloc_empty_cache(e.ca);
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 0);
    cr_assert_eq(ST(e.ca)->reserved_bytes[STAT_ALL].current, 0);
    cr_assert_eq(cachealloc_begin_allocate_to_pool(e.ca, 0), OOM_EINVAL);
    CHECK_OK(e.ca);
    rm(&e);
}

/* Under a budget, a request in a capture gets no emptying retry (C10_LIKELY(captures_underway.empty())): the free
 * default segment that would make room stays, and the request is an OOM whose message counts the pool's free
 * blocks as allocated ("with ... allocated in private pools"). */
Test(cachealloc, a_capture_gets_no_emptying_retry)
{
    env e = mk("", 44 * MiB, 0);
    F(e.ca, A(e.ca, 4 * MiB)); /* a free default 20 MiB segment */
    cr_assert_eq(cachealloc_begin_allocate_to_pool(e.ca, 1), OOM_OK);
    F(e.ca, A(e.ca, 2 * MiB)); /* the pool's own 20 MiB, free */
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(e.ca, 24 * MiB, &p), OOM_ENOMEM_DEVICE); /* 40 + 24 MiB: over the cap */
    cr_assert_eq(ST(e.ca)->num_alloc_retries, 0);
    cr_assert_eq(ST(e.ca)->segment[STAT_ALL].current, 2, "the default segment was not released");
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o);
    cr_assert(strstr(o->message, "Of the allocated memory 20.00 MiB is allocated by PyTorch, with 20.00 MiB allocated "
                                 "in private pools (e.g., CUDA Graphs), and 20.00 MiB is reserved by PyTorch but "
                                 "unallocated.") != NULL,
              "%s", o->message);
    cachealloc_end_allocate_to_pool(e.ca, 1);
    p = A(e.ca, 24 * MiB); /* outside the capture the retry empties the default pool and it fits */
    cr_assert_eq(ST(e.ca)->num_alloc_retries, 1);
    F(e.ca, p);
    rm(&e);
}
