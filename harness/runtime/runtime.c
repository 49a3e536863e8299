/* runtime.c - the runtime context: device + caching allocator + kernels, modes, and the sticky error. */
#include "runtime/runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/amp.h"

oom_status rt_open(const rt_options *opt, rt **out)
{
    rt_options o = opt ? *opt : (rt_options){0};
    if (o.dry_run && o.backend == DEVICE_CUDA) {
        OOM_ERROR(OOM_EINVAL, "--dry-run needs the sim backend");
        return OOM_EINVAL;
    }
    device_options dopt = {.kind = o.dry_run ? DEVICE_SIM : o.backend,
                           .sim_capacity_bytes = o.sim_capacity,
                           .sim_dry_run = o.dry_run,
                           .cuda_real_order = o.real_addresses,
                           .cuda_ordinal = o.cuda_ordinal};
    device *dev = NULL;
    oom_status st = device_open(&dopt, &dev);
    if (st != OOM_OK)
        return st;
    rt *r = calloc(1, sizeof *r);
    if (!r) {
        device_close(dev);
        return OOM_ENOMEM_HOST;
    }
    cachealloc_options copt = {.budget_bytes = o.budget_bytes, .uncached = o.uncached};
    if (o.conf)
        copt.conf = *o.conf;
    else
        alloc_conf_default(&copt.conf);
    st = cachealloc_new(dev, &copt, &r->ca);
    if (st != OOM_OK) {
        device_close(dev);
        free(r);
        return st;
    }
    hostalloc_options hopt;
    hostalloc_options_from_conf(&copt.conf, &hopt);
    st = hostalloc_new(dev, &hopt, &r->ha);
    if (st != OOM_OK) {
        cachealloc_delete(r->ca);
        device_close(dev);
        free(r);
        return st;
    }
    r->dev = dev;
#ifdef OOM_HAVE_CUDA
    r->k = dev->kind == DEVICE_CUDA ? &kernels_cuda : &kernels_ref;
#else
    r->k = &kernels_ref;
#endif
    r->computes = !o.dry_run;
    r->grad_enabled = true;
    r->autocast_dtype = DT_F16;
    r->seed = o.seed;
    *out = r;
    return OOM_OK;
}

void rt_close(rt *r)
{
    if (!r)
        return;
    amp_close(r);
#if OOM_DEBUG >= 2
    if (r->live_tensors || r->live_nodes)
        fprintf(stderr, "oomlab: rt_close with %zu tensors and %zu autograd nodes alive\n", r->live_tensors,
                r->live_nodes);
#endif
    hostalloc_delete(r->ha);
    cachealloc_delete(r->ca);
    device_close(r->dev);
    free(r);
}

void rt_clear(rt *r)
{
    r->status = OOM_OK;
    r->message[0] = '\0';
}

oom_status rt_fail(rt *r, oom_status st, const char *fmt, ...)
{
    if (r->status != OOM_OK)
        return st;
    r->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    if (!r->message[0]) /* status and message are set together */
        snprintf(r->message, sizeof r->message, "%s", oom_status_str(st));
    return st;
}

oom_status rt_fail_oom(rt *r)
{
    const ca_oom_info *o = cachealloc_last_oom(r->ca);
    return rt_fail(r, OOM_ENOMEM_DEVICE, "%s", o ? o->message : "CUDA out of memory.");
}

oom_status rt_fail_detail(rt *r, oom_status st, const char *what)
{
    const char *why = oom_error_detail();
    if (!why[0])
        why = oom_status_str(st);
    return what ? rt_fail(r, st, "%s: %s", what, why) : rt_fail(r, st, "%s", why);
}

bool rt_set_grad_enabled(rt *r, bool on)
{
    bool prev = r->grad_enabled;
    r->grad_enabled = on;
    return prev;
}

uint64_t rt_next_seed(rt *r)
{
    /* one stream per draw, derived from the manual seed and the draw's index */
    return oom_rng_hash(r->seed, r->rng_offset++);
}

void rt_set_pinned_budget(rt *r, size_t bytes) { device_pinned_cap_set(r->dev, bytes); }

void rt_empty_cache(rt *r) { cachealloc_empty_cache(r->ca); }

int rt_set_stream(rt *r, int stream)
{
    int prev = cachealloc_stream(r->ca);
    cachealloc_set_stream(r->ca, stream);
    return prev;
}

oom_status rt_sync(rt *r)
{
    oom_status st = rt_kernels(r)->sync();
    if (st != OOM_OK)
        rt_fail_detail(r, st, NULL);
    return st;
}
