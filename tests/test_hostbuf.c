/* test_hostbuf.c - hostbuf's validator (hostbuf_check): each invariant of hostbuf.h (H1-H5) broken on purpose and
 * caught, named by its number, and in checked builds (OOM_DEBUG >= 2) caught at a function's entry: the test's
 * process (Criterion forks one per test) aborts.
 *
 * Suite "hostbuf".
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/hostbuf.h"
#include "runtime/runtime.h"
#include "testutil.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

static const int64_t shape[2] = {4, 8}; /* 32 floats: 128 bytes */

/* Expect hostbuf_check(b) to refuse, naming what. */
static void expect_broken(const hostbuf *b, bool expensive, const char *what)
{
    char why[256] = "";
    cr_assert_eq(hostbuf_check(b, expensive, why, sizeof why), OOM_ECORRUPT, "not caught: %s", what);
    cr_assert_not_null(strstr(why, what), "'%s' does not name %s", why, what);
}

Test(hostbuf, the_validator_catches_each_broken_invariant)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r);
    hostbuf *b = NULL, *p = NULL;
    cr_assert_eq(hostbuf_randn(r, DT_F32, 2, shape, 1, &b), OOM_OK);
    cr_assert_eq(hostbuf_pin_memory(b, &p), OOM_OK);
    char why[256];
    cr_assert_eq(hostbuf_check(b, true, why, sizeof why), OOM_OK, "%s", why);
    cr_assert_eq(hostbuf_check(p, true, why, sizeof why), OOM_OK, "%s", why);

    hostbuf bad = *b;
    bad.nbytes = 64; /* nbytes == numel x dtype_size */
    expect_broken(&bad, false, "H2: nbytes 64, not numel x dtype_size = 128");
    bad = *b;
    bad.ndim = TENSOR_MAX_DIMS + 1;
    expect_broken(&bad, false, "ndim");
    bad = *b;
    bad.shape[1] = -8;
    expect_broken(&bad, false, "H1: shape[1] = -8");
    bad = *p;
    bad.data = NULL; /* pinned => a block */
    expect_broken(&bad, false, "H3: pinned, 128 bytes, and no block");
    bad = *b;
    bad.data = NULL; /* pageable in a run that computes => its malloc'd values */
    expect_broken(&bad, false, "H4: pageable, 128 bytes, without data in a run that computes");
    bad = *b;
    bad.rt = NULL;
    expect_broken(&bad, false, "H1: no hostbuf, or no rt behind it");
    bad = *p;
    char not_pinned[128];
    bad.data = not_pinned; /* pinned => a live block of rt->ha: the expensive level alone looks it up */
    cr_assert_eq(hostbuf_check(&bad, false, why, sizeof why), OOM_OK, "%s", why);
    expect_broken(&bad, true, "H5: pinned, but");

    hostbuf_free(p);
    hostbuf_free(b);
    rt_close(r);
}

#if OOM_DEBUG >= 2
/* A checked build validates at entry: hostbuf_free of a corrupted buffer aborts before it frees anything. */
Test(hostbuf, a_checked_build_aborts_on_a_broken_invariant, .signal = SIGABRT)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r);
    hostbuf *b = NULL;
    cr_assert_eq(hostbuf_randn(r, DT_F32, 2, shape, 1, &b), OOM_OK);
    b->nbytes = 64;
    hostbuf_free(b); /* aborts */
}
#endif
