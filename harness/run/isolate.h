/* isolate.h - running one variant in a child process: crash and hang isolation for the runner (runner.h).
 *
 * isolate_variant() forks; the child runs the variant and writes its variant_result (the struct, then each
 * array it points to) and the run's backend fields into a pipe, then _exits; the parent reads until the pipe
 * closes or the deadline passes, then reaps the child. The child is a fork of the parent, the same binary at the
 * same addresses, so the bytes need no format beyond the order they are written in, and pointers into the
 * binary (the variant's scenario_variant) stay valid. A child that dies of a signal, exits without a whole
 * result, or is still running at the deadline (it is killed with SIGKILL) leaves its variant as the parent
 * prepared it, marked OUTCOME_CRASHED or OUTCOME_TIMEOUT with the reason in error. Nothing of the child's
 * reaches the parent but those bytes: its allocator, its output files (none) and its counters stay in it.
 * Standard streams are flushed before the fork; the child flushes its own before _exit.
 */
#ifndef OOMLAB_ISOLATE_H
#define OOMLAB_ISOLATE_H

#include "core/compat.h"
#include "run/runner.h"

OOM_BEGIN_DECLS

/* The work of the child: fill res (prepared by the caller) and, for the first variant, run's backend fields. */
typedef void (*isolate_fn)(void *arg, variant_result *res, run_result *run);

/* Run fn in a child process with a limit of timeout_s seconds (<= 0: none; limit_source says where it came from,
 * for the timeout's message). res must be prepared (res->v set, arrays NULL); on return it holds the child's
 * result, or the crash or timeout. */
void isolate_variant(isolate_fn fn, void *arg, double timeout_s, const char *limit_source, variant_result *res,
                     run_result *run);

/* "SIGSEGV", "SIGABRT", ... ("signal N" for one without a name here). */
const char *isolate_signal_name(int sig);

OOM_END_DECLS

#endif
