/* jsonfile.c - JSON parsing with a syntax error that says where and what. See jsonfile.h. */
#include "core/jsonfile.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* Line and column (from 1) of byte pos. */
static void line_col(const char *text, size_t pos, size_t *line, size_t *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

/* One line for a text that does not parse: where it ends early (truncated), nests too deep, holds a NaN or
 * Infinity, or where the bad text is. at is cJSON's error position. */
void jsonfile_error(const char *name, const char *text, size_t len, const char *at, char *err, size_t errcap)
{
    size_t end = len; /* the text without trailing whitespace */
    while (end > 0 && strchr(" \t\r\n", text[end - 1]))
        end--;
    size_t pos = at && at >= text && at <= text + len ? (size_t)(at - text) : end;
    /* open brackets and an open string: at the end (is the document unfinished?) and at pos (too deep?) */
    size_t depth = 0, depth_at_pos = 0, last_quote = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < end; i++) {
        if (i == pos)
            depth_at_pos = depth;
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
    size_t token = end > 0 ? end - 1 : 0;
    while (token > 0 && (isalnum((unsigned char)text[token - 1]) || text[token - 1] == '.' ||
                         text[token - 1] == '-' || text[token - 1] == '+'))
        token--;
    bool truncated = (in_string && pos >= last_quote) || (!in_string && depth > 0 && pos >= token);
    size_t line, col;
    if (truncated) { /* a truncated file ends on the line of its last byte (a final newline ends it, starts none) */
        line_col(text, len - (text[len - 1] == '\n'), &line, &col);
        snprintf(err, errcap, "%s is truncated: the JSON ends at byte %zu (line %zu) before it is complete", name, len,
                 line);
        return;
    }
    line_col(text, pos, &line, &col);
    bool opens = pos < len && (text[pos] == '[' || text[pos] == '{');
    const char *lit = text + pos;
    if (lit[0] == '-' || lit[0] == '+')
        lit++;
    if (opens && depth_at_pos >= CJSON_NESTING_LIMIT)
        snprintf(err, errcap, "%s: JSON nested deeper than %d levels at byte %zu (line %zu, column %zu)", name,
                 CJSON_NESTING_LIMIT, pos, line, col);
    else if (strncmp(lit, "NaN", 3) == 0 || strncmp(lit, "Infinity", 8) == 0)
        snprintf(err, errcap,
                 "%s: %s is not JSON, at byte %zu (line %zu, column %zu) (Python's json.dump writes it for a float "
                 "nan or inf)",
                 name, lit[0] == 'N' ? "NaN" : "Infinity", pos, line, col);
    else
        snprintf(err, errcap, "%s: not valid JSON at byte %zu (line %zu, column %zu)", name, pos, line, col);
}

cJSON *jsonfile_parse(const char *name, const char *text, size_t len, char *err, size_t errcap)
{
    if (len == 0) {
        snprintf(err, errcap, "%s is empty", name);
        return NULL;
    }
    const char *at = NULL;
    /* len + 1 takes in the NUL, so that text after the value is an error */
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &at, true);
    if (!root)
        jsonfile_error(name, text, len, at, err, errcap);
    return root;
}

cJSON *jsonfile_read(const char *path, const fileio_limit *lim, char *err, size_t errcap)
{
    size_t len = 0;
    char *text = fileio_read_limited(path, lim, &len, NULL);
    if (!text) {
        snprintf(err, errcap, "%s", oom_error_detail());
        return NULL;
    }
    cJSON *root = jsonfile_parse(path, text, len, err, errcap);
    free(text);
    return root;
}

/* The length of the UTF-8 character at s (at most n bytes), 0 when it is not one: overlong forms, surrogates
 * and code points above U+10FFFF are not (RFC 3629). */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    unsigned cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

#define TWO_POW_53 9007199254740992.0

bool jsonfile_check_values(const char *name, const char *text, size_t len, char *err, size_t errcap)
{
    const unsigned char *t = (const unsigned char *)text;
    const char *why = NULL;
    size_t i = 0, at = 0;
    while (i < len && !why) {
        if (t[i] == '"') { /* a string (the text parsed, so it is closed) */
            for (i++; i < len && t[i] != '"';) {
                if (t[i] == '\\') {
                    if (t[i + 1] == 'u' && strncmp(text + i + 2, "0000", 4) == 0) {
                        at = i;
                        why = "a string holds a NUL (\\u0000), which would cut it short";
                        break;
                    }
                    i += t[i + 1] == 'u' ? 6 : 2;
                    continue;
                }
                size_t n = utf8_char(t + i, len - i);
                if (n == 0) {
                    at = i;
                    why = "a string is not valid UTF-8";
                    break;
                }
                i += n;
            }
            i++;
        } else if (t[i] == '-' || (t[i] >= '0' && t[i] <= '9')) {
            size_t start = i, digits = 0;
            bool plain = true;
            for (; i < len && strchr("-+.eE0123456789", t[i]); i++) {
                plain = plain && (t[i] == '-' || (t[i] >= '0' && t[i] <= '9'));
                digits += t[i] >= '0' && t[i] <= '9';
            }
            const char *d = text + start + (t[start] == '-');
            double v = strtod(text + start, NULL); /* valid JSON: the number ends where strtod stops */
            bool big = plain ? digits > 16 || (digits == 16 && strncmp(d, "9007199254740992", 16) > 0)
                             : !(fabs(v) < TWO_POW_53);
            if (big) {
                at = start;
                why = !plain && isinf(v) ? "a number is not finite (it overflows a double)"
                                         : "a number is above 2^53 (9007199254740992), where a JSON number is not "
                                           "read exactly";
            }
        } else {
            i++;
        }
    }
    if (!why)
        return true;
    size_t line, col;
    line_col(text, at, &line, &col);
    snprintf(err, errcap, "%s: %s, at byte %zu (line %zu, column %zu)", name, why, at, line, col);
    return false;
}
