/* test_faultsweep.c - `oomlab faultsweep`: the injected faults (device.h's fault plan), the sweep over the ci-scale
 * catalog (one fault point in 8 here, in 64 under asan; .ci/run sweeps every point), and leaks, lost host buffers
 * and crashes on an OOM path found in tests/fixtures' leaky_fixture, at the points where they happen. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "device/device.h"
#include "run/faultsweep.h"
#include "testutil.h"
#include "run/scenario.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_LSAN 1
#endif
#endif

TestSuite(faultsweep);

Test(faultsweep, a_plan_fails_the_nth_allocation_and_every_later_one)
{
    device_options opt = {.kind = DEVICE_SIM, .sim_dry_run = true};
    device *a = NULL, *b = NULL;
    cr_assert_eq(device_open(&opt, &a), OOM_OK);
    cr_assert_eq(device_open(&opt, &b), OOM_OK);
    device_fault_plan plan = {.device_at = 3, .host_at = 2};
    device_fault_plan_attach(a, &plan);
    device_fault_plan_attach(b, &plan);
    devptr p[4] = {0};
    cr_assert_eq(device_mem_alloc(a, 2 << 20, &p[0]), OOM_OK);
    cr_assert_eq(device_mem_alloc(b, 2 << 20, &p[1]), OOM_OK);              /* 2nd, counted over both devices */
    cr_assert_eq(device_mem_alloc(a, 2 << 20, &p[2]), OOM_ENOMEM_DEVICE);   /* 3rd */
    cr_assert_eq(device_mem_alloc(b, 2 << 20, &p[3]), OOM_ENOMEM_DEVICE);   /* and every later one */
    cr_assert_eq(p[2], 0, "nothing written on failure");
    cr_assert_eq(device_mem_free(a, p[0], 2 << 20), OOM_OK, "frees go through");
    cr_assert_eq(plan.device_calls, 4);
    cr_assert_eq(plan.device_fired, 2);
    void *h = NULL;
    cr_assert_eq(device_host_alloc(a, 4096, &h), OOM_OK);
    void *h2 = NULL;
    cr_assert_eq(device_host_alloc(b, 4096, &h2), OOM_ENOMEM_PINNED, "the 2nd pinned allocation");
    cr_assert_null(h2);
    cr_assert_eq(plan.host_calls, 2);
    cr_assert_eq(plan.host_fired, 1);
    cr_assert_eq(device_host_free(a, h), OOM_OK);
    device_mem_free(b, p[1], 2 << 20);
    device_close(a);
    device_close(b);
}

static const faultsweep_row *row_of(const faultsweep_result *r, const char *variant)
{
    for (size_t i = 0; i < r->nrows; i++)
        if (strcmp(r->rows[i].v->name, variant) == 0)
            return &r->rows[i];
    cr_assert_fail("no row %s", variant);
    return NULL;
}

/* One fault point in STRIDE: every 8th here (.ci/run sweeps them all, so in CI this is a sample of what it has
 * just swept; every 4th took 80 s once sharded_training's four variants joined). Under asan (make asan: the validator after
 * every call, LeakSanitizer in every point's process) the whole catalog took over 10 minutes even at one point in
 * 64: there the sweep takes the three scenarios that allocate the most kinds of memory (segments, expandable
 * pages, a second device, pinned blocks), at one point in 64, the first of each variant and kind. */
#ifdef TEST_LSAN
#define STRIDE 64
#define HOST_POINTS 7 /* 1 for each of the 7 variants that pin */
static const scenario *asan_list[3];
#else
#define STRIDE 8
#define HOST_POINTS 16 /* pinned allocations 17 + 9 + 9 + 1 + 3 + 3 + 48: 3 + 2 + 2 + 1 + 1 + 1 + 6 points */
#endif

Test(faultsweep, every_point_is_clean_over_the_ci_catalog, .timeout = 600)
{
    faultsweep_options o = {.run = {.backend = DEVICE_SIM, .scale = SCALE_CI}, .stride = STRIDE, .device = true,
                            .host = true};
    faultsweep_result r;
    char err[512] = "";
    const scenario *const *list = scenario_catalog;
    size_t nlist = scenario_catalog_size;
#ifdef TEST_LSAN
    asan_list[0] = scenario_find("fragmentation");
    asan_list[1] = scenario_find("model_too_large");
    asan_list[2] = scenario_find("pinned_memory");
    list = asan_list;
    nlist = 3;
#endif
    cr_assert_eq(faultsweep_run(list, nlist, &o, &r, err, sizeof err), OOM_OK, "%s", err);
    size_t variants = 0;
    for (size_t k = 0; k < nlist; k++)
        variants += list[k]->nvariants;
    cr_assert_eq(r.nrows, variants);
    uint64_t host = 0;
    for (size_t i = 0; i < r.nrows; i++) {
        const faultsweep_row *row = &r.rows[i];
        cr_assert_eq(row->nfailures, 0, "%s/%s, %s fault at %llu: %s", row->sc->name, row->v->name,
                     row->nfailures ? row->failures[0].kind : "", row->nfailures ? (unsigned long long)row->failures[0].at : 0ULL,
                     row->nfailures ? row->failures[0].what : "");
        cr_assert_geq(row->device_allocs, 1, "%s/%s", row->sc->name, row->v->name);
        /* points 1, 1 + STRIDE, ... up to the allocations of the run without a fault (a persistent fault never
         * makes a run allocate more than that: it only ends paths sooner) */
        cr_assert_geq(row->device_points, 1, "%s/%s", row->sc->name, row->v->name);
        cr_assert_leq(row->device_points, (row->device_allocs + STRIDE - 1) / STRIDE, "%s/%s", row->sc->name,
                      row->v->name);
        host += row->host_points;
    }
    cr_assert(r.passed);
    /* pinned_memory's loaders and model_too_large's offloaded weights pin host memory */
    cr_assert_eq(host, HOST_POINTS);
    faultsweep_result_free(&r);
}

Test(faultsweep, every_point_of_fragmentation)
{
    const scenario *sc = scenario_find("fragmentation");
    faultsweep_options o = {.run = {.backend = DEVICE_SIM}, .stride = 1, .device = true, .host = true};
    faultsweep_result r;
    char err[512] = "";
    cr_assert_eq(faultsweep_run(&sc, 1, &o, &r, err, sizeof err), OOM_OK, "%s", err);
    cr_assert(r.passed);
    /* 50 segments of 20 MiB (100 pairs of 6 + 3 MiB, two pairs a segment); expandable segments map 46 pages of
     * 20 MiB worth; allocating the long-lived ones first takes one more segment for the request */
    cr_assert_eq(row_of(&r, "bug")->device_points, 50);
    cr_assert_eq(row_of(&r, "bug")->device_allocs, 50);
    cr_assert_eq(row_of(&r, "fix-expandable-segments")->device_points, 46);
    cr_assert_eq(row_of(&r, "fix-long-lived-first")->device_points, 51);
    cr_assert_eq(row_of(&r, "bug")->host_points, 0);
    faultsweep_result_free(&r);
}

Test(faultsweep, finds_a_leak_and_a_crash_on_the_oom_path)
{
    const scenario *sc = scenario_find("leaky_fixture");
    cr_assert_not_null(sc, "the fixture scenarios are not registered in this binary");
    faultsweep_options o = {.run = {.backend = DEVICE_SIM}, .stride = 1, .device = true, .host = true};
    faultsweep_result r;
    char err[512] = "";
    cr_assert_eq(faultsweep_run(&sc, 1, &o, &r, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_not(r.passed);
    /* four 16 MiB tensors, a segment each: points 1..4; an OOM at point n leaves n - 1 tensors made */
    const faultsweep_row *clean = row_of(&r, "clean"), *leak = row_of(&r, "leak-tensor-on-oom");
    const faultsweep_row *crash = row_of(&r, "crash-on-oom"), *host = row_of(&r, "leak-host-on-oom");
    cr_assert_eq(clean->device_points, 4);
    cr_assert_eq(clean->nfailures, 0);
    /* the leak needs a tensor made before the OOM: points 2, 3, 4 */
    cr_assert_eq(leak->device_points, 4);
    cr_assert_eq(leak->nfailures, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_str_eq(leak->failures[i].kind, "device");
        cr_assert_eq(leak->failures[i].at, i + 2);
        cr_assert_str_eq(leak->failures[i].what, "device 0: not released: 1 tensors, 0 autograd nodes, 16777216 "
                                                 "bytes allocated, 0 pinned blocks handed out");
    }
    cr_assert_eq(crash->device_points, 4);
    cr_assert_eq(crash->nfailures, 4);
    cr_assert(strncmp(crash->failures[0].what, "crashed: SIGSEGV (", 18) == 0, "%s", crash->failures[0].what);
    cr_assert_eq(host->device_points, 4);
#ifndef TEST_LSAN
    cr_assert_eq(host->nfailures, 0, "without LeakSanitizer (make asan) a lost host buffer is not seen");
#endif
    /* Under make asan, LeakSanitizer in a child forked from Criterion's worker (whose IPC threads run on) may
     * miss the leak ("Running thread N was not suspended"): leak_sanitizer_finds_a_lost_host_buffer checks it
     * from the single-threaded oomlab_fixtures, as a user runs it. */
    faultsweep_result_free(&r);
}

/* `oomlab faultsweep` as a user runs it: $OOMLAB_BIN, and the fixtures binary beside it. */
static int sweep_cli(bool fixtures, const char *args, char *out, size_t cap)
{
    char bin[512], cmd[1024];
    test_oomlab_bin(fixtures, bin, sizeof bin);
    snprintf(cmd, sizeof cmd,
             "env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF -u PYTORCH_ALLOC_CONF "
             "'%s' faultsweep %s 2>&1",
             bin, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

#ifdef TEST_LSAN
/* A host buffer lost on the OOM path, found by LeakSanitizer at every one of the four fault points. */
Test(faultsweep, leak_sanitizer_finds_a_lost_host_buffer)
{
    static char out[1 << 16];
    cr_assert_eq(sweep_cli(true, "leaky_fixture --variant leak-host-on-oom --backend sim --stride 1 --jobs 1",
                           out, sizeof out),
                 1, "%s", out);
    for (int at = 1; at <= 4; at++) {
        char line[256];
        snprintf(line, sizeof line,
                 "\nleaky_fixture/leak-host-on-oom, device allocation %d and later failing: LeakSanitizer found a "
                 "host leak (its report is on stderr)\n",
                 at);
        cr_assert_not_null(strstr(out, line), "no LeakSanitizer finding at point %d:\n%s", at, out);
    }
    cr_assert_not_null(strstr(out, "\n4 fault points in 1 variant: 4 not clean (✗ above)\n"), "%s", out);
}
#endif

Test(faultsweep, the_command_line)
{
    static char out[1 << 16];
    cr_assert_eq(sweep_cli(false, "fragmentation --variant bug --backend sim --jobs 1", out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, "faultsweep: backend sim, scale ci, every fault point\n\n"
                          "scenario           variant                     device points  host points  failures\n"
                          "fragmentation      bug                                    50            0         0  ✓\n"
                          "\n50 fault points in 1 variant: every one clean (no crash, no leak, counters back to 0, "
                          "validators pass)\n");
    cr_assert_eq(sweep_cli(true, "leaky_fixture --variant leak-tensor-on-oom --backend sim --stride 2", out, sizeof out),
                 1, "%s", out);
    cr_assert_not_null(strstr(out, "one fault point in 2 (--stride)"), "%s", out);
    cr_assert_not_null(strstr(out, "\nleaky_fixture/leak-tensor-on-oom, device allocation 3 and later failing: "
                                   "device 0: not released: 1 tensors"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "\n2 fault points in 1 variant: 1 not clean (✗ above)\n"), "%s", out);
    cr_assert_eq(sweep_cli(false, "fragmentation --only pinned", out, sizeof out), 2, "%s", out);
    cr_assert_str_eq(out, "oomlab: --only: 'pinned' is not device or host\n");
    cr_assert_eq(sweep_cli(false, "--variant bug", out, sizeof out), 2, "%s", out);
}
