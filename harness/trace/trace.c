/* trace.c - one pass over a snapshot JSON into per-device event arrays. See trace.h. */
#include "trace/trace.h"

#include <cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fail.h"
#include "core/fileio.h"
#include "core/jsonfile.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define TRACE_MAX_DEPTH 1000 /* cJSON's CJSON_NESTING_LIMIT: deeper documents are errors for both */

/* ---- the scanner: a cursor over the NUL-terminated text; p == NULL after a syntax error ---- */

typedef struct scanner {
    const char *p;   /* the next character; NULL once the text is known not to be JSON */
    const char *end; /* text + len (a NUL is there) */
    const char *bad; /* where the syntax error is */
    const char *why; /* why the last scan_u64 refused its value, for the error line (NULL: accepted) */
    double value;    /* and the value it read, NAN if not a number */
} scanner;

static void fail(scanner *s, const char *at)
{
    if (s->p) {
        s->bad = at;
        s->p = NULL;
    }
}

static void ws(scanner *s)
{
    const char *p = s->p;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    s->p = p;
}

static bool is_hex(char c) { return isxdigit((unsigned char)c) != 0; }

/* The first byte at or after p that is '"', '\\' or NUL (the text's NUL at end stops it). 16 bytes at a time
 * (SSE2, every x86-64) while 16 remain before end, so nothing outside the text is ever read; byte by byte after. */
static inline const char *find_string_end(const char *p, const char *end)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), nul = _mm_setzero_si128();
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                   _mm_cmpeq_epi8(v, nul));
        unsigned m = (unsigned)_mm_movemask_epi8(hit);
        if (m)
            return p + __builtin_ctz(m);
        p += 16;
    }
#else
    (void)end;
#endif
    while (*p != '"' && *p != '\\' && *p != '\0')
        p++;
    return p;
}

static inline uint64_t load8(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t load4(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* a[0..n) == lit[0..n), reading neither past n: whole words, the last one overlapping (gcc left memcmp a call
 * here, a tenth of the parse). With n a constant it is a few loads. */
static inline bool same_bytes(const char *a, const char *lit, size_t n)
{
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            if (load8(a + i) != load8(lit + i))
                return false;
        return load8(a + n - 8) == load8(lit + n - 8);
    }
    if (n >= 4)
        return load4(a) == load4(lit) && load4(a + n - 4) == load4(lit + n - 4);
    for (size_t i = 0; i < n; i++)
        if (a[i] != lit[i])
            return false;
    return true;
}

/* At '"': the string's raw text (between the quotes, escapes as written) in [*a, *b); past the closing quote. */
static void scan_string(scanner *s, const char **a, const char **b)
{
    const char *p = s->p + 1;
    *a = p;
    for (;;) {
        p = find_string_end(p, s->end);
        if (*p == '"')
            break;
        if (*p == '\0' || p >= s->end) {
            fail(s, p);
            return;
        }
        /* an escape: \" \\ \/ \b \f \n \r \t or \uXXXX */
        char c = p[1];
        if (c == 'u') {
            if (!is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5])) {
                fail(s, p);
                return;
            }
            p += 6;
        } else if (c && strchr("\"\\/bfnrt", c)) {
            p += 2;
        } else {
            fail(s, p);
            return;
        }
    }
    *b = p;
    s->p = p + 1;
}

/* An object member's key and its colon: [*a, *b) is the key; s->p is left at the value. false (fail recorded)
 * on a syntax error. */
static bool scan_key(scanner *s, const char **a, const char **b)
{
    if (*s->p != '"') {
        fail(s, s->p);
        return false;
    }
    /* The keys PyTorch writes, matched in place: the literal and then its closing quote. A literal holds no '"',
     * '\\' or NUL, so that is the whole string, found without a scan for its end (a third of the parse). */
    const char *k = s->p + 1;
    size_t left = (size_t)(s->end - k), n = 0;
#define KNOWN(lit) (left > sizeof(lit) - 1 && same_bytes(k, lit, sizeof(lit) - 1) && k[sizeof(lit) - 1] == '"')
#define TRY(lit)                                                                                                   \
    if (!n && KNOWN(lit))                                                                                          \
    n = sizeof(lit) - 1
    switch (*k) {
    case 'a':
        TRY("action");
        TRY("addr");
        break;
    case 's':
        TRY("size");
        TRY("stream");
        break;
    case 't':
        TRY("time_us");
        break;
    case 'f':
        TRY("frames");
        TRY("filename");
        break;
    case 'c':
        TRY("compile_context");
        break;
    case 'u':
        TRY("user_metadata");
        break;
    case 'd':
        TRY("device_free");
        break;
    case 'n':
        TRY("name");
        break;
    case 'l':
        TRY("line");
        break;
    default:
        break;
    }
#undef TRY
#undef KNOWN
    if (n) {
        *a = k;
        *b = k + n;
        s->p = k + n + 1;
    } else {
        scan_string(s, a, b);
        if (!s->p)
            return false;
    }
    ws(s);
    if (*s->p != ':') {
        fail(s, s->p);
        return false;
    }
    s->p++;
    ws(s);
    return true;
}

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? ; *plain: digits only. */
static void scan_number(scanner *s, bool *plain)
{
    const char *p = s->p, *start = p;
    *plain = true;
    if (*p == '-') {
        *plain = false;
        p++;
    }
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9')
            p++;
    } else {
        fail(s, start);
        return;
    }
    if (*p == '.') {
        *plain = false;
        p++;
        if (!(*p >= '0' && *p <= '9')) {
            fail(s, start);
            return;
        }
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        *plain = false;
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9')) {
            fail(s, start);
            return;
        }
        while (*p >= '0' && *p <= '9')
            p++;
    }
    s->p = p;
}

static void skip_value(scanner *s, int depth);

/* At '[' or '{': the whole container. */
static void skip_container(scanner *s, int depth)
{
    bool obj = *s->p == '{';
    char close = obj ? '}' : ']';
    if (depth >= TRACE_MAX_DEPTH) {
        fail(s, s->p);
        return;
    }
    s->p++;
    ws(s);
    if (*s->p == close) {
        s->p++;
        return;
    }
    for (;;) {
        if (obj) {
            if (*s->p != '"') {
                fail(s, s->p);
                return;
            }
            const char *a, *b;
            scan_string(s, &a, &b);
            if (!s->p)
                return;
            ws(s);
            if (*s->p != ':') {
                fail(s, s->p);
                return;
            }
            s->p++;
            ws(s);
        }
        skip_value(s, depth + 1);
        if (!s->p)
            return;
        ws(s);
        if (*s->p == ',') {
            s->p++;
            ws(s);
            continue;
        }
        if (*s->p == close) {
            s->p++;
            return;
        }
        fail(s, s->p);
        return;
    }
}

static void skip_value(scanner *s, int depth)
{
    const char *p = s->p;
    switch (*p) {
    case '{':
    case '[':
        skip_container(s, depth);
        return;
    case '"': {
        const char *a, *b;
        scan_string(s, &a, &b);
        return;
    }
    case 't':
        if (strncmp(p, "true", 4) == 0) {
            s->p = p + 4;
            return;
        }
        break;
    case 'f':
        if (strncmp(p, "false", 5) == 0) {
            s->p = p + 5;
            return;
        }
        break;
    case 'n':
        if (strncmp(p, "null", 4) == 0) {
            s->p = p + 4;
            return;
        }
        break;
    default: {
        bool plain;
        scan_number(s, &plain);
        return;
    }
    }
    fail(s, p);
}

/* A value that must be a whole number of bytes, as cJSON reads it (a double: >= 0, integral, at most 2^53).
 * *ok false when it is anything else (still skipped); s->why then says what it is. */
static uint64_t scan_u64(scanner *s, bool *ok)
{
    const char *a = s->p;
    *ok = false;
    s->why = "is not a number";
    s->value = NAN;
    if (!(*a == '-' || (*a >= '0' && *a <= '9'))) {
        skip_value(s, 1);
        return 0;
    }
    /* the common case in one pass: 1 to 15 digits, not followed by what makes a number fractional or longer */
    const char *p = a;
    uint64_t v = 0;
    if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9' && p - a < 16)
            v = v * 10 + (uint64_t)(*p++ - '0');
    } else if (*p == '0') {
        p++;
    }
    if (p > a && p - a <= 15 && !(*p >= '0' && *p <= '9') && *p != '.' && *p != 'e' && *p != 'E') {
        s->p = p;
        *ok = true;
        return v;
    }
    bool plain;
    scan_number(s, &plain);
    (void)plain;
    if (!s->p)
        return 0;
    size_t len = (size_t)(s->p - a); /* a sign, a fraction, an exponent or 16 digits and more: through strtod */
    char buf[64];
    if (len >= sizeof buf)
        return 0;
    memcpy(buf, a, len);
    buf[len] = '\0';
    double d = strtod(buf, NULL);
    s->value = d;
    s->why = d < 0 ? "is negative"
              : d != floor(d) ? "is not a whole number"
              : d > 9007199254740992.0 ? "is above 2^53 (9007199254740992), where a JSON number is not read exactly"
                                        : NULL;
    if (s->why)
        return 0;
    *ok = true;
    return (uint64_t)d;
}

/* ---- errors ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

#define PICKLE_ERR                                                                                             \
    "%s is a pickle: convert it with scripts/snapshot2json.py first (scripts/snapshot2json.py %s -o OUT.json)"

/* The text is not what the scanner accepts: cJSON's verdict and position make the line, so the messages are the
 * ones a tree parse gives (at: where the scanner stopped, used if cJSON accepts the text). */
static void syntax_error(const char *path, const char *text, size_t len, const char *at, char *err, size_t errcap)
{
    cJSON *root = jsonfile_parse(path, text, len, err, errcap); /* the kind and place of a syntax error */
    if (!root && (ends_with(path, ".pickle") || ends_with(path, ".pkl")))
        errbuf_set(err, errcap, PICKLE_ERR, path, path);
    else if (root && !cJSON_IsObject(root))
        errbuf_set(err, errcap, "%s: not a JSON object but a %s (expected the dict of torch.cuda.memory._snapshot())",
                path, cJSON_IsArray(root) ? "list" : cJSON_IsString(root) ? "string" : "number or literal");
    else if (root)
        jsonfile_error(path, text, len, at, err, errcap);
    cJSON_Delete(root);
}

/* ---- allocator_settings ---- */

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
            errbuf_set(err, errcap, "allocator_settings: %s", perr);
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
        errbuf_set(err, errcap, "allocator_settings: %s", perr);
        return OOM_EINVAL;
    }
    /* roundup_power2_divisions as PyTorch records it, {"1": d0, "2": d1, ..., "32768": d15}: each key names its
     * bucket by the bucket's lower bound in MiB, and is checked as --alloc-conf's list form checks [MB:div] */
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(settings, "roundup_power2_divisions");
    if (rd && !cJSON_IsNull(rd) && !cJSON_IsObject(rd)) {
        errbuf_set(err, errcap, "allocator_settings: roundup_power2_divisions must be a dict {\"MB\": divisions, ...}");
        return OOM_EINVAL;
    }
    for (const cJSON *e = rd ? rd->child : NULL; e; e = e->next) {
        char *value = cJSON_PrintUnformatted(e); /* the value's JSON text: 4, 3.5, 1.8446744073709552e+19, "4" */
        if (!value) {
            errbuf_set(err, errcap, "allocator_settings: out of host memory");
            return OOM_ENOMEM_HOST;
        }
        oom_status st = alloc_conf_set_roundup_bucket(conf, e->string, value, perr, sizeof perr);
        free(value);
        if (st != OOM_OK) {
            errbuf_set(err, errcap, "allocator_settings: %s", perr);
            return st;
        }
    }
    return OOM_OK;
}

/* ---- building the trace ---- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

/* Note user_metadata [a, b) at event i of d when it differs from the text in force. */
static bool note_metadata(trace_file *t, trace_device *d, size_t i, const char *a, const char *b)
{
    size_t len = (size_t)(b - a);
    const char *cur = d->nmarks ? t->strpool + d->marks[d->nmarks - 1].text : "";
    if (d->cur_len == len && (len == 0 || memcmp(cur, a, len) == 0))
        return true;
    d->cur_len = len;
    if (!grow((void **)&t->strpool, &t->strpool_cap, t->strpool_len + len + 1, 1) ||
        !grow((void **)&d->marks, &d->marks_cap, d->nmarks + 1, sizeof *d->marks))
        return false;
    memcpy(t->strpool + t->strpool_len, a, len);
    t->strpool[t->strpool_len + len] = '\0';
    d->marks[d->nmarks++] = (trace_mark){.event = i, .text = t->strpool_len};
    t->strpool_len += len + 1;
    return true;
}

/* Status of a structural problem found while scanning: the message is in err. */
typedef enum scan_rc { SCAN_OK, SCAN_SYNTAX, SCAN_SHAPE, SCAN_NOMEM } scan_rc;

/* The raw text [a, b) is the literal name. */
#define key_is(a, b, name) ((size_t)((b) - (a)) == sizeof(name) - 1 && same_bytes((a), (name), sizeof(name) - 1))

/* The action named by the raw text [a, b); false for an unknown name. */
static bool action_of(const char *a, const char *b, ca_action *out)
{
    static const struct {
        const char *name;
        size_t len;
    } names[CA_ACTION_COUNT] = {
#define N(s) {s, sizeof(s) - 1}
        [CA_ALLOC] = N("alloc"),
        [CA_FREE_REQUESTED] = N("free_requested"),
        [CA_FREE_COMPLETED] = N("free_completed"),
        [CA_SEGMENT_ALLOC] = N("segment_alloc"),
        [CA_SEGMENT_FREE] = N("segment_free"),
        [CA_SEGMENT_MAP] = N("segment_map"),
        [CA_SEGMENT_UNMAP] = N("segment_unmap"),
        [CA_SNAPSHOT] = N("snapshot"),
        [CA_OOM] = N("oom"),
        [CA_EMPTY_CACHE] = N("empty_cache"),
#undef N
    };
    size_t len = (size_t)(b - a);
    for (int i = 0; i < CA_ACTION_COUNT; i++)
        if (names[i].len == len && same_bytes(a, names[i].name, len)) {
            *out = (ca_action)i;
            return true;
        }
    return false;
}

/* At '{' of entry i of device devidx: one event. */
static scan_rc scan_event(scanner *s, trace_file *t, int devidx, size_t i, char *err, size_t errcap)
{
    trace_device *d = &t->dev[devidx];
    if (*s->p != '{') {
        skip_value(s, 3);
        if (!s->p)
            return SCAN_SYNTAX;
        errbuf_set(err, errcap, "cuda:%d event %zu: unknown or missing 'action'", devidx, i);
        return SCAN_SHAPE;
    }
    const char *act_a = NULL, *act_b = NULL;
    bool has_action = false, addr_ok = false, free_ok = false, size_ok = false, stream_ok = true, pool_ok = true;
    uint64_t addr = 0, dfree = 0, size = 0, stream = 0, pool = 0;
    /* why a number field was refused, and its value, for the error line ("is missing" when it never came) */
    const char *addr_why = "is missing", *free_why = "is missing", *size_why = "is missing";
    double addr_v = NAN, free_v = NAN, size_v = NAN;
    s->p++;
    ws(s);
    if (*s->p != '}') {
        for (;;) {
            const char *ka, *kb;
            if (!scan_key(s, &ka, &kb))
                return SCAN_SYNTAX;
            if (key_is(ka, kb, "action")) {
                if (*s->p == '"') {
                    const char *a, *b;
                    scan_string(s, &a, &b);
                    act_a = a;
                    act_b = b;
                    has_action = s->p != NULL;
                } else {
                    skip_value(s, 3);
                }
            } else if (key_is(ka, kb, "addr")) {
                addr = scan_u64(s, &addr_ok);
                addr_why = s->why;
                addr_v = s->value;
            } else if (key_is(ka, kb, "size")) {
                size = scan_u64(s, &size_ok);
                size_why = s->why;
                size_v = s->value;
            } else if (key_is(ka, kb, "device_free")) {
                dfree = scan_u64(s, &free_ok);
                free_why = s->why;
                free_v = s->value;
            } else if (key_is(ka, kb, "stream")) {
                stream = scan_u64(s, &stream_ok);
            } else if (key_is(ka, kb, "pool")) {
                pool = scan_u64(s, &pool_ok);
                pool_ok = pool_ok && pool <= TRACE_MAX_POOLS;
            } else if (key_is(ka, kb, "user_metadata") && *s->p == '"') {
                const char *a, *b;
                scan_string(s, &a, &b);
                if (s->p && !note_metadata(t, d, i, a, b))
                    return SCAN_NOMEM;
            } else {
                skip_value(s, 3);
            }
            if (!s->p)
                return SCAN_SYNTAX;
            ws(s);
            if (*s->p == ',') {
                s->p++;
                ws(s);
                continue;
            }
            if (*s->p == '}')
                break;
            fail(s, s->p);
            return SCAN_SYNTAX;
        }
    }
    s->p++;
    ca_action act;
    if (!has_action || !action_of(act_a, act_b, &act)) {
        errbuf_set(err, errcap, "cuda:%d event %zu: unknown or missing 'action'", devidx, i);
        return SCAN_SHAPE;
    }
    bool oom = act == CA_OOM;
    if (!(oom ? free_ok : addr_ok) || !size_ok) {
        bool a_bad = !(oom ? free_ok : addr_ok);
        const char *key = a_bad ? (oom ? "device_free" : "addr") : "size";
        const char *why = a_bad ? (oom ? free_why : addr_why) : size_why;
        double v = a_bad ? (oom ? free_v : addr_v) : size_v;
        char shown[64] = "";
        if (!isnan(v))
            snprintf(shown, sizeof shown, " %.17g", v);
        errbuf_set(err, errcap, "cuda:%d event %zu (%s): '%s'%s %s", devidx, i, ca_action_str(act), key, shown,
                why ? why : "is not valid");
        return SCAN_SHAPE;
    }
    if (!stream_ok || !pool_ok) {
        if (stream_ok)
            errbuf_set(err, errcap, "cuda:%d event %zu (%s): 'pool' is not a private pool's number (0 to %d)",
                       devidx, i, ca_action_str(act), TRACE_MAX_POOLS);
        else
            errbuf_set(err, errcap, "cuda:%d event %zu (%s): 'stream' is not a whole number (a CUDA stream)", devidx,
                       i, ca_action_str(act));
        return SCAN_SHAPE;
    }
    if (d->nstreams == 0)
        d->streams[d->nstreams++] = 0; /* number 0 is stream 0 */
    size_t sn = 0;
    while (sn < d->nstreams && d->streams[sn] != stream)
        sn++;
    if (sn == d->nstreams) {
        if (sn == TRACE_MAX_STREAMS) {
            errbuf_set(err, errcap, "cuda:%d event %zu: more than %d CUDA streams", devidx, i, TRACE_MAX_STREAMS);
            return SCAN_SHAPE;
        }
        d->streams[d->nstreams++] = stream;
    }
    if (!grow((void **)&d->ev, &d->cap, d->n + 1, sizeof *d->ev))
        return SCAN_NOMEM;
    d->ev[d->n++] = (trace_event){
        .addr = oom ? dfree : addr, .size = size, .action = act, .stream = (int16_t)sn, .pool = (int16_t)pool};
    return SCAN_OK;
}

/* At the value of device_traces. */
static scan_rc scan_traces(scanner *s, trace_file *t, const char *path, char *err, size_t errcap)
{
    if (*s->p != '[') {
        skip_value(s, 1);
        if (!s->p)
            return SCAN_SYNTAX;
        errbuf_set(err, errcap, "%s: not a memory snapshot: no 'device_traces' list", path);
        return SCAN_SHAPE;
    }
    s->p++;
    ws(s);
    if (*s->p == ']') {
        s->p++;
        return SCAN_OK;
    }
    for (;;) {
        size_t idx = t->ndevices;
        size_t cap = idx + 1;
        trace_device *nd = realloc(t->dev, cap * sizeof *nd);
        if (!nd)
            return SCAN_NOMEM;
        t->dev = nd;
        memset(&t->dev[idx], 0, sizeof *t->dev);
        t->ndevices++;
        if (*s->p != '[') {
            skip_value(s, 2);
            if (!s->p)
                return SCAN_SYNTAX;
            errbuf_set(err, errcap, "%s: device_traces[%zu] is not a list", path, idx);
            return SCAN_SHAPE;
        }
        s->p++;
        ws(s);
        if (*s->p != ']') {
            for (size_t i = 0;; i++) {
                scan_rc rc = scan_event(s, t, (int)idx, i, err, errcap);
                if (rc != SCAN_OK)
                    return rc;
                ws(s);
                if (*s->p == ',') {
                    s->p++;
                    ws(s);
                    continue;
                }
                if (*s->p == ']')
                    break;
                fail(s, s->p);
                return SCAN_SYNTAX;
            }
        }
        s->p++;
        ws(s);
        if (*s->p == ',') {
            s->p++;
            ws(s);
            continue;
        }
        if (*s->p == ']') {
            s->p++;
            return SCAN_OK;
        }
        fail(s, s->p);
        return SCAN_SYNTAX;
    }
}

/* The snapshot's segments that belong to a private pool (segment_pool_id other than [0, 0]), numbered in order of
 * first appearance, into t->seg_pools sorted by (device, address). Other segments, and entries of another shape,
 * are passed over: the list is the state at the end, a guide to the trace's pools, not a part of the replay. */
static int cmp_seg_pool(const void *a, const void *b)
{
    const trace_seg_pool *x = a, *y = b;
    if (x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return x->address < y->address ? -1 : x->address > y->address;
}

static scan_rc seg_pools_of(const cJSON *segs, trace_file *t)
{
    const cJSON *sg;
    cJSON_ArrayForEach(sg, segs)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(sg, "segment_pool_id");
        const cJSON *ad = cJSON_GetObjectItemCaseSensitive(sg, "address");
        const cJSON *dv = cJSON_GetObjectItemCaseSensitive(sg, "device");
        if (!cJSON_IsArray(id) || cJSON_GetArraySize(id) != 2 || !cJSON_IsNumber(ad) || ad->valuedouble < 0)
            continue;
        const cJSON *a = cJSON_GetArrayItem(id, 0), *b = cJSON_GetArrayItem(id, 1);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || (a->valuedouble == 0 && b->valuedouble == 0))
            continue;
        int64_t first = (int64_t)a->valuedouble, second = (int64_t)b->valuedouble;
        size_t n = 0;
        while (n < t->npools && !(t->pools[n][0] == first && t->pools[n][1] == second))
            n++;
        if (n == t->npools) {
            if (n == TRACE_MAX_POOLS)
                continue; /* beyond the numbers a trace event holds: its allocations replay in the default pool */
            t->pools[n][0] = first;
            t->pools[n][1] = second;
            t->npools++;
        }
        trace_seg_pool *v = realloc(t->seg_pools, (t->nseg_pools + 1) * sizeof *v);
        if (!v)
            return SCAN_NOMEM;
        t->seg_pools = v;
        v[t->nseg_pools++] = (trace_seg_pool){.device = cJSON_IsNumber(dv) && dv->valuedouble > 0
                                                            ? (uint64_t)dv->valuedouble
                                                            : 0,
                                              .address = (uint64_t)ad->valuedouble,
                                              .pool = (int)n + 1};
    }
    if (t->nseg_pools > 1)
        qsort(t->seg_pools, t->nseg_pools, sizeof *t->seg_pools, cmp_seg_pool);
    return SCAN_OK;
}

/* Each alloc without a pool of its own takes the pool of the segment that holds its address when it is made: the
 * recorded segment_alloc entries give the segments, the final state (seg_pools) the pools of those still there at
 * the end (the last segment_alloc at an address, with no segment_free after it); a segment freed before the end is
 * taken as the default pool's (an address empty_cache() gave back may come back in another pool). */
typedef struct live_seg {
    uint64_t addr, size;
    int pool;
} live_seg;

static int pool_of_segment(const trace_file *t, size_t dev, uint64_t addr)
{
    size_t lo = 0, hi = t->nseg_pools;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const trace_seg_pool *m = &t->seg_pools[mid];
        if (m->device < dev || (m->device == dev && m->address < addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->nseg_pools && t->seg_pools[lo].device == dev && t->seg_pools[lo].address == addr
               ? t->seg_pools[lo].pool
               : 0;
}

/* Insert addr into the sorted set v[0..*n) (false when out of host memory). */
static bool addr_set_add(uint64_t **v, size_t *n, size_t *cap, uint64_t addr)
{
    size_t lo = 0, hi = *n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((*v)[mid] < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < *n && (*v)[lo] == addr)
        return true;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        uint64_t *nv = realloc(*v, c * sizeof *nv);
        if (!nv)
            return false;
        *v = nv;
        *cap = c;
    }
    memmove(&(*v)[lo + 1], &(*v)[lo], (*n - lo) * sizeof **v);
    (*v)[lo] = addr;
    (*n)++;
    return true;
}

static bool addr_set_has(const uint64_t *v, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == addr;
}

static bool assign_pools(trace_file *t)
{
    for (size_t d = 0; d < t->ndevices; d++) {
        trace_device *td = &t->dev[d];
        /* backwards: a segment_alloc whose address is freed later is gone by the end (pool -1 marks it) */
        uint64_t *freed = NULL;
        size_t nfreed = 0, capfreed = 0;
        for (size_t i = td->n; i-- > 0;) {
            trace_event *e = &td->ev[i];
            if (e->action == CA_SEGMENT_FREE && !addr_set_add(&freed, &nfreed, &capfreed, e->addr)) {
                free(freed);
                return false;
            }
            if (e->action == CA_SEGMENT_ALLOC)
                e->pool = addr_set_has(freed, nfreed, e->addr) ? -1 : 0;
        }
        free(freed);
        live_seg *segs = NULL; /* sorted by address */
        size_t n = 0, cap = 0;
        for (size_t i = 0; i < td->n; i++) {
            trace_event *e = &td->ev[i];
            if (e->action == CA_SEGMENT_ALLOC || e->action == CA_SEGMENT_FREE) {
                size_t lo = 0, hi = n;
                while (lo < hi) {
                    size_t mid = lo + (hi - lo) / 2;
                    if (segs[mid].addr < e->addr)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (e->action == CA_SEGMENT_FREE) {
                    if (lo < n && segs[lo].addr == e->addr) {
                        memmove(&segs[lo], &segs[lo + 1], (n - lo - 1) * sizeof *segs);
                        n--;
                    }
                    continue;
                }
                int pool = e->pool < 0 ? 0 : pool_of_segment(t, d, e->addr);
                e->pool = 0;
                if (pool == 0)
                    continue; /* the default pool's: an address outside every listed segment is the default */
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    live_seg *v = realloc(segs, cap * sizeof *v);
                    if (!v) {
                        free(segs);
                        return false;
                    }
                    segs = v;
                }
                memmove(&segs[lo + 1], &segs[lo], (n - lo) * sizeof *segs);
                segs[lo] = (live_seg){.addr = e->addr, .size = e->size, .pool = pool};
                n++;
            } else if (e->action == CA_ALLOC && e->pool == 0 && n > 0) {
                size_t lo = 0, hi = n; /* the last segment starting at or below addr */
                while (lo < hi) {
                    size_t mid = lo + (hi - lo) / 2;
                    if (segs[mid].addr <= e->addr)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (lo > 0 && e->addr < segs[lo - 1].addr + segs[lo - 1].size)
                    e->pool = (int16_t)segs[lo - 1].pool;
            }
        }
        free(segs);
    }
    return true;
}

/* A small top-level value [a, b) parsed with cJSON (NULL when out of memory: it was already checked). */
static cJSON *parse_small(const char *a, const char *b) { return cJSON_ParseWithLength(a, (size_t)(b - a)); }

static scan_rc scan_top(scanner *s, trace_file *t, const char *path, char *err, size_t errcap)
{
    ws(s);
    if (*s->p != '{') {
        fail(s, s->p);
        return SCAN_SYNTAX;
    }
    bool has_traces = false;
    s->p++;
    ws(s);
    if (*s->p != '}') {
        for (;;) {
            const char *ka, *kb;
            if (!scan_key(s, &ka, &kb))
                return SCAN_SYNTAX;
            const char *va = s->p;
            if (key_is(ka, kb, "device_traces") && !has_traces) {
                has_traces = true;
                scan_rc rc = scan_traces(s, t, path, err, errcap);
                if (rc != SCAN_OK)
                    return rc;
            } else {
                skip_value(s, 1);
                if (!s->p)
                    return SCAN_SYNTAX;
                if (key_is(ka, kb, "allocator_settings")) {
                    cJSON *v = parse_small(va, s->p);
                    if (!v)
                        return SCAN_NOMEM;
                    if (conf_from_settings(v, &t->recorded, t->recorded_error, sizeof t->recorded_error) !=
                        OOM_OK) {
                        alloc_conf_default(&t->recorded);
                        for (char *c = t->recorded_error; *c; c++) /* a key's newline: still one line */
                            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                                *c = ' ';
                    }
                    cJSON_Delete(v);
                } else if (key_is(ka, kb, "segments") && !t->npools) {
                    cJSON *v = parse_small(va, s->p);
                    if (!v)
                        return SCAN_NOMEM;
                    scan_rc prc = seg_pools_of(v, t);
                    cJSON_Delete(v);
                    if (prc != SCAN_OK)
                        return prc;
                } else if (key_is(ka, kb, "oomlab_capture") && !t->capture) {
                    /* what oomlab predict's capture says about its trace (analysis/predict.h reads it) */
                    if (!(t->capture = parse_small(va, s->p)))
                        return SCAN_NOMEM;
                } else if (key_is(ka, kb, "budget")) {
                    bool ok = false;
                    scanner sub = {.p = va, .end = s->p};
                    uint64_t v = *va == 'n' ? 0 : scan_u64(&sub, &ok);
                    t->budget = *va == 'n' ? TRACE_BUDGET_ABSENT
                                : ok && v > 0 && v <= SIZE_MAX ? TRACE_BUDGET_BYTES
                                                               : TRACE_BUDGET_BAD;
                    t->budget_bytes = t->budget == TRACE_BUDGET_BYTES ? (size_t)v : 0;
                }
            }
            ws(s);
            if (*s->p == ',') {
                s->p++;
                ws(s);
                continue;
            }
            if (*s->p == '}')
                break;
            fail(s, s->p);
            return SCAN_SYNTAX;
        }
    }
    s->p++;
    ws(s);
    if (s->p != s->end) { /* text after the object */
        fail(s, s->p);
        return SCAN_SYNTAX;
    }
    if (!has_traces) {
        errbuf_set(err, errcap, "%s: not a memory snapshot: no 'device_traces' list", path);
        return SCAN_SHAPE;
    }
    return SCAN_OK;
}

oom_status trace_load(const char *path, trace_file *t, char *err, size_t errcap)
{
    return trace_load_max(path, 0, t, err, errcap);
}

oom_status trace_read(const char *path, const fileio_limit *lim, trace_text *in, char *err, size_t errcap)
{
    memset(in, 0, sizeof *in);
    DIR *dir = opendir(path); /* O_DIRECTORY: a FIFO is not opened by this */
    if (dir) {
        closedir(dir);
        errbuf_set(err, errcap, "%s is a directory, not a snapshot JSON file", path);
        return OOM_EINVAL;
    }
    oom_status st = OOM_OK;
    in->text = fileio_load_limited(path, lim, &in->len, &in->maplen, &st); /* one open: a FIFO is read once */
    if (!in->text) {
        errbuf_set(err, errcap, "%s", oom_error_detail());
        return st == OOM_EINVAL ? OOM_EINVAL : OOM_EIO;
    }
    return OOM_OK;
}

void trace_text_free(trace_text *in)
{
    if (in->maplen)
        fileio_unmap_text(in->text, in->maplen);
    else
        free(in->text);
    memset(in, 0, sizeof *in);
}

oom_status trace_load_max(const char *path, size_t max_input, trace_file *t, char *err, size_t errcap)
{
    memset(t, 0, sizeof *t);
    alloc_conf_default(&t->recorded);
    fileio_limit lim = max_input ? fileio_limit_of(max_input, "--max-input") : fileio_default_limit();
    trace_text in;
    oom_status rc = trace_read(path, &lim, &in, err, errcap);
    if (rc == OOM_OK)
        rc = trace_parse(path, in.text, in.len, t, err, errcap);
    trace_text_free(&in);
    return rc;
}

oom_status trace_parse(const char *path, const char *text, size_t len, trace_file *t, char *err, size_t errcap)
{
    memset(t, 0, sizeof *t);
    alloc_conf_default(&t->recorded);
    oom_status rc = OOM_EINVAL;
    if (len == 0) {
        errbuf_set(err, errcap, "%s is empty (expected the JSON of torch.cuda.memory._snapshot())", path);
    } else if ((unsigned char)text[0] == 0x80) { /* pickle protocol 2 and later start with PROTO */
        errbuf_set(err, errcap, PICKLE_ERR, path, path);
    } else if (strlen(text) != len) { /* a NUL inside: not JSON text */
        syntax_error(path, text, len, text + strlen(text), err, errcap);
    } else {
        scanner s = {.p = text, .end = text + len};
        scan_rc sr = scan_top(&s, t, path, err, errcap);
        if (sr == SCAN_OK && t->nseg_pools && !assign_pools(t))
            sr = SCAN_NOMEM;
        if (sr == SCAN_OK) {
            rc = OOM_OK;
        } else if (sr == SCAN_NOMEM) {
            errbuf_set(err, errcap, "%s: out of host memory", path);
            rc = OOM_ENOMEM_HOST;
        } else if (sr == SCAN_SYNTAX) {
            syntax_error(path, text, len, s.bad, err, errcap);
        } else {
            /* a shape error in text that may also be invalid further on: syntax first, as a tree parse finds */
            cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, NULL, true);
            if (!root)
                syntax_error(path, text, len, NULL, err, errcap);
            cJSON_Delete(root);
        }
    }
    return rc;
}

void trace_free(trace_file *t)
{
    for (size_t i = 0; i < t->ndevices; i++) {
        free(t->dev[i].ev);
        free(t->dev[i].marks);
    }
    free(t->dev);
    free(t->seg_pools);
    free(t->strpool);
    cJSON_Delete(t->capture);
    memset(t, 0, sizeof *t);
}

void trace_devices_with_events(const trace_file *t, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < t->ndevices; i++)
        if (t->dev[i].n > 0 && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%scuda:%zu", n ? ", " : "", i);
}

const char *trace_metadata_at(const trace_file *t, size_t d, size_t i)
{
    const trace_device *dv = &t->dev[d];
    size_t lo = 0, hi = dv->nmarks; /* the last mark at or before i */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (dv->marks[mid].event <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? t->strpool + dv->marks[lo - 1].text : "";
}

bool trace_has_segment_events(const trace_file *t, size_t d)
{
    if (d >= t->ndevices)
        return false;
    for (size_t i = 0; i < t->dev[d].n; i++) {
        ca_action a = t->dev[d].ev[i].action;
        if (a == CA_SEGMENT_ALLOC || a == CA_SEGMENT_FREE || a == CA_SEGMENT_MAP || a == CA_SEGMENT_UNMAP)
            return true;
    }
    return false;
}

bool trace_capture_gpu(const trace_file *t, size_t *total, size_t *context)
{
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(t->capture, "gpu");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(gpu, "total_memory");
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(gpu, "context_bytes");
    if (!cJSON_IsNumber(tm) || !cJSON_IsNumber(cb))
        return false;
    double a = tm->valuedouble, b = cb->valuedouble;
    if (!(a > 0 && a <= 9007199254740992.0 && a == (double)(size_t)a && b >= 0 && b < a && b == (double)(size_t)b))
        return false;
    *total = (size_t)a;
    *context = (size_t)b;
    return true;
}
