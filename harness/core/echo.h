/* echo.h - user input quoted in an error message, cut to a readable length.
 *
 * Every error line that repeats what the user typed or wrote (an argument, a token of a config string, a file
 * name, a JSON key) shows it through echo_cut, so one line stays one readable line whatever the input's length.
 */
#ifndef OOMLAB_ECHO_H
#define OOMLAB_ECHO_H

#include <stddef.h>

#include "core/compat.h"

OOM_BEGIN_DECLS

#define ECHO_MAX 60 /* bytes of the input shown */
#define ECHO_BUF 96 /* room for ECHO_MAX bytes, "…(N bytes)" and the NUL */

/* s[0..n) as an error line shows it, in buf (ECHO_BUF bytes): whole when n <= ECHO_MAX, else its first ECHO_MAX
 * bytes (backed off to a UTF-8 character boundary) and "…(N bytes)", N being n. NUL bytes in s end the text
 * shown; control characters (a newline) are shown as spaces, so the line stays one. Returns buf. */
const char *echo_cut(const char *s, size_t n, char buf[ECHO_BUF]);

/* echo_cut of a NUL-terminated string. */
const char *echo_str(const char *s, char buf[ECHO_BUF]);

/* s with its control characters (a newline, a carriage return) replaced by spaces, in place: an error line built
 * from input (a path, a name inside a file) stays one line. Returns s. */
char *echo_one_line(char *s);

OOM_END_DECLS

#endif
