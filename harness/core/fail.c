/* fail.c - the caller's error line, and bookkeeping memory or abort. See fail.h. */
#include "core/fail.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void put(char *err, size_t cap, const char *fmt, va_list ap)
{
    if (cap)
        vsnprintf(err, cap, fmt, ap);
}

void errbuf_set(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put(err, cap, fmt, ap);
    va_end(ap);
}

oom_status errbuf_fail(char *err, size_t cap, oom_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put(err, cap, fmt, ap);
    va_end(ap);
    return st;
}

bool errbuf_false(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

static void *or_die(void *p, size_t n)
{
    if (!p) {
        fprintf(stderr, "oomlab: out of host memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

void *xmalloc(size_t n) { return or_die(malloc(n), n); }

void *xcalloc(size_t n, size_t size) { return or_die(calloc(n, size), n * size); }

void *xrealloc(void *p, size_t n) { return or_die(realloc(p, n), n); }
