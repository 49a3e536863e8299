/* ops.c - differentiable ops: forward kernels, the nodes they record, and their backward formulas.
 * See ops.h for what each node saves; the formulas follow tools/autograd/derivatives.yaml and
 * torch/csrc/autograd/FunctionsManual.cpp. */
#include "runtime/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "runtime/amp.h"
#include "runtime/autograd.h"
#include "runtime/reduce_config.h"

bool op_kernel_ok(rt *r, oom_status st)
{
    if (st == OOM_OK)
        return true;
    rt_fail_detail(r, st, NULL);
    return false;
}

/* Launch a kernel unless the rt is a dry run; false (failure recorded) if it failed. */
#define KRUN(r, call) (!(r)->computes || op_kernel_ok((r), rt_kernels(r)->call))

/* Every op starts here: NULL operands, an earlier failure, or a checkpoint recompute that has stopped early
 * (autograd.h) make it return NULL. */
static bool live(int n, tensor *const *ts)
{
    for (int i = 0; i < n; i++)
        if (!ts[i])
            return false;
    return rt_ok(ts[0]->rt) && !ts[0]->rt->ck_stop;
}
#define LIVE(...) live((int)(sizeof((tensor *[]){__VA_ARGS__}) / sizeof(tensor *)), (tensor *[]){__VA_ARGS__})

static tensor *empty_like(const tensor *t) { return tensor_empty_like(t); }

static bool need_contiguous(const tensor *t, const char *op)
{
    if (t->transposed) {
        rt_fail(t->rt, OOM_EINVAL, "%s: expected a contiguous tensor (call it on the result of .t() only "
                                   "through mm/linear)", op);
        return false;
    }
    return true;
}

/* Elementwise ops run over the storage, so their operands must share one layout: both plain, or both .t() views
 * (then the result is a .t() view too, as PyTorch keeps a dense input's strides). */
static bool same_layout(const tensor *a, const tensor *b, const char *op)
{
    if (a->transposed == b->transposed)
        return true;
    rt_fail(a->rt, OOM_EINVAL, "%s: an operand and a .t() view of another layout: oomlab's elementwise kernels need "
                               "one layout (make one contiguous first)",
            op);
    return false;
}

static bool same_shape(const tensor *a, const tensor *b, const char *op)
{
    if (tensor_same_shape(a, b) && a->dt == b->dt)
        return true;
    char sa[64], sb[64];
    rt_fail(a->rt, OOM_EINVAL, "%s: the operands must have the same shape and dtype (got %s %s and %s %s)", op,
            tensor_shape_str(a, sa, sizeof sa), dtype_str(a->dt), tensor_shape_str(b, sb, sizeof sb),
            dtype_str(b->dt));
    return false;
}

static bool is_float(const tensor *t, const char *op)
{
    if (t->dt != DT_I64)
        return true;
    rt_fail(t->rt, OOM_EINVAL, "%s: not implemented for 'Long'", op);
    return false;
}

/* A view made by t(), view() or narrow(): remembered so that in-place ops on it can be refused (inplace_ok). */
/* A differentiable view (as_view): it holds its base, the base's own base when that is a view (ViewInfo::chain),
 * in grad mode or not, so the storage is shared by one more tensor while the view lives. */
static tensor *mark_view(tensor *out, tensor *base)
{
    if (out) {
        out->is_view = true;
        out->view_of_leaf = base->view_of_leaf || (base->requires_grad && !base->grad_fn);
        out->base = tensor_retain(base->base ? base->base : base);
        OOM_VALIDATE("tensor", tensor_check, out);
    }
    return out;
}

/* The node records the input shape and dtype (the plain values PyTorch saves beside tensors). */
static void note_input(ag_node *n, const tensor *in)
{
    n->in_dtype = in->dt;
    n->in_ndim = in->ndim;
    for (int i = 0; i < in->ndim; i++)
        n->in_shape[i] = in->shape[i];
}

/* ---- add, mul, clone ----------------------------------------------------------------------------- */

static oom_status add_backward(ag_node *n, tensor *grad, tensor **grads)
{
    double alpha = n->fparam[0];
    if (n->next[0].fn)
        grads[0] = tensor_retain(grad);
    if (n->next[1].fn) {
        if (alpha == 1.0) {
            grads[1] = tensor_retain(grad); /* the same tensor flows to both inputs, as in PyTorch */
        } else {
            grads[1] = empty_like(grad);
            if (!grads[1] || !KRUN(n->rt, scale(grad->dt, tensor_data(grads[1]), tensor_data(grad), (float)alpha,
                                                tensor_numel(grad))))
                return n->rt->status;
        }
    }
    return OOM_OK;
}
static const ag_fn add_fn = {"AddBackward0", add_backward, false};

tensor *op_add(tensor *a, tensor *b, double alpha)
{
    if (!LIVE(a, b) || !same_shape(a, b, "add") || !same_layout(a, b, "add"))
        return NULL;
    rt *r = a->rt;
    tensor *out = empty_like(a);
    if (!out || !KRUN(r, add(a->dt, tensor_data(out), tensor_data(a), tensor_data(b), (float)alpha,
                             tensor_numel(a))))
        return tensor_release(out), NULL;
    tensor *in[2] = {a, b};
    if (ag_any_requires_grad(r, 2, in)) {
        ag_node *n = ag_node_new(r, &add_fn, 2, in);
        n->fparam[0] = alpha;
        ag_set_history(out, n);
    }
    return out;
}

/* check_inplace: a leaf that requires grad, or a view of one, may not be changed while grad mode records. PyTorch
 * rebases an in-place op on any other view that takes part in autograd onto its base (CopySlices); oomlab does
 * not, and refuses it rather than drop the gradient. */
static bool inplace_ok(tensor *self, const tensor *other)
{
    rt *r = self->rt;
    if (!r->grad_enabled)
        return true;
    if (self->requires_grad && !self->grad_fn) {
        rt_fail(r, OOM_EAUTOGRAD, "a leaf Variable that requires grad is being used in an in-place operation.");
        return false;
    }
    if (self->is_view && self->view_of_leaf) {
        rt_fail(r, OOM_EAUTOGRAD,
                "a view of a leaf Variable that requires grad is being used in an in-place operation.");
        return false;
    }
    if (self->is_view && (self->requires_grad || (other && other->requires_grad))) {
        rt_fail(r, OOM_EINVAL, "in-place operation on a view that takes part in autograd: PyTorch rebases it onto its "
                               "base (CopySlices), which oomlab does not model");
        return false;
    }
    return true;
}

tensor *op_add_(tensor *self, tensor *other, double alpha)
{
    if (!LIVE(self, other) || !same_shape(self, other, "add_") || !same_layout(self, other, "add_") ||
        !inplace_ok(self, other))
        return NULL;
    rt *r = self->rt;
    if (!KRUN(r, add(self->dt, tensor_data(self), tensor_data(self), tensor_data(other), (float)alpha,
                     tensor_numel(self))))
        return NULL;
    tensor_bump_version(self);
    tensor *in[2] = {self, other};
    if (ag_any_requires_grad(r, 2, in)) {
        ag_node *n = ag_node_new(r, &add_fn, 2, in);
        n->fparam[0] = alpha;
        ag_rebase_history(self, n);
    }
    return self;
}

/* x * 2, x.mul_(2): Python wraps the number into a 0-dim CPU tensor, so the node is MulBackward0 and what it
 * saves (`other`, the wrapped number) takes no device memory: grad * s. */
static oom_status mul_scalar_backward(ag_node *n, tensor *grad, tensor **grads)
{
    if (!n->next[0].fn)
        return OOM_OK;
    grads[0] = empty_like(grad);
    if (!grads[0] || !KRUN(n->rt, scale(grad->dt, tensor_data(grads[0]), tensor_data(grad), (float)n->fparam[0],
                                        tensor_numel(grad))))
        return n->rt->status;
    return OOM_OK;
}
static const ag_fn mul_scalar_fn = {"MulBackward0", mul_scalar_backward, false};

tensor *op_copy_(tensor *self, tensor *src)
{
    if (!LIVE(self) || !LIVE(src) || !need_contiguous(self, "copy_") || !need_contiguous(src, "copy_"))
        return NULL;
    rt *r = self->rt;
    if (self->dt != src->dt || tensor_numel(self) != tensor_numel(src)) {
        rt_fail(r, OOM_EINVAL, "copy_: %s of %lld elements from %s of %lld", dtype_str(self->dt),
                (long long)tensor_numel(self), dtype_str(src->dt), (long long)tensor_numel(src));
        return NULL;
    }
    if (!KRUN(r, copy(self->dt, tensor_data(self), tensor_data(src), tensor_numel(self))))
        return NULL;
    tensor_bump_version(self);
    return self;
}

tensor *op_mul_(tensor *self, double s)
{
    if (!LIVE(self) || !need_contiguous(self, "mul_") || !is_float(self, "mul_") || !inplace_ok(self, NULL))
        return NULL;
    rt *r = self->rt;
    if (!KRUN(r, scale(self->dt, tensor_data(self), tensor_data(self), (float)s, tensor_numel(self))))
        return NULL;
    tensor_bump_version(self);
    if (ag_any_requires_grad(r, 1, &self)) {
        ag_node *n = ag_node_new(r, &mul_scalar_fn, 1, &self);
        n->fparam[0] = s;
        ag_rebase_history(self, n);
    }
    return self;
}

/* other's gradient first (inputs in name order, as Functions.cpp computes them) */
static oom_status mul_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    for (int i = 1; i >= 0; i--) {
        if (!n->next[i].fn)
            continue;
        tensor *other = ag_unpack(n, 1 - i); /* d(a*b)/da = b: slot 1 holds other, slot 0 self */
        if (!other)
            return r->status;
        grads[i] = empty_like(grad);
        if (!grads[i] || !KRUN(r, mul(grad->dt, tensor_data(grads[i]), tensor_data(grad), tensor_data(other),
                                      tensor_numel(grad))))
            return r->status;
    }
    return OOM_OK;
}
static const ag_fn mul_fn = {"MulBackward0", mul_backward, false};

tensor *op_mul(tensor *a, tensor *b)
{
    if (!LIVE(a, b) || !same_shape(a, b, "mul") || !same_layout(a, b, "mul") || !is_float(a, "mul"))
        return NULL;
    rt *r = a->rt;
    tensor *out = empty_like(a);
    if (!out || !KRUN(r, mul(a->dt, tensor_data(out), tensor_data(a), tensor_data(b), tensor_numel(a))))
        return tensor_release(out), NULL;
    tensor *in[2] = {a, b};
    if (ag_any_requires_grad(r, 2, in)) {
        ag_node *n = ag_node_new(r, &mul_fn, 2, in);
        ag_save(n, 0, n->next[1].fn ? a : NULL, false); /* self, needed for other's gradient */
        ag_save(n, 1, n->next[0].fn ? b : NULL, false); /* other, needed for self's gradient */
        ag_set_history(out, n);
    }
    return out;
}

static oom_status passthrough_backward(ag_node *n, tensor *grad, tensor **grads)
{
    if (n->next[0].fn)
        grads[0] = tensor_retain(grad);
    return OOM_OK;
}
static const ag_fn clone_fn = {"CloneBackward0", passthrough_backward, false};

tensor *op_clone(tensor *t)
{
    if (!LIVE(t))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, cast(t->dt, tensor_data(out), t->dt, tensor_data(t), tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t))
        ag_set_history(out, ag_node_new(r, &clone_fn, 1, &t));
    return out;
}

/* ---- views: t, view, narrow --------------------------------------------------------------------- */

static oom_status t_backward(ag_node *n, tensor *grad, tensor **grads)
{
    if (n->next[0].fn && !(grads[0] = op_t(grad)))
        return n->rt->status;
    return OOM_OK;
}
static const ag_fn t_fn = {"TBackward0", t_backward, true};

tensor *op_t(tensor *t)
{
    if (!LIVE(t))
        return NULL;
    if (t->ndim != 2) {
        rt_fail(t->rt, OOM_EINVAL, "t() expects a tensor with <= 2 dimensions, but self is %dD", t->ndim);
        return NULL;
    }
    int64_t shape[2] = {t->shape[1], t->shape[0]};
    tensor *out = mark_view(tensor_alias(t, t->offset, 2, shape, !t->transposed), t);
    if (ag_any_requires_grad(t->rt, 1, &t))
        ag_set_history(out, ag_node_new(t->rt, &t_fn, 1, &t));
    return out;
}

static oom_status view_backward(ag_node *n, tensor *grad, tensor **grads)
{
    if (n->next[0].fn && !(grads[0] = op_view(grad, n->in_ndim, n->in_shape)))
        return n->rt->status;
    return OOM_OK;
}
static const ag_fn view_fn = {"ViewBackward0", view_backward, true};

tensor *op_view(tensor *t, int ndim, const int64_t *shape)
{
    if (!LIVE(t) || !need_contiguous(t, "view"))
        return NULL;
    int64_t numel = 1;
    bool ok = ndim >= 0 && ndim <= TENSOR_MAX_DIMS;
    for (int i = 0; ok && i < ndim; i++) {
        ok = shape[i] >= 0 && (shape[i] == 0 || numel <= INT64_MAX / shape[i]);
        numel = ok ? numel * shape[i] : 0;
    }
    if (!ok || numel != tensor_numel(t)) {
        char s[64];
        rt_fail(t->rt, OOM_EINVAL, "shape is invalid for input of size %lld (input %s)", (long long)tensor_numel(t),
                tensor_shape_str(t, s, sizeof s));
        return NULL;
    }
    tensor *out = mark_view(tensor_alias(t, t->offset, ndim, shape, false), t);
    if (ag_any_requires_grad(t->rt, 1, &t)) {
        ag_node *n = ag_node_new(t->rt, &view_fn, 1, &t);
        note_input(n, t);
        ag_set_history(out, n);
    }
    return out;
}

static oom_status slice_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    if (!n->next[0].fn)
        return OOM_OK;
    /* slice_backward: zeros of the input's shape, the gradient copied into the rows it came from */
    tensor *g = tensor_zeros(r, grad->dt, n->in_ndim, n->in_shape);
    if (!g)
        return r->status;
    size_t row = tensor_numel(grad) / (grad->shape[0] ? (size_t)grad->shape[0] : 1) * dtype_size(grad->dt);
    unsigned char *dst = tensor_data(g);
    unsigned char *at = dst ? dst + (size_t)n->iparam[0] * row : NULL;
    if (r->computes &&
        !op_kernel_ok(r, rt_kernels(r)->cast(grad->dt, at, grad->dt, tensor_data(grad), tensor_numel(grad)))) {
        tensor_release(g);
        return r->status;
    }
    grads[0] = g;
    return OOM_OK;
}
static const ag_fn slice_fn = {"SliceBackward0", slice_backward, true};

tensor *op_narrow(tensor *t, int64_t start, int64_t length)
{
    if (!LIVE(t) || !need_contiguous(t, "narrow"))
        return NULL;
    if (t->ndim < 1 || start < 0 || length < 0 || start > t->shape[0] || length > t->shape[0] - start) {
        rt_fail(t->rt, OOM_EINVAL, "start (%lld) + length (%lld) exceeds dimension size (%lld).", (long long)start,
                (long long)length, (long long)(t->ndim ? t->shape[0] : 0));
        return NULL;
    }
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    size_t row = t->shape[0] ? tensor_nbytes(t) / (size_t)t->shape[0] : 0;
    shape[0] = length;
    tensor *out = mark_view(tensor_alias(t, t->offset + (size_t)start * row, t->ndim, shape, false), t);
    if (ag_any_requires_grad(t->rt, 1, &t)) {
        ag_node *n = ag_node_new(t->rt, &slice_fn, 1, &t);
        note_input(n, t);
        n->iparam[0] = start;
        ag_set_history(out, n);
    }
    return out;
}

/* ---- to(dtype) ---------------------------------------------------------------------------------- */

static oom_status to_backward(ag_node *n, tensor *grad, tensor **grads)
{
    if (!n->next[0].fn)
        return OOM_OK;
    /* _to_copy_backward: the gradient goes back to the source dtype */
    bool prev = rt_set_grad_enabled(n->rt, false);
    grads[0] = op_to(grad, n->in_dtype);
    rt_set_grad_enabled(n->rt, prev);
    return grads[0] ? OOM_OK : n->rt->status;
}
static const ag_fn to_fn = {"ToCopyBackward0", to_backward, false};

tensor *op_to(tensor *t, dtype dt)
{
    if (!LIVE(t))
        return NULL;
    if (t->dt == dt)
        return tensor_retain(t);
    if (!need_contiguous(t, "to") || ((t->dt == DT_I64) != (dt == DT_I64))) {
        if (rt_ok(t->rt))
            rt_fail(t->rt, OOM_EINVAL, "to(%s) of a %s tensor is not supported", dtype_str(dt), dtype_str(t->dt));
        return NULL;
    }
    rt *r = t->rt;
    tensor *out = tensor_empty(r, dt, t->ndim, t->shape);
    if (!out || !KRUN(r, cast(dt, tensor_data(out), t->dt, tensor_data(t), tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, &to_fn, 1, &t);
        note_input(n, t);
        ag_set_history(out, n);
    }
    return out;
}

/* ---- matmuls ------------------------------------------------------------------------------------- */

/* c (m x n, contiguous) = a @ b + beta * c, for a (m x k) and b (k x n) plain or transposed views. */
static bool gemm_into(tensor *c, const tensor *a, const tensor *b, float beta)
{
    rt *r = c->rt;
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    /* a transposed view of a k x m storage is op(A) with ta; its leading dimension is the storage's row */
    int64_t lda = a->transposed ? m : k, ldb = b->transposed ? k : n;
    return KRUN(r, gemm(c->dt, a->transposed, b->transposed, m, n, k, 1.0f, tensor_data(a), lda, tensor_data(b),
                        ldb, beta, tensor_data(c), n));
}

static bool mm_shapes(const tensor *a, const tensor *b, const char *op)
{
    if (a->ndim == 2 && b->ndim == 2 && a->shape[1] == b->shape[0] && a->dt == b->dt && a->dt != DT_I64)
        return true;
    char sa[64], sb[64];
    if (a->ndim == 2 && b->ndim == 2 && a->shape[1] != b->shape[0])
        rt_fail(a->rt, OOM_EINVAL, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                (long long)a->shape[0], (long long)a->shape[1], (long long)b->shape[0], (long long)b->shape[1]);
    else
        rt_fail(a->rt, OOM_EINVAL, "%s: expected 2-D float operands of one dtype (got %s %s and %s %s)", op,
                tensor_shape_str(a, sa, sizeof sa), dtype_str(a->dt), tensor_shape_str(b, sb, sizeof sb),
                dtype_str(b->dt));
    return false;
}

/* The product of two 2-D operands into a new (m x n) tensor. */
static tensor *matmul(const tensor *a, const tensor *b)
{
    tensor *out = tensor_empty(a->rt, a->dt, SHAPE(a->shape[0], b->shape[1]));
    if (out && !gemm_into(out, a, b, 0.0f))
        return tensor_release(out), NULL;
    return out;
}

/* mm_mat1_backward: grad @ mat2.t(), or (mat2 @ grad.t()).t() when mat1 was column-major (a .t() view), so
 * that the gradient has mat1's layout. */
static tensor *mm_mat1_backward(tensor *grad, tensor *mat2, bool mat1_transposed)
{
    tensor *m2t = NULL, *gt = NULL, *p = NULL, *res = NULL;
    if (mat1_transposed) {
        gt = op_t(grad);
        p = gt ? matmul(mat2, gt) : NULL;
        res = p ? op_t(p) : NULL;
    } else {
        m2t = op_t(mat2);
        res = m2t ? matmul(grad, m2t) : NULL;
    }
    tensor_release(m2t);
    tensor_release(gt);
    tensor_release(p);
    return res;
}

/* mm_mat2_backward: mat1.t() @ grad, or (grad.t() @ mat1).t() when mat2 was column-major (F.linear's w.t()),
 * so that the weight's gradient comes out contiguous and AccumulateGrad can take it over. */
static tensor *mm_mat2_backward(tensor *grad, tensor *mat1, bool mat2_transposed)
{
    tensor *m1t = NULL, *gt = NULL, *p = NULL, *res = NULL;
    if (mat2_transposed) {
        gt = op_t(grad);
        p = gt ? matmul(gt, mat1) : NULL;
        res = p ? op_t(p) : NULL;
    } else {
        m1t = op_t(mat1);
        res = m1t ? matmul(m1t, grad) : NULL;
    }
    tensor_release(m1t);
    tensor_release(gt);
    tensor_release(p);
    return res;
}

static oom_status mat1_grad(ag_node *n, tensor *grad, tensor **grads, int i)
{
    if (!n->next[i].fn)
        return OOM_OK;
    tensor *mat2 = ag_unpack(n, 1);
    if (!mat2 || !(grads[i] = mm_mat1_backward(grad, mat2, n->iparam[0])))
        return n->rt->status;
    return OOM_OK;
}

static oom_status mat2_grad(ag_node *n, tensor *grad, tensor **grads, int i)
{
    if (!n->next[i].fn)
        return OOM_OK;
    tensor *mat1 = ag_unpack(n, 0);
    if (!mat1 || !(grads[i] = mm_mat2_backward(grad, mat1, n->iparam[1])))
        return n->rt->status;
    return OOM_OK;
}

/* next edges: self (mat1), mat2; iparam[0] = mat1 transposed, iparam[1] = mat2 transposed. Functions.cpp computes
 * a node's inputs in the order load_derivatives.py sorts their names: mm's mat2, then self. */
static oom_status mm_backward(ag_node *n, tensor *grad, tensor **grads)
{
    oom_status st = mat2_grad(n, grad, grads, 1);
    return st == OOM_OK ? mat1_grad(n, grad, grads, 0) : st;
}
static const ag_fn mm_fn = {"MmBackward0", mm_backward, false};

static void save_mm_operands(ag_node *n, tensor *mat1, tensor *mat2, int first)
{
    ag_save(n, 0, n->next[first + 1].fn ? mat1 : NULL, false); /* mat1, for mat2's gradient */
    ag_save(n, 1, n->next[first].fn ? mat2 : NULL, false);     /* mat2, for mat1's gradient */
    n->iparam[0] = mat1->transposed;
    n->iparam[1] = mat2->transposed;
}

tensor *op_mm(tensor *a, tensor *b)
{
    if (!LIVE(a, b))
        return NULL;
    rt *r = a->rt;
    tensor *cb = amp_autocast_matmul_operand(r, b); /* autocast casts the last argument first (amp.h) */
    tensor *ca = amp_autocast_matmul_operand(r, a);
    tensor *out = NULL;
    if (ca && cb && mm_shapes(ca, cb, "mm")) {
        /* the node and its saved operands come before the product, as in PyTorch's autograd kernel: a
         * checkpoint recompute that has what it needs stops here, before the output is allocated */
        tensor *in[2] = {ca, cb};
        ag_node *n = ag_any_requires_grad(r, 2, in) ? ag_node_new(r, &mm_fn, 2, in) : NULL;
        if (n)
            save_mm_operands(n, ca, cb, 0);
        if (!r->ck_stop)
            out = matmul(ca, cb);
        if (out && n)
            ag_set_history(out, n);
        else
            ag_node_release(n);
    }
    tensor_release(ca);
    tensor_release(cb);
    return out;
}

/* sum(0) of a contiguous [m, n]: the output, then ATen's reduction staging around the kernel (reduce_config.h). */
static tensor *sum_rows_of(rt *r, const tensor *a, int64_t m, int64_t n)
{
    tensor *out = tensor_empty(r, a->dt, SHAPE(n));
    reduce_staging st;
    if (!out || !reduce_staging_begin(r, ATEN_OP_SUM, ATEN_REDUCE_ROWS, a, m, n, &st))
        return tensor_release(out), NULL;
    bool ok = KRUN(r, sum_rows(a->dt, tensor_data(out), tensor_data(a), m, n));
    reduce_staging_end(&st);
    return ok ? out : (tensor_release(out), NULL);
}

/* next edges: self (bias), mat1, mat2. In name order: mat1, mat2, then self, whose formula is grad itself; its
 * reduction to the bias shape is validate_outputs' sum_to, after the node returns (so after both products). */
static oom_status addmm_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    oom_status st = mat1_grad(n, grad, grads, 1);
    if (st == OOM_OK)
        st = mat2_grad(n, grad, grads, 2);
    if (st != OOM_OK || !n->next[0].fn)
        return st;
    if (!(grads[0] = sum_rows_of(r, grad, grad->shape[0], grad->shape[1])))
        return r->status;
    return OOM_OK;
}
static const ag_fn addmm_fn = {"AddmmBackward0", addmm_backward, false};

tensor *op_addmm(tensor *bias, tensor *a, tensor *b)
{
    if (!LIVE(bias, a, b))
        return NULL;
    rt *r = a->rt;
    tensor *cb = amp_autocast_matmul_operand(r, b); /* autocast casts the last argument first (amp.h) */
    tensor *ca = amp_autocast_matmul_operand(r, a);
    tensor *cbias = amp_autocast_matmul_operand(r, bias);
    tensor *out = NULL;
    if (cbias && ca && cb && mm_shapes(ca, cb, "addmm")) {
        if (cbias->ndim != 1 || cbias->shape[0] != cb->shape[1] || cbias->dt != ca->dt) {
            char s[64];
            rt_fail(r, OOM_EINVAL, "addmm: the bias %s does not broadcast to [%lld, %lld]",
                    tensor_shape_str(cbias, s, sizeof s), (long long)ca->shape[0], (long long)cb->shape[1]);
        } else {
            /* the node and its saved operands first, as op_mm does */
            tensor *in[3] = {cbias, ca, cb};
            ag_node *n = ag_any_requires_grad(r, 3, in) ? ag_node_new(r, &addmm_fn, 3, in) : NULL;
            if (n)
                save_mm_operands(n, ca, cb, 1);
            /* the bias is broadcast into the output, then the product is added with beta = 1 */
            if (!r->ck_stop)
                out = tensor_empty(r, ca->dt, SHAPE(ca->shape[0], cb->shape[1]));
            if (out && (!KRUN(r, bias_rows(out->dt, tensor_data(out), tensor_data(cbias), out->shape[0],
                                           out->shape[1])) ||
                        !gemm_into(out, ca, cb, 1.0f)))
                out = (tensor_release(out), NULL);
            if (out && n)
                ag_set_history(out, n);
            else
                ag_node_release(n);
        }
    }
    tensor_release(cbias);
    tensor_release(ca);
    tensor_release(cb);
    return out;
}

tensor *op_linear(tensor *x, tensor *w, tensor *b)
{
    if (!LIVE(x, w))
        return NULL;
    rt *r = x->rt;
    /* linear is on autocast's lower-precision list: its arguments are cast before w.t(), the last first (amp.h):
     * bias, weight, input */
    tensor *cb = b ? amp_autocast_matmul_operand(r, b) : NULL;
    tensor *cw = amp_autocast_matmul_operand(r, w);
    tensor *cx = amp_autocast_matmul_operand(r, x);
    tensor *wt = op_t(cw);
    tensor *out = b ? op_addmm(cb, cx, wt) : op_mm(cx, wt);
    tensor_release(wt);
    tensor_release(cx);
    tensor_release(cw);
    tensor_release(cb);
    return out;
}

/* ---- activations --------------------------------------------------------------------------------- */

static oom_status relu_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *result = ag_unpack(n, 0);
    if (!result)
        return r->status;
    grads[0] = empty_like(grad);
    if (!grads[0] || !KRUN(r, relu_backward(grad->dt, tensor_data(grads[0]), tensor_data(grad),
                                            tensor_data(result), tensor_numel(grad))))
        return r->status;
    return OOM_OK;
}
static const ag_fn relu_fn = {"ReluBackward0", relu_backward, false};

static oom_status tanh_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *result = ag_unpack(n, 0);
    if (!result)
        return r->status;
    grads[0] = empty_like(grad);
    if (!grads[0] || !KRUN(r, tanh_backward(grad->dt, tensor_data(grads[0]), tensor_data(grad),
                                            tensor_data(result), tensor_numel(grad))))
        return r->status;
    return OOM_OK;
}
static const ag_fn tanh_fn = {"TanhBackward0", tanh_backward, false};

tensor *op_relu(tensor *t)
{
    if (!LIVE(t) || !need_contiguous(t, "relu") || !is_float(t, "relu"))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, relu(t->dt, tensor_data(out), tensor_data(t), tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, &relu_fn, 1, &t);
        ag_save(n, 0, out, true); /* result */
        ag_set_history(out, n);
    }
    return out;
}

tensor *op_tanh(tensor *t)
{
    if (!LIVE(t) || !need_contiguous(t, "tanh") || !is_float(t, "tanh"))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, tanh(t->dt, tensor_data(out), tensor_data(t), tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, &tanh_fn, 1, &t);
        ag_save(n, 0, out, true); /* result */
        ag_set_history(out, n);
    }
    return out;
}

/* ---- log_softmax, nll_loss, mse_loss ---------------------------------------------------------------- */

static bool rows_2d(const tensor *t, const char *op)
{
    if (t->ndim == 2 && !t->transposed && t->dt != DT_I64)
        return true;
    char s[64];
    rt_fail(t->rt, OOM_EINVAL, "%s: expected a contiguous 2-D float tensor [batch, classes] (got %s %s)", op,
            tensor_shape_str(t, s, sizeof s), dtype_str(t->dt));
    return false;
}

static oom_status log_softmax_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *result = ag_unpack(n, 0);
    if (!result)
        return r->status;
    grads[0] = empty_like(grad);
    if (!grads[0] || !KRUN(r, log_softmax_backward(grad->dt, tensor_data(grads[0]), tensor_data(grad),
                                                   tensor_data(result), grad->shape[0], grad->shape[1])))
        return r->status;
    return OOM_OK;
}
static const ag_fn log_softmax_fn = {"LogSoftmaxBackward0", log_softmax_backward, false};

/* log_softmax(t, 1, dtype): autocast's fp32_set_opt_dtype policy makes a call without a dtype run in float32
 * (the input cast first, for bfloat16 and float16 alike: a float16 input goes through _log_softmax's
 * half_to_float instead, the same bytes); with_dtype (cross_entropy's log_softmax(self, 1, self.scalar_type()))
 * leaves it in the input's dtype. */
static tensor *log_softmax_as(tensor *t, bool with_dtype)
{
    if (!LIVE(t) || !rows_2d(t, "log_softmax"))
        return NULL;
    rt *r = t->rt;
    tensor *in = with_dtype ? tensor_retain(t) : amp_autocast_f32_operand(r, t);
    tensor *out = in ? empty_like(in) : NULL;
    if (out && !KRUN(r, log_softmax(in->dt, tensor_data(out), tensor_data(in), in->shape[0], in->shape[1])))
        out = (tensor_release(out), NULL);
    if (out && ag_any_requires_grad(r, 1, &in)) {
        ag_node *n = ag_node_new(r, &log_softmax_fn, 1, &in);
        ag_save(n, 0, out, true); /* result */
        ag_set_history(out, n);
    }
    tensor_release(in);
    return out;
}

static oom_status nll_loss_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *self = ag_unpack(n, 0), *target = self ? ag_unpack(n, 1) : NULL;
    tensor *total_weight = target ? ag_unpack(n, 2) : NULL;
    if (!total_weight)
        return r->status;
    grads[0] = empty_like(self);
    if (!grads[0] || !KRUN(r, nll_loss_backward(self->dt, tensor_data(grads[0]), tensor_data(grad),
                                                tensor_data(target), tensor_data(total_weight), self->shape[0],
                                                self->shape[1])))
        return r->status;
    return OOM_OK;
}
static const ag_fn nll_loss_fn = {"NllLossBackward0", nll_loss_backward, false};

tensor *op_nll_loss(tensor *logp, tensor *target)
{
    if (!LIVE(logp, target) || !rows_2d(logp, "nll_loss"))
        return NULL;
    rt *r = logp->rt;
    if (target->dt != DT_I64 || target->ndim != 1 || target->shape[0] != logp->shape[0]) {
        char s[64];
        rt_fail(r, OOM_EINVAL, "nll_loss: expected an int64 target of shape [%lld] (got %s %s)",
                (long long)logp->shape[0], tensor_shape_str(target, s, sizeof s), dtype_str(target->dt));
        return NULL;
    }
    tensor *in = amp_autocast_f32_operand(r, logp);
    /* nll_loss_forward returns (output, total_weight), both 0-dim */
    tensor *out = in ? tensor_empty(r, in->dt, SCALAR) : NULL;
    tensor *total_weight = out ? tensor_empty(r, in->dt, SCALAR) : NULL;
    if (total_weight && !KRUN(r, nll_loss(in->dt, tensor_data(out), tensor_data(total_weight), tensor_data(in),
                                          tensor_data(target), in->shape[0], in->shape[1])))
        total_weight = (tensor_release(total_weight), NULL);
    if (!total_weight)
        out = (tensor_release(out), NULL);
    if (out && ag_any_requires_grad(r, 1, &in)) {
        tensor *edges[2] = {in, NULL}; /* target is not differentiable */
        ag_node *n = ag_node_new(r, &nll_loss_fn, 2, edges);
        ag_save(n, 0, in, false);
        ag_save(n, 1, target, false);
        ag_save(n, 2, total_weight, true);
        ag_set_history(out, n);
    }
    tensor_release(total_weight);
    tensor_release(in);
    return out;
}

tensor *op_log_softmax(tensor *t) { return log_softmax_as(t, false); }

/* cross_entropy_loss is on no autocast list: nll_loss_nd(log_softmax(self, 1, self.scalar_type()), target), so
 * under autocast the log-probabilities are made in the logits' dtype and nll_loss (on the f32 list) casts them. */
tensor *op_cross_entropy(tensor *logits, tensor *target)
{
    tensor *logp = log_softmax_as(logits, true);
    tensor *loss = op_nll_loss(logp, target);
    tensor_release(logp);
    return loss;
}

static oom_status mse_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *self = ag_unpack(n, 0), *target = self ? ag_unpack(n, 1) : NULL;
    if (!target)
        return r->status;
    if (n->next[0].fn) {
        grads[0] = empty_like(self);
        if (!grads[0] || !KRUN(r, mse_loss_backward(self->dt, tensor_data(grads[0]), tensor_data(grad),
                                                    tensor_data(self), tensor_data(target), tensor_numel(self))))
            return r->status;
    }
    if (n->next[1].fn) {
        /* d/dtarget = -d/dself: mse_loss_backward(grad, target, self) */
        grads[1] = empty_like(self);
        if (!grads[1] || !KRUN(r, mse_loss_backward(self->dt, tensor_data(grads[1]), tensor_data(grad),
                                                    tensor_data(target), tensor_data(self), tensor_numel(self))))
            return r->status;
    }
    return OOM_OK;
}
static const ag_fn mse_fn = {"MseLossBackward0", mse_backward, false};

tensor *op_mse_loss(tensor *input, tensor *target)
{
    if (!LIVE(input, target))
        return NULL;
    rt *r = input->rt;
    tensor *b = amp_autocast_f32_operand(r, target); /* autocast casts the last argument first (amp.h) */
    tensor *a = amp_autocast_f32_operand(r, input);
    tensor *out = NULL;
    if (a && b && same_shape(a, b, "mse_loss") && need_contiguous(a, "mse_loss") &&
        need_contiguous(b, "mse_loss") && is_float(a, "mse_loss")) {
        /* Loss.cpp, structured: TORCH_META_FUNC(mse_loss) allocates the output at the inputs' shape and resize_({})
         * makes it 0-dim, which never shrinks a storage: the loss keeps numel elements' bytes. TORCH_IMPL_FUNC
         * then makes the unreduced loss (the same size again), mean_out reduces it into the output (with its
         * staging), and the unreduced loss goes when the function returns. The kernel here computes the mean
         * directly; the unreduced loss is the allocator's view of the same work. */
        tensor *full = tensor_empty(r, a->dt, a->ndim, a->shape);
        out = full ? tensor_alias(full, 0, SCALAR, false) : NULL;
        tensor_release(full);
        tensor *loss = out ? tensor_empty(r, a->dt, a->ndim, a->shape) : NULL;
        reduce_staging st;
        bool ok = loss && reduce_staging_begin(r, ATEN_OP_MEAN, ATEN_REDUCE_ALL, loss, tensor_numel(loss), 1, &st);
        if (ok) {
            ok = KRUN(r, mse_loss(a->dt, tensor_data(out), tensor_data(a), tensor_data(b), tensor_numel(a)));
            reduce_staging_end(&st);
        }
        tensor_release(loss);
        if (!ok)
            out = (tensor_release(out), NULL);
    }
    tensor *in[2] = {a, b};
    if (out && ag_any_requires_grad(r, 2, in)) {
        ag_node *n = ag_node_new(r, &mse_fn, 2, in);
        ag_save(n, 0, a, false);
        ag_save(n, 1, b, false);
        ag_set_history(out, n);
    }
    tensor_release(a);
    tensor_release(b);
    return out;
}

/* ---- sum, mean ----------------------------------------------------------------------------------- */

/* grad.expand(sizes) [/ numel]: PyTorch expands a view; oomlab has no stride-0 views and materialises it. */
static oom_status expand_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    if (!n->next[0].fn)
        return OOM_OK;
    tensor *g = tensor_empty(r, grad->dt, n->in_ndim, n->in_shape);
    if (!g)
        return r->status;
    int64_t numel = tensor_numel(g);
    bool ok = KRUN(r, bias_rows(g->dt, tensor_data(g), tensor_data(grad), numel, 1));
    if (ok && n->fparam[0] != 1.0)
        ok = KRUN(r, scale(g->dt, tensor_data(g), tensor_data(g), (float)n->fparam[0], numel));
    if (!ok) {
        tensor_release(g);
        return r->status;
    }
    grads[0] = g;
    return OOM_OK;
}
static const ag_fn sum_fn = {"SumBackward0", expand_backward, false};
static const ag_fn mean_fn = {"MeanBackward0", expand_backward, false};

static tensor *reduce_all(tensor *t, bool mean)
{
    if (!LIVE(t) || !need_contiguous(t, mean ? "mean" : "sum") || !is_float(t, mean ? "mean" : "sum"))
        return NULL;
    rt *r = t->rt;
    int64_t numel = tensor_numel(t);
    tensor *out = tensor_empty(r, t->dt, SCALAR);
    reduce_staging st; /* ATen's staging around its reduction kernel (reduce_config.h) */
    if (!out || !reduce_staging_begin(r, mean ? ATEN_OP_MEAN : ATEN_OP_SUM, ATEN_REDUCE_ALL, t, numel, 1, &st))
        return tensor_release(out), NULL;
    bool ok = KRUN(r, sum_all(t->dt, tensor_data(out), tensor_data(t), numel)) &&
              (!mean || KRUN(r, scale(t->dt, tensor_data(out), tensor_data(out), 1.0f / (float)numel, 1)));
    reduce_staging_end(&st);
    if (!ok)
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, mean ? &mean_fn : &sum_fn, 1, &t);
        note_input(n, t);
        n->fparam[0] = mean ? 1.0 / (double)numel : 1.0;
        ag_set_history(out, n);
    }
    return out;
}

tensor *op_sum(tensor *t) { return reduce_all(t, false); }
tensor *op_mean(tensor *t) { return reduce_all(t, true); }

/* ---- the retained_graph scenario: pow, the fused GRU cell (ops.h) ------------------------------------------- */

/* pow_backward: grad * (e * self.pow(e - 1)).conj(); the C++ temporaries self.pow(e - 1) and e * (...) live until
 * the product is made, and go in reverse order of their making. e == 0: zeros_like(self). */
static oom_status pow_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *self = ag_unpack(n, 0);
    if (!self)
        return r->status;
    double e = n->fparam[0];
    if (e == 0.0) {
        grads[0] = tensor_zeros(r, self->dt, self->ndim, self->shape);
        return grads[0] ? OOM_OK : r->status;
    }
    int64_t numel = tensor_numel(self);
    tensor *p = empty_like(self);
    bool ok = p && KRUN(r, pow_scalar(self->dt, tensor_data(p), tensor_data(self), (float)(e - 1.0), numel));
    tensor *s = ok ? empty_like(self) : NULL;
    ok = s && KRUN(r, scale(self->dt, tensor_data(s), tensor_data(p), (float)e, numel));
    tensor *g = ok ? empty_like(grad) : NULL;
    ok = g && KRUN(r, mul(grad->dt, tensor_data(g), tensor_data(grad), tensor_data(s), numel));
    tensor_release(s); /* C++ destroys a full expression's temporaries in reverse order: e * (...) first */
    tensor_release(p);
    if (!ok) {
        tensor_release(g);
        return r->status;
    }
    grads[0] = g;
    return OOM_OK;
}
static const ag_fn pow_fn = {"PowBackward0", pow_backward, false};

tensor *op_pow(tensor *t, double exponent)
{
    if (!LIVE(t) || !need_contiguous(t, "pow") || !is_float(t, "pow"))
        return NULL;
    rt *r = t->rt;
    tensor *in = amp_autocast_f32_operand(r, t); /* pow is on autocast's f32 list */
    tensor *out = in ? empty_like(in) : NULL;
    if (out && !KRUN(r, pow_scalar(in->dt, tensor_data(out), tensor_data(in), (float)exponent, tensor_numel(in))))
        out = (tensor_release(out), NULL);
    if (out && ag_any_requires_grad(r, 1, &in)) {
        ag_node *n = ag_node_new(r, &pow_fn, 1, &in);
        ag_save(n, 0, in, false); /* self */
        n->fparam[0] = exponent;  /* exponent, a plain value */
        ag_set_history(out, n);
    }
    tensor_release(in);
    return out;
}

/* Saved slots of ThnnFusedGruCellBackward0, in the order the generated node declares them, sorted by name
 * (gen_autograd_functions.py): it unpacks them and release_variables() drops them in that order (PyTorch's trace of
 * the chain's release: hidden_gates' storage goes before input_gates'). Then the workspace, an output. */
enum { GRU_B_HH, GRU_HGATES, GRU_HX, GRU_B_IH, GRU_IGATES, GRU_WORKSPACE };

/* The generated node unpacks its saved variables sorted by name (gen_autograd_functions.py): hidden_bias,
 * hidden_gates, hx, input_bias, input_gates, then result1; the first stale one names the in-place error. Then
 * _thnn_fused_gru_cell_backward(grad, result1, has_bias) (backward runs without grad mode). Gradients for inputs
 * that need none are made and dropped inside the node, as the generated code drops them. */
static oom_status gru_cell_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    static const int unpack_order[] = {GRU_B_HH, GRU_HGATES, GRU_HX, GRU_B_IH, GRU_IGATES, GRU_WORKSPACE};
    for (size_t k = 0; k < sizeof unpack_order / sizeof unpack_order[0]; k++)
        if (!ag_unpack(n, unpack_order[k]) && !rt_ok(r))
            return r->status;
    const tensor *ws = n->saved[GRU_WORKSPACE].t;
    const bool has_bias = n->saved[GRU_B_IH].defined;
    const int64_t b = ws->shape[0], h = ws->shape[1] / 5;
    dtype dt = ws->dt;
    tensor *out[5] = {0};
    out[0] = tensor_empty(r, dt, SHAPE(b, 3 * h));
    out[1] = out[0] ? tensor_empty(r, dt, SHAPE(b, 3 * h)) : NULL;
    out[2] = out[1] ? empty_like(grad) : NULL;
    bool ok = out[2] && KRUN(r, gru_cell_backward(dt, tensor_data(out[0]), tensor_data(out[1]), tensor_data(out[2]),
                                                  tensor_data(grad), tensor_data(ws), b, h));
    for (int i = 0; ok && has_bias && i < 2; i++) { /* grad_gates.sum(0) */
        out[3 + i] = sum_rows_of(r, out[i], b, 3 * h);
        ok = out[3 + i] != NULL;
    }
    for (int i = 0; i < 5; i++) {
        if (ok && n->next[i].fn)
            grads[i] = out[i];
        else
            tensor_release(out[i]);
    }
    return ok ? OOM_OK : r->status;
}
static const ag_fn gru_cell_fn = {"ThnnFusedGruCellBackward0", gru_cell_backward, false};

/* t is a contiguous tensor of dtype dt and shape [d0] (ndim 1) or [d0, d1]. */
static bool gru_operand(const tensor *t, int ndim, int64_t d0, int64_t d1, dtype dt, const char *what)
{
    if (t->ndim == ndim && !t->transposed && t->dt == dt && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1))
        return true;
    char got[64], want[64];
    if (ndim == 1)
        snprintf(want, sizeof want, "[%lld]", (long long)d0);
    else
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
    rt_fail(t->rt, OOM_EINVAL, "_thnn_fused_gru_cell: %s is %s %s%s, expected a %s tensor of shape %s", what,
            tensor_shape_str(t, got, sizeof got), dtype_str(t->dt), t->transposed ? " (a .t() view)" : "",
            dtype_str(dt), want);
    return false;
}

tensor *op_thnn_fused_gru_cell(tensor *igates, tensor *hgates, tensor *hx, tensor *b_ih, tensor *b_hh)
{
    if (!LIVE(igates, hgates, hx) || !is_float(hx, "_thnn_fused_gru_cell"))
        return NULL;
    rt *r = hx->rt;
    if (hx->ndim != 2) {
        rt_fail(r, OOM_EINVAL, "_thnn_fused_gru_cell: hx must be 2-D [batch, hidden]");
        return NULL;
    }
    const int64_t b = hx->shape[0], h = hx->shape[1];
    if ((b_ih == NULL) != (b_hh == NULL)) {
        rt_fail(r, OOM_EINVAL, "_thnn_fused_gru_cell: give both biases or neither");
        return NULL;
    }
    if (!gru_operand(hx, 2, b, h, hx->dt, "hx") || !gru_operand(igates, 2, b, 3 * h, hx->dt, "input_gates") ||
        !gru_operand(hgates, 2, b, 3 * h, hx->dt, "hidden_gates") ||
        (b_ih && (!gru_operand(b_ih, 1, 3 * h, 0, hx->dt, "input_bias") ||
                  !gru_operand(b_hh, 1, 3 * h, 0, hx->dt, "hidden_bias"))))
        return NULL;
    /* workspace = at::empty({hx.size(0), hx.size(1) * 5}), then hy = at::empty_like(hx) */
    tensor *ws = tensor_empty(r, hx->dt, SHAPE(b, 5 * h));
    tensor *hy = ws ? tensor_empty(r, hx->dt, SHAPE(b, h)) : NULL;
    if (hy && !KRUN(r, gru_cell(hx->dt, tensor_data(hy), tensor_data(ws), tensor_data(igates), tensor_data(hgates),
                                tensor_data(hx), b_ih ? tensor_data(b_ih) : NULL, b_hh ? tensor_data(b_hh) : NULL, b,
                                h)))
        hy = (tensor_release(hy), NULL);
    tensor *in[5] = {igates, hgates, hx, b_ih, b_hh};
    if (hy && ag_any_requires_grad(r, 5, in)) {
        ag_node *n = ag_node_new(r, &gru_cell_fn, 5, in);
        static const int slot[5] = {GRU_IGATES, GRU_HGATES, GRU_HX, GRU_B_IH, GRU_B_HH};
        for (int i = 0; i < 5; i++)
            ag_save(n, slot[i], in[i], false);
        ag_save(n, GRU_WORKSPACE, ws, true); /* result1 */
        ag_set_history(hy, n);
    }
    tensor_release(ws);
    return hy;
}
/* ---- oversize_batch: division by a number --------------------------------------------------------------- */

static oom_status div_scalar_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    grads[0] = empty_like(grad); /* div_tensor_self_backward: grad / other */
    if (!grads[0] || !KRUN(r, scale(grad->dt, tensor_data(grads[0]), tensor_data(grad), (float)(1.0 / n->fparam[0]),
                                    tensor_numel(grad))))
        return r->status;
    return OOM_OK;
}
static const ag_fn div_fn = {"DivBackward0", div_scalar_backward, false};

tensor *op_div_scalar(tensor *t, double s)
{
    if (!LIVE(t) || !need_contiguous(t, "div") || !is_float(t, "div"))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, scale(t->dt, tensor_data(out), tensor_data(t), (float)(1.0 / s), tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, &div_fn, 1, &t);
        n->fparam[0] = s;
        ag_set_history(out, n);
    }
    return out;
}

/* ---- dangling_tensors, inplace_ops: sigmoid and arithmetic with a Python number ------------------------------ */

static oom_status sigmoid_backward(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    tensor *result = ag_unpack(n, 0);
    if (!result)
        return r->status;
    grads[0] = empty_like(grad);
    if (!grads[0] || !KRUN(r, sigmoid_backward(grad->dt, tensor_data(grads[0]), tensor_data(grad),
                                               tensor_data(result), tensor_numel(grad))))
        return r->status;
    return OOM_OK;
}
static const ag_fn sigmoid_fn = {"SigmoidBackward0", sigmoid_backward, false};

tensor *op_sigmoid(tensor *t)
{
    if (!LIVE(t) || !need_contiguous(t, "sigmoid") || !is_float(t, "sigmoid"))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, sigmoid(t->dt, tensor_data(out), tensor_data(t), tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, &sigmoid_fn, 1, &t);
        ag_save(n, 0, out, true); /* result */
        ag_set_history(out, n);
    }
    return out;
}

tensor *op_mul_scalar(tensor *t, double s)
{
    if (!LIVE(t) || !need_contiguous(t, "mul") || !is_float(t, "mul"))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, scale(t->dt, tensor_data(out), tensor_data(t), (float)s, tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t)) {
        ag_node *n = ag_node_new(r, &mul_scalar_fn, 1, &t);
        n->fparam[0] = s;
        ag_set_history(out, n);
    }
    return out;
}

/* x + 1: AddBackward0 with a wrapped number, the gradient passes through */
static const ag_fn add_scalar_fn = {"AddBackward0", passthrough_backward, false};

tensor *op_add_scalar(tensor *t, double s)
{
    if (!LIVE(t) || !need_contiguous(t, "add") || !is_float(t, "add"))
        return NULL;
    rt *r = t->rt;
    tensor *out = empty_like(t);
    if (!out || !KRUN(r, add_scalar(t->dt, tensor_data(out), tensor_data(t), (float)s, tensor_numel(t))))
        return tensor_release(out), NULL;
    if (ag_any_requires_grad(r, 1, &t))
        ag_set_history(out, ag_node_new(r, &add_scalar_fn, 1, &t));
    return out;
}

tensor *op_add_scalar_(tensor *self, double s)
{
    if (!LIVE(self) || !need_contiguous(self, "add_") || !is_float(self, "add_") || !inplace_ok(self, NULL))
        return NULL;
    rt *r = self->rt;
    if (!KRUN(r, add_scalar(self->dt, tensor_data(self), tensor_data(self), (float)s, tensor_numel(self))))
        return NULL;
    tensor_bump_version(self);
    if (ag_any_requires_grad(r, 1, &self))
        ag_rebase_history(self, ag_node_new(r, &add_scalar_fn, 1, &self));
    return self;
}


/* ---- the inference_oom scenario: cat -------------------------------------------------------------------------- */

/* cat_tensors_backward: grad.slice(0, start, start + rows) for each input, a view (ctx: the inputs' row counts). */
static oom_status cat_backward(ag_node *n, tensor *grad, tensor **grads)
{
    const int64_t *rows = n->ctx;
    int64_t start = 0;
    bool prev = rt_set_grad_enabled(n->rt, false);
    for (int i = 0; i < n->nnext; i++) {
        if (n->next[i].fn && !(grads[i] = op_narrow(grad, start, rows[i])))
            break;
        start += rows[i];
    }
    rt_set_grad_enabled(n->rt, prev);
    return rt_ok(n->rt) ? OOM_OK : n->rt->status;
}
static const ag_fn cat_fn = {"CatBackward0", cat_backward, false};

tensor *op_cat(tensor *const *ts, int n)
{
    if (n < 1 || !ts) /* torch.cat([]) is an error; a caller's bug here */
        return NULL;
    for (int i = 0; i < n; i++)
        if (!ts[i])
            return NULL;
    rt *r = ts[0]->rt;
    if (!rt_ok(r))
        return NULL;
    const tensor *a = ts[0];
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const tensor *t = ts[i];
        bool same = t->ndim == a->ndim && t->ndim >= 1 && t->dt == a->dt;
        for (int d = 1; same && d < t->ndim; d++)
            same = t->shape[d] == a->shape[d];
        if (!same) {
            char sa[64], sb[64];
            rt_fail(r, OOM_EINVAL, "cat: expected tensors of one dtype and the same sizes except in dimension 0 "
                                   "(tensor 0 is %s %s, tensor %d is %s %s)",
                    tensor_shape_str(a, sa, sizeof sa), dtype_str(a->dt), i, tensor_shape_str(t, sb, sizeof sb),
                    dtype_str(t->dt));
            return NULL;
        }
        if (!need_contiguous(t, "cat"))
            return NULL;
        total += t->shape[0];
    }
    bool record = ag_any_requires_grad(r, n, ts);
    if (record && n > AG_MAX_NEXT) {
        rt_fail(r, OOM_EINVAL, "cat: oomlab records at most %d inputs that require grad (got %d)", AG_MAX_NEXT, n);
        return NULL;
    }
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[0] = total;
    tensor *out = tensor_empty(r, a->dt, a->ndim, shape);
    if (!out)
        return NULL;
    unsigned char *dst = tensor_data(out);
    size_t done = 0; /* bytes written */
    for (int i = 0; i < n; i++) {
        if (!KRUN(r, copy(a->dt, dst ? dst + done : NULL, tensor_data(ts[i]), tensor_numel(ts[i]))))
            return tensor_release(out), NULL;
        done += tensor_nbytes(ts[i]);
    }
    if (record) {
        ag_node *node = ag_node_new(r, &cat_fn, n, ts);
        int64_t *rows = malloc((size_t)n * sizeof *rows);
        if (!rows) {
            fprintf(stderr, "oomlab: out of host memory\n");
            abort();
        }
        for (int i = 0; i < n; i++)
            rows[i] = ts[i]->shape[0];
        node->ctx = rows;
        node->ctx_free = free;
        ag_set_history(out, node);
    }
    return out;
}
