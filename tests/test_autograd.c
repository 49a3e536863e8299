/* test_autograd.c - what autograd saves, what keeps a graph alive, backward, its errors, and gradients.
 *
 * Suite "autograd" (backend under test). Saved tensors are checked against tools/autograd/derivatives.yaml;
 * memory against the allocator's counters, with the bytes derived from PyTorch's 512-byte block rule; error
 * texts against PyTorch's; every op's gradient against central finite differences (f32, on the backend's
 * kernels: the CPU references on sim).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/amp.h"
#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "testutil.h"

static rt *open_rt(void)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r, "cannot open a runtime on %s", device_kind_str(test_backend()));
    return r;
}

/* Everything released: no tensor, node or device byte left. */
static void close_rt(rt *r)
{
    cr_assert_eq(r->live_tensors, 0, "%zu tensors leaked", r->live_tensors);
    cr_assert_eq(r->live_nodes, 0, "%zu autograd nodes leaked", r->live_nodes);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 0);
    rt_close(r);
}

#define OK(r) cr_assert(rt_ok(r), "runtime error: %s", rt_message(r))

static tensor *leaf(rt *r, int ndim, const int64_t *shape, bool requires_grad)
{
    tensor *t = tensor_randn(r, DT_F32, ndim, shape, 0.0, 1.0);
    cr_assert_not_null(t, "%s", rt_message(r));
    t->requires_grad = requires_grad;
    return t;
}

static void host(const tensor *t, float *out)
{
    cr_assert_eq(tensor_to_host(t, out), OOM_OK, "%s", rt_message(t->rt));
}

/* ---- what each node saves (derivatives.yaml) ---------------------------------------------------------- */

Test(autograd, linear_saves_input_and_weight_view_as_pytorch)
{
    rt *r = open_rt();
    nn_linear l;
    cr_assert_eq(nn_linear_init(&l, r, 8, 3, true, DT_F32), OOM_OK);
    tensor *x = leaf(r, SHAPE(4, 8), false);
    tensor *out = nn_linear_forward(&l, x);
    OK(r);
    ag_node *n = out->grad_fn;
    cr_assert_str_eq(n->fn->name, "AddmmBackward0");
    /* edges: self (bias) -> AccumulateGrad, mat1 (x) -> none, mat2 (w.t()) -> TBackward0 -> AccumulateGrad */
    cr_assert_str_eq(n->next[0].fn->fn->name, "AccumulateGrad");
    cr_assert_null(n->next[1].fn);
    cr_assert_str_eq(n->next[2].fn->fn->name, "TBackward0");
    cr_assert_str_eq(n->next[2].fn->next[0].fn->fn->name, "AccumulateGrad");
    cr_assert_eq(n->next[2].fn->next[0].fn->variable, l.weight);
    /* mat1 is saved because mat2 needs a gradient; mat2 is not, because mat1 (x) needs none */
    cr_assert(n->saved[0].defined && n->saved[0].t->st == x->st);
    cr_assert_not(n->saved[1].defined);

    /* when the input requires grad too, the weight's .t() view is saved as well (no bytes: a view) */
    nn_linear l2;
    cr_assert_eq(nn_linear_init(&l2, r, 3, 2, true, DT_F32), OOM_OK);
    tensor *h = op_relu(out);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *out2 = nn_linear_forward(&l2, h);
    OK(r);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, block_bytes(4 * 2 * 4), "only the output is new");
    ag_node *n2 = out2->grad_fn;
    cr_assert(n2->saved[0].defined && n2->saved[0].t->st == h->st);
    cr_assert(n2->saved[1].defined && n2->saved[1].t->st == l2.weight->st && n2->saved[1].t->transposed);
    tensor_release(out2);
    nn_linear_free(&l2);
    tensor_release(h);
    tensor_release(out);
    tensor_release(x);
    nn_linear_free(&l);
    close_rt(r);
}

Test(autograd, activations_save_their_result)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(5, 7), true);
    tensor *y = op_relu(x), *z = op_tanh(x), *lp = op_log_softmax(x);
    OK(r);
    const char *names[3] = {"ReluBackward0", "TanhBackward0", "LogSoftmaxBackward0"};
    tensor *outs[3] = {y, z, lp};
    for (int i = 0; i < 3; i++) {
        ag_node *n = outs[i]->grad_fn;
        cr_assert_str_eq(n->fn->name, names[i]);
        cr_assert_eq(n->nsaved, 1);
        cr_assert(n->saved[0].is_output, "%s saves its result", names[i]);
        cr_assert_eq(n->saved[0].t->st, outs[i]->st, "the result's storage, not the input's");
        cr_assert_null(n->saved[0].t->grad_fn, "a saved output does not own its node");
    }
    tensor_release(y);
    tensor_release(z);
    tensor_release(lp);
    tensor_release(x);
    close_rt(r);
}

Test(autograd, nll_loss_saves_self_target_and_total_weight)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(6, 10), true);
    tensor *y = tensor_randint(r, SHAPE(6), 0, 10);
    tensor *lp = op_log_softmax(x);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *loss = op_nll_loss(lp, y);
    OK(r);
    /* nll_loss_forward makes two 0-dim tensors: the loss and total_weight (kept by the node) */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, 2 * 512);
    ag_node *n = loss->grad_fn;
    cr_assert_str_eq(n->fn->name, "NllLossBackward0");
    cr_assert_eq(n->nsaved, 3);
    cr_assert_eq(n->saved[0].t->st, lp->st);
    cr_assert_eq(n->saved[1].t->st, y->st);
    cr_assert(n->saved[2].is_output && n->saved[2].t->ndim == 0);
    cr_assert_null(n->next[1].fn, "target is not differentiable");
    tensor_release(lp);
    /* the log-probabilities live on through the node */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), before + 2 * 512);
    tensor_release(loss);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), before - block_bytes(6 * 10 * 4));
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

Test(autograd, mul_saves_each_operand_for_the_other)
{
    rt *r = open_rt();
    tensor *a = leaf(r, SHAPE(3), true), *b = leaf(r, SHAPE(3), false);
    tensor *c = op_mul(a, b);
    OK(r);
    ag_node *n = c->grad_fn;
    cr_assert_str_eq(n->fn->name, "MulBackward0");
    cr_assert_not(n->saved[0].defined, "self is not needed: other needs no gradient");
    cr_assert(n->saved[1].defined && n->saved[1].t == b, "other is needed for self's gradient");
    tensor *d = op_add(a, b, 1.0), *e = op_mse_loss(a, b);
    cr_assert_eq(d->grad_fn->nsaved, 0, "AddBackward0 saves nothing");
    cr_assert_eq(e->grad_fn->nsaved, 2, "MseLossBackward0 saves self and target");
    tensor_release(c);
    tensor_release(d);
    tensor_release(e);
    tensor_release(a);
    tensor_release(b);
    close_rt(r);
}

/* mse_loss as CUDA runs it (Loss.cpp, structured): the 0-dim loss keeps the [128, 1] output's 512 B storage (resize_
 * never shrinks), and the unreduced loss, 512 B more, lives only inside the op, as the H100 recording of grad_accum's
 * nn.MSELoss shows; its value is still the mean of the squared differences, and backward's gradient is input-sized. */
Test(autograd, mse_loss_keeps_input_sized_storage_and_an_unreduced_temporary)
{
    rt *r = open_rt();
    tensor *a = leaf(r, SHAPE(128, 1), true), *b = leaf(r, SHAPE(128, 1), false);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *e = op_mse_loss(a, b);
    OK(r);
    cr_assert_eq(e->ndim, 0);
    cr_assert_eq(e->st->nbytes, 512);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, 512);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.peak") - before, 1024);
    float va[128], vb[128], loss;
    host(a, va);
    host(b, vb);
    host(e, &loss);
    double want = 0;
    for (int i = 0; i < 128; i++)
        want += ((double)va[i] - vb[i]) * ((double)va[i] - vb[i]) / 128;
    cr_assert_float_eq(loss, want, 1e-5 * (1 + want));
    cr_assert_eq(autograd_backward(e, NULL, false), OOM_OK);
    cr_assert_eq(a->grad->st->nbytes, 512);
    tensor_release(e);
    tensor_release(a);
    tensor_release(b);
    close_rt(r);
}

Test(autograd, no_grad_records_nothing)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(4, 4), true);
    tensor *y;
    RT_NO_GRAD(r) { y = op_relu(x); }
    cr_assert(r->grad_enabled, "the mode comes back");
    cr_assert_null(y->grad_fn);
    cr_assert_not(y->requires_grad);
    cr_assert_eq(r->live_nodes, 0);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

/* ---- what keeps a graph alive, and backward ---------------------------------------------------------- */

/* The canonical leak: with grad on, each loss holds its whole graph (PyTorch: total = total + loss). */
Test(autograd, loss_holds_the_saved_activations_until_backward_or_release)
{
    rt *r = open_rt();
    const int64_t B = 16, W = 64, C = 10;
    nn_mlp *m = nn_mlp_new(r, W, 2, C, DT_F32);
    tensor *x = leaf(r, SHAPE(B, W), false);
    tensor *y = tensor_randint(r, SHAPE(B), 0, C);
    OK(r);
    int64_t base = test_stat(r, "allocated_bytes.all.current");
    tensor *out = nn_mlp_forward(m, x);
    tensor *loss = op_cross_entropy(out, y);
    tensor_release(out); /* the logits are not saved: log_softmax keeps its result */
    OK(r);
    /* saved: 2 ReLU outputs (also the next Linear's input), the log-probabilities, total_weight; + the loss */
    int64_t graph = 2 * block_bytes(B * W * 4) + block_bytes(B * C * 4) + 512;
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base + graph + 512);

    cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
    /* backward freed the saved tensors; the parameters now have .grad of their own size */
    int64_t params = 2 * (block_bytes(W * W * 4) + block_bytes(W * 4)) + block_bytes(C * W * 4) + block_bytes(C * 4);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base + params + 512);
    tensor_release(loss);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base + params);
    cr_assert_eq(r->live_nodes, 0, "no loss, no graph");
    tensor_release(x);
    tensor_release(y);
    nn_mlp_free(m);
    close_rt(r);
}

Test(autograd, second_backward_fails_as_in_pytorch)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(3, 3), true);
    tensor *y = op_relu(x), *s = op_sum(y);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_EAUTOGRAD);
    cr_assert_str_eq(rt_message(r),
                     "Trying to backward through the graph a second time (or directly access saved tensors after "
                     "they have already been freed). Saved intermediate values of the graph are freed when you call "
                     ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                     "graph a second time or if you need to access saved tensors after calling backward.");
    rt_clear(r);
    tensor_release(s);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

Test(autograd, retain_graph_keeps_saved_tensors_and_accumulates)
{
    rt *r = open_rt();
    float xv[4] = {1, -2, 3, -4};
    tensor *x = tensor_from_host(r, DT_F32, SHAPE(4), xv);
    x->requires_grad = true;
    tensor *y = op_relu(x), *s = op_sum(y);
    int64_t held = test_stat(r, "allocated_bytes.all.current");
    cr_assert_eq(autograd_backward(s, NULL, true), OOM_OK);
    int64_t grad_bytes = block_bytes(16);
    /* the ones_like seed and every temporary are gone; the saved result stays */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), held + grad_bytes);
    int64_t allocs = test_stat(r, "allocation.all.allocated");
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    float g[4];
    if (r->computes) {
        host(x->grad, g);
        float want[4] = {2, 0, 2, 0};
        for (int i = 0; i < 4; i++)
            cr_assert_float_eq(g[i], want[i], 0, "grad[%d]", i);
    }
    /* the second gradient was added in place: one seed, one relu gradient, one expand; no new .grad */
    cr_assert_eq(test_stat(r, "allocation.all.allocated") - allocs, 3);
    /* the saved result's alias is gone, but y still holds the storage */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), held + grad_bytes);
    tensor_release(s);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

Test(autograd, first_gradient_is_taken_over_not_copied)
{
    rt *r = open_rt();
    tensor *w = leaf(r, SHAPE(32, 16), true);
    tensor *x = leaf(r, SHAPE(8, 16), false);
    tensor *out = op_linear(x, w, NULL);
    tensor *loss = op_sum(out);
    OK(r);
    int64_t allocs = test_stat(r, "allocation.all.allocated");
    cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK);
    /* seed (ones), SumBackward's expand, the mm for w's gradient: three; no clone for AccumulateGrad */
    cr_assert_eq(test_stat(r, "allocation.all.allocated") - allocs, 3);
    cr_assert_not_null(w->grad);
    cr_assert_not(w->grad->transposed, "(grad.t() @ x).t().t(): contiguous, in w's layout");
    cr_assert_eq(w->grad->st->refcount, 1);
    tensor_release(loss);
    tensor_release(out);
    tensor_release(x);
    tensor_release(w);
    close_rt(r);
}

Test(autograd, inplace_change_of_a_saved_tensor_fails_as_in_pytorch)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(2, 3), true);
    tensor *y = op_relu(x);
    tensor *z = op_tanh(y);
    tensor *one = tensor_full(r, DT_F32, SHAPE(2, 3), 1.0);
    cr_assert_not_null(op_add_(y, one, 1.0), "%s", rt_message(r)); /* y is ReLU's saved result */
    tensor *s = op_sum(z);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_EAUTOGRAD);
    cr_assert_str_eq(rt_message(r),
                     "one of the variables needed for gradient computation has been modified by an inplace "
                     "operation: [torch.cuda.FloatTensor [2, 3]], which is output 0 of ReluBackward0, is at version "
                     "1; expected version 0 instead. Hint: enable anomaly detection to find the operation that "
                     "failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).");
    rt_clear(r);
    tensor_release(s);
    tensor_release(one);
    tensor_release(z);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

Test(autograd, inplace_on_a_leaf_that_requires_grad_is_refused)
{
    rt *r = open_rt();
    tensor *w = leaf(r, SHAPE(4), true), *d = leaf(r, SHAPE(4), false);
    cr_assert_null(op_add_(w, d, 1.0));
    cr_assert_eq(rt_status(r), OOM_EAUTOGRAD);
    cr_assert_str_eq(rt_message(r), "a leaf Variable that requires grad is being used in an in-place operation.");
    rt_clear(r);
    RT_NO_GRAD(r) { cr_assert_not_null(op_add_(w, d, 1.0), "allowed under no_grad (an optimizer step)"); }
    cr_assert_eq(w->st->version, 1);
    tensor_release(w);
    tensor_release(d);
    close_rt(r);
}

Test(autograd, backward_errors_of_pytorch)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(3), false);
    cr_assert_eq(autograd_backward(x, NULL, false), OOM_EAUTOGRAD);
    cr_assert_str_eq(rt_message(r), "element 0 of tensors does not require grad and does not have a grad_fn");
    rt_clear(r);
    x->requires_grad = true;
    tensor *y = op_relu(x);
    cr_assert_eq(autograd_backward(y, NULL, false), OOM_EAUTOGRAD);
    cr_assert_str_eq(rt_message(r), "grad can be implicitly created only for scalar outputs");
    rt_clear(r);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

/* Optimizer steps between backward passes through a retained, chained graph: the RNN story. */
Test(autograd, rnn_hidden_state_chain_grows_and_breaks_after_a_step)
{
    rt *r = open_rt();
    const int64_t B = 4, I = 8, H = 16;
    nn_rnn_cell cell;
    cr_assert_eq(nn_rnn_cell_init(&cell, r, I, H), OOM_OK);
    tensor *params[4];
    nn_rnn_cell_parameters(&cell, params);
    optimizer *opt = optim_sgd(r, params, 4, 0.01, 0.0, 0.0, 0.0, false);
    tensor *h = NULL;
    int64_t last = 0, growth = -1;
    for (int step = 0; step < 4; step++) {
        tensor *x = leaf(r, SHAPE(B, I), false);
        tensor_assign(&h, nn_rnn_cell_forward(&cell, x, h)); /* no detach: the chain grows */
        tensor *loss = op_sum(h);
        cr_assert_eq(autograd_backward(loss, NULL, true), OOM_OK, "step %d: %s", step, rt_message(r));
        tensor_release(loss);
        tensor_release(x);
        int64_t now = test_stat(r, "allocated_bytes.all.current");
        if (step >= 2) { /* from then on, every step adds one step's saved tensors */
            if (growth < 0)
                growth = now - last;
            cr_assert_eq(now - last, growth, "step %d", step);
        }
        last = now;
    }
    /* per step the graph keeps that step's x (saved by linear_ih) and h (tanh's result, then saved as the next
     * step's linear_hh input) */
    cr_assert_eq(growth, block_bytes(B * H * 4) + block_bytes(B * I * 4));
    cr_assert_eq(optim_step(opt), OOM_OK);
    tensor *x = leaf(r, SHAPE(B, I), false);
    tensor_assign(&h, nn_rnn_cell_forward(&cell, x, h));
    tensor *loss = op_sum(h);
    cr_assert_eq(autograd_backward(loss, NULL, true), OOM_EAUTOGRAD);
    char want[512];
    snprintf(want, sizeof want,
             "one of the variables needed for gradient computation has been modified by an inplace operation: "
             "[torch.cuda.FloatTensor [%lld, %lld]], which is output 0 of AsStridedBackward0, is at version 2; "
             "expected version 1 instead. Hint: enable anomaly detection to find the operation that failed to "
             "compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).",
             (long long)H, (long long)H);
    cr_assert_str_eq(rt_message(r), want);
    rt_clear(r);
    tensor_release(loss);
    tensor_release(x);
    tensor_release(h);
    optim_free(opt);
    nn_rnn_cell_free(&cell);
    close_rt(r);
}

Test(autograd, a_long_chain_is_freed_without_recursion)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(1), true);
    tensor *h = tensor_retain(x);
    for (int i = 0; i < 200000; i++)
        tensor_assign(&h, op_add(h, x, 1.0));
    OK(r);
    cr_assert_geq(r->live_nodes, 200000);
    tensor_release(h);
    cr_assert_eq(r->live_nodes, 0);
    tensor_release(x);
    close_rt(r);
}

Test(autograd, gradients_meeting_at_a_node_are_summed)
{
    rt *r = open_rt();
    float v[3] = {0.5f, -1.0f, 2.0f};
    tensor *x = tensor_from_host(r, DT_F32, SHAPE(3), v);
    x->requires_grad = true;
    tensor *a = op_mul(x, x);   /* d/dx = 2x */
    tensor *b = op_add(a, x, 3.0); /* + 3 */
    tensor *c = op_add(b, a, 1.0); /* a twice: 4x + 3 */
    tensor *s = op_sum(c);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    if (r->computes) {
        float g[3];
        host(x->grad, g);
        for (int i = 0; i < 3; i++)
            cr_assert_float_eq(g[i], 4 * v[i] + 3, 1e-6, "grad[%d] = %f", i, g[i]);
    }
    tensor *ts[] = {s, c, b, a, x};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

/* ---- checkpointing ----------------------------------------------------------------------------------- */

Test(autograd, checkpoint_sequential_keeps_segment_inputs_and_gives_the_same_gradients)
{
    const int64_t B = 8, W = 32, C = 10;
    float grads[2][32 * 32];
    int64_t held[2];
    for (int ck = 0; ck < 2; ck++) {
        rt *r = open_rt();
        nn_mlp *m = nn_mlp_new(r, W, 4, C, DT_F32);
        m->checkpoint_segments = ck ? 2 : 0;
        tensor *x = leaf(r, SHAPE(B, W), false);
        tensor *y = tensor_randint(r, SHAPE(B), 0, C);
        int64_t base = test_stat(r, "allocated_bytes.all.current");
        tensor *out = nn_mlp_forward(m, x);
        tensor *loss = op_cross_entropy(out, y);
        tensor_release(out);
        OK(r);
        held[ck] = test_stat(r, "allocated_bytes.all.current") - base;
        cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
        cr_assert_not_null(m->layers[0].weight->grad, "the first segment's parameters get gradients");
        if (r->computes)
            host(m->layers[0].weight->grad, grads[ck]);
        tensor_release(loss);
        tensor_release(x);
        tensor_release(y);
        nn_mlp_free(m);
        close_rt(r);
    }
    int64_t act = block_bytes(B * W * 4), tail = block_bytes(B * C * 4) + 512 + 512; /* log-probs, total_weight, loss */
    /* plain: the four ReLU outputs. Two segments: the first (blocks 0-1) runs under no_grad and keeps only its
     * input x (not new); the second keeps its input a2 and the outputs a3, a4 */
    cr_assert_eq(held[0], 4 * act + tail);
    cr_assert_eq(held[1], 3 * act + tail);
    for (int i = 0; i < W * W; i++)
        cr_assert_float_eq(grads[0][i], grads[1][i], 1e-6, "layer 0 weight grad[%d]", i);
}

/* `loss / accum`: DivBackward0 keeps no tensor (the divisor is a number), so the quotient is the only new block. */
Test(autograd, div_by_a_number_saves_nothing)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(3, 4), true);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *y = op_div_scalar(x, 4.0);
    OK(r);
    cr_assert_str_eq(y->grad_fn->fn->name, "DivBackward0");
    cr_assert_eq(y->grad_fn->nsaved, 0);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, 512);
    if (r->computes) {
        float a[12], b[12];
        host(x, a);
        host(y, b);
        for (int i = 0; i < 12; i++)
            cr_assert_eq(b[i], a[i] / 4, "element %d", i);
    }
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

/* checkpoint_sequential(model, 3, x, use_reentrant=False) cuts nn.Sequential's nine modules [L0 R0 L1 | R1 L2 R2 |
 * L3 R3 L4] into segments of three: the checkpointed ones keep their inputs (x, not new here, and L1's output), the
 * last keeps what it saves (R2's output a2 as L3's input, a3); the plain model keeps a0..a3. Cutting by hidden
 * blocks instead would keep a0 as the second segment's input and save nothing. The gradients are the plain
 * model's, bit for bit, with either checkpoint. */
Test(autograd, checkpoint_sequential_cuts_the_module_list_as_pytorch)
{
    const int64_t B = 8, W = 32, C = 10;
    float grads[3][2][32 * 32];
    int64_t held[3];
    for (int mode = 0; mode < 3; mode++) { /* plain, use_reentrant=False, use_reentrant=True */
        rt *r = open_rt();
        nn_mlp *m = nn_mlp_new(r, W, 4, C, DT_F32);
        m->checkpoint_segments = mode ? 3 : 0;
        m->checkpoint_reentrant = mode == 2;
        tensor *x = leaf(r, SHAPE(B, W), false);
        tensor *y = tensor_randint(r, SHAPE(B), 0, C);
        int64_t base = test_stat(r, "allocated_bytes.all.current");
        tensor *out = nn_mlp_forward(m, x);
        tensor *loss = op_cross_entropy(out, y);
        tensor_release(out);
        OK(r);
        held[mode] = test_stat(r, "allocated_bytes.all.current") - base;
        cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
        if (r->computes) {
            host(m->layers[0].weight->grad, grads[mode][0]); /* in the first segment */
            host(m->layers[2].weight->grad, grads[mode][1]); /* in the second */
        }
        tensor_release(loss);
        tensor_release(x);
        tensor_release(y);
        nn_mlp_free(m);
        close_rt(r);
    }
    int64_t act = block_bytes(B * W * 4), tail = block_bytes(B * C * 4) + 512 + 512;
    cr_assert_eq(held[0], 4 * act + tail);
    cr_assert_eq(held[1], 3 * act + tail, "use_reentrant=False keeps L1's output, a2 and a3");
    cr_assert_eq(held[2], 3 * act + tail, "use_reentrant=True keeps the same");
    for (int mode = 1; mode < 3; mode++)
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < W * W; i++)
                cr_assert_eq(grads[mode][l][i], grads[0][l][i], "mode %d layer %d weight grad[%d]", mode, 2 * l, i);
}

/* The inference_oom twin: blocks = [nn.Sequential(Linear, ReLU), ...]; checkpoint_sequential(blocks, 2, x,
 * use_reentrant=False) under no_grad, then the classifier. run_function's `input = functions[j](input)` holds a
 * block's input until the block returns, so inside block j the previous block's output stays alive beside the
 * Linear's output and the ReLU's; and checkpoint_sequential's own `input` holds the last segment's input while it
 * runs. MLP(W, 4), 2 segments of 2 blocks: in block 3, a1 (the last segment's input) + a2 + Linear 3's output + a3:
 * four activations above x. Over the flat module list [L0 R0 L1 R1 | L2 R2 L3 R3 L4] nothing holds a ReLU's input
 * but the ReLU's own frame: a1 + L3's output + a3, three; the plain forward two. */
Test(autograd, checkpoint_sequential_over_blocks_holds_each_block_input_under_no_grad)
{
    const int64_t B = 8, W = 32, C = 10;
    int64_t peak[3];
    for (int mode = 0; mode < 3; mode++) { /* plain, flat module list, hidden blocks */
        rt *r = open_rt();
        nn_mlp *m = nn_mlp_new(r, W, 4, C, DT_F32);
        m->checkpoint_segments = mode ? 2 : 0;
        m->checkpoint_blocks = mode == 2;
        tensor *x = leaf(r, SHAPE(B, W), false);
        OK(r);
        int64_t base = test_stat(r, "allocated_bytes.all.current");
        cachealloc_reset_peak(r->ca);
        RT_NO_GRAD(r)
        {
            tensor *out = nn_mlp_forward(m, x);
            OK(r);
            cr_assert_eq(out->grad_fn, NULL, "no graph under no_grad");
            tensor_release(out);
        }
        peak[mode] = test_stat(r, "allocated_bytes.all.peak") - base;
        cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base, "mode %d leaves nothing", mode);
        tensor_release(x);
        nn_mlp_free(m);
        close_rt(r);
    }
    int64_t act = block_bytes(B * W * 4);
    cr_assert_eq(peak[0], 2 * act, "plain: a Linear's output and its ReLU's");
    cr_assert_eq(peak[1], 3 * act, "flat list: the last segment's input, a Linear's output and its ReLU's");
    cr_assert_eq(peak[2], 4 * act, "blocks: the last segment's input, the block's input, Linear's and ReLU's outputs");
}

/* checkpoint_sequential(blocks, segments, x): segment_size = len(blocks) // segments; 0 when segments exceed the
 * blocks, and range()'s step of 0 raises ValueError, as over the module list. */
Test(autograd, checkpoint_sequential_over_blocks_with_more_segments_than_blocks_fails_as_pytorch)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 8, 2, 4, DT_F32); /* two blocks, five modules */
    m->checkpoint_segments = 3;
    m->checkpoint_blocks = true;
    tensor *x = leaf(r, SHAPE(2, 8), false);
    cr_assert_null(nn_mlp_forward(m, x));
    cr_assert_not_null(strstr(rt_message(r), "range() arg 3 must not be zero"), "%s", rt_message(r));
    cr_assert_not_null(strstr(rt_message(r), "3 segments of 2 blocks"), "%s", rt_message(r));
    rt_clear(r);
    tensor_release(x);
    nn_mlp_free(m);
    close_rt(r);
}

Test(autograd, checkpoint_sequential_with_more_segments_than_modules_fails_as_pytorch)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 8, 1, 4, DT_F32); /* three modules */
    m->checkpoint_segments = 4;
    tensor *x = leaf(r, SHAPE(2, 8), false);
    cr_assert_null(nn_mlp_forward(m, x));
    cr_assert_not_null(strstr(rt_message(r), "range() arg 3 must not be zero"), "%s", rt_message(r));
    rt_clear(r);
    tensor_release(x);
    nn_mlp_free(m);
    close_rt(r);
}

/* A checkpointed segment, then a head: checkpoint(seg, x) -> Linear(8, 4) -> sum. */
static nn_linear *ck_seg_lin;
static tensor *seg_linear(void *ctx, tensor *x)
{
    (void)ctx;
    return nn_linear_forward(ck_seg_lin, x);
}
static tensor *seg_linear_relu(void *ctx, tensor *x)
{
    (void)ctx;
    tensor *h = nn_linear_forward(ck_seg_lin, x), *y = op_relu(h);
    tensor_release(h);
    return y;
}

/* Device allocations made by one backward through checkpoint(seg)(x) -> head -> sum, for mode 0 (no checkpoint),
 * 1 (use_reentrant=False), 2 (use_reentrant=True). */
static int64_t backward_allocations(ag_checkpoint_fn seg, int mode)
{
    rt *r = open_rt();
    nn_linear l, head;
    nn_linear_init(&l, r, 8, 8, true, DT_F32);
    nn_linear_init(&head, r, 8, 4, true, DT_F32);
    ck_seg_lin = &l;
    tensor *x = leaf(r, SHAPE(2, 8), false);
    tensor *h = mode == 0 ? seg(NULL, x) : mode == 1 ? autograd_checkpoint_nr(seg, NULL, x)
                                                     : autograd_checkpoint(seg, NULL, x);
    tensor *out = nn_linear_forward(&head, h), *s = op_sum(out);
    OK(r);
    int64_t before = test_stat(r, "allocation.all.allocated");
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    int64_t n = test_stat(r, "allocation.all.allocated") - before;
    cr_assert_not_null(l.weight->grad);
    tensor *ts[] = {x, h, out, s};
    for (int i = 0; i < 4; i++)
        tensor_release(ts[i]);
    nn_linear_free(&l);
    nn_linear_free(&head);
    close_rt(r);
    return n;
}

/* Non-reentrant checkpoint stops recomputing once every saved tensor is back (checkpoint.py's Rule 5): a segment
 * that ends with a Linear saves that Linear's input before computing, so its output is never recomputed; a
 * segment that ends with a ReLU needs the ReLU's output, so both outputs are. The reentrant variant always reruns
 * the whole segment. */
Test(autograd, checkpoint_nr_stops_the_recompute_early)
{
    int64_t plain = backward_allocations(seg_linear, 0);
    cr_assert_eq(backward_allocations(seg_linear, 1), plain, "nothing recomputed for a Linear-ending segment");
    cr_assert_eq(backward_allocations(seg_linear, 2), plain + 1, "reentrant recomputes the Linear's output");
    plain = backward_allocations(seg_linear_relu, 0);
    cr_assert_eq(backward_allocations(seg_linear_relu, 1), plain + 2);
    cr_assert_eq(backward_allocations(seg_linear_relu, 2), plain + 2);
}

/* With retain_graph the recomputed tensors still go once used (Rule 4): after backward only the gradients are
 * new; a second backward recomputes and accumulates the same gradients again. */
Test(autograd, checkpoint_nr_recomputes_for_each_backward)
{
    rt *r = open_rt();
    nn_linear l, head;
    nn_linear_init(&l, r, 8, 8, true, DT_F32);
    nn_linear_init(&head, r, 8, 4, true, DT_F32);
    ck_seg_lin = &l;
    tensor *x = leaf(r, SHAPE(2, 8), true);
    tensor *h = autograd_checkpoint_nr(seg_linear_relu, NULL, x);
    tensor *out = nn_linear_forward(&head, h), *s = op_sum(out);
    OK(r);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    cr_assert_eq(autograd_backward(s, NULL, true), OOM_OK, "%s", rt_message(r));
    /* x's gradient and the four parameters', one 512-byte block each */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, 5 * 512);
    float g1[64], g2[64];
    if (r->computes)
        host(l.weight->grad, g1);
    cr_assert_eq(autograd_backward(s, NULL, true), OOM_OK, "%s", rt_message(r));
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, 5 * 512);
    if (r->computes) {
        host(l.weight->grad, g2);
        for (int i = 0; i < 64; i++)
            cr_assert_eq(g2[i], 2 * g1[i], "grad[%d]", i);
    }
    tensor *ts[] = {x, h, out, s};
    for (int i = 0; i < 4; i++)
        tensor_release(ts[i]);
    nn_linear_free(&l);
    nn_linear_free(&head);
    close_rt(r);
}

/* ---- gradients against finite differences -------------------------------------------------------------- */

typedef tensor *(*fwd_fn)(tensor **in);

/* L = sum(f(in) * w) for a fixed random w. */
static tensor *objective(fwd_fn f, tensor **in, tensor *w)
{
    tensor *out = f(in);
    tensor *prod = op_mul(out, w);
    tensor *s = op_sum(prod);
    tensor_release(out);
    tensor_release(prod);
    return s;
}

static double objective_value(fwd_fn f, tensor **in, tensor *w)
{
    rt *r = w->rt;
    double v;
    RT_NO_GRAD(r)
    {
        tensor *s = objective(f, in, w);
        v = tensor_item(s);
        tensor_release(s);
    }
    return v;
}

/* Check d L / d in[i] for every input that requires grad, element by element. */
static void gradcheck(rt *r, fwd_fn f, tensor **in, int n, double eps, double tol)
{
    if (!r->computes)
        return;
    tensor *probe = f(in);
    cr_assert_not_null(probe, "%s", rt_message(r));
    tensor *w = tensor_randn(r, DT_F32, probe->ndim, probe->shape, 0.0, 1.0);
    tensor_release(probe);
    tensor *s = objective(f, in, w);
    cr_assert_not_null(s, "%s", rt_message(r));
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    tensor_release(s);
    for (int i = 0; i < n; i++) {
        tensor *x = in[i];
        if (!x->requires_grad)
            continue;
        cr_assert_not_null(x->grad, "input %d got no gradient", i);
        int64_t numel = tensor_numel(x);
        float *v = malloc((size_t)numel * sizeof *v), *g = malloc((size_t)numel * sizeof *g);
        host(x, v);
        host(x->grad, g);
        for (int64_t e = 0; e < numel; e++) {
            float keep = v[e];
            v[e] = keep + (float)eps;
            device_copy_htod(r->dev, x->st->ptr + x->offset, v, tensor_nbytes(x));
            double lp = objective_value(f, in, w);
            v[e] = keep - (float)eps;
            device_copy_htod(r->dev, x->st->ptr + x->offset, v, tensor_nbytes(x));
            double lm = objective_value(f, in, w);
            v[e] = keep;
            device_copy_htod(r->dev, x->st->ptr + x->offset, v, tensor_nbytes(x));
            double num = (lp - lm) / (2 * eps);
            cr_assert(fabs(num - g[e]) <= tol * (1.0 + fabs(num)), "input %d element %lld: analytic %g, numeric %g",
                      i, (long long)e, g[e], num);
        }
        free(v);
        free(g);
        tensor_release(x->grad);
        x->grad = NULL;
    }
    tensor_release(w);
    OK(r);
}

static tensor *f_add(tensor **in) { return op_add(in[0], in[1], -2.5); }
static tensor *f_mul(tensor **in) { return op_mul(in[0], in[1]); }
static tensor *f_mm(tensor **in) { return op_mm(in[0], in[1]); }
static tensor *f_mm_t(tensor **in)
{
    tensor *at = op_t(in[0]), *bt = op_t(in[1]);
    tensor *out = op_mm(at, bt); /* both operands column-major */
    tensor_release(at);
    tensor_release(bt);
    return out;
}
static tensor *f_linear(tensor **in) { return op_linear(in[0], in[1], in[2]); }
static tensor *f_relu(tensor **in) { return op_relu(in[0]); }
static tensor *f_tanh(tensor **in) { return op_tanh(in[0]); }
static tensor *f_log_softmax(tensor **in) { return op_log_softmax(in[0]); }
static tensor *f_cross_entropy(tensor **in) { return op_cross_entropy(in[0], in[1]); }
static tensor *f_mse(tensor **in) { return op_mse_loss(in[0], in[1]); }
static tensor *f_sum(tensor **in) { return op_sum(in[0]); }
static tensor *f_mean(tensor **in) { return op_mean(in[0]); }
static tensor *f_view(tensor **in) { return op_view(in[0], SHAPE(6, 2)); }
static tensor *f_narrow(tensor **in) { return op_narrow(in[0], 1, 2); }
static tensor *f_clone(tensor **in) { return op_clone(in[0]); }
static tensor *f_addmm_inplace(tensor **in)
{
    tensor *a = op_linear(in[0], in[1], in[2]);
    tensor *b = op_linear(in[0], in[1], NULL);
    tensor *c = op_add_(a, b, 0.5); /* in-place on a non-leaf: rebase_history */
    tensor *out = op_tanh(c);
    tensor_release(a);
    tensor_release(b);
    return out;
}

#define GC(name, fn, ...)                                                                                      \
    Test(gradcheck, name)                                                                                      \
    {                                                                                                          \
        rt *r = open_rt();                                                                                     \
        tensor *in[] = {__VA_ARGS__};                                                                          \
        int n = (int)(sizeof in / sizeof in[0]);                                                               \
        gradcheck(r, fn, in, n, 1e-2, 2e-3);                                                                   \
        for (int i = 0; i < n; i++)                                                                            \
            tensor_release(in[i]);                                                                             \
        close_rt(r);                                                                                           \
    }

GC(add, f_add, leaf(r, SHAPE(3, 4), true), leaf(r, SHAPE(3, 4), true))
GC(mul, f_mul, leaf(r, SHAPE(3, 4), true), leaf(r, SHAPE(3, 4), true))
GC(mm, f_mm, leaf(r, SHAPE(3, 5), true), leaf(r, SHAPE(5, 4), true))
GC(mm_transposed_operands, f_mm_t, leaf(r, SHAPE(5, 3), true), leaf(r, SHAPE(4, 5), true))
GC(linear, f_linear, leaf(r, SHAPE(4, 6), true), leaf(r, SHAPE(3, 6), true), leaf(r, SHAPE(3), true))
GC(linear_inplace_add_tanh, f_addmm_inplace, leaf(r, SHAPE(4, 6), true), leaf(r, SHAPE(3, 6), true),
   leaf(r, SHAPE(3), true))
GC(relu, f_relu, leaf(r, SHAPE(4, 5), true))
GC(tanh, f_tanh, leaf(r, SHAPE(4, 5), true))
GC(log_softmax, f_log_softmax, leaf(r, SHAPE(4, 7), true))
GC(cross_entropy, f_cross_entropy, leaf(r, SHAPE(5, 7), true), tensor_randint(r, SHAPE(5), 0, 7))
GC(mse_loss, f_mse, leaf(r, SHAPE(3, 4), true), leaf(r, SHAPE(3, 4), true))
GC(sum, f_sum, leaf(r, SHAPE(3, 4), true))
GC(mean, f_mean, leaf(r, SHAPE(3, 4), true))
GC(view, f_view, leaf(r, SHAPE(3, 4), true))
GC(narrow, f_narrow, leaf(r, SHAPE(4, 3), true))
GC(clone, f_clone, leaf(r, SHAPE(4, 3), true))
static tensor *f_div_scalar(tensor **in) { return op_div_scalar(in[0], 4.0); }
GC(div_scalar, f_div_scalar, leaf(r, SHAPE(3, 4), true))

static nn_rnn_cell *gc_cell;
static tensor *f_rnn(tensor **in) { return nn_rnn_cell_forward(gc_cell, in[0], in[1]); }
Test(gradcheck, rnn_cell)
{
    rt *r = open_rt();
    nn_rnn_cell cell;
    cr_assert_eq(nn_rnn_cell_init(&cell, r, 3, 4), OOM_OK);
    gc_cell = &cell;
    tensor *in[2] = {leaf(r, SHAPE(2, 3), true), leaf(r, SHAPE(2, 4), true)};
    gradcheck(r, f_rnn, in, 2, 1e-2, 2e-3);
    tensor *params[4];
    nn_rnn_cell_parameters(&cell, params);
    for (int i = 0; i < 4; i++) /* the parameters got theirs too */
        cr_assert_not_null(params[i]->grad);
    tensor_release(in[0]);
    tensor_release(in[1]);
    nn_rnn_cell_free(&cell);
    close_rt(r);
}

static nn_linear *gc_lin;
static tensor *block(void *ctx, tensor *x)
{
    tensor *h = nn_linear_forward(ctx, x), *y = op_tanh(h);
    tensor_release(h);
    return y;
}
static tensor *f_checkpoint(tensor **in) { return autograd_checkpoint(block, gc_lin, in[0]); }
Test(gradcheck, checkpoint)
{
    rt *r = open_rt();
    nn_linear l;
    cr_assert_eq(nn_linear_init(&l, r, 5, 5, true, DT_F32), OOM_OK);
    gc_lin = &l;
    tensor *in[1] = {leaf(r, SHAPE(3, 5), true)};
    gradcheck(r, f_checkpoint, in, 1, 1e-2, 2e-3);
    tensor_release(in[0]);
    nn_linear_free(&l);
    close_rt(r);
}

static tensor *f_checkpoint_nr(tensor **in) { return autograd_checkpoint_nr(block, gc_lin, in[0]); }
Test(gradcheck, checkpoint_non_reentrant)
{
    rt *r = open_rt();
    nn_linear l;
    cr_assert_eq(nn_linear_init(&l, r, 5, 5, true, DT_F32), OOM_OK);
    gc_lin = &l;
    tensor *in[1] = {leaf(r, SHAPE(3, 5), true)};
    gradcheck(r, f_checkpoint_nr, in, 1, 1e-2, 2e-3);
    tensor_release(in[0]);
    nn_linear_free(&l);
    close_rt(r);
}

/* ---- regressions found in review ----------------------------------------------------------------------------- */

/* One w.t() view used by two matmuls: both gradients reach TBackward0 transposed and are summed there. */
Test(autograd, a_shared_transposed_view_sums_its_gradients)
{
    rt *r = open_rt();
    tensor *w = leaf(r, SHAPE(3, 4), true);
    tensor *x1 = leaf(r, SHAPE(2, 4), false), *x2 = leaf(r, SHAPE(2, 4), false);
    tensor *wt = op_t(w);
    tensor *y1 = op_mm(x1, wt), *y2 = op_mm(x2, wt);
    tensor *y = op_add(y1, y2, 1.0), *s = op_sum(y);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_not(w->grad->transposed);
    if (r->computes) { /* d sum(x1 w^T + x2 w^T) / dw[j, k] = sum_i x1[i, k] + x2[i, k] */
        float a[8], b[8], g[12];
        tensor_to_host(x1, a);
        tensor_to_host(x2, b);
        tensor_to_host(w->grad, g);
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                cr_assert_float_eq(g[j * 4 + k], a[k] + a[4 + k] + b[k] + b[4 + k], 1e-5, "grad[%d][%d]", j, k);
    }
    tensor *ts[] = {w, x1, x2, wt, y1, y2, y, s};
    for (int i = 0; i < 8; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

/* A column-major leaf (torch.randn(4, 2).t().requires_grad_()) gets its gradient in its own layout, taken over. */
Test(autograd, a_column_major_leaf_takes_over_its_gradient)
{
    rt *r = open_rt();
    tensor *base = leaf(r, SHAPE(4, 2), false), *bt = op_t(base);
    tensor *a = tensor_detach(bt);
    a->requires_grad = true;
    tensor *b = leaf(r, SHAPE(4, 3), false);
    tensor *y = op_mm(a, b), *s = op_sum(y);
    int64_t allocs = test_stat(r, "allocation.all.allocated");
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert(a->grad->transposed, "the gradient keeps the leaf's layout");
    /* the seed, the expand, the one product: no clone */
    cr_assert_eq(test_stat(r, "allocation.all.allocated") - allocs, 3);
    tensor *ts[] = {base, bt, a, b, y, s};
    for (int i = 0; i < 6; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

static nn_linear *ck_lin;
static tensor *ck_block(void *ctx, tensor *x)
{
    (void)ctx;
    tensor *h = nn_linear_forward(ck_lin, x), *y = op_relu(h);
    tensor_release(h);
    return y;
}

Test(autograd, checkpoint_recomputes_under_the_forward_autocast)
{
    rt *r = open_rt();
    nn_linear l, head;
    nn_linear_init(&l, r, 8, 8, true, DT_F32);
    nn_linear_init(&head, r, 8, 4, true, DT_F32);
    ck_lin = &l;
    tensor *x = leaf(r, SHAPE(2, 8), true), *y = tensor_randint(r, SHAPE(2), 0, 4);
    amp_autocast_enter(r, DT_F16);
    tensor *h = autograd_checkpoint(ck_block, NULL, x);
    tensor *out = nn_linear_forward(&head, h);
    tensor *loss = op_cross_entropy(out, y);
    amp_autocast_exit(r);
    cr_assert_eq(h->dt, DT_F16);
    cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert(x->grad && x->grad->dt == DT_F32 && l.weight->grad && l.weight->grad->dt == DT_F32);
    tensor *ts[] = {x, y, h, out, loss};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    nn_linear_free(&l);
    nn_linear_free(&head);
    close_rt(r);
}

static tensor *relu_segment(void *ctx, tensor *x)
{
    (void)ctx;
    return op_relu(x);
}

Test(autograd, checkpoint_of_a_segment_that_needs_no_gradient)
{
    rt *r = open_rt();
    nn_linear head;
    nn_linear_init(&head, r, 8, 4, true, DT_F32);
    tensor *x = leaf(r, SHAPE(2, 8), false);
    tensor *h = autograd_checkpoint(relu_segment, NULL, x);
    tensor *out = nn_linear_forward(&head, h), *s = op_sum(out);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_not_null(head.weight->grad);
    tensor *ts[] = {x, h, out, s};
    for (int i = 0; i < 4; i++)
        tensor_release(ts[i]);
    nn_linear_free(&head);
    close_rt(r);
}

/* InputBuffer::accumulate adds into the buffered gradient only when nothing else holds it; a fresh gradient is
 * never added into in its place: y = x + z hands the same gradient to x and to z (still pending), so when m's
 * gradient for x arrives the buffered one is shared and x's gradients are added out of place. */
Test(autograd, input_buffer_accumulates_as_pytorch)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(1024), true), *z0 = leaf(r, SHAPE(1024), true), *c = leaf(r, SHAPE(1024), false);
    tensor *z = op_mul(z0, c), *m = op_mul(x, c), *y = op_add(x, z, 1.0), *o = op_add(y, m, 1.0);
    tensor *s = op_sum(o);
    tensor *ts[] = {z, m, y, o};
    for (int i = 0; i < 4; i++)
        tensor_release(ts[i]);
    int64_t allocs = test_stat(r, "allocation.all.allocated");
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    /* seed, expand, m's x-gradient, the out-of-place x sum, z's z0-gradient */
    cr_assert_eq(test_stat(r, "allocation.all.allocated") - allocs, 5);
    tensor_release(s);
    tensor_release(x);
    tensor_release(z0);
    tensor_release(c);
    close_rt(r);
}

Test(autograd, inplace_on_views_is_refused_not_silently_wrong)
{
    rt *r = open_rt();
    tensor *w = leaf(r, SHAPE(4, 3), true), *d = leaf(r, SHAPE(1, 3), false);
    tensor *v = op_narrow(w, 0, 1);
    cr_assert_null(op_add_(v, d, 1.0));
    cr_assert_str_eq(rt_message(r), "a view of a leaf Variable that requires grad is being used in an in-place operation.");
    rt_clear(r);
    tensor *b = op_clone(w), *bv = op_narrow(b, 1, 1);
    cr_assert_null(op_add_(bv, d, 1.0), "PyTorch would rebase it with CopySlices: refused, not dropped");
    cr_assert_eq(rt_status(r), OOM_EINVAL);
    rt_clear(r);
    RT_NO_GRAD(r) { cr_assert_not_null(op_add_(bv, d, 1.0), "allowed without autograd"); }
    cr_assert_null(op_narrow(w, INT64_MAX, 2), "start + length overflows");
    cr_assert_eq(rt_status(r), OOM_EINVAL);
    rt_clear(r);
    tensor *ts[] = {w, d, v, b, bv};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

/* ---- the retained_graph scenario: pow and GRUCell ------------------------------------------------------------ */

/* GRUCell on CUDA: igates = mm(x, w_ih.t()) keeps x; hgates = mm(h, w_hh.t()) keeps h and the w_hh.t() view; the
 * fused cell's ThnnFusedGruCellBackward0 keeps igates, hgates, h, both biases and its batch x 5 hidden workspace. */
Test(autograd, gru_cell_saves_what_pytorch_saves)
{
    rt *r = open_rt();
    const int64_t B = 4, I = 6, H = 8;
    nn_gru_cell cell;
    cr_assert_eq(nn_gru_cell_init(&cell, r, I, H), OOM_OK);
    tensor *x = leaf(r, SHAPE(B, I), false), *h = leaf(r, SHAPE(B, H), true);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *hy = nn_gru_cell_forward(&cell, x, h);
    OK(r);
    /* held: igates, hgates (saved), the workspace (saved), hy */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before,
                 2 * block_bytes(B * 3 * H * 4) + block_bytes(B * 5 * H * 4) + block_bytes(B * H * 4));
    ag_node *n = hy->grad_fn;
    cr_assert_str_eq(n->fn->name, "ThnnFusedGruCellBackward0");
    cr_assert_eq(n->nnext, 5);
    ag_node *mm_i = n->next[0].fn, *mm_h = n->next[1].fn;
    cr_assert_str_eq(mm_i->fn->name, "MmBackward0");
    cr_assert_str_eq(mm_h->fn->name, "MmBackward0");
    cr_assert(mm_i->saved[0].defined && mm_i->saved[0].t->st == x->st, "mm(x, w_ih.t()) keeps x");
    cr_assert_not(mm_i->saved[1].defined, "x needs no gradient: w_ih.t() is not kept");
    cr_assert(mm_h->saved[0].defined && mm_h->saved[0].t->st == h->st, "mm(h, w_hh.t()) keeps h");
    cr_assert(mm_h->saved[1].defined && mm_h->saved[1].t->st == cell.weight_hh->st, "... and the w_hh.t() view");
    cr_assert_eq(n->next[2].fn, h->grad_acc);
    cr_assert_eq(n->next[3].fn, cell.bias_ih->grad_acc);
    cr_assert_eq(n->next[4].fn, cell.bias_hh->grad_acc);
    for (int i = 0; i < 6; i++)
        cr_assert(n->saved[i].defined, "slot %d saved", i);
    /* in the generated node's order, by name: hidden_bias, hidden_gates, hx, input_bias, input_gates */
    cr_assert_eq(n->saved[0].t->st, cell.bias_hh->st);
    cr_assert_eq(n->saved[1].t->shape[1], 3 * H);
    cr_assert_eq(n->saved[2].t->st, h->st);
    cr_assert_eq(n->saved[3].t->st, cell.bias_ih->st);
    cr_assert_eq(n->saved[4].t->shape[1], 3 * H);
    cr_assert_neq(n->saved[4].t->st, n->saved[1].t->st);
    cr_assert(n->saved[5].is_output && n->saved[5].t->shape[0] == B && n->saved[5].t->shape[1] == 5 * H,
              "the workspace, batch x 5 hidden");

    /* without grad nothing is kept: the gates and the workspace die inside the call */
    int64_t held = test_stat(r, "allocated_bytes.all.current");
    tensor *hy2;
    RT_NO_GRAD(r) { hy2 = nn_gru_cell_forward(&cell, x, h); }
    OK(r);
    cr_assert_null(hy2->grad_fn);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - held, block_bytes(B * H * 4));
    tensor_release(hy2);
    tensor_release(hy);
    tensor_release(h);
    tensor_release(x);
    nn_gru_cell_free(&cell);
    close_rt(r);
}

/* The scenario's chain: every step keeps x, igates, hgates, the workspace and the new h; after an SGD step, the
 * backward that reaches an older step finds its biases changed, and says so as PyTorch 2.11 does. */
Test(autograd, gru_hidden_state_chain_grows_and_breaks_after_a_step)
{
    rt *r = open_rt();
    const int64_t B = 4, I = 8, H = 16;
    nn_gru_cell cell;
    cr_assert_eq(nn_gru_cell_init(&cell, r, I, H), OOM_OK);
    tensor *params[4];
    nn_gru_cell_parameters(&cell, params);
    optimizer *opt = optim_sgd(r, params, 4, 0.01, 0.0, 0.0, 0.0, false);
    tensor *h = NULL;
    int64_t last = 0;
    const int64_t growth = block_bytes(B * I * 4) + 2 * block_bytes(B * 3 * H * 4) + block_bytes(B * 5 * H * 4) +
                           block_bytes(B * H * 4);
    for (int step = 0; step < 4; step++) {
        tensor *x = leaf(r, SHAPE(B, I), false);
        tensor_assign(&h, nn_gru_cell_forward(&cell, x, h));
        tensor *p = op_pow(h, 2.0), *loss = op_mean(p);
        tensor_release(p);
        cr_assert_eq(autograd_backward(loss, NULL, true), OOM_OK, "step %d: %s", step, rt_message(r));
        tensor_release(loss);
        tensor_release(x);
        int64_t now = test_stat(r, "allocated_bytes.all.current");
        if (step >= 1)
            cr_assert_eq(now - last, growth, "step %d grew by %lld", step, (long long)(now - last));
        last = now;
    }
    cr_assert_eq(optim_step(opt), OOM_OK);
    tensor *x = leaf(r, SHAPE(B, I), false);
    tensor_assign(&h, nn_gru_cell_forward(&cell, x, h));
    tensor *p = op_pow(h, 2.0), *loss = op_mean(p);
    cr_assert_eq(autograd_backward(loss, NULL, true), OOM_EAUTOGRAD);
    char want[512];
    snprintf(want, sizeof want,
             "one of the variables needed for gradient computation has been modified by an inplace operation: "
             "[torch.cuda.FloatTensor [%lld]] is at version 2; expected version 1 instead. Hint: enable anomaly "
             "detection to find the operation that failed to compute its gradient, with "
             "torch.autograd.set_detect_anomaly(True, check_nan=False).",
             (long long)(3 * H));
    cr_assert_str_eq(rt_message(r), want);
    rt_clear(r);
    tensor *ts[] = {p, loss, x, h};
    for (int i = 0; i < 4; i++)
        tensor_release(ts[i]);
    optim_free(opt);
    nn_gru_cell_free(&cell);
    close_rt(r);
}

/* pow_backward, grad * (e * self.pow(e - 1)): three temporaries of self's size at once, beside mean's gradient. */
Test(autograd, pow_saves_self_and_its_backward_makes_three_temporaries)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(64, 64), true);
    tensor *y = op_pow(x, 2.0), *s = op_mean(y);
    OK(r);
    cr_assert_str_eq(y->grad_fn->fn->name, "PowBackward0");
    cr_assert_eq(y->grad_fn->saved[0].t->st, x->st, "PowBackward0 keeps self");
    cr_assert_eq(y->grad_fn->fparam[0], 2.0);
    int64_t base = test_stat(r, "allocated_bytes.all.current"), allocs = test_stat(r, "allocation.all.allocated");
    const int64_t t = block_bytes(64 * 64 * 4);
    cachealloc_record_history(r->ca, true);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    /* the seed, mean's gradient, then self.pow(1), 2 * that, grad * that: the last becomes x.grad */
    cr_assert_eq(test_stat(r, "allocation.all.allocated") - allocs, 5);
    /* the temporaries go in reverse order of their making, 2 * (...) first, then self.pow(1), then mean's
     * gradient (PyTorch's trace of the GRU chain, events 65-70) */
    size_t n, na = 0, nf = 0;
    const ca_trace_entry *te = cachealloc_trace(r->ca, &n);
    devptr made[4] = {0}, freed[3] = {0};
    for (size_t i = 0; i < n; i++) {
        if (te[i].action == CA_ALLOC && te[i].size == 64 * 64 * 4 && na < 4)
            made[na++] = te[i].addr;
        if (te[i].action == CA_FREE_COMPLETED && te[i].size == 64 * 64 * 4 && nf < 3)
            freed[nf++] = te[i].addr;
    }
    cr_assert_eq(na, 4);
    cr_assert_eq(nf, 3);
    cr_assert_eq(freed[0], made[2], "2 * self.pow(1) is freed first");
    cr_assert_eq(freed[1], made[1], "then self.pow(1)");
    cr_assert_eq(freed[2], made[0], "then mean's gradient, with the node");
    cr_assert_eq(test_stat(r, "allocated_bytes.all.peak"), base + 512 + 4 * t);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base + t);
    if (r->computes) {
        float xv[64 * 64], g[64 * 64];
        host(x, xv);
        host(x->grad, g);
        for (int i = 0; i < 64 * 64; i++)
            cr_assert_float_eq(g[i], 2.0f * xv[i] / 4096.0f, 1e-9f, "grad[%d]", i);
    }
    tensor_release(s);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

static tensor *f_pow2(tensor **in) { return op_pow(in[0], 2.0); }
static tensor *f_pow3(tensor **in) { return op_pow(in[0], 3.0); }
static tensor *f_gru_fused(tensor **in) { return op_thnn_fused_gru_cell(in[0], in[1], in[2], in[3], in[4]); }
static tensor *f_gru_fused_nobias(tensor **in) { return op_thnn_fused_gru_cell(in[0], in[1], in[2], NULL, NULL); }

GC(pow2, f_pow2, leaf(r, SHAPE(3, 4), true))
GC(pow3, f_pow3, leaf(r, SHAPE(3, 4), true))
GC(thnn_fused_gru_cell, f_gru_fused, leaf(r, SHAPE(3, 12), true), leaf(r, SHAPE(3, 12), true),
   leaf(r, SHAPE(3, 4), true), leaf(r, SHAPE(12), true), leaf(r, SHAPE(12), true))
GC(thnn_fused_gru_cell_without_bias, f_gru_fused_nobias, leaf(r, SHAPE(2, 9), true), leaf(r, SHAPE(2, 9), true),
   leaf(r, SHAPE(2, 3), true))

static nn_gru_cell *gc_gru;
static tensor *f_gru(tensor **in) { return nn_gru_cell_forward(gc_gru, in[0], in[1]); }
Test(gradcheck, gru_cell)
{
    rt *r = open_rt();
    nn_gru_cell cell;
    cr_assert_eq(nn_gru_cell_init(&cell, r, 3, 4), OOM_OK);
    gc_gru = &cell;
    tensor *in[2] = {leaf(r, SHAPE(2, 3), true), leaf(r, SHAPE(2, 4), true)};
    gradcheck(r, f_gru, in, 2, 1e-2, 2e-3);
    tensor *params[4];
    nn_gru_cell_parameters(&cell, params);
    for (int i = 0; i < 4; i++) /* the parameters got theirs too */
        cr_assert_not_null(params[i]->grad);
    tensor_release(in[0]);
    tensor_release(in[1]);
    nn_gru_cell_free(&cell);
    close_rt(r);
}

Test(autograd, thnn_fused_gru_cell_rejects_bad_operands)
{
    rt *r = open_rt();
    tensor *ig = leaf(r, SHAPE(2, 9), false), *hx = leaf(r, SHAPE(2, 3), false), *b = leaf(r, SHAPE(9), false);
    tensor *bad = leaf(r, SHAPE(2, 8), false);
    cr_assert_null(op_thnn_fused_gru_cell(ig, bad, hx, NULL, NULL));
    cr_assert_str_eq(rt_message(r), "_thnn_fused_gru_cell: hidden_gates is [2, 8] float32, expected a float32 tensor "
                                    "of shape [2, 9]");
    rt_clear(r);
    cr_assert_null(op_thnn_fused_gru_cell(ig, ig, hx, b, NULL));
    cr_assert_str_eq(rt_message(r), "_thnn_fused_gru_cell: give both biases or neither");
    rt_clear(r);
    tensor *ts[] = {ig, hx, b, bad};
    for (int i = 0; i < 4; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

/* ---- dangling_tensors, inplace_ops: sigmoid, arithmetic with a Python number, in place on a saved output ---- */

Test(autograd, sigmoid_saves_its_result_and_mul__on_it_fails_as_in_pytorch)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(2, 3), true);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *s = op_sigmoid(x);
    OK(r);
    ag_node *n = s->grad_fn;
    cr_assert_str_eq(n->fn->name, "SigmoidBackward0");
    cr_assert_eq(n->nsaved, 1);
    cr_assert(n->saved[0].is_output && n->saved[0].t->st == s->st, "sigmoid saves its result (derivatives.yaml)");
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, block_bytes(2 * 3 * 4));
    int64_t allocs = test_stat(r, "allocation.all.allocated");
    cr_assert_eq(op_mul_(s, 2.0), s, "mul_ returns self");
    cr_assert_eq(test_stat(r, "allocation.all.allocated"), allocs, "in place: no allocation");
    cr_assert_eq(s->st->version, 1);
    cr_assert_str_eq(s->grad_fn->fn->name, "MulBackward0", "x.mul_(2): the number is wrapped, mul.Tensor's node");
    cr_assert_eq(s->grad_fn->next[0].fn, n, "the in-place node's edge is sigmoid's node (rebase_history)");
    tensor *w = leaf(r, SHAPE(2, 3), false);
    tensor *m = op_mul(s, w), *loss = op_sum(m);
    cr_assert_eq(autograd_backward(loss, NULL, false), OOM_EAUTOGRAD);
    cr_assert_str_eq(rt_message(r),
                     "one of the variables needed for gradient computation has been modified by an inplace "
                     "operation: [torch.cuda.FloatTensor [2, 3]], which is output 0 of SigmoidBackward0, is at "
                     "version 1; expected version 0 instead. Hint: enable anomaly detection to find the operation "
                     "that failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, "
                     "check_nan=False).");
    rt_clear(r);
    cr_assert_null(x->grad, "the error stops backward before x");
    tensor *ts[] = {loss, m, w, s, x};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

Test(autograd, arithmetic_with_a_number_saves_no_device_memory)
{
    rt *r = open_rt();
    tensor *x = leaf(r, SHAPE(4, 4), true);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    tensor *y = op_mul_scalar(x, 2.0), *z = op_add_scalar(y, 1.0);
    OK(r);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - before, 2 * block_bytes(4 * 4 * 4),
                 "the results only: a Python number is a 0-dim CPU tensor");
    cr_assert_str_eq(y->grad_fn->fn->name, "MulBackward0");
    cr_assert_str_eq(z->grad_fn->fn->name, "AddBackward0");
    cr_assert_eq(y->grad_fn->nsaved, 0);
    cr_assert_eq(z->grad_fn->nsaved, 0);
    cr_assert_null(op_mul_(x, 2.0), "in place on a leaf that requires grad");
    cr_assert_str_eq(rt_message(r), "a leaf Variable that requires grad is being used in an in-place operation.");
    rt_clear(r);
    cr_assert_null(op_add_scalar_(x, 2.0));
    rt_clear(r);
    RT_NO_GRAD(r)
    {
        tensor *u = op_mul_scalar(z, 3.0);
        cr_assert_null(u->grad_fn, "no_grad records nothing");
        cr_assert_eq(op_add_scalar_(u, 1.0), u);
        cr_assert_null(u->grad_fn);
        cr_assert_eq(u->st->version, 1);
        tensor_release(u);
    }
    if (r->computes) {
        float hx[16], hz[16];
        host(x, hx);
        host(z, hz);
        for (int i = 0; i < 16; i++)
            cr_assert_eq(hz[i], hx[i] * 2.0f + 1.0f);
    }
    tensor_release(z);
    tensor_release(y);
    tensor_release(x);
    close_rt(r);
}

static tensor *f_sigmoid(tensor **in) { return op_sigmoid(in[0]); }
static tensor *f_mul_scalar(tensor **in) { return op_mul_scalar(in[0], -2.5); }
static tensor *f_add_scalar(tensor **in) { return op_add_scalar(in[0], 3.0); }
static tensor *f_inplace_scalars(tensor **in)
{
    tensor *c = op_clone(in[0]); /* in-place ops on a non-leaf: rebase_history */
    tensor *out = op_mul_(c, 2.0) && op_add_scalar_(c, -0.5) ? op_sigmoid(c) : NULL;
    tensor_release(c);
    return out;
}
GC(sigmoid, f_sigmoid, leaf(r, SHAPE(4, 5), true))
GC(mul_scalar, f_mul_scalar, leaf(r, SHAPE(3, 4), true))
GC(add_scalar, f_add_scalar, leaf(r, SHAPE(3, 4), true))
GC(clone_mul__add__sigmoid, f_inplace_scalars, leaf(r, SHAPE(4, 3), true))

/* ---- the inference_oom scenario: cat ------------------------------------------------------------------------ */

static tensor *f_cat(tensor **in) { return op_cat(in, 3); }
GC(cat, f_cat, leaf(r, SHAPE(2, 4), true), leaf(r, SHAPE(3, 4), true), leaf(r, SHAPE(1, 4), true))

/* derivatives.yaml: cat's backward needs the inputs' sizes only; the result is the only allocation, and backward
 * hands each input a view of the gradient's rows. */
Test(autograd, cat_saves_no_tensor_and_allocates_only_its_result)
{
    rt *r = open_rt();
    tensor *a = leaf(r, SHAPE(64, 32), true), *b = leaf(r, SHAPE(32, 32), false), *c = leaf(r, SHAPE(96, 32), true);
    tensor *in[3] = {a, b, c};
    int64_t base = test_stat(r, "allocated_bytes.all.current"), allocs = test_stat(r, "allocation.all.allocated");
    tensor *y = op_cat(in, 3);
    OK(r);
    cr_assert_eq(y->shape[0], 192);
    cr_assert_eq(y->shape[1], 32);
    cr_assert_str_eq(y->grad_fn->fn->name, "CatBackward0");
    for (int i = 0; i < AG_MAX_SAVED; i++)
        cr_assert_null(y->grad_fn->saved[i].t, "CatBackward0 saves no tensor (slot %d)", i);
    cr_assert_eq(test_stat(r, "allocation.all.allocated") - allocs, 1);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base + block_bytes(192 * 32 * 4));
    if (r->computes) {
        float av[64 * 32], bv[32 * 32], cv[96 * 32], yv[192 * 32];
        host(a, av);
        host(b, bv);
        host(c, cv);
        host(y, yv);
        cr_assert_eq(memcmp(yv, av, sizeof av), 0);
        cr_assert_eq(memcmp(yv + 64 * 32, bv, sizeof bv), 0);
        cr_assert_eq(memcmp(yv + 96 * 32, cv, sizeof cv), 0);
    }
    tensor *s = op_sum(y);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_not_null(a->grad);
    cr_assert_null(b->grad);
    cr_assert_not_null(c->grad);
    cr_assert_eq(a->grad->shape[0], 64);
    cr_assert_eq(c->grad->shape[0], 96);
    tensor_release(s);
    tensor_release(y);
    for (int i = 0; i < 3; i++)
        tensor_release(in[i]);
    close_rt(r);
}

Test(autograd, cat_refuses_mismatched_inputs_and_records_nothing_under_no_grad)
{
    rt *r = open_rt();
    tensor *a = leaf(r, SHAPE(4, 3), true), *bad = leaf(r, SHAPE(4, 5), false);
    tensor *in[2] = {a, bad};
    cr_assert_null(op_cat(in, 2));
    cr_assert_str_eq(rt_message(r), "cat: expected tensors of one dtype and the same sizes except in dimension 0 "
                                    "(tensor 0 is [4, 3] float32, tensor 1 is [4, 5] float32)");
    rt_clear(r);
    /* under no_grad any number of inputs: no node */
    tensor *many[8];
    for (int i = 0; i < 8; i++)
        many[i] = a;
    tensor *y = NULL;
    RT_NO_GRAD(r) { y = op_cat(many, 8); }
    OK(r);
    cr_assert_eq(y->shape[0], 32);
    cr_assert_null(y->grad_fn);
    tensor_release(y);
    cr_assert_null(op_cat(many, 8), "with grad, more inputs than a node's edges are refused");
    rt_clear(r);
    tensor_release(a);
    tensor_release(bad);
    close_rt(r);
}

/* The sizes of the allocations made since trace entry `from`, in order (history recorded). */
static size_t alloc_sizes_since(rt *r, size_t from, size_t *out, size_t cap)
{
    size_t n, k = 0;
    const ca_trace_entry *te = cachealloc_trace(r->ca, &n);
    for (size_t i = from; i < n && k < cap; i++)
        if (te[i].action == CA_ALLOC)
            out[k++] = te[i].size;
    return k;
}

static size_t trace_len(rt *r)
{
    size_t n;
    cachealloc_trace(r->ca, &n);
    return n;
}

/* A differentiable view holds its base (ViewInfo's base_), so the storage of the gradient mm_mat2_backward hands
 * a weight, (grad.t() @ mat1).t() and TBackward0's .t() of it, has a use count of 2 while that gradient lives:
 * InputBuffer::accumulate's can_accumulate_inplace refuses it, and the two steps' weight gradients are summed out
 * of place (PyTorch 2.11's trace of the retained GRU chain: a 12 MiB alloc for each weight's sum, step 1). */
Test(autograd, a_weight_used_twice_sums_its_gradient_views_out_of_place)
{
    rt *r = open_rt();
    tensor *w = leaf(r, SHAPE(48, 32), true);
    tensor *x1 = leaf(r, SHAPE(4, 32), false), *x2 = leaf(r, SHAPE(4, 32), false);
    tensor *w1 = op_t(w), *y1 = op_mm(x1, w1), *w2 = op_t(w), *y2 = op_mm(x2, w2);
    tensor *y = op_add(y1, y2, 1.0), *s = op_sum(y);
    OK(r);
    tensor *ts[] = {w1, y1, w2, y2, y};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    cachealloc_record_history(r->ca, true);
    size_t from = trace_len(r);
    cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
    size_t sz[8], want[] = {4, 4 * 48 * 4, 48 * 32 * 4, 48 * 32 * 4, 48 * 32 * 4};
    /* seed, SumBackward0's expand, y2's weight gradient, y1's, and their out-of-place sum */
    cr_assert_eq(alloc_sizes_since(r, from, sz, 8), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(sz[i], want[i], "allocation %d: %zu bytes, PyTorch %zu", i, sz[i], want[i]);
    /* `buffer[pos] = old_var + var` drops the buffered gradient first; var, the node's output, goes when the
     * engine drops the node's outputs, after passing them all on (the chain's trace: events 113-116) */
    size_t n, na = 0, nf = 0;
    const ca_trace_entry *te = cachealloc_trace(r->ca, &n);
    devptr made[3] = {0}, freed[2] = {0};
    for (size_t i = from; i < n; i++) {
        if (te[i].action == CA_ALLOC && te[i].size == 48 * 32 * 4 && na < 3)
            made[na++] = te[i].addr;
        if (te[i].action == CA_FREE_COMPLETED && te[i].size == 48 * 32 * 4 && nf < 2)
            freed[nf++] = te[i].addr;
    }
    cr_assert_eq(nf, 2);
    cr_assert_eq(freed[0], made[0], "the buffered gradient (y2's) goes first");
    cr_assert_eq(freed[1], made[1], "then y1's, the output of the node that added it");
    /* the sum is taken over (AccumulateGrad detaches it): nothing else holds .grad's storage */
    cr_assert_eq(w->grad->st->refcount, 1);
    tensor_release(s);
    tensor_release(x1);
    tensor_release(x2);
    tensor_release(w);
    close_rt(r);
}

/* load_derivatives.py sorts a formula's inputs by name, and Functions.cpp computes them in that order: MmBackward0
 * mat2 before self, AddmmBackward0 mat1, mat2, then self, whose sum to the bias shape happens after the node, in
 * validate_outputs; MulBackward0 other before self. The order places blocks (PyTorch's traces of the GRU chain and
 * of the MLP: mat2's 12 MiB before mat1's 256 KiB; mat1's 4 MiB, mat2's 80 KiB, then the bias's 40 bytes). */
Test(autograd, multi_input_backward_computes_inputs_in_pytorch_order)
{
    rt *r = open_rt();
    tensor *a = leaf(r, SHAPE(4, 8), true), *b = leaf(r, SHAPE(8, 16), true), *bias = leaf(r, SHAPE(16), true);
    tensor *c = leaf(r, SHAPE(4, 16), true);
    tensor *y = op_mm(a, b), *z = op_addmm(bias, a, b);
    tensor *s1 = op_sum(y), *s2 = op_sum(z);
    OK(r);
    cachealloc_record_history(r->ca, true);
    size_t sz[8], from = trace_len(r);
    cr_assert_eq(autograd_backward(s1, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_eq(alloc_sizes_since(r, from, sz, 8), 4);
    cr_assert_eq(sz[2], 8 * 16 * 4, "mat2's gradient first");
    cr_assert_eq(sz[3], 4 * 8 * 4, "then self's");
    from = trace_len(r);
    cr_assert_eq(autograd_backward(s2, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_eq(alloc_sizes_since(r, from, sz, 8), 5);
    cr_assert_eq(sz[2], 4 * 8 * 4, "mat1's gradient first");
    cr_assert_eq(sz[3], 8 * 16 * 4, "then mat2's");
    cr_assert_eq(sz[4], 16 * 4, "then the bias's sum");
    tensor *ys = leaf(r, SHAPE(4, 16), true);
    tensor *m2 = op_mul(ys, c), *s4 = op_sum(m2);
    from = trace_len(r);
    cr_assert_eq(autograd_backward(s4, NULL, false), OOM_OK, "%s", rt_message(r));
    size_t n, k = 0;
    const ca_trace_entry *te = cachealloc_trace(r->ca, &n);
    devptr first = 0;
    for (size_t i = from; i < n; i++)
        if (te[i].action == CA_ALLOC && te[i].size == 4 * 16 * 4 && k++ == 1)
            first = te[i].addr; /* the seed's expand is the first of that size, then the first product */
    cr_assert(first != 0);
    cr_assert_eq(c->grad->st->ptr, first, "c (other) gets the first product");
    tensor *ts[] = {a, b, bias, c, y, z, s1, s2, ys, m2, s4};
    for (int i = 0; i < 11; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

/* Autocast's wrappers cast an op's arguments last to first (GCC evaluates the pack expansion
 * `(*F)(cached_cast(dtype, args, device_type)...)` that way): linear casts its bias, then its weight, then its
 * input, so the weight's ToCopyBackward0 has the larger sequence number and runs before the bias's in backward
 * (oversize_batch fix-bf16-autocast's step 2 equals PyTorch's recording only so). */
Test(autograd, autocast_casts_linear_arguments_last_first)
{
    rt *r = open_rt();
    nn_linear l;
    nn_linear_init(&l, r, 8, 8, true, DT_F32);
    tensor *x = leaf(r, SHAPE(4, 8), true);
    amp_autocast_enter(r, DT_BF16);
    tensor *out = nn_linear_forward(&l, x);
    amp_autocast_exit(r);
    OK(r);
    ag_node *addmm = out->grad_fn;
    cr_assert_str_eq(addmm->fn->name, "AddmmBackward0");
    ag_node *bias_cast = addmm->next[0].fn, *x_cast = addmm->next[1].fn, *t = addmm->next[2].fn;
    cr_assert_str_eq(bias_cast->fn->name, "ToCopyBackward0");
    cr_assert_str_eq(x_cast->fn->name, "ToCopyBackward0");
    cr_assert_str_eq(t->fn->name, "TBackward0");
    ag_node *weight_cast = t->next[0].fn;
    cr_assert_str_eq(weight_cast->fn->name, "ToCopyBackward0");
    cr_assert_eq(weight_cast->seq, bias_cast->seq + 1, "bias cast %llu, weight cast %llu",
                 (unsigned long long)bias_cast->seq, (unsigned long long)weight_cast->seq);
    cr_assert_eq(x_cast->seq, weight_cast->seq + 1, "weight cast %llu, input cast %llu",
                 (unsigned long long)weight_cast->seq, (unsigned long long)x_cast->seq);
    tensor_release(out);
    tensor_release(x);
    nn_linear_free(&l);
    close_rt(r);
}

/* The first fill or random draw is the first kernel launch (noted in dry-run as well): the driver releases the
 * region it set aside at context creation and the next segment is carved from its bottom, above the segments
 * made before it (sim.c). A dtype conversion (to) does not release it: PyTorch's recordings of oversize_batch's
 * fix-half-model equal oomlab's only so. */
Test(autograd, first_random_draw_releases_the_launch_region)
{
    if (test_backend() != DEVICE_SIM)
        cr_skip_test("the launch region is the sim's model of the driver");
    rt *r = open_rt();
    tensor *a = tensor_empty(r, DT_F32, SHAPE(16, 1 << 20)); /* 64 MiB: a segment below the launch region */
    tensor *h = op_to(a, DT_F16);
    tensor *b = tensor_empty(r, DT_F32, SHAPE(16, 1 << 20));
    OK(r);
    cr_assert_lt(b->st->ptr, a->st->ptr, "a conversion released the launch region");
    tensor *n = tensor_randn(r, DT_F32, SHAPE(4), 0.0, 1.0);
    tensor *c = tensor_empty(r, DT_F32, SHAPE(16, 1 << 20));
    OK(r);
    cr_assert_gt(c->st->ptr, a->st->ptr, "the first torch.randn left the launch region held");
    tensor *ts[] = {a, h, b, n, c};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

/* ---- the engine's hook before a node (autograd_set_pre_node_hook) ------------------------------------------ */

typedef struct pre_hook_log {
    ag_node *watched;
    int calls, watched_calls;
    bool watched_grad_was_null; /* the weight's .grad when the watched node was about to run */
    tensor *weight;
    oom_status fail;
} pre_hook_log;

static oom_status log_pre_node(void *ctx, ag_node *node)
{
    pre_hook_log *l = ctx;
    l->calls++;
    if (node == l->watched) {
        l->watched_calls++;
        l->watched_grad_was_null = l->weight->grad == NULL;
        return l->fail;
    }
    return OOM_OK;
}

/* Called once before each node that runs, where Tensor.register_hook on the node's output runs (FSDP2's pre-backward
 * unshard): the linear's node is seen before its gradients exist; a failure the hook returns stops the backward. */
Test(autograd, pre_node_hook_runs_before_the_node_and_can_stop_backward)
{
    rt *r = open_rt();
    nn_linear l;
    cr_assert_eq(nn_linear_init(&l, r, 8, 3, true, DT_F32), OOM_OK);
    tensor *x = leaf(r, SHAPE(4, 8), false);
    for (int round = 0; round < 2; round++) {
        tensor *out = nn_linear_forward(&l, x);
        tensor *loss = op_sum(out);
        OK(r);
        pre_hook_log log = {.watched = out->grad_fn, .weight = l.weight,
                            .fail = round ? rt_fail(r, OOM_EINVAL, "hook refused") : OOM_OK};
        if (round)
            rt_clear(r);
        autograd_set_pre_node_hook(r, log_pre_node, &log);
        oom_status st = autograd_backward(loss, NULL, false);
        autograd_set_pre_node_hook(r, NULL, NULL);
        cr_assert_eq(log.watched_calls, 1);
        cr_assert(log.watched_grad_was_null);
        if (round == 0) {
            cr_assert_eq(st, OOM_OK);
            cr_assert_gt(log.calls, 2, "the sum, the linear and the AccumulateGrad nodes: %d", log.calls);
            cr_assert_not_null(l.weight->grad);
        } else {
            cr_assert_eq(st, OOM_EINVAL);
            cr_assert_null(l.weight->grad, "the linear's node did not run");
            rt_clear(r);
        }
        tensor_assign(&l.weight->grad, NULL);
        tensor_assign(&l.bias->grad, NULL);
        tensor_release(loss);
        tensor_release(out);
    }
    tensor_release(x);
    nn_linear_free(&l);
    close_rt(r);
}
