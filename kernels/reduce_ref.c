/* reduce_ref.c - CPU references of the reductions (kernels.h): sum_rows, sum_all.
 *
 * Sums accumulate in f32 (ref_util.h) and are rounded once when stored. An empty sum is 0, as torch.sum's:
 * sum_rows with m == 0 writes n zeros, sum_all with n == 0 writes one.
 */
#include "kargs.h"
#include "kernels.h"
#include "ref_util.h"

/* Rows per partial column sum: each column is summed in runs of this many rows, then the runs are added. */
#define ROWS_PER_RUN 64

oom_status k_sum_rows_ref(dtype dt, void *out, const void *a, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (n > 0 && (!out || (m > 0 && !a))))
        return KARGS_FAIL(dt, m, n);
    /* a tile of up to REF_CHUNK columns at a time: the row loop reads contiguous memory */
    for (int64_t c0 = 0; c0 < n; c0 += REF_CHUNK) {
        int64_t w = n - c0 < REF_CHUNK ? n - c0 : REF_CHUNK;
        float total[REF_CHUNK] = {0}, run[REF_CHUNK];
        for (int64_t r0 = 0; r0 < m; r0 += ROWS_PER_RUN) {
            int64_t r1 = m - r0 < ROWS_PER_RUN ? m : r0 + ROWS_PER_RUN;
            for (int64_t j = 0; j < w; j++)
                run[j] = 0.0f;
#define RUN(T)                                                                                                     \
    for (int64_t i = r0; i < r1; i++)                                                                              \
        for (int64_t j = 0; j < w; j++)                                                                            \
            run[j] += LD_##T(a, i * n + c0 + j);
            REF_FLOAT_DISPATCH(dt, RUN)
#undef RUN
            for (int64_t j = 0; j < w; j++)
                total[j] += run[j];
        }
#define STORE(T)                                                                                                   \
    for (int64_t j = 0; j < w; j++)                                                                                \
        ST_##T(out, c0 + j, total[j]);
        REF_FLOAT_DISPATCH(dt, STORE)
#undef STORE
    }
    return OOM_OK;
}

oom_status k_sum_all_ref(dtype dt, void *out, const void *a, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || !out || (n > 0 && !a))
        return KARGS_FAIL(dt, 1, n);
    ref_sum s;
    ref_sum_init(&s);
    float x[REF_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += REF_CHUNK) {
        int64_t k = n - i0 < REF_CHUNK ? n - i0 : REF_CHUNK;
#define LOAD(T)                                                                                                    \
    for (int64_t j = 0; j < k; j++)                                                                                \
        x[j] = LD_##T(a, i0 + j);
        REF_FLOAT_DISPATCH(dt, LOAD)
#undef LOAD
        ref_sum_add(&s, x, k);
    }
    float total = ref_sum_total(&s);
#define STORE(T) ST_##T(out, 0, total)
    REF_FLOAT_DISPATCH(dt, STORE)
#undef STORE
    return OOM_OK;
}

oom_status k_sum_squares_ref(dtype dt, const void *a, int64_t n, double *acc)
{
    if (!kargs_float(dt) || n < 0 || !acc || (n > 0 && !a))
        return KARGS_FAIL(dt, 1, n);
    double s = *acc;
#define SQ(T)                                                                                                      \
    for (int64_t i = 0; i < n; i++) {                                                                              \
        double v = (double)LD_##T(a, i);                                                                           \
        s += v * v;                                                                                                \
    }
    REF_FLOAT_DISPATCH(dt, SQ)
#undef SQ
    *acc = s;
    return OOM_OK;
}
