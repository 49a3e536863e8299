/* testutil.h - helpers shared by the Criterion suites. */
#ifndef OOMLAB_TESTUTIL_H
#define OOMLAB_TESTUTIL_H

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "device/device.h"
#include "alloc/memstats.h"
#include "runtime/runtime.h"

/* The backend under test: OOMLAB_TEST_BACKEND=cuda (make test BACKEND=cuda) or sim (the default). */
/* The oomlab binary a test runs as a user would: $OOMLAB_BIN (else build/oomlab), or with fixtures the
 * oomlab_fixtures beside it (tests/fixtures' scenarios linked in). */
static inline const char *test_oomlab_bin(bool fixtures, char *bin, size_t cap)
{
    const char *b = getenv("OOMLAB_BIN");
    snprintf(bin, cap, "%s", b && b[0] ? b : "build/oomlab");
    if (fixtures) {
        char *slash = strrchr(bin, '/');
        snprintf(slash ? slash + 1 : bin, cap - (size_t)(slash ? slash + 1 - bin : 0), "oomlab_fixtures");
    }
    return bin;
}

static inline device_kind test_backend(void)
{
    const char *s = getenv("OOMLAB_TEST_BACKEND");
    return (s && strcmp(s, "cuda") == 0) ? DEVICE_CUDA : DEVICE_SIM;
}

/* Open the backend under test; sim gets capacity bytes (0 = default) and real backing memory. */
static inline device *test_device_open(size_t sim_capacity)
{
    device_options o = {.kind = test_backend(), .sim_capacity_bytes = sim_capacity};
    device *dev = NULL;
    if (device_open(&o, &dev) != OOM_OK)
        return NULL;
    return dev;
}

/* A runtime on the backend under test (sim computes with the CPU references); budget 0 = none. */
static inline rt *test_rt_open(size_t budget, const char *conf_text)
{
    alloc_conf c;
    alloc_conf_default(&c);
    char err[256];
    if (conf_text && alloc_conf_parse(&c, conf_text, err, sizeof err) != OOM_OK)
        return NULL;
    rt_options o = {.backend = test_backend(), .budget_bytes = budget, .conf = &c, .seed = 1234};
    rt *r = NULL;
    if (rt_open(&o, &r) != OOM_OK)
        return NULL;
    return r;
}

/* A stat of the runtime's allocator, by its memory_stats() name. */
static inline int64_t test_stat(const rt *r, const char *key)
{
    int64_t v = -1;
    memstats_get(cachealloc_stats(r->ca), key, &v);
    return v;
}

/* PyTorch's block size for a request of n bytes (no roundup_power2_divisions): 512-byte multiples. */
static inline int64_t block_bytes(int64_t n) { return n == 0 ? 0 : (n + 511) / 512 * 512; }

/* ASan reserves terabytes of address space and catches SIGSEGV itself: tests that limit the address space or
 * expect a fault cannot run under it. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* Limit this process's address space to what it maps now plus headroom bytes (RLIMIT_AS: every mmap beyond
 * fails with ENOMEM, as when the host runs out of memory). Returns the limit to restore; false when the current
 * size cannot be read or the limit cannot be set. */
static inline bool test_limit_address_space(size_t headroom, struct rlimit *old)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    bool ok = f && fscanf(f, "%lu", &pages) == 1;
    if (f)
        fclose(f);
    if (!ok || getrlimit(RLIMIT_AS, old) != 0)
        return false;
    struct rlimit rl = *old;
    rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + headroom;
    return setrlimit(RLIMIT_AS, &rl) == 0;
}

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define GiB ((size_t)1 << 30)

/* A scratch folder for a suite's tests, made by its .init and removed by its .fini: test_tmpdir_make(dir, "cli")
 * makes $TMPDIR/oomlab_test_cli.XXXXXX (/tmp when TMPDIR is unset) in dir (TEST_TMPDIR_MAX bytes), never a fixed
 * path, so two suites at once (or a cleaner of /tmp) never meet. Criterion runs each test in its own process, so
 * each test gets a folder of its own. */
#define TEST_TMPDIR_MAX 96
static inline void test_tmpdir_make(char dir[TEST_TMPDIR_MAX], const char *suite)
{
    const char *base = getenv("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    int n = snprintf(dir, TEST_TMPDIR_MAX, "%s/oomlab_test_%.20s.XXXXXX", base, suite);
    cr_assert(n > 0 && n < TEST_TMPDIR_MAX, "TMPDIR is too long for a scratch folder: %s", base);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

/* dir/name, in one of four rotating buffers (so four may be used in one expression). */
static inline const char *test_path(const char *dir, const char *name)
{
    static char paths[4][TEST_TMPDIR_MAX + 256];
    static int k;
    char *p = paths[k++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

static inline void test_tmpdir_remove(const char *dir)
{
    char cmd[TEST_TMPDIR_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        cr_log_warn("could not remove %s", dir);
}

#endif
