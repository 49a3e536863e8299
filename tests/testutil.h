/* testutil.h - helpers shared by the Criterion suites. */
#ifndef OOMLAB_TESTUTIL_H
#define OOMLAB_TESTUTIL_H

#include <stdlib.h>
#include <string.h>

#include "device.h"

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

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define GiB ((size_t)1 << 30)

#endif
