/* device_sim.c - the simulated device: a fixed capacity, driver-like address placement, host RAM backing.
 *
 * Address ranges (segments from mem_alloc, reservations from va_reserve) live in one array sorted by base.
 * Every range starts at a DEVICE_VMM_GRANULARITY boundary and spans a multiple of it; placement takes the
 * lowest free gap at or above SIM_VA_BASE (like the driver), unless an addr_hint names a free range.
 * Physical memory is charged by mem_alloc (its bytes) and va_map (its bytes), never by va_reserve.
 * Backing: segments are anonymous zero-filled mappings; a reservation is one PROT_NONE mapping whose pages
 * va_map makes read-write and va_unmap discards (MADV_DONTNEED) and makes PROT_NONE again, so stale bytes
 * never survive an unmap and a stray access faults. Dry-run keeps the same bookkeeping without backing.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, madvise */

#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GRAN DEVICE_VMM_GRANULARITY
#define SIM_VA_BASE ((devptr)0x7f0000000000ULL)
#define SIM_VA_LIMIT (SIM_VA_BASE + ((devptr)1 << 47)) /* 128 TiB of device address space */
#define SIM_HOST_ALIGN ((size_t)4096)
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

typedef struct sim_dev {
    size_t capacity;
    size_t in_use; /* physical bytes charged */
    bool dry_run;
    devptr hint; /* 0 = none */
    sim_range *ranges;
    size_t nranges, capranges;
    void **host; /* host_alloc blocks, so that host_free can reject unknown pointers */
    size_t nhost, caphost;
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

/* Choose a base for size bytes of address space: the hint when it is usable and free, else the lowest gap
 * at or above SIM_VA_BASE. The hint is consumed either way. */
static bool place(sim_dev *s, size_t size, devptr *out)
{
    devptr hint = s->hint;
    s->hint = 0;
    if (hint && hint % GRAN == 0 && hint <= UINT64_MAX - size && span_is_free(s, hint, size)) {
        *out = hint;
        return true;
    }
    devptr cursor = SIM_VA_BASE;
    for (size_t i = 0; i < s->nranges; i++) {
        const sim_range *r = &s->ranges[i];
        devptr gap_end = r->base < SIM_VA_LIMIT ? r->base : SIM_VA_LIMIT;
        if (gap_end > cursor && gap_end - cursor >= size) {
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
    if (!place(s, size, &base))
        return OOM_ENOMEM_DEVICE;
    sim_range r = {.base = base, .size = size, .bytes = bytes, .kind = RANGE_SEGMENT};
    if (!s->dry_run) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return OOM_ENOMEM_HOST;
        r.backing = m;
    }
    if (!insert_range(s, &r)) {
        if (r.backing)
            munmap(r.backing, size);
        return OOM_ENOMEM_HOST;
    }
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
    if (!r.pages)
        return OOM_ENOMEM_HOST;
    if (!s->dry_run) {
        void *m = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            free(r.pages);
            return OOM_ENOMEM_HOST;
        }
        r.backing = m;
    }
    if (!insert_range(s, &r)) {
        if (r.backing)
            munmap(r.backing, bytes);
        free(r.pages);
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
    if (r->backing && mprotect(r->backing + g0 * GRAN, bytes, PROT_READ | PROT_WRITE) != 0)
        return OOM_ENOMEM_HOST;
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
        if (madvise(h, bytes, MADV_DONTNEED) != 0 || mprotect(h, bytes, PROT_NONE) != 0)
            return OOM_ENOMEM_HOST;
    }
    memset(&r->pages[g0], 0, ng * sizeof *r->pages);
    r->mapped_granules -= ng;
    s->in_use -= bytes;
    return OOM_OK;
}

static oom_status sim_host_alloc(void *impl, size_t bytes, void **out)
{
    sim_dev *s = impl;
    if (bytes == 0)
        return OOM_EINVAL;
    if (bytes > SIZE_MAX - (SIM_HOST_ALIGN - 1))
        return OOM_ENOMEM_HOST;
    if (s->nhost == s->caphost) {
        size_t cap = s->caphost ? s->caphost * 2 : 16;
        void **nh = realloc(s->host, cap * sizeof *nh);
        if (!nh)
            return OOM_ENOMEM_HOST;
        s->host = nh;
        s->caphost = cap;
    }
    /* aligned_alloc wants a size that is a multiple of the alignment. */
    void *p = aligned_alloc(SIM_HOST_ALIGN, (bytes + SIM_HOST_ALIGN - 1) / SIM_HOST_ALIGN * SIM_HOST_ALIGN);
    if (!p)
        return OOM_ENOMEM_HOST;
    s->host[s->nhost++] = p;
    *out = p;
    return OOM_OK;
}

static oom_status sim_host_free(void *impl, void *p)
{
    sim_dev *s = impl;
    if (!p)
        return OOM_OK; /* like cudaFreeHost(NULL) */
    for (size_t i = s->nhost; i-- > 0;) {
        if (s->host[i] == p) {
            free(p);
            s->host[i] = s->host[--s->nhost];
            return OOM_OK;
        }
    }
    return OOM_EINVAL;
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

static void sim_addr_hint(void *impl, devptr addr)
{
    sim_dev *s = impl;
    s->hint = addr;
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
        free(s->host[i]);
    free(s->ranges);
    free(s->host);
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
    .copy_htod = sim_copy_htod,
    .copy_dtoh = sim_copy_dtoh,
    .copy_dtod = sim_copy_dtod,
    .fill = sim_fill,
    .host_view = sim_host_view,
    .addr_hint = sim_addr_hint,
    .close = sim_close,
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
    dev->ops = &sim_ops;
    dev->impl = s;
    dev->kind = DEVICE_SIM;
    snprintf(dev->name, sizeof dev->name, "sim");
    dev->total_bytes = s->capacity;
    return OOM_OK;
}
