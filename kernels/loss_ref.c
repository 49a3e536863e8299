/* loss_ref.c - CPU references of mse_loss and mse_loss_backward (kernels.h), reduction mean:
 *   mse_loss           out = sum((a - b)^2) / n; n == 0 gives NaN (0 / 0), as torch's mean of nothing
 *   mse_loss_backward  gi = (2 / n) * (a - b) * go   (PyTorch's mse_backward: norm * (a - b) * go)
 * out and go have type dt, like the 0-dim tensors PyTorch gives them.
 */
#include "kargs.h"
#include "kernels.h"
#include "ref_util.h"

oom_status k_mse_loss_ref(dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || !out || (n > 0 && (!a || !b)))
        return KARGS_FAIL(dt, 1, n);
    ref_sum s;
    ref_sum_init(&s);
    float x[REF_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += REF_CHUNK) {
        int64_t k = n - i0 < REF_CHUNK ? n - i0 : REF_CHUNK;
#define SQDIFF(T)                                                                                                  \
    for (int64_t j = 0; j < k; j++) {                                                                              \
        float d = LD_##T(a, i0 + j) - LD_##T(b, i0 + j);                                                           \
        x[j] = d * d;                                                                                              \
    }
        REF_FLOAT_DISPATCH(dt, SQDIFF)
#undef SQDIFF
        ref_sum_add(&s, x, k);
    }
    float mean = ref_sum_total(&s) / (float)n;
#define STORE(T) ST_##T(out, 0, mean)
    REF_FLOAT_DISPATCH(dt, STORE)
#undef STORE
    return OOM_OK;
}

oom_status k_mse_loss_backward_ref(dtype dt, void *gi, const void *go, const void *a, const void *b, int64_t n)
{
    if (!kargs_float(dt) || n < 0 || (n > 0 && (!gi || !go || !a || !b)))
        return KARGS_FAIL(dt, 1, n);
    if (n == 0)
        return OOM_OK;
    float norm = 2.0f / (float)n;
#define MSE_BW(T)                                                                                                  \
    do {                                                                                                           \
        float g = LD_##T(go, 0);                                                                                   \
        REF_MAP(T, gi, n, norm * (LD_##T(a, i) - LD_##T(b, i)) * g);                                               \
    } while (0)
    REF_FLOAT_DISPATCH(dt, MSE_BW)
#undef MSE_BW
    return OOM_OK;
}
