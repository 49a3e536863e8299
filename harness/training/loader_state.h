/* loader_state.h - the DataLoader's state (loader.h), shared by loader.c and the test of its validator.
 *
 * Times are nanoseconds of the virtual clock. Batch k (0 <= k < n) is dispatched when k < dispatched (at disp[k],
 * finishing at fin[k] = max(disp[k], fin[k - W]) + produce); made when made_done[k] (its pageable buffer in
 * made[k], or make_st[k] != OK); its pin allowed to start when k < allowed (at ps[k] = max(fin[k], pe[k - 1]) <=
 * now); pinned when k < pinned (pin_memory: its pinned buffer in ready[k], or pin_st[k] != OK), ready for the
 * consumer at pe[k] = ps[k] + pin_ns (a failed pin takes no time); received when k < taken. The device copies
 * holding a stream: copy_s[c], ending at copy_end[c], for copy_done <= c < ncopies. Everything below is guarded
 * by mu; each thread validates it (loader_check) with mu held after it changed it.
 *
 * Invariants (W workers, P prefetch):
 *   L1  0 <= taken <= dispatched <= n and allowed <= dispatched; with pin_memory taken <= pinned <= allowed, and
 *       without it pinned == allowed == 0;
 *   L2  dispatched == min(n, P x W + taken): P x W at the start, one more per batch received, so at most P x W
 *       are in flight;
 *   L3  the virtual clock has reached every allowed batch: fin[allowed - 1] <= now; 0 <= copy_done <= ncopies;
 *   L4  pin_failures <= pinned; worker w's next task is w modulo W and it takes a task only once dispatched:
 *       next_task[w] < dispatched + W;
 *   L5  (expensive) over the dispatched batches, disp and fin are nondecreasing and fin[k] >= disp[k] +
 *       produce_ns; an allowed batch's pin starts once it is made and the pin before it ended (ps[k] >= fin[k],
 *       ps[k] >= pe[k - 1]) and ends no sooner than it starts; copy_end is
 *       nondecreasing; nothing past dispatched is made;
 *   L6  (expensive) a batch is owned once: made[k] != NULL only for a batch made without error and neither
 *       received nor pinned (k >= taken, and k >= pinned with pin_memory); ready[k] != NULL exactly for
 *       taken <= k < pinned with pin_st[k] == OK, and it is a pinned hostbuf (hostbuf_check);
 *   L7  (expensive) pin_failures counts the k < pinned with pin_st[k] == OOM_ENOMEM_PINNED.
 */
#ifndef OOMLAB_LOADER_STATE_H
#define OOMLAB_LOADER_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"
#include "training/loader.h"

struct loader {
    rt *r;
    loader_options o;
    uint64_t seed;
    int64_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    /* the schedule */
    int64_t *disp, *fin, *ps, *pe;
    int64_t now;
    int64_t dispatched, allowed, pinned, taken;
    int64_t produce_ns, step_ns, pin_ns, h2d_ns, h2d_pageable_ns; /* from the options */
    devstream *copy_s;  /* the device copies holding their stream, in the order they were made */
    int64_t *copy_end;
    int64_t ncopies, copy_done;
    /* the batches */
    hostbuf **made;     /* pageable, made by a worker, not yet pinned (or received, without pin_memory) */
    oom_status *make_st;
    bool *made_done;
    hostbuf **ready;    /* pinned, not yet received */
    oom_status *pin_st;
    int64_t pin_failures;
    /* the threads */
    pthread_t workers[LOADER_MAX_WORKERS];
    int nworkers;
    int64_t next_task[LOADER_MAX_WORKERS];
    pthread_t pin_thread;
    bool pin_started;
};

/* loader_check (loader.h) with mu already held: what the loader's threads run after each change. */
oom_status loader_check_locked(const loader *l, bool expensive, char *why, size_t cap);

#endif
