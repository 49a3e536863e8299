/* fileio.h - files that are never left half written: atomic replace of regular files only, and directory creation.
 *
 * Everything oomlab writes for a user (snapshots, run results, baselines) goes through fileio_write_atomic, so a
 * crash, a full disk or a bad path leaves either the old file or the new one, never a partial one.
 */
#ifndef OOMLAB_FILEIO_H
#define OOMLAB_FILEIO_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* Only regular files are written: where path exists and is anything else (a device, a FIFO, a folder, a
 * symbolic link: lstat, a link is never followed), every writer below refuses with OOM_EINVAL and one line,
 * "PATH is a character device, not a regular file: not replaced (...)", and writes nothing. */

/* What is at path, not following a link: "a regular file", "a directory", "a symbolic link", "a FIFO", "a character
 * device", "a block device", "a socket"; NULL when nothing is (or it cannot be looked at). */
const char *fileio_kind(const char *path);

/* OOM_OK when nothing is at path or a regular file is (lstat: a link is not followed); else OOM_EINVAL and the one
 * line above in the last-error record. What every writer checks first; a command checks its output options with it
 * before it starts its work. */
oom_status fileio_check_target(const char *path);

/* Write len bytes to path through an unnamed file in its folder (O_TMPFILE), written and fsync'd, then named
 * path.tmp.XXXXXX and renamed over path: a kill or a full disk leaves the old file and, but for the instant
 * between the naming and the rename, no temporary file. Where O_TMPFILE is unsupported, the named temporary file
 * of fileio_temp_beside from the start. On failure nothing is left and the last-error record names the problem:
 * OOM_EINVAL (path is not a regular file), OOM_EIO (cannot create, write or rename) or OOM_ENOMEM_HOST. */
oom_status fileio_write_atomic(const char *path, const void *data, size_t len);

/* Write a new file: like fileio_write_atomic, but the file is linked to path only if nothing is there (link(2)
 * fails on an existing name), so two writers never take one name. *existed is set when path was taken by a
 * regular file or one appeared meanwhile; nothing is written then, and the status is OOM_EIO. */
oom_status fileio_write_new(const char *path, const void *data, size_t len, bool *existed);

/* A new empty temporary file beside path, PATH.tmp.XXXXXX (XXXXXX random), created with O_EXCL (a link planted
 * at that name is never followed), mode 0666 less the umask; its name goes to tmp (tmpcap bytes, strlen(path) +
 * 12 at least). Returns the open fd, locked (flock) so that another run's fileio_clean_stale leaves the file
 * alone: the caller writes (or lets a program write the name), checks, then fileio_publish or unlink, and closes
 * fd after; or -1 with OOM_EIO in the last-error record. For writers that cannot hand fileio_write_atomic a
 * buffer (gnuplot draws into the name). */
int fileio_temp_beside(const char *path, char *tmp, size_t tmpcap);

/* Remove the temporary files of path that a writer stopped by SIGKILL or a crash left beside it (every writer
 * above calls this first): PATH.tmp.XXXXXX that no process holds locked (a writer holds an flock on its temporary
 * file until it is published; keep fileio_temp_beside's fd open until then), and older oomlabs' PATH.tmp.PID[.N]
 * whose process is gone; either only when untouched for FILEIO_STALE_SECONDS. Each removal is said on stderr
 * ("oomlab: removed PATH.tmp.Ab12Cd (N bytes), a temporary file left by a writer that was stopped"). */
#define FILEIO_STALE_SECONDS 60
void fileio_clean_stale(const char *path);

/* Publish the finished temporary file tmp as path: refused (tmp removed, OOM_EINVAL, the one line above) where
 * path exists and is not a regular file; else tmp renamed over path (OOM_EIO and tmp removed if that fails). */
oom_status fileio_publish(const char *tmp, const char *path);

/* Open path to append to, under an exclusive flock(2) held until the fd is closed (every appender takes it, so
 * appends never interleave or lose one another): created (0666 less the umask) when absent; refused like the
 * writers above (OOM_EINVAL, the one line) when it exists and is not a regular file (lstat, then O_NOFOLLOW and
 * fstat; a FIFO is never waited on). Open for reading too (pread). *fd gets the fd (the caller closes it, which
 * drops the lock); on failure -1, with OOM_EINVAL or OOM_EIO in the last-error record. */
oom_status fileio_open_locked(const char *path, int *fd);

/* Append len bytes at the end of fd (from fileio_open_locked) as one write(2) (more only when the kernel writes
 * less), fsync'd. A short or failed write (a full disk) is undone, the file cut back to its size before: whole or
 * not at all. OOM_EIO ("cannot write PATH: reason") on failure. */
oom_status fileio_append(int fd, const char *path, const void *data, size_t len);

/* A new private folder PARENT/PREFIX-XXXXXX (mkdtemp) that this process owns while *fd is open: its file .lock is
 * held with flock (taken before the name exists, so no cleaner ever sees it unlocked; O_CLOEXEC: children do not
 * hold it). First, every PARENT/PREFIX-* folder whose .lock nobody holds (its owner was killed: SIGKILL, the OOM
 * killer) is removed under that lock (a second sweep at once skips it), and said on stderr ("oomlab: removed PATH,
 * left by a NAME that was killed"); a folder with no .lock (an older oomlab's, or one being made) is left, and so is
 * one whose .lock is already unlinked (its owner is removing it at its end: remove the folder, then close *fd). The path goes to dir (cap bytes). OOM_OK, or OOM_EIO with the last-error
 * record naming the problem. */
oom_status fileio_owned_temp_dir(const char *parent, const char *prefix, const char *name, char *dir, size_t cap,
                                 int *fd);

/* Remove the folder dir and everything in it, depth first, never following a link or crossing into another
 * file system (nftw with FTW_PHYS | FTW_MOUNT): a command's own temporary folder, with whatever a child it ran left
 * there. What cannot be removed is left, silently (the folder is ours; a leftover is no error). */
void fileio_remove_tree(const char *dir);

/* The whole file, NUL-terminated, in a malloc'd buffer (the caller frees it); *len (if non-NULL) gets its
 * length. NULL with OOM_EIO ("cannot open PATH: reason", "cannot read PATH") or OOM_ENOMEM_HOST in the
 * last-error record. */
char *fileio_read_all(const char *path, size_t *len);

/* The whole regular file mapped read-only, followed by a NUL (fileio_read_all without the copy, for files of
 * hundreds of MB read once); *len gets its length, *maplen what fileio_unmap_text takes. NULL when it cannot be
 * mapped (missing, empty, not a regular file): fileio_read_all then names the problem. */
char *fileio_map_text(const char *path, size_t *len, size_t *maplen);
void fileio_unmap_text(char *text, size_t maplen);

/* A bound on how much of an input file is read, and what set it: a refusal names it. */
typedef struct fileio_limit {
    size_t bytes;
    char what[160]; /* "--max-input (1048576 bytes)", "the default --max-input, 4 GiB (4294967296 bytes)", ... */
} fileio_limit;

#define FILEIO_DEFAULT_MAX_INPUT ((size_t)4 << 30) /* 4 GiB */

/* The default bound: FILEIO_DEFAULT_MAX_INPUT, or the host's available memory (MemAvailable in /proc/meminfo) when
 * that is smaller; what says which. Where /proc/meminfo cannot be read, 4 GiB. */
fileio_limit fileio_default_limit(void);

/* A bound the user gave (--max-input): bytes, named as option. */
fileio_limit fileio_limit_of(size_t bytes, const char *option);

/* OOM_OK, or OOM_EINVAL when path is a regular file larger than lim.bytes ("PATH is N bytes, more than WHAT" in
 * the last-error record): the check fileio_read_limited makes before reading, for readers that map the file. */
oom_status fileio_check_limit(const char *path, const fileio_limit *lim);

/* fileio_read_all within lim. A regular file larger than lim.bytes is refused before anything is read (stat);
 * anything else (a pipe, /dev/zero, a FIFO) is read up to lim.bytes and refused when there is more. A refusal is
 * NULL with OOM_EINVAL and one line in the last-error record: "PATH is N bytes, more than WHAT" (or "PATH: more
 * than WHAT could be read" for a stream); other failures as fileio_read_all. *st (if non-NULL) gets the status. */
char *fileio_read_limited(const char *path, const fileio_limit *lim, size_t *len, oom_status *st);

/* fileio_read_limited, or fileio_map_text for a regular file, through one open of path: a FIFO or a process
 * substitution (/dev/fd/N) is read once, within lim, never opened twice. *maplen is 0 for a read text (free it)
 * and the length to pass to fileio_unmap_text for a mapped one. Refusals and failures as fileio_read_limited. */
char *fileio_load_limited(const char *path, const fileio_limit *lim, size_t *len, size_t *maplen, oom_status *st);

/* mkdir -p path (mode 0777 less the umask). OOM_EIO, with the reason in the last-error record, when a component
 * cannot be made or exists and is not a directory. */
oom_status fileio_mkdirs(const char *path);

/* Do paths a and b name one existing file (the same device and inode)? */
bool fileio_same_file(const char *a, const char *b);

OOM_END_DECLS

#endif
