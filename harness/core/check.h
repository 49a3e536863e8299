/* check.h - the assert levels of checked builds, mimalloc's mi_assert_internal / mi_assert_expensive.
 *
 * OOM_DEBUG (the Makefile's DEBUG) picks the level, per build folder:
 *   0  optimised (`make`, `make bench`): nothing below is compiled in; arguments are not evaluated.
 *   2  checked (`make test`: build/checked): oom_assert at a function's entry (O(1) conditions), and each module's
 *      validator where its state changes (OOM_VALIDATE), at its cheap level (the struct and its direct links; the
 *      autograd graph's walk, once per backward, costs what backward's own walk does).
 *   3  expensive (`make debug`, `make asan`, `make fuzz`): besides, oom_assert_expensive and the validators'
 *      expensive level (one level further down, every batch of a loader, look-ups in the allocators).
 * A failure prints one line, "oomlab: MODULE invariant broken: WHY (FILE:LINE)", and aborts: a broken invariant is
 * oomlab's bug, never the user's input, and must stop the run where it happened.
 *
 * A validator has one shape, `oom_status MODULE_check(const T *x, bool expensive, char *why, size_t cap)`: OOM_OK, or
 * OOM_ECORRUPT with the broken invariant (its number, "T3: ...") written to why. It touches no error record and no
 * shared state besides x, so any thread may run it (the loader's pin thread does), and a test can run it on a
 * structure broken on purpose without aborting. Each struct's invariants are numbered in a comment beside it.
 */
#ifndef OOMLAB_CHECK_H
#define OOMLAB_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

/* The validators' level in this build: true at OOM_DEBUG >= 3. */
#define OOM_EXPENSIVE (OOM_DEBUG >= 3)

/* Print "oomlab: MODULE invariant broken: WHY (FILE:LINE)" on stderr and abort. Never returns. */
#if defined(__GNUC__)
__attribute__((noreturn, cold))
#endif
void oom_check_fail(const char *module, const char *why, const char *file, int line);

#if OOM_DEBUG >= 2
/* A cheap condition at a function's entry (mi_assert_internal). */
#define oom_assert(expr) ((expr) ? (void)0 : oom_check_fail("assertion", #expr, __FILE__, __LINE__))
/* Run validator CHECK (the shape above) on OBJ at this build's level; abort naming MODULE when it refuses. */
#define OOM_VALIDATE(module, check, obj)                                                                       \
    do {                                                                                                       \
        char oom_why_[256];                                                                                    \
        if (check((obj), OOM_EXPENSIVE, oom_why_, sizeof oom_why_) != OOM_OK)                                  \
            oom_check_fail((module), oom_why_, __FILE__, __LINE__);                                            \
    } while (0)
#else
#define oom_assert(expr) ((void)0)
#define OOM_VALIDATE(module, check, obj) ((void)0)
#endif

#if OOM_DEBUG >= 3
/* A condition that costs more than O(1) (mi_assert_expensive). */
#define oom_assert_expensive(expr) oom_assert(expr)
#else
#define oom_assert_expensive(expr) ((void)0)
#endif

/* Inside a validator: refuse with "FMT..." in why (printf-style) unless cond holds. */
#define OOM_REQUIRE(cond, why, cap, ...)                                                                       \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            snprintf((why), (cap), __VA_ARGS__);                                                               \
            return OOM_ECORRUPT;                                                                               \
        }                                                                                                      \
    } while (0)

OOM_END_DECLS

#endif
