/* snapshot.c - _snapshot()-shaped JSON of the caching allocator, its pickle, and the atomic writer. See
 * snapshot.h. */
#include "trace/snapshot.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/allocconf.h"
#include "core/fileio.h"

/* ---- the dict ---- */

/* cJSON_Add* return NULL when out of host memory; *ok collects that. */
static void add_num(cJSON *o, const char *key, double v, bool *ok)
{
    if (!cJSON_AddNumberToObject(o, key, v))
        *ok = false;
}

static void add_bool(cJSON *o, const char *key, bool v, bool *ok)
{
    if (!cJSON_AddBoolToObject(o, key, v))
        *ok = false;
}

static void add_str(cJSON *o, const char *key, const char *v, bool *ok)
{
    if (!cJSON_AddStringToObject(o, key, v))
        *ok = false;
}

static cJSON *add_arr(cJSON *o, const char *key, bool *ok)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    if (!a)
        *ok = false;
    return a;
}

static cJSON *add_obj(cJSON *o, const char *key, bool *ok)
{
    cJSON *a = cJSON_AddObjectToObject(o, key);
    if (!a)
        *ok = false;
    return a;
}

/* Add item to array a (an item that cannot be added is freed). */
static void push(cJSON *a, cJSON *item, bool *ok)
{
    if (!a || !item || !cJSON_AddItemToArray(a, item)) {
        cJSON_Delete(item);
        *ok = false;
    }
}

static cJSON *segments_json(const cachealloc *ca, bool *ok)
{
    cJSON *arr = cJSON_CreateArray();
    size_t ns = 0;
    ca_snap_segment *segs = cachealloc_snapshot(ca, &ns);
    if (!arr || !segs) {
        cJSON_Delete(arr);
        cachealloc_snapshot_free(segs, ns);
        *ok = false;
        return NULL;
    }
    for (size_t i = 0; i < ns && *ok; i++) {
        const ca_snap_segment *s = &segs[i];
        cJSON *o = cJSON_CreateObject();
        push(arr, o, ok);
        if (!*ok)
            break;
        add_num(o, "device", 0, ok);
        add_num(o, "address", (double)s->address, ok);
        add_num(o, "total_size", (double)s->total_size, ok);
        add_num(o, "allocated_size", (double)s->allocated_size, ok);
        add_num(o, "active_size", (double)s->active_size, ok);
        add_num(o, "requested_size", (double)s->requested_size, ok);
        add_num(o, "stream", s->stream, ok);
        add_str(o, "segment_type", s->is_small ? "small" : "large", ok);
        cJSON *pool = add_arr(o, "segment_pool_id", ok);
        push(pool, cJSON_CreateNumber(0), ok); /* a CUDA graph's pool: (0, its number) as graph_pool_handle() */
        push(pool, cJSON_CreateNumber(s->pool), ok);
        add_bool(o, "is_expandable", s->is_expandable, ok);
        add_arr(o, "frames", ok);
        cJSON *blocks = add_arr(o, "blocks", ok);
        for (size_t j = 0; j < s->nblocks && *ok; j++) {
            const ca_snap_block *b = &s->blocks[j];
            cJSON *bo = cJSON_CreateObject();
            push(blocks, bo, ok);
            if (!*ok)
                break;
            add_num(bo, "address", (double)b->addr, ok);
            add_num(bo, "size", (double)b->size, ok);
            add_num(bo, "requested_size", (double)b->requested_size, ok);
            add_str(bo, "state", b->state ? "active_allocated" : "inactive", ok);
            add_arr(bo, "frames", ok);
        }
    }
    cachealloc_snapshot_free(segs, ns);
    return arr;
}

static cJSON *traces_json(const cachealloc *ca, bool *ok)
{
    cJSON *outer = cJSON_CreateArray();
    cJSON *t0 = cJSON_CreateArray();
    push(outer, t0, ok);
    if (!*ok)
        return outer;
    size_t n = 0;
    const ca_trace_entry *t = cachealloc_trace(ca, &n);
    for (size_t i = 0; i < n && *ok; i++) {
        cJSON *e = cJSON_CreateObject();
        push(t0, e, ok);
        if (!*ok)
            break;
        add_str(e, "action", ca_action_str(t[i].action), ok);
        /* PyTorch's TraceEntry keeps the device's free bytes in addr for an OOM and names it device_free */
        add_num(e, t[i].action == CA_OOM ? "device_free" : "addr", (double)t[i].addr, ok);
        add_num(e, "size", (double)t[i].size, ok);
        add_num(e, "stream", 0, ok);
        add_num(e, "time_us", (double)t[i].time_us, ok);
        add_arr(e, "frames", ok);
        /* PyTorch 2.11 adds these two to every entry (its defaults without torch.compile or metadata) */
        add_str(e, "compile_context", "N/A", ok);
        add_str(e, "user_metadata", "", ok);
    }
    return outer;
}

/* The value of key in a settings text, whitespace dropped, into buf ("" if the key is absent). The text was
 * accepted by alloc_conf_parse, so it is "key:value" pairs separated by commas outside [...]. */
static void conf_value(const char *text, const char *key, char *buf, size_t cap)
{
    char s[ALLOC_CONF_TEXT_MAX];
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < sizeof s; p++)
        if (!isspace((unsigned char)*p))
            s[n++] = *p;
    s[n] = '\0';
    buf[0] = '\0';
    size_t klen = strlen(key);
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        bool at_start = i == 0 || (s[i - 1] == ',' && depth == 0);
        if (s[i] == '[')
            depth++;
        else if (s[i] == ']' && depth > 0)
            depth--;
        if (!at_start || strncmp(s + i, key, klen) != 0 || s[i + klen] != ':')
            continue;
        const char *v = s + i + klen + 1;
        size_t vlen = strcspn(v, ",");
        if (vlen >= cap)
            vlen = cap - 1;
        memcpy(buf, v, vlen);
        buf[vlen] = '\0';
    }
}

static bool conf_bool(const char *text, const char *key)
{
    char v[16];
    conf_value(text, key, v, sizeof v);
    return strcmp(v, "True") == 0;
}

static cJSON *settings_json(const alloc_conf *c, bool *ok)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        *ok = false;
        return NULL;
    }
    add_str(o, "PYTORCH_CUDA_ALLOC_CONF", c->text, ok);
    add_num(o, "max_split_size", c->max_split_size == SIZE_MAX ? -1.0 : (double)c->max_split_size, ok);
    add_num(o, "garbage_collection_threshold", c->gc_threshold, ok);
    add_bool(o, "expandable_segments", c->expandable_segments, ok);
    /* keys without effect on the model: as the text set them, else PyTorch's defaults */
    char v[32];
    conf_value(c->text, "pinned_num_register_threads", v, sizeof v);
    add_num(o, "pinned_num_register_threads", v[0] ? strtod(v, NULL) : 1.0, ok);
    add_bool(o, "release_lock_on_cudamalloc", conf_bool(c->text, "release_lock_on_cudamalloc"), ok);
    add_bool(o, "pinned_use_cuda_host_register", conf_bool(c->text, "pinned_use_cuda_host_register"), ok);
    add_bool(o, "graph_capture_record_stream_reuse", conf_bool(c->text, "graph_capture_record_stream_reuse"), ok);
    cJSON *rd = add_obj(o, "roundup_power2_divisions", ok);
    for (int b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS && rd; b++) {
        char key[16];
        snprintf(key, sizeof key, "%lu", 1UL << b); /* bucket b starts at 2^b MiB */
        add_num(rd, key, (double)c->roundup_divisions[b], ok);
    }
    return o;
}

cJSON *snapshot_json(const cachealloc *ca)
{
    bool ok = true;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON *parts[3] = {segments_json(ca, &ok), traces_json(ca, &ok), settings_json(cachealloc_conf(ca), &ok)};
    static const char *const names[3] = {"segments", "device_traces", "allocator_settings"};
    for (int i = 0; i < 3; i++) {
        if (!parts[i] || !cJSON_AddItemToObject(root, names[i], parts[i])) {
            cJSON_Delete(parts[i]);
            ok = false;
        }
    }
    add_arr(root, "external_annotations", &ok);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- pickle (protocol 2; the opcodes MemoryViz.js's unpickler reads) ---- */

typedef struct bytebuf {
    unsigned char *p;
    size_t n, cap;
    bool ok;
} bytebuf;

static void bb_put(bytebuf *b, const void *data, size_t len)
{
    if (!b->ok)
        return;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len)
            cap *= 2;
        unsigned char *np = realloc(b->p, cap);
        if (!np) {
            b->ok = false;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void bb_byte(bytebuf *b, unsigned char c) { bb_put(b, &c, 1); }

static void bb_le(bytebuf *b, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        bb_byte(b, (unsigned char)(v >> (8 * i)));
}

enum {
    P_PROTO = 0x80, P_STOP = '.', P_MARK = '(', P_EMPTY_DICT = '}', P_EMPTY_LIST = ']', P_SETITEMS = 'u',
    P_APPENDS = 'e', P_BINUNICODE = 'X', P_BININT = 'J', P_BININT1 = 'K', P_BININT2 = 'M', P_LONG1 = 0x8a,
    P_BINFLOAT = 'G', P_NEWTRUE = 0x88, P_NEWFALSE = 0x89, P_NONE = 'N',
};

/* Items per MARK ... SETITEMS/APPENDS, as Python's pickler batches them (MemoryViz.js spreads each batch into
 * one call, so a huge one would overflow its argument limit). */
#define PICKLE_BATCH 1000

static void pk_str(bytebuf *b, const char *s)
{
    size_t n = strlen(s);
    bb_byte(b, P_BINUNICODE);
    bb_le(b, (uint64_t)n, 4);
    bb_put(b, s, n);
}

static void pk_int(bytebuf *b, int64_t v)
{
    if (v >= 0 && v < 256) {
        bb_byte(b, P_BININT1);
        bb_byte(b, (unsigned char)v);
    } else if (v >= 0 && v < 65536) {
        bb_byte(b, P_BININT2);
        bb_le(b, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        bb_byte(b, P_BININT);
        bb_le(b, (uint64_t)v, 4);
    } else {
        /* LONG1: little-endian two's complement, shortest form that keeps the sign */
        unsigned char bytes[8];
        for (int i = 0; i < 8; i++)
            bytes[i] = (unsigned char)((uint64_t)v >> (8 * i));
        int n = 8;
        while (n > 1 && ((bytes[n - 1] == 0x00 && !(bytes[n - 2] & 0x80)) ||
                         (bytes[n - 1] == 0xff && (bytes[n - 2] & 0x80))))
            n--;
        bb_byte(b, P_LONG1);
        bb_byte(b, (unsigned char)n);
        bb_put(b, bytes, (size_t)n);
    }
}

static void pk_float(bytebuf *b, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    bb_byte(b, P_BINFLOAT);
    for (int i = 7; i >= 0; i--) /* big-endian */
        bb_byte(b, (unsigned char)(bits >> (8 * i)));
}

static void pk_value(bytebuf *b, const cJSON *v, bool as_float)
{
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        bool dict = cJSON_IsObject(v);
        bb_byte(b, dict ? P_EMPTY_DICT : P_EMPTY_LIST);
        size_t k = 0;
        for (const cJSON *c = v->child; c && b->ok; c = c->next) {
            if (k == 0)
                bb_byte(b, P_MARK);
            if (dict)
                pk_str(b, c->string ? c->string : "");
            pk_value(b, c, dict && c->string && strcmp(c->string, "garbage_collection_threshold") == 0);
            if (++k == PICKLE_BATCH || !c->next) {
                bb_byte(b, dict ? P_SETITEMS : P_APPENDS);
                k = 0;
            }
        }
    } else if (cJSON_IsString(v)) {
        pk_str(b, v->valuestring);
    } else if (cJSON_IsTrue(v)) {
        bb_byte(b, P_NEWTRUE);
    } else if (cJSON_IsFalse(v)) {
        bb_byte(b, P_NEWFALSE);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!as_float && d == floor(d) && fabs(d) < 9.2e18)
            pk_int(b, (int64_t)d);
        else
            pk_float(b, d);
    } else {
        bb_byte(b, P_NONE);
    }
}

unsigned char *snapshot_pickle(const cJSON *snap, size_t *len)
{
    bytebuf b = {.ok = true};
    bb_byte(&b, P_PROTO);
    bb_byte(&b, 2);
    pk_value(&b, snap, false);
    bb_byte(&b, P_STOP);
    if (!b.ok) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

/* ---- atomic write ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

oom_status snapshot_write(const cachealloc *ca, const char *path)
{
    if (!path || !path[0]) {
        OOM_ERROR(OOM_EINVAL, "snapshot: empty output path");
        return OOM_EINVAL;
    }
    cJSON *snap = snapshot_json(ca);
    if (!snap) {
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot write %s: out of host memory", path);
        return OOM_ENOMEM_HOST;
    }
    oom_status st = snapshot_write_tree(snap, path);
    cJSON_Delete(snap);
    return st;
}

oom_status snapshot_write_tree(const cJSON *snap, const char *path)
{
    if (!path || !path[0]) {
        OOM_ERROR(OOM_EINVAL, "snapshot: empty output path");
        return OOM_EINVAL;
    }
    void *data;
    size_t len;
    if (ends_with(path, ".pickle") || ends_with(path, ".pkl")) {
        data = snapshot_pickle(snap, &len);
    } else {
        char *text = cJSON_PrintUnformatted(snap);
        len = text ? strlen(text) : 0;
        if (text)
            text[len] = '\n'; /* one line, newline-terminated; the NUL is not written */
        data = text;
        len += text ? 1 : 0;
    }
    if (!data) {
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot write %s: out of host memory", path);
        return OOM_ENOMEM_HOST;
    }
    oom_status st = fileio_write_atomic(path, data, len);
    free(data);
    return st;
}
