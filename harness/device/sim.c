/* sim.c - the simulated device: a fixed capacity, driver-like address placement, host RAM backing.
 *
 * Address ranges (segments from mem_alloc, reservations from va_reserve) live in one array sorted by base.
 * Every range starts at a DEVICE_VMM_GRANULARITY boundary and spans a multiple of it.
 *
 * Segments (mem_alloc) are placed the way the CUDA driver placed cudaMalloc on an H100 (driver 580). Measured by
 * scripts/twins/addr_probe.py (tests/data/addr_probe.json: scripted and random cuMemAlloc/cuMemFree sequences;
 * tests/test_device.c checks 82 of them, every address) and by PyTorch's own traces (tests/data; docs/parity.md,
 * "Where the driver puts segments"). The driver carves its address space into regions of the request rounded up
 * to 32 MiB, stacked downward:
 *   1. a request first goes into a free gap of an existing region, newest region first, and within a region
 *      into the smallest gap that fits (ties: lowest address), at the gap's low end;
 *   2. otherwise a new region is carved from the top of the highest free stretch of address space strictly
 *      larger than it (the unbounded space below every region also qualifies at equal size), and the request
 *      sits at the region's bottom;
 *   3. a region whose segments are all freed is released, and its space merges with free neighbours.
 * The context starts with (F the first region, 32 MiB; oldest first):
 *   F          [F, F+32)       the driver holds its bottom 8 MiB;
 *   launch     [F-480, F-64)   a region whose bottom 414 MiB the driver reserves at context creation, leaving
 *                              2 MiB free at its top: the first request of 2 MiB or less goes there;
 *   [F-64, F)                  the driver's, never handed out.
 * The first kernel launch (device_note_kernel_launch) frees the 414 MiB: the launch region then takes segments
 * from its bottom up, or, if nothing lived in its top 2 MiB, is released like any empty region. The driver also
 * allocates memory of its own then (modules, local memory: 2 + 26 + 480 MiB for PyTorch's fill kernel, other
 * amounts for others); that is not modelled, so later regions sit higher than on the GPU, in the same order.
 * The order matters because the caching allocator breaks best-fit ties between equal-size blocks by address.
 * A process that initialised NCCL (a communicator spanning GPUs: devcomm_open calls device_note_nccl before the
 * first segment) starts otherwise, measured from PyTorch's snapshots of sharded_training on 2 x H200 (driver 580,
 * NCCL 2.28.9; docs/parity.md, "sharded_training"; scripts/twins/nccl_layout.py), T the heap's top:
 *   first      [T-192, T)        its bottom 12 MiB the driver's: segments fill it from T-180 up;
 *              [T-928, T-192)    the driver's;
 *   NCCL's     [T-1440, T-928)   held whole by the driver until NCCL's first collective (DEVICE_NCCL_COLLECTIVE)
 *                                frees it; the empty region then takes segments from its bottom up (newest region);
 *              [T-1728, T-1440)  the driver's; new regions are carved below.
 * The first kernel launch carves 160 MiB of the driver's below the regions (the launch region does not exist),
 * and NCCL's first collective a 32 MiB region whose bottom 30 MiB the driver holds (its top 2 MiB free). Which
 * gaps the driver's memory leaves further down varies from run to run by tens to hundreds of MiB and is not
 * modelled: later regions sit higher than on the GPU, in the same order.
 * The driver puts reservations of tens of GiB (expandable segments') at 0x302000000 and up, and small ones among
 * the segments; the sim puts every reservation in the lowest free gap above SIM_VA_BASE: the caching allocator
 * never compares addresses across reservations. An addr_hint of an exact size
 * overrides the placement once (trace replay uses PyTorch's recorded addresses this way).
 * Physical memory is charged by mem_alloc (its bytes) and va_map (its bytes), never by va_reserve. At the default
 * capacity (an H100) the CUDA context's memory is charged from the start (DEVICE_SIM_CONTEXT_BYTES): it is not
 * free, and the process's memory in use (processes, PyTorch's NVML line) is what was charged plus NVML's figure
 * for the context. Options can give another context (sim_context_bytes, at any capacity: a GPU oomlab predict
 * models), reported to NVML as it is; a sim of another capacity has none by default.
 * Backing: segments are anonymous zero-filled mappings; a reservation is one PROT_NONE mapping whose pages
 * va_map makes read-write and va_unmap discards (MADV_DONTNEED) and makes PROT_NONE again, so stale bytes
 * never survive an unmap and a stray access faults. Dry-run keeps the same bookkeeping without backing.
 * Host memory that cannot back a range is OOM_ENOMEM_HOST with the last-error record saying what and why
 * ("sim: cannot back a 20971520-byte segment with host memory (mmap: Cannot allocate memory)"): the host ran
 * out, not the simulated device, so it is never reported as a device OOM.
 *
 * Pinned host memory: host_alloc blocks (aligned_alloc, 4 KiB aligned) and host_register ranges are charged in
 * whole 4 KiB pages against pinned_limit; past it a request fails with OOM_ENOMEM_PINNED and holds nothing.
 * Streams keep two counters, queued and completed (completed <= queued); an event is its stream and the value
 * of `queued` when it was recorded, complete once `completed` reaches it. host_mu guards the pinned, stream and
 * event state, which a pin-memory thread reaches while the main thread allocates device memory.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, madvise */

#include "device/device.h"

#include "core/check.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GRAN DEVICE_VMM_GRANULARITY
#define SIM_VA_BASE ((devptr)0x300000000ULL)       /* VMM reservations grow up from here */
#define SIM_VA_LIMIT ((devptr)0x600000000000ULL)    /* ... to the floor of the cudaMalloc heap (hints too) */
#define SIM_HEAP_TOP ((devptr)0x7fc000000000ULL)    /* cudaMalloc regions stack down from here */
#define SIM_REGION ((size_t)32 << 20)               /* the driver's region granularity */
#define SIM_DRIVER_HELD ((size_t)8 << 20)           /* held by the driver at the bottom of the first region */
#define SIM_LAUNCH_BELOW ((size_t)480 << 20)        /* the launch region's base below the first region */
#define SIM_LAUNCH_FREE ((size_t)2 << 20)           /* the launch region's free top before the first kernel */
#define SIM_DRIVER_BLOCK ((size_t)64 << 20)         /* the driver's own block right below the first region */
/* A process that initialised NCCL (device_note_nccl; see the file comment), measured on 2 x H200: */
#define SIM_NCCL_FIRST ((size_t)192 << 20)       /* the first region, at the top */
#define SIM_NCCL_FIRST_HELD ((size_t)12 << 20)   /* held by the driver at its bottom */
#define SIM_NCCL_DRIVER_HIGH ((size_t)736 << 20) /* the driver's, right below the first region */
#define SIM_NCCL_COMM ((size_t)512 << 20)        /* held by the driver until NCCL's first collective */
#define SIM_NCCL_DRIVER_LOW ((size_t)288 << 20)  /* the driver's, below that */
#define SIM_NCCL_LAUNCH ((size_t)160 << 20)      /* the driver's at the first kernel launch, carved as a region */
#define SIM_NCCL_COLL_HELD ((size_t)30 << 20)    /* held in a region carved at NCCL's first collective */
#define SIM_HOST_ALIGN ((size_t)4096)
#define SIM_HOST_PAGE ((size_t)4096) /* pinning works on whole pages */
#define PAGE_CONT UINT32_MAX /* a granule inside a mapped page, not its first */

typedef enum range_kind { RANGE_SEGMENT, RANGE_RESERVATION } range_kind;

typedef struct sim_range {
    devptr base;
    size_t size;  /* address space taken: a multiple of GRAN */
    size_t bytes; /* segment: the bytes asked for (and charged); reservation: == size */
    range_kind kind;
    unsigned char *backing; /* host mapping of the whole range; NULL in dry-run */
    /* reservation, one entry per granule: 0 unmapped, n the first granule of an n-granule mapped page,
     * PAGE_CONT a later granule of one. Unmap must name the pages exactly as they were mapped. */
    uint32_t *pages;
    size_t mapped_granules;
} sim_range;

/* A driver region: segments live inside it; live counts them (plus one for the driver's own 8 MiB). */
typedef struct sim_region {
    devptr base;
    size_t size;
    uint64_t seq;   /* creation order: newer regions are searched first */
    size_t live;
    size_t held;    /* bytes at the bottom the driver holds itself */
    bool permanent; /* the driver's block: never released, never searched */
} sim_region;

/* A pinned host range: a host_alloc block (ours to free) or a caller's host_register range. */
typedef struct sim_host {
    void *p;
    size_t bytes;   /* as asked */
    size_t charged; /* whole pages spanned, counted in pinned_used */
    bool registered;
} sim_host;

typedef struct sim_stream {
    bool live;
    uint64_t queued, completed; /* held units so far; completed <= queued */
} sim_stream;

typedef struct sim_event {
    bool live;
    devstream stream;
    uint64_t ticket; /* the stream's `queued` when recorded */
} sim_event;

typedef struct sim_dev {
    sim_region *regions; /* sorted by base */
    size_t nregions, capregions;
    uint64_t region_seq;
    size_t hint_bytes;   /* the hint applies to a mem_alloc of exactly this many bytes */
    bool heap_ready;     /* the context's regions exist (made at the first placement the model decides) */
    bool launched;       /* a kernel was launched: the launch reservation is freed */
    uint64_t launch_seq; /* the launch region (by seq: the array moves); in the NCCL layout, NCCL's region */
    /* The NCCL layout (device_note_nccl). Invariants (nccl_layout_check, checked builds): N1 nccl_collective
     * implies nccl; N2 nccl is set only while heap_ready is false (before the first segment), so the context's
     * regions are one layout or the other; N3 until NCCL's first collective its region exists, spans
     * SIM_NCCL_COMM and is held whole, no segment in it. */
    bool nccl;            /* the process initialised NCCL: heap_init lays out the NCCL process's regions */
    bool nccl_collective; /* NCCL's first collective ran: its region's reservation is freed */
    size_t capacity;
    size_t in_use;  /* physical bytes charged, the context's included */
    size_t context; /* of which the CUDA context's (0: no context modeled) */
    size_t context_nvml; /* what NVML lists for the context (the measured H100's differs from context) */
    bool dry_run;
    devptr hint; /* 0 = none */
    sim_range *ranges;
    size_t nranges, capranges;
    pthread_mutex_t host_mu; /* guards everything below */
    sim_host *host;          /* host_alloc blocks and host_register ranges */
    size_t nhost, caphost;
    size_t pinned_used, pinned_limit; /* charged pages x SIM_HOST_PAGE; the budget */
    sim_stream *streams;              /* index = devstream; [0] is the default stream */
    size_t nstreams, capstreams;
    sim_event *events; /* index + 1 = devevent */
    size_t nevents, capevents;
} sim_dev;

/* Round up to a multiple of GRAN; 0 on overflow. */
static size_t round_gran(size_t n)
{
    if (n > SIZE_MAX - (GRAN - 1))
        return 0;
    return (n + GRAN - 1) / GRAN * GRAN;
}

/* Index of the first range whose base is > p. */
static size_t upper_index(const sim_dev *s, devptr p)
{
    size_t lo = 0, hi = s->nranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ranges[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The range whose address space contains p, or NULL. */
static sim_range *find_containing(sim_dev *s, devptr p)
{
    size_t i = upper_index(s, p);
    if (i == 0)
        return NULL;
    sim_range *r = &s->ranges[i - 1];
    return p - r->base < r->size ? r : NULL;
}

/* Is [lo, lo+size) free address space? (size > 0, no overflow checked by the caller) */
static bool span_is_free(const sim_dev *s, devptr lo, size_t size)
{
    size_t i = upper_index(s, lo);
    if (i > 0) {
        const sim_range *prev = &s->ranges[i - 1];
        if (prev->base + prev->size > lo)
            return false;
    }
    return i == s->nranges || s->ranges[i].base - lo >= size;
}

/* A base for a reservation of size bytes: the lowest free gap in [SIM_VA_BASE, SIM_VA_LIMIT). */
static bool place(sim_dev *s, size_t size, devptr *out)
{
    devptr cursor = SIM_VA_BASE;
    for (size_t i = 0; i < s->nranges; i++) {
        const sim_range *r = &s->ranges[i];
        if (r->base >= SIM_VA_LIMIT)
            break;
        if (r->base > cursor && r->base - cursor >= size) {
            *out = cursor;
            return true;
        }
        if (r->base + r->size > cursor)
            cursor = r->base + r->size;
    }
    if (cursor < SIM_VA_LIMIT && SIM_VA_LIMIT - cursor >= size) {
        *out = cursor;
        return true;
    }
    return false;
}

/* ---- the driver's region model for segments (see the file comment) ---- */

static sim_region *region_containing(sim_dev *s, devptr p)
{
    for (size_t i = 0; i < s->nregions; i++)
        if (p >= s->regions[i].base && p - s->regions[i].base < s->regions[i].size)
            return &s->regions[i];
    return NULL;
}

static sim_region *region_add(sim_dev *s, devptr base, size_t size, size_t held, bool permanent)
{
    if (s->nregions == s->capregions) {
        size_t cap = s->capregions ? s->capregions * 2 : 16;
        sim_region *nr = realloc(s->regions, cap * sizeof *nr);
        if (!nr)
            return NULL;
        s->regions = nr;
        s->capregions = cap;
    }
    size_t i = 0;
    while (i < s->nregions && s->regions[i].base < base)
        i++;
    memmove(&s->regions[i + 1], &s->regions[i], (s->nregions - i) * sizeof *s->regions);
    s->regions[i] = (sim_region){base, size, ++s->region_seq, held ? 1 : 0, held, permanent};
    s->nregions++;
    return &s->regions[i];
}

/* The smallest gap of at least size bytes in region g (ties: lowest address). */
static bool region_best_gap(const sim_dev *s, const sim_region *g, size_t size, devptr *out)
{
    devptr cursor = g->base + g->held, end = g->base + g->size, best = 0;
    size_t best_len = SIZE_MAX;
    for (size_t i = upper_index(s, cursor > 0 ? cursor - 1 : 0); i <= s->nranges; i++) {
        devptr next = i < s->nranges ? s->ranges[i].base : end;
        if (next > end)
            next = end;
        if (next >= cursor && next - cursor >= size && next - cursor < best_len) {
            best = cursor;
            best_len = next - cursor;
        }
        if (i == s->nranges || s->ranges[i].base >= end)
            break;
        if (s->ranges[i].base + s->ranges[i].size > cursor)
            cursor = s->ranges[i].base + s->ranges[i].size;
    }
    if (best_len == SIZE_MAX)
        return false;
    *out = best;
    return true;
}

/* A new region of z bytes: the top of the highest free stretch between regions strictly larger than z, else
 * just below the lowest region. */
static bool region_carve(sim_dev *s, size_t z, devptr *out)
{
    for (size_t i = s->nregions; i-- > 1;) {
        devptr lo = s->regions[i - 1].base + s->regions[i - 1].size, hi = s->regions[i].base;
        if (hi > lo && hi - lo > z) {
            *out = hi - z;
            return true;
        }
    }
    devptr low = s->nregions ? s->regions[0].base : SIM_HEAP_TOP;
    if (low < SIM_VA_LIMIT || low - SIM_VA_LIMIT < z)
        return false;
    *out = low - z;
    return true;
}

static size_t round_region(size_t n) { return (n + SIM_REGION - 1) / SIM_REGION * SIM_REGION; }

/* The regions the context starts with (see the file comment). */
static bool heap_init_nccl(sim_dev *s)
{
    devptr f = SIM_HEAP_TOP - SIM_NCCL_FIRST, high = f - SIM_NCCL_DRIVER_HIGH, comm = high - SIM_NCCL_COMM;
    sim_region *g;
    if (!region_add(s, f, SIM_NCCL_FIRST, SIM_NCCL_FIRST_HELD, false) ||
        !region_add(s, high, SIM_NCCL_DRIVER_HIGH, 0, true))
        return false;
    if (!s->nccl_collective) {
        if (!(g = region_add(s, comm, SIM_NCCL_COMM, SIM_NCCL_COMM, false)))
            return false;
        s->launch_seq = g->seq;
    }
    if (!region_add(s, comm - SIM_NCCL_DRIVER_LOW, SIM_NCCL_DRIVER_LOW, 0, true))
        return false;
    s->heap_ready = true;
    return true;
}

static bool heap_init(sim_dev *s)
{
    if (s->nccl)
        return heap_init_nccl(s);
    devptr f = SIM_HEAP_TOP - SIM_REGION;
    size_t launch = SIM_LAUNCH_BELOW - SIM_DRIVER_BLOCK;
    sim_region *g;
    if (!region_add(s, f, SIM_REGION, SIM_DRIVER_HELD, false))
        return false;
    if (!s->launched) {
        if (!(g = region_add(s, f - SIM_LAUNCH_BELOW, launch, launch - SIM_LAUNCH_FREE, false)))
            return false;
        s->launch_seq = g->seq;
    }
    if (!region_add(s, f - SIM_DRIVER_BLOCK, SIM_DRIVER_BLOCK, 0, true))
        return false;
    s->heap_ready = true;
    return true;
}

#if OOM_DEBUG >= 2
/* N1-N3 of sim_dev (O(regions); place_segment runs it in checked builds). */
static oom_status nccl_layout_check(const sim_dev *s, bool expensive, char *why, size_t cap)
{
    (void)expensive;
    OOM_REQUIRE(!s->nccl_collective || s->nccl, why, cap, "N1: NCCL's collective ran without NCCL initialised");
    if (!s->nccl || s->nccl_collective || !s->heap_ready)
        return OOM_OK;
    const sim_region *comm = NULL;
    for (size_t i = 0; i < s->nregions; i++)
        if (s->regions[i].seq == s->launch_seq)
            comm = &s->regions[i];
    OOM_REQUIRE(comm != NULL, why, cap, "N3: NCCL's region is gone before its first collective");
    OOM_REQUIRE(comm->size == SIM_NCCL_COMM && comm->held == SIM_NCCL_COMM && comm->live == 1, why, cap,
                "N3: NCCL's region spans %zu B, %zu held, %zu live before its first collective", comm->size,
                comm->held, comm->live);
    return OOM_OK;
}
#endif

/* Where the driver puts a segment of size bytes (a multiple of GRAN); *g gets its region, *fresh whether it was
 * made for this segment. */
static bool place_segment(sim_dev *s, size_t size, devptr *out, sim_region **g, bool *fresh)
{
    *fresh = false;
    devptr hint = s->hint;
    size_t hint_bytes = s->hint_bytes;
    s->hint = 0;
    if (hint && hint % GRAN == 0 && round_gran(hint_bytes) == size && hint >= SIM_VA_LIMIT &&
        hint <= UINT64_MAX - size && span_is_free(s, hint, size)) {
        sim_region *r = region_containing(s, hint);
        if (r && !r->permanent && hint + size <= r->base + r->size && hint >= r->base + r->held) {
            *g = r;
            *out = hint;
            return true;
        }
        bool overlaps = false;
        for (size_t i = 0; i < s->nregions; i++)
            if (s->regions[i].base < hint + size && hint < s->regions[i].base + s->regions[i].size)
                overlaps = true;
        if (!overlaps && (*g = region_add(s, hint, size, 0, false)) != NULL) {
            *fresh = true;
            *out = hint;
            return true;
        }
    }
    if (!s->heap_ready && !heap_init(s))
        return false;
    OOM_VALIDATE("sim", nccl_layout_check, s);
    /* 1. existing regions, newest first */
    sim_region *best = NULL;
    for (size_t i = 0; i < s->nregions; i++) {
        sim_region *r = &s->regions[i];
        devptr at;
        if (!r->permanent && (!best || r->seq > best->seq) && region_best_gap(s, r, size, &at))
            best = r;
    }
    if (best) {
        region_best_gap(s, best, size, out);
        *g = best;
        return true;
    }
    /* 2. a new region */
    size_t z = round_region(size);
    devptr base;
    if (!region_carve(s, z, &base) || !(*g = region_add(s, base, z, 0, false)))
        return false;
    *fresh = true;
    *out = base;
    return true;
}

/* A segment at p was freed: release its region once nothing lives in it. */
static void region_release_segment(sim_dev *s, devptr p)
{
    sim_region *r = region_containing(s, p);
    if (!r || r->permanent)
        return;
    if (--r->live == 0) {
        size_t i = (size_t)(r - s->regions);
        memmove(&s->regions[i], &s->regions[i + 1], (s->nregions - i - 1) * sizeof *s->regions);
        s->nregions--;
    }
}

/* Insert r keeping the array sorted; false when the array cannot grow. */
static bool insert_range(sim_dev *s, const sim_range *r)
{
    if (s->nranges == s->capranges) {
        size_t cap = s->capranges ? s->capranges * 2 : 16;
        sim_range *nr = realloc(s->ranges, cap * sizeof *nr);
        if (!nr)
            return false;
        s->ranges = nr;
        s->capranges = cap;
    }
    size_t i = upper_index(s, r->base);
    memmove(&s->ranges[i + 1], &s->ranges[i], (s->nranges - i) * sizeof *s->ranges);
    s->ranges[i] = *r;
    s->nranges++;
    return true;
}

static void remove_range(sim_dev *s, sim_range *r)
{
    size_t i = (size_t)(r - s->ranges);
    memmove(&s->ranges[i], &s->ranges[i + 1], (s->nranges - i - 1) * sizeof *s->ranges);
    s->nranges--;
}

/* The exact range starting at p of the given kind, or NULL. */
static sim_range *find_exact(sim_dev *s, devptr p, range_kind kind)
{
    sim_range *r = find_containing(s, p);
    return (r && r->base == p && r->kind == kind) ? r : NULL;
}

/* Addressable length of a range: segments stop at the bytes asked for. */
static size_t range_limit(const sim_range *r) { return r->kind == RANGE_SEGMENT ? r->bytes : r->size; }

/* Check that [p, p+bytes) lies in one allocation and is fully mapped; *host gets its backing (NULL in
 * dry-run). bytes > 0. */
static oom_status sim_span(sim_dev *s, devptr p, size_t bytes, unsigned char **host)
{
    sim_range *r = find_containing(s, p);
    if (!r)
        return OOM_EINVAL;
    size_t off = (size_t)(p - r->base);
    size_t limit = range_limit(r);
    if (off >= limit || bytes > limit - off)
        return OOM_EINVAL;
    if (r->kind == RANGE_RESERVATION) {
        for (size_t g = off / GRAN; g <= (off + bytes - 1) / GRAN; g++)
            if (r->pages[g] == 0)
                return OOM_EINVAL;
    }
    *host = r->backing ? r->backing + off : NULL;
    return OOM_OK;
}

static oom_status sim_mem_alloc(void *impl, size_t bytes, devptr *out)
{
    sim_dev *s = impl;
    if (bytes == 0) {
        s->hint = 0;
        return OOM_EINVAL;
    }
    size_t size = round_gran(bytes);
    devptr base;
    if (bytes > s->capacity - s->in_use || size == 0) {
        s->hint = 0;
        return OOM_ENOMEM_DEVICE;
    }
    sim_region *g = NULL;
    bool fresh;
    if (!place_segment(s, size, &base, &g, &fresh))
        return OOM_ENOMEM_DEVICE;
    sim_range r = {.base = base, .size = size, .bytes = bytes, .kind = RANGE_SEGMENT};
    if (!s->dry_run) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            if (fresh) { /* undo the new region */
                g->live = 1;
                region_release_segment(s, base);
            }
            OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot back a %zu-byte segment with host memory (mmap: %s)", bytes,
                      strerror(e));
            return OOM_ENOMEM_HOST;
        }
        r.backing = m;
    }
    if (!insert_range(s, &r)) {
        if (r.backing)
            munmap(r.backing, size);
        if (fresh) { /* undo the new region */
            g->live = 1;
            region_release_segment(s, base);
        }
        OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot record a %zu-byte segment: out of host memory", bytes);
        return OOM_ENOMEM_HOST;
    }
    g->live++;
    s->in_use += bytes;
    *out = base;
    return OOM_OK;
}

static oom_status sim_mem_free(void *impl, devptr p, size_t bytes)
{
    sim_dev *s = impl;
    sim_range *r = find_exact(s, p, RANGE_SEGMENT);
    if (!r || r->bytes != bytes)
        return OOM_EINVAL;
    if (r->backing)
        munmap(r->backing, r->size);
    s->in_use -= bytes;
    remove_range(s, r);
    region_release_segment(s, p);
    return OOM_OK;
}

static oom_status sim_processes(void *impl, device_proc *out, size_t cap, size_t *count)
{
    sim_dev *s = impl;
    if (s->context == 0)
        return OOM_EUNSUPPORTED;
    if (cap > 0)
        out[0] = (device_proc){.pid = (unsigned int)getpid(),
                               .used_bytes = s->in_use - s->context + s->context_nvml,
                               .self = true};
    *count = 1;
    return OOM_OK;
}

static oom_status sim_external(void *impl, size_t bytes, bool charge)
{
    sim_dev *s = impl;
    if (!charge) {
        s->in_use -= bytes < s->in_use - s->context ? bytes : s->in_use - s->context;
        return OOM_OK;
    }
    if (bytes > s->capacity - s->in_use)
        return OOM_ENOMEM_DEVICE;
    s->in_use += bytes;
    return OOM_OK;
}

static oom_status sim_mem_info(void *impl, size_t *free_bytes, size_t *total_bytes)
{
    sim_dev *s = impl;
    *free_bytes = s->capacity - s->in_use;
    *total_bytes = s->capacity;
    return OOM_OK;
}

static oom_status sim_va_reserve(void *impl, size_t bytes, devptr *out)
{
    sim_dev *s = impl;
    if (bytes == 0 || bytes % GRAN != 0) {
        s->hint = 0;
        return OOM_EINVAL;
    }
    devptr base;
    if (!place(s, bytes, &base))
        return OOM_ENOMEM_DEVICE;
    sim_range r = {.base = base, .size = bytes, .bytes = bytes, .kind = RANGE_RESERVATION};
    r.pages = calloc(bytes / GRAN, sizeof *r.pages);
    if (!r.pages) {
        OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot record a %zu-byte address reservation: out of host memory", bytes);
        return OOM_ENOMEM_HOST;
    }
    if (!s->dry_run) {
        void *m = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            free(r.pages);
            OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot back a %zu-byte address reservation with host memory (mmap: %s)",
                      bytes, strerror(e));
            return OOM_ENOMEM_HOST;
        }
        r.backing = m;
    }
    if (!insert_range(s, &r)) {
        if (r.backing)
            munmap(r.backing, bytes);
        free(r.pages);
        OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot record a %zu-byte address reservation: out of host memory", bytes);
        return OOM_ENOMEM_HOST;
    }
    *out = base;
    return OOM_OK;
}

static oom_status sim_va_release(void *impl, devptr p, size_t bytes)
{
    sim_dev *s = impl;
    sim_range *r = find_exact(s, p, RANGE_RESERVATION);
    if (!r || r->size != bytes || r->mapped_granules != 0)
        return OOM_EINVAL;
    if (r->backing)
        munmap(r->backing, r->size);
    free(r->pages);
    remove_range(s, r);
    return OOM_OK;
}

/* Validate a va_map/va_unmap request; returns the reservation and the first granule index. */
static sim_range *page_request(sim_dev *s, devptr p, size_t bytes, size_t page_bytes, size_t *g0)
{
    if (page_bytes == 0 || page_bytes % GRAN != 0 || page_bytes / GRAN >= PAGE_CONT)
        return NULL;
    if (bytes == 0 || bytes % page_bytes != 0 || p % GRAN != 0)
        return NULL;
    sim_range *r = find_containing(s, p);
    if (!r || r->kind != RANGE_RESERVATION)
        return NULL;
    size_t off = (size_t)(p - r->base);
    if (bytes > r->size - off)
        return NULL;
    *g0 = off / GRAN;
    return r;
}

static oom_status sim_va_map(void *impl, devptr p, size_t bytes, size_t page_bytes)
{
    sim_dev *s = impl;
    size_t g0;
    sim_range *r = page_request(s, p, bytes, page_bytes, &g0);
    if (!r)
        return OOM_EINVAL;
    size_t ng = bytes / GRAN, per = page_bytes / GRAN;
    for (size_t g = g0; g < g0 + ng; g++)
        if (r->pages[g] != 0)
            return OOM_EINVAL; /* already mapped */
    if (bytes > s->capacity - s->in_use)
        return OOM_ENOMEM_DEVICE;
    if (r->backing && mprotect(r->backing + g0 * GRAN, bytes, PROT_READ | PROT_WRITE) != 0) {
        OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot back %zu bytes of mapped pages with host memory (mprotect: %s)", bytes,
                  strerror(errno));
        return OOM_ENOMEM_HOST;
    }
    for (size_t g = g0; g < g0 + ng; g++)
        r->pages[g] = (g - g0) % per == 0 ? (uint32_t)per : PAGE_CONT;
    r->mapped_granules += ng;
    s->in_use += bytes;
    return OOM_OK;
}

static oom_status sim_va_unmap(void *impl, devptr p, size_t bytes, size_t page_bytes)
{
    sim_dev *s = impl;
    size_t g0;
    sim_range *r = page_request(s, p, bytes, page_bytes, &g0);
    if (!r)
        return OOM_EINVAL;
    size_t ng = bytes / GRAN, per = page_bytes / GRAN;
    /* Every page must have been mapped as one page of exactly page_bytes (one handle each on cuda). */
    for (size_t g = g0; g < g0 + ng; g++)
        if (r->pages[g] != ((g - g0) % per == 0 ? (uint32_t)per : PAGE_CONT))
            return OOM_EINVAL;
    if (r->backing) {
        unsigned char *h = r->backing + g0 * GRAN;
        /* Drop the contents (the next map reads zeros), then make stray accesses fault. */
        if (madvise(h, bytes, MADV_DONTNEED) != 0 || mprotect(h, bytes, PROT_NONE) != 0) {
            OOM_ERROR(OOM_ENOMEM_HOST, "sim: cannot unmap %zu bytes of pages from host memory (%s)", bytes,
                      strerror(errno));
            return OOM_ENOMEM_HOST;
        }
    }
    memset(&r->pages[g0], 0, ng * sizeof *r->pages);
    r->mapped_granules -= ng;
    s->in_use -= bytes;
    return OOM_OK;
}

/* Pages spanned by [p, p+bytes). */
static size_t host_charge(const void *p, size_t bytes)
{
    uintptr_t lo = (uintptr_t)p / SIM_HOST_PAGE * SIM_HOST_PAGE;
    uintptr_t hi = ((uintptr_t)p + bytes + SIM_HOST_PAGE - 1) / SIM_HOST_PAGE * SIM_HOST_PAGE;
    return (size_t)(hi - lo);
}

/* Room for one more host entry (host_mu held). */
static bool host_reserve(sim_dev *s)
{
    if (s->nhost < s->caphost)
        return true;
    size_t cap = s->caphost ? s->caphost * 2 : 16;
    sim_host *nh = realloc(s->host, cap * sizeof *nh);
    if (!nh)
        return false;
    s->host = nh;
    s->caphost = cap;
    return true;
}

static oom_status sim_host_alloc(void *impl, size_t bytes, void **out)
{
    sim_dev *s = impl;
    if (bytes == 0)
        return OOM_EINVAL;
    if (bytes > SIZE_MAX - (SIM_HOST_ALIGN - 1))
        return OOM_ENOMEM_PINNED;
    size_t charged = (bytes + SIM_HOST_PAGE - 1) / SIM_HOST_PAGE * SIM_HOST_PAGE;
    oom_status st = OOM_OK;
    pthread_mutex_lock(&s->host_mu);
    if (charged > s->pinned_limit - s->pinned_used) {
        st = OOM_ENOMEM_PINNED;
        OOM_ERROR(st, "sim: pinning %zu bytes would pass the pinned limit of %zu bytes (%zu held)", bytes,
                  s->pinned_limit, s->pinned_used);
    } else if (!host_reserve(s)) {
        st = OOM_ENOMEM_HOST;
    } else {
        /* aligned_alloc wants a size that is a multiple of the alignment. */
        void *p = aligned_alloc(SIM_HOST_ALIGN, charged);
        if (!p) {
            st = OOM_ENOMEM_PINNED; /* the host could not back it: as good as unpinnable */
        } else {
            s->host[s->nhost++] = (sim_host){p, bytes, charged, false};
            s->pinned_used += charged;
            *out = p;
        }
    }
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

/* The entry starting at p of the given kind, or -1 (host_mu held). */
static ptrdiff_t host_find(const sim_dev *s, const void *p, bool registered)
{
    for (size_t i = s->nhost; i-- > 0;)
        if (s->host[i].p == p && s->host[i].registered == registered)
            return (ptrdiff_t)i;
    return -1;
}

static void host_remove(sim_dev *s, size_t i)
{
    s->pinned_used -= s->host[i].charged;
    s->host[i] = s->host[--s->nhost];
}

static oom_status sim_host_free(void *impl, void *p)
{
    sim_dev *s = impl;
    if (!p)
        return OOM_OK; /* like cudaFreeHost(NULL) */
    pthread_mutex_lock(&s->host_mu);
    ptrdiff_t i = host_find(s, p, false);
    if (i >= 0)
        host_remove(s, (size_t)i);
    pthread_mutex_unlock(&s->host_mu);
    if (i < 0)
        return OOM_EINVAL;
    free(p);
    return OOM_OK;
}

static oom_status sim_host_register(void *impl, void *p, size_t bytes)
{
    sim_dev *s = impl;
    if ((uintptr_t)p > UINTPTR_MAX - bytes)
        return OOM_EINVAL;
    size_t charged = host_charge(p, bytes);
    oom_status st = OOM_OK;
    pthread_mutex_lock(&s->host_mu);
    for (size_t i = 0; i < s->nhost && st == OOM_OK; i++) { /* cudaErrorHostMemoryAlreadyRegistered */
        const sim_host *h = &s->host[i];
        if ((uintptr_t)h->p < (uintptr_t)p + bytes && (uintptr_t)p < (uintptr_t)h->p + h->bytes)
            st = OOM_EINVAL;
    }
    if (st == OOM_OK && charged > s->pinned_limit - s->pinned_used) {
        st = OOM_ENOMEM_PINNED;
        OOM_ERROR(st, "sim: registering %zu bytes would pass the pinned limit of %zu bytes (%zu held)", bytes,
                  s->pinned_limit, s->pinned_used);
    }
    if (st == OOM_OK && !host_reserve(s))
        st = OOM_ENOMEM_HOST;
    if (st == OOM_OK) {
        s->host[s->nhost++] = (sim_host){p, bytes, charged, true};
        s->pinned_used += charged;
    }
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

static oom_status sim_host_unregister(void *impl, void *p)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    ptrdiff_t i = host_find(s, p, true);
    if (i >= 0)
        host_remove(s, (size_t)i);
    pthread_mutex_unlock(&s->host_mu);
    return i >= 0 ? OOM_OK : OOM_EINVAL;
}

static void sim_host_info(void *impl, size_t *pinned_bytes, size_t *limit_bytes)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    *pinned_bytes = s->pinned_used;
    *limit_bytes = s->pinned_limit;
    pthread_mutex_unlock(&s->host_mu);
}

/* ---- streams and events (host_mu held by the callers below) ---- */

static sim_stream *stream_at(sim_dev *s, devstream id)
{
    return id < s->nstreams && s->streams[id].live ? &s->streams[id] : NULL;
}

static oom_status sim_stream_create(void *impl, devstream *out)
{
    sim_dev *s = impl;
    oom_status st = OOM_OK;
    pthread_mutex_lock(&s->host_mu);
    size_t i = 1;
    while (i < s->nstreams && s->streams[i].live)
        i++;
    if (i == s->nstreams) {
        if (s->nstreams == s->capstreams) {
            size_t cap = s->capstreams * 2;
            sim_stream *ns = realloc(s->streams, cap * sizeof *ns);
            if (!ns)
                st = OOM_ENOMEM_HOST;
            else {
                s->streams = ns;
                s->capstreams = cap;
            }
        }
        if (st == OOM_OK)
            s->nstreams++;
    }
    if (st == OOM_OK) {
        s->streams[i] = (sim_stream){.live = true};
        *out = (devstream)i;
    }
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

static oom_status sim_stream_destroy(void *impl, devstream id)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    sim_stream *x = stream_at(s, id);
    if (x) {
        /* Its held work completes first; its events stay queryable (complete). */
        x->completed = x->queued;
        for (size_t i = 0; i < s->nevents; i++)
            if (s->events[i].live && s->events[i].stream == id)
                s->events[i].ticket = 0;
        x->live = false;
    }
    pthread_mutex_unlock(&s->host_mu);
    return x ? OOM_OK : OOM_EINVAL;
}

static oom_status sim_stream_hold(void *impl, devstream id)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    sim_stream *x = stream_at(s, id);
    if (x)
        x->queued++;
    pthread_mutex_unlock(&s->host_mu);
    return x ? OOM_OK : OOM_EINVAL;
}

static oom_status sim_stream_complete(void *impl, devstream id, uint64_t n)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    sim_stream *x = stream_at(s, id);
    if (x)
        x->completed = n >= x->queued - x->completed ? x->queued : x->completed + n;
    pthread_mutex_unlock(&s->host_mu);
    return x ? OOM_OK : OOM_EINVAL;
}

static oom_status sim_stream_synchronize(void *impl, devstream id)
{
    return sim_stream_complete(impl, id, UINT64_MAX);
}

static oom_status sim_event_record(void *impl, devstream id, devevent *out)
{
    sim_dev *s = impl;
    oom_status st = OOM_OK;
    pthread_mutex_lock(&s->host_mu);
    sim_stream *x = stream_at(s, id);
    size_t i = 0;
    if (!x) {
        st = OOM_EINVAL;
    } else {
        while (i < s->nevents && s->events[i].live)
            i++;
        if (i == s->nevents) {
            if (s->nevents == s->capevents) {
                size_t cap = s->capevents ? s->capevents * 2 : 16;
                sim_event *ne = realloc(s->events, cap * sizeof *ne);
                if (!ne)
                    st = OOM_ENOMEM_HOST;
                else {
                    s->events = ne;
                    s->capevents = cap;
                }
            }
            if (st == OOM_OK)
                s->nevents++;
        }
    }
    if (st == OOM_OK) {
        s->events[i] = (sim_event){true, id, x->queued};
        *out = (devevent)i + 1;
    }
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

static oom_status sim_event_query(void *impl, devevent e, bool *done)
{
    sim_dev *s = impl;
    oom_status st = OOM_EINVAL;
    pthread_mutex_lock(&s->host_mu);
    if (e - 1 < s->nevents && s->events[e - 1].live) {
        const sim_event *ev = &s->events[e - 1];
        const sim_stream *x = stream_at(s, ev->stream);
        *done = !x || x->completed >= ev->ticket;
        st = OOM_OK;
    }
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

static oom_status sim_event_destroy(void *impl, devevent e)
{
    sim_dev *s = impl;
    oom_status st = OOM_EINVAL;
    pthread_mutex_lock(&s->host_mu);
    if (e - 1 < s->nevents && s->events[e - 1].live) {
        s->events[e - 1].live = false;
        st = OOM_OK;
    }
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

static oom_status sim_copy_htod(void *impl, devptr dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return OOM_OK;
    unsigned char *d;
    oom_status st = sim_span(impl, dst, bytes, &d);
    if (st == OOM_OK && d)
        memcpy(d, src, bytes);
    return st;
}

static oom_status sim_stream_wait_event(void *impl, devstream id, devevent e)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    oom_status st = stream_at(s, id) && e - 1 < s->nevents && s->events[e - 1].live ? OOM_OK : OOM_EINVAL;
    pthread_mutex_unlock(&s->host_mu);
    return st;
}

static oom_status sim_copy_htod_async(void *impl, devptr dst, const void *src, size_t bytes, devstream id)
{
    sim_dev *s = impl;
    pthread_mutex_lock(&s->host_mu);
    bool known = stream_at(s, id) != NULL;
    pthread_mutex_unlock(&s->host_mu);
    return known ? sim_copy_htod(impl, dst, src, bytes) : OOM_EINVAL;
}

static oom_status sim_copy_dtoh(void *impl, void *dst, devptr src, size_t bytes)
{
    if (bytes == 0)
        return OOM_OK;
    unsigned char *h;
    oom_status st = sim_span(impl, src, bytes, &h);
    if (st == OOM_OK && h)
        memcpy(dst, h, bytes);
    return st;
}

static oom_status sim_copy_dtod(void *impl, devptr dst, devptr src, size_t bytes)
{
    if (bytes == 0)
        return OOM_OK;
    unsigned char *d, *h;
    oom_status st = sim_span(impl, dst, bytes, &d);
    if (st == OOM_OK)
        st = sim_span(impl, src, bytes, &h);
    if (st == OOM_OK && d && h)
        memmove(d, h, bytes);
    return st;
}

static oom_status sim_fill(void *impl, devptr dst, int byte, size_t bytes)
{
    if (bytes == 0)
        return OOM_OK;
    unsigned char *d;
    oom_status st = sim_span(impl, dst, bytes, &d);
    if (st == OOM_OK && d)
        memset(d, (unsigned char)byte, bytes);
    return st;
}

static void *sim_host_view(void *impl, devptr p)
{
    unsigned char *h;
    return sim_span(impl, p, 1, &h) == OOM_OK ? h : NULL;
}

static void sim_addr_hint(void *impl, devptr addr, size_t bytes)
{
    sim_dev *s = impl;
    s->hint = addr;
    s->hint_bytes = bytes;
}

static void sim_note_kernel_launch(void *impl)
{
    sim_dev *s = impl;
    if (s->launched)
        return;
    s->launched = true;
    if (s->nccl) { /* the driver's own memory at the first launch, carved below the regions */
        devptr at;
        if ((s->heap_ready || heap_init(s)) && region_carve(s, SIM_NCCL_LAUNCH, &at))
            region_add(s, at, SIM_NCCL_LAUNCH, 0, true);
        return;
    }
    for (size_t i = 0; i < s->nregions; i++) {
        sim_region *g = &s->regions[i];
        if (g->seq == s->launch_seq && g->held) {
            g->held = 0; /* the reservation is freed; the region goes with it unless a segment lives there */
            region_release_segment(s, g->base);
            break;
        }
    }
}

static void sim_note_nccl(void *impl, device_nccl_event ev)
{
    sim_dev *s = impl;
    if (ev == DEVICE_NCCL_INIT) {
        if (!s->heap_ready)
            s->nccl = true;
        return;
    }
    if (!s->nccl || s->nccl_collective)
        return;
    s->nccl_collective = true;
    if (!s->heap_ready && !heap_init(s))
        return;
    for (size_t i = 0; i < s->nregions; i++) {
        sim_region *g = &s->regions[i];
        if (g->seq == s->launch_seq && g->held) {
            g->held = 0; /* freed; the empty region stays until a segment in it is freed */
            g->live--;
            break;
        }
    }
    devptr at; /* a region whose bottom the driver holds, its top free */
    if (region_carve(s, SIM_REGION, &at))
        region_add(s, at, SIM_REGION, SIM_NCCL_COLL_HELD, false);
}

static void sim_close(void *impl)
{
    sim_dev *s = impl;
    if (!s)
        return;
    for (size_t i = 0; i < s->nranges; i++) {
        if (s->ranges[i].backing)
            munmap(s->ranges[i].backing, s->ranges[i].size);
        free(s->ranges[i].pages);
    }
    for (size_t i = 0; i < s->nhost; i++)
        if (!s->host[i].registered) /* registered memory belongs to the caller */
            free(s->host[i].p);
    free(s->ranges);
    free(s->regions);
    free(s->host);
    free(s->streams);
    free(s->events);
    pthread_mutex_destroy(&s->host_mu);
    free(s);
}

static const device_ops sim_ops = {
    .name = "sim",
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .mem_info = sim_mem_info,
    .va_reserve = sim_va_reserve,
    .va_release = sim_va_release,
    .va_map = sim_va_map,
    .va_unmap = sim_va_unmap,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .host_register = sim_host_register,
    .host_unregister = sim_host_unregister,
    .host_info = sim_host_info,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_hold = sim_stream_hold,
    .stream_complete = sim_stream_complete,
    .stream_synchronize = sim_stream_synchronize,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_destroy = sim_event_destroy,
    .stream_wait_event = sim_stream_wait_event,
    .copy_htod_async = sim_copy_htod_async,
    .copy_htod = sim_copy_htod,
    .copy_dtoh = sim_copy_dtoh,
    .copy_dtod = sim_copy_dtod,
    .fill = sim_fill,
    .host_view = sim_host_view,
    .addr_hint = sim_addr_hint,
    .note_kernel_launch = sim_note_kernel_launch,
    .close = sim_close,
    .processes = sim_processes,
    .external = sim_external,
    .note_nccl = sim_note_nccl,
};

oom_status device_sim_open(const device_options *opt, device *dev)
{
    if (!dev)
        return OOM_EINVAL;
    sim_dev *s = calloc(1, sizeof *s);
    if (!s)
        return OOM_ENOMEM_HOST;
    s->capacity = (opt && opt->sim_capacity_bytes) ? opt->sim_capacity_bytes : DEVICE_SIM_DEFAULT_CAPACITY;
    s->dry_run = opt && opt->sim_dry_run;
    if (opt && opt->sim_context_bytes && opt->sim_context_bytes < s->capacity)
        s->context = s->in_use = s->context_nvml = opt->sim_context_bytes;
    else if (s->capacity == DEVICE_SIM_DEFAULT_CAPACITY) {
        s->context = s->in_use = DEVICE_SIM_CONTEXT_BYTES;
        s->context_nvml = DEVICE_SIM_CONTEXT_NVML_BYTES;
    }
    s->pinned_limit = (opt && opt->sim_pinned_bytes) ? opt->sim_pinned_bytes : device_host_ram_bytes();
    s->streams = calloc(4, sizeof *s->streams);
    if (!s->streams || pthread_mutex_init(&s->host_mu, NULL) != 0) {
        free(s->streams);
        free(s);
        return OOM_ENOMEM_HOST;
    }
    s->capstreams = 4;
    s->nstreams = 1;
    s->streams[0].live = true; /* the default stream */
    dev->ops = &sim_ops;
    dev->impl = s;
    dev->kind = DEVICE_SIM;
    snprintf(dev->name, sizeof dev->name, "sim");
    dev->total_bytes = s->capacity;
    dev->sm_count = 132; /* an H100 SXM */
    dev->max_threads_per_sm = 2048;
    dev->warp_size = 32;
    return OOM_OK;
}
