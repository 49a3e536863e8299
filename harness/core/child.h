/* child.h - programs oomlab runs on a user's behalf (predict's capture: a user's script, run unattended): each in a
 * session of its own, with a time limit, ended with everything it started.
 *
 * A child leads a new session (setsid before exec), so that the script's own children are reached too (DataLoader
 * workers, the extension build's ninja and the compilers ninja puts in process groups of their own): every process
 * of the session, found in /proc. When the child ends, whatever is left of its session is killed (SIGKILL):
 * nothing runs on after oomlab. A deadline passed, or a stop signal to oomlab (child_catch_stops: SIGINT, SIGTERM,
 * SIGHUP), ends the session: SIGTERM, then SIGKILL after CHILD_GRACE_S. A terminal's Ctrl-C reaches oomlab alone
 * (the child has no controlling terminal), and oomlab passes it on this way. Only a process that calls setsid
 * itself (a daemon) leaves the session. oomlab killed by SIGKILL can do none of this: the leader then gets SIGKILL
 * from the kernel (PR_SET_PDEATHSIG), and a guard process per child, in a session of its own, sees oomlab's end
 * of a pipe close and ends the child's session as oomlab would have.
 */
#ifndef OOMLAB_CHILD_H
#define OOMLAB_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/compat.h"

OOM_BEGIN_DECLS

#define CHILD_GRACE_S 5.0 /* SIGTERM to SIGKILL: a capture writes its status line in well under this */

/* How a child ended. */
typedef enum child_end {
    CHILD_EXITED,    /* exit status in code */
    CHILD_SIGNALED,  /* killed by signal sig, not by us */
    CHILD_TIMED_OUT, /* its deadline passed: its session was ended */
    CHILD_STOPPED,   /* oomlab got a stop signal (child_stop_signal): its session was ended */
    CHILD_NOT_RUN    /* fork failed */
} child_end;

/* One child. Invariant: pid > 0 while running; after it ends, end/code/sig say how, and its session is empty. */
typedef struct child {
    pid_t pid;
    double deadline; /* CLOCK_MONOTONIC seconds; 0: none */
    bool running;
    child_end end;
    int code; /* CHILD_EXITED: the exit status; else 128 + the signal it died of, when known */
    int sig;  /* the signal that ended it (CHILD_SIGNALED, and what CHILD_TIMED_OUT/STOPPED died of) */
    pid_t guard;  /* the process that ends the session should oomlab die (child.c, start_guard) */
    int guard_fd; /* the pipe to it while the child runs; -1: none */
} child;

/* Set up the child side in a forked process, before exec. */
typedef void (*child_setup)(void *ctx);

/* Catch SIGINT, SIGTERM and SIGHUP from now on (no SA_RESTART): each sets the stop signal that every wait below
 * acts on. */
void child_catch_stops(void);
/* The stop signal caught so far, or 0. */
int child_stop_signal(void);

/* The signal's name ("SIGTERM"), or "signal N", in buf. */
const char *child_signal_name(int sig, char *buf, size_t cap);

/* Monotonic seconds. */
double child_now(void);

/* Fork argv[0] with argv (execv: no shell) as the leader of a new session, setup(ctx) run in it first
 * (environment, redirections; may be NULL), with timeout_s seconds to run (0: none). k->running when it started;
 * else k->end is CHILD_NOT_RUN. A child that cannot exec exits 127. */
void child_start(child *k, char *const argv[], child_setup setup, void *ctx, double timeout_s);

/* Wait until one of the n children that are running ends, is past its deadline, or a stop signal arrives; each
 * that ends so gets its end, code and sig and its session emptied. The index of one that ended, or -1 when none was
 * running. On a stop signal every running child is ended (CHILD_STOPPED). */
int child_wait_any(child *k, int n);

/* child_wait_any for one child. */
void child_wait(child *k);

/* End every running child of the n now (CHILD_STOPPED): SIGTERM to its session, SIGKILL after CHILD_GRACE_S. */
void child_stop_all(child *k, int n);

OOM_END_DECLS

#endif
