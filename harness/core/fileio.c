#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE */
/* fileio.c - atomic file replacement and directory creation. See fileio.h. This file must not include
 * memstats.h: <sys/stat.h> declares struct stat, which memstats.h also defines. */
#include "core/fileio.h"

#include <errno.h>
#include <stdbool.h>
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

char *fileio_read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        OOM_ERROR(OOM_EIO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf || bad) {
        free(buf);
        if (bad)
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

char *fileio_map_text(const char *path, size_t *len, size_t *maplen)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    struct stat sb;
    long page = sysconf(_SC_PAGESIZE);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 || page <= 0) {
        close(fd);
        return NULL;
    }
    /* an anonymous zeroed region one page longer than the file, the file mapped over its start: the byte after
     * the text is 0 whether or not the file ends on a page boundary */
    size_t n = (size_t)sb.st_size, total = n + (size_t)page;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    void *m = mmap(base, n, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        munmap(base, total);
        return NULL;
    }
    *len = n;
    *maplen = total;
    return base;
}

void fileio_unmap_text(char *text, size_t maplen) { munmap(text, maplen); }
