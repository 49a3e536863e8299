/* tensor.c - refcounted tensors over caching-allocator storage. See tensor.h. */
#include "runtime/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fail.h"
#include "runtime/autograd.h"

/* ---- the validator (tensor.h: S1-S3, T1-T9) ---- */

/* T1-T8 and S1-S2: the tensor, its storage and its direct links, O(1). */
static oom_status check_cheap(const tensor *t, char *why, size_t cap)
{
    OOM_REQUIRE(t && t->rt && t->st, why, cap, "T1: no tensor, or no rt or storage behind it");
    OOM_REQUIRE(t->refcount >= 1 && t->rt->live_tensors >= 1, why, cap,
                "T1: refcount %d with %zu live tensors in the rt", t->refcount, t->rt->live_tensors);
    OOM_REQUIRE(t->ndim >= 0 && t->ndim <= TENSOR_MAX_DIMS && (unsigned)t->dt < DT_COUNT, why, cap,
                "T2: ndim %d or dtype %d out of range", t->ndim, (int)t->dt);
    for (int i = 0; i < t->ndim; i++)
        OOM_REQUIRE(t->shape[i] >= 0, why, cap, "T2: shape[%d] = %lld", i, (long long)t->shape[i]);
    const storage *s = t->st;
    OOM_REQUIRE(s->refcount >= 1, why, cap, "S1: storage refcount %d", s->refcount);
    OOM_REQUIRE((s->ptr == 0) == (s->nbytes == 0), why, cap, "S2: storage of %zu bytes at %#llx", s->nbytes,
                (unsigned long long)s->ptr);
    size_t n = tensor_nbytes(t);
    OOM_REQUIRE(s->resized_out || (t->offset <= s->nbytes && n <= s->nbytes - t->offset), why, cap,
                "T3: offset %zu + %zu bytes past the storage's %zu", t->offset, n, s->nbytes);
    OOM_REQUIRE(!t->transposed || t->ndim == 2, why, cap, "T4: transposed with ndim %d", t->ndim);
    OOM_REQUIRE(!t->grad_fn || (t->requires_grad && !t->grad_acc), why, cap,
                "T5: a grad_fn (%s) with requires_grad %d and an AccumulateGrad %s", t->grad_fn->fn->name,
                (int)t->requires_grad, t->grad_acc ? "set" : "unset");
    OOM_REQUIRE(!t->grad_acc || t->grad_acc->variable == t, why, cap,
                "T6: its AccumulateGrad node holds another tensor");
    if (t->grad) {
        const tensor *g = t->grad;
        OOM_REQUIRE(!t->grad_fn, why, cap, "T7: a .grad on a non-leaf (grad_fn %s)", t->grad_fn->fn->name);
        OOM_REQUIRE(!g->grad_fn && !g->grad, why, cap, "T7: its .grad has a grad_fn or a .grad of its own");
        OOM_REQUIRE(tensor_same_shape(g, t), why, cap, "T7: its .grad's shape differs (ndim %d and %d)", g->ndim,
                    t->ndim);
    }
    OOM_REQUIRE(t->is_view == (t->base != NULL), why, cap, "T8: is_view %d with %s base", (int)t->is_view,
                t->base ? "a" : "no");
    OOM_REQUIRE(!t->base || !t->base->is_view, why, cap, "T8: its base is itself a view");
    OOM_REQUIRE(!t->view_of_leaf || t->is_view, why, cap, "T8: view_of_leaf on a tensor that is no view");
    return OOM_OK;
}

oom_status tensor_check(const tensor *t, bool expensive, char *why, size_t cap)
{
    oom_status st = check_cheap(t, why, cap);
    if (st != OOM_OK || !expensive)
        return st;
    /* T9: one level down (a .grad and a base have none of their own: T7, T8) */
    char sub[192];
    if (t->grad && check_cheap(t->grad, sub, sizeof sub) != OOM_OK)
        return snprintf(why, cap, "T9: its .grad: %s", sub), OOM_ECORRUPT;
    if (t->base && check_cheap(t->base, sub, sizeof sub) != OOM_OK)
        return snprintf(why, cap, "T9: its base: %s", sub), OOM_ECORRUPT;
    if (t->grad_fn && ag_node_check(t->grad_fn, false, sub, sizeof sub) != OOM_OK)
        return snprintf(why, cap, "T9: its grad_fn: %s", sub), OOM_ECORRUPT;
    const storage *s = t->st;
    OOM_REQUIRE(s->ptr == 0 || cachealloc_block_size(t->rt->ca, s->ptr) >= s->nbytes, why, cap,
                "S3: %#llx is not a live block of rt->ca of %zu bytes or more", (unsigned long long)s->ptr, s->nbytes);
    return OOM_OK;
}

static bool shape_ok(rt *r, int ndim, const int64_t *shape, int64_t *numel)
{
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS || (ndim > 0 && !shape)) {
        rt_fail(r, OOM_EINVAL, "tensors have 0 to %d dimensions (got %d)", TENSOR_MAX_DIMS, ndim);
        return false;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            rt_fail(r, OOM_EINVAL, "Trying to create tensor with negative dimension %lld", (long long)shape[i]);
            return false;
        }
        if (shape[i] > 0 && n > INT64_MAX / 8 / shape[i]) {
            rt_fail(r, OOM_EINVAL, "tensor size overflows");
            return false;
        }
        n *= shape[i];
    }
    *numel = n;
    return true;
}

static tensor *tensor_new(rt *r, storage *st, size_t offset, dtype dt, int ndim, const int64_t *shape)
{
    tensor *t = xcalloc(1, sizeof *t);
    t->rt = r;
    t->st = st;
    t->offset = offset;
    t->dt = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->refcount = 1;
    r->live_tensors++;
    OOM_VALIDATE("tensor", tensor_check, t);
    return t;
}

/* nbytes from the caching allocator into *p; a failure is recorded in r as PyTorch raises it. */
static bool storage_alloc(rt *r, size_t nbytes, devptr *p)
{
    oom_error_clear(); /* a failure below says why in the record; an older one must not stand in for it */
    oom_status st = cachealloc_malloc(r->ca, nbytes, p);
    if (st == OOM_ENOMEM_DEVICE) {
        rt_fail_oom(r);
        return false;
    }
    if (st == OOM_ECUDA) { /* a driver error PyTorch raises as a RuntimeError: its text alone */
        rt_fail_detail(r, st, NULL);
        return false;
    }
    if (st != OOM_OK) { /* not a device OOM: the host ran out under a segment, or the backend failed */
        const char *why = oom_error_detail();
        rt_fail(r, st, "allocation of %zu bytes failed: %s", nbytes, why[0] ? why : oom_status_str(st));
        return false;
    }
    return true;
}

tensor *tensor_empty(rt *r, dtype dt, int ndim, const int64_t *shape)
{
    int64_t numel;
    if (!rt_ok(r) || !shape_ok(r, ndim, shape, &numel))
        return NULL;
    if ((unsigned)dt >= DT_COUNT) {
        rt_fail(r, OOM_EINVAL, "unknown dtype %d", (int)dt);
        return NULL;
    }
    size_t nbytes = (size_t)numel * dtype_size(dt);
    devptr p = 0;
    if (!storage_alloc(r, nbytes, &p))
        return NULL;
    storage *s = xcalloc(1, sizeof *s);
    s->ptr = p;
    s->nbytes = nbytes;
    s->refcount = 1;
    return tensor_new(r, s, 0, dt, ndim, shape);
}

/* Run a fill-style kernel on a fresh tensor; NULL (and the tensor released) on failure. */
static tensor *filled(tensor *t, oom_status st)
{
    if (t && st != OOM_OK) {
        rt_fail_detail(t->rt, st, NULL);
        tensor_release(t);
        return NULL;
    }
    return t;
}

tensor *tensor_full(rt *r, dtype dt, int ndim, const int64_t *shape, double value)
{
    tensor *t = tensor_empty(r, dt, ndim, shape);
    if (!t || tensor_numel(t) == 0)
        return t;
    rt_note_kernel(r); /* a fill kernel (torch.full / zeros / ones) */
    if (!r->computes)
        return t;
    if (dt == DT_I64) {
        /* integer fills go through the host: only targets are i64, and they are small */
        int64_t n = tensor_numel(t);
        int64_t *h = malloc((size_t)n * sizeof *h);
        if (!h)
            return filled(t, OOM_ENOMEM_HOST);
        for (int64_t i = 0; i < n; i++)
            h[i] = (int64_t)value;
        oom_status st = device_copy_htod(r->dev, t->st->ptr, h, tensor_nbytes(t));
        free(h);
        return filled(t, st);
    }
    return filled(t, rt_kernels(r)->fill(dt, tensor_data(t), tensor_numel(t), (float)value));
}

tensor *tensor_zeros(rt *r, dtype dt, int ndim, const int64_t *shape) { return tensor_full(r, dt, ndim, shape, 0.0); }

tensor *tensor_rand(rt *r, dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    tensor *t = tensor_empty(r, dt, ndim, shape);
    if (!t)
        return NULL;
    uint64_t seed = rt_next_seed(r); /* drawn in dry-run too, so later draws stay the same */
    if (tensor_numel(t) == 0)
        return t;
    rt_note_kernel(r);
    if (!r->computes)
        return t;
    return filled(t, rt_kernels(r)->rand_uniform(dt, tensor_data(t), tensor_numel(t), seed, (float)lo, (float)hi));
}

oom_status tensor_uniform_(tensor *t, double lo, double hi)
{
    if (!t || !rt_ok(t->rt))
        return t ? t->rt->status : OOM_EINVAL;
    rt *r = t->rt;
    uint64_t seed = rt_next_seed(r);
    if (r->computes && tensor_numel(t) > 0) {
        oom_status st = rt_kernels(r)->rand_uniform(t->dt, tensor_data(t), tensor_numel(t), seed, (float)lo, (float)hi);
        if (st != OOM_OK)
            return rt_fail_detail(r, st, NULL);
    }
    tensor_bump_version(t);
    return OOM_OK;
}

tensor *tensor_randn(rt *r, dtype dt, int ndim, const int64_t *shape, double mean, double std)
{
    tensor *t = tensor_empty(r, dt, ndim, shape);
    if (!t)
        return NULL;
    uint64_t seed = rt_next_seed(r);
    if (tensor_numel(t) == 0)
        return t;
    rt_note_kernel(r);
    if (!r->computes)
        return t;
    return filled(t, rt_kernels(r)->rand_normal(dt, tensor_data(t), tensor_numel(t), seed, (float)mean, (float)std));
}

tensor *tensor_randint(rt *r, int ndim, const int64_t *shape, int64_t lo, int64_t hi)
{
    if (rt_ok(r) && hi <= lo) {
        rt_fail(r, OOM_EINVAL, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                (long long)lo, (long long)hi);
        return NULL;
    }
    tensor *t = tensor_empty(r, DT_I64, ndim, shape);
    if (!t)
        return NULL;
    uint64_t seed = rt_next_seed(r);
    if (tensor_numel(t) == 0)
        return t;
    rt_note_kernel(r);
    if (!r->computes)
        return t;
    return filled(t, rt_kernels(r)->rand_int(tensor_data(t), tensor_numel(t), seed, lo, hi));
}

tensor *tensor_from_host(rt *r, dtype dt, int ndim, const int64_t *shape, const void *host)
{
    tensor *t = tensor_empty(r, dt, ndim, shape);
    if (!t || !r->computes || tensor_nbytes(t) == 0)
        return t;
    return filled(t, device_copy_htod(r->dev, t->st->ptr, host, tensor_nbytes(t)));
}

oom_status tensor_storage_resize_(tensor *t, size_t nbytes)
{
    rt *r = t->rt;
    storage *s = t->st;
    if (!rt_ok(r))
        return r->status;
    if (nbytes == s->nbytes)
        return OOM_OK;
    devptr p = 0;
    if (nbytes > 0 && !storage_alloc(r, nbytes, &p))
        return r->status;
    size_t keep = nbytes < s->nbytes ? nbytes : s->nbytes;
    if (keep > 0 && r->computes) { /* resize_ keeps the first bytes */
        oom_status st = device_copy_dtod(r->dev, p, s->ptr, keep);
        if (st != OOM_OK) {
            cachealloc_free(r->ca, p);
            return rt_fail(r, st, "resize_: copy of %zu bytes failed", keep);
        }
    }
    if (s->ptr)
        cachealloc_free(r->ca, s->ptr);
    s->ptr = p;
    s->nbytes = nbytes;
    s->resized_out = true; /* its views may lie past its end from now on (T3) */
    return OOM_OK;
}

static void storage_release(rt *r, storage *s)
{
    if (--s->refcount > 0)
        return;
    if (s->ptr)
        cachealloc_free(r->ca, s->ptr);
    free(s);
}

tensor *tensor_empty_like(const tensor *t)
{
    if (!t->transposed)
        return tensor_empty(t->rt, t->dt, t->ndim, t->shape);
    tensor *s = tensor_empty(t->rt, t->dt, SHAPE(t->shape[1], t->shape[0])); /* the storage's own layout */
    if (!s)
        return NULL;
    tensor *out = tensor_alias(s, 0, t->ndim, t->shape, true);
    tensor_release(s);
    return out;
}

void tensor_set_data(tensor *t, tensor *src)
{
    OOM_VALIDATE("tensor", tensor_check, t);
    OOM_VALIDATE("tensor", tensor_check, src);
    src->st->refcount++;
    storage *old = t->st;
    t->st = src->st;
    t->offset = src->offset;
    t->dt = src->dt;
    t->ndim = src->ndim;
    for (int i = 0; i < src->ndim; i++)
        t->shape[i] = src->shape[i];
    t->transposed = src->transposed;
    storage_release(t->rt, old);
    tensor_release(src);
    OOM_VALIDATE("tensor", tensor_check, t);
}

tensor *tensor_alias(const tensor *t, size_t offset, int ndim, const int64_t *shape, bool transposed)
{
    if (!t)
        return NULL;
    t->st->refcount++;
    tensor *a = tensor_new(t->rt, t->st, offset, t->dt, ndim, shape);
    a->transposed = transposed;
    OOM_VALIDATE("tensor", tensor_check, a);
    return a;
}

tensor *tensor_detach(const tensor *t)
{
    if (!t || !rt_ok(t->rt))
        return NULL;
    return tensor_alias(t, t->offset, t->ndim, t->shape, t->transposed);
}

tensor *tensor_retain(tensor *t)
{
    if (t) {
        OOM_VALIDATE("tensor", tensor_check, t);
        t->refcount++;
    }
    return t;
}

void tensor_release(tensor *t)
{
    if (!t)
        return;
    OOM_VALIDATE("tensor", tensor_check, t);
    if (--t->refcount > 0)
        return;
    rt *r = t->rt;
    tensor_release(t->grad); /* a leaf's .grad: no history, no recursion beyond one level */
    ag_node_release(t->grad_fn);
    storage_release(r, t->st);
    tensor_release(t->base); /* a base is no view: one level */
    r->live_tensors--;
    free(t);
}

tensor *tensor_assign(tensor **slot, tensor *value)
{
    tensor *old = *slot;
    *slot = value;
    tensor_release(old);
    return value;
}

bool tensor_rebind(tensor **slot, tensor *value)
{
    if (!value)
        return false;
    tensor_assign(slot, value);
    return true;
}

int64_t tensor_numel(const tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t tensor_nbytes(const tensor *t) { return (size_t)tensor_numel(t) * dtype_size(t->dt); }

void *tensor_data(const tensor *t)
{
    if (!t->rt->computes || t->st->ptr == 0)
        return NULL;
    devptr p = t->st->ptr + t->offset;
    if (t->rt->dev->kind == DEVICE_CUDA)
        return (void *)(uintptr_t)p;
    unsigned char *base = device_host_view(t->rt->dev, t->st->ptr);
    return base ? base + t->offset : NULL;
}

bool tensor_same_shape(const tensor *a, const tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

bool tensor_is_contiguous(const tensor *t) { return !t->transposed; }

const char *tensor_shape_str(const tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

const char *tensor_type_str(const tensor *t)
{
    static const char *const names[DT_COUNT] = {"torch.cuda.FloatTensor", "torch.cuda.HalfTensor",
                                                "torch.cuda.BFloat16Tensor", "torch.cuda.LongTensor"};
    return names[t->dt];
}

oom_status tensor_to_host(const tensor *t, void *host)
{
    rt *r = t->rt;
    if (!r->computes)
        return rt_fail(r, OOM_EINVAL, "a dry run has no tensor values");
    if (t->transposed)
        return rt_fail(r, OOM_EINVAL, "tensor_to_host needs a contiguous tensor");
    if (tensor_nbytes(t) == 0)
        return OOM_OK;
    oom_status st = device_copy_dtoh(r->dev, host, t->st->ptr + t->offset, tensor_nbytes(t));
    if (st != OOM_OK)
        rt_fail_detail(r, st, "copy to host failed");
    return st;
}

double tensor_item(const tensor *t)
{
    if (!t)
        return NAN;
    if (tensor_numel(t) != 1) {
        char s[64];
        rt_fail(t->rt, OOM_EINVAL, "a Tensor with %lld elements cannot be converted to Scalar (shape %s)",
                (long long)tensor_numel(t), tensor_shape_str(t, s, sizeof s));
        return NAN;
    }
    if (!t->rt->computes)
        return NAN;
    unsigned char buf[8];
    if (tensor_to_host(t, buf) != OOM_OK)
        return NAN;
    uint16_t h;
    float f;
    int64_t i;
    switch (t->dt) {
    case DT_F32:
        memcpy(&f, buf, 4);
        return f;
    case DT_F16:
        memcpy(&h, buf, 2);
        return f16_to_f32(h);
    case DT_BF16:
        memcpy(&h, buf, 2);
        return bf16_to_f32(h);
    case DT_I64:
        memcpy(&i, buf, 8);
        return (double)i;
    default:
        return NAN;
    }
}

void tensor_set_requires_grad(tensor *t, bool flag)
{
    if (!t)
        return;
    if (t->grad_fn && !flag) {
        rt_fail(t->rt, OOM_EINVAL,
                "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
        return;
    }
    if (flag && t->dt == DT_I64) {
        rt_fail(t->rt, OOM_EINVAL, "only Tensors of floating point dtype can require gradients");
        return;
    }
    t->requires_grad = flag;
    OOM_VALIDATE("tensor", tensor_check, t);
}

/* ---- the model_too_large scenario (tensor.h) ---- */

tensor *tensor_copy_to(rt *dst, const tensor *src)
{
    if (!src)
        return NULL;
    rt *r = src->rt;
    if (src->transposed) {
        rt_fail(r, OOM_EINVAL, "tensor_copy_to needs a contiguous tensor");
        return NULL;
    }
    if (src->requires_grad && r->grad_enabled) {
        rt_fail(r, OOM_EINVAL, "tensor_copy_to is not differentiable: copy under no_grad or detach first");
        return NULL;
    }
    if (!dst->computes || tensor_nbytes(src) == 0)
        return tensor_empty(dst, src->dt, src->ndim, src->shape);
    if (dst->dev->kind == DEVICE_CUDA && r->dev->kind == DEVICE_CUDA) { /* x.to("cuda:k"): GPU to GPU */
        tensor *out = tensor_empty(dst, src->dt, src->ndim, src->shape);
        if (!out)
            return NULL;
        oom_status st = device_copy_peer(dst->dev, out->st->ptr + out->offset, r->dev, src->st->ptr + src->offset,
                                         tensor_nbytes(src));
        if (st == OOM_OK)
            return out;
        rt_fail_detail(dst, st, "copy between devices failed");
        tensor_release(out);
        return NULL;
    }
    void *buf = malloc(tensor_nbytes(src));
    if (!buf) {
        fprintf(stderr, "oomlab: out of host memory\n");
        abort();
    }
    tensor *out = NULL;
    if (tensor_to_host(src, buf) == OOM_OK)
        out = tensor_from_host(dst, src->dt, src->ndim, src->shape, buf);
    free(buf);
    return out;
}

oom_status tensor_copy_from_host_(tensor *t, const void *host)
{
    rt *r = t->rt;
    if (t->transposed)
        return rt_fail(r, OOM_EINVAL, "tensor_copy_from_host_ needs a contiguous tensor");
    tensor_bump_version(t);
    if (!r->computes || tensor_nbytes(t) == 0)
        return OOM_OK;
    oom_status st = device_copy_htod(r->dev, t->st->ptr + t->offset, host, tensor_nbytes(t));
    if (st != OOM_OK)
        rt_fail_detail(r, st, "copy from host failed");
    return st;
}

oom_status tensor_copy_from_host_async_(tensor *t, const void *host, devstream s)
{
    rt *r = t->rt;
    if (t->transposed)
        return rt_fail(r, OOM_EINVAL, "tensor_copy_from_host_async_ needs a contiguous tensor");
    tensor_bump_version(t);
    if (!r->computes || tensor_nbytes(t) == 0)
        return OOM_OK;
    oom_status st = device_copy_htod_async(r->dev, t->st->ptr + t->offset, host, tensor_nbytes(t), s);
    if (st != OOM_OK)
        rt_fail_detail(r, st, "asynchronous copy from host failed");
    return st;
}
