/* strbuf.h - a growable text buffer for documents written in pieces (JUnit XML, the history CSV).
 *
 * Invariant: s is NULL or holds n bytes of text and a NUL within cap; once oom is set (a failed allocation or a
 * format error) further writes do nothing, and the writer checks oom once at the end.
 */
#ifndef OOMLAB_STRBUF_H
#define OOMLAB_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"

OOM_BEGIN_DECLS

typedef struct strbuf {
    char *s;
    size_t n, cap;
    bool oom;
} strbuf;

/* Append printf's output, growing the buffer. Zero-initialise a strbuf before the first call; free(b->s) after. */
void strbuf_printf(strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

OOM_END_DECLS

#endif
