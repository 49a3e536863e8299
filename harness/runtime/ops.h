/* ops.h - differentiable tensor ops: torch.* and torch.nn.functional as the scenarios call them.
 *
 * Each op allocates its result from the caching allocator, launches its kernel (unless the rt is a dry run),
 * and, when grad mode is on and an input requires grad, records a node that saves exactly what PyTorch 2.11's
 * tools/autograd/derivatives.yaml saves for it:
 *
 *   op                         node              saves
 *   add, add_                  AddBackward0      nothing
 *   mul                        MulBackward0      other (if self needs grad), self (if other needs grad)
 *   mul_(s), mul by a number   MulBackward0      the number only (a wrapped 0-dim CPU tensor: no device bytes)
 *   add of a number, add_      AddBackward0      nothing
 *   sigmoid                    SigmoidBackward0  result
 *   t                          TBackward0        nothing (a view)
 *   mm                         MmBackward0       self (if mat2 needs grad), mat2 (if self needs grad)
 *   addmm / linear             AddmmBackward0    mat1 (if mat2 needs grad), mat2 (if mat1 needs grad)
 *   relu                       ReluBackward0     result
 *   tanh                       TanhBackward0     result
 *   log_softmax                LogSoftmaxBackward0  result
 *   nll_loss                   NllLossBackward0  self, target, total_weight (a second, 0-dim output)
 *   mse_loss                   MseLossBackward0  self, target
 *   sum, mean                  SumBackward0, MeanBackward0  sizes only
 *   to(dtype)                  ToCopyBackward0   the source dtype only
 *   clone, view, narrow        CloneBackward0, ViewBackward0, SliceBackward0  sizes only
 *
 * F.linear(x, w, b) is addmm(b, x, w.t()), so a layer keeps its input (and, when the input itself requires grad,
 * a view of its weight, whose version autograd checks), as in PyTorch. cross_entropy is log_softmax + nll_loss.
 * Under autocast (amp.h) the matmuls run in the autocast dtype, with weights cast once per region (the cast
 * cache), and log_softmax, nll_loss and mse_loss run in f32, following PyTorch's autocast op lists.
 *
 * All ops return a new reference or NULL with the failure recorded in the rt (tensor.h); a NULL operand gives
 * NULL. Shapes follow PyTorch's rules for what the scenarios use: elementwise ops need equal shapes; matmuls
 * are 2-D; log_softmax and the losses work on [batch, classes] rows.
 */
#ifndef OOMLAB_OPS_H
#define OOMLAB_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/compat.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

tensor *op_add(tensor *a, tensor *b, double alpha); /* a + alpha * b */
tensor *op_add_(tensor *self, tensor *other, double alpha); /* self += alpha * other; returns self (borrowed!) */
tensor *op_mul(tensor *a, tensor *b);
tensor *op_mul_(tensor *self, double s); /* self *= s (x.mul_(2)), in place; returns self (borrowed) */
tensor *op_clone(tensor *t);
/* self.copy_(src) of equal shape and dtype, both contiguous, in place, outside autograd (the way DDP's reducer copies
 * a gradient into its bucket and back, under no_grad): nothing allocated; returns self (borrowed) or NULL. */
tensor *op_copy_(tensor *self, tensor *src);
tensor *op_t(tensor *t);                                  /* 2-D transpose view */
tensor *op_view(tensor *t, int ndim, const int64_t *shape); /* reshape of a contiguous tensor */
tensor *op_narrow(tensor *t, int64_t start, int64_t length); /* rows [start, start+length) of dim 0: a view */
tensor *op_to(tensor *t, dtype dt);                       /* .to(dtype); same dtype: t itself, retained */
tensor *op_mm(tensor *a, tensor *b);
tensor *op_addmm(tensor *bias, tensor *a, tensor *b); /* bias (1-D, broadcast over rows) + a @ b */
tensor *op_linear(tensor *x, tensor *w, tensor *b);   /* F.linear: x @ w.t() + b; b may be NULL */
tensor *op_relu(tensor *t);
tensor *op_tanh(tensor *t);
tensor *op_log_softmax(tensor *t); /* over dim 1 of a 2-D tensor */
tensor *op_nll_loss(tensor *logp, tensor *target);          /* reduction mean */
tensor *op_cross_entropy(tensor *logits, tensor *target);   /* F.cross_entropy, reduction mean */
tensor *op_mse_loss(tensor *input, tensor *target);         /* reduction mean */
tensor *op_sum(tensor *t);                                  /* all elements, 0-dim result */
tensor *op_mean(tensor *t);

/* ---- oversize_batch ---- */
/* t / s for a Python number s (`loss / accum`): DivBackward0 saves no tensor (the divisor is a CPU scalar); like
 * PyTorch's CUDA kernel for a scalar divisor, it multiplies by 1 / s, forward and backward. */
tensor *op_div_scalar(tensor *t, double s);

/* A kernel launch's status: true when OK, else false with the failure recorded on r (rt_fail); every op funnels
 * its launches through it. (Not a validator: the *_check functions are.) */
bool op_kernel_ok(rt *r, oom_status st);

/* ---- the retained_graph scenario: pow, the fused GRU cell ----------------------------------------------------
 *   op                         node                        saves
 *   pow(Scalar)                PowBackward0                self (and the exponent)
 *   _thnn_fused_gru_cell       ThnnFusedGruCellBackward0   input_gates, hidden_gates, hx, input_bias, hidden_bias
 *                                                          and result1, the batch x 5 hidden workspace
 * pow's backward is FunctionsManual's pow_backward, grad * (e * self.pow(e - 1)): three temporaries of self's size
 * live at once. The fused cell is what GRUCell runs on CUDA (aten/src/ATen/native/RNN.cpp): it allocates the
 * workspace, then hy; derivatives.yaml names every input in its formula (the double-backward branch needs them),
 * so the node saves them all, plus the workspace; its backward (grad mode off) allocates grad_input_gates,
 * grad_hidden_gates, grad_hx, then the two bias gradients (sums over the batch), in that order. */
tensor *op_pow(tensor *t, double exponent); /* t.pow(exponent), exponent a Python number */
/* hy of at::_thnn_fused_gru_cell(igates, hgates, hx, b_ih, b_hh): igates and hgates batch x 3 hidden, hx batch x
 * hidden, the biases 3 hidden (both NULL: none). The workspace lives in the node (freed at once without grad). */
tensor *op_thnn_fused_gru_cell(tensor *igates, tensor *hgates, tensor *hx, tensor *b_ih, tensor *b_hh);
/* ---- dangling_tensors, inplace_ops ---- */
tensor *op_sigmoid(tensor *t);                  /* torch.sigmoid: SigmoidBackward0 saves its result */
tensor *op_mul_scalar(tensor *t, double s);     /* t * s (a Python number): MulBackward0, no device bytes saved */
tensor *op_add_scalar(tensor *t, double s);     /* t + s: AddBackward0, saves nothing */
tensor *op_add_scalar_(tensor *self, double s); /* self += s, in place; returns self (borrowed) */

/* ---- the inference_oom scenario: cat -------------------------------------------------------------------------
 *   op                         node              saves
 *   cat (dim 0)                CatBackward0      the inputs' sizes (and dtypes) only
 * torch.cat(tensors, dim=0): one new tensor of the summed rows (the same dtype and trailing shape for every
 * input), filled by one copy per input; nothing else is allocated. Its backward (cat_tensors_backward) hands each
 * input a view of the gradient's rows: no memory. With grad recording, at most AG_MAX_NEXT (autograd.h) inputs. */
tensor *op_cat(tensor *const *ts, int n);

OOM_END_DECLS

#endif
