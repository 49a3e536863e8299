/* fuzzutil.h - what the libFuzzer harnesses of tests/fuzz share: the input as a file that the readers open by
 * path (they take paths, as the command line gives them), and a scratch folder for what they write.
 *
 * Each harness is one LLVMFuzzerTestOneInput that calls the same entry point as the command does, checks what
 * the contract in the header promises, frees everything and clears the last-error record, so that no run sees
 * state from the one before (libFuzzer runs every input in one process). A broken promise calls fuzz_fail,
 * which aborts: libFuzzer saves the input as a crash.
 */
#ifndef OOMLAB_FUZZUTIL_H
#define OOMLAB_FUZZUTIL_H

#define _GNU_SOURCE /* memfd_create */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A contract the harness checks did not hold: say which, and abort (libFuzzer keeps the input). */
static inline void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* The input as a file: an anonymous memory file, opened by the readers as /proc/self/fd/N (no disk, nothing
 * left behind). path gets that name; returns the descriptor, which the caller closes. Aborts when the system
 * refuses: a harness that cannot feed its input must not report success. */
static inline int fuzz_input_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0)
        fuzz_fail("memfd_create failed");
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0)
            fuzz_fail("cannot write the input to its memory file");
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static char fuzz_scratch[64];

/* At exit: the scratch folder goes (the harnesses remove what they write in it after each run). */
static inline void fuzz_scratch_remove(void)
{
    if (fuzz_scratch[0])
        rmdir(fuzz_scratch);
}

/* A private scratch folder for what a harness makes the code write, made once: under /dev/shm when there is
 * one (fsync costs nothing on tmpfs), else /tmp. */
static inline const char *fuzz_scratch_dir(void)
{
    char *dir = fuzz_scratch;
    if (!dir[0]) {
        snprintf(dir, sizeof fuzz_scratch, "%s/oomlab-fuzz.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir))
            fuzz_fail("cannot make a scratch folder %s", dir);
        atexit(fuzz_scratch_remove);
    }
    return dir;
}

/* An error line the user would read: non-empty and one line. */
static inline void fuzz_check_error_line(const char *what, const char *err)
{
    if (!err[0])
        fuzz_fail("%s failed with an empty error message", what);
    if (strchr(err, '\n'))
        fuzz_fail("%s: the error message is more than one line: %s", what, err);
}

#endif
