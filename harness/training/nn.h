/* nn.h - torch.nn modules: Linear, RNNCell, GRUCell, and the canonical MLP of the scenarios.
 *
 * Parameters are leaf tensors that require grad, created in PyTorch's order (weight before bias, layer by
 * layer) and initialised as PyTorch does (Linear: kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in))
 * for the weight and the bias; RNNCell: U(-1/sqrt(hidden), 1/sqrt(hidden)) for all four), so the allocator sees
 * the same sequence of requests as for `nn.Sequential(...).to("cuda")`.
 *
 * MLP(width, depth, classes=10) is depth x [Linear(width, width), ReLU] then Linear(width, classes), on an input
 * of batch x width: nn.Sequential's 2 * depth + 1 modules. Its forward pass keeps, per hidden layer, one batch x
 * width activation alive for backward (ReLU saves its output, and the next Linear saves the same tensor as its
 * input); the first Linear saves the input. With checkpoint_segments = s > 1 the forward is
 * torch.utils.checkpoint.checkpoint_sequential(model, s, x, use_reentrant=False): the module list is cut into
 * segments of (2 * depth + 1) / s modules (a segment may start with a ReLU), every segment but the last runs
 * under autograd_checkpoint_nr and keeps only its input, and the last segment (with the rest of the modules)
 * runs normally. checkpoint_reentrant selects use_reentrant=True (autograd_checkpoint). s must not exceed the
 * module count (checkpoint_sequential's range() would get a step of 0: the forward fails with its ValueError).
 * checkpoint_blocks cuts the hidden blocks instead, each an nn.Sequential(Linear, ReLU), s >= 1 segments of
 * depth / s blocks, then runs the classifier: `h = checkpoint_sequential(blocks, s, x); out = model[2 * depth](h)`.
 * run_function's `input = functions[j](input)` then holds a block's input until the block returns, through its
 * ReLU: one activation more than over the flat module list, with or without a graph.
 */
#ifndef OOMLAB_NN_H
#define OOMLAB_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "runtime/autograd.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

typedef struct nn_linear {
    tensor *weight; /* [out, in] */
    tensor *bias;   /* [out] or NULL */
    int64_t in_features, out_features;
} nn_linear;

/* nn.Linear(in, out, bias, dtype). Returns OOM_OK or the rt's failure (the parameters made so far are freed). */
oom_status nn_linear_init(nn_linear *l, rt *r, int64_t in, int64_t out, bool bias, dtype dt);
void nn_linear_free(nn_linear *l);
tensor *nn_linear_forward(const nn_linear *l, tensor *x);

typedef struct nn_rnn_cell {
    tensor *weight_ih, *weight_hh, *bias_ih, *bias_hh;
    int64_t input_size, hidden_size;
} nn_rnn_cell;

/* nn.RNNCell(input_size, hidden_size, nonlinearity="tanh"). */
oom_status nn_rnn_cell_init(nn_rnn_cell *c, rt *r, int64_t input_size, int64_t hidden_size);
void nn_rnn_cell_free(nn_rnn_cell *c);
/* h' = tanh(linear(h, w_hh, b_hh).add_(linear(x, w_ih, b_ih))), as ATen's rnn_tanh_cell computes it. */
tensor *nn_rnn_cell_forward(const nn_rnn_cell *c, tensor *x, tensor *h);
/* The four parameters, in PyTorch's order; returns 4. */
size_t nn_rnn_cell_parameters(const nn_rnn_cell *c, tensor **out);

typedef struct nn_mlp {
    rt *rt;
    int64_t width, classes;
    int depth;
    nn_linear *layers; /* depth hidden layers, then the classifier */
    int checkpoint_segments; /* 0 or 1: off; else checkpoint_sequential over the modules */
    bool checkpoint_reentrant; /* use_reentrant=True (default false, as PyTorch recommends) */
    bool checkpoint_blocks;    /* checkpoint_sequential over the hidden blocks, then the classifier (see above) */
    ag_segment *segments; /* the checkpointed segments' contexts (they outlive a forward) */
} nn_mlp;

/* MLP(width, depth, classes) in dtype dt (f32 for training; f16/bf16 for a .half() model). NULL on failure
 * (recorded in the rt). */
nn_mlp *nn_mlp_new(rt *r, int64_t width, int depth, int64_t classes, dtype dt);
void nn_mlp_free(nn_mlp *m);
tensor *nn_mlp_forward(nn_mlp *m, tensor *x);
/* model.parameters(): weight and bias of each layer in order. Returns the count (2 * (depth + 1)). */
size_t nn_mlp_parameters(const nn_mlp *m, tensor **out, size_t cap);
/* model.half() / model.to(dtype): each parameter (and its .grad) cast, one at a time, as Module._apply does;
 * the parameters keep their identity, so optimizers made before still hold them. */
oom_status nn_mlp_to(nn_mlp *m, dtype dt);

/* ---- the retained_graph scenario: GRUCell -------------------------------------------------------------------- */

typedef struct nn_gru_cell {
    tensor *weight_ih, *weight_hh, *bias_ih, *bias_hh; /* [3 hidden, input], [3 hidden, hidden], [3 hidden] x 2 */
    int64_t input_size, hidden_size;
} nn_gru_cell;

/* nn.GRUCell(input_size, hidden_size): the four parameters in PyTorch's order, U(-1/sqrt(hidden), 1/sqrt(hidden)). */
oom_status nn_gru_cell_init(nn_gru_cell *c, rt *r, int64_t input_size, int64_t hidden_size);
void nn_gru_cell_free(nn_gru_cell *c);
/* GRUCell's CUDA path (ATen's GRUCell in RNN.cpp): igates = matmul(x, w_ih.t()), hgates = matmul(h, w_hh.t()), then
 * _thnn_fused_gru_cell(igates, hgates, h, b_ih, b_hh) (ops.h). h NULL: zeros, as nn.GRUCell.forward makes them. */
tensor *nn_gru_cell_forward(const nn_gru_cell *c, tensor *x, tensor *h);
/* The four parameters, in PyTorch's order; returns 4. */
size_t nn_gru_cell_parameters(const nn_gru_cell *c, tensor **out);

OOM_END_DECLS

#endif
