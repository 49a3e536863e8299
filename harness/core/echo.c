/* echo.c - user input cut for an error line. See echo.h. */
#include "core/echo.h"

#include <stdio.h>
#include <string.h>

const char *echo_cut(const char *s, size_t n, char buf[ECHO_BUF])
{
    if (n <= ECHO_MAX) {
        snprintf(buf, ECHO_BUF, "%.*s", (int)n, s);
        return buf;
    }
    size_t keep = ECHO_MAX;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) /* s[keep] continues a character: cut before it */
        keep--;
    snprintf(buf, ECHO_BUF, "%.*s\xE2\x80\xA6(%zu bytes)" /* U+2026, the ellipsis */, (int)keep, s, n);
    return buf;
}

const char *echo_str(const char *s, char buf[ECHO_BUF])
{
    return echo_cut(s, strlen(s), buf);
}
