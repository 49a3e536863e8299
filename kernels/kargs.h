/* kargs.h - the argument checks the kernels make, shared by the CPU references (C) and the CUDA versions.
 *
 * Every kernel rejects, before touching memory: a dtype it does not support, a negative size, an m x n whose
 * element count overflows int64, a NULL buffer that it would read or write, and a scalar outside its domain.
 * Each kernel spells its own condition with these predicates and returns KARGS_FAIL(dt, m, n), which records
 * the kernel, file and line in the last-error record and returns OOM_EINVAL. Checks of data (nll's targets)
 * are the references' own: the CUDA versions cannot read device memory on the host.
 */
#ifndef OOMLAB_KARGS_H
#define OOMLAB_KARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/dtype.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* f32, f16 or bf16: the types every arithmetic kernel takes. */
static inline bool kargs_float(dtype dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

/* m, n >= 0 and m * n fits in int64. */
static inline bool kargs_shape(int64_t m, int64_t n) { return m >= 0 && n >= 0 && (n == 0 || m <= INT64_MAX / n); }

/* Record "KERNEL: bad arguments (...)" and return OOM_EINVAL. */
static inline oom_status kargs_fail(const char *kernel, const char *file, int line, dtype dt, int64_t m, int64_t n)
{
    oom_error_set(OOM_EINVAL, file, line, "%s: bad arguments (dtype %s, m = %lld, n = %lld, a buffer or a scalar)",
                  kernel, dtype_str(dt), (long long)m, (long long)n);
    return OOM_EINVAL;
}

#define KARGS_FAIL(dt, m, n) kargs_fail(__func__, __FILE__, __LINE__, (dt), (m), (n))

OOM_END_DECLS

#endif
