/* child.c - a child in a session of its own, waited for with a deadline and the stop signals (child.h).
 *
 * A session, not only a process group: ninja puts each command it runs in a process group of its own (so the
 * extension build's compilers escaped a killpg), but no process leaves its session unless it calls setsid. The
 * members are found in /proc (field 6 of /proc/PID/stat, the session id). The leader is never reaped before its
 * session is killed: waitid(WNOWAIT) sees it end while its pid, and so the session's id, is still held by the
 * zombie, so no stranger that took the number meanwhile is reached.
 */
#define _GNU_SOURCE
#include "core/child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLL_NS 10000000L /* 10 ms between looks: a capture runs for seconds to minutes */

static volatile sig_atomic_t stop_sig;

/* Send sig to every process of session sid but this one; the number found. */
static int signal_session(pid_t sid, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return killpg(sid, sig) == 0;
    int found = 0;
    pid_t self = getpid();
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || (pid_t)pid == self)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold anything: the fields start after its last ')' */
        char state;
        long ppid, pgrp, session;
        if (!p || sscanf(p + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &session) != 4 || session != (long)sid ||
            state == 'Z')
            continue;
        kill((pid_t)pid, sig);
        found++;
    }
    closedir(d);
    return found;
}

/* SIGKILL to the whole session, again until none is left (a member may fork while it is being looked for). */
static void kill_session(pid_t sid)
{
    for (int pass = 0; pass < 20 && signal_session(sid, SIGKILL) > 0; pass++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void on_stop(int sig) { stop_sig = sig; }

void child_catch_stops(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a sleep or a wait returns at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int child_stop_signal(void) { return stop_sig; }

const char *child_signal_name(int sig, char *buf, size_t cap)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, cap, "SIG%s", abbrev);
    else
        snprintf(buf, cap, "signal %d", sig);
    return buf;
}

double child_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void);

/* The guard of k's session: a process of its own session that holds the read end of a pipe only oomlab can write
 * to (O_CLOEXEC: the capture never holds it). A byte means oomlab ended the child itself: the guard exits. End of
 * file without one means oomlab died (SIGKILL, the OOM killer): the guard ends k's session as oomlab would have,
 * then exits. Without a guard (fork or pipe failed) the leader's PR_SET_PDEATHSIG is all there is. */
static void start_guard(child *k)
{
    int fds[2];
    k->guard_fd = -1;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return;
    pid_t sid = k->pid;
    pid_t g = fork();
    if (g == 0) {
        setsid();
        signal(SIGINT, SIG_IGN); /* oomlab's handlers are of no use here; only the pipe decides */
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_IGN);
        long maxfd = sysconf(_SC_OPEN_MAX);
        for (int fd = 0; fd < (maxfd > 0 && maxfd < 65536 ? maxfd : 1024); fd++)
            if (fd != fds[0])
                close(fd); /* oomlab's output and locks are not the guard's to hold */
        char c;
        ssize_t n;
        while ((n = read(fds[0], &c, 1)) < 0 && errno == EINTR)
            ;
        if (n != 1 && signal_session(sid, SIGTERM) > 0) {
            double until = child_now() + CHILD_GRACE_S;
            while (signal_session(sid, 0) > 0 && child_now() < until)
                nap();
            kill_session(sid);
        }
        _exit(0);
    }
    close(fds[0]);
    if (g < 0) {
        close(fds[1]);
        return;
    }
    k->guard = g;
    k->guard_fd = fds[1];
}

/* The child is ended: its guard told so and reaped. */
static void stop_guard(child *k)
{
    if (k->guard_fd < 0)
        return;
    ssize_t w;
    while ((w = write(k->guard_fd, "d", 1)) < 0 && errno == EINTR)
        ;
    close(k->guard_fd);
    k->guard_fd = -1;
    while (waitpid(k->guard, NULL, 0) < 0 && errno == EINTR)
        ;
}

void child_start(child *k, char *const argv[], child_setup setup, void *ctx, double timeout_s)
{
    memset(k, 0, sizeof *k);
    k->end = CHILD_NOT_RUN;
    k->guard_fd = -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        setsid(); /* its own session and process group: the leader of both */
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* oomlab killed (SIGKILL, nothing to catch): the leader goes with it */
        if (getppid() != parent)
            _exit(127); /* oomlab died before the line above */
        /* what oomlab catches, or was started ignoring (nohup, a background job), is the default again */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (setup)
            setup(ctx);
        execv(argv[0], argv);
        _exit(127);
    }
    k->pid = pid;
    k->running = true;
    k->deadline = timeout_s > 0 ? child_now() + timeout_s : 0;
    start_guard(k);
}

/* Has k's leader ended? Not reaped (WNOWAIT): its number keeps the group's. */
static bool leader_ended(const child *k)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)k->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
        return errno != EINTR; /* ECHILD: gone already */
    return si.si_pid == k->pid;
}

/* k's leader has ended: the rest of its session killed, the leader reaped, how it ended recorded. */
static void finish(child *k, child_end why)
{
    kill_session(k->pid);
    stop_guard(k);
    int status = 0;
    pid_t r;
    while ((r = waitpid(k->pid, &status, 0)) < 0 && errno == EINTR)
        ;
    k->running = false;
    k->end = why;
    if (r < 0) {
        k->code = 127;
        return;
    }
    if (WIFEXITED(status)) {
        k->code = WEXITSTATUS(status);
        if (why == CHILD_SIGNALED)
            k->end = CHILD_EXITED;
    } else if (WIFSIGNALED(status)) {
        k->sig = WTERMSIG(status);
        k->code = 128 + k->sig;
    }
}

static void nap(void)
{
    struct timespec ts = {0, POLL_NS};
    nanosleep(&ts, NULL);
}

/* End k's session: SIGTERM, up to CHILD_GRACE_S for the leader to go, then SIGKILL. */
static void end_group(child *k, child_end why)
{
    signal_session(k->pid, SIGTERM);
    double until = child_now() + CHILD_GRACE_S;
    while (!leader_ended(k) && child_now() < until)
        nap();
    finish(k, why);
}

void child_stop_all(child *k, int n)
{
    for (int i = 0; i < n; i++)
        if (k[i].running)
            signal_session(k[i].pid, SIGTERM);
    for (int i = 0; i < n; i++)
        if (k[i].running)
            end_group(&k[i], CHILD_STOPPED);
}

int child_wait_any(child *k, int n)
{
    for (;;) {
        bool any = false;
        double now = child_now();
        for (int i = 0; i < n; i++) {
            if (!k[i].running)
                continue;
            any = true;
            if (leader_ended(&k[i])) {
                finish(&k[i], CHILD_SIGNALED); /* CHILD_EXITED when it exited */
                return i;
            }
            if (k[i].deadline > 0 && now >= k[i].deadline) {
                end_group(&k[i], CHILD_TIMED_OUT);
                return i;
            }
        }
        if (!any)
            return -1;
        if (stop_sig) {
            int first = -1;
            for (int i = 0; i < n && first < 0; i++)
                first = k[i].running ? i : -1;
            child_stop_all(k, n);
            return first;
        }
        nap();
    }
}

void child_wait(child *k)
{
    if (k->running)
        child_wait_any(k, 1);
}
