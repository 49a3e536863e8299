/* trace.c - one pass over a snapshot JSON into per-device event arrays. See trace.h. */
#include "alloc/trace.h"

#include <cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"

#define TRACE_MAX_DEPTH 1000 /* cJSON's CJSON_NESTING_LIMIT: deeper documents are errors for both */

static void set_err(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* ---- the scanner: a cursor over the NUL-terminated text; p == NULL after a syntax error ---- */

typedef struct scanner {
    const char *p;   /* the next character; NULL once the text is known not to be JSON */
    const char *end; /* text + len (a NUL is there) */
    const char *bad; /* where the syntax error is */
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

/* At '"': the string's raw text (between the quotes, escapes as written) in [*a, *b); past the closing quote. */
static void scan_string(scanner *s, const char **a, const char **b)
{
    const char *p = s->p + 1;
    *a = p;
    for (;;) {
        while (*p != '"' && *p != '\\' && *p != '\0')
            p++;
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
 * *ok false when it is anything else (still skipped). */
static uint64_t scan_u64(scanner *s, bool *ok)
{
    const char *a = s->p;
    *ok = false;
    if (!(*a == '-' || (*a >= '0' && *a <= '9'))) {
        skip_value(s, 1);
        return 0;
    }
    bool plain;
    scan_number(s, &plain);
    if (!s->p)
        return 0;
    size_t len = (size_t)(s->p - a);
    if (plain && len <= 15) {
        uint64_t v = 0;
        for (size_t i = 0; i < len; i++)
            v = v * 10 + (uint64_t)(a[i] - '0');
        *ok = true;
        return v;
    }
    char buf[64];
    if (len >= sizeof buf)
        return 0;
    memcpy(buf, a, len);
    buf[len] = '\0';
    double d = strtod(buf, NULL);
    if (d < 0 || d != floor(d) || d > 9007199254740992.0)
        return 0;
    *ok = true;
    return (uint64_t)d;
}

/* ---- errors ---- */

/* One line for a file that does not parse: where it ends early (truncated), or where the bad text is. */
static void json_error(const char *path, const char *text, size_t len, const char *at, char *err, size_t errcap)
{
    size_t end = len; /* the text without trailing whitespace */
    while (end > 0 && strchr(" \t\r\n", text[end - 1]))
        end--;
    /* open brackets and an open string at the end: is the document unfinished? */
    size_t depth = 0, last_quote = 0, token = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < end; i++) {
        char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            last_quote = i;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        }
    }
    /* the start of the last token: cJSON reports an unfinished string at its opening quote, a cut number or
     * literal at its first character, and a missing value after its last ',', ':' or bracket */
    token = end > 0 ? end - 1 : 0;
    while (token > 0 && (isalnum((unsigned char)text[token - 1]) || text[token - 1] == '.' ||
                         text[token - 1] == '-' || text[token - 1] == '+'))
        token--;
    size_t pos = at && at >= text && at <= text + len ? (size_t)(at - text) : end;
    bool truncated = (in_string && pos >= last_quote) || (!in_string && depth > 0 && pos >= token);
    /* a truncated file ends on the line of its last byte (a final newline ends that line, it starts none) */
    size_t line = 1, col = 1, upto = truncated ? len - (text[len - 1] == '\n') : pos;
    for (size_t i = 0; i < upto; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    if (truncated)
        set_err(err, errcap, "%s is truncated: the JSON ends at byte %zu (line %zu) before it is complete", path,
                len, line);
    else
        set_err(err, errcap, "%s: not valid JSON at byte %zu (line %zu, column %zu)", path, pos, line, col);
}

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
    const char *cat = NULL;
    /* len + 1 takes in fileio_read_all's NUL, so that text after the value is an error */
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &cat, true);
    if (!root && (ends_with(path, ".pickle") || ends_with(path, ".pkl")))
        set_err(err, errcap, PICKLE_ERR, path, path);
    else if (!root)
        json_error(path, text, len, cat, err, errcap);
    else if (!cJSON_IsObject(root))
        set_err(err, errcap, "%s: not a JSON object (expected the dict of torch.cuda.memory._snapshot())", path);
    else
        json_error(path, text, len, at, err, errcap);
    cJSON_Delete(root);
}

/* ---- allocator_settings ---- */

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
    if (d->cur_len == len && memcmp(cur, a, len) == 0)
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

/* The raw text [a, b) is the literal name (a constant-length compare the compiler inlines). */
#define key_is(a, b, name) ((size_t)((b) - (a)) == sizeof(name) - 1 && memcmp((a), (name), sizeof(name) - 1) == 0)

/* The action named by the raw text [a, b); false for an unknown name. */
static bool action_of(const char *a, const char *b, ca_action *out)
{
    static const struct {
        const char *name;
        size_t len;
    } names[] = {
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
#undef N
    };
    size_t len = (size_t)(b - a);
    for (int i = 0; i < CA_ACTION_COUNT; i++)
        if (names[i].len == len && memcmp(a, names[i].name, len) == 0) {
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
        set_err(err, errcap, "cuda:%d event %zu: unknown or missing 'action'", devidx, i);
        return SCAN_SHAPE;
    }
    const char *act_a = NULL, *act_b = NULL;
    bool has_action = false, addr_ok = false, free_ok = false, size_ok = false;
    uint64_t addr = 0, dfree = 0, size = 0;
    s->p++;
    ws(s);
    if (*s->p != '}') {
        for (;;) {
            if (*s->p != '"') {
                fail(s, s->p);
                return SCAN_SYNTAX;
            }
            const char *ka, *kb;
            scan_string(s, &ka, &kb);
            if (!s->p)
                return SCAN_SYNTAX;
            ws(s);
            if (*s->p != ':') {
                fail(s, s->p);
                return SCAN_SYNTAX;
            }
            s->p++;
            ws(s);
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
            } else if (key_is(ka, kb, "size")) {
                size = scan_u64(s, &size_ok);
            } else if (key_is(ka, kb, "device_free")) {
                dfree = scan_u64(s, &free_ok);
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
        set_err(err, errcap, "cuda:%d event %zu: unknown or missing 'action'", devidx, i);
        return SCAN_SHAPE;
    }
    bool oom = act == CA_OOM;
    if (!(oom ? free_ok : addr_ok) || !size_ok) {
        set_err(err, errcap, "cuda:%d event %zu (%s): missing or invalid '%s' or 'size'", devidx, i,
                ca_action_str(act), oom ? "device_free" : "addr");
        return SCAN_SHAPE;
    }
    if (!grow((void **)&d->ev, &d->cap, d->n + 1, sizeof *d->ev))
        return SCAN_NOMEM;
    d->ev[d->n++] = (trace_event){.addr = oom ? dfree : addr, .size = size, .action = act};
    return SCAN_OK;
}

/* At the value of device_traces. */
static scan_rc scan_traces(scanner *s, trace_file *t, const char *path, char *err, size_t errcap)
{
    if (*s->p != '[') {
        skip_value(s, 1);
        if (!s->p)
            return SCAN_SYNTAX;
        set_err(err, errcap, "%s: not a memory snapshot: no 'device_traces' list", path);
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
            set_err(err, errcap, "%s: device_traces[%zu] is not a list", path, idx);
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
            if (*s->p != '"') {
                fail(s, s->p);
                return SCAN_SYNTAX;
            }
            const char *ka, *kb;
            scan_string(s, &ka, &kb);
            if (!s->p)
                return SCAN_SYNTAX;
            ws(s);
            if (*s->p != ':') {
                fail(s, s->p);
                return SCAN_SYNTAX;
            }
            s->p++;
            ws(s);
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
                    if (conf_from_settings(v, &t->recorded, t->recorded_error, sizeof t->recorded_error) != OOM_OK)
                        alloc_conf_default(&t->recorded);
                    cJSON_Delete(v);
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
        set_err(err, errcap, "%s: not a memory snapshot: no 'device_traces' list", path);
        return SCAN_SHAPE;
    }
    return SCAN_OK;
}

oom_status trace_load(const char *path, trace_file *t, char *err, size_t errcap)
{
    memset(t, 0, sizeof *t);
    alloc_conf_default(&t->recorded);
    DIR *dir = opendir(path);
    if (dir) {
        closedir(dir);
        set_err(err, errcap, "%s is a directory, not a snapshot JSON file", path);
        return OOM_EINVAL;
    }
    size_t len = 0, maplen = 0;
    char *text = fileio_map_text(path, &len, &maplen);
    if (!text)
        text = fileio_read_all(path, &len); /* empty, unreadable, or not mappable */
    if (!text) {
        set_err(err, errcap, "%s", oom_error_detail());
        return OOM_EIO;
    }
    oom_status rc = OOM_EINVAL;
    if (len == 0) {
        set_err(err, errcap, "%s is empty (expected the JSON of torch.cuda.memory._snapshot())", path);
    } else if ((unsigned char)text[0] == 0x80) { /* pickle protocol 2 and later start with PROTO */
        set_err(err, errcap, PICKLE_ERR, path, path);
    } else if (strlen(text) != len) { /* a NUL inside: not JSON text */
        syntax_error(path, text, len, text + strlen(text), err, errcap);
    } else {
        scanner s = {.p = text, .end = text + len};
        scan_rc sr = scan_top(&s, t, path, err, errcap);
        if (sr == SCAN_OK) {
            rc = OOM_OK;
        } else if (sr == SCAN_NOMEM) {
            set_err(err, errcap, "%s: out of host memory", path);
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
    if (maplen)
        fileio_unmap_text(text, maplen);
    else
        free(text);
    return rc;
}

void trace_free(trace_file *t)
{
    for (size_t i = 0; i < t->ndevices; i++) {
        free(t->dev[i].ev);
        free(t->dev[i].marks);
    }
    free(t->dev);
    free(t->strpool);
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
