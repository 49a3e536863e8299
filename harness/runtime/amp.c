/* amp.c - autocast's cast cache and operand policy, and GradScaler. See amp.h. */
#include "runtime/amp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/ops.h"

/* The weight-cast cache of one autocast nesting: (leaf, its cast) pairs; the casts are owned. */
#define AMP_MAX_DEPTH 16

/* The regions entered (their dtypes, innermost last) and the weight-cast cache of the outermost one: (leaf, its
 * cast) pairs, both owned until the outermost region exits (PyTorch keeps a weak reference to the leaf; holding
 * it keeps a freed leaf's address from matching a stale cast). */
typedef struct autocast_cache {
    int depth;
    dtype dtypes[AMP_MAX_DEPTH];
    size_t n, cap;
    tensor **leaf;
    tensor **cast;
} autocast_cache;

static autocast_cache *cache_of(rt *r)
{
    if (!r->cast_cache) {
        r->cast_cache = calloc(1, sizeof *r->cast_cache);
        if (!r->cast_cache) {
            fprintf(stderr, "oomlab: out of host memory\n");
            abort();
        }
    }
    return r->cast_cache;
}

void amp_autocast_enter(rt *r, dtype dt)
{
    autocast_cache *c = cache_of(r);
    if (c->depth == AMP_MAX_DEPTH) {
        fprintf(stderr, "oomlab: autocast regions nested deeper than %d\n", AMP_MAX_DEPTH);
        abort(); /* a programming error, as unbounded recursion would be */
    }
    c->dtypes[c->depth++] = dt;
    r->autocast = true;
    r->autocast_dtype = dt;
}

void amp_autocast_exit(rt *r)
{
    autocast_cache *c = cache_of(r);
    if (c->depth == 0)
        return;
    if (--c->depth > 0) {
        r->autocast_dtype = c->dtypes[c->depth - 1]; /* the enclosing region's dtype again */
        return;
    }
    r->autocast = false;
    amp_cache_clear(r); /* clear_cache() when the outermost region exits */
}

void amp_cache_clear(rt *r)
{
    autocast_cache *c = r->cast_cache;
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        tensor_release(c->cast[i]);
        tensor_release(c->leaf[i]);
    }
    c->n = 0;
}

void amp_close(rt *r)
{
    autocast_cache *c = r->cast_cache;
    if (!c)
        return;
    amp_cache_clear(r);
    free(c->leaf);
    free(c->cast);
    free(c);
    r->cast_cache = NULL;
    r->autocast = false;
}

/* cached_cast: a leaf that requires grad is cast once per region; anything else at every use. */
static tensor *cached_cast(rt *r, tensor *t, dtype dt)
{
    bool cacheable = t->requires_grad && !t->grad_fn && !t->transposed && !t->is_view;
    if (!cacheable)
        return op_to(t, dt);
    autocast_cache *c = cache_of(r);
    for (size_t i = 0; i < c->n; i++)
        if (c->leaf[i] == t && c->cast[i]->dt == dt)
            return tensor_retain(c->cast[i]);
    tensor *cast = op_to(t, dt);
    if (!cast)
        return NULL;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->leaf = realloc(c->leaf, c->cap * sizeof *c->leaf);
        c->cast = realloc(c->cast, c->cap * sizeof *c->cast);
        if (!c->leaf || !c->cast) {
            fprintf(stderr, "oomlab: out of host memory\n");
            abort();
        }
    }
    c->leaf[c->n] = tensor_retain(t);
    c->cast[c->n++] = tensor_retain(cast);
    return cast;
}

tensor *amp_autocast_matmul_operand(rt *r, tensor *t)
{
    /* every floating operand not already in the autocast dtype is cast (cached_cast's is_eligible) */
    if (!t || !r->autocast || t->dt == DT_I64 || t->dt == r->autocast_dtype)
        return tensor_retain(t);
    return cached_cast(r, t, r->autocast_dtype);
}

tensor *amp_autocast_f32_operand(rt *r, tensor *t)
{
    if (!t || !r->autocast || !dtype_is_half(t->dt))
        return tensor_retain(t);
    return op_to(t, DT_F32);
}

/* ---- GradScaler ---------------------------------------------------------------------------------- */

void grad_scaler_init(grad_scaler *s, rt *r)
{
    *s = (grad_scaler){.rt = r, .init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                       .growth_interval = 2000};
    s->scale_value = s->init_scale;
}

void grad_scaler_free(grad_scaler *s)
{
    tensor_release(s->scale);
    tensor_release(s->growth_tracker);
    s->scale = s->growth_tracker = NULL;
}

tensor *grad_scaler_scale(grad_scaler *s, tensor *loss)
{
    rt *r = s->rt;
    if (!loss || !rt_ok(r))
        return NULL;
    /* _lazy_init_scale_growth_tracker (each made if missing, so a retry after an OOM completes it) */
    if (!s->scale && !(s->scale = tensor_full(r, DT_F32, SCALAR, s->scale_value)))
        return NULL;
    if (!s->growth_tracker && !(s->growth_tracker = tensor_zeros(r, DT_F32, SCALAR)))
        return NULL;
    if (loss->dt != DT_F32 || loss->ndim != 0) {
        rt_fail(r, OOM_EINVAL, "GradScaler.scale: expected a 0-dim float32 loss (got %s)", dtype_str(loss->dt));
        return NULL;
    }
    return op_mul(loss, s->scale);
}

oom_status grad_scaler_step(grad_scaler *s, optimizer *o)
{
    rt *r = s->rt;
    if (!rt_ok(r))
        return r->status;
    if (!s->scale || !s->growth_tracker)
        return rt_fail(r, OOM_EINVAL, "GradScaler.step: scale() was never called (no inf checks were recorded)");
    for (size_t i = 0; i < o->nparams; i++)
        if (o->params[i]->grad && o->params[i]->grad->dt == DT_F16)
            return rt_fail(r, OOM_EINVAL, "Attempting to unscale FP16 gradients.");
    /* unscale_: inv_scale = 1 / scale and found_inf, then one checked, in-place unscale per gradient */
    tensor *inv = tensor_full(r, DT_F32, SCALAR, 1.0 / s->scale_value);
    tensor *found = inv ? tensor_zeros(r, DT_F32, SCALAR) : NULL;
    for (size_t i = 0; found && i < o->nparams; i++) {
        tensor *g = o->params[i]->grad;
        if (!g || !r->computes)
            continue;
        if (!op_kernel_ok(r, rt_kernels(r)->unscale_check(g->dt, tensor_data(g), tensor_numel(g), tensor_data(inv),
                                             tensor_data(found))))
            break;
        tensor_bump_version(g);
    }
    double inf = found && rt_ok(r) ? tensor_item(found) : 0.0;
    tensor_release(inv);
    tensor_release(found);
    if (!rt_ok(r))
        return r->status;
    s->found_inf = inf > 0.0; /* a dry run has no values: never an overflow */
    if (s->found_inf) {
        s->skipped_steps++;
        return OOM_OK;
    }
    return optim_step(o);
}

oom_status grad_scaler_update(grad_scaler *s)
{
    rt *r = s->rt;
    if (!s->scale || !s->growth_tracker || !rt_ok(r))
        return r->status;
    /* _amp_update_scale_ */
    if (s->found_inf) {
        s->scale_value *= s->backoff_factor;
        s->clean_steps = 0;
    } else if (++s->clean_steps == s->growth_interval) {
        s->scale_value *= s->growth_factor;
        s->clean_steps = 0;
    }
    rt_note_kernel(r);
    if (r->computes) {
        if (!op_kernel_ok(r, rt_kernels(r)->fill(DT_F32, tensor_data(s->scale), 1, (float)s->scale_value)) ||
            !op_kernel_ok(r, rt_kernels(r)->fill(DT_F32, tensor_data(s->growth_tracker), 1, (float)s->clean_steps)))
            return r->status;
    }
    tensor_bump_version(s->scale);
    return OOM_OK;
}
