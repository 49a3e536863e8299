/* testutil.h - helpers shared by the Criterion suites. */
#ifndef OOMLAB_TESTUTIL_H
#define OOMLAB_TESTUTIL_H

#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "alloc/memstats.h"
#include "runtime/runtime.h"

/* The backend under test: OOMLAB_TEST_BACKEND=cuda (make test BACKEND=cuda) or sim (the default). */
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

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define GiB ((size_t)1 << 30)

#endif
