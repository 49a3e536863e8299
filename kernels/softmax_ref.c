/* softmax_ref.c - CPU references of log_softmax, log_softmax_backward, nll_loss and nll_loss_backward
 * (kernels.h), in PyTorch's formulation (aten/src/ATen/native/cuda/SoftMax.cu, Loss.cu):
 *   log_softmax    out = (a - max) - log(sum exp(a - max)), per row
 *   backward       gi = go - exp(y) * sum(go), per row
 *   nll_loss       loss = -(sum of logp[i, target[i]]) / m, total_weight = m (mean, no class weights)
 *   nll backward   gi = 0 except gi[i, target[i]] = -(go / total_weight)
 * The scalars loss, total_weight and go have type dt, like the tensors PyTorch gives them. An empty batch gives
 * loss = NaN (0 / 0) and total_weight = 0, as torch.nn.functional.nll_loss does. A target outside [0, n) is
 * OOM_EINVAL here, with nothing written (PyTorch raises; the CUDA version asserts on the device).
 */
#include <math.h>
#include <string.h>

#include "kargs.h"
#include "kernels.h"
#include "ref_util.h"

oom_status k_log_softmax_ref(dtype dt, void *out, const void *a, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m * n > 0 && (!out || !a)))
        return KARGS_FAIL(dt, m, n);
    float x[REF_CHUNK];
    for (int64_t r = 0; r < m && n > 0; r++) {
        const int64_t base = r * n;
        float max = -INFINITY;
        ref_sum s;
        ref_sum_init(&s);
#define ROW(T)                                                                                                     \
    do {                                                                                                           \
        for (int64_t j = 0; j < n; j++) {                                                                          \
            float v = LD_##T(a, base + j);                                                                         \
            max = v > max || v != v ? v : max; /* NaN wins, as in PyTorch's max */                                 \
        }                                                                                                          \
        for (int64_t j0 = 0; j0 < n; j0 += REF_CHUNK) {                                                            \
            int64_t k = n - j0 < REF_CHUNK ? n - j0 : REF_CHUNK;                                                   \
            for (int64_t j = 0; j < k; j++)                                                                        \
                x[j] = expf(LD_##T(a, base + j0 + j) - max);                                                       \
            ref_sum_add(&s, x, k);                                                                                 \
        }                                                                                                          \
        float logsum = logf(ref_sum_total(&s));                                                                    \
        for (int64_t j = 0; j < n; j++)                                                                            \
            ST_##T(out, base + j, (LD_##T(a, base + j) - max) - logsum);                                           \
    } while (0)
        REF_FLOAT_DISPATCH(dt, ROW)
#undef ROW
    }
    return OOM_OK;
}

oom_status k_log_softmax_backward_ref(dtype dt, void *gi, const void *go, const void *y, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m * n > 0 && (!gi || !go || !y)))
        return KARGS_FAIL(dt, m, n);
    float x[REF_CHUNK];
    for (int64_t r = 0; r < m && n > 0; r++) {
        const int64_t base = r * n;
        ref_sum s;
        ref_sum_init(&s);
#define ROW(T)                                                                                                     \
    do {                                                                                                           \
        for (int64_t j0 = 0; j0 < n; j0 += REF_CHUNK) {                                                            \
            int64_t k = n - j0 < REF_CHUNK ? n - j0 : REF_CHUNK;                                                   \
            for (int64_t j = 0; j < k; j++)                                                                        \
                x[j] = LD_##T(go, base + j0 + j);                                                                  \
            ref_sum_add(&s, x, k);                                                                                 \
        }                                                                                                          \
        float sum = ref_sum_total(&s);                                                                             \
        for (int64_t j = 0; j < n; j++)                                                                            \
            ST_##T(gi, base + j, LD_##T(go, base + j) - expf(LD_##T(y, base + j)) * sum);                          \
    } while (0)
        REF_FLOAT_DISPATCH(dt, ROW)
#undef ROW
    }
    return OOM_OK;
}

/* True when every target[0..m) is in [0, n). */
static bool targets_ok(const int64_t *target, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++)
        if (target[i] < 0 || target[i] >= n)
            return false;
    return true;
}

oom_status k_nll_loss_ref(dtype dt, void *loss, void *total_weight, const void *logp, const int64_t *target,
                          int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || !loss || !total_weight || (m > 0 && (!logp || !target)) ||
        !targets_ok(target, m, n))
        return KARGS_FAIL(dt, m, n);
    ref_sum s;
    ref_sum_init(&s);
    float x[REF_CHUNK];
    for (int64_t i0 = 0; i0 < m; i0 += REF_CHUNK) {
        int64_t k = m - i0 < REF_CHUNK ? m - i0 : REF_CHUNK;
#define PICK(T)                                                                                                    \
    for (int64_t j = 0; j < k; j++)                                                                                \
        x[j] = LD_##T(logp, (i0 + j) * n + target[i0 + j]);
        REF_FLOAT_DISPATCH(dt, PICK)
#undef PICK
        ref_sum_add(&s, x, k);
    }
    float tw = (float)m;
    float l = -ref_sum_total(&s) / tw;
#define STORE(T)                                                                                                   \
    do {                                                                                                           \
        ST_##T(loss, 0, l);                                                                                        \
        ST_##T(total_weight, 0, tw);                                                                               \
    } while (0)
    REF_FLOAT_DISPATCH(dt, STORE)
#undef STORE
    return OOM_OK;
}

oom_status k_nll_loss_backward_ref(dtype dt, void *gi, const void *go, const int64_t *target,
                                   const void *total_weight, int64_t m, int64_t n)
{
    if (!kargs_float(dt) || !kargs_shape(m, n) || (m > 0 && (!gi || !go || !target || !total_weight)) ||
        (m > 0 && !targets_ok(target, m, n)))
        return KARGS_FAIL(dt, m, n);
    if (m == 0)
        return OOM_OK;
    memset(gi, 0, (size_t)(m * n) * dtype_size(dt)); /* +0 has all bits clear in every float type */
#define SCATTER(T)                                                                                                 \
    do {                                                                                                           \
        float g = -(LD_##T(go, 0) / LD_##T(total_weight, 0));                                                      \
        for (int64_t i = 0; i < m; i++)                                                                            \
            ST_##T(gi, i * n + target[i], g);                                                                      \
    } while (0)
    REF_FLOAT_DISPATCH(dt, SCATTER)
#undef SCATTER
    return OOM_OK;
}
