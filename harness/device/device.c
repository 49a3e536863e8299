/* device.c - backend selection, the op wrappers and fault injection (see device.h). */
#include "device/device.h"
#include "device/devcomm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool device_cuda_built(void)
{
#ifdef OOM_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

#ifndef OOM_HAVE_CUDA
/* Stubs for a build without nvcc: the cuda backend is simply absent. */
oom_status device_cuda_open(const device_options *opt, device *dev)
{
    (void)opt;
    (void)dev;
    return OOM_ENODEV;
}

bool device_cuda_visible(void) { return false; }
bool device_cuda_initialised(void) { return false; }
oom_status device_cuda_props(device_cuda_info *out)
{
    (void)out;
    return OOM_ENODEV;
}
int device_cuda_count(void) { return 0; }
int device_cuda_ordinal(const device *dev)
{
    (void)dev;
    return -1;
}
/* devcomm.h's NCCL engine needs the cuda backend */
oom_status devnccl_init(device *const *devs, int n, struct devnccl **out, size_t *external, char *why, size_t whycap)
{
    (void)devs, (void)n, (void)out, (void)external;
    snprintf(why, whycap, "NCCL: this build has no cuda backend");
    return OOM_EUNSUPPORTED;
}
oom_status devnccl_run(struct devnccl *c, devcomm_op op, const devptr *send, const devptr *recv, size_t count,
                       dtype dt, int root)
{
    (void)c, (void)op, (void)send, (void)recv, (void)count, (void)dt, (void)root;
    return OOM_EUNSUPPORTED;
}
void devnccl_free(struct devnccl *c) { (void)c; }
void device_cuda_make_current(device *dev) { (void)dev; }
oom_status device_cuda_copy_peer(device *dst, devptr d, device *src, devptr s, size_t bytes)
{
    (void)dst, (void)d, (void)src, (void)s, (void)bytes;
    return OOM_EUNSUPPORTED;
}
#endif

const device_cuda_info *device_cuda_probe(void)
{
    static device_cuda_info info;
    static bool probed;
    if (probed)
        return &info;
    probed = true;
    if (!device_cuda_built())
        return &info;
    if (device_cuda_initialised()) { /* asking here costs nothing more */
        device_cuda_props(&info);
        return &info;
    }
    int fd[2];
    if (pipe(fd) != 0)
        return &info;
    fflush(NULL); /* the child must not write this process's buffered output again */
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return &info;
    }
    if (pid == 0) { /* the child: initialise CUDA, answer, exit without running this process's atexit handlers */
        close(fd[0]);
        device_cuda_info got = {0};
        device_cuda_props(&got);
        ssize_t w = write(fd[1], &got, sizeof got);
        _exit(w == (ssize_t)sizeof got ? 0 : 1);
    }
    close(fd[1]);
    device_cuda_info got;
    size_t have = 0;
    while (have < sizeof got) {
        ssize_t r = read(fd[0], (char *)&got + have, sizeof got - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    close(fd[0]);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
        ;
    if (have == sizeof got && WIFEXITED(wst) && WEXITSTATUS(wst) == 0) {
        info = got;
        info.name[sizeof info.name - 1] = '\0';
    }
    return &info;
}

void device_make_current(device *dev)
{
    if (dev && dev->kind == DEVICE_CUDA)
        device_cuda_make_current(dev);
}

oom_status device_copy_peer(device *dst, devptr d, device *src, devptr s, size_t bytes)
{
    if (!dst || !src)
        return OOM_EINVAL;
    if (dst->kind != DEVICE_CUDA || src->kind != DEVICE_CUDA)
        return OOM_EUNSUPPORTED;
    return device_cuda_copy_peer(dst, d, src, s, bytes);
}

oom_status device_kind_parse(const char *s, device_kind *out)
{
    if (!s || !out)
        return OOM_EINVAL;
    if (strcmp(s, "auto") == 0)
        *out = DEVICE_AUTO;
    else if (strcmp(s, "sim") == 0)
        *out = DEVICE_SIM;
    else if (strcmp(s, "cuda") == 0)
        *out = DEVICE_CUDA;
    else
        return OOM_EINVAL;
    return OOM_OK;
}

const char *device_kind_str(device_kind k)
{
    switch (k) {
    case DEVICE_AUTO:
        return "auto";
    case DEVICE_SIM:
        return "sim";
    case DEVICE_CUDA:
        return "cuda";
    }
    return "unknown";
}

oom_status device_open(const device_options *opt, device **out)
{
    static const device_options defaults; /* zero: auto, default capacity */
    if (!out)
        return OOM_EINVAL;
    if (!opt)
        opt = &defaults;

    device_kind kind = opt->kind;
    switch (kind) {
    case DEVICE_AUTO:
        /* device_cuda_visible() is the first CUDA call, and only when cuda is built in. */
        kind = (device_cuda_built() && device_cuda_visible()) ? DEVICE_CUDA : DEVICE_SIM;
        break;
    case DEVICE_CUDA:
        if (!device_cuda_built() || !device_cuda_visible())
            return OOM_ENODEV;
        break;
    case DEVICE_SIM:
        break;
    default:
        return OOM_EINVAL;
    }

    device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return OOM_ENOMEM_HOST;
    dev->kind = kind;
    dev->layout_seed = kind == DEVICE_SIM ? opt->sim_layout_seed : 0;
    oom_status st = kind == DEVICE_CUDA ? device_cuda_open(opt, dev) : device_sim_open(opt, dev);
    if (st != OOM_OK) {
        free(dev);
        return st;
    }
    if ((kind == DEVICE_CUDA && !opt->cuda_real_order) || (kind == DEVICE_SIM && opt->sim_model_order)) {
        device_options so = {.kind = DEVICE_SIM, .sim_dry_run = true};
        st = device_open(&so, &dev->shadow);
        if (st != OOM_OK) {
            device_close(dev);
            return st;
        }
    }
    *out = dev;
    return OOM_OK;
}

void device_close(device *dev)
{
    if (!dev)
        return;
    if (dev->ops && dev->ops->close)
        dev->ops->close(dev->impl);
    device_close(dev->shadow);
    free(dev->ranges);
    free(dev);
}

/* ---- the shadow: sim's model of where the driver would have put each real range (device_order_key) ---- */

typedef struct device_range {
    devptr real, model;
    size_t bytes;
} device_range;

/* Index of the first range whose real base is > p. */
static size_t range_upper(const device *dev, devptr p)
{
    size_t lo = 0, hi = dev->nranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dev->ranges[mid].real <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void shadow_lose(device *dev, const char *what, oom_status st)
{
    if (!dev->shadow_lost)
        fprintf(stderr, "oomlab: sim's address model refused a %s the driver gave (%s); blocks are ordered by the "
                        "driver's addresses from here on, so counters may differ from sim's\n",
                what, oom_status_str(st));
    dev->shadow_lost = true;
}

/* A real range [real, real+bytes) now exists: give it its model address. alloc is mem_alloc or va_reserve. */
static void shadow_add(device *dev, devptr real, size_t bytes,
                       oom_status (*alloc)(device *, size_t, devptr *), const char *what)
{
    if (!dev->shadow || dev->shadow_lost)
        return;
    devptr model = 0;
    oom_status st = alloc(dev->shadow, bytes, &model);
    if (st == OOM_OK && dev->nranges == dev->capranges) {
        size_t cap = dev->capranges ? dev->capranges * 2 : 64;
        device_range *v = realloc(dev->ranges, cap * sizeof *v);
        if (!v)
            st = OOM_ENOMEM_HOST;
        else {
            dev->ranges = v;
            dev->capranges = cap;
        }
    }
    if (st != OOM_OK) {
        shadow_lose(dev, what, st);
        return;
    }
    size_t i = range_upper(dev, real);
    memmove(dev->ranges + i + 1, dev->ranges + i, (dev->nranges - i) * sizeof *dev->ranges);
    dev->ranges[i] = (device_range){.real = real, .model = model, .bytes = bytes};
    dev->nranges++;
}

/* The live range that starts at real, or NULL. */
static device_range *shadow_find(device *dev, devptr real)
{
    size_t i = range_upper(dev, real);
    return i > 0 && dev->ranges[i - 1].real == real ? &dev->ranges[i - 1] : NULL;
}

/* The real range at real is gone: release its model. release is mem_free or va_release. */
static void shadow_remove(device *dev, devptr real, oom_status (*release)(device *, devptr, size_t))
{
    device_range *r = dev->shadow ? shadow_find(dev, real) : NULL;
    if (!r)
        return;
    release(dev->shadow, r->model, r->bytes);
    size_t i = (size_t)(r - dev->ranges);
    memmove(dev->ranges + i, dev->ranges + i + 1, (dev->nranges - i - 1) * sizeof *dev->ranges);
    dev->nranges--;
}

/* The model's address of real p inside a reservation, for va_map/va_unmap; 0 when unknown. */
static devptr shadow_translate(const device *dev, devptr p)
{
    size_t i = dev->shadow ? range_upper(dev, p) : 0;
    if (i == 0 || p - dev->ranges[i - 1].real >= dev->ranges[i - 1].bytes)
        return 0;
    return dev->ranges[i - 1].model + (p - dev->ranges[i - 1].real);
}

/* splitmix64's finaliser: a seeded layout's order (device_order_key). */
static uint64_t layout_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#define LAYOUT_ADDR_BITS 47 /* sim's addresses lie below 2^47 (SIM_HEAP_TOP): the seeded order sits above them */

devptr device_order_key(const device *dev, devptr p)
{
    if (dev && dev->layout_seed && !dev->shadow && p < ((devptr)1 << LAYOUT_ADDR_BITS))
        return (layout_mix(dev->layout_seed ^ (p / DEVICE_VMM_GRANULARITY)) & 0xffff) << LAYOUT_ADDR_BITS | p;
    if (!dev || !dev->shadow || dev->shadow_lost)
        return p;
    devptr m = shadow_translate(dev, p);
    return m ? m : p;
}

bool device_orders_by_model(const device *dev) { return dev && dev->shadow && !dev->shadow_lost; }

void device_fault_arm(device *dev, uint64_t nth, bool persistent)
{
    if (!dev)
        return;
    /* nth counts from the next allocation; 0 disarms. */
    dev->fault_at = nth ? dev->alloc_calls + nth : 0;
    dev->fault_persistent = nth ? persistent : false;
}

void device_fault_plan_attach(device *dev, device_fault_plan *plan)
{
    if (dev)
        dev->plan = plan;
}

/* Count one device allocation and decide whether the injector fails it. */
static bool fault_fires(device *dev)
{
    if (dev->plan) {
        device_fault_plan *p = dev->plan;
        p->device_calls++;
        if (p->device_at && p->device_calls >= p->device_at) {
            p->device_fired++;
            return true;
        }
        return false;
    }
    dev->alloc_calls++;
    if (dev->fault_at == 0)
        return false;
    if (dev->alloc_calls == dev->fault_at || (dev->fault_persistent && dev->alloc_calls > dev->fault_at)) {
        dev->faults_fired++;
        return true;
    }
    return false;
}

oom_status device_mem_alloc(device *dev, size_t bytes, devptr *out)
{
    if (!dev || !out)
        return OOM_EINVAL;
    if (fault_fires(dev))
        return OOM_ENOMEM_DEVICE;
    oom_status st = dev->ops->mem_alloc(dev->impl, bytes, out);
    if (st == OOM_OK)
        shadow_add(dev, *out, bytes, device_mem_alloc, "segment");
    return st;
}

oom_status device_mem_free(device *dev, devptr p, size_t bytes)
{
    if (!dev)
        return OOM_EINVAL;
    oom_status st = dev->ops->mem_free(dev->impl, p, bytes);
    if (st == OOM_OK)
        shadow_remove(dev, p, device_mem_free);
    return st;
}

oom_status device_external_charge(device *dev, size_t bytes)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->external ? dev->ops->external(dev->impl, bytes, true) : OOM_OK;
}

void device_external_release(device *dev, size_t bytes)
{
    if (dev && dev->ops->external)
        (void)dev->ops->external(dev->impl, bytes, false);
}

oom_status device_processes(device *dev, device_proc *out, size_t cap, size_t *count)
{
    if (!dev || !count || (!out && cap))
        return OOM_EINVAL;
    *count = 0;
    if (!dev->ops->processes)
        return OOM_EUNSUPPORTED;
    return dev->ops->processes(dev->impl, out, cap, count);
}

oom_status device_mem_info(device *dev, size_t *free_bytes, size_t *total_bytes)
{
    if (!dev || !free_bytes || !total_bytes)
        return OOM_EINVAL;
    return dev->ops->mem_info(dev->impl, free_bytes, total_bytes);
}

oom_status device_va_reserve(device *dev, size_t bytes, devptr *out)
{
    if (!dev || !out)
        return OOM_EINVAL;
    oom_status st = dev->ops->va_reserve(dev->impl, bytes, out);
    if (st == OOM_OK)
        shadow_add(dev, *out, bytes, device_va_reserve, "reservation");
    return st;
}

oom_status device_va_release(device *dev, devptr p, size_t bytes)
{
    if (!dev)
        return OOM_EINVAL;
    oom_status st = dev->ops->va_release(dev->impl, p, bytes);
    if (st == OOM_OK)
        shadow_remove(dev, p, device_va_release);
    return st;
}

oom_status device_va_map(device *dev, devptr p, size_t bytes, size_t page_bytes)
{
    if (!dev)
        return OOM_EINVAL;
    if (fault_fires(dev))
        return OOM_ENOMEM_DEVICE;
    oom_status st = dev->ops->va_map(dev->impl, p, bytes, page_bytes);
    devptr m = st == OOM_OK && !dev->shadow_lost ? shadow_translate(dev, p) : 0;
    if (m) {
        oom_status ss = device_va_map(dev->shadow, m, bytes, page_bytes);
        if (ss != OOM_OK)
            shadow_lose(dev, "mapping", ss);
    }
    return st;
}

oom_status device_va_unmap(device *dev, devptr p, size_t bytes, size_t page_bytes)
{
    if (!dev)
        return OOM_EINVAL;
    oom_status st = dev->ops->va_unmap(dev->impl, p, bytes, page_bytes);
    devptr m = st == OOM_OK && !dev->shadow_lost ? shadow_translate(dev, p) : 0;
    if (m)
        device_va_unmap(dev->shadow, m, bytes, page_bytes);
    return st;
}

void device_pinned_cap_set(device *dev, size_t cap_bytes)
{
    if (dev)
        dev->pinned_cap = cap_bytes;
}

/* The pinned cap: would `bytes` more (whole pages) pass it? */
/* Whether bytes more would pass the pinned cap; the reason in the calling thread's last-error record when so. */
static bool pinned_cap_refuses(device *dev, size_t bytes)
{
    if (!dev->pinned_cap)
        return false;
    size_t used = 0, limit = 0;
    dev->ops->host_info(dev->impl, &used, &limit);
    size_t page = 4096;
    size_t charged = bytes > SIZE_MAX - (page - 1) ? SIZE_MAX : (bytes + page - 1) / page * page;
    if (used <= dev->pinned_cap && charged <= dev->pinned_cap - used)
        return false;
    OOM_ERROR(OOM_ENOMEM_PINNED, "pinning %zu bytes would pass the pinned memory cap of %zu bytes (%zu held)", bytes,
              dev->pinned_cap, used);
    return true;
}

/* Count one pinned host allocation in the device's plan and decide whether it fails. */
static bool host_fault_fires(device *dev)
{
    device_fault_plan *p = dev->plan;
    if (!p)
        return false;
    uint64_t n = __atomic_add_fetch(&p->host_calls, 1, __ATOMIC_SEQ_CST);
    if (p->host_at && n >= p->host_at) {
        __atomic_add_fetch(&p->host_fired, 1, __ATOMIC_SEQ_CST);
        return true;
    }
    return false;
}

oom_status device_host_alloc(device *dev, size_t bytes, void **out)
{
    if (!dev || !out)
        return OOM_EINVAL;
    if (bytes && host_fault_fires(dev))
        return OOM_ERROR(OOM_ENOMEM_PINNED, "pinned allocation of %zu bytes failed by fault injection", bytes),
               OOM_ENOMEM_PINNED;
    if (bytes && pinned_cap_refuses(dev, bytes))
        return OOM_ENOMEM_PINNED;
    return dev->ops->host_alloc(dev->impl, bytes, out);
}

oom_status device_host_free(device *dev, void *p)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->host_free(dev->impl, p);
}

oom_status device_stream_wait_event(device *dev, devstream s, devevent e)
{
    if (!dev || !e)
        return OOM_EINVAL;
    return dev->ops->stream_wait_event(dev->impl, s, e);
}

oom_status device_copy_htod_async(device *dev, devptr dst, const void *src, size_t bytes, devstream s)
{
    if (!dev || (!src && bytes))
        return OOM_EINVAL;
    return dev->ops->copy_htod_async(dev->impl, dst, src, bytes, s);
}

oom_status device_copy_htod(device *dev, devptr dst, const void *src, size_t bytes)
{
    if (!dev || (!src && bytes))
        return OOM_EINVAL;
    return dev->ops->copy_htod(dev->impl, dst, src, bytes);
}

oom_status device_copy_dtoh(device *dev, void *dst, devptr src, size_t bytes)
{
    if (!dev || (!dst && bytes))
        return OOM_EINVAL;
    return dev->ops->copy_dtoh(dev->impl, dst, src, bytes);
}

oom_status device_copy_dtod(device *dev, devptr dst, devptr src, size_t bytes)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->copy_dtod(dev->impl, dst, src, bytes);
}

oom_status device_fill(device *dev, devptr dst, int byte, size_t bytes)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->fill(dev->impl, dst, byte, bytes);
}

void *device_host_view(device *dev, devptr p)
{
    if (!dev)
        return NULL;
    return dev->ops->host_view(dev->impl, p);
}

void device_addr_hint(device *dev, devptr addr, size_t bytes)
{
    if (!dev)
        return;
    dev->ops->addr_hint(dev->impl, addr, bytes);
}

oom_status device_host_register(device *dev, void *p, size_t bytes)
{
    if (!dev || !p || bytes == 0)
        return OOM_EINVAL;
    if (host_fault_fires(dev))
        return OOM_ERROR(OOM_ENOMEM_PINNED, "registering %zu bytes failed by fault injection", bytes),
               OOM_ENOMEM_PINNED;
    if (pinned_cap_refuses(dev, bytes))
        return OOM_ENOMEM_PINNED;
    return dev->ops->host_register(dev->impl, p, bytes);
}

oom_status device_host_unregister(device *dev, void *p)
{
    if (!dev || !p)
        return OOM_EINVAL;
    return dev->ops->host_unregister(dev->impl, p);
}

void device_host_info(device *dev, size_t *pinned_bytes, size_t *limit_bytes)
{
    size_t pb = 0, lb = 0;
    if (dev)
        dev->ops->host_info(dev->impl, &pb, &lb);
    if (pinned_bytes)
        *pinned_bytes = pb;
    if (limit_bytes)
        *limit_bytes = lb;
}

oom_status device_stream_create(device *dev, devstream *out)
{
    if (!dev || !out)
        return OOM_EINVAL;
    return dev->ops->stream_create(dev->impl, out);
}

oom_status device_stream_destroy(device *dev, devstream s)
{
    if (!dev || s == 0)
        return OOM_EINVAL; /* the default stream is never destroyed */
    return dev->ops->stream_destroy(dev->impl, s);
}

oom_status device_stream_hold(device *dev, devstream s)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->stream_hold(dev->impl, s);
}

oom_status device_stream_complete(device *dev, devstream s, uint64_t n)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->stream_complete(dev->impl, s, n);
}

oom_status device_stream_synchronize(device *dev, devstream s)
{
    if (!dev)
        return OOM_EINVAL;
    return dev->ops->stream_synchronize(dev->impl, s);
}

oom_status device_event_record(device *dev, devstream s, devevent *out)
{
    if (!dev || !out)
        return OOM_EINVAL;
    return dev->ops->event_record(dev->impl, s, out);
}

oom_status device_event_query(device *dev, devevent e, bool *done)
{
    if (!dev || !done || e == 0)
        return OOM_EINVAL;
    return dev->ops->event_query(dev->impl, e, done);
}

oom_status device_event_destroy(device *dev, devevent e)
{
    if (!dev || e == 0)
        return OOM_EINVAL;
    return dev->ops->event_destroy(dev->impl, e);
}

/* memory.max of this process's cgroup (v2), or 0 when there is none or it reads "max". */
static size_t cgroup_memory_max(void)
{
    char path[512] = "/sys/fs/cgroup/memory.max", line[512];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) { /* "0::/some/group" on cgroup v2 */
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "0::", 3) == 0) {
                line[strcspn(line, "\n")] = '\0';
                if (strcmp(line + 3, "/") != 0)
                    snprintf(path, sizeof path, "/sys/fs/cgroup%.400s/memory.max", line + 3);
                break;
            }
        }
        fclose(f);
    }
    f = fopen(path, "r");
    if (!f)
        f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    int n = fscanf(f, "%llu", &v);
    fclose(f);
    return n == 1 ? (size_t)v : 0;
}

size_t device_host_ram_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t ram = (pages > 0 && psz > 0) ? (size_t)pages * (size_t)psz : 0;
    size_t cg = cgroup_memory_max();
    if (cg && (ram == 0 || cg < ram))
        ram = cg;
    return ram;
}

void device_note_kernel_launch(device *dev)
{
    if (!dev)
        return;
    dev->ops->note_kernel_launch(dev->impl);
    device_note_kernel_launch(dev->shadow);
}

void device_note_nccl(device *dev, device_nccl_event ev)
{
    if (!dev)
        return;
    if (dev->ops->note_nccl)
        dev->ops->note_nccl(dev->impl, ev);
    device_note_nccl(dev->shadow, ev);
}
