/* replay.c - PyTorch snapshot trace replay through the caching allocator model. See replay.h. */
#include "trace/replay.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "device/device.h"
#include "trace/snapshot.h"
#include "trace/trace.h"
#include "core/fail.h"

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

/* Double the table (at most half full, so probe chains stay short). false when out of host memory. */
static bool am_grow(addr_map *m)
{
    addr_map g;
    if (!am_init(&g, m->mask + 1))
        return false;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->keys[i]) {
            size_t j = am_slot(&g, m->keys[i]);
            g.keys[j] = m->keys[i];
            g.vals[j] = m->vals[i];
            g.n++;
        }
    }
    free(m->keys);
    free(m->vals);
    *m = g;
    return true;
}

static bool am_put(addr_map *m, uint64_t k, uint64_t v)
{
    if (2 * (m->n + 1) > m->mask + 1 && !am_grow(m))
        return false;
    size_t i = am_slot(m, k);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = k;
    m->vals[i] = v;
    return true;
}

static bool am_has(const addr_map *m, uint64_t k) { return m->keys[am_slot(m, k)] != 0; }

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

static bool is_release(ca_action a) { return a == CA_SEGMENT_FREE || a == CA_SEGMENT_UNMAP; }

static bool is_segment(ca_action a)
{
    return a == CA_SEGMENT_ALLOC || a == CA_SEGMENT_FREE || a == CA_SEGMENT_MAP || a == CA_SEGMENT_UNMAP;
}

typedef struct replay_state {
    cachealloc *ca;
    device *dev;
    const trace_event *ev;
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
            const trace_event *r = rend ? NULL : &st->ev[ri];
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

/* Allocate to pool from here on (0: the default pools); false when out of host memory. */
static bool enter_pool(cachealloc *ca, int pool)
{
    if (pool == cachealloc_allocating_pool(ca))
        return true;
    cachealloc_end_allocate_to_pool(ca, cachealloc_allocating_pool(ca));
    return pool <= 0 || cachealloc_begin_allocate_to_pool(ca, pool) == OOM_OK;
}

/* Before an op: recorded releases at the head of the pending list that the op would not cause itself were an
 * explicit empty_cache(). */
static void maybe_empty_cache(replay_state *st, bool op_is_alloc, size_t nbytes)
{
    if (st->pending_lo >= st->pending_hi || !is_release(st->ev[st->pending_lo].action))
        return;
    if (op_is_alloc && cachealloc_would_release(st->ca, nbytes))
        return;
    /* from Python, outside any capture (torch.cuda.graph's own empty_cache() comes before capture_begin) */
    cachealloc_end_allocate_to_pool(st->ca, cachealloc_allocating_pool(st->ca));
    cachealloc_empty_cache(st->ca);
}

/* The state after an event of bucket b: its highest allocated and reserved bytes. */
static void series_note(replay_series *ser, size_t b, const memstats *ms)
{
    int64_t a = ms->allocated_bytes[STAT_ALL].current, r = ms->reserved_bytes[STAT_ALL].current;
    ser->alloc_max[b] = a > ser->alloc_max[b] ? a : ser->alloc_max[b];
    ser->reserved_max[b] = r > ser->reserved_max[b] ? r : ser->reserved_max[b];
}

/* Replay one device's events from an empty allocator (opt->kernels: when the sim sees the first kernel launch); res
 * gets the result. With snap, *snap gets the model's
 * _snapshot() at the end, its segments marked with the device index. */
/* A trace without segment events that is not whole (each address allocated once until freed): the one line. */
static oom_status not_whole(char *err, size_t errcap, int dev_index, size_t i, const char *act, uint64_t addr,
                            const char *why)
{
    errbuf_set(err, errcap, "cuda:%d event %zu: %s 0x%llx, %s (a trace without segment events must be whole)",
               dev_index, i, act, (unsigned long long)addr, why);
    return OOM_EINVAL;
}

static oom_status replay_events(const trace_event *ev, size_t nev, const replay_options *opt, const replay_report *rep,
                                replay_result *res, cJSON **snap, char *err, size_t errcap)
{
    oom_status rc = OOM_OK;
    res->first_divergence = -1;
    res->kernel_event = -1;
    res->first_oom_event = -1;
    res->conf = rep->conf;
    device *dev = NULL;
    device_options dopt = {.kind = DEVICE_SIM,
                           .sim_dry_run = true,
                           .sim_capacity_bytes = opt->device_total,
                           .sim_context_bytes = opt->device_context,
                           .sim_layout_seed = opt->layout_seed};
    if (device_open(&dopt, &dev) != OOM_OK) {
        errbuf_set(err, errcap, "cannot open the sim device");
        return OOM_ENOMEM_HOST;
    }
    cachealloc_options copt = {.conf = rep->conf, .budget_bytes = rep->budget_bytes};
    cachealloc *ca = NULL;
    if (cachealloc_new(dev, &copt, &ca) != OOM_OK) {
        errbuf_set(err, errcap, "out of host memory");
        device_close(dev);
        return OOM_ENOMEM_HOST;
    }
    res->budget_bytes = cachealloc_budget(ca);
    res->device_total = dev->total_bytes;
    /* fast: no model trace, no comparison with the recorded segment actions; a prediction has none to compare */
    const bool compare = !opt->fast && !res->prediction;
    const bool model_addresses = opt->model_addresses || rep->whatif || res->prediction;
    cachealloc_record_history(ca, compare);
    addr_map live;
    if (!am_init(&live, 512)) {
        errbuf_set(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        goto out;
    }

    replay_state st = {.ca = ca, .dev = dev, .ev = ev, .res = res, .keep_trace = snap != NULL};
    bool allocated = false;
    replay_series *ser = opt->series;
    const memstats *ms = cachealloc_stats(ca);
    size_t probe = 0;
    if (ser)
        for (size_t b = 0; b < ser->nbuckets; b++)
            ser->alloc_max[b] = ser->reserved_max[b] = 0;
    size_t i = 0;
    for (; i < nev; i++) {
        const trace_event *e = &ev[i];
        if (ser) {
            for (; probe < ser->nprobes && ser->probe_at[probe] <= i; probe++)
                ser->probe_alloc[probe] = ms->allocated_bytes[STAT_ALL].current;
            if (ser->nbuckets && i > 0)
                series_note(ser, (i - 1) * ser->nbuckets / nev, ms);
        }
        if (opt->stop_at_oom && res->model_ooms)
            break;
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
            /* a trace without segment events (a prediction, a hand-made trace) must be whole: each address
             * allocated once until it is freed (a recording that started late may free what it never saw); a
             * 0-byte request is no allocation (PyTorch's allocator returns no block), so it may share an address */
            if (res->prediction && e->action == CA_ALLOC && e->size > 0 && am_has(&live, e->addr)) {
                rc = not_whole(err, errcap, res->device, i, "allocates at", e->addr,
                               "which an earlier event allocated and none freed");
                goto out;
            }
            if (st.pending_hi == st.pending_lo)
                st.pending_lo = st.pending_hi = i;
            /* the request as it is made: its stream, and its private pool (a CUDA graph's capture or warm-up) */
            cachealloc_set_stream(ca, e->stream);
            if (!enter_pool(ca, e->pool)) {
                errbuf_set(err, errcap, "out of host memory");
                rc = OOM_ENOMEM_HOST;
                goto out;
            }
            maybe_empty_cache(&st, true, (size_t)e->size);
            if (!enter_pool(ca, e->pool)) { /* again, if an empty_cache() came between */
                errbuf_set(err, errcap, "out of host memory");
                rc = OOM_ENOMEM_HOST;
                goto out;
            }
            if (!model_addresses)
                hint_next_segment(&st); /* the recorded addresses describe the recorded config's history only */
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
                errbuf_set(err, errcap, "cuda:%d event %zu: device failure %s", res->device, i, oom_status_str(s));
                rc = s;
                goto out;
            } else if (e->action == CA_OOM) {
                /* PyTorch failed here; the program never held the tensor */
                note_divergence(&st, i, "PyTorch ran out of memory where the model allocated");
                cachealloc_free(ca, p);
            } else if (e->size > 0 && !am_put(&live, e->addr, p)) { /* a 0-byte request holds no address */
                errbuf_set(err, errcap, "out of host memory");
                rc = OOM_ENOMEM_HOST;
                goto out;
            } else {
                allocated = true;
            }
            if (compare)
                compare_actions(&st, i);
            else
                st.pending_lo = st.pending_hi;
            break;
        }
        case CA_FREE_REQUESTED: {
            if (st.pending_hi == st.pending_lo)
                st.pending_lo = st.pending_hi = i;
            maybe_empty_cache(&st, false, 0);
            uint64_t p = 0;
            if (am_take(&live, e->addr, &p)) {
                cachealloc_free(ca, p);
            } else if (res->prediction && res->model_ooms == 0 && e->size > 0) {
                rc = not_whole(err, errcap, res->device, i, "frees", e->addr, "which no earlier event allocated");
                goto out;
            } else if (res->model_ooms == 0) {
                note_divergence(&st, i, "free of an address the trace never allocated");
            }
            if (compare)
                compare_actions(&st, i);
            else
                st.pending_lo = st.pending_hi;
            break;
        }
        case CA_EMPTY_CACHE: /* a prediction's torch.cuda.empty_cache() (the capture's own entry) */
            cachealloc_end_allocate_to_pool(ca, cachealloc_allocating_pool(ca));
            cachealloc_empty_cache(ca);
            break;
        case CA_FREE_COMPLETED:
        case CA_SNAPSHOT:
        default:
            break;
        }
    }
    /* trailing releases: an empty_cache() after the last op */
    if (i == nev && st.pending_lo < st.pending_hi) {
        if (is_release(ev[st.pending_lo].action))
            cachealloc_empty_cache(ca);
        if (compare)
            compare_actions(&st, nev);
    }
    if (ser) {
        for (; probe < ser->nprobes; probe++)
            ser->probe_alloc[probe] = ms->allocated_bytes[STAT_ALL].current;
        if (ser->nbuckets && i > 0)
            series_note(ser, (i - 1) * ser->nbuckets / nev, ms);
    }
    res->events = i;
    res->stats = *cachealloc_stats(ca);
    if (snap) {
        *snap = snapshot_json(ca);
        if (!*snap) {
            errbuf_set(err, errcap, "--snapshot: out of host memory");
            rc = OOM_ENOMEM_HOST;
            goto out;
        }
        cJSON *seg;
        cJSON_ArrayForEach(seg, cJSON_GetObjectItemCaseSensitive(*snap, "segments"))
        {
            cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(seg, "device"), res->device);
        }
    }
out:
    free(live.keys);
    free(live.vals);
    cachealloc_delete(ca);
    device_close(dev);
    return rc;
}

/* The replayed devices' snapshots as one _snapshot(): segments in device order, device_traces at their index,
 * the budget (not a PyTorch key) when one was used. Takes the snapshots (freed); NULL when out of memory. */
static cJSON *merge_snapshots(cJSON **snaps, const replay_report *rep)
{
    cJSON *all = snaps[0];
    snaps[0] = NULL;
    cJSON *segs = cJSON_GetObjectItemCaseSensitive(all, "segments");
    cJSON *lists = cJSON_CreateArray();
    bool ok = lists != NULL;
    for (size_t i = 0, k = 0; ok && i < rep->ntraces; i++) {
        cJSON *list = NULL;
        if (k < rep->ndevices && rep->devices[k].device == (int)i) {
            cJSON *src = k == 0 ? all : snaps[k];
            list = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(src, "device_traces"), 0);
            if (k > 0) {
                cJSON *seg;
                while (ok && (seg = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(src, "segments"), 0)))
                    ok = cJSON_AddItemToArray(segs, seg);
                cJSON_Delete(snaps[k]);
                snaps[k] = NULL;
            }
            k++;
        }
        if (!list)
            list = cJSON_CreateArray();
        ok = ok && list && cJSON_AddItemToArray(lists, list);
    }
    ok = ok && cJSON_ReplaceItemInObjectCaseSensitive(all, "device_traces", lists);
    if (!ok)
        cJSON_Delete(lists);
    if (ok && rep->budget_bytes)
        ok = cJSON_AddNumberToObject(all, "budget", (double)rep->budget_bytes) != NULL;
    if (!ok) {
        cJSON_Delete(all);
        return NULL;
    }
    return all;
}

oom_status replay_trace(const char *path, const replay_options *opt, replay_report *rep, char *err, size_t errcap)
{
    trace_file t;
    oom_status rc = trace_load_max(path, opt->max_input, &t, err, errcap);
    if (rc == OOM_OK)
        rc = replay_loaded(&t, path, opt, rep, err, errcap);
    else
        memset(rep, 0, sizeof *rep);
    trace_free(&t);
    return rc;
}

oom_status replay_loaded(const trace_file *t, const char *path, const replay_options *opt, replay_report *rep,
                         char *err, size_t errcap)
{
    memset(rep, 0, sizeof *rep);
    /* a predicted trace is replayed on the GPU it was predicted for, unless the caller names one */
    replay_options on_gpu = *opt;
    if (!opt->device_total && trace_capture_gpu(t, &on_gpu.device_total, &on_gpu.device_context))
        opt = &on_gpu;
    size_t total = opt->device_total ? opt->device_total : (size_t)DEVICE_SIM_DEFAULT_CAPACITY;
    oom_status rc = OOM_EINVAL;
    cJSON **snaps = NULL;
    size_t nsnaps = 0;
    rep->ntraces = t->ndevices;
    size_t nwith = 0;
    for (size_t i = 0; i < t->ndevices; i++)
        nwith += t->dev[i].n > 0;
    char with[200];
    trace_devices_with_events(t, with, sizeof with);
    if (nwith == 0) {
        errbuf_set(err, errcap, "%s: no trace events on any device (call torch.cuda.memory._record_memory_history() "
                             "before the program allocates, then _dump_snapshot())",
                path);
        goto out;
    }
    if (opt->one_device &&
        (opt->device < 0 || (size_t)opt->device >= t->ndevices || t->dev[opt->device].n == 0)) {
        errbuf_set(err, errcap, "--device: %s has no events on cuda:%d (it has events on %s)", path, opt->device, with);
        goto out;
    }
    rep->recorded = t->recorded;
    if (t->recorded_error[0]) {
        if (!opt->alloc_conf) {
            errbuf_set(err, errcap, "%s", t->recorded_error);
            goto out;
        }
        /* --alloc-conf replaces settings the model cannot read: a what-if, as nothing says they are the same */
        snprintf(rep->recorded_error, sizeof rep->recorded_error, "%s", t->recorded_error);
    }
    rep->conf = rep->recorded;
    if (opt->alloc_conf) {
        char perr[ALLOC_CONF_ERR_MAX];
        alloc_conf_default(&rep->conf);
        if (alloc_conf_parse(&rep->conf, opt->alloc_conf, perr, sizeof perr) != OOM_OK) {
            errbuf_set(err, errcap, "--alloc-conf: %s", perr);
            goto out;
        }
        char a[ALLOC_CONF_TEXT_MAX], b[ALLOC_CONF_TEXT_MAX];
        rep->whatif = rep->recorded_error[0] || strcmp(alloc_conf_format(&rep->conf, a, sizeof a),
                                                       alloc_conf_format(&rep->recorded, b, sizeof b)) != 0;
    }
    /* the budget: opt's, else the file's "budget", else none */
    if (opt->budget_bytes) {
        rep->budget_bytes = opt->budget_bytes;
        rep->budget_source = REPLAY_BUDGET_OPTION;
    } else if (t->budget == TRACE_BUDGET_BYTES) {
        rep->budget_bytes = t->budget_bytes;
        rep->budget_source = REPLAY_BUDGET_FILE;
    } else if (t->budget == TRACE_BUDGET_BAD) {
        errbuf_set(err, errcap, "%s: 'budget' must be a whole number of bytes > 0 (scripts/snapshot2json.py --budget "
                             "writes it)",
                path);
        goto out;
    }
    if (rep->budget_bytes > total) { /* a cap above the memory would never apply */
        errbuf_set(err, errcap, "%s: %zu bytes is more than the device's %zu (%s)",
                rep->budget_source == REPLAY_BUDGET_OPTION ? "--budget" : "the file's 'budget'", rep->budget_bytes,
                total, opt->device_total ? "the GPU's memory" : "an H100's memory, which the sim models");
        goto out;
    }
    if (cachealloc_budget_allows_nothing(rep->budget_bytes, total,
                                         rep->budget_source == REPLAY_BUDGET_OPTION ? "--budget" : "the file's 'budget'",
                                         err, errcap))
        goto out;

    size_t nrep = opt->one_device ? 1 : nwith;
    rep->devices = calloc(nrep, sizeof *rep->devices);
    snaps = opt->snapshot_path ? calloc(nrep, sizeof *snaps) : NULL;
    nsnaps = snaps ? nrep : 0;
    if (!rep->devices || (opt->snapshot_path && !snaps)) {
        errbuf_set(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        goto out;
    }
    for (size_t i = 0; i < t->ndevices; i++) {
        if (t->dev[i].n == 0 || (opt->one_device && (int)i != opt->device))
            continue;
        replay_result *res = &rep->devices[rep->ndevices];
        res->device = (int)i;
        res->prediction = !trace_has_segment_events(t, i);
        rc = replay_events(t->dev[i].ev, t->dev[i].n, opt, rep, res, snaps ? &snaps[rep->ndevices] : NULL, err,
                           errcap);
        if (rc != OOM_OK)
            goto out;
        rep->ndevices++;
        rc = OOM_EINVAL;
    }
    rep->prediction = rep->ndevices > 0;
    for (size_t k = 0; k < rep->ndevices; k++)
        rep->prediction = rep->prediction && rep->devices[k].prediction;
    rc = OOM_OK;
    if (opt->snapshot_path) {
        cJSON *all = merge_snapshots(snaps, rep);
        oom_error_clear();
        rc = all ? snapshot_write_tree(all, opt->snapshot_path) : OOM_ENOMEM_HOST;
        cJSON_Delete(all);
        if (rc != OOM_OK) /* the last-error record reads "EIO at file:line: detail"; the user gets the detail */
            errbuf_set(err, errcap, "--snapshot: %s", all ? oom_error_detail() : "out of host memory");
    }
out:
    for (size_t k = 0; k < nsnaps; k++)
        cJSON_Delete(snaps[k]);
    free(snaps);
    return rc;
}

void replay_report_free(replay_report *rep)
{
    free(rep->devices);
    rep->devices = NULL;
    rep->ndevices = 0;
}

oom_status replay_file(const char *path, const replay_options *opt, replay_result *res, char *err, size_t errcap)
{
    memset(res, 0, sizeof *res);
    res->first_divergence = -1;
    res->first_oom_event = -1;
    replay_report rep;
    oom_status rc = replay_trace(path, opt, &rep, err, errcap);
    if (rc == OOM_OK && rep.ndevices != 1) {
        char with[200] = "";
        for (size_t k = 0, n = 0; k < rep.ndevices && n < sizeof with; k++)
            n += (size_t)snprintf(with + n, sizeof with - n, "%scuda:%d", k ? ", " : "", rep.devices[k].device);
        errbuf_set(err, errcap, "%s has events on %s: pick one device", path, with);
        rc = OOM_EINVAL;
    }
    if (rc == OOM_OK)
        *res = rep.devices[0];
    replay_report_free(&rep);
    return rc;
}
