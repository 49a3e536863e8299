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
