/* rnn_ref.c - CPU references of the fused GRU cell (kernels.h): gru_cell, gru_cell_backward. kgru.h has the
 * formulas; values are computed in f32 and each stored value rounded once (the workspace's hx is copied).
 */
#include <stdbool.h>

#include "kargs.h"
#include "kernels.h"
#include "kgru.h"
#include "ref_util.h"

/* batch x 5 hidden elements fit in int64. */
static bool gru_shape(int64_t batch, int64_t hidden)
{
    return kargs_shape(batch, hidden) && hidden <= INT64_MAX / 5 && kargs_shape(batch, 5 * hidden);
}

oom_status k_gru_cell_ref(dtype dt, void *hy, void *workspace, const void *igates, const void *hgates,
                          const void *hx, const void *b_ih, const void *b_hh, int64_t batch, int64_t hidden)
{
    if (!kargs_float(dt) || !gru_shape(batch, hidden) || (b_ih == NULL) != (b_hh == NULL) ||
        (batch * hidden > 0 && (!hy || !workspace || !igates || !hgates || !hx)))
        return KARGS_FAIL(dt, batch, hidden);
    const int64_t h = hidden;
    const bool bias = b_ih != NULL;
#define GRU(T)                                                                                                     \
    for (int64_t b = 0; b < batch; b++)                                                                            \
        for (int64_t j = 0; j < h; j++) {                                                                          \
            const int64_t g = b * 3 * h + j, w = b * 5 * h + j;                                                     \
            kgru_in e = {.ir = LD_##T(igates, g), .iz = LD_##T(igates, g + h), .in = LD_##T(igates, g + 2 * h),   \
                         .hr = LD_##T(hgates, g), .hz = LD_##T(hgates, g + h), .hn = LD_##T(hgates, g + 2 * h),   \
                         .hx = LD_##T(hx, b * h + j)};                                                             \
            if (bias) {                                                                                            \
                e.b1r = LD_##T(b_ih, j), e.b1z = LD_##T(b_ih, j + h), e.b1n = LD_##T(b_ih, j + 2 * h);              \
                e.b2r = LD_##T(b_hh, j), e.b2z = LD_##T(b_hh, j + h), e.b2n = LD_##T(b_hh, j + 2 * h);              \
            }                                                                                                      \
            kgru_out o = kgru_forward(&e);                                                                         \
            ST_##T(hy, b * h + j, o.hy);                                                                           \
            ST_##T(workspace, w, o.r);                                                                             \
            ST_##T(workspace, w + h, o.z);                                                                         \
            ST_##T(workspace, w + 2 * h, o.n);                                                                     \
            ST_##T(workspace, w + 3 * h, e.hx); /* exact: the stored value read back */                           \
            ST_##T(workspace, w + 4 * h, o.hnb);                                                                   \
        }
    REF_FLOAT_DISPATCH(dt, GRU)
#undef GRU
    return OOM_OK;
}

oom_status k_gru_cell_backward_ref(dtype dt, void *grad_igates, void *grad_hgates, void *grad_hx,
                                   const void *grad_hy, const void *workspace, int64_t batch, int64_t hidden)
{
    if (!kargs_float(dt) || !gru_shape(batch, hidden) ||
        (batch * hidden > 0 && (!grad_igates || !grad_hgates || !grad_hx || !grad_hy || !workspace)))
        return KARGS_FAIL(dt, batch, hidden);
    const int64_t h = hidden;
#define GRU_BW(T)                                                                                                  \
    for (int64_t b = 0; b < batch; b++)                                                                            \
        for (int64_t j = 0; j < h; j++) {                                                                          \
            const int64_t g = b * 3 * h + j, w = b * 5 * h + j;                                                     \
            kgru_grad d = kgru_backward(LD_##T(workspace, w), LD_##T(workspace, w + h), LD_##T(workspace, w + 2 * h), \
                                        LD_##T(workspace, w + 3 * h), LD_##T(workspace, w + 4 * h),                 \
                                        LD_##T(grad_hy, b * h + j));                                               \
            ST_##T(grad_igates, g, d.gr);                                                                          \
            ST_##T(grad_igates, g + h, d.gz);                                                                      \
            ST_##T(grad_igates, g + 2 * h, d.gn);                                                                  \
            ST_##T(grad_hgates, g, d.gr);                                                                          \
            ST_##T(grad_hgates, g + h, d.gz);                                                                      \
            ST_##T(grad_hgates, g + 2 * h, d.ghn);                                                                 \
            ST_##T(grad_hx, b * h + j, d.ghx);                                                                     \
        }
    REF_FLOAT_DISPATCH(dt, GRU_BW)
#undef GRU_BW
    return OOM_OK;
}
