/* status.h - the one error enum of oomlab, its names, and the last-error record.
 *
 * Every action function returns an oom_status (kernel style: 0 is success). A device OOM is a normal,
 * measured result (OOM_ENOMEM_DEVICE), never an abort. A raw cudaError_t/CUresult never crosses a module:
 * the cuda backend stores it in the last-error record with the failing expression, file and line.
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

/* Short stable name, e.g. "ENOMEM_DEVICE". Never NULL. */
const char *oom_status_str(oom_status st);

/* Last-error record: the first detail of the most recent failure, per process. */
void oom_error_set(oom_status st, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
const char *oom_error_msg(void);  /* "" when no detail was recorded */
/* The detail alone, without the "STATUS at file:line: " prefix: what a user-facing message quotes. */
const char *oom_error_detail(void);
void oom_error_clear(void);

#define OOM_ERROR(st, ...) oom_error_set((st), __FILE__, __LINE__, __VA_ARGS__)

OOM_END_DECLS

#endif
