/* test_device.c - the device backends.
 *
 * Suite "device": conformance tests run on the backend under test (sim, or cuda with OOMLAB_TEST_BACKEND=cuda).
 * Suite "device_sim": the simulator's exact behaviour (placement, capacity, hints, dry-run, backing); always sim.
 * Every test opens its device itself, so no CUDA call happens before Criterion forks.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "core/fileio.h"
#include "testutil.h"

#define SIM_BASE ((devptr)0x7f0000000000ULL)    /* below the sim's cudaMalloc heap: never handed out */
#define SIM_VMM_BASE ((devptr)0x300000000ULL) /* the sim's first reservation address */
#define PAGE DEVICE_VMM_GRANULARITY

static bool on_sim(void) { return test_backend() == DEVICE_SIM; }

static device *open_conformance(void)
{
    device *dev = test_device_open(0);
    cr_assert_not_null(dev, "cannot open the %s backend", device_kind_str(test_backend()));
    cr_assert_eq(dev->kind, test_backend());
    return dev;
}

static device *open_sim(size_t capacity, bool dry_run)
{
    device_options o = {.kind = DEVICE_SIM, .sim_capacity_bytes = capacity, .sim_dry_run = dry_run};
    device *dev = NULL;
    cr_assert_eq(device_open(&o, &dev), OOM_OK);
    cr_assert_not_null(dev);
    return dev;
}

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 131u + seed) ^ (i >> 9));
}

/* ---- conformance (backend under test) ---------------------------------------------------------------- */

Test(device, alloc_free_distinct_aligned)
{
    device *dev = open_conformance();
    const size_t sizes[3] = {2 * MiB, 4 * MiB, 6 * MiB};
    devptr p[3];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(device_mem_alloc(dev, sizes[i], &p[i]), OOM_OK);
        cr_assert_neq(p[i], 0);
        cr_assert_eq(p[i] % DEVICE_VMM_GRANULARITY, 0, "address %#llx not aligned", (unsigned long long)p[i]);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (i != j) /* disjoint ranges */
                cr_assert(p[i] + sizes[i] <= p[j] || p[j] + sizes[j] <= p[i]);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(device_mem_free(dev, p[i], sizes[i]), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 0, &p[0]), OOM_EINVAL);
    device_close(dev);
}

Test(device, mem_info_accounting)
{
    device *dev = open_conformance();
    size_t free0, total0, free1, total1, free2, total2;
    cr_assert_eq(device_mem_info(dev, &free0, &total0), OOM_OK);
    cr_assert_gt(total0, 0);
    cr_assert_leq(free0, total0);
    devptr p;
    cr_assert_eq(device_mem_alloc(dev, 64 * MiB, &p), OOM_OK);
    cr_assert_eq(device_mem_info(dev, &free1, &total1), OOM_OK);
    cr_assert_eq(total1, total0);
    cr_assert_lt(free1, free0);
    cr_assert_eq(device_mem_free(dev, p, 64 * MiB), OOM_OK);
    cr_assert_eq(device_mem_info(dev, &free2, &total2), OOM_OK);
    if (on_sim()) {
        cr_assert_eq(total0, DEVICE_SIM_DEFAULT_CAPACITY);
        cr_assert_eq(dev->total_bytes, DEVICE_SIM_DEFAULT_CAPACITY);
        cr_assert_eq(free0, DEVICE_SIM_DEFAULT_CAPACITY - DEVICE_SIM_CONTEXT_BYTES, "the H100's context is not free");
        cr_assert_eq(free0 - free1, 64 * MiB);
        cr_assert_eq(free2, free0);
    } else {
        cr_assert_gt(free2, free1);
    }
    device_close(dev);
}

Test(device, copy_round_trip)
{
    device *dev = open_conformance();
    const size_t n = 4 * MiB + 12345;
    unsigned char *src = malloc(n), *dst = malloc(n), *dst2 = malloc(n);
    cr_assert(src && dst && dst2);
    fill_pattern(src, n, 7);
    devptr a, b;
    cr_assert_eq(device_mem_alloc(dev, n, &a), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, n, &b), OOM_OK);
    cr_assert_eq(device_copy_htod(dev, a, src, n), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, dst, a, n), OOM_OK);
    cr_assert_eq(memcmp(src, dst, n), 0);
    cr_assert_eq(device_copy_dtod(dev, b, a, n), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, dst2, b, n), OOM_OK);
    cr_assert_eq(memcmp(src, dst2, n), 0);
    /* an interior sub-range */
    unsigned char small[100];
    cr_assert_eq(device_copy_dtoh(dev, small, a + 3 * MiB, sizeof small), OOM_OK);
    cr_assert_eq(memcmp(small, src + 3 * MiB, sizeof small), 0);
    cr_assert_eq(device_mem_free(dev, a, n), OOM_OK);
    cr_assert_eq(device_mem_free(dev, b, n), OOM_OK);
    free(src);
    free(dst);
    free(dst2);
    device_close(dev);
}

Test(device, fill)
{
    device *dev = open_conformance();
    const size_t n = 2 * MiB;
    devptr p;
    cr_assert_eq(device_mem_alloc(dev, n, &p), OOM_OK);
    cr_assert_eq(device_fill(dev, p, 0xAB, n), OOM_OK);
    cr_assert_eq(device_fill(dev, p + 4096, 0x00, 4096), OOM_OK);
    unsigned char *h = malloc(n);
    cr_assert_not_null(h);
    cr_assert_eq(device_copy_dtoh(dev, h, p, n), OOM_OK);
    for (size_t i = 0; i < n; i++) {
        unsigned char want = (i >= 4096 && i < 8192) ? 0x00 : 0xAB;
        cr_assert_eq(h[i], want, "byte %zu is %#x, expected %#x", i, h[i], want);
    }
    free(h);
    cr_assert_eq(device_mem_free(dev, p, n), OOM_OK);
    device_close(dev);
}

Test(device, vmm_reserve_map_copy_unmap_release)
{
    device *dev = open_conformance();
    size_t f0, f1, f2, t;
    cr_assert_eq(device_mem_info(dev, &f0, &t), OOM_OK);
    devptr va;
    cr_assert_eq(device_va_reserve(dev, 4 * PAGE, &va), OOM_OK);
    cr_assert_neq(va, 0);
    cr_assert_eq(va % PAGE, 0);
    if (on_sim()) { /* a reservation holds no physical memory */
        cr_assert_eq(device_mem_info(dev, &f1, &t), OOM_OK);
        cr_assert_eq(f1, f0);
    }
    cr_assert_eq(device_va_map(dev, va, 2 * PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_mem_info(dev, &f1, &t), OOM_OK);
    if (on_sim())
        cr_assert_eq(f0 - f1, 2 * PAGE);
    else
        cr_assert_lt(f1, f0);

    /* one copy across the page boundary, and back */
    const size_t n = 2 * PAGE;
    unsigned char *src = malloc(n), *dst = malloc(n);
    cr_assert(src && dst);
    fill_pattern(src, n, 99);
    cr_assert_eq(device_copy_htod(dev, va, src, n), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, dst, va, n), OOM_OK);
    cr_assert_eq(memcmp(src, dst, n), 0);
    cr_assert_eq(device_fill(dev, va + PAGE - 8, 0x11, 16), OOM_OK);
    unsigned char mid[16];
    cr_assert_eq(device_copy_dtoh(dev, mid, va + PAGE - 8, 16), OOM_OK);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(mid[i], 0x11);

    cr_assert_eq(device_va_unmap(dev, va, 2 * PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_mem_info(dev, &f2, &t), OOM_OK);
    if (on_sim())
        cr_assert_eq(f2, f0);
    else
        cr_assert_gt(f2, f1);
    cr_assert_eq(device_va_release(dev, va, 4 * PAGE), OOM_OK);
    free(src);
    free(dst);
    device_close(dev);
}

Test(device, huge_request_is_device_oom)
{
    device *dev = open_conformance();
    const size_t pib = (size_t)1 << 50;
    devptr p = 0;
    cr_assert_eq(device_mem_alloc(dev, pib, &p), OOM_ENOMEM_DEVICE);
    cr_assert_eq(p, 0, "out-parameter written on failure");
    /* the failure leaves no sticky state behind */
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &p), OOM_OK);
    cr_assert_eq(device_mem_free(dev, p, 2 * MiB), OOM_OK);
    device_close(dev);
}

Test(device, fault_injection)
{
    device *dev = open_conformance();
    devptr a, b, c;
    device_fault_arm(dev, 2, false);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &a), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &b), OOM_ENOMEM_DEVICE);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &c), OOM_OK);
    cr_assert_eq(dev->alloc_calls, 3);
    cr_assert_eq(dev->faults_fired, 1);

    /* persistent: every allocation from the first on fails, va_map included */
    devptr va;
    cr_assert_eq(device_va_reserve(dev, 2 * PAGE, &va), OOM_OK); /* not an allocation */
    device_fault_arm(dev, 1, true);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &b), OOM_ENOMEM_DEVICE);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &b), OOM_ENOMEM_DEVICE);
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_ENOMEM_DEVICE);
    cr_assert_eq(dev->alloc_calls, 6);
    cr_assert_eq(dev->faults_fired, 4);

    /* disarmed: allocations work again, and an injected failure held nothing */
    device_fault_arm(dev, 0, false);
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &b), OOM_OK);
    cr_assert_eq(dev->faults_fired, 4);
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_va_release(dev, va, 2 * PAGE), OOM_OK);
    cr_assert_eq(device_mem_free(dev, a, 2 * MiB), OOM_OK);
    cr_assert_eq(device_mem_free(dev, b, 2 * MiB), OOM_OK);
    cr_assert_eq(device_mem_free(dev, c, 2 * MiB), OOM_OK);
    device_close(dev);
}

Test(device, host_alloc_free)
{
    device *dev = open_conformance();
    size_t f0, f1, t;
    cr_assert_eq(device_mem_info(dev, &f0, &t), OOM_OK);
    void *h = NULL;
    const size_t n = MiB + 3;
    cr_assert_eq(device_host_alloc(dev, n, &h), OOM_OK);
    cr_assert_not_null(h);
    fill_pattern(h, n, 3);
    if (on_sim()) { /* pinned host memory is not device memory */
        cr_assert_eq(device_mem_info(dev, &f1, &t), OOM_OK);
        cr_assert_eq(f1, f0);
    }
    devptr p;
    unsigned char *back = malloc(n);
    cr_assert_not_null(back);
    cr_assert_eq(device_mem_alloc(dev, n, &p), OOM_OK);
    cr_assert_eq(device_copy_htod(dev, p, h, n), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, back, p, n), OOM_OK);
    cr_assert_eq(memcmp(back, h, n), 0);
    cr_assert_eq(device_mem_free(dev, p, n), OOM_OK);
    cr_assert_eq(device_host_free(dev, h), OOM_OK);
    cr_assert_eq(device_host_free(dev, NULL), OOM_OK);
    free(back);
    device_close(dev);
}

Test(device, invalid_requests_are_einval)
{
    device *dev = open_conformance();
    devptr p, va;
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &p), OOM_OK);
    cr_assert_eq(device_mem_free(dev, p + PAGE * 64, 2 * MiB), OOM_EINVAL); /* unknown address */
    cr_assert_eq(device_mem_free(dev, p, 4 * MiB), OOM_EINVAL);            /* wrong size */
    cr_assert_eq(device_mem_free(dev, p, 2 * MiB), OOM_OK);
    cr_assert_eq(device_mem_free(dev, p, 2 * MiB), OOM_EINVAL); /* double free */

    cr_assert_eq(device_va_reserve(dev, 4 * PAGE, &va), OOM_OK);
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_EINVAL); /* never mapped */
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_EINVAL);         /* already mapped */
    cr_assert_eq(device_va_map(dev, va, 2 * PAGE, PAGE), OOM_EINVAL);     /* overlaps a mapped page */
    cr_assert_eq(device_va_map(dev, va + 3 * PAGE, 2 * PAGE, PAGE), OOM_EINVAL); /* past the end */
    cr_assert_eq(device_va_release(dev, va, 4 * PAGE), OOM_EINVAL);       /* pages still mapped */
    cr_assert_eq(device_va_release(dev, va, 2 * PAGE), OOM_EINVAL);       /* wrong size */
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_EINVAL); /* double unmap */
    cr_assert_eq(device_va_release(dev, va, 4 * PAGE), OOM_OK);
    cr_assert_eq(device_va_release(dev, va, 4 * PAGE), OOM_EINVAL); /* double release */

    int on_stack;
    cr_assert_eq(device_host_free(dev, &on_stack), OOM_EINVAL);
    device_close(dev);
}

Test(device, host_register_unregister)
{
    device *dev = open_conformance();
    const size_t n = 64 * KiB;
    unsigned char *buf = aligned_alloc(4096, n);
    cr_assert_not_null(buf);
    size_t pinned, limit;
    cr_assert_eq(device_host_register(dev, buf, n), OOM_OK);
    device_host_info(dev, &pinned, &limit);
    cr_assert_eq(pinned, n);
    cr_assert_eq(device_host_register(dev, buf + 4096, 4096), OOM_EINVAL); /* already registered */
    cr_assert_eq(device_host_free(dev, buf), OOM_EINVAL);                 /* not cudaHostAlloc'd */
    fill_pattern(buf, n, 5);
    cr_assert_eq(device_host_unregister(dev, buf), OOM_OK);
    cr_assert_eq(device_host_unregister(dev, buf), OOM_EINVAL);
    device_host_info(dev, &pinned, &limit);
    cr_assert_eq(pinned, 0);
    cr_assert_eq(device_host_register(dev, NULL, n), OOM_EINVAL);
    cr_assert_eq(device_host_register(dev, buf, 0), OOM_EINVAL);
    free(buf);
    device_close(dev);
}

/* Held work and events: an event is complete once the work queued before it has completed. */
Test(device, streams_events_and_held_work)
{
    device *dev = open_conformance();
    devevent e0, e1, e2;
    bool done = false;
    cr_assert_eq(device_event_record(dev, 0, &e0), OOM_OK);
    cr_assert_eq(device_stream_synchronize(dev, 0), OOM_OK);
    cr_assert_eq(device_event_query(dev, e0, &done), OOM_OK);
    cr_assert(done);

    devstream s;
    cr_assert_eq(device_stream_create(dev, &s), OOM_OK);
    cr_assert_neq(s, 0);
    cr_assert_eq(device_stream_hold(dev, s), OOM_OK);
    cr_assert_eq(device_event_record(dev, s, &e1), OOM_OK);
    cr_assert_eq(device_stream_hold(dev, s), OOM_OK);
    cr_assert_eq(device_event_record(dev, s, &e2), OOM_OK);
    cr_assert_eq(device_event_query(dev, e1, &done), OOM_OK);
    cr_assert_not(done);
    cr_assert_eq(device_stream_complete(dev, s, 1), OOM_OK); /* the first unit: e1 */
    cr_assert_eq(device_event_query(dev, e1, &done), OOM_OK);
    cr_assert(done);
    cr_assert_eq(device_event_query(dev, e2, &done), OOM_OK);
    cr_assert_not(done);
    cr_assert_eq(device_stream_complete(dev, s, 99), OOM_OK); /* more than held: all of it */
    cr_assert_eq(device_event_query(dev, e2, &done), OOM_OK);
    cr_assert(done);

    cr_assert_eq(device_event_destroy(dev, e0), OOM_OK);
    cr_assert_eq(device_event_destroy(dev, e1), OOM_OK);
    cr_assert_eq(device_event_destroy(dev, e2), OOM_OK);
    cr_assert_eq(device_event_destroy(dev, e2), OOM_EINVAL);
    cr_assert_eq(device_event_query(dev, e2, &done), OOM_EINVAL);
    cr_assert_eq(device_event_query(dev, 0, &done), OOM_EINVAL);
    cr_assert_eq(device_stream_hold(dev, s), OOM_OK);
    cr_assert_eq(device_stream_destroy(dev, s), OOM_OK); /* its held work completes first */
    cr_assert_eq(device_stream_destroy(dev, s), OOM_EINVAL);
    cr_assert_eq(device_stream_destroy(dev, 0), OOM_EINVAL); /* the default stream stays */
    cr_assert_eq(device_stream_hold(dev, s), OOM_EINVAL);
    device_close(dev);
}

/* ---- the simulator (always sim) ---------------------------------------------------------------------- */

Test(device_sim, open_and_kinds)
{
    device_kind k;
    cr_assert_eq(device_kind_parse("auto", &k), OOM_OK);
    cr_assert_eq(k, DEVICE_AUTO);
    cr_assert_eq(device_kind_parse("sim", &k), OOM_OK);
    cr_assert_eq(k, DEVICE_SIM);
    cr_assert_eq(device_kind_parse("cuda", &k), OOM_OK);
    cr_assert_eq(k, DEVICE_CUDA);
    cr_assert_eq(device_kind_parse("gpu", &k), OOM_EINVAL);
    cr_assert_str_eq(device_kind_str(DEVICE_AUTO), "auto");
    cr_assert_str_eq(device_kind_str(DEVICE_SIM), "sim");
    cr_assert_str_eq(device_kind_str(DEVICE_CUDA), "cuda");

    device *dev = open_sim(0, false);
    cr_assert_str_eq(dev->name, "sim");
    cr_assert_str_eq(dev->ops->name, "sim");
    cr_assert_eq(dev->total_bytes, DEVICE_SIM_DEFAULT_CAPACITY);
    device_close(dev);

    /* auto never fails for lack of a GPU; an explicit cuda request does */
    bool gpu = device_cuda_built() && device_cuda_visible();
    device_options o = {.kind = DEVICE_AUTO};
    cr_assert_eq(device_open(&o, &dev), OOM_OK);
    cr_assert_eq(dev->kind, gpu ? DEVICE_CUDA : DEVICE_SIM);
    device_close(dev);
    if (!gpu) {
        o.kind = DEVICE_CUDA;
        dev = NULL;
        cr_assert_eq(device_open(&o, &dev), OOM_ENODEV);
        cr_assert_null(dev);
    }
}

/* The first addresses PyTorch's whatif_default trace got from cudaMalloc on an H100 (driver 580), relative to
 * the first segment: regions of 32 MiB multiples stack downward, small segments fill the newest region's
 * gaps, and the first region starts 8 MiB in. */
Test(device_sim, driver_placement)
{
    device *dev = open_sim(0, false);
    static const struct {
        size_t mib;
        long long rel; /* address - first address, bytes */
    } want[] = {
        {20, 0},          {72, -0x24800000}, {2, -0x20000000}, {2, -0x1fe00000}, {64, -0x28800000},
        {268, -0x3a800000}, {84, -0x40800000}, {166, -0x4c800000}, {16, -0x42200000}, {20, -0x29c00000},
    };
    devptr first = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        devptr p;
        cr_assert_eq(device_mem_alloc(dev, want[i].mib * MiB, &p), OOM_OK);
        if (i == 0)
            first = p;
        cr_assert_eq((long long)(p - first), want[i].rel, "segment %zu (%zu MiB) at %+lld, want %+lld", i,
                     want[i].mib, (long long)(p - first), want[i].rel);
    }
    device_close(dev);
}

/* Gaps: best fit inside the newest region; freed regions are released and reused from their top. */
Test(device_sim, driver_gaps_and_release)
{
    device *dev = open_sim(0, false);
    devptr a, b, c, d, e, big, big2;
    /* the first 2 MiB takes the free top of the launch region, 66 MiB below the first region F */
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &a), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &b), OOM_OK); /* F + 8 MiB: the driver holds F's bottom */
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &c), OOM_OK);
    cr_assert_eq(b, a + 74 * MiB);
    cr_assert_eq(c, b + 2 * MiB);
    cr_assert_eq(device_mem_free(dev, b, 2 * MiB), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 4 * MiB, &d), OOM_OK);
    cr_assert_eq(d, b + 4 * MiB); /* too big for the 2 MiB hole */
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &e), OOM_OK);
    cr_assert_eq(e, b); /* best fit: the 2 MiB hole, not the 14 MiB tail */
    /* a segment too big for F starts a new region under the launch region, 480 MiB below F */
    cr_assert_eq(device_mem_alloc(dev, 40 * MiB, &big), OOM_OK);
    cr_assert_eq(big, b - 8 * MiB - 480 * MiB - 64 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &big2), OOM_OK);
    cr_assert_eq(big2, big + 40 * MiB); /* the new region's 24 MiB tail */
    /* free both: the region is released, and a 30 MiB segment's new region is carved from the top of it */
    cr_assert_eq(device_mem_free(dev, big, 40 * MiB), OOM_OK);
    cr_assert_eq(device_mem_free(dev, big2, 20 * MiB), OOM_OK);
    devptr f;
    cr_assert_eq(device_mem_alloc(dev, 30 * MiB, &f), OOM_OK);
    cr_assert_eq(f, big + 32 * MiB);
    /* reservations grow up from their own base, away from the cudaMalloc heap */
    devptr va, vb;
    cr_assert_eq(device_va_reserve(dev, 4 * MiB, &va), OOM_OK);
    cr_assert_eq(device_va_reserve(dev, 2 * MiB, &vb), OOM_OK);
    cr_assert_eq(va, SIM_VMM_BASE);
    cr_assert_eq(vb, SIM_VMM_BASE + 4 * MiB);
    device_close(dev);
}

/* The first kernel launch frees the launch region's 414 MiB (addr_probe.json, k_basic and k_late). */
Test(device_sim, driver_first_kernel)
{
    /* something lives in the launch region's top: the region stays and fills from its bottom */
    device *dev = open_sim(0, true);
    devptr a, s, b, c, d;
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &a), OOM_OK); /* F + 8 */
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &s), OOM_OK);  /* the launch region's top */
    cr_assert_eq(s, a - 74 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &b), OOM_OK); /* a new region under the launch region */
    cr_assert_eq(b, a - 520 * MiB);
    device_note_kernel_launch(dev);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &c), OOM_OK);
    cr_assert_eq(c, a - 488 * MiB); /* the launch region's bottom */
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &d), OOM_OK);
    cr_assert_eq(d, c + 20 * MiB);
    device_note_kernel_launch(dev); /* only the first counts */
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &d), OOM_OK);
    cr_assert_eq(d, c + 40 * MiB);
    device_close(dev);

    /* nothing lives there: the region is released, and new regions are carved from the top of its space */
    dev = open_sim(0, true);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &a), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &b), OOM_OK);
    cr_assert_eq(b, a - 520 * MiB);
    device_note_kernel_launch(dev);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &c), OOM_OK);
    cr_assert_eq(c, a - 104 * MiB); /* F - 64 - 32 */
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &d), OOM_OK);
    cr_assert_eq(d, c - 32 * MiB);
    device_close(dev);
}

/* A process that initialised NCCL: rank 0 of sharded_training's bug at full scale on 2 x H200
 * (docs/measurements/h200x2-2026-11-27-sharded-history/bug.rank0.pickle; scripts/twins/nccl_layout.py), its
 * segments in PyTorch's order, the first kernel (torch.randn) after the tenth and NCCL's first collective after the
 * first all-gather's output: every address is PyTorch's, relative to the first segment. */
Test(device_sim, driver_nccl_layout)
{
    static const struct {
        char op;       /* 'a' alloc, 'k' first kernel launch, 'c' NCCL's first collective */
        size_t mib;    /* a */
        long long rel; /* a: address - first address, MiB */
    } seq[] = {
        {'a', 64, 0},     {'a', 2, 64},     {'a', 64, 66},    {'a', 64, -1612}, {'a', 64, -1676}, {'a', 64, -1740},
        {'a', 64, -1804}, {'a', 64, -1868}, {'a', 64, -1932}, {'a', 32, 130},   {'k', 0, 0},      {'a', 66, -2188},
        {'c', 0, 0},      {'a', 66, -1260}, {'a', 64, -1194}, {'a', 64, -1130}, {'a', 32, -1066}, {'a', 64, -1034},
        {'a', 32, -970},  {'a', 64, -938},  {'a', 32, -874},  {'a', 64, -842},  {'a', 2, -2190},
    };
    device *dev = open_sim(0, true);
    device_note_nccl(dev, DEVICE_NCCL_INIT);
    devptr first = 0;
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        if (seq[i].op == 'k') {
            device_note_kernel_launch(dev);
            continue;
        }
        if (seq[i].op == 'c') {
            device_note_nccl(dev, DEVICE_NCCL_COLLECTIVE);
            continue;
        }
        devptr p;
        cr_assert_eq(device_mem_alloc(dev, seq[i].mib * MiB, &p), OOM_OK);
        if (first == 0)
            first = p;
        long long rel = ((long long)p - (long long)first) / (long long)MiB;
        cr_assert_eq(rel, seq[i].rel, "step %zu (%zu MiB) at %+lld MiB, PyTorch's at %+lld", i, seq[i].mib, rel,
                     seq[i].rel);
    }
    device_close(dev);

    /* NCCL initialised after the first segment changes nothing: the plain layout (driver_gaps_and_release) */
    dev = open_sim(0, true);
    devptr a, b;
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &a), OOM_OK);
    device_note_nccl(dev, DEVICE_NCCL_INIT);
    device_note_nccl(dev, DEVICE_NCCL_COLLECTIVE);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &b), OOM_OK);
    cr_assert_eq(b, a + 74 * MiB);
    device_close(dev);
}

/* The model behind device_order_key is told of NCCL too (the cuda backend's shadow): its keys are where an NCCL
 * process's sim puts each segment. */
Test(device_sim, model_order_follows_the_nccl_layout)
{
    device_options mo = {.kind = DEVICE_SIM, .sim_dry_run = true, .sim_model_order = true};
    device *dev = NULL, *nccl = open_sim(0, true);
    cr_assert_eq(device_open(&mo, &dev), OOM_OK);
    device_note_nccl(dev, DEVICE_NCCL_INIT);
    device_note_nccl(nccl, DEVICE_NCCL_INIT);
    static const size_t mib[] = {64, 2, 64, 64};
    for (size_t i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        devptr p, q;
        cr_assert_eq(device_mem_alloc(dev, mib[i] * MiB, &p), OOM_OK);
        cr_assert_eq(device_mem_alloc(nccl, mib[i] * MiB, &q), OOM_OK);
        cr_assert_eq(device_order_key(dev, p), q, "segment %zu", i);
    }
    device_close(dev);
    device_close(nccl);
}

/* Every address the H100's driver gave the scripted and random cuMemAlloc/cuMemFree sequences of
 * scripts/twins/addr_probe.py (tests/data/addr_probe.json), relative to the sequence's first allocation.
 * In the "torch" flavour PyTorch had run a kernel first, and in "torch0" the script's "k"/"K" ops launch one:
 * PyTorch's own 2 MiB segment is allocated there, then what the first kernel made the driver take (2 + 26 + 480
 * MiB for PyTorch's fill kernel, measured in these sequences; not modelled by the sim itself), then the launch.
 * Left out: "tiny" (requests under 2 MiB share a chunk: the caching allocator never makes one), "vmm"
 * (reservations), and rand_k1..3, where the kernel's own allocations were not those three. */
static const char *const probe_skipped[] = {"tiny", "vmm", "rand_k1", "rand_k2", "rand_k3"};

static int64_t probe_num(const cJSON *a, int i)
{
    const cJSON *v = cJSON_GetArrayItem(a, i);
    cr_assert(cJSON_IsNumber(v), "probe op field %d is not a number", i);
    return (int64_t)v->valuedouble;
}

/* PyTorch's segment and the first kernel's own allocations, then the launch; returns PyTorch's segment. */
static devptr probe_kernel(device *dev)
{
    static const size_t driver_mib[] = {2, 26, 480};
    devptr seg, p;
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &seg), OOM_OK);
    for (size_t i = 0; i < sizeof driver_mib / sizeof driver_mib[0]; i++)
        cr_assert_eq(device_mem_alloc(dev, driver_mib[i] * MiB, &p), OOM_OK);
    device_note_kernel_launch(dev);
    return seg;
}

Test(device_sim, driver_probe_sequences)
{
    char *text = fileio_read_all("tests/data/addr_probe.json", NULL);
    cr_assert_not_null(text, "cannot read tests/data/addr_probe.json (run from the repository root)");
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *exps = cJSON_GetObjectItemCaseSensitive(doc, "experiments");
    cr_assert(cJSON_IsArray(exps));
    int checked = 0, addresses = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, exps)
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        const char *flavour = cJSON_GetObjectItemCaseSensitive(e, "flavour")->valuestring;
        bool skip = false;
        for (size_t i = 0; i < sizeof probe_skipped / sizeof probe_skipped[0]; i++)
            skip |= strcmp(name, probe_skipped[i]) == 0;
        if (skip)
            continue;
        device *dev = open_sim(0, true);
        devptr ids[1024] = {0}, first = 0;
        int64_t rfirst = 0;
        bool have_first = false, launched = false;
        if (strcmp(flavour, "torch") == 0) {
            const cJSON *pre = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "pre"), 0);
            first = probe_kernel(dev);
            rfirst = (int64_t)cJSON_GetObjectItemCaseSensitive(pre, "torch_segment")->valuedouble;
            have_first = launched = true;
        }
        const cJSON *op;
        cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(e, "ops"))
        {
            const char *kind = cJSON_GetArrayItem(op, 0)->valuestring;
            int64_t id = probe_num(op, 1), size = probe_num(op, 2);
            const cJSON *addr = cJSON_GetArrayItem(op, 3);
            cr_assert(id >= 0 && id < 1024, "%s: op id %lld", name, (long long)id);
            devptr p = 0;
            if ((kind[0] == 'k' || kind[0] == 'K') && !launched) {
                p = probe_kernel(dev);
                launched = true;
            } else if (kind[0] == 'a' && cJSON_IsNumber(addr)) {
                cr_assert_eq(device_mem_alloc(dev, (size_t)size, &p), OOM_OK, "%s: a %lld", name, (long long)size);
                ids[id] = p;
            } else if (kind[0] == 'f' && ids[id]) {
                cr_assert_eq(device_mem_free(dev, ids[id], (size_t)size), OOM_OK, "%s: f %lld", name, (long long)id);
                ids[id] = 0;
                continue;
            } else {
                continue;
            }
            if (!cJSON_IsNumber(addr))
                continue;
            if (!have_first) {
                first = p;
                rfirst = (int64_t)addr->valuedouble;
                have_first = true;
            }
            long long got = (long long)(p - first), want = (long long)((int64_t)addr->valuedouble - rfirst);
            cr_assert_eq(got, want, "%s: op %s %lld (%lld MiB) at %+lld MiB, the driver's at %+lld MiB", name, kind,
                         (long long)id, (long long)(size >> 20), got >> 20, want >> 20);
            addresses++;
        }
        device_close(dev);
        checked++;
    }
    cJSON_Delete(doc);
    cr_assert_eq(checked, 82, "%d sequences checked", checked);
    cr_assert_eq(addresses, 4703, "%d addresses checked", addresses);
}

Test(device_sim, addr_hint)
{
    device *dev = open_sim(0, false);
    devptr a, b, c, d;
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &a), OOM_OK); /* the launch region's top; F is a + 66 MiB */
    devptr spot = a - 4 * GiB;

    /* honoured when free and the size matches */
    device_addr_hint(dev, spot, 4 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 4 * MiB, &b), OOM_OK);
    cr_assert_eq(b, spot);
    /* consumed: the next allocation is placed normally (the newest region is the hinted one, full; then F) */
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &c), OOM_OK);
    cr_assert_eq(c, a + 74 * MiB);
    /* ignored for another size, and consumed anyway */
    device_addr_hint(dev, spot + 64 * MiB, 4 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &d), OOM_OK);
    cr_assert_eq(d, a + 76 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 4 * MiB, &d), OOM_OK);
    cr_assert_neq(d, spot + 64 * MiB);
    /* ignored when the range is taken */
    device_addr_hint(dev, b, 4 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 4 * MiB, &d), OOM_OK);
    cr_assert_neq(d, b);
    /* 0 clears it */
    device_addr_hint(dev, spot + 128 * MiB, 2 * MiB);
    device_addr_hint(dev, 0, 0);
    cr_assert_eq(device_mem_alloc(dev, 2 * MiB, &d), OOM_OK);
    cr_assert_neq(d, spot + 128 * MiB);
    cr_assert_eq(device_copy_htod(dev, b, "hint", 4), OOM_OK);
    device_close(dev);
}

Test(device_sim, dry_run)
{
    device *dev = open_sim(1 * GiB, true);
    devptr p, va;
    size_t f, t;
    cr_assert_eq(device_mem_alloc(dev, 512 * MiB, &p), OOM_OK);
    cr_assert_eq(device_mem_info(dev, &f, &t), OOM_OK);
    cr_assert_eq(f, 512 * MiB);
    cr_assert_eq(t, 1 * GiB);
    cr_assert_null(device_host_view(dev, p));
    unsigned char buf[64] = {1};
    cr_assert_eq(device_copy_htod(dev, p, buf, sizeof buf), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, buf, p, sizeof buf), OOM_OK);
    cr_assert_eq(buf[0], 1); /* nothing was copied */
    cr_assert_eq(device_fill(dev, p, 0, 512 * MiB), OOM_OK);
    cr_assert_eq(device_mem_alloc(dev, 1 * GiB, &p), OOM_ENOMEM_DEVICE);

    cr_assert_eq(device_va_reserve(dev, 1 * GiB, &va), OOM_OK);
    cr_assert_eq(device_va_map(dev, va, 256 * MiB, 2 * MiB), OOM_OK);
    cr_assert_null(device_host_view(dev, va));
    cr_assert_eq(device_mem_info(dev, &f, &t), OOM_OK);
    cr_assert_eq(f, 256 * MiB);
    /* the bookkeeping still rejects bad requests */
    cr_assert_eq(device_va_map(dev, va, 2 * MiB, 2 * MiB), OOM_EINVAL);
    cr_assert_eq(device_copy_htod(dev, va + 256 * MiB, buf, 1), OOM_EINVAL);
    cr_assert_eq(device_va_unmap(dev, va, 256 * MiB, 2 * MiB), OOM_OK);
    cr_assert_eq(device_va_release(dev, va, 1 * GiB), OOM_OK);
    device_close(dev);

    /* full H100 scale costs no host memory */
    dev = open_sim(0, true);
    cr_assert_eq(device_mem_alloc(dev, 78 * GiB + 1, &p), OOM_OK);
    cr_assert_eq(device_mem_info(dev, &f, &t), OOM_OK);
    cr_assert_eq(f, DEVICE_SIM_DEFAULT_CAPACITY - DEVICE_SIM_CONTEXT_BYTES - (78 * GiB + 1));
    device_close(dev);
}

Test(device_sim, bad_requests_are_einval)
{
    device *dev = open_sim(64 * MiB, false);
    devptr p, va;
    unsigned char buf[16] = {0};
    cr_assert_eq(device_mem_alloc(dev, 3 * MiB, &p), OOM_OK);
    cr_assert_eq(device_mem_free(dev, SIM_BASE + 32 * MiB, 2 * MiB), OOM_EINVAL); /* unknown */
    cr_assert_eq(device_mem_free(dev, p + 4096, 3 * MiB), OOM_EINVAL);            /* interior */
    cr_assert_eq(device_mem_free(dev, p, 4 * MiB), OOM_EINVAL); /* the rounded size is not the size */
    cr_assert_eq(device_va_release(dev, p, 4 * MiB), OOM_EINVAL); /* a segment is no reservation */
    /* copies stay inside the allocation */
    cr_assert_eq(device_copy_htod(dev, p + 3 * MiB - 8, buf, 16), OOM_EINVAL);
    cr_assert_eq(device_copy_htod(dev, p + 3 * MiB - 8, buf, 8), OOM_OK);
    cr_assert_eq(device_copy_htod(dev, SIM_BASE + 40 * MiB, buf, 1), OOM_EINVAL);
    cr_assert_eq(device_fill(dev, p, 0, 4 * MiB), OOM_EINVAL);
    cr_assert_eq(device_copy_dtod(dev, p, SIM_BASE + 40 * MiB, 1), OOM_EINVAL);

    cr_assert_eq(device_va_reserve(dev, 3 * MiB, &va), OOM_EINVAL); /* not a granularity multiple */
    cr_assert_eq(device_va_reserve(dev, 0, &va), OOM_EINVAL);
    cr_assert_eq(device_va_reserve(dev, 40 * MiB, &va), OOM_OK);
    cr_assert_eq(device_mem_free(dev, va, 40 * MiB), OOM_EINVAL); /* a reservation is no segment */
    cr_assert_eq(device_va_map(dev, p, 2 * MiB, 2 * MiB), OOM_EINVAL);           /* not reserved */
    cr_assert_eq(device_va_map(dev, va + 1 * MiB, 2 * MiB, 2 * MiB), OOM_EINVAL); /* misaligned */
    cr_assert_eq(device_va_map(dev, va, 3 * MiB, 2 * MiB), OOM_EINVAL);           /* not whole pages */
    cr_assert_eq(device_va_map(dev, va, 3 * MiB, 3 * MiB), OOM_EINVAL);           /* odd page size */
    cr_assert_eq(device_va_map(dev, va, 0, 2 * MiB), OOM_EINVAL);
    cr_assert_eq(device_va_map(dev, va + 38 * MiB, 4 * MiB, 2 * MiB), OOM_EINVAL); /* past the end */
    cr_assert_eq(device_va_map(dev, va, 20 * MiB, 20 * MiB), OOM_OK);
    cr_assert_eq(device_va_unmap(dev, va, 2 * MiB, 2 * MiB), OOM_EINVAL); /* a piece of a 20 MiB page */
    cr_assert_eq(device_va_unmap(dev, va, 20 * MiB, 2 * MiB), OOM_EINVAL);
    cr_assert_eq(device_va_unmap(dev, va + 20 * MiB, 20 * MiB, 20 * MiB), OOM_EINVAL); /* unmapped */
    cr_assert_eq(device_copy_htod(dev, va + 20 * MiB - 8, buf, 16), OOM_EINVAL); /* runs into unmapped */
    cr_assert_eq(device_va_release(dev, va, 40 * MiB), OOM_EINVAL);               /* still mapped */
    cr_assert_eq(device_va_unmap(dev, va, 20 * MiB, 20 * MiB), OOM_OK);
    cr_assert_eq(device_va_release(dev, va, 20 * MiB), OOM_EINVAL); /* wrong size */
    cr_assert_eq(device_va_release(dev, va, 40 * MiB), OOM_OK);

    void *h;
    cr_assert_eq(device_host_alloc(dev, 0, &h), OOM_EINVAL);
    cr_assert_eq(device_host_alloc(dev, 100, &h), OOM_OK);
    cr_assert_eq((uintptr_t)h % 4096, 0);
    cr_assert_eq(device_host_free(dev, (char *)h + 8), OOM_EINVAL);
    cr_assert_eq(device_host_free(dev, h), OOM_OK);
    cr_assert_eq(device_host_free(dev, h), OOM_EINVAL);

    /* nothing above changed the accounting */
    size_t f, t;
    cr_assert_eq(device_mem_info(dev, &f, &t), OOM_OK);
    cr_assert_eq(f, 61 * MiB);
    cr_assert_eq(device_mem_free(dev, p, 3 * MiB), OOM_OK);
    device_close(dev);
}

Test(device_sim, host_view)
{
    device *dev = open_sim(0, false);
    devptr p, va;
    /* a segment: writable through the view, visible through copies; its bytes end at the size asked for */
    cr_assert_eq(device_mem_alloc(dev, 3 * MiB, &p), OOM_OK);
    unsigned char *v = device_host_view(dev, p);
    cr_assert_not_null(v);
    cr_assert_eq(device_host_view(dev, p + 4096), v + 4096);
    v[3 * MiB - 1] = 0x42;
    unsigned char b = 0;
    cr_assert_eq(device_copy_dtoh(dev, &b, p + 3 * MiB - 1, 1), OOM_OK);
    cr_assert_eq(b, 0x42);
    cr_assert_null(device_host_view(dev, p + 3 * MiB));
    cr_assert_null(device_host_view(dev, SIM_BASE + 64 * MiB));

    /* a reservation: only mapped pages have a view */
    cr_assert_eq(device_va_reserve(dev, 2 * PAGE, &va), OOM_OK);
    cr_assert_null(device_host_view(dev, va));
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_OK);
    unsigned char *w = device_host_view(dev, va);
    cr_assert_not_null(w);
    cr_assert_null(device_host_view(dev, va + PAGE));
    cr_assert_eq(w[100], 0); /* fresh pages read zero */
    w[100] = 0x5A;
    cr_assert_eq(device_copy_dtoh(dev, &b, va + 100, 1), OOM_OK);
    cr_assert_eq(b, 0x5A);
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_null(device_host_view(dev, va));
    /* remapped, the page holds no stale bytes */
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, &b, va + 100, 1), OOM_OK);
    cr_assert_eq(b, 0);
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_OK);
    cr_assert_eq(device_va_release(dev, va, 2 * PAGE), OOM_OK);
    cr_assert_eq(device_mem_free(dev, p, 3 * MiB), OOM_OK);
    device_close(dev);
}

/* A stale view of an unmapped page faults instead of reading old data. */
Test(device_sim, unmapped_page_faults, .signal = SIGSEGV, .disabled = UNDER_ASAN)
{
    device *dev = open_sim(0, false);
    devptr va;
    cr_assert_eq(device_va_reserve(dev, PAGE, &va), OOM_OK);
    cr_assert_eq(device_va_map(dev, va, PAGE, PAGE), OOM_OK);
    volatile unsigned char *w = device_host_view(dev, va);
    cr_assert_not_null((void *)w);
    w[0] = 1;
    cr_assert_eq(device_va_unmap(dev, va, PAGE, PAGE), OOM_OK);
    w[0] = 2; /* SIGSEGV */
    device_close(dev);
}

/* The host cannot back a segment (here: the address space is limited): a clean error naming what failed, with
 * nothing charged or placed, never an abort or a device OOM. */
Test(device_sim, out_of_host_memory_is_a_clean_error, .disabled = UNDER_ASAN)
{
    device *dev = open_sim(8 * GiB, false), *fresh = open_sim(8 * GiB, false);
    struct rlimit old;
    cr_assert(test_limit_address_space(256 * MiB, &old), "cannot limit the address space");
    devptr p = 0, va = 0;
    oom_status st = device_mem_alloc(dev, GiB, &p);
    char seg[512];
    snprintf(seg, sizeof seg, "%s", oom_error_detail());
    oom_status st2 = device_va_reserve(dev, 4 * GiB, &va);
    char res[512];
    snprintf(res, sizeof res, "%s", oom_error_detail());
    cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
    cr_assert_eq(st, OOM_ENOMEM_HOST, "mem_alloc: %s", oom_status_str(st));
    cr_assert_eq(p, 0, "out-parameter written on failure");
    cr_assert_str_eq(seg, "sim: cannot back a 1073741824-byte segment with host memory (mmap: Cannot allocate memory)");
    cr_assert_eq(st2, OOM_ENOMEM_HOST, "va_reserve: %s", oom_status_str(st2));
    cr_assert_str_eq(res, "sim: cannot back a 4294967296-byte address reservation with host memory (mmap: Cannot "
                          "allocate memory)");
    size_t free_bytes = 0, total = 0;
    cr_assert_eq(device_mem_info(dev, &free_bytes, &total), OOM_OK);
    cr_assert_eq(free_bytes, 8 * GiB, "the failed segment was charged");
    /* with the limit lifted, the same segment lands where it lands on a fresh device */
    devptr q = 0;
    cr_assert_eq(device_mem_alloc(dev, GiB, &p), OOM_OK);
    cr_assert_eq(device_mem_alloc(fresh, GiB, &q), OOM_OK);
    cr_assert_eq(p, q, "the failed segment left its placement behind");
    cr_assert_eq(device_mem_free(dev, p, GiB), OOM_OK);
    cr_assert_eq(device_mem_free(fresh, q, GiB), OOM_OK);
    device_close(dev);
    device_close(fresh);
}

Test(device_sim, pinned_budget)
{
    device_options o = {.kind = DEVICE_SIM, .sim_pinned_bytes = MiB};
    device *dev = NULL;
    cr_assert_eq(device_open(&o, &dev), OOM_OK);
    size_t pinned, limit;
    device_host_info(dev, &pinned, &limit);
    cr_assert_eq(pinned, 0);
    cr_assert_eq(limit, MiB);
    void *h = NULL, *h2 = NULL;
    cr_assert_eq(device_host_alloc(dev, MiB - 4095, &h), OOM_OK); /* charged as 256 pages */
    device_host_info(dev, &pinned, &limit);
    cr_assert_eq(pinned, MiB);
    cr_assert_eq(device_host_alloc(dev, 1, &h2), OOM_ENOMEM_PINNED);
    cr_assert_null(h2);
    unsigned char *buf = malloc(8192);
    cr_assert_not_null(buf);
    cr_assert_eq(device_host_register(dev, buf, 100), OOM_ENOMEM_PINNED);
    cr_assert_eq(device_host_free(dev, h), OOM_OK);
    cr_assert_eq(device_host_register(dev, buf, 100), OOM_OK);
    device_host_info(dev, &pinned, &limit); /* the pages spanned: one, or two across a page boundary */
    cr_assert_eq(pinned, ((uintptr_t)buf + 100 + 4095) / 4096 * 4096 - (uintptr_t)buf / 4096 * 4096);
    cr_assert_eq(device_host_unregister(dev, buf), OOM_OK);
    free(buf);
    device_close(dev);

    /* the default budget is the host's RAM */
    dev = open_sim(0, false);
    device_host_info(dev, &pinned, &limit);
    cr_assert_eq(limit, device_host_ram_bytes());
    cr_assert_gt(limit, 0);
    device_close(dev);
}

/* A seeded layout (device_options.sim_layout_seed): the segments stay where the model puts them, but their order
 * key is the seed's: the same seed gives the same keys, another seed or none (the address) other orders, and a
 * block's key inside a segment is the segment's plus its offset (the allocator's invariant I7). */
Test(device_sim, layout_seed_orders_segments_otherwise)
{
    enum { N = 24 };
    devptr keys[3][N], addr[3][N];
    for (int k = 0; k < 3; k++) {
        device_options o = {.kind = DEVICE_SIM, .sim_dry_run = true, .sim_layout_seed = k == 2 ? 7 : 3};
        device *dev = NULL;
        cr_assert_eq(device_open(&o, &dev), OOM_OK);
        cr_assert_not(device_orders_by_model(dev));
        for (int i = 0; i < N; i++) {
            cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &addr[k][i]), OOM_OK);
            keys[k][i] = device_order_key(dev, addr[k][i]);
            cr_assert_eq(keys[k][i] & (((devptr)1 << 47) - 1), addr[k][i], "the address is the key's low bits");
        }
        device_close(dev);
    }
    device *plain = open_sim(0, true);
    int flipped_seed = 0, flipped_plain = 0;
    for (int i = 0; i < N; i++) {
        devptr p;
        cr_assert_eq(device_mem_alloc(plain, 20 * MiB, &p), OOM_OK);
        cr_assert_eq(p, addr[0][i], "segment %d: a seed moves no segment", i);
        cr_assert_eq(device_order_key(plain, p), p);
        cr_assert_eq(keys[1][i], keys[0][i], "segment %d: the same seed, the same key", i);
        for (int j = 0; j < i; j++) {
            flipped_plain += (keys[0][i] < keys[0][j]) != (addr[0][i] < addr[0][j]);
            flipped_seed += (keys[0][i] < keys[0][j]) != (keys[2][i] < keys[2][j]);
        }
    }
    /* 276 pairs: a random order flips about half of them against another */
    cr_assert(flipped_plain > 60 && flipped_plain < 216, "%d pairs in another order than the addresses'", flipped_plain);
    cr_assert(flipped_seed > 60 && flipped_seed < 216, "%d pairs in another order than seed 7's", flipped_seed);
    device_close(plain);
}

/* The shadow model (device_order_key): a sim run with the model beside it, its second segment put elsewhere by a
 * hint, ranks that segment where a plain sim (the model alone) put it, at every offset, and follows frees,
 * reservations and the first kernel launch. */
Test(device_sim, order_key_is_the_models_address)
{
    device_options mo = {.kind = DEVICE_SIM, .sim_dry_run = true, .sim_model_order = true};
    device *dev = NULL, *plain = open_sim(0, true);
    cr_assert_eq(device_open(&mo, &dev), OOM_OK);
    cr_assert(device_orders_by_model(dev));
    cr_assert_not(device_orders_by_model(plain));

    devptr a, b, c, pa, pb, pc, ra, pra;
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &a), OOM_OK);
    cr_assert_eq(device_mem_alloc(plain, 20 * MiB, &pa), OOM_OK);
    cr_assert_eq(device_order_key(dev, a), pa);
    devptr spot = a - 8 * GiB;
    device_addr_hint(dev, spot, 20 * MiB);
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &b), OOM_OK);
    cr_assert_eq(b, spot);
    cr_assert_eq(device_mem_alloc(plain, 20 * MiB, &pb), OOM_OK);
    cr_assert_neq(pb, spot);
    cr_assert_eq(device_order_key(dev, b), pb);
    cr_assert_eq(device_order_key(dev, b + 5 * MiB + 512), pb + 5 * MiB + 512);
    cr_assert_eq(device_order_key(plain, b), b); /* no model: the address itself */

    /* a free releases the model's range too: the next segment gets the model's reuse of it */
    cr_assert_eq(device_mem_free(dev, a, 20 * MiB), OOM_OK);
    cr_assert_eq(device_mem_free(plain, pa, 20 * MiB), OOM_OK);
    device_note_kernel_launch(dev);
    device_note_kernel_launch(plain);
    cr_assert_eq(device_mem_alloc(dev, 40 * MiB, &c), OOM_OK);
    cr_assert_eq(device_mem_alloc(plain, 40 * MiB, &pc), OOM_OK);
    cr_assert_eq(device_order_key(dev, c), pc);
    cr_assert_eq(device_va_reserve(dev, 64 * MiB, &ra), OOM_OK);
    cr_assert_eq(device_va_reserve(plain, 64 * MiB, &pra), OOM_OK);
    cr_assert_eq(device_order_key(dev, ra + 2 * MiB), pra + 2 * MiB);
    cr_assert_eq(device_va_map(dev, ra, 4 * MiB, 2 * MiB), OOM_OK);
    cr_assert_eq(device_va_unmap(dev, ra, 4 * MiB, 2 * MiB), OOM_OK);
    cr_assert_eq(device_va_release(dev, ra, 64 * MiB), OOM_OK);
    cr_assert_eq(dev->nranges, 2, "%zu ranges live", dev->nranges);
    device_close(dev);
    device_close(plain);
}

/* An asynchronous copy on a side stream, ordered by events both ways (model_too_large's fix-offload): the bytes
 * arrive, the event recorded after the copy completes, and unknown streams and events are refused. */
Test(device, async_copy_on_a_side_stream)
{
    device *dev = open_conformance();
    const size_t n = 3 * MiB + 123;
    unsigned char *src = NULL, *back = malloc(n);
    cr_assert_eq(device_host_alloc(dev, n, (void **)&src), OOM_OK);
    fill_pattern(src, n, 7);
    devptr d;
    cr_assert_eq(device_mem_alloc(dev, 4 * MiB, &d), OOM_OK);
    devstream side;
    cr_assert_eq(device_stream_create(dev, &side), OOM_OK);
    devevent before, after;
    cr_assert_eq(device_event_record(dev, 0, &before), OOM_OK);
    cr_assert_eq(device_stream_wait_event(dev, side, before), OOM_OK);
    cr_assert_eq(device_copy_htod_async(dev, d, src, n, side), OOM_OK);
    cr_assert_eq(device_event_record(dev, side, &after), OOM_OK);
    cr_assert_eq(device_stream_wait_event(dev, 0, after), OOM_OK);
    cr_assert_eq(device_copy_dtoh(dev, back, d, n), OOM_OK); /* the default stream waits for the copy */
    cr_assert_eq(memcmp(back, src, n), 0);
    cr_assert_eq(device_stream_synchronize(dev, side), OOM_OK);
    bool done = false;
    cr_assert_eq(device_event_query(dev, after, &done), OOM_OK);
    cr_assert(done);
    cr_assert_eq(device_stream_wait_event(dev, side, after + 4096), OOM_EINVAL);
    cr_assert_eq(device_copy_htod_async(dev, d, src, n, side + 4096), OOM_EINVAL);
    cr_assert_eq(device_event_destroy(dev, before), OOM_OK);
    cr_assert_eq(device_event_destroy(dev, after), OOM_OK);
    cr_assert_eq(device_stream_destroy(dev, side), OOM_OK);
    cr_assert_eq(device_mem_free(dev, d, 4 * MiB), OOM_OK);
    cr_assert_eq(device_host_free(dev, src), OOM_OK);
    free(back);
    device_close(dev);
}
