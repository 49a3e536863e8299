/* status.h - the one error enum of oomlab, its names, and the last-error record.
 *
 * Every action function returns an oom_status (kernel style: 0 is success). A device OOM is a normal,
 * measured result (OOM_ENOMEM_DEVICE), never an abort. A raw cudaError_t/CUresult never crosses a module:
 * the cuda backend stores it in the last-error record with the failing expression, file and line.
 *
 * Two records, one convention:
 *   - the last-error record (OOM_ERROR, here): the detail of the latest failure a lower layer (device, alloc,
 *     core) recorded on the calling thread. One per thread, as errno: the loader's pin thread and its workers
 *     record their own failures and never overwrite the main thread's (device.h's host, stream and event calls are
 *     thread-safe, and so is what they record).
 *   - the runtime's sticky error (rt_fail, runtime/runtime.h): per runtime, as SQLite keeps its error per
 *     connection; the first failure of a step, worded for the user. It quotes a lower layer's reason through
 *     oom_error_detail() (rt_fail_detail), never the record's "STATUS at file:line" prefix.
 * Error text: the detail says what failed and why, in one line starting lowercase, with no trailing period or
 * newline and no "oomlab:" prefix (the command line adds it); where oomlab mirrors a PyTorch error it is
 * PyTorch's text verbatim.
 */
#ifndef OOMLAB_STATUS_H
#define OOMLAB_STATUS_H

#include "core/compat.h"

OOM_BEGIN_DECLS

typedef enum oom_status {
    OOM_OK = 0,            /* success */
    OOM_ENOMEM_DEVICE,     /* the device (or its driver) had no memory for the request */
    OOM_ELIMIT,            /* the per-process budget (memory fraction) refused the request */
    OOM_ENOMEM_HOST,       /* host memory ran out */
    OOM_EINVAL,            /* bad argument or input */
    OOM_ECUDA,             /* a CUDA call failed for a reason other than memory */
    OOM_EUNSUPPORTED,      /* the backend cannot do this (e.g. no VMM support) */
    OOM_ENODEV,            /* no such backend or no device visible */
    OOM_EIO,               /* a file could not be read or written */
    OOM_ECORRUPT,          /* an invariant check failed */
    OOM_EAUTOGRAD,         /* an autograd rule was broken (backward twice, in-place on a saved tensor) */
    OOM_ENOMEM_PINNED,     /* page-locked host memory ran out (cudaHostAlloc/cudaHostRegister, sim's pinned budget) */
    OOM_STATUS_COUNT
} oom_status;

/* Short stable name, e.g. "ENOMEM_DEVICE"; "UNKNOWN" for a value out of range. Never NULL, never fails. */
const char *oom_status_str(oom_status st);

/* Record "STATUS at FILE:LINE: DETAIL" in the calling thread's last-error record, replacing what it held. Cannot
 * fail: a detail longer than the record (511 bytes) is cut. */
void oom_error_set(oom_status st, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* The calling thread's record, "STATUS at file:line: detail"; "" when nothing was recorded on this thread. */
const char *oom_error_msg(void);
/* The detail alone, without the "STATUS at file:line: " prefix: what a user-facing message quotes ("" as above). */
const char *oom_error_detail(void);
/* Empty the calling thread's record. */
void oom_error_clear(void);

#define OOM_ERROR(st, ...) oom_error_set((st), __FILE__, __LINE__, __VA_ARGS__)

OOM_END_DECLS

#endif
