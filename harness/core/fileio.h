/* fileio.h - files that are never left half written: atomic replace, and directory creation.
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

/* Write len bytes to path through a temporary file next to it (path.tmp.PID.N, created exclusively), flushed
 * and fsync'd, then renamed over path. On failure the temporary file is removed and the last-error record
 * names the problem: OOM_EIO (cannot create, write or rename) or OOM_ENOMEM_HOST. */
oom_status fileio_write_atomic(const char *path, const void *data, size_t len);

/* Write a new file: like fileio_write_atomic, but the temporary file is linked to path only if nothing is there
 * (link(2) fails on an existing name), so two writers never take one name. *existed is set when path was
 * taken; nothing is written then, and the status is OOM_EIO. */
oom_status fileio_write_new(const char *path, const void *data, size_t len, bool *existed);

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
