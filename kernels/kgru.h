/* kgru.h - one element of gru_cell and gru_cell_backward (kernels.h), compiled for the host and the device:
 * rnn_ref.c and rnn.cu both call these, so the two follow one formula.
 *
 * PyTorch's fused GRU cell (aten/src/ATen/native/cuda/RNN.cu, gru_cell_forward / gru_cell_backward), operation by
 * operation in f32 (its accscalar_t), for element (b, j) of a batch x hidden state, with the gates [r, z, n] in
 * column blocks of width hidden (igates = x @ w_ih.t(), hgates = h @ w_hh.t(), each batch x 3 hidden):
 *
 *   r  = sigmoid(ir + hr + b_ir + b_hr)            sigmoid(x) = 1 / (1 + exp(-x))
 *   z  = sigmoid(iz + hz + b_iz + b_hz)
 *   n  = tanh(in + b_in + r * (hn + b_hn))
 *   hy = n + z * (hx - n)
 *   workspace[b, :] = [r, z, n, hx, hn + b_hn]     (batch x 5 hidden; hx stored as it is, the rest rounded once)
 *
 * and backward, from the workspace and the gradient go of hy:
 *
 *   gz  = go * (hx - n) * (1 - z) * z              ghx = go * z      (the direct part; hgates carries the rest)
 *   gn  = go * (1 - z) * (1 - n * n)               ghn = gn * r      gr = gn * (hn + b_hn) * (1 - r) * r
 *   grad_igates[b, :] = [gr, gz, gn]               grad_hgates[b, :] = [gr, gz, ghn]
 *
 * Products associate left to right as in RNN.cu. The device build lets nvcc contract a * b + c into FMAs, and
 * expf/tanhf differ by an ulp or so between the host library and CUDA's, so the two agree to a few ulps.
 */
#ifndef OOMLAB_KGRU_H
#define OOMLAB_KGRU_H

#include <math.h>

#ifdef __CUDACC__
#define KGRU_FN static __host__ __device__ inline
#else
#define KGRU_FN static inline
#endif

KGRU_FN float kgru_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The three gate pre-activations of one element, read as f32, and the two biases (0 without bias). */
typedef struct kgru_in {
    float ir, iz, in, hr, hz, hn;
    float b1r, b1z, b1n, b2r, b2z, b2n;
    float hx;
} kgru_in;

/* hy, and the workspace values r, z, n, hn + b_hn (hx is copied as it is). */
typedef struct kgru_out {
    float hy, r, z, n, hnb;
} kgru_out;

KGRU_FN kgru_out kgru_forward(const kgru_in *e)
{
    kgru_out o;
    o.r = kgru_sigmoid(e->ir + e->hr + e->b1r + e->b2r);
    o.z = kgru_sigmoid(e->iz + e->hz + e->b1z + e->b2z);
    float n = e->in + e->b1n + o.r * (e->hn + e->b2n);
    o.n = tanhf(n);
    o.hy = o.n + o.z * (e->hx - o.n);
    o.hnb = e->hn + e->b2n;
    return o;
}

typedef struct kgru_grad {
    float gr, gz, gn, ghn, ghx;
} kgru_grad;

/* From the workspace values (r, z, n, hx, hn + b_hn) and go. */
KGRU_FN kgru_grad kgru_backward(float r, float z, float n, float hx, float hnb, float go)
{
    kgru_grad g;
    g.gz = go * (hx - n) * (1.0f - z) * z;
    g.ghx = go * z;
    g.gn = go * (1.0f - z) * (1.0f - n * n);
    g.ghn = g.gn * r;
    g.gr = g.gn * hnb * (1.0f - r) * r;
    return g;
}

#endif
