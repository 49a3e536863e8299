/* rnn.cu - CUDA versions of the fused GRU cell (kernels.h): gru_cell, gru_cell_backward. One thread per (batch,
 * hidden) element, grid-stride, kgru.h's formulas (the functions rnn_ref.c runs), as PyTorch's RNN.cu does.
 */
#include "cuda_util.cuh"
#include "kgru.h"

template <typename T>
__global__ void gru_cell_kernel(T *hy, T *ws, const T *ig, const T *hg, const T *hx, const T *b1, const T *b2,
                                int64_t h, int64_t total)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / h, j = i % h, g = b * 3 * h + j, w = b * 5 * h + j;
        kgru_in e = {};
        e.ir = kc_to_f(ig[g]), e.iz = kc_to_f(ig[g + h]), e.in = kc_to_f(ig[g + 2 * h]);
        e.hr = kc_to_f(hg[g]), e.hz = kc_to_f(hg[g + h]), e.hn = kc_to_f(hg[g + 2 * h]);
        e.hx = kc_to_f(hx[i]);
        if (b1) {
            e.b1r = kc_to_f(b1[j]), e.b1z = kc_to_f(b1[j + h]), e.b1n = kc_to_f(b1[j + 2 * h]);
            e.b2r = kc_to_f(b2[j]), e.b2z = kc_to_f(b2[j + h]), e.b2n = kc_to_f(b2[j + 2 * h]);
        }
        kgru_out o = kgru_forward(&e);
        hy[i] = kc_from_f<T>(o.hy);
        ws[w] = kc_from_f<T>(o.r);
        ws[w + h] = kc_from_f<T>(o.z);
        ws[w + 2 * h] = kc_from_f<T>(o.n);
        ws[w + 3 * h] = hx[i];
        ws[w + 4 * h] = kc_from_f<T>(o.hnb);
    }
}

template <typename T>
__global__ void gru_cell_backward_kernel(T *gig, T *ghg, T *ghx, const T *go, const T *ws, int64_t h, int64_t total)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / h, j = i % h, g = b * 3 * h + j, w = b * 5 * h + j;
        kgru_grad d = kgru_backward(kc_to_f(ws[w]), kc_to_f(ws[w + h]), kc_to_f(ws[w + 2 * h]),
                                    kc_to_f(ws[w + 3 * h]), kc_to_f(ws[w + 4 * h]), kc_to_f(go[i]));
        gig[g] = kc_from_f<T>(d.gr);
        gig[g + h] = kc_from_f<T>(d.gz);
        gig[g + 2 * h] = kc_from_f<T>(d.gn);
        ghg[g] = kc_from_f<T>(d.gr);
        ghg[g + h] = kc_from_f<T>(d.gz);
        ghg[g + 2 * h] = kc_from_f<T>(d.ghn);
        ghx[i] = kc_from_f<T>(d.ghx);
    }
}

struct gru_cell_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *hy, void *ws, const void *ig, const void *hg, const void *hx,
                          const void *b1, const void *b2, int64_t h, int64_t total)
    {
        gru_cell_kernel<T><<<kc_blocks(total, KC_THREADS), KC_THREADS>>>(
            (T *)hy, (T *)ws, (const T *)ig, (const T *)hg, (const T *)hx, (const T *)b1, (const T *)b2, h, total);
        return KC_LAUNCHED(kernel);
    }
};

struct gru_cell_backward_launch {
    template <typename T>
    static oom_status run(const char *kernel, void *gig, void *ghg, void *ghx, const void *go, const void *ws,
                          int64_t h, int64_t total)
    {
        gru_cell_backward_kernel<T><<<kc_blocks(total, KC_THREADS), KC_THREADS>>>(
            (T *)gig, (T *)ghg, (T *)ghx, (const T *)go, (const T *)ws, h, total);
        return KC_LAUNCHED(kernel);
    }
};

/* batch x 5 hidden elements fit in int64 (rnn_ref.c). */
static bool gru_shape(int64_t batch, int64_t hidden)
{
    return kargs_shape(batch, hidden) && hidden <= INT64_MAX / 5 && kargs_shape(batch, 5 * hidden);
}

oom_status k_gru_cell_cuda(dtype dt, void *hy, void *workspace, const void *igates, const void *hgates,
                           const void *hx, const void *b_ih, const void *b_hh, int64_t batch, int64_t hidden)
{
    if (!kargs_float(dt) || !gru_shape(batch, hidden) || (b_ih == NULL) != (b_hh == NULL) ||
        (batch * hidden > 0 && (!hy || !workspace || !igates || !hgates || !hx)))
        return KARGS_FAIL(dt, batch, hidden);
    if (batch * hidden == 0)
        return OOM_OK;
    return kc_dispatch<gru_cell_launch>(dt, __func__, hy, workspace, igates, hgates, hx, b_ih, b_hh, hidden,
                                        batch * hidden);
}

oom_status k_gru_cell_backward_cuda(dtype dt, void *grad_igates, void *grad_hgates, void *grad_hx,
                                    const void *grad_hy, const void *workspace, int64_t batch, int64_t hidden)
{
    if (!kargs_float(dt) || !gru_shape(batch, hidden) ||
        (batch * hidden > 0 && (!grad_igates || !grad_hgates || !grad_hx || !grad_hy || !workspace)))
        return KARGS_FAIL(dt, batch, hidden);
    if (batch * hidden == 0)
        return OOM_OK;
    return kc_dispatch<gru_cell_backward_launch>(dt, __func__, grad_igates, grad_hgates, grad_hx, grad_hy,
                                                 workspace, hidden, batch * hidden);
}
