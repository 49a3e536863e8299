#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE */
/* fileio.c - atomic file replacement and directory creation. See fileio.h. This file must not include
 * memstats.h: <sys/stat.h> declares struct stat, which memstats.h also defines. */
#include "core/fileio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write data to a fresh temporary file next to path, flushed and fsync'd; its name goes to tmp (cap bytes). */
static oom_status write_temp(const char *path, const void *data, size_t len, char *tmp, size_t tcap)
{
    FILE *f = NULL;
    for (unsigned n = 0; n < 100 && !f; n++) {
        snprintf(tmp, tcap, "%s.tmp.%ld.%u", path, (long)getpid(), n);
        errno = 0;
        f = fopen(tmp, "wbx"); /* C11's exclusive create: 0666 less the umask */
        if (!f && errno != EEXIST)
            break;
    }
    if (!f) {
        OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        return OOM_EIO;
    }
    int err = 0;
    errno = 0;
    if (fwrite(data, 1, len, f) != len || fflush(f) != 0)
        err = errno ? errno : EIO;
    if (!err && fsync(fileno(f)) != 0 && errno != EINVAL) /* EINVAL: a file that cannot be synced */
        err = errno;
    if (fclose(f) != 0 && !err)
        err = errno ? errno : EIO;
    if (err) {
        unlink(tmp);
        OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(err));
        return OOM_EIO;
    }
    return OOM_OK;
}

/* Publish tmp as path: rename over it, or (exclusive) link to it only where nothing is. tmp is gone after. */
static oom_status publish(const char *tmp, const char *path, bool exclusive, bool *existed)
{
    int rc = exclusive ? link(tmp, path) : rename(tmp, path);
    int err = rc != 0 ? errno : 0;
    unlink(tmp); /* after a rename: nothing there; after a link: the second name */
    if (!err)
        return OOM_OK;
    if (existed)
        *existed = err == EEXIST;
    OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(err));
    return OOM_EIO;
}

static oom_status write_file(const char *path, const void *data, size_t len, bool exclusive, bool *existed)
{
    if (existed)
        *existed = false;
    size_t tcap = strlen(path) + 48;
    char *tmp = malloc(tcap);
    if (!tmp) {
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot write %s: out of host memory", path);
        return OOM_ENOMEM_HOST;
    }
    oom_status st = write_temp(path, data, len, tmp, tcap);
    if (st == OOM_OK)
        st = publish(tmp, path, exclusive, existed);
    free(tmp);
    return st;
}

oom_status fileio_write_atomic(const char *path, const void *data, size_t len)
{
    return write_file(path, data, len, false, NULL);
}

oom_status fileio_write_new(const char *path, const void *data, size_t len, bool *existed)
{
    return write_file(path, data, len, true, existed);
}

/* Read f whole, but stop once more than max bytes came. *st: OOM_OK, OOM_EINVAL (more than max: NULL, nothing
 * recorded; the caller says why), OOM_EIO or OOM_ENOMEM_HOST (NULL, in the last-error record). */
static char *read_stream(FILE *f, const char *path, size_t max, size_t *len, oom_status *st)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    *st = OOM_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n > max) {
            *st = OOM_EINVAL;
            free(buf);
            return NULL;
        }
        if (n < cap)
            break;
        /* here n == cap <= max: grow, to max + 1 at most (one byte past the bound says there is more) */
        size_t ncap = cap > max / 2 ? max + 1 : 2 * cap;
        char *nb = realloc(buf, ncap + 1);
        if (!nb)
            free(buf);
        buf = nb;
        cap = ncap;
    }
    if (!buf || ferror(f)) {
        *st = buf ? OOM_EIO : OOM_ENOMEM_HOST;
        free(buf);
        if (*st == OOM_EIO)
            OOM_ERROR(OOM_EIO, "cannot read %s", path);
        else
            OOM_ERROR(OOM_ENOMEM_HOST, "cannot read %s: out of host memory", path);
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

char *fileio_read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        OOM_ERROR(OOM_EIO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    oom_status st;
    char *buf = read_stream(f, path, SIZE_MAX - 1, len, &st);
    fclose(f);
    return buf;
}

fileio_limit fileio_limit_of(size_t bytes, const char *option)
{
    fileio_limit l = {.bytes = bytes};
    snprintf(l.what, sizeof l.what, "%s (%zu bytes)", option, bytes);
    return l;
}

fileio_limit fileio_default_limit(void)
{
    fileio_limit l = {.bytes = FILEIO_DEFAULT_MAX_INPUT};
    snprintf(l.what, sizeof l.what, "the default --max-input, 4 GiB (%zu bytes)", l.bytes);
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    if (kib > 0 && kib < l.bytes / 1024) {
        l.bytes = (size_t)kib * 1024;
        snprintf(l.what, sizeof l.what,
                 "the host's available memory, %.2f GiB (%zu bytes; the default --max-input is 4 GiB or that, "
                 "whichever is smaller)",
                 (double)l.bytes / (double)(1 << 30), l.bytes);
    }
    return l;
}

oom_status fileio_check_limit(const char *path, const fileio_limit *lim)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size > (uintmax_t)lim->bytes) {
        OOM_ERROR(OOM_EINVAL, "%s is %jd bytes, more than %s", path, (intmax_t)sb.st_size, lim->what);
        return OOM_EINVAL;
    }
    return OOM_OK;
}

char *fileio_read_limited(const char *path, const fileio_limit *lim, size_t *len, oom_status *st)
{
    oom_status dummy;
    st = st ? st : &dummy;
    *st = OOM_EIO;
    FILE *f = fopen(path, "rb");
    if (!f) {
        OOM_ERROR(OOM_EIO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size > (uintmax_t)lim->bytes) {
        fclose(f);
        *st = OOM_EINVAL;
        OOM_ERROR(OOM_EINVAL, "%s is %jd bytes, more than %s", path, (intmax_t)sb.st_size, lim->what);
        return NULL;
    }
    char *buf = read_stream(f, path, lim->bytes, len, st); /* a file that grew since fstat stops at the bound too */
    fclose(f);
    if (*st == OOM_EINVAL)
        OOM_ERROR(OOM_EINVAL, "%s: more than %s could be read (it is not a regular file: read up to the bound)", path,
                  lim->what);
    return buf;
}

oom_status fileio_mkdirs(const char *path)
{
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (!buf) {
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot make %s: out of host memory", path);
        return OOM_ENOMEM_HOST;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char keep = buf[i];
        buf[i] = '\0';
        struct stat sb;
        if (mkdir(buf, 0777) != 0 && (errno != EEXIST || stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
            int err = errno == EEXIST ? ENOTDIR : errno;
            OOM_ERROR(OOM_EIO, "cannot make directory %s: %s", buf, strerror(err));
            free(buf);
            return OOM_EIO;
        }
        buf[i] = keep;
    }
    free(buf);
    return OOM_OK;
}

/* The regular file open on fd, n > 0 bytes, mapped read-only and followed by a NUL; NULL if it cannot be. */
static char *map_fd(int fd, size_t n, size_t *maplen)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return NULL;
    /* an anonymous zeroed region one page longer than the file, the file mapped over its start: the byte after
     * the text is 0 whether or not the file ends on a page boundary */
    size_t total = n + (size_t)page;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    void *m = mmap(base, n, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) {
        munmap(base, total);
        return NULL;
    }
    *maplen = total;
    return base;
}

char *fileio_map_text(const char *path, size_t *len, size_t *maplen)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    struct stat sb;
    char *text = NULL;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
        (text = map_fd(fd, (size_t)sb.st_size, maplen)))
        *len = (size_t)sb.st_size;
    close(fd);
    return text;
}

char *fileio_load_limited(const char *path, const fileio_limit *lim, size_t *len, size_t *maplen, oom_status *st)
{
    *maplen = 0;
    *st = OOM_EIO;
    FILE *f = fopen(path, "rb"); /* the one open: a FIFO or a pipe (/dev/fd/N) gives its bytes once */
    if (!f) {
        OOM_ERROR(OOM_EIO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    bool reg = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
    if (reg && (uintmax_t)sb.st_size > (uintmax_t)lim->bytes) {
        fclose(f);
        *st = OOM_EINVAL;
        OOM_ERROR(OOM_EINVAL, "%s is %jd bytes, more than %s", path, (intmax_t)sb.st_size, lim->what);
        return NULL;
    }
    char *text = reg && sb.st_size > 0 ? map_fd(fileno(f), (size_t)sb.st_size, maplen) : NULL;
    if (text) {
        *len = (size_t)sb.st_size;
        *st = OOM_OK;
    } else {
        text = read_stream(f, path, lim->bytes, len, st);
        if (*st == OOM_EINVAL)
            OOM_ERROR(OOM_EINVAL, "%s: more than %s could be read (it is not a regular file: read up to the bound)",
                      path, lim->what);
    }
    fclose(f);
    return text;
}

void fileio_unmap_text(char *text, size_t maplen) { munmap(text, maplen); }

bool fileio_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
