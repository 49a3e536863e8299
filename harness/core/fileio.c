#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE, O_TMPFILE, nftw */
/* fileio.c - atomic file replacement (regular files only), locked appends, reading within a bound, directory
 * creation. See fileio.h. */
#include "core/fileio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <ftw.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *fileio_kind(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return NULL;
    mode_t m = sb.st_mode;
    return S_ISREG(m) ? "a regular file"
         : S_ISDIR(m) ? "a directory"
         : S_ISLNK(m) ? "a symbolic link"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

oom_status fileio_check_target(const char *path)
{
    const char *kind = fileio_kind(path);
    if (!kind || strcmp(kind, "a regular file") == 0)
        return OOM_OK;
    OOM_ERROR(OOM_EINVAL, "%s is %s, not a regular file: not replaced (oomlab writes only regular files)", path, kind);
    return OOM_EINVAL;
}

/* The folder path is in ("." for a bare name); malloc'd, NULL when out of memory. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, !slash ? "." : slash == path ? "/" : path, n);
        d[n] = '\0';
    }
    return d;
}

/* Six characters for a temporary name: the pid, the clock and a counter mixed (xorshift), as mkstemp's XXXXXX. */
static void random_suffix(char out[7])
{
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static unsigned long long counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = ((unsigned long long)getpid() << 32) ^ (unsigned long long)ts.tv_nsec ^
                           ((unsigned long long)ts.tv_sec << 20) ^ (++counter * 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < 6; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = abc[x % 62];
    }
    out[6] = '\0';
}

/* A fresh name PATH.tmp.XXXXXX into tmp: with fd < 0 a new empty file created there (O_EXCL; its fd returned),
 * else the unnamed file fd linked there (0). -1 with errno when it cannot be made. */
static int name_temp(const char *path, char *tmp, size_t tmpcap, int fd)
{
    int n = snprintf(tmp, tmpcap, "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= tmpcap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    for (int tries = 0; tries < 100; tries++) {
        random_suffix(tmp + n - 6);
        int rc = fd >= 0 ? linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW)
                         : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* O_EXCL: no link followed */
        if (rc >= 0 || errno != EEXIST)
            return rc;
    }
    return -1; /* EEXIST 100 times */
}

/* Is name (in path's folder, whose file name is base) a temporary file of path's: base.tmp.XXXXXX (this file's),
 * or base.tmp.PID or base.tmp.PID.N (older oomlabs': *pid gets PID, else 0)? */
static bool temp_of(const char *name, const char *base, long *pid)
{
    size_t n = strlen(base);
    *pid = 0;
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0)
        return false;
    const char *t = name + n + 5;
    size_t k = strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
    if (k == 6 && !t[6] && strspn(t, "0123456789") < 6)
        return true;
    char *end = NULL;
    *pid = strtol(t, &end, 10);
    if (end == t || *pid <= 0)
        return false;
    if (*end == '.')
        end += 1 + strspn(end + 1, "0123456789");
    return *end == '\0';
}

void fileio_clean_stale(const char *path)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char *dir = dir_of(path);
    DIR *d = dir && base[0] ? opendir(dir) : NULL;
    time_t now = time(NULL);
    for (struct dirent *e; d && (e = readdir(d));) {
        long pid = 0;
        if (!temp_of(e->d_name, base, &pid))
            continue;
        size_t cap = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(cap);
        if (!p)
            break;
        snprintf(p, cap, "%s/%s", dir, e->d_name);
        struct stat sb;
        int fd = -1;
        /* stale: a regular file, untouched for FILEIO_STALE_SECONDS, whose writer is gone (its lock with it, or
         * for an older oomlab's name, its process) */
        bool stale = lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) && now - sb.st_mtime >= FILEIO_STALE_SECONDS &&
                     (pid == 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) &&
                     (fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) >= 0 &&
                     flock(fd, LOCK_EX | LOCK_NB) == 0;
        if (stale && unlink(p) == 0)
            fprintf(stderr, "oomlab: removed %s (%jd bytes), a temporary file left by a writer that was stopped\n", p,
                    (intmax_t)sb.st_size);
        if (fd >= 0)
            close(fd);
        free(p);
    }
    if (d)
        closedir(d);
    free(dir);
}

int fileio_temp_beside(const char *path, char *tmp, size_t tmpcap)
{
    fileio_clean_stale(path);
    int fd = name_temp(path, tmp, tmpcap, -1);
    if (fd < 0)
        OOM_ERROR(OOM_EIO, "cannot write %s: cannot create a temporary file beside it: %s", path, strerror(errno));
    else
        flock(fd, LOCK_EX); /* in use while fd is open: fileio_clean_stale leaves it */
    return fd;
}

oom_status fileio_publish(const char *tmp, const char *path)
{
    if (fileio_check_target(path) != OOM_OK) {
        unlink(tmp);
        return OOM_EINVAL;
    }
    if (rename(tmp, path) != 0) { /* rename replaces a name: it never writes through a link */
        int err = errno;
        unlink(tmp);
        OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(err));
        return OOM_EIO;
    }
    return OOM_OK;
}

/* All of data to fd, flushed to the disk. 0, or the errno. */
static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        len -= (size_t)w;
    }
    if (fsync(fd) != 0 && errno != EINVAL) /* EINVAL: a file that cannot be synced */
        return errno;
    return 0;
}

/* Write data as path: checked target, then an unnamed file (O_TMPFILE) in path's folder, written and fsync'd, and
 * only then given a name, so a kill during the write leaves nothing; where O_TMPFILE is not supported, a named
 * temporary file (fileio_temp_beside) from the start. Published by rename (replace) or, exclusive, by a link
 * to path that fails where anything is there (*existed). */
static oom_status write_file(const char *path, const void *data, size_t len, bool exclusive, bool *existed)
{
    if (existed)
        *existed = false;
    oom_status st = fileio_check_target(path);
    if (st != OOM_OK)
        return st;
    fileio_clean_stale(path);
    size_t tcap = strlen(path) + 16;
    char *tmp = malloc(tcap), *dir = dir_of(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        OOM_ERROR(OOM_ENOMEM_HOST, "cannot write %s: out of host memory", path);
        return OOM_ENOMEM_HOST;
    }
    /* /proc/self/fd/N is how an unnamed file gets a name without privileges (linkat with AT_SYMLINK_FOLLOW) */
    int fd = access("/proc/self/fd", X_OK) == 0 ? open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666) : -1;
    bool unnamed = fd >= 0, tmp_named = false;
    free(dir);
    if (unnamed)
        flock(fd, LOCK_EX); /* held until close: once named, fileio_clean_stale leaves it */
    if (!unnamed) {
        if ((fd = fileio_temp_beside(path, tmp, tcap)) < 0) {
            free(tmp);
            return OOM_EIO;
        }
        tmp_named = true;
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int err = write_all(fd, data, len);
    if (!err && exclusive) { /* path itself, only where nothing is */
        int rc = unnamed ? linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) : link(tmp, path);
        if (rc != 0) {
            err = errno;
            if (existed)
                *existed = err == EEXIST;
        }
    } else if (!err && unnamed) { /* a temporary name, renamed over path below */
        if (name_temp(path, tmp, tcap, fd) != 0)
            err = errno;
        tmp_named = !err;
    }
    if (close(fd) != 0 && !err)
        err = errno;
    if (tmp_named && (err || exclusive))
        unlink(tmp); /* after a link: the second name; path keeps the file */
    if (err) {
        free(tmp);
        OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(err));
        return OOM_EIO;
    }
    st = exclusive ? OOM_OK : fileio_publish(tmp, path);
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

oom_status fileio_open_locked(const char *path, int *fdp)
{
    *fdp = -1;
    oom_status st = fileio_check_target(path);
    if (st != OOM_OK)
        return st;
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        OOM_ERROR(OOM_EIO, "cannot open %s: %s", path, strerror(errno));
        return OOM_EIO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { /* replaced between the lstat and the open */
        close(fd);
        OOM_ERROR(OOM_EINVAL, "%s is not a regular file: not written (oomlab writes only regular files)", path);
        return OOM_EINVAL;
    }
    int rc;
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        OOM_ERROR(OOM_EIO, "cannot lock %s: %s", path, strerror(errno));
        close(fd);
        return OOM_EIO;
    }
    *fdp = fd;
    return OOM_OK;
}

oom_status fileio_append(int fd, const char *path, const void *data, size_t len)
{
    off_t before = lseek(fd, 0, SEEK_END); /* stable: every appender holds the lock */
    int err = before < 0 ? errno : write_all(fd, data, len);
    if (err) {
        if (before >= 0 && ftruncate(fd, before) != 0)
            OOM_ERROR(OOM_EIO, "cannot write %s: %s, and cannot cut it back to its %jd bytes before: %s", path,
                      strerror(err), (intmax_t)before, strerror(errno));
        else
            OOM_ERROR(OOM_EIO, "cannot write %s: %s", path, strerror(err));
        return OOM_EIO;
    }
    return OOM_OK;
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

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void fileio_remove_tree(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Is dir/.lock there and held by nobody (its owner is gone)? Then the fd holding its lock (the caller removes the
 * folder under it and closes it: a second cleaner skips the folder meanwhile), else -1. A lock file already unlinked
 * (st_nlink 0) or replaced is an owner's that is removing its folder at its end, so not one left by a kill. */
static int lock_of_gone_owner(const char *dir)
{
    char lock[PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    int fd = open(lock, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat held, now;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &held) != 0 || held.st_nlink == 0 || lstat(lock, &now) != 0 ||
        now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
        close(fd);
        return -1;
    }
    return fd;
}

oom_status fileio_owned_temp_dir(const char *parent, const char *prefix, const char *name, char *dir, size_t cap,
                                 int *fd)
{
    *fd = -1;
    size_t plen = strlen(prefix);
    DIR *d = opendir(parent);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, plen) != 0 || e->d_name[plen] != '-')
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", parent, e->d_name) >= (int)sizeof path)
            continue;
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
            continue;
        int held = lock_of_gone_owner(path);
        if (held < 0)
            continue;
        fileio_remove_tree(path);
        close(held);
        fprintf(stderr, "oomlab: removed %s, left by a %s that was killed\n", path, name);
    }
    if (d)
        closedir(d);
    int n = snprintf(dir, cap, "%s/%s-XXXXXX", parent, prefix);
    if (n < 0 || (size_t)n >= cap || !mkdtemp(dir)) {
        OOM_ERROR(OOM_EIO, "cannot make a temporary folder in %s: %s", parent,
                  n < 0 || (size_t)n >= cap ? "the name is too long" : strerror(errno));
        return OOM_EIO;
    }
    char tmp[PATH_MAX + 16], lock[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s/.lock.tmp", dir);
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    int f = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f < 0 || flock(f, LOCK_EX) != 0 || rename(tmp, lock) != 0) {
        OOM_ERROR(OOM_EIO, "cannot lock the temporary folder %s: %s", dir, strerror(errno));
        if (f >= 0)
            close(f);
        fileio_remove_tree(dir);
        return OOM_EIO;
    }
    *fd = f;
    return OOM_OK;
}
