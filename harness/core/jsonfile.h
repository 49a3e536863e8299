/* jsonfile.h - a JSON document parsed with one line that names why it does not parse.
 *
 * Every JSON file oomlab reads from a user (a snapshot for replay, a results file for plot) goes through
 * jsonfile_parse, so a syntax error always says where it is (byte offset, line, column) and which kind it is.
 */
#ifndef OOMLAB_JSONFILE_H
#define OOMLAB_JSONFILE_H

#include <cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/fileio.h"

OOM_BEGIN_DECLS

/* Parse text[0..len) (with a NUL at text[len], as fileio_read_all gives it) as one JSON value with nothing but
 * whitespace after it. On a syntax error NULL, and one line in err that names the file (name) and the kind:
 *   "NAME is truncated: the JSON ends at byte N (line L) before it is complete"
 *   "NAME: JSON nested deeper than 1000 levels at byte N (line L, column C)"  (cJSON's CJSON_NESTING_LIMIT)
 *   "NAME: NaN is not JSON, at byte N (line L, column C) (...)"   (NaN, Infinity, -Infinity: Python writes them)
 *   "NAME: not valid JSON at byte N (line L, column C)"
 * (N counts from 0, lines and columns from 1). An empty text is "NAME is empty". */
cJSON *jsonfile_parse(const char *name, const char *text, size_t len, char *err, size_t errcap);

/* The line jsonfile_parse writes for text that fails at byte at (a parser's error position; NULL: the end). */
void jsonfile_error(const char *name, const char *text, size_t len, const char *at, char *err, size_t errcap);

/* Check the values of a text jsonfile_parse accepted, as a reader of data that must arrive exactly needs them:
 * every string valid UTF-8 with no NUL (\u0000 would cut the name cJSON gives back), every number finite and
 * at most 2^53 in magnitude (above it a JSON number is not read exactly: 9007199254740993 would become
 * 9007199254740992). false with one line in err naming name, the problem and where (byte, line, column). */
bool jsonfile_check_values(const char *name, const char *text, size_t len, char *err, size_t errcap);

/* Read path within lim (fileio_read_limited) and parse it (jsonfile_parse). NULL with one line in err: the read's
 * error (cannot open, larger than the bound) or the syntax error. */
cJSON *jsonfile_read(const char *path, const fileio_limit *lim, char *err, size_t errcap);

/* A member of an object by type: its number (NAN when absent or not a number), its string ("" likewise), its
 * array (NULL likewise). For readers of oomlab's own documents, which check what they need themselves. */
static inline double json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static inline const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static inline const cJSON *json_arr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsArray(v) ? v : NULL;
}

OOM_END_DECLS

#endif
