/* echo.c - user input cut for an error line. See echo.h. */
#include "core/echo.h"

#include <stdio.h>
#include <string.h>

/* A control character (a newline, say) would break the one line: shown as a space. */
char *echo_one_line(char *buf)
{
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    return buf;
}

const char *echo_cut(const char *s, size_t n, char buf[ECHO_BUF])
{
    if (n <= ECHO_MAX) {
        snprintf(buf, ECHO_BUF, "%.*s", (int)n, s);
        return echo_one_line(buf);
    }
    size_t keep = ECHO_MAX;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) /* s[keep] continues a character: cut before it */
        keep--;
    snprintf(buf, ECHO_BUF, "%.*s\xE2\x80\xA6(%zu bytes)" /* U+2026, the ellipsis */, (int)keep, s, n);
    return echo_one_line(buf);
}

const char *echo_str(const char *s, char buf[ECHO_BUF])
{
    return echo_cut(s, strlen(s), buf);
}
