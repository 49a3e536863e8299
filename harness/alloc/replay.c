/* replay.c - PyTorch snapshot trace replay through the caching allocator model. See replay.h. */
#include "alloc/replay.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "device/device.h"
#include "core/fileio.h"
#include "alloc/snapshot.h"

/* ---- trace addr -> model ptr, open addressing (keys are nonzero addresses) ---- */

typedef struct addr_map {
    uint64_t *keys;
    uint64_t *vals;
    size_t mask, n;
} addr_map;

static bool am_init(addr_map *m, size_t cap)
{
    size_t n = 64;
    while (n < cap * 2)
        n *= 2;
    m->keys = calloc(n, sizeof *m->keys);
    m->vals = calloc(n, sizeof *m->vals);
    m->mask = n - 1;
    m->n = 0;
    return m->keys && m->vals;
}

static size_t am_slot(const addr_map *m, uint64_t k)
{
    size_t i = (size_t)((k * 0x9E3779B97F4A7C15ULL) >> 17) & m->mask;
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & m->mask;
    return i;
}

/* capacity is fixed at the number of events, so the table never fills */
static void am_put(addr_map *m, uint64_t k, uint64_t v)
{
    size_t i = am_slot(m, k);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = k;
    m->vals[i] = v;
}

static bool am_take(addr_map *m, uint64_t k, uint64_t *v)
{
    size_t i = am_slot(m, k);
    if (!m->keys[i])
        return false;
    *v = m->vals[i];
    /* backward-shift deletion keeps probe chains intact */
    m->keys[i] = 0;
    m->n--;
    for (size_t j = (i + 1) & m->mask; m->keys[j]; j = (j + 1) & m->mask) {
        uint64_t kk = m->keys[j], vv = m->vals[j];
        m->keys[j] = 0;
        size_t s = am_slot(m, kk);
        m->keys[s] = kk;
        m->vals[s] = vv;
    }
    return true;
}

/* ---- parsed events ---- */

typedef struct event {
    ca_action action;
    uint64_t addr;
    uint64_t size;
} event;

static void set_err(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static bool get_u64(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble > 9007199254740992.0)
        return false;
    *out = (uint64_t)v->valuedouble;
    return true;
}

/* The config recorded in allocator_settings: its settings string, else the individual fields. */
static oom_status conf_from_settings(const cJSON *settings, alloc_conf *conf, char *err, size_t errcap)
{
    char perr[200];
    alloc_conf_default(conf);
    if (!cJSON_IsObject(settings))
        return OOM_OK;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(settings, "PYTORCH_CUDA_ALLOC_CONF");
    if (cJSON_IsString(s) && s->valuestring[0]) {
        if (alloc_conf_parse(conf, s->valuestring, perr, sizeof perr) != OOM_OK) {
            set_err(err, errcap, "allocator_settings: %s", perr);
            return OOM_EINVAL;
        }
        return OOM_OK;
    }
    /* no string: rebuild it from the fields PyTorch reports */
    char text[512] = "";
    size_t n = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(settings, "max_split_size");
    if (cJSON_IsNumber(v) && v->valuedouble > 0)
        n += (size_t)snprintf(text + n, sizeof text - n, "max_split_size_mb:%.0f,", v->valuedouble / 1048576.0);
    v = cJSON_GetObjectItemCaseSensitive(settings, "garbage_collection_threshold");
    if (cJSON_IsNumber(v) && v->valuedouble > 0)
        n += (size_t)snprintf(text + n, sizeof text - n, "garbage_collection_threshold:%.17g,", v->valuedouble);
    v = cJSON_GetObjectItemCaseSensitive(settings, "expandable_segments");
    if (cJSON_IsTrue(v))
        n += (size_t)snprintf(text + n, sizeof text - n, "expandable_segments:True,");
    if (n > 0)
        text[n - 1] = '\0';
    if (alloc_conf_parse(conf, text, perr, sizeof perr) != OOM_OK) {
        set_err(err, errcap, "allocator_settings: %s", perr);
        return OOM_EINVAL;
    }
    /* roundup_power2_divisions as a dict of bucket boundary (MiB) -> divisions */
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(settings, "roundup_power2_divisions");
    if (cJSON_IsObject(rd)) {
        int b = 0;
        for (const cJSON *e = rd->child; e && b < ALLOC_CONF_ROUNDUP_BUCKETS; e = e->next, b++)
            if (cJSON_IsNumber(e) && e->valuedouble >= 0)
                conf->roundup_divisions[b] = (size_t)e->valuedouble;
    }
    return OOM_OK;
}

/* Parse device_traces[0] into events. */
static event *parse_events(const cJSON *root, size_t *count, char *err, size_t errcap)
{
    const cJSON *traces = cJSON_GetObjectItemCaseSensitive(root, "device_traces");
    if (!cJSON_IsArray(traces)) {
        set_err(err, errcap, "not a memory snapshot: no 'device_traces' list");
        return NULL;
    }
    const cJSON *t0 = cJSON_GetArrayItem(traces, 0);
    if (!t0) {
        *count = 0;
        return calloc(1, sizeof(event));
    }
    if (!cJSON_IsArray(t0)) {
        set_err(err, errcap, "device_traces[0] is not a list");
        return NULL;
    }
    size_t n = (size_t)cJSON_GetArraySize(t0), i = 0;
    event *ev = calloc(n ? n : 1, sizeof *ev);
    if (!ev) {
        set_err(err, errcap, "out of host memory");
        return NULL;
    }
    for (const cJSON *e = t0->child; e; e = e->next, i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "action");
        if (!cJSON_IsString(a) || !ca_action_parse(a->valuestring, &ev[i].action)) {
            set_err(err, errcap, "event %zu: unknown or missing 'action'", i);
            goto fail;
        }
        const char *akey = ev[i].action == CA_OOM ? "device_free" : "addr";
        if (!get_u64(e, akey, &ev[i].addr) || !get_u64(e, "size", &ev[i].size)) {
            set_err(err, errcap, "event %zu (%s): missing or invalid '%s' or 'size'", i, a->valuestring, akey);
            goto fail;
        }
    }
    *count = n;
    return ev;
fail:
    free(ev);
    return NULL;
}

static bool is_release(ca_action a) { return a == CA_SEGMENT_FREE || a == CA_SEGMENT_UNMAP; }

static bool is_segment(ca_action a)
{
    return a == CA_SEGMENT_ALLOC || a == CA_SEGMENT_FREE || a == CA_SEGMENT_MAP || a == CA_SEGMENT_UNMAP;
}

typedef struct replay_state {
    cachealloc *ca;
    device *dev;
    const event *ev;
    size_t pending_lo, pending_hi; /* recorded segment events since the last op: ev[lo..hi) */
    size_t model_lo;               /* model trace entries before the current op */
    bool keep_trace;               /* keep the model's whole trace (for the snapshot) instead of clearing it */
    replay_result *res;
} replay_state;

/* Compare the model's segment actions since model_lo with the recorded ones pending; note the first
 * disagreement at event index at. */
static void compare_actions(replay_state *st, size_t at)
{
    size_t nm = 0;
    const ca_trace_entry *mt = cachealloc_trace(st->ca, &nm);
    size_t mi = st->model_lo, ri = st->pending_lo;
    for (;;) {
        while (mi < nm && !is_segment(mt[mi].action))
            mi++;
        while (ri < st->pending_hi && !is_segment(st->ev[ri].action))
            ri++;
        bool mend = mi >= nm, rend = ri >= st->pending_hi;
        if (mend && rend)
            break;
        if (st->res->first_divergence < 0) {
            const event *r = rend ? NULL : &st->ev[ri];
            const ca_trace_entry *m = mend ? NULL : &mt[mi];
            if (!r || !m || r->action != m->action || r->size != m->size) {
                long idx = r ? (long)ri : (long)at;
                st->res->first_divergence = idx;
                snprintf(st->res->divergence, sizeof st->res->divergence,
                         "event %ld: PyTorch %s %llu bytes, model %s %llu bytes", idx,
                         r ? ca_action_str(r->action) : "did nothing", r ? (unsigned long long)r->size : 0ULL,
                         m ? ca_action_str(m->action) : "did nothing", m ? (unsigned long long)m->size : 0ULL);
            }
        }
        if (!mend)
            mi++;
        if (!rend)
            ri++;
    }
    if (st->keep_trace) {
        st->model_lo = nm;
    } else {
        cachealloc_trace_clear(st->ca);
        st->model_lo = 0;
    }
    st->pending_lo = st->pending_hi;
}

static void note_divergence(replay_state *st, size_t at, const char *what)
{
    if (st->res->first_divergence >= 0)
        return;
    st->res->first_divergence = (long)at;
    snprintf(st->res->divergence, sizeof st->res->divergence, "event %zu: %s", at, what);
}

/* Hint the sim at the address PyTorch's next new segment (or range) got. */
static void hint_next_segment(replay_state *st)
{
    for (size_t i = st->pending_lo; i < st->pending_hi; i++) {
        if (st->ev[i].action == CA_SEGMENT_ALLOC) {
            device_addr_hint(st->dev, st->ev[i].addr, (size_t)st->ev[i].size);
            return;
        }
    }
}

/* Before an op: recorded releases at the head of the pending list that the op would not cause itself were an
 * explicit empty_cache(). */
static void maybe_empty_cache(replay_state *st, bool op_is_alloc, size_t nbytes)
{
    if (st->pending_lo >= st->pending_hi || !is_release(st->ev[st->pending_lo].action))
        return;
    if (op_is_alloc && cachealloc_would_release(st->ca, nbytes))
        return;
    cachealloc_empty_cache(st->ca);
}

oom_status replay_file(const char *path, const replay_options *opt, replay_result *res, char *err, size_t errcap)
{
    oom_status rc = OOM_EINVAL;
    memset(res, 0, sizeof *res);
    res->first_divergence = -1;
    res->kernel_event = -1;
    res->first_oom_event = -1;
    size_t len = 0;
    char *text = fileio_read_all(path, &len);
    if (!text) {
        set_err(err, errcap, "%s", oom_error_detail());
        return OOM_EIO;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        set_err(err, errcap, "%s: not a JSON object (expected the dict of torch.cuda.memory._snapshot())", path);
        cJSON_Delete(root);
        return OOM_EINVAL;
    }
    size_t nev = 0;
    event *ev = parse_events(root, &nev, err, errcap);
    if (!ev) {
        cJSON_Delete(root);
        return OOM_EINVAL;
    }
    if (opt->alloc_conf) {
        char perr[200];
        alloc_conf_default(&res->conf);
        if (alloc_conf_parse(&res->conf, opt->alloc_conf, perr, sizeof perr) != OOM_OK) {
            set_err(err, errcap, "--alloc-conf: %s", perr);
            goto out_free;
        }
    } else if (conf_from_settings(cJSON_GetObjectItemCaseSensitive(root, "allocator_settings"), &res->conf, err,
                                  errcap) != OOM_OK) {
        goto out_free;
    }
    cJSON_Delete(root);
    root = NULL;

    device *dev = NULL;
    device_options dopt = {.kind = DEVICE_SIM, .sim_dry_run = true};
    if (device_open(&dopt, &dev) != OOM_OK) {
        set_err(err, errcap, "cannot open the sim device");
        rc = OOM_ENOMEM_HOST;
        goto out_free;
    }
    cachealloc_options copt = {.conf = res->conf, .budget_bytes = opt->budget_bytes};
    cachealloc *ca = NULL;
    if (cachealloc_new(dev, &copt, &ca) != OOM_OK) {
        set_err(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        device_close(dev);
        goto out_free;
    }
    res->budget_bytes = cachealloc_budget(ca);
    cachealloc_record_history(ca, true);
    addr_map live;
    if (!am_init(&live, nev + 1)) {
        set_err(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        goto out_close;
    }

    replay_state st = {.ca = ca, .dev = dev, .ev = ev, .res = res, .keep_trace = opt->snapshot_path != NULL};
    bool allocated = false;
    for (size_t i = 0; i < nev; i++) {
        const event *e = &ev[i];
        if (res->kernel_event < 0 && ((opt->kernels == REPLAY_KERNELS_FIRST_ALLOC && allocated) ||
                                      (opt->kernels == REPLAY_KERNELS_AT && i >= opt->kernel_at))) {
            device_note_kernel_launch(dev);
            res->kernel_event = (long)i;
        }
        switch (e->action) {
        case CA_SEGMENT_ALLOC:
        case CA_SEGMENT_FREE:
        case CA_SEGMENT_MAP:
        case CA_SEGMENT_UNMAP:
            if (st.pending_hi == st.pending_lo)
                st.pending_lo = st.pending_hi = i;
            st.pending_hi = i + 1;
            break;
        case CA_ALLOC:
        case CA_OOM: {
            if (st.pending_hi == st.pending_lo)
                st.pending_lo = st.pending_hi = i;
            maybe_empty_cache(&st, true, (size_t)e->size);
            if (!opt->alloc_conf)
                hint_next_segment(&st); /* the recorded addresses describe this config's history only */
            devptr p = 0;
            oom_status s = cachealloc_malloc(ca, (size_t)e->size, &p);
            device_addr_hint(dev, 0, 0);
            if (s == OOM_ENOMEM_DEVICE) {
                if (res->model_ooms++ == 0) {
                    res->first_oom_event = (long)i;
                    const ca_oom_info *o = cachealloc_last_oom(ca);
                    snprintf(res->oom_message, sizeof res->oom_message, "%s", o ? o->message : "");
                }
                if (e->action == CA_ALLOC)
                    note_divergence(&st, i, "the model ran out of memory where PyTorch allocated");
            } else if (s != OOM_OK) {
                set_err(err, errcap, "event %zu: device failure %s", i, oom_status_str(s));
                rc = s;
                goto out_map;
            } else if (e->action == CA_OOM) {
                /* PyTorch failed here; the program never held the tensor */
                note_divergence(&st, i, "PyTorch ran out of memory where the model allocated");
                cachealloc_free(ca, p);
            } else {
                am_put(&live, e->addr, p);
                allocated = true;
            }
            compare_actions(&st, i);
            break;
        }
        case CA_FREE_REQUESTED: {
            if (st.pending_hi == st.pending_lo)
                st.pending_lo = st.pending_hi = i;
            maybe_empty_cache(&st, false, 0);
            uint64_t p = 0;
            if (am_take(&live, e->addr, &p))
                cachealloc_free(ca, p);
            else if (res->model_ooms == 0)
                note_divergence(&st, i, "free of an address the trace never allocated");
            compare_actions(&st, i);
            break;
        }
        case CA_FREE_COMPLETED:
        case CA_SNAPSHOT:
        default:
            break;
        }
    }
    /* trailing releases: an empty_cache() after the last op */
    if (st.pending_lo < st.pending_hi) {
        if (is_release(ev[st.pending_lo].action))
            cachealloc_empty_cache(ca);
        compare_actions(&st, nev);
    }
    res->events = nev;
    res->stats = *cachealloc_stats(ca);
    rc = OOM_OK;
    if (opt->snapshot_path) {
        oom_error_clear();
        rc = snapshot_write(ca, opt->snapshot_path);
        if (rc != OOM_OK) {
            /* the last-error record reads "EIO at file:line: detail"; the user gets the detail */
            set_err(err, errcap, "--snapshot: %s", oom_error_detail());
        }
    }
out_map:
    free(live.keys);
    free(live.vals);
out_close:
    cachealloc_delete(ca);
    device_close(dev);
out_free:
    cJSON_Delete(root);
    free(ev);
    return rc;
}
