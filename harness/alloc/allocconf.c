/* allocconf.c - PYTORCH_CUDA_ALLOC_CONF parser with PyTorch 2.11's rules (c10/core/AllocatorConfig.cpp,
 * c10/cuda/CUDAAllocatorConfig.cpp). Tokens split on , : [ ] with all whitespace dropped, as in
 * ConfigTokenizer. Where PyTorch is lax by accident (stoull accepts "20abc" and "-1", a missing ':' is not
 * checked because checkToken's result is ignored), this parser is strict; every accepted string means the
 * same as in PyTorch. */
#include "alloc/allocconf.h"

#include "core/echo.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define MIN_LARGE_ALLOC_MB 10    /* kMinLargeAlloc / kMB: large_segment_size_mb must exceed it */
#define MAX_REGISTER_THREADS 128 /* CUDAAllocatorConfig::pinned_max_register_threads() */
#define NUM_MAX 255              /* longest token read as a double */

typedef struct tok {
    const char *p;
    size_t n;
} tok;

enum key_id {
    K_MAX_SPLIT,
    K_MAX_NON_SPLIT,
    K_ROUNDUP,
    K_GC,
    K_EXPANDABLE,
    K_LARGE_SEGMENT,
    K_FRACTION,
    K_RELEASE_LOCK,
    K_RELEASE_LOCK_HIP,
    K_HOST_REGISTER,
    K_HOST_REGISTER_HIP,
    K_REGISTER_THREADS,
    K_BACKGROUND_THREADS,
    K_PINNED_RESERVE,
    K_GRAPH_REUSE,
    K_BACKEND,
    K_COUNT
};

static const char *const key_names[K_COUNT] = {
    [K_MAX_SPLIT] = "max_split_size_mb",
    [K_MAX_NON_SPLIT] = "max_non_split_rounding_mb",
    [K_ROUNDUP] = "roundup_power2_divisions",
    [K_GC] = "garbage_collection_threshold",
    [K_EXPANDABLE] = "expandable_segments",
    [K_LARGE_SEGMENT] = "large_segment_size_mb",
    [K_FRACTION] = "per_process_memory_fraction",
    [K_RELEASE_LOCK] = "release_lock_on_cudamalloc",
    [K_RELEASE_LOCK_HIP] = "release_lock_on_hipmalloc", /* PyTorch accepts the ROCm spelling on CUDA too */
    [K_HOST_REGISTER] = "pinned_use_cuda_host_register",
    [K_HOST_REGISTER_HIP] = "pinned_use_hip_host_register",
    [K_REGISTER_THREADS] = "pinned_num_register_threads",
    [K_BACKGROUND_THREADS] = "pinned_use_background_threads",
    [K_PINNED_RESERVE] = "pinned_reserve_segment_size_mb",
    [K_GRAPH_REUSE] = "graph_capture_record_stream_reuse",
    [K_BACKEND] = "backend",
};

/* One "key:value" pair: value tokens [v, v_end) ([v, v_end) is "[ ... ]" for a list, empty if absent). */
typedef struct entry {
    enum key_id key;
    size_t v, v_end;
} entry;

typedef struct parser {
    const tok *t;
    size_t n;
    alloc_conf *c; /* working copy; *c of the caller is written only on success */
    char *err;
    size_t errcap;
    const char *what; /* how errors about roundup_power2_divisions entries name them (their key, or more) */
} parser;

static oom_status fail(parser *ps, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static oom_status fail(parser *ps, const char *fmt, ...)
{
    char msg[ALLOC_CONF_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->err && ps->errcap)
        snprintf(ps->err, ps->errcap, "%s", msg);
    OOM_ERROR(OOM_EINVAL, "%s", msg);
    return OOM_EINVAL;
}

/* A token as an error shows it (echo_cut: at most ECHO_MAX bytes). One per message: buf is static. */
static const char *echo(tok k)
{
    static char buf[ECHO_BUF];
    return echo_cut(k.p, k.n, buf);
}

static bool tok_is(tok k, const char *s) { return k.n == strlen(s) && memcmp(k.p, s, k.n) == 0; }

static bool tok_punct(tok k) { return k.n == 1 && strchr(",:[]", k.p[0]) != NULL; }

static bool is_pow2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

static unsigned floor_log2(size_t v) /* v > 0 */
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

/* The value token of a scalar key, or an empty token when absent (",", end) or a list. */
static tok scalar(const parser *ps, const entry *e)
{
    static const char empty[] = "";
    if (e->v_end == e->v)
        return (tok){empty, 0};
    return ps->t[e->v];
}

/* A decimal integer: digits only (no sign, no junk); false on overflow. */
static bool tok_uint(tok k, size_t *out)
{
    if (k.n == 0)
        return false;
    size_t v = 0;
    for (size_t i = 0; i < k.n; i++) {
        if (k.p[i] < '0' || k.p[i] > '9')
            return false;
        size_t d = (size_t)(k.p[i] - '0');
        if (v > (SIZE_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* A whole-token double as std::stod reads it; false on junk or ERANGE (stod throws out_of_range). */
static bool tok_double(tok k, double *out)
{
    char buf[NUM_MAX + 1];
    if (k.n == 0 || k.n > NUM_MAX)
        return false;
    memcpy(buf, k.p, k.n);
    buf[k.n] = '\0';
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + k.n || errno == ERANGE)
        return false;
    *out = v;
    return true;
}

/* "<key> must be <range> (got X)": X quoted unless it read as a number of the right kind. */
static oom_status bad_value(parser *ps, enum key_id key, const char *range, tok v, bool numeric)
{
    if (numeric)
        return fail(ps, "%s must be %s (got %s)", key_names[key], range, echo(v));
    return fail(ps, "%s must be %s (got '%s')", key_names[key], range, echo(v));
}

/* Integer MB key with a lower bound (>= min, or > min when strict); stored as PyTorch does:
 * min(val, SIZE_MAX / MiB) * MiB. */
static oom_status parse_mb(parser *ps, const entry *e, size_t min, bool strict, size_t *dst)
{
    char range[64];
    snprintf(range, sizeof range, "an integer %s %zu", strict ? ">" : ">=", min);
    tok v = scalar(ps, e);
    size_t mb;
    if (!tok_uint(v, &mb))
        return bad_value(ps, e->key, range, v, false);
    if (strict ? mb <= min : mb < min)
        return bad_value(ps, e->key, range, v, true);
    if (mb > SIZE_MAX / MIB)
        mb = SIZE_MAX / MIB;
    *dst = mb * MIB;
    return OOM_OK;
}

static oom_status parse_bool(parser *ps, const entry *e, bool *dst)
{
    tok v = scalar(ps, e);
    if (tok_is(v, "True"))
        *dst = true;
    else if (tok_is(v, "False"))
        *dst = false;
    else
        return bad_value(ps, e->key, "True or False", v, false);
    return OOM_OK;
}

/* One divisions value of roundup_power2_divisions' list (or of a snapshot's dict): 0 or a power of two. */
static oom_status roundup_divisions(parser *ps, tok dv, size_t *d)
{
    if (!tok_uint(dv, d))
        return fail(ps, "%s: divisions must be 0 or a power of two (got '%s')", ps->what, echo(dv));
    if (*d != 0 && !is_pow2(*d))
        return fail(ps, "%s: divisions must be 0 or a power of two (got %s)", ps->what, echo(dv));
    return OOM_OK;
}

/* One interval of roundup_power2_divisions' list (or a snapshot dict's key): a power of two in MB; *idx gets its
 * bucket, log2(MB) clamped to 15. expect says what the caller accepts there, for the error. */
static oom_status roundup_interval(parser *ps, tok bound, const char *expect, size_t *idx)
{
    size_t mb;
    if (!tok_uint(bound, &mb))
        return fail(ps, "%s: interval must be %s (got '%s')", ps->what, expect, echo(bound));
    if (!is_pow2(mb))
        return fail(ps, "%s: interval must be %s (got %s)", ps->what, expect, echo(bound));
    *idx = floor_log2(mb);
    if (*idx > ALLOC_CONF_ROUNDUP_BUCKETS - 1)
        *idx = ALLOC_CONF_ROUNDUP_BUCKETS - 1;
    return OOM_OK;
}

/* roundup_power2_divisions: a single power of two for all buckets (0 is refused in this form), or
 * [MB:div,...,>:div]. A named MB sets bucket log2(MB) (clamped to 15); the first named one also fills every
 * lower bucket; '>' fills the buckets after the last named one. */
static oom_status parse_roundup(parser *ps, const entry *e)
{
    size_t *div = ps->c->roundup_divisions;
    const char *key = key_names[K_ROUNDUP];
    ps->what = key;
    if (e->v_end == e->v || !tok_is(ps->t[e->v], "[")) {
        tok v = scalar(ps, e);
        size_t d;
        if (!tok_uint(v, &d))
            return bad_value(ps, K_ROUNDUP, "a power of two or a list [MB:div,...,>:div]", v, false);
        if (!is_pow2(d))
            return bad_value(ps, K_ROUNDUP, "a power of two or a list [MB:div,...,>:div]", v, true);
        for (size_t b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
            div[b] = d;
        return OOM_OK;
    }
    static const char empty[] = "";
    const tok none = {empty, 0};
    size_t i = e->v + 1, close = e->v_end - 1; /* tokens strictly between '[' and ']' */
    size_t last = 0;
    bool first = true;
    while (i < close) {
        tok bound = ps->t[i];
        if (tok_punct(bound))
            return fail(ps, "%s: expected MB or '>' (got '%s')", key, echo(bound));
        if (i + 1 >= close || !tok_is(ps->t[i + 1], ":"))
            return fail(ps, "%s: expected ':' after '%s'", key, echo(bound));
        tok dv = (i + 2 < close && !tok_punct(ps->t[i + 2])) ? ps->t[i + 2] : none;
        size_t d;
        if (roundup_divisions(ps, dv, &d) != OOM_OK)
            return OOM_EINVAL;
        if (tok_is(bound, ">")) {
            for (size_t b = last + 1; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
                div[b] = d;
        } else {
            size_t idx;
            if (roundup_interval(ps, bound, "'>' or a power of two in MB", &idx) != OOM_OK)
                return OOM_EINVAL;
            if (first) {
                for (size_t b = 0; b < idx; b++)
                    div[b] = d;
                first = false;
            }
            div[idx] = d;
            last = idx;
        }
        i += 3; /* past "MB : div" */
        if (i < close) {
            if (!tok_is(ps->t[i], ","))
                return fail(ps, "%s: expected ',' or ']' (got '%s')", key, echo(ps->t[i]));
            i++; /* a trailing ',' before ']' is accepted, as in PyTorch */
        }
    }
    return OOM_OK;
}

static oom_status apply(parser *ps, const entry *e)
{
    alloc_conf *c = ps->c;
    size_t lss_mb = c->large_segment_size / MIB;
    bool ignored;
    switch (e->key) {
    case K_MAX_SPLIT:
        return parse_mb(ps, e, lss_mb, false, &c->max_split_size);
    case K_MAX_NON_SPLIT:
        return parse_mb(ps, e, lss_mb, false, &c->max_non_split_rounding);
    case K_LARGE_SEGMENT:
        return parse_mb(ps, e, MIN_LARGE_ALLOC_MB, true, &c->large_segment_size);
    case K_ROUNDUP:
        return parse_roundup(ps, e);
    case K_GC: {
        tok v = scalar(ps, e);
        double t;
        if (!tok_double(v, &t))
            return bad_value(ps, e->key, "in (0.0, 1.0)", v, false);
        if (!(t > 0.0 && t < 1.0))
            return bad_value(ps, e->key, "in (0.0, 1.0)", v, true);
        c->gc_threshold = t;
        return OOM_OK;
    }
    case K_FRACTION: {
        tok v = scalar(ps, e);
        double f;
        if (!tok_double(v, &f))
            return bad_value(ps, e->key, "in [0.0, 1.0]", v, false);
        if (!(f >= 0.0 && f <= 1.0))
            return bad_value(ps, e->key, "in [0.0, 1.0]", v, true);
        c->per_process_memory_fraction = f;
        c->fraction_set = true;
        return OOM_OK;
    }
    case K_EXPANDABLE:
        return parse_bool(ps, e, &c->expandable_segments);
    case K_HOST_REGISTER:
    case K_HOST_REGISTER_HIP:
        return parse_bool(ps, e, &c->pinned_use_host_register);
    case K_RELEASE_LOCK:
    case K_RELEASE_LOCK_HIP:
    case K_BACKGROUND_THREADS:
    case K_GRAPH_REUSE:
        return parse_bool(ps, e, &ignored);
    case K_REGISTER_THREADS: {
        tok v = scalar(ps, e);
        size_t n;
        if (!tok_uint(v, &n))
            return bad_value(ps, e->key, "a power of two <= 128", v, false);
        if (!is_pow2(n) || n > MAX_REGISTER_THREADS)
            return bad_value(ps, e->key, "a power of two <= 128", v, true);
        c->pinned_num_register_threads = n;
        return OOM_OK;
    }
    case K_PINNED_RESERVE: {
        tok v = scalar(ps, e);
        size_t n;
        if (!tok_uint(v, &n))
            return bad_value(ps, e->key, "an integer > 0", v, false);
        if (n == 0)
            return bad_value(ps, e->key, "an integer > 0", v, true);
        c->pinned_reserve_segment_size = (n > SIZE_MAX / MIB ? SIZE_MAX / MIB : n) * MIB;
        return OOM_OK;
    }
    case K_BACKEND: {
        tok v = scalar(ps, e);
        if (tok_is(v, "native"))
            return OOM_OK;
        if (tok_is(v, "cudaMallocAsync"))
            return fail(ps, "backend:cudaMallocAsync is not supported: oomlab models the native backend only");
        return bad_value(ps, e->key, "native", v, false);
    }
    case K_COUNT:
        break;
    }
    return fail(ps, "alloc-conf: internal error (key %d)", (int)e->key);
}

static oom_status unknown_key(parser *ps, tok k)
{
    char known[512];
    size_t off = 0;
    for (int i = 0; i < K_COUNT; i++) {
        int w = snprintf(known + off, sizeof known - off, "%s%s", i ? ", " : "", key_names[i]);
        if (w < 0 || (size_t)w >= sizeof known - off)
            break;
        off += (size_t)w;
    }
    return fail(ps, "Unrecognized key '%s' in Accelerator allocator config. Known keys: %s", echo(k), known);
}

/* Split into "key:value" entries and check the shape: known keys, ':', balanced list brackets, ','
 * between entries (one trailing ',' allowed, as PyTorch allows it). Values are checked later. */
static oom_status split_entries(parser *ps, entry *out, size_t *count)
{
    const tok *t = ps->t;
    size_t n = ps->n, m = 0;
    for (size_t i = 0; i < n; i++) {
        tok k = t[i];
        if (tok_punct(k))
            return fail(ps, "expected a key, got '%s'", echo(k));
        int key = 0;
        while (key < K_COUNT && !tok_is(k, key_names[key]))
            key++;
        if (key == K_COUNT)
            return unknown_key(ps, k);
        if (i + 1 >= n || !tok_is(t[i + 1], ":"))
            return fail(ps, "expected ':' after '%s'", key_names[key]);
        entry e = {.key = (enum key_id)key, .v = i + 2, .v_end = i + 2};
        if (e.v < n && tok_is(t[e.v], "[")) {
            size_t j = e.v + 1;
            while (j < n && !tok_is(t[j], "]"))
                j++;
            if (j >= n)
                return fail(ps, "%s: missing ']'", key_names[key]);
            e.v_end = j + 1;
        } else if (e.v < n && !tok_punct(t[e.v])) {
            e.v_end = e.v + 1;
        }
        out[m++] = e;
        i = e.v_end; /* the token after the value */
        if (i < n && !tok_is(t[i], ","))
            return fail(ps, "unexpected '%s' after the value of %s (expected ',')", echo(t[i]), key_names[key]);
    }
    *count = m;
    return OOM_OK;
}

void alloc_conf_default(alloc_conf *c)
{
    memset(c, 0, sizeof *c);
    c->max_split_size = SIZE_MAX;
    c->max_non_split_rounding = 20 * MIB;
    c->gc_threshold = 0.0;
    c->expandable_segments = false;
    c->large_segment_size = 20 * MIB;
    c->per_process_memory_fraction = 1.0;
    c->fraction_set = false;
    c->pinned_use_host_register = false;
    c->pinned_num_register_threads = 1;
    c->pinned_reserve_segment_size = 0;
}

oom_status alloc_conf_parse(alloc_conf *c, const char *text, char *err, size_t errcap)
{
    alloc_conf w;
    parser ps = {.err = err, .errcap = errcap, .c = &w};
    if (err && errcap)
        err[0] = '\0';
    if (!c)
        return fail(&ps, "alloc_conf_parse: no config to fill");
    alloc_conf_default(&w);
    if (!text)
        text = "";
    snprintf(w.text, sizeof w.text, "%s", text);

    /* Tokenize a copy with whitespace removed (ConfigTokenizer drops it even inside tokens). */
    size_t len = strlen(text);
    char *buf = malloc(len + 1);
    tok *toks = malloc((len + 1) * sizeof *toks);
    entry *ents = malloc((len + 1) * sizeof *ents);
    if (!buf || !toks || !ents) {
        free(buf);
        free(toks);
        free(ents);
        if (err && errcap)
            snprintf(err, errcap, "alloc-conf: out of host memory");
        OOM_ERROR(OOM_ENOMEM_HOST, "alloc-conf: out of host memory");
        return OOM_ENOMEM_HOST;
    }
    size_t blen = 0;
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)text[i]))
            buf[blen++] = text[i];
    size_t n = 0;
    for (size_t i = 0; i < blen;) {
        size_t j = i;
        if (strchr(",:[]", buf[i]))
            j++;
        else
            while (j < blen && !strchr(",:[]", buf[j]))
                j++;
        toks[n++] = (tok){buf + i, j - i};
        i = j;
    }
    ps.t = toks;
    ps.n = n;

    size_t m = 0;
    oom_status st = split_entries(&ps, ents, &m);
    /* large_segment_size_mb first, wherever it stands: it sets the default of max_non_split_rounding and
     * the minimum of max_split_size_mb and max_non_split_rounding_mb (AcceleratorAllocatorConfig::parseArgs). */
    for (size_t k = 0; st == OOM_OK && k < m; k++)
        if (ents[k].key == K_LARGE_SEGMENT)
            st = apply(&ps, &ents[k]);
    w.max_non_split_rounding = w.large_segment_size;
    for (size_t k = 0; st == OOM_OK && k < m; k++)
        if (ents[k].key != K_LARGE_SEGMENT)
            st = apply(&ps, &ents[k]);

    free(buf);
    free(toks);
    free(ents);
    if (st == OOM_OK)
        *c = w;
    return st;
}

oom_status alloc_conf_set_roundup_bucket(alloc_conf *c, const char *mb, const char *divisions, char *err,
                                         size_t errcap)
{
    char what[ECHO_BUF + 32], eb[ECHO_BUF];
    snprintf(what, sizeof what, "%s[\"%s\"]", key_names[K_ROUNDUP], echo_str(mb ? mb : "", eb));
    parser ps = {.err = err, .errcap = errcap, .c = c, .what = what};
    if (err && errcap)
        err[0] = '\0';
    if (!c || !mb || !divisions)
        return fail(&ps, "alloc_conf_set_roundup_bucket: no config, interval or divisions");
    size_t idx, d;
    if (roundup_interval(&ps, (tok){mb, strlen(mb)}, "a power of two in MB", &idx) != OOM_OK ||
        roundup_divisions(&ps, (tok){divisions, strlen(divisions)}, &d) != OOM_OK)
        return OOM_EINVAL;
    c->roundup_divisions[idx] = d;
    return OOM_OK;
}

const char *alloc_conf_pick(const char *cli, const char **source)
{
    static const char *const envs[] = {ALLOC_CONF_ENV_VARS};
    const char *text = "", *src = "default";
    if (cli) {
        text = cli;
        src = "--alloc-conf";
    } else {
        for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
            const char *v = getenv(envs[i]); /* set but empty still counts: it asks for the defaults */
            if (v) {
                text = v;
                src = envs[i];
                break;
            }
        }
    }
    if (source)
        *source = src;
    return text;
}

oom_status alloc_no_caching_pick(bool *on, const char **source, char *err, size_t errcap)
{
    static const char *const envs[] = {ALLOC_NO_CACHING_ENV_VARS};
    *on = false;
    *source = NULL;
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        const char *v = getenv(envs[i]);
        if (!v)
            continue;
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
            snprintf(err, errcap, "%s must be 0 or 1 (got '%s')", envs[i], v);
            OOM_ERROR(OOM_EINVAL, "%s", err);
            return OOM_EINVAL;
        }
        if (i == 0) { /* oomlab's own decides either way */
            *on = v[0] == '1';
            *source = envs[i];
            break;
        }
        if (v[0] == '1' && !*on) {
            *on = true;
            *source = envs[i];
        }
    }
    return OOM_OK;
}

size_t alloc_conf_divisions(const alloc_conf *c, size_t size)
{
    /* PyTorch: index = log2(size) - log2(1 MiB), floored at 0, capped at 15. (Its 63 - clz(0) wraps for
     * size 0 and picks bucket 15; round_size never asks for 0, so 0 goes to bucket 0 here.) */
    size_t b = 0;
    if (size > 0) {
        unsigned lg = floor_log2(size);
        b = lg > 20 ? lg - 20 : 0;
        if (b > ALLOC_CONF_ROUNDUP_BUCKETS - 1)
            b = ALLOC_CONF_ROUNDUP_BUCKETS - 1;
    }
    return c->roundup_divisions[b];
}

typedef struct outbuf {
    char *p;
    size_t cap, off;
} outbuf;

static void put(outbuf *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void put(outbuf *o, const char *fmt, ...)
{
    if (o->off + 1 >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->p + o->off, o->cap - o->off, fmt, ap);
    va_end(ap);
    if (w < 0)
        return;
    o->off = (size_t)w >= o->cap - o->off ? o->cap - 1 : o->off + (size_t)w;
}

/* Shortest list that parses back to the same buckets: the first run as "MB:div" (it fills the buckets
 * below), middle runs bucket by bucket, the last run as ">:div"; one run is a single value. */
static void put_roundup(outbuf *o, const size_t *div)
{
    const size_t nb = ALLOC_CONF_ROUNDUP_BUCKETS;
    size_t first_end = 0;
    while (first_end + 1 < nb && div[first_end + 1] == div[0])
        first_end++;
    if (first_end == nb - 1) {
        put(o, "%zu", div[0]);
        return;
    }
    size_t last_start = nb - 1;
    while (last_start > first_end + 1 && div[last_start - 1] == div[nb - 1])
        last_start--;
    put(o, "[%zu:%zu", (size_t)1 << first_end, div[0]);
    for (size_t b = first_end + 1; b < last_start; b++)
        put(o, ",%zu:%zu", (size_t)1 << b, div[b]);
    put(o, ",>:%zu]", div[nb - 1]);
}

char *alloc_conf_format(const alloc_conf *c, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return buf;
    outbuf o = {buf, cap, 0};
    buf[0] = '\0';
    if (c->max_split_size == SIZE_MAX)
        put(&o, "max_split_size_mb:unlimited");
    else
        put(&o, "max_split_size_mb:%zu", c->max_split_size / MIB);
    put(&o, ",max_non_split_rounding_mb:%zu", c->max_non_split_rounding / MIB);
    put(&o, ",roundup_power2_divisions:");
    put_roundup(&o, c->roundup_divisions);
    put(&o, ",garbage_collection_threshold:%g", c->gc_threshold);
    put(&o, ",expandable_segments:%s", c->expandable_segments ? "True" : "False");
    put(&o, ",large_segment_size_mb:%zu", c->large_segment_size / MIB);
    put(&o, ",per_process_memory_fraction:%g", c->per_process_memory_fraction);
    return buf;
}
