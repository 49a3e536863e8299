/* test_status.c - the last-error record (core/status.h) is per thread: a failure recorded on one thread (the
 * DataLoader's pin thread, a worker) never overwrites the detail another thread recorded, and each thread reads its
 * own. Before, one process-wide buffer was shared: the pin thread's refusal replaced the main thread's reason.
 *
 * Suite "status".
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <string.h>

#include "core/status.h"
#include "runtime/hostbuf.h"
#include "training/loader.h"
#include "testutil.h"

typedef struct two_threads {
    pthread_barrier_t step;
    char seen[2][512];
} two_threads;

static two_threads tt;

/* Thread i records its detail in turn (thread 0, then 1), then both read the record back. */
static void *record_then_read(void *arg)
{
    int i = (int)(intptr_t)arg;
    if (i == 1)
        pthread_barrier_wait(&tt.step); /* thread 0 has recorded */
    OOM_ERROR(i ? OOM_ENOMEM_PINNED : OOM_EINVAL, "detail of thread %d", i);
    if (i == 0)
        pthread_barrier_wait(&tt.step);
    pthread_barrier_wait(&tt.step); /* both have recorded */
    snprintf(tt.seen[i], sizeof tt.seen[i], "%s", oom_error_detail());
    return NULL;
}

Test(status, each_thread_reads_its_own_last_error)
{
    oom_error_clear();
    pthread_barrier_init(&tt.step, NULL, 2);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, record_then_read, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&tt.step);
    cr_assert_str_eq(tt.seen[0], "detail of thread 0", "thread 0 read another thread's record: '%s'", tt.seen[0]);
    cr_assert_str_eq(tt.seen[1], "detail of thread 1");
    cr_assert_str_eq(oom_error_msg(), "", "the main thread recorded nothing, and reads nothing: '%s'", oom_error_msg());
}

/* The DataLoader's case: pinning fails on the pin thread (past the pinned cap, which records why there) while the
 * main thread holds its own reason; the main thread still reads its own. */
Test(status, a_pin_thread_failure_leaves_the_main_threads_record)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r);
    rt_set_pinned_budget(r, 2 * 65536 + 4096); /* two 64 KiB blocks fit, not three */
    loader_options o = {.workers = 2, .prefetch = 2, .batches = 6, .dt = DT_F32, .ndim = 2, .pin_memory = true,
                        .produce_ms = 10, .step_ms = 1000};
    o.shape[0] = 16;
    o.shape[1] = 1000;
    OOM_ERROR(OOM_EINVAL, "the main thread's reason");
    loader *l = NULL;
    cr_assert_eq(loader_new(r, &o, 5, &l), OOM_OK);
    hostbuf *b = NULL;
    cr_assert_eq(loader_next(l, &b), OOM_OK);
    loader_step_done(l); /* the pin thread pins what was dispatched: the third block is refused */
    cr_assert_gt(loader_pin_failures(l), 0, "no pin was refused: the test shows nothing");
    cr_assert_str_eq(oom_error_detail(), "the main thread's reason", "the pin thread's failure replaced it: '%s'",
                     oom_error_detail());
    cr_assert(rt_ok(r), "the pin thread touched the runtime's sticky error: %s", rt_message(r));
    hostbuf_free(b);
    loader_delete(l);
    rt_close(r);
}

/* A refusal records its reason on the thread that was refused. */
static void *pin_past_the_cap(void *arg)
{
    rt *r = arg;
    void *p = NULL;
    oom_status st = device_host_alloc(r->dev, 1 << 20, &p);
    snprintf(tt.seen[1], sizeof tt.seen[1], "%s|%s", oom_status_str(st), oom_error_detail());
    return NULL;
}

Test(status, a_refusal_records_its_reason_on_its_own_thread)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r);
    rt_set_pinned_budget(r, 65536);
    oom_error_clear();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, pin_past_the_cap, r), 0);
    pthread_join(t, NULL);
    cr_assert_str_eq(tt.seen[1],
                     "ENOMEM_PINNED|pinning 1048576 bytes would pass the pinned memory cap of 65536 bytes (0 held)");
    cr_assert_str_eq(oom_error_msg(), "", "the refusal reached the main thread's record: '%s'", oom_error_msg());
    rt_close(r);
}
