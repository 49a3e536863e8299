/* strbuf.c - a growable text buffer. See strbuf.h. */
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void strbuf_printf(strbuf *b, const char *fmt, ...)
{
    while (!b->oom) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->oom = true;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
}
