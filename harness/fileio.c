/* fileio.c - atomic file replacement and directory creation. See fileio.h. This file must not include
 * memstats.h: <sys/stat.h> declares struct stat, which memstats.h also defines. */
#include "fileio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write len bytes to path through a temporary file next to it (path.tmp.PID.N, created exclusively: C11's "x"
 * mode, 0666 less the umask), fsync'd, then renamed over path. On failure the temporary file is removed. */
oom_status fileio_write_atomic(const char *path, const void *data, size_t len)
{
    size_t tcap = strlen(path) + 48;
    char *tmp = malloc(tcap);
    if (!tmp) {
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot write %s: out of host memory", path);
        return OOM_ENOMEM_HOST;
    }
    FILE *f = NULL;
    for (unsigned n = 0; n < 100 && !f; n++) {
        snprintf(tmp, tcap, "%s.tmp.%ld.%u", path, (long)getpid(), n);
        errno = 0;
        f = fopen(tmp, "wbx");
        if (!f && errno != EEXIST)
            break;
    }
    if (!f) {
        OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        free(tmp);
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
    if (!err && rename(tmp, path) != 0)
        err = errno;
    if (err) {
        unlink(tmp);
        OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(err));
        free(tmp);
        return OOM_EIO;
    }
    free(tmp);
    return OOM_OK;
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
