/* test_nn.c - modules, optimizers and mixed precision: their memory and their arithmetic.
 *
 * Suite "nn" (backend under test). Memory expectations are PyTorch's: parameters in creation order, Adam's state
 * made at the first step, zero_grad(set_to_none) freeing the gradients, autocast caching weight casts for one
 * region. The MLP must learn a synthetic task (CI scale: width 256, batch 64).
 */
#include <criterion/criterion.h>
#include <math.h>
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
    cr_assert_not_null(r);
    return r;
}

static void close_rt(rt *r)
{
    cr_assert_eq(r->live_tensors, 0, "%zu tensors leaked", r->live_tensors);
    cr_assert_eq(r->live_nodes, 0, "%zu nodes leaked", r->live_nodes);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 0);
    rt_close(r);
}

#define OK(r) cr_assert(rt_ok(r), "runtime error: %s", rt_message(r))

static int64_t mlp_param_bytes(int64_t w, int depth, int64_t c)
{
    return depth * (block_bytes(w * w * 4) + block_bytes(w * 4)) + block_bytes(c * w * 4) + block_bytes(c * 4);
}

Test(nn, mlp_parameters_in_pytorch_order)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 256, 4, 10, DT_F32);
    OK(r);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), mlp_param_bytes(256, 4, 10));
    cr_assert_eq(test_stat(r, "allocation.all.current"), 10);
    tensor *p[10];
    cr_assert_eq(nn_mlp_parameters(m, p, 10), 10);
    for (int i = 0; i < 10; i++) {
        cr_assert(p[i]->requires_grad && !p[i]->grad_fn, "parameter %d is a leaf that requires grad", i);
        cr_assert_eq(p[i]->st->version, 1, "init.uniform_ ran in place");
    }
    cr_assert_eq(p[8]->shape[0], 10);
    cr_assert_eq(p[8]->shape[1], 256);
    cr_assert_eq(p[9]->ndim, 1);
    nn_mlp_free(m);
    close_rt(r);
}

/* A synthetic 10-class task: labels from a fixed random linear teacher. */
Test(nn, mlp_learns_a_synthetic_classification_task)
{
    rt *r = open_rt();
    if (!r->computes) {
        rt_close(r);
        return;
    }
    const int64_t B = 64, W = 256, C = 10, N = 4;
    nn_mlp *m = nn_mlp_new(r, W, 2, C, DT_F32);
    tensor *params[6];
    size_t np = nn_mlp_parameters(m, params, 6);
    optimizer *opt = optim_adam(r, params, np, 1e-3, 0.9, 0.999, 1e-8, 0.0);
    tensor *xs[4], *ys[4];
    float *teacher = malloc((size_t)(W * C) * sizeof *teacher), *xh = malloc((size_t)(B * W) * sizeof *xh);
    tensor *tt = tensor_randn(r, DT_F32, SHAPE(W, C), 0.0, 1.0);
    cr_assert_eq(tensor_to_host(tt, teacher), OOM_OK);
    tensor_release(tt);
    for (int b = 0; b < N; b++) {
        xs[b] = tensor_randn(r, DT_F32, SHAPE(B, W), 0.0, 1.0);
        cr_assert_eq(tensor_to_host(xs[b], xh), OOM_OK);
        int64_t yh[64];
        for (int i = 0; i < B; i++) {
            int best = 0;
            double bv = -1e30;
            for (int c = 0; c < C; c++) {
                double v = 0;
                for (int k = 0; k < W; k++)
                    v += (double)xh[i * W + k] * teacher[k * C + c];
                if (v > bv)
                    bv = v, best = c;
            }
            yh[i] = best;
        }
        ys[b] = tensor_from_host(r, DT_I64, SHAPE(B), yh);
    }
    double first = 0, last = 0;
    for (int step = 0; step < 150; step++) {
        int b = step % N;
        optim_zero_grad(opt, true);
        tensor *out = nn_mlp_forward(m, xs[b]);
        tensor *loss = op_cross_entropy(out, ys[b]);
        cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
        cr_assert_eq(optim_step(opt), OOM_OK);
        double l = tensor_item(loss);
        if (step < N)
            first += l / N;
        if (step >= 150 - N)
            last += l / N;
        tensor_release(out);
        tensor_release(loss);
    }
    /* ten classes: chance is ln 10 = 2.30; memorising 256 samples of a linear teacher gets far below 0.1 */
    cr_assert(first > 1.5, "initial loss %f", first);
    cr_assert(last < 0.1, "the loss fell from %f to %f only", first, last);
    for (int b = 0; b < N; b++) {
        tensor_release(xs[b]);
        tensor_release(ys[b]);
    }
    free(teacher);
    free(xh);
    optim_free(opt);
    nn_mlp_free(m);
    close_rt(r);
}

static tensor *param_from(rt *r, const float *v, int n)
{
    tensor *p = tensor_from_host(r, DT_F32, SHAPE(n), v);
    p->requires_grad = true;
    return p;
}

static void set_grad(tensor *p, const float *g, int n)
{
    tensor_release(p->grad);
    p->grad = tensor_from_host(p->rt, DT_F32, SHAPE(n), g);
}

Test(nn, sgd_momentum_follows_torch_optim_sgd)
{
    rt *r = open_rt();
    if (!r->computes) {
        rt_close(r);
        return;
    }
    float p0[3] = {1.0f, -2.0f, 0.5f}, gs[3][3] = {{0.1f, 0.2f, -0.3f}, {0.5f, -0.5f, 1.0f}, {-1.0f, 0.0f, 2.0f}};
    tensor *p = param_from(r, p0, 3);
    optimizer *opt = optim_sgd(r, &p, 1, 0.1, 0.9, 0.0, 0.01, true);
    double pv[3] = {1.0, -2.0, 0.5}, buf[3] = {0};
    for (int step = 0; step < 3; step++) {
        set_grad(p, gs[step], 3);
        cr_assert_eq(optim_step(opt), OOM_OK);
        for (int i = 0; i < 3; i++) { /* torch/optim/sgd.py, one tensor, nesterov */
            double d = gs[step][i] + 0.01 * pv[i];
            buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
            pv[i] -= 0.1 * (d + 0.9 * buf[i]);
        }
    }
    float got[3];
    cr_assert_eq(tensor_to_host(p, got), OOM_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_float_eq(got[i], pv[i], 1e-6, "p[%d] = %f, torch %f", i, got[i], pv[i]);
    cr_assert_eq(p->st->version, 3, "three in-place steps");
    optim_free(opt);
    tensor_release(p);
    close_rt(r);
}

Test(nn, adam_state_is_made_at_the_first_step)
{
    rt *r = open_rt();
    tensor *w = tensor_zeros(r, DT_F32, SHAPE(1000, 100)), *b = tensor_zeros(r, DT_F32, SHAPE(100));
    w->requires_grad = b->requires_grad = true;
    tensor *ps[2] = {w, b};
    optimizer *opt = optim_adam(r, ps, 2, 1e-3, 0.9, 0.999, 1e-8, 0.0);
    int64_t before = test_stat(r, "allocated_bytes.all.current");
    cr_assert_eq(optim_step(opt), OOM_OK, "no gradients: nothing to do");
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), before, "no state without a gradient");
    w->grad = tensor_full(r, DT_F32, SHAPE(1000, 100), 0.5);
    int64_t with_grad = test_stat(r, "allocated_bytes.all.current");
    cr_assert_eq(optim_step(opt), OOM_OK);
    /* exp_avg and exp_avg_sq for w only (b has no .grad) */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - with_grad, 2 * block_bytes(1000 * 100 * 4));
    if (r->computes) { /* step 1 of Adam moves every element by lr (bias-corrected m / sqrt(v) = sign(g)) */
        float h[100];
        tensor *first = op_narrow(w, 0, 1); /* row 0: 100 elements */
        cr_assert_eq(tensor_to_host(first, h), OOM_OK);
        cr_assert_float_eq(h[0], -1e-3f, 1e-7, "%g", h[0]);
        tensor_release(first);
    }
    optim_zero_grad(opt, false);
    cr_assert_not_null(w->grad, "set_to_none=False keeps the tensor");
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - with_grad, 2 * block_bytes(1000 * 100 * 4));
    optim_zero_grad(opt, true);
    cr_assert_null(w->grad);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), before + 2 * block_bytes(1000 * 100 * 4));
    optim_free(opt);
    tensor_release(w);
    tensor_release(b);
    close_rt(r);
}

Test(nn, half_model_halves_the_parameters)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 256, 2, 10, DT_F32);
    int64_t f32 = test_stat(r, "allocated_bytes.all.current");
    cr_assert_eq(nn_mlp_to(m, DT_F16), OOM_OK);
    int64_t f16 = 2 * (block_bytes(256 * 256 * 2) + block_bytes(256 * 2)) + block_bytes(10 * 256 * 2) + block_bytes(20);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), f16, "f32 %lld -> f16 %lld", (long long)f32,
                 (long long)f16);
    tensor *x = tensor_randn(r, DT_F16, SHAPE(64, 256), 0.0, 1.0);
    tensor *out;
    RT_NO_GRAD(r) { out = nn_mlp_forward(m, x); }
    OK(r);
    cr_assert_eq(out->dt, DT_F16);
    tensor_release(out);
    tensor_release(x);
    nn_mlp_free(m);
    close_rt(r);
}

Test(nn, autocast_casts_weights_once_per_region_and_keeps_f32_gradients)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 256, 2, 10, DT_F32);
    tensor *x = tensor_randn(r, DT_F32, SHAPE(64, 256), 0.0, 1.0);
    tensor *y = tensor_randint(r, SHAPE(64), 0, 10);
    int64_t base = test_stat(r, "allocated_bytes.all.current");
    amp_autocast_enter(r, DT_BF16);
    tensor *out = nn_mlp_forward(m, x);
    OK(r);
    cr_assert_eq(out->dt, DT_BF16, "linear runs in the autocast dtype");
    int64_t after_one = test_stat(r, "allocated_bytes.all.current");
    tensor *out2 = nn_mlp_forward(m, x);
    int64_t casts = 2 * (block_bytes(256 * 256 * 2) + block_bytes(256 * 2)) + block_bytes(10 * 256 * 2) +
                    block_bytes(20);
    /* the second forward allocates its activations and x's cast again, but not the weights' casts */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current") - after_one, after_one - base - casts);
    tensor *loss = op_cross_entropy(out, y);
    cr_assert_eq(loss->dt, DT_F32, "log_softmax and nll_loss run in f32");
    amp_autocast_exit(r);
    cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
    tensor *w0 = m->layers[0].weight;
    cr_assert_not_null(w0->grad);
    cr_assert_eq(w0->grad->dt, DT_F32, "ToCopyBackward0 brings the gradient back to f32");
    tensor_release(loss);
    tensor_release(out);
    tensor_release(out2);
    /* the region is over: its weight casts are gone */
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), base + mlp_param_bytes(256, 2, 10));
    tensor_release(x);
    tensor_release(y);
    nn_mlp_free(m);
    close_rt(r);
}

Test(nn, grad_scaler_skips_a_step_with_inf_and_backs_off)
{
    rt *r = open_rt();
    if (!r->computes) {
        rt_close(r);
        return;
    }
    float v[2] = {1.0f, 2.0f};
    tensor *p = param_from(r, v, 2);
    optimizer *opt = optim_sgd(r, &p, 1, 0.5, 0.0, 0.0, 0.0, false);
    grad_scaler gs;
    grad_scaler_init(&gs, r);
    tensor *loss = op_sum(p); /* d loss / d p = 1 */
    tensor *scaled = grad_scaler_scale(&gs, loss);
    cr_assert_float_eq(tensor_item(scaled), 3.0 * 65536.0, 0);
    cr_assert_eq(autograd_backward(scaled, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_eq(grad_scaler_step(&gs, opt), OOM_OK);
    cr_assert_not(gs.found_inf);
    float h[2];
    tensor_to_host(p, h);
    cr_assert_float_eq(h[0], 0.5f, 0, "unscaled gradient 1, lr 0.5");
    grad_scaler_update(&gs);
    float bad[2] = {INFINITY, 1.0f};
    set_grad(p, bad, 2);
    cr_assert_eq(grad_scaler_step(&gs, opt), OOM_OK);
    cr_assert(gs.found_inf, "the inf is found");
    tensor_to_host(p, h);
    cr_assert_float_eq(h[1], 1.5f, 0, "and the step skipped");
    grad_scaler_update(&gs);
    cr_assert_float_eq(gs.scale_value, 32768.0, 0, "the scale backs off by half");
    cr_assert_float_eq(tensor_item(gs.scale), 32768.0, 0);
    tensor_release(loss);
    tensor_release(scaled);
    grad_scaler_free(&gs);
    optim_free(opt);
    tensor_release(p);
    close_rt(r);
}

/* ---- regressions found in review ----------------------------------------------------------------------------- */

Test(nn, nesterov_changes_grad_in_place_as_pytorch)
{
    rt *r = open_rt();
    if (!r->computes) {
        rt_close(r);
        return;
    }
    float v[2] = {0.0f, 0.0f}, g[2] = {0.5f, -1.0f};
    tensor *p = param_from(r, v, 2);
    set_grad(p, g, 2);
    optimizer *opt = optim_sgd(r, &p, 1, 0.1, 0.9, 0.0, 0.0, true);
    cr_assert_eq(optim_step(opt), OOM_OK);
    float h[2];
    tensor_to_host(p->grad, h); /* _foreach_add_(grads, bufs, alpha=momentum): g + 0.9 g at the first step */
    cr_assert_float_eq(h[0], 0.95f, 1e-7);
    cr_assert_float_eq(h[1], -1.9f, 1e-7);
    tensor_to_host(p, h);
    cr_assert_float_eq(h[0], -0.095f, 1e-7);
    optim_free(opt);
    tensor_release(p);
    close_rt(r);
}

Test(nn, an_optimizer_step_that_runs_out_of_memory_can_be_retried)
{
    const int64_t P = 4 << 20; /* 16 MiB parameters */
    for (int adam = 0; adam < 2; adam++) {
        /* parameters and gradients hold 64 MiB. SGD (budget 80 MiB) makes its first momentum buffer, not the
         * second. Adam (112 MiB, with 32 MiB of something else held) makes exp_avg for the first parameter, not
         * exp_avg_sq. */
        rt *r = test_rt_open((size_t)(adam ? 112 : 80) << 20, NULL);
        cr_assert_not_null(r);
        tensor *ps[2] = {tensor_zeros(r, DT_F32, SHAPE(P)), tensor_zeros(r, DT_F32, SHAPE(P))};
        for (int i = 0; i < 2; i++) {
            ps[i]->requires_grad = true;
            ps[i]->grad = tensor_full(r, DT_F32, SHAPE(P), 1.0);
        }
        tensor *blocker = adam ? tensor_empty(r, DT_F32, SHAPE(2 * P)) : NULL;
        optimizer *opt = adam ? optim_adam(r, ps, 2, 1e-3, 0.9, 0.999, 1e-8, 0.0)
                              : optim_sgd(r, ps, 2, 0.1, 0.9, 0.0, 0.0, false);
        cr_assert_eq(optim_step(opt), OOM_ENOMEM_DEVICE, "%s", adam ? "adam" : "sgd");
        rt_clear(r);
        if (adam) {
            cr_assert(opt->state_a[0] && !opt->state_b[0], "exp_avg made, exp_avg_sq not");
        } else { /* SGD made its buffers before any update: nothing moved, nothing kept */
            cr_assert_null(opt->state_a[0]);
            cr_assert_eq(ps[0]->st->version, 0, "no parameter was stepped");
        }
        tensor_release(blocker); /* free memory and step again */
        tensor_release(ps[1]->grad);
        ps[1]->grad = NULL;
        cr_assert_eq(optim_step(opt), OOM_OK, "%s retry: %s", adam ? "adam" : "sgd", rt_message(r));
        cr_assert_not_null(opt->state_a[0]);
        if (adam)
            cr_assert_not_null(opt->state_b[0], "exp_avg_sq completed on the retry");
        cr_assert_eq(ps[0]->st->version, 1);
        optim_free(opt);
        tensor_release(ps[0]);
        tensor_release(ps[1]);
        close_rt(r);
    }
}

Test(nn, nested_autocast_restores_the_outer_dtype)
{
    rt *r = open_rt();
    tensor *a = tensor_randn(r, DT_F32, SHAPE(2, 2), 0.0, 1.0), *b = tensor_randn(r, DT_F32, SHAPE(2, 2), 0.0, 1.0);
    amp_autocast_enter(r, DT_F16);
    amp_autocast_enter(r, DT_BF16);
    tensor *c1 = op_mm(a, b);
    amp_autocast_exit(r);
    tensor *c2 = op_mm(a, b);
    amp_autocast_exit(r);
    tensor *c3 = op_mm(a, b);
    cr_assert_eq(c1->dt, DT_BF16);
    cr_assert_eq(c2->dt, DT_F16, "back in the outer float16 region");
    cr_assert_eq(c3->dt, DT_F32);
    tensor *ts[] = {a, b, c1, c2, c3};
    for (int i = 0; i < 5; i++)
        tensor_release(ts[i]);
    close_rt(r);
}

Test(nn, grad_scaler_completes_its_state_after_an_oom)
{
    /* one 2 MiB small segment: a budget of 2 MiB would cap at 2 MiB - 1 (set_per_process_memory_fraction's
     * rounding), so ask for a byte more */
    rt *r = test_rt_open(((size_t)2 << 20) + 1, NULL);
    cr_assert_not_null(r);
    tensor *f1 = tensor_empty(r, DT_F32, SHAPE(262144)), *f2 = tensor_empty(r, DT_F32, SHAPE((1048576 - 1024) / 4));
    tensor *l = tensor_full(r, DT_F32, SCALAR, 1.0); /* 512 bytes left: _scale fits, _growth_tracker does not */
    grad_scaler gs;
    grad_scaler_init(&gs, r);
    cr_assert_null(grad_scaler_scale(&gs, l));
    cr_assert_eq(rt_status(r), OOM_ENOMEM_DEVICE);
    rt_clear(r);
    tensor_release(f1);
    tensor *scaled = grad_scaler_scale(&gs, l);
    cr_assert_not_null(scaled, "%s", rt_message(r));
    cr_assert_not_null(gs.growth_tracker);
    cr_assert_eq(grad_scaler_update(&gs), OOM_OK);
    tensor_release(scaled);
    tensor_release(l);
    tensor_release(f2);
    grad_scaler_free(&gs);
    close_rt(r);
}

Test(nn, half_after_the_optimizer_keeps_the_parameters)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 256, 2, 10, DT_F32);
    tensor *params[6];
    nn_mlp_parameters(m, params, 6);
    optimizer *opt = optim_sgd(r, params, 6, 0.1, 0.0, 0.0, 0.0, false);
    params[0]->grad = tensor_zeros(r, DT_F32, params[0]->ndim, params[0]->shape);
    cr_assert_eq(nn_mlp_to(m, DT_F16), OOM_OK);
    cr_assert_eq(m->layers[0].weight, params[0], "the same parameter object");
    cr_assert_eq(params[0]->dt, DT_F16);
    cr_assert_eq(params[0]->grad->dt, DT_F16, "param.grad.data = fn(param.grad)");
    int64_t f16 = 2 * (block_bytes(256 * 256 * 2) + block_bytes(256 * 2)) + block_bytes(10 * 256 * 2) + block_bytes(20);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), f16 + block_bytes(256 * 256 * 2));
    cr_assert_eq(optim_step(opt), OOM_OK, "%s", rt_message(r));
    optim_free(opt);
    nn_mlp_free(m);
    close_rt(r);
}

/* nn.Sequential.forward runs `input = module(input)`: under no_grad a Linear's input is freed once its output exists,
 * before the ReLU allocates. So the forward's peak is the caller's input plus two activations (PyTorch 2.11, MLP(4096,
 * 6), batch 8192: 0.84 GB = the parameters, three 128 MiB tensors and cuBLAS's 32 MiB workspace), not three. */
Test(nn, mlp_forward_under_no_grad_keeps_two_activations_beside_the_input)
{
    rt *r = open_rt();
    nn_mlp *m = nn_mlp_new(r, 64, 4, 10, DT_F32);
    tensor *x = tensor_randn(r, DT_F32, SHAPE(512, 64), 0.0, 1.0); /* 128 KiB activations */
    cr_assert(rt_ok(r), "%s", rt_message(r));
    int64_t base = test_stat(r, "allocated_bytes.all.current");
    cachealloc_reset_peak(r->ca);
    tensor *out = NULL;
    RT_NO_GRAD(r) { out = nn_mlp_forward(m, x); }
    cr_assert(rt_ok(r), "%s", rt_message(r));
    cr_assert_eq(test_stat(r, "allocated_bytes.all.peak") - base, 2 * (512 * 64 * 4));
    tensor_release(out);
    tensor_release(x);
    nn_mlp_free(m);
    close_rt(r);
}
