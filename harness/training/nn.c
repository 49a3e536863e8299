/* nn.c - Linear, RNNCell and the MLP. See nn.h. */
#include "training/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/autograd.h"
#include "runtime/ops.h"

/* A checkpointed segment (ag_segment, owner the nn_mlp) runs functions [first, end): the modules (2i is Linear i,
 * 2i + 1 the ReLU after it, 2 * depth the classifier), or with checkpoint_blocks the hidden blocks (i:
 * Sequential(Linear i, ReLU)). */

/* A parameter: Parameter(torch.empty(shape)), then reset_parameters()'s init.uniform_(-bound, bound) in place,
 * so it starts at version 1 as in PyTorch (the version autograd's messages print). */
static tensor *parameter(rt *r, dtype dt, int ndim, const int64_t *shape, double bound)
{
    tensor *p = tensor_empty(r, dt, ndim, shape);
    if (p && tensor_uniform_(p, -bound, bound) != OOM_OK)
        p = (tensor_release(p), NULL);
    if (p)
        p->requires_grad = true;
    return p;
}

oom_status nn_linear_init(nn_linear *l, rt *r, int64_t in, int64_t out, bool bias, dtype dt)
{
    *l = (nn_linear){.in_features = in, .out_features = out};
    double bound = in > 0 ? 1.0 / sqrt((double)in) : 0.0; /* kaiming_uniform_(a=sqrt(5)) and the bias rule */
    l->weight = parameter(r, dt, SHAPE(out, in), bound);
    if (bias)
        l->bias = parameter(r, dt, SHAPE(out), bound);
    if (!rt_ok(r)) {
        nn_linear_free(l);
        return r->status;
    }
    return OOM_OK;
}

void nn_linear_free(nn_linear *l)
{
    tensor_release(l->weight);
    tensor_release(l->bias);
    l->weight = l->bias = NULL;
}

tensor *nn_linear_forward(const nn_linear *l, tensor *x) { return op_linear(x, l->weight, l->bias); }

oom_status nn_rnn_cell_init(nn_rnn_cell *c, rt *r, int64_t input_size, int64_t hidden_size)
{
    *c = (nn_rnn_cell){.input_size = input_size, .hidden_size = hidden_size};
    double bound = 1.0 / sqrt((double)hidden_size);
    c->weight_ih = parameter(r, DT_F32, SHAPE(hidden_size, input_size), bound);
    c->weight_hh = parameter(r, DT_F32, SHAPE(hidden_size, hidden_size), bound);
    c->bias_ih = parameter(r, DT_F32, SHAPE(hidden_size), bound);
    c->bias_hh = parameter(r, DT_F32, SHAPE(hidden_size), bound);
    if (!rt_ok(r)) {
        nn_rnn_cell_free(c);
        return r->status;
    }
    return OOM_OK;
}

void nn_rnn_cell_free(nn_rnn_cell *c)
{
    tensor_release(c->weight_ih);
    tensor_release(c->weight_hh);
    tensor_release(c->bias_ih);
    tensor_release(c->bias_hh);
    c->weight_ih = c->weight_hh = c->bias_ih = c->bias_hh = NULL;
}

size_t nn_rnn_cell_parameters(const nn_rnn_cell *c, tensor **out)
{
    out[0] = c->weight_ih;
    out[1] = c->weight_hh;
    out[2] = c->bias_ih;
    out[3] = c->bias_hh;
    return 4;
}

tensor *nn_rnn_cell_forward(const nn_rnn_cell *c, tensor *x, tensor *h)
{
    if (!x)
        return NULL;
    tensor *h0 = h ? tensor_retain(h) : tensor_zeros(x->rt, x->dt, SHAPE(x->shape[0], c->hidden_size));
    /* SimpleCell: linear_hh(hidden).add_(linear_ih(input)).tanh() */
    tensor *hh = op_linear(h0, c->weight_hh, c->bias_hh);
    tensor *ih = op_linear(x, c->weight_ih, c->bias_ih);
    tensor *sum = op_add_(hh, ih, 1.0); /* borrowed: hh itself */
    tensor *out = sum ? op_tanh(sum) : NULL;
    tensor_release(ih);
    tensor_release(hh);
    tensor_release(h0);
    return out;
}

nn_mlp *nn_mlp_new(rt *r, int64_t width, int depth, int64_t classes, dtype dt)
{
    if (!rt_ok(r))
        return NULL;
    if (width < 1 || depth < 0 || classes < 1) {
        rt_fail(r, OOM_EINVAL, "MLP(width=%lld, depth=%d, classes=%lld): sizes must be positive", (long long)width,
                depth, (long long)classes);
        return NULL;
    }
    nn_mlp *m = calloc(1, sizeof *m);
    nn_linear *layers = calloc((size_t)depth + 1, sizeof *layers);
    ag_segment *segments = calloc(2 * (size_t)depth + 1, sizeof *segments);
    if (!m || !layers || !segments) {
        fprintf(stderr, "oomlab: out of host memory\n");
        abort();
    }
    m->rt = r;
    m->width = width;
    m->depth = depth;
    m->classes = classes;
    m->layers = layers;
    m->segments = segments;
    for (int i = 0; i <= depth; i++) {
        if (nn_linear_init(&layers[i], r, width, i < depth ? width : classes, true, dt) != OOM_OK) {
            nn_mlp_free(m);
            return NULL;
        }
    }
    return m;
}

void nn_mlp_free(nn_mlp *m)
{
    if (!m)
        return;
    for (int i = 0; i <= m->depth; i++)
        nn_linear_free(&m->layers[i]);
    free(m->layers);
    free(m->segments);
    free(m);
}

/* Module k of the Sequential: Linear k / 2 for even k, else a ReLU. */
static tensor *run_module(const nn_mlp *m, int k, tensor *x)
{
    return k % 2 == 0 ? nn_linear_forward(&m->layers[k / 2], x) : op_relu(x);
}

/* Hidden block i, nn.Sequential(Linear i, ReLU): `for module in self: input = module(input)`. The caller's
 * reference to x (run_function's `input`) stays until this returns, so x lives through the ReLU. */
static tensor *run_block(const nn_mlp *m, int i, tensor *x)
{
    tensor *h = tensor_retain(x);
    for (int k = 2 * i; k < 2 * i + 2 && h; k++)
        tensor_assign(&h, run_module(m, k, h));
    return h;
}

/* checkpoint_sequential's run_function(start, end): `for j in range(start, end + 1): input = functions[j](input)`;
 * functions[j] is a module, or with checkpoint_blocks a hidden block. */
static tensor *run_segment(void *ctx, tensor *x)
{
    const ag_segment *s = ctx;
    const nn_mlp *m = s->owner;
    tensor *h = tensor_retain(x);
    for (int j = s->first; j < s->end && h; j++)
        tensor_assign(&h, m->checkpoint_blocks ? run_block(m, j, h) : run_module(m, j, h));
    return h;
}

/* checkpoint_sequential(functions, nseg, x); the segments are contexts of nodes that may outlive this call: they
 * live in the model */
static tensor *checkpoint_sequential(nn_mlp *m, int nfun, int nseg, const char *what, tensor *x)
{
    return autograd_checkpoint_sequential(run_segment, m, m->segments, nfun, nseg, m->checkpoint_reentrant, what, x);
}

tensor *nn_mlp_forward(nn_mlp *m, tensor *x)
{
    if (!m || !x)
        return NULL;
    if (m->checkpoint_blocks) {
        /* h = checkpoint_sequential(blocks, segments, x); out = classifier(h) */
        if (m->checkpoint_segments < 1) {
            rt_fail(m->rt, OOM_EINVAL, "integer division or modulo by zero (checkpoint_sequential: %d segments)",
                    m->checkpoint_segments);
            return NULL;
        }
        tensor *h = checkpoint_sequential(m, m->depth, m->checkpoint_segments, "blocks", x);
        if (h)
            tensor_assign(&h, run_module(m, 2 * m->depth, h));
        return h;
    }
    int nmod = 2 * m->depth + 1;
    if (m->checkpoint_segments <= 1) {
        ag_segment all = {m, 0, nmod}; /* nn.Sequential's forward: the same loop */
        return run_segment(&all, x);
    }
    return checkpoint_sequential(m, nmod, m->checkpoint_segments, "modules", x);
}

size_t nn_mlp_parameters(const nn_mlp *m, tensor **out, size_t cap)
{
    size_t n = 0;
    for (int i = 0; i <= m->depth; i++) {
        if (n < cap)
            out[n] = m->layers[i].weight;
        n++;
        if (m->layers[i].bias) {
            if (n < cap)
                out[n] = m->layers[i].bias;
            n++;
        }
    }
    return n;
}

/* Module._apply(fn): param.data = fn(param), and param.grad.data = fn(param.grad), one parameter at a time; the
 * parameters keep their identity, so an optimizer made before still holds them. */
oom_status nn_mlp_to(nn_mlp *m, dtype dt)
{
    rt *r = m->rt;
    oom_status st = OOM_OK;
    RT_NO_GRAD(r)
    {
        for (int i = 0; i <= m->depth && st == OOM_OK; i++) {
            tensor *ps[2] = {m->layers[i].weight, m->layers[i].bias};
            for (int j = 0; j < 2 && st == OOM_OK; j++) {
                tensor *p = ps[j];
                if (!p || p->dt == dt)
                    continue;
                tensor *cast = op_to(p, dt);
                if (!cast) {
                    st = r->status;
                    break;
                }
                tensor_set_data(p, cast); /* the old storage goes here */
                if (p->grad) {
                    tensor *gcast = op_to(p->grad, dt);
                    if (!gcast) {
                        st = r->status;
                        break;
                    }
                    tensor_set_data(p->grad, gcast);
                }
            }
        }
    }
    return st;
}

/* ---- the retained_graph scenario: GRUCell ------------------------------------------------------------------- */

oom_status nn_gru_cell_init(nn_gru_cell *c, rt *r, int64_t input_size, int64_t hidden_size)
{
    *c = (nn_gru_cell){.input_size = input_size, .hidden_size = hidden_size};
    double bound = 1.0 / sqrt((double)hidden_size);
    c->weight_ih = parameter(r, DT_F32, SHAPE(3 * hidden_size, input_size), bound);
    c->weight_hh = parameter(r, DT_F32, SHAPE(3 * hidden_size, hidden_size), bound);
    c->bias_ih = parameter(r, DT_F32, SHAPE(3 * hidden_size), bound);
    c->bias_hh = parameter(r, DT_F32, SHAPE(3 * hidden_size), bound);
    if (!rt_ok(r)) {
        nn_gru_cell_free(c);
        return r->status;
    }
    return OOM_OK;
}

void nn_gru_cell_free(nn_gru_cell *c)
{
    tensor_release(c->weight_ih);
    tensor_release(c->weight_hh);
    tensor_release(c->bias_ih);
    tensor_release(c->bias_hh);
    c->weight_ih = c->weight_hh = c->bias_ih = c->bias_hh = NULL;
}

size_t nn_gru_cell_parameters(const nn_gru_cell *c, tensor **out)
{
    out[0] = c->weight_ih;
    out[1] = c->weight_hh;
    out[2] = c->bias_ih;
    out[3] = c->bias_hh;
    return 4;
}

tensor *nn_gru_cell_forward(const nn_gru_cell *c, tensor *x, tensor *h)
{
    if (!x)
        return NULL;
    tensor *h0 = h ? tensor_retain(h) : tensor_zeros(x->rt, x->dt, SHAPE(x->shape[0], c->hidden_size));
    /* params.matmul_ih(input), then params.matmul_hh(hidden): at::matmul of 2-D operands is mm */
    tensor *wih_t = op_t(c->weight_ih);
    tensor *igates = op_mm(x, wih_t);
    tensor *whh_t = op_t(c->weight_hh);
    tensor *hgates = op_mm(h0, whh_t);
    tensor *hy = op_thnn_fused_gru_cell(igates, hgates, h0, c->bias_ih, c->bias_hh);
    tensor_release(hgates);
    tensor_release(whh_t);
    tensor_release(igates);
    tensor_release(wih_t);
    tensor_release(h0);
    return hy;
}
