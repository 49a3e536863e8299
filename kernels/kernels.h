/* kernels.h - every compute kernel of the runtime, as a CUDA kernel and a CPU reference with the same signature.
 *
 * KERNEL_LIST is the one list of signatures. For each entry NAME it declares
 *   k_NAME_ref   a plain C reference (kernels/NAME_ref.c files), blocked for the cache where it matters;
 *   k_NAME_cuda  the CUDA version (kernels/NAME.cu files), when the cuda backend is built in;
 * and a member NAME of kernel_ops. The runtime calls through kernels_ref (sim backend: the pointers are host
 * views of simulated device memory) or kernels_cuda (cuda backend: real device pointers).
 *
 * Rules every kernel keeps:
 *   - It never allocates. Memory comes from the caller, who takes it from the caching allocator, so every
 *     device byte shows in the statistics. No cuBLAS or cuDNN (they allocate behind the allocator's back).
 *   - Buffers are contiguous and row-major; n counts elements; sizes of 0 are valid and do nothing.
 *   - For f16 and bf16 the arithmetic is done in f32 and rounded once when stored (dtype.h conversions);
 *     reductions accumulate in f32.
 *   - Elementwise outputs may alias their inputs (in-place ops pass the same pointer).
 *   - CUDA versions launch on the default stream and return without synchronising; they return OOM_ECUDA
 *     (with the CUDA error in the last-error record) when a launch fails, OOM_EINVAL for bad arguments.
 *   - Scalar operands that autograd produces on the device are passed as device pointers to one element, as
 *     PyTorch passes 0-dim tensors: a loss, its gradient and nll's total_weight have the kernel's dtype dt; the
 *     loss scaler's inv_scale and found_inf are f32.
 *
 * Random numbers are counter based, so the CPU and the GPU draw the same values: element i of a tensor with
 * seed s uses h = oom_rng_hash(s, i) (below). uniform: lo + (hi - lo) * u with u = (h >> 40) * 2^-24;
 * normal: Box-Muller, u1 = ((h >> 40) + 1) * 2^-24, u2 = ((h >> 16) & 0xffffff) * 2^-24,
 * z = sqrt(-2 ln u1) * cos(2 pi u2), value = mean + std * z; integers: lo + h % (hi - lo).
 */
#ifndef OOMLAB_KERNELS_H
#define OOMLAB_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/dtype.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* splitmix64's finaliser over seed + i * golden ratio: the random stream of kernels.h. */
static inline uint64_t oom_rng_hash(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* X(name, (parameters)). Semantics, one per line of the list:
 *
 * gemm             C[m x n] = alpha * op(A) * op(B) + beta * C, row-major. op(A) is m x k: A is stored m x k
 *                  (lda >= k) or, with ta, k x m (lda >= m); op(B) is k x n: B stored k x n (ldb >= n) or, with
 *                  tb, n x k (ldb >= k); ldc >= n. A, B, C have type dt (f32, f16 or bf16); f16/bf16 use
 *                  tensor cores with f32 accumulation. beta == 0: C is not read (it may hold NaN).
 * fill             x[i] = value
 * cast             dst[i] = (dst_dt) src[i]; same types: a copy (i64 only to i64)
 * add              out = a + alpha * b
 * mul              out = a * b
 * scale            out = s * a
 * relu             out = max(a, 0)
 * relu_backward    gi = y > 0 ? go : 0          (threshold_backward on the saved result y)
 * tanh             out = tanh(a)
 * tanh_backward    gi = go * (1 - y * y)        (on the saved result y)
 * bias_rows        out[i, j] = bias[j] for an m x n out (addmm's broadcast of the bias before beta = 1)
 * sum_rows         out[j] = sum over i of a[i, j], a is m x n (a bias gradient)
 * sum_all          out[0] = sum of a[0..n)
 * sum_squares      acc[0] += sum of a[i]^2 in double, acc in HOST memory: a reduction to the host, like .item()
 *                  (the ref adds in index order onto acc's value; cuda sums on the device in a fixed order, then
 *                  copies, so it synchronises). unzeroed_grads' grad_norm metric, no device memory used
 * log_softmax      out[i, :] = a[i, :] - logsumexp(a[i, :]), a is m x n
 * log_softmax_backward  gi[i, j] = go[i, j] - exp(y[i, j]) * sum over j of go[i, j]
 * nll_loss         loss[0] = -(1/m) sum over i of logp[i, target[i]]; total_weight[0] = m (reduction mean,
 *                  no class weights); target[i] in [0, n)
 * nll_loss_backward gi = 0, then gi[i, target[i]] = -go[0] / total_weight[0]
 * mse_loss         out[0] = (1/n) sum of (a - b)^2
 * mse_loss_backward gi = 2 * (a - b) * go[0] / n
 * sgd_step         torch.optim.SGD, one tensor: d = g + weight_decay * p; with momentum,
 *                  buf = first ? d : momentum * buf + (1 - dampening) * d, and d = nesterov ? d + momentum * buf
 *                  : buf; p -= lr * d. buf is not touched when momentum == 0 (it may be NULL then).
 * adam_step        torch.optim.Adam (not AdamW), one tensor: d = g + weight_decay * p;
 *                  m = beta1 m + (1 - beta1) d; v = beta2 v + (1 - beta2) d^2;
 *                  p -= (lr / bias_correction1) * m / (sqrt(v) / sqrt(bias_correction2) + eps)
 * adam_moments     torch.optim.Adam's default (foreach) update, first part, in place: m = lerp(m, g, 1 - beta1);
 *                  v = beta2 v + (1 - beta2) g^2  (_foreach_lerp_, _foreach_mul_, _foreach_addcmul_)
 * adam_denom       its temporary: denom = sqrt(v) / sqrt(bias_correction2) + eps  (_foreach_sqrt, _div_, _add_)
 * addcdiv          p += value * t1 / t2  (addcdiv_: the foreach update's last part, value = -lr / bc1)
 * rand_uniform     out[i] = uniform in [lo, hi) (see above)
 * rand_normal      out[i] = normal(mean, std)
 * rand_int         out[i] = integer in [lo, hi), hi > lo
 * unscale_check    a *= inv_scale[0]; if any element of a is inf or NaN (before or after), found_inf[0] = 1
 *                  (never cleared here): GradScaler's _amp_foreach_non_finite_check_and_unscale_
 *
 * The retained_graph scenario's kernels (kgru.h has the GRU cell's formulas):
 * pow_scalar       out = a ^ exponent (Tensor.pow(Scalar)): exponent 2 is a * a, 3 a * a * a, 1 a copy, 0 ones,
 *                  0.5 sqrt, -0.5 1 / sqrt, -1 1 / a, -2 1 / (a * a), as PyTorch special-cases them; else powf
 * gru_cell         PyTorch's _thnn_fused_gru_cell on CUDA: igates, hgates batch x 3 hidden, hx batch x hidden,
 *                  biases 3 hidden (both NULL: none); writes hy (batch x hidden) and the workspace (batch x
 *                  5 hidden: r, z, n, hx, hn + b_hn) that backward reads
 * gru_cell_backward _thnn_fused_gru_cell_backward: from grad_hy and the workspace, grad_igates and grad_hgates
 *                  (batch x 3 hidden) and grad_hx (batch x hidden, the direct part); the caller sums the bias
 *                  gradients (sum_rows), as PyTorch does
 * (dangling_tensors, inplace_ops:)
 * sigmoid          out = 1 / (1 + exp(-a))
 * sigmoid_backward gi = go * (1 - y) * y        (on the saved result y, as ATen's sigmoid_backward)
 * add_scalar       out = a + s                  (x + 1: the Python number is a wrapped scalar)
 *
 * The inference_oom scenario's kernel:
 * copy             dst[i] = src[i] for n elements of dt (any dtype, i64 included); dst and src do not overlap.
 *                  torch.cat along dim 0 is one copy per input into its rows of the result
 */
#define KERNEL_LIST(X)                                                                                          \
    X(gemm, (dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a,          \
             int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc))                        \
    X(fill, (dtype dt, void *x, int64_t n, float value))                                                        \
    X(cast, (dtype dst_dt, void *dst, dtype src_dt, const void *src, int64_t n))                               \
    X(add, (dtype dt, void *out, const void *a, const void *b, float alpha, int64_t n))                        \
    X(mul, (dtype dt, void *out, const void *a, const void *b, int64_t n))                                     \
    X(scale, (dtype dt, void *out, const void *a, float s, int64_t n))                                         \
    X(relu, (dtype dt, void *out, const void *a, int64_t n))                                                   \
    X(relu_backward, (dtype dt, void *gi, const void *go, const void *y, int64_t n))                           \
    X(tanh, (dtype dt, void *out, const void *a, int64_t n))                                                   \
    X(tanh_backward, (dtype dt, void *gi, const void *go, const void *y, int64_t n))                           \
    X(bias_rows, (dtype dt, void *out, const void *bias, int64_t m, int64_t n))                                \
    X(sum_rows, (dtype dt, void *out, const void *a, int64_t m, int64_t n))                                    \
    X(sum_all, (dtype dt, void *out, const void *a, int64_t n))                                                \
    X(sum_squares, (dtype dt, const void *a, int64_t n, double *acc))                                          \
    X(log_softmax, (dtype dt, void *out, const void *a, int64_t m, int64_t n))                                 \
    X(log_softmax_backward, (dtype dt, void *gi, const void *go, const void *y, int64_t m, int64_t n))         \
    X(nll_loss, (dtype dt, void *loss, void *total_weight, const void *logp, const int64_t *target, int64_t m, \
                 int64_t n))                                                                                    \
    X(nll_loss_backward, (dtype dt, void *gi, const void *go, const int64_t *target, const void *total_weight, \
                          int64_t m, int64_t n))                                                                \
    X(mse_loss, (dtype dt, void *out, const void *a, const void *b, int64_t n))                                \
    X(mse_loss_backward, (dtype dt, void *gi, const void *go, const void *a, const void *b, int64_t n))        \
    X(sgd_step, (dtype dt, void *p, const void *g, void *buf, int64_t n, float lr, float momentum,             \
                 float dampening, float weight_decay, bool nesterov, bool first))                               \
    X(adam_step, (dtype dt, void *p, const void *g, void *m, void *v, int64_t n, float lr, float beta1,        \
                  float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2))  \
    X(adam_moments, (dtype dt, void *m, void *v, const void *g, int64_t n, float beta1, float beta2))           \
    X(adam_denom, (dtype dt, void *denom, const void *v, int64_t n, float bias_correction2, float eps))         \
    X(addcdiv, (dtype dt, void *p, const void *t1, const void *t2, float value, int64_t n))                    \
    X(rand_uniform, (dtype dt, void *out, int64_t n, uint64_t seed, float lo, float hi))                       \
    X(rand_normal, (dtype dt, void *out, int64_t n, uint64_t seed, float mean, float std))                     \
    X(rand_int, (int64_t * out, int64_t n, uint64_t seed, int64_t lo, int64_t hi))                             \
    X(unscale_check, (dtype dt, void *a, int64_t n, const float *inv_scale, float *found_inf))                  \
    /* retained_graph: pow, the fused GRU cell */                                                               \
    X(pow_scalar, (dtype dt, void *out, const void *a, float exponent, int64_t n))                             \
    X(gru_cell, (dtype dt, void *hy, void *workspace, const void *igates, const void *hgates, const void *hx,  \
                 const void *b_ih, const void *b_hh, int64_t batch, int64_t hidden))                            \
    X(gru_cell_backward, (dtype dt, void *grad_igates, void *grad_hgates, void *grad_hx, const void *grad_hy,  \
                          const void *workspace, int64_t batch, int64_t hidden)) \
    /* dangling_tensors, inplace_ops */                                                                         \
    X(sigmoid, (dtype dt, void *out, const void *a, int64_t n))                                                \
    X(sigmoid_backward, (dtype dt, void *gi, const void *go, const void *y, int64_t n))                        \
    X(add_scalar, (dtype dt, void *out, const void *a, float s, int64_t n)) \
    /* inference_oom: cat's copy */                                                                             \
    X(copy, (dtype dt, void *dst, const void *src, int64_t n))

#define KERNEL_DECLARE_REF(name, params) oom_status k_##name##_ref params;
#define KERNEL_DECLARE_CUDA(name, params) oom_status k_##name##_cuda params;
#define KERNEL_MEMBER(name, params) oom_status(*name) params;

KERNEL_LIST(KERNEL_DECLARE_REF)
#ifdef OOM_HAVE_CUDA
KERNEL_LIST(KERNEL_DECLARE_CUDA)
/* The kernel k_gemm_cuda runs for these arguments on the current device: "ffma" (f32), "wgmma 128x256",
 * "wgmma 128x128" or "wgmma 128x64" (f16 / bf16 on compute capability 9.0 where TMA can describe the operands:
 * gemm_sm90.cu, with the tile it picks) or "mma.sync" (other f16 / bf16). */
const char *k_gemm_cuda_kernel(dtype dt, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
                               int64_t ldb);
/* Where f16 / bf16 take the Hopper path: GEMM_HOPPER_AUTO (the default: wherever it can, the widest tile that
 * fills the SMs), GEMM_HOPPER_OFF (never: the mma.sync path), GEMM_HOPPER_N256 / N128 / N64 (wherever it can,
 * with that tile). Returns the previous mode. The bench times both paths; the tests check every tile and the
 * mma.sync path on a Hopper GPU. */
typedef enum gemm_hopper_mode {
    GEMM_HOPPER_AUTO,
    GEMM_HOPPER_OFF,
    GEMM_HOPPER_N256,
    GEMM_HOPPER_N128,
    GEMM_HOPPER_N64
} gemm_hopper_mode;
gemm_hopper_mode k_gemm_cuda_hopper(gemm_hopper_mode mode);
#endif

/* One implementation of every kernel. */
typedef struct kernel_ops {
    const char *name; /* "ref" or "cuda" */
    KERNEL_LIST(KERNEL_MEMBER)
    oom_status (*sync)(void); /* wait for launched kernels (ref: nothing to wait for); OOM_ECUDA if one failed */
} kernel_ops;

extern const kernel_ops kernels_ref; /* kernels/kernels_ref.c */
#ifdef OOM_HAVE_CUDA
extern const kernel_ops kernels_cuda; /* kernels/kernels_cuda.cu */
#endif

OOM_END_DECLS

#endif
