/* replay.c - PyTorch snapshot trace replay through the caching allocator model. See replay.h. */
#include "alloc/replay.h"

#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "device/device.h"
#include "core/fileio.h"
#include "core/jsonfile.h"
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

#define EXACT_MAX 9007199254740992.0 /* 2^53: above it a JSON number, read as a double, is no longer exact */

/* o[key] as a whole number >= 0 read exactly: NULL, or what is wrong with it, for an error line. */
static const char *u64_problem(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return "is missing";
    if (!cJSON_IsNumber(v))
        return "is not a number";
    if (v->valuedouble < 0)
        return "is negative";
    if (v->valuedouble != floor(v->valuedouble))
        return "is not a whole number";
    if (v->valuedouble > EXACT_MAX)
        return "is above 2^53 (9007199254740992), where a JSON number is not read exactly";
    *out = (uint64_t)v->valuedouble;
    return NULL;
}

static bool get_u64(const cJSON *o, const char *key, uint64_t *out) { return !u64_problem(o, key, out); }

/* The config recorded in allocator_settings: its settings string, else the individual fields. */
static oom_status conf_from_settings(const cJSON *settings, alloc_conf *conf, char *err, size_t errcap)
{
    char perr[ALLOC_CONF_ERR_MAX];
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
    /* roundup_power2_divisions as PyTorch records it, {"1": d0, "2": d1, ..., "32768": d15}: each key names its
     * bucket by the bucket's lower bound in MiB, and is checked as --alloc-conf's list form checks [MB:div] */
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(settings, "roundup_power2_divisions");
    if (rd && !cJSON_IsNull(rd) && !cJSON_IsObject(rd)) {
        set_err(err, errcap, "allocator_settings: roundup_power2_divisions must be a dict {\"MB\": divisions, ...}");
        return OOM_EINVAL;
    }
    for (const cJSON *e = rd ? rd->child : NULL; e; e = e->next) {
        char *value = cJSON_PrintUnformatted(e); /* the value's JSON text: 4, 3.5, 1.8446744073709552e+19, "4" */
        if (!value) {
            set_err(err, errcap, "allocator_settings: out of host memory");
            return OOM_ENOMEM_HOST;
        }
        oom_status st = alloc_conf_set_roundup_bucket(conf, e->string, value, perr, sizeof perr);
        free(value);
        if (st != OOM_OK) {
            set_err(err, errcap, "allocator_settings: %s", perr);
            return st;
        }
    }
    return OOM_OK;
}

/* Parse the trace list of device devidx into events. */
static event *parse_events(const cJSON *list, int devidx, size_t *count, char *err, size_t errcap)
{
    size_t n = (size_t)cJSON_GetArraySize(list), i = 0;
    event *ev = calloc(n ? n : 1, sizeof *ev);
    if (!ev) {
        set_err(err, errcap, "out of host memory");
        return NULL;
    }
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "action");
        if (!cJSON_IsString(a) || !ca_action_parse(a->valuestring, &ev[i].action)) {
            set_err(err, errcap, "cuda:%d event %zu: unknown or missing 'action'", devidx, i);
            goto fail;
        }
        const char *akey = ev[i].action == CA_OOM ? "device_free" : "addr";
        const char *bad = u64_problem(e, akey, &ev[i].addr);
        const char *bkey = bad ? akey : "size";
        if (!bad)
            bad = u64_problem(e, "size", &ev[i].size);
        if (bad) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, bkey);
            char shown[64] = "";
            if (cJSON_IsNumber(v))
                snprintf(shown, sizeof shown, " %.17g", v->valuedouble);
            set_err(err, errcap, "cuda:%d event %zu (%s): '%s'%s %s", devidx, i, a->valuestring, bkey, shown, bad);
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

/* Replay one device's events from an empty allocator (opt->kernels: when the sim sees the first kernel launch); res
 * gets the result. With snap, *snap gets the model's
 * _snapshot() at the end, its segments marked with the device index. */
static oom_status replay_events(const event *ev, size_t nev, const replay_options *opt, const replay_report *rep,
                                replay_result *res, cJSON **snap, char *err, size_t errcap)
{
    oom_status rc = OOM_OK;
    res->first_divergence = -1;
    res->kernel_event = -1;
    res->first_oom_event = -1;
    res->conf = rep->conf;
    device *dev = NULL;
    device_options dopt = {.kind = DEVICE_SIM, .sim_dry_run = true};
    if (device_open(&dopt, &dev) != OOM_OK) {
        set_err(err, errcap, "cannot open the sim device");
        return OOM_ENOMEM_HOST;
    }
    cachealloc_options copt = {.conf = rep->conf, .budget_bytes = rep->budget_bytes};
    cachealloc *ca = NULL;
    if (cachealloc_new(dev, &copt, &ca) != OOM_OK) {
        set_err(err, errcap, "out of host memory");
        device_close(dev);
        return OOM_ENOMEM_HOST;
    }
    res->budget_bytes = cachealloc_budget(ca);
    cachealloc_record_history(ca, true);
    addr_map live;
    if (!am_init(&live, nev + 1)) {
        set_err(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        goto out;
    }

    replay_state st = {.ca = ca, .dev = dev, .ev = ev, .res = res, .keep_trace = snap != NULL};
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
            if (!rep->whatif && !opt->model_addresses)
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
                set_err(err, errcap, "cuda:%d event %zu: device failure %s", res->device, i, oom_status_str(s));
                rc = s;
                goto out;
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
    if (snap) {
        *snap = snapshot_json(ca);
        if (!*snap) {
            set_err(err, errcap, "--snapshot: out of host memory");
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

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

#define PICKLE_ERR                                                                                             \
    "%s is a pickle: convert it with scripts/snapshot2json.py first (scripts/snapshot2json.py %s -o OUT.json)"

/* The file's JSON, or NULL with one line in err: a directory, an unreadable, too large or empty file, a pickle,
 * a truncated or invalid JSON (jsonfile_parse names the kind and where), a JSON that is not an object. */
static cJSON *load_snapshot(const char *path, size_t max_input, oom_status *st, char *err, size_t errcap)
{
    *st = OOM_EINVAL;
    DIR *d = opendir(path);
    if (d) {
        closedir(d);
        set_err(err, errcap, "%s is a directory, not a snapshot JSON file", path);
        return NULL;
    }
    fileio_limit lim = max_input ? fileio_limit_of(max_input, "--max-input") : fileio_default_limit();
    size_t len = 0;
    char *text = fileio_read_limited(path, &lim, &len, st);
    if (!text) {
        set_err(err, errcap, "%s", oom_error_detail());
        return NULL;
    }
    *st = OOM_EINVAL;
    cJSON *root = NULL;
    if (len == 0) {
        set_err(err, errcap, "%s is empty (expected the JSON of torch.cuda.memory._snapshot())", path);
    } else if ((unsigned char)text[0] == 0x80) { /* pickle protocol 2 and later start with PROTO */
        set_err(err, errcap, PICKLE_ERR, path, path);
    } else {
        root = jsonfile_parse(path, text, len, err, errcap);
        if (!root && (ends_with(path, ".pickle") || ends_with(path, ".pkl")))
            set_err(err, errcap, PICKLE_ERR, path, path);
        else if (root && !cJSON_IsObject(root))
            set_err(err, errcap, "%s: not a JSON object but a %s (expected the dict of torch.cuda.memory._snapshot())",
                    path, cJSON_IsArray(root) ? "list" : cJSON_IsString(root) ? "string" : "number or literal");
    }
    free(text);
    if (root && !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = NULL;
    }
    if (root)
        *st = OOM_OK;
    return root;
}

/* "cuda:0, cuda:2" for the devices of traces that have events, into buf. */
static void devices_with_events(const cJSON *traces, char *buf, size_t cap)
{
    size_t n = 0;
    int i = 0;
    buf[0] = '\0';
    for (const cJSON *t = traces->child; t; t = t->next, i++)
        if (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0 && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%scuda:%d", n ? ", " : "", i);
}

/* The budget: opt's, else the file's "budget", else none. */
static oom_status pick_budget(const cJSON *root, const char *path, const replay_options *opt, replay_report *rep,
                              char *err, size_t errcap)
{
    if (opt->budget_bytes) {
        rep->budget_bytes = opt->budget_bytes;
        rep->budget_source = REPLAY_BUDGET_OPTION;
        return OOM_OK;
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "budget");
    if (!b || cJSON_IsNull(b)) {
        rep->budget_source = REPLAY_BUDGET_NONE;
        return OOM_OK;
    }
    uint64_t v = 0;
    if (!get_u64(root, "budget", &v) || v == 0 || v > SIZE_MAX) {
        set_err(err, errcap, "%s: 'budget' must be a whole number of bytes > 0 (scripts/snapshot2json.py --budget "
                             "writes it)",
                path);
        return OOM_EINVAL;
    }
    rep->budget_bytes = (size_t)v;
    rep->budget_source = REPLAY_BUDGET_FILE;
    return OOM_OK;
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
    memset(rep, 0, sizeof *rep);
    oom_status rc;
    cJSON *root = load_snapshot(path, opt->max_input, &rc, err, errcap);
    if (!root)
        return rc;
    rc = OOM_EINVAL;
    cJSON **snaps = NULL;
    size_t nsnaps = 0;
    const cJSON *traces = cJSON_GetObjectItemCaseSensitive(root, "device_traces");
    if (!cJSON_IsArray(traces)) {
        set_err(err, errcap, "%s: not a memory snapshot: no 'device_traces' list", path);
        goto out;
    }
    rep->ntraces = (size_t)cJSON_GetArraySize(traces);
    size_t nwith = 0;
    int i = 0;
    for (const cJSON *t = traces->child; t; t = t->next, i++) {
        if (!cJSON_IsArray(t)) {
            set_err(err, errcap, "%s: device_traces[%d] is not a list", path, i);
            goto out;
        }
        nwith += cJSON_GetArraySize(t) > 0;
    }
    char with[200];
    devices_with_events(traces, with, sizeof with);
    if (nwith == 0) {
        set_err(err, errcap, "%s: no trace events on any device (call torch.cuda.memory._record_memory_history() "
                             "before the program allocates, then _dump_snapshot())",
                path);
        goto out;
    }
    if (opt->one_device && (opt->device < 0 || (size_t)opt->device >= rep->ntraces ||
                            cJSON_GetArraySize(cJSON_GetArrayItem(traces, opt->device)) == 0)) {
        set_err(err, errcap, "--device: %s has no events on cuda:%d (it has events on %s)", path, opt->device, with);
        goto out;
    }

    if (conf_from_settings(cJSON_GetObjectItemCaseSensitive(root, "allocator_settings"), &rep->recorded, err,
                           errcap) != OOM_OK) {
        if (!opt->alloc_conf)
            goto out;
        /* --alloc-conf replaces settings the model cannot read: a what-if, as nothing says they are the same */
        snprintf(rep->recorded_error, sizeof rep->recorded_error, "%s", err);
        err[0] = '\0';
        alloc_conf_default(&rep->recorded);
    }
    rep->conf = rep->recorded;
    if (opt->alloc_conf) {
        char perr[ALLOC_CONF_ERR_MAX];
        alloc_conf_default(&rep->conf);
        if (alloc_conf_parse(&rep->conf, opt->alloc_conf, perr, sizeof perr) != OOM_OK) {
            set_err(err, errcap, "--alloc-conf: %s", perr);
            goto out;
        }
        char a[ALLOC_CONF_TEXT_MAX], b[ALLOC_CONF_TEXT_MAX];
        rep->whatif = rep->recorded_error[0] || strcmp(alloc_conf_format(&rep->conf, a, sizeof a),
                                                       alloc_conf_format(&rep->recorded, b, sizeof b)) != 0;
    }
    if (pick_budget(root, path, opt, rep, err, errcap) != OOM_OK)
        goto out;

    size_t nrep = opt->one_device ? 1 : nwith;
    rep->devices = calloc(nrep, sizeof *rep->devices);
    snaps = opt->snapshot_path ? calloc(nrep, sizeof *snaps) : NULL;
    nsnaps = snaps ? nrep : 0;
    if (!rep->devices || (opt->snapshot_path && !snaps)) {
        set_err(err, errcap, "out of host memory");
        rc = OOM_ENOMEM_HOST;
        goto out;
    }
    i = 0;
    for (const cJSON *t = traces->child; t; t = t->next, i++) {
        if (cJSON_GetArraySize(t) == 0 || (opt->one_device && i != opt->device))
            continue;
        replay_result *res = &rep->devices[rep->ndevices];
        res->device = i;
        size_t nev = 0;
        event *ev = parse_events(t, i, &nev, err, errcap);
        if (!ev)
            goto out;
        rc = replay_events(ev, nev, opt, rep, res, snaps ? &snaps[rep->ndevices] : NULL, err, errcap);
        free(ev);
        if (rc != OOM_OK)
            goto out;
        rep->ndevices++;
        rc = OOM_EINVAL;
    }
    cJSON_Delete(root);
    root = NULL;
    rc = OOM_OK;
    if (opt->snapshot_path) {
        cJSON *all = merge_snapshots(snaps, rep);
        oom_error_clear();
        rc = all ? snapshot_write_tree(all, opt->snapshot_path) : OOM_ENOMEM_HOST;
        cJSON_Delete(all);
        if (rc != OOM_OK) /* the last-error record reads "EIO at file:line: detail"; the user gets the detail */
            set_err(err, errcap, "--snapshot: %s", all ? oom_error_detail() : "out of host memory");
    }
out:
    for (size_t k = 0; k < nsnaps; k++)
        cJSON_Delete(snaps[k]);
    free(snaps);
    cJSON_Delete(root);
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
        set_err(err, errcap, "%s has events on %s: pick one device", path, with);
        rc = OOM_EINVAL;
    }
    if (rc == OOM_OK)
        *res = rep.devices[0];
    replay_report_free(&rep);
    return rc;
}
