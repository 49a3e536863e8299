/* hostbuf.c - CPU tensors, pageable or pinned (see hostbuf.h). */
#include "runtime/hostbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/hostalloc.h"
#include "core/check.h"
#include "kernels.h"

oom_status hostbuf_check(const hostbuf *b, bool expensive, char *why, size_t cap)
{
    OOM_REQUIRE(b && b->rt, why, cap, "H1: no hostbuf, or no rt behind it");
    OOM_REQUIRE(b->ndim >= 0 && b->ndim <= TENSOR_MAX_DIMS && (unsigned)b->dt < DT_COUNT, why, cap,
                "H1: ndim %d or dtype %d out of range", b->ndim, (int)b->dt);
    size_t n = dtype_size(b->dt);
    for (int i = 0; i < b->ndim; i++) {
        OOM_REQUIRE(b->shape[i] >= 0 && !(b->shape[i] && n > SIZE_MAX / (size_t)b->shape[i]), why, cap,
                    "H1: shape[%d] = %lld", i, (long long)b->shape[i]);
        n *= (size_t)b->shape[i];
    }
    OOM_REQUIRE(b->nbytes == n, why, cap, "H2: nbytes %zu, not numel x dtype_size = %zu", b->nbytes, n);
    OOM_REQUIRE(!b->pinned || !b->nbytes || b->data, why, cap, "H3: pinned, %zu bytes, and no block", b->nbytes);
    OOM_REQUIRE(b->pinned || (b->data != NULL) == (b->rt->computes && b->nbytes > 0), why, cap,
                "H4: pageable, %zu bytes, %s data in a run that %s", b->nbytes, b->data ? "with" : "without",
                b->rt->computes ? "computes" : "is dry");
    OOM_REQUIRE(!expensive || !b->pinned || !b->data || hostalloc_block_size(b->rt->ha, b->data) >= b->nbytes, why,
                cap, "H5: pinned, but %p is not a live block of rt->ha of %zu bytes or more", b->data, b->nbytes);
    return OOM_OK;
}

/* Checked builds: b's invariants at a function's entry or on what it returns; a broken one aborts. */
#define debug_check(b) OOM_VALIDATE("hostbuf", hostbuf_check, (b))

static oom_status make(rt *r, dtype dt, int ndim, const int64_t *shape, hostbuf **out)
{
    if (!r || !out || ndim < 0 || ndim > TENSOR_MAX_DIMS || (unsigned)dt >= DT_COUNT || (ndim && !shape))
        return OOM_EINVAL;
    size_t n = dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && n > SIZE_MAX / (size_t)shape[i]))
            return OOM_EINVAL;
        n *= (size_t)shape[i];
    }
    hostbuf *b = calloc(1, sizeof *b);
    if (!b)
        return OOM_ENOMEM_HOST;
    b->rt = r;
    b->dt = dt;
    b->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        b->shape[i] = shape[i];
    b->nbytes = n;
    *out = b;
    return OOM_OK;
}

oom_status hostbuf_randn(rt *r, dtype dt, int ndim, const int64_t *shape, uint64_t seed, hostbuf **out)
{
    hostbuf *b = NULL;
    oom_status st = make(r, dt, ndim, shape, &b);
    if (st != OOM_OK)
        return st;
    if (r->computes && b->nbytes) {
        b->data = malloc(b->nbytes);
        if (!b->data) {
            free(b);
            return OOM_ENOMEM_HOST;
        }
        /* the CPU generator: kernels_ref works on host memory whatever the backend */
        st = kernels_ref.rand_normal(dt, b->data, (int64_t)(b->nbytes / dtype_size(dt)), seed, 0.0f, 1.0f);
        if (st != OOM_OK) {
            hostbuf_free(b);
            return st;
        }
    }
    debug_check(b);
    *out = b;
    return OOM_OK;
}

oom_status hostbuf_pin_memory(const hostbuf *src, hostbuf **out)
{
    if (!src || !out)
        return OOM_EINVAL;
    debug_check(src);
    hostbuf *b = NULL;
    oom_status st = make(src->rt, src->dt, src->ndim, src->shape, &b);
    if (st != OOM_OK)
        return st;
    st = hostalloc_malloc(src->rt->ha, b->nbytes, &b->data);
    if (st != OOM_OK) {
        free(b);
        return st;
    }
    b->pinned = true;
    if (src->data && b->data)
        memcpy(b->data, src->data, b->nbytes);
    debug_check(b);
    *out = b;
    return OOM_OK;
}

void hostbuf_free(hostbuf *b)
{
    if (!b)
        return;
    debug_check(b);
    if (b->pinned)
        (void)hostalloc_free(b->rt->ha, b->data); /* an event that cannot be recorded synchronises instead */
    else
        free(b->data);
    free(b);
}

tensor *hostbuf_to_device(const hostbuf *b, bool non_blocking, devstream s)
{
    if (!b)
        return NULL;
    debug_check(b);
    rt *r = b->rt;
    tensor *t = tensor_empty(r, b->dt, b->ndim, b->shape);
    if (!t)
        return NULL;
    if (b->data && b->nbytes && r->computes) {
        oom_status st = device_copy_htod(r->dev, t->st->ptr + t->offset, b->data, b->nbytes);
        if (st != OOM_OK) {
            rt_fail_detail(r, st, "copy to the device failed");
            tensor_release(t);
            return NULL;
        }
    }
    if (b->pinned && non_blocking && b->data) {
        oom_status st = hostalloc_record_event(r->ha, b->data, s);
        if (st != OOM_OK) {
            rt_fail(r, st, "recording the copy's event on a pinned block: %s", oom_status_str(st));
            tensor_release(t);
            return NULL;
        }
    }
    return t;
}
