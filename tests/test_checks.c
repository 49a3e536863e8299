/* test_checks.c - the runtime's validators (core/check.h): tensor_check, ag_node_check, autograd_graph_check,
 * optim_check and loader_check. Each numbered invariant is broken on purpose, on a copy or under the loader's lock,
 * and the validator must refuse naming it; the expensive ones only at the expensive level. In checked builds
 * (OOM_DEBUG >= 2) each module's validator also runs where its state changes: a test breaks the live structure and
 * the next call aborts (Criterion runs every test in a child of its own: .signal = SIGABRT).
 * hostbuf_check has its own suite, tests/test_hostbuf.c.
 *
 * Suite "checks".
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "core/check.h"
#include "runtime/autograd.h"
#include "training/loader.h"
#include "training/loader_state.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "testutil.h"

/* Expect check(x) to pass at both levels. */
#define EXPECT_VALID(check, x)                                                                                 \
    do {                                                                                                       \
        char why_[256] = "";                                                                                   \
        cr_assert_eq(check((x), false, why_, sizeof why_), OOM_OK, "%s", why_);                                 \
        cr_assert_eq(check((x), true, why_, sizeof why_), OOM_OK, "%s", why_);                                  \
    } while (0)

/* Expect check(x) to refuse naming what: at the cheap level too unless expensive_only, where the cheap level must
 * pass. */
#define EXPECT_BROKEN(check, x, expensive_only, what)                                                          \
    do {                                                                                                       \
        char why_[256] = "";                                                                                   \
        oom_status cheap_ = check((x), false, why_, sizeof why_);                                              \
        if (expensive_only)                                                                                    \
            cr_assert_eq(cheap_, OOM_OK, "the cheap level refused %s: %s", (what), why_);                      \
        else                                                                                                   \
            cr_assert(cheap_ == OOM_ECORRUPT && strstr(why_, (what)), "cheap level: '%s' does not name %s",     \
                      why_, (what));                                                                           \
        cr_assert_eq(check((x), true, why_, sizeof why_), OOM_ECORRUPT, "not caught: %s", (what));             \
        cr_assert_not_null(strstr(why_, (what)), "'%s' does not name %s", why_, (what));                       \
    } while (0)

static rt *open_rt(void)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r, "cannot open a runtime on %s", device_kind_str(test_backend()));
    return r;
}

static tensor *leaf(rt *r, int64_t n, bool requires_grad)
{
    tensor *t = tensor_randn(r, DT_F32, SHAPE(n), 0.0, 1.0);
    cr_assert_not_null(t, "%s", rt_message(r));
    tensor_set_requires_grad(t, requires_grad);
    return t;
}

/* ---- tensor_check: S1-S3, T1-T9 ---------------------------------------------------------------------------- */

Test(checks, tensor_check_catches_each_broken_invariant)
{
    rt *r = open_rt();
    tensor *x = leaf(r, 256, true), *y = op_mul(x, x), *m = tensor_randn(r, DT_F32, SHAPE(16, 16), 0.0, 1.0);
    tensor *v = op_t(m);
    cr_assert(y && v, "%s", rt_message(r));
    EXPECT_VALID(tensor_check, x);
    EXPECT_VALID(tensor_check, y);
    EXPECT_VALID(tensor_check, v);

    tensor bad = *m; /* m: no history, no grad_acc, no view, so a copy of it is a valid tensor */
    EXPECT_VALID(tensor_check, &bad);
    bad.refcount = 0;
    EXPECT_BROKEN(tensor_check, &bad, false, "T1: refcount 0");
    bad = *m;
    bad.ndim = TENSOR_MAX_DIMS + 1;
    EXPECT_BROKEN(tensor_check, &bad, false, "T2: ndim 5");
    bad = *m;
    bad.shape[1] = -16;
    EXPECT_BROKEN(tensor_check, &bad, false, "T2: shape[1] = -16");
    bad = *m;
    bad.offset = 4;
    EXPECT_BROKEN(tensor_check, &bad, false, "T3: offset 4 + 1024 bytes past the storage's 1024");
    storage sbad = *m->st;
    bad = *m;
    bad.st = &sbad;
    sbad.refcount = 0;
    EXPECT_BROKEN(tensor_check, &bad, false, "S1: storage refcount 0");
    sbad = *m->st;
    sbad.ptr = 0;
    EXPECT_BROKEN(tensor_check, &bad, false, "S2: storage of 1024 bytes at 0");
    sbad = *m->st;
    sbad.ptr += 512; /* inside m's block, not a block of its own: only the allocator knows */
    EXPECT_BROKEN(tensor_check, &bad, true, "S3");
    bad = *x;
    bad.ndim = 1, bad.transposed = true;
    bad.grad_acc = NULL;
    EXPECT_BROKEN(tensor_check, &bad, false, "T4: transposed with ndim 1");
    bad = *m;
    bad.grad_fn = y->grad_fn; /* history without requires_grad */
    EXPECT_BROKEN(tensor_check, &bad, false, "T5: a grad_fn (MulBackward0) with requires_grad 0");
    bad = *x; /* x's AccumulateGrad holds x, not this copy */
    EXPECT_BROKEN(tensor_check, &bad, false, "T6: its AccumulateGrad node holds another tensor");
    bad = *m;
    bad.grad = y; /* y has history */
    EXPECT_BROKEN(tensor_check, &bad, false, "T7: its .grad has a grad_fn");
    tensor *g = tensor_zeros(r, DT_F32, SHAPE(8));
    bad.grad = g;
    EXPECT_BROKEN(tensor_check, &bad, false, "T7: its .grad's shape differs");
    bad = *y;
    bad.grad = NULL, bad.requires_grad = true;
    tensor plain = *m;
    bad.grad = &plain;
    EXPECT_BROKEN(tensor_check, &bad, false, "T7: a .grad on a non-leaf");
    bad = *m;
    bad.is_view = true;
    EXPECT_BROKEN(tensor_check, &bad, false, "T8: is_view 1 with no base");
    bad = *v;
    bad.base = v; /* a view as a base */
    EXPECT_BROKEN(tensor_check, &bad, false, "T8: its base is itself a view");
    bad = *m;
    bad.view_of_leaf = true;
    EXPECT_BROKEN(tensor_check, &bad, false, "T8: view_of_leaf on a tensor that is no view");
    tensor gbad = *g; /* a .grad that is broken itself: seen one level down, at the expensive level */
    gbad.ndim = 1, gbad.shape[0] = 256, gbad.offset = 8;
    bad = *m;
    bad.ndim = 1, bad.shape[0] = 256;
    bad.grad = &gbad;
    EXPECT_BROKEN(tensor_check, &bad, true, "T9: its .grad: T3");

    tensor_release(g);
    tensor_release(v);
    tensor_release(m);
    tensor_release(y);
    tensor_release(x);
    rt_close(r);
}

#if OOM_DEBUG >= 2
/* Checked builds validate a tensor when it is retained or released: the broken one aborts at the release. */
Test(checks, a_checked_build_aborts_on_a_broken_tensor, .signal = SIGABRT)
{
    rt *r = open_rt();
    tensor *t = tensor_zeros(r, DT_F32, SHAPE(64));
    cr_assert_not_null(t);
    t->transposed = true; /* T4: a 1-D tensor cannot be transposed */
    tensor_release(t);    /* aborts */
}
#endif

/* ---- ag_node_check (A1-A7) and autograd_graph_check ------------------------------------------------------ */

Test(checks, ag_node_check_catches_each_broken_invariant)
{
    rt *r = open_rt();
    tensor *x = leaf(r, 256, true), *y = op_mul(x, x), *z = op_relu(y);
    cr_assert(z, "%s", rt_message(r));
    ag_node *mul = y->grad_fn, *relu = z->grad_fn, *acc = x->grad_acc;
    cr_assert(mul && relu && acc);
    EXPECT_VALID(ag_node_check, mul);
    EXPECT_VALID(ag_node_check, relu);
    EXPECT_VALID(ag_node_check, acc);
    EXPECT_VALID(autograd_graph_check, relu);

    ag_node bad = *mul;
    bad.refcount = 0;
    EXPECT_BROKEN(ag_node_check, &bad, false, "A1: MulBackward0 with refcount 0");
    bad = *mul;
    bad.nsaved = AG_MAX_SAVED + 1;
    EXPECT_BROKEN(ag_node_check, &bad, false, "A2: MulBackward0 with 2 next edges and 7 saved slots");
    bad = *mul;
    bad.nnext = 1; /* edge 1 is still set */
    EXPECT_BROKEN(ag_node_check, &bad, false, "A2: MulBackward0 has edge 1 past its 1");
    ag_node abad = *acc; /* its variable points back at acc, not at the copy */
    EXPECT_BROKEN(ag_node_check, &abad, false, "A3: AccumulateGrad's variable is no leaf pointing back at it");
    bad = *mul;
    bad.variable = x;
    EXPECT_BROKEN(ag_node_check, &bad, false, "A3: MulBackward0 with a variable");
    bad = *mul;
    bad.seq = r->next_seq;
    EXPECT_BROKEN(ag_node_check, &bad, false, "A3: MulBackward0 has seq");
    bad = *relu;
    bad.seq = mul->seq; /* its edge to mul is no longer to an older node: a cycle could hide there */
    EXPECT_BROKEN(ag_node_check, &bad, false, "A4: ReluBackward0");
    bad = *mul;
    bad.released = true; /* released, still holding x */
    EXPECT_BROKEN(ag_node_check, &bad, false, "A5: MulBackward0 is released and holds slot 0");
    bad = *mul;
    bad.saved[1].defined = false;
    EXPECT_BROKEN(ag_node_check, &bad, false, "A6: MulBackward0's slot 1 holds data and is undefined");
    bad = *relu; /* relu saves its output: kept without grad_fn; here with the node itself */
    tensor self = *relu->saved[0].t;
    self.grad_fn = &bad; /* the copy under test */
    bad.saved[0].t = &self;
    EXPECT_BROKEN(ag_node_check, &bad, false, "A6: ReluBackward0 saves a tensor whose grad_fn is itself");
    tensor tbad = *x; /* a saved tensor broken itself: seen at the expensive level */
    tbad.offset = 4, tbad.grad_acc = NULL;
    bad = *mul;
    bad.saved[0].t = &tbad;
    EXPECT_BROKEN(ag_node_check, &bad, true, "A7: MulBackward0's saved slot 0: T3");

    /* the graph: a node two edges down, broken in place, is found from the root */
    int keep = mul->nsaved;
    mul->nsaved = -1;
    char why[256] = "";
    cr_assert_eq(ag_node_check(relu, false, why, sizeof why), OOM_OK, "%s", why);
    cr_assert_eq(autograd_graph_check(relu, false, why, sizeof why), OOM_ECORRUPT);
    cr_assert_not_null(strstr(why, "A2: MulBackward0 with 2 next edges and -1 saved slots"), "%s", why);
    mul->nsaved = keep;
    size_t live = r->live_nodes;
    r->live_nodes = 2; /* three nodes reachable */
    cr_assert_eq(autograd_graph_check(relu, false, why, sizeof why), OOM_ECORRUPT);
    cr_assert_not_null(strstr(why, "graph: 3 nodes reachable from ReluBackward0, more than the rt's 2 live ones"),
                       "%s", why);
    r->live_nodes = live;
    EXPECT_VALID(autograd_graph_check, relu);

    tensor_release(z);
    tensor_release(y);
    tensor_release(x);
    cr_assert_eq(r->live_nodes, 0);
    rt_close(r);
}

#if OOM_DEBUG >= 2
/* Checked builds check the graph when backward starts: a node released early (A5) aborts it. */
Test(checks, a_checked_build_aborts_backward_on_a_broken_graph, .signal = SIGABRT)
{
    rt *r = open_rt();
    tensor *x = leaf(r, 256, true), *y = op_mul(x, x), *s = op_sum(op_relu(y));
    cr_assert_not_null(s, "%s", rt_message(r));
    y->grad_fn->released = true; /* A5: released, yet its saved tensors are held */
    autograd_backward(s, NULL, false); /* aborts */
}
#endif

/* ---- optim_check (O1-O6) ------------------------------------------------------------------------------------ */

/* Two parameters with a gradient each, and one step of o. */
static void step_once(rt *r, optimizer *o)
{
    for (size_t i = 0; i < o->nparams; i++) {
        tensor *sq = op_mul(o->params[i], o->params[i]), *s = op_sum(sq);
        cr_assert_not_null(s, "%s", rt_message(r));
        cr_assert_eq(autograd_backward(s, NULL, false), OOM_OK, "%s", rt_message(r));
        tensor_release(s);
        tensor_release(sq);
    }
    cr_assert_eq(optim_step(o), OOM_OK, "%s", rt_message(r));
}

Test(checks, optim_check_catches_each_broken_invariant)
{
    rt *r = open_rt();
    tensor *p[2] = {leaf(r, 64, true), leaf(r, 32, true)};
    optimizer *sgd = optim_sgd(r, p, 2, 0.1, 0.9, 0.0, 0.0, false);
    optimizer *adam = optim_adam(r, p, 2, 0.01, 0.9, 0.999, 1e-8, 0.0);
    EXPECT_VALID(optim_check, sgd);
    step_once(r, sgd);
    EXPECT_VALID(optim_check, sgd);
    step_once(r, adam);
    EXPECT_VALID(optim_check, adam);
    cr_assert(sgd->state_a[0] && adam->state_a[0] && adam->state_b[0]);

    optimizer bad = *sgd;
    bad.kind = (optim_kind)7;
    EXPECT_BROKEN(optim_check, &bad, false, "O1: no optimizer, no rt, or an unknown kind");
    bad = *sgd;
    bad.steps = NULL;
    EXPECT_BROKEN(optim_check, &bad, false, "O1: a per-parameter array is missing");
    tensor *y = op_mul(p[0], p[0]);
    tensor *params[2] = {y, p[1]}; /* a non-leaf */
    bad = *sgd;
    bad.params = params;
    EXPECT_BROKEN(optim_check, &bad, false, "O2: params[0] is missing or no leaf");
    tensor *states[2] = {sgd->state_a[1], sgd->state_a[1]}; /* momentum_buffer[0] of 32 elements, p[0] of 64 */
    bad = *sgd;
    bad.state_a = states;
    EXPECT_BROKEN(optim_check, &bad, false, "O3: momentum_buffer[0] is float32 of 1 dims, its parameter float32 of 1");
    bad = *sgd;
    bad.state_b = adam->state_b;
    EXPECT_BROKEN(optim_check, &bad, false, "O3: SGD holds exp_avg_sq");
    tensor *none[2] = {NULL, NULL};
    bad = *adam;
    bad.state_a = none;
    EXPECT_BROKEN(optim_check, &bad, false, "O3: exp_avg_sq[0] without exp_avg");
    tensor *step = tensor_zeros(r, DT_F32, SCALAR);
    tensor *steps_t[2] = {step, step};
    bad = *adam;
    bad.state_step = steps_t; /* a step tensor without fused */
    EXPECT_BROKEN(optim_check, &bad, false, "O4: state_step[0] without fused");
    bad = *adam;
    bad.o.fused = true; /* fused, and exp_avg made without its step */
    EXPECT_BROKEN(optim_check, &bad, false, "O4: fused Adam's exp_avg[0] before its step");
    int64_t counts[2] = {0, 1};
    bad = *sgd;
    bad.steps = counts; /* a momentum buffer for a parameter that never stepped */
    EXPECT_BROKEN(optim_check, &bad, false, "O5: params[0] took 0 steps and has a momentum buffer");
    bad = *adam;
    bad.state_a = none, bad.state_b = none; /* steps taken, no state */
    EXPECT_BROKEN(optim_check, &bad, false, "O5: params[0] took 1 steps without its state");
    tensor sbad = *sgd->state_a[0]; /* a state tensor broken itself: seen at the expensive level */
    sbad.offset = 4;
    tensor *broken[2] = {&sbad, sgd->state_a[1]};
    bad = *sgd;
    bad.state_a = broken;
    EXPECT_BROKEN(optim_check, &bad, true, "O6: params[0]'s tensor 1: T3");

    tensor_release(step);
    tensor_release(y);
    optim_free(adam);
    optim_free(sgd);
    tensor_release(p[0]);
    tensor_release(p[1]);
    rt_close(r);
}

#if OOM_DEBUG >= 2
/* Checked builds check the optimizer around every step and zero_grad. */
Test(checks, a_checked_build_aborts_on_a_broken_optimizer, .signal = SIGABRT)
{
    rt *r = open_rt();
    tensor *p = leaf(r, 64, true);
    optimizer *o = optim_sgd(r, &p, 1, 0.1, 0.9, 0.0, 0.0, false);
    o->steps[0] = -1;           /* O5 */
    optim_zero_grad(o, true);   /* aborts */
}
#endif

/* ---- loader_check (L1-L7) ----------------------------------------------------------------------------------- */

/* A loader of 2 workers, prefetch 2, 8 batches of 4 x 16 f32, pinned; one batch received and its step done. */
static loader *loader_started(rt *r, hostbuf **first)
{
    loader_options o = {.workers = 2, .prefetch = 2, .batches = 8, .dt = DT_F32, .ndim = 2, .pin_memory = true,
                        .produce_ms = 10, .step_ms = 1000};
    o.shape[0] = 4;
    o.shape[1] = 16;
    loader *l = NULL;
    cr_assert_eq(loader_new(r, &o, 7, &l), OOM_OK);
    cr_assert_eq(loader_next(l, first), OOM_OK);
    cr_assert_not_null(*first);
    loader_step_done(l); /* the slow consumer: every dispatched batch is pinned now */
    return l;
}

/* Break one field of l under its lock, check it there (loader_check_locked, as the loader runs it), restore: the
 * threads never see the broken state. */
#define BREAK_AND_CHECK(l, field, value, expensive_only, what)                                                 \
    do {                                                                                                       \
        char cheap_why_[256] = "", full_why_[256] = "";                                                        \
        pthread_mutex_lock(&(l)->mu);                                                                          \
        __typeof__((l)->field) keep_ = (l)->field;                                                             \
        (l)->field = (value);                                                                                  \
        oom_status cheap_ = loader_check_locked((l), false, cheap_why_, sizeof cheap_why_);                    \
        oom_status full_ = loader_check_locked((l), true, full_why_, sizeof full_why_);                        \
        (l)->field = keep_;                                                                                    \
        pthread_mutex_unlock(&(l)->mu);                                                                        \
        if (expensive_only)                                                                                    \
            cr_assert_eq(cheap_, OOM_OK, "the cheap level refused %s: %s", (what), cheap_why_);                \
        else                                                                                                   \
            cr_assert(cheap_ == OOM_ECORRUPT && strstr(cheap_why_, (what)), "cheap: '%s' does not name %s",    \
                      cheap_why_, (what));                                                                     \
        cr_assert(full_ == OOM_ECORRUPT && strstr(full_why_, (what)), "expensive: '%s' does not name %s",      \
                  full_why_, (what));                                                                          \
    } while (0)

Test(checks, loader_check_catches_each_broken_invariant)
{
    rt *r = open_rt();
    hostbuf *b = NULL;
    loader *l = loader_started(r, &b);
    char why[256] = "";
    cr_assert_eq(loader_check(l, true, why, sizeof why), OOM_OK, "%s", why);
    /* taken 1, dispatched 5 (2 x 2 + 1), allowed and pinned 5 */

    BREAK_AND_CHECK(l, taken, 6, false, "L1: taken 6, allowed 5, dispatched 5 of 8");
    BREAK_AND_CHECK(l, pinned, 0, false, "L1: taken 1, pinned 0, allowed 5 with pin_memory 1");
    BREAK_AND_CHECK(l, dispatched, 6, false, "L2: 6 dispatched, 1 received: not min(8, 2 x 2 + 1)");
    BREAK_AND_CHECK(l, now, 0, false, "L3: batch 4 is allowed at 0 ns");
    BREAK_AND_CHECK(l, pin_failures, 6, false, "L4: 6 pin failures, 5 pinned");
    BREAK_AND_CHECK(l, next_task[1], 2, false, "L4: worker 1's next task is 2");
    BREAK_AND_CHECK(l, fin[2], 0, true, "L5: batch 2 is dispatched or finishes before batch 1");
    BREAK_AND_CHECK(l, ps[3], 0, true, "L5: batch 3's pin starts at 0 ns: before it is made or before the pin of batch 2 ends");
    BREAK_AND_CHECK(l, copy_done, -1, false, "L3: -1 of");
    BREAK_AND_CHECK(l, made_done[6], true, true, "L5: batch 6 is made before it is dispatched");
    BREAK_AND_CHECK(l, ready[0], b, true, "L6: batch 0 holds a pinned buffer");
    BREAK_AND_CHECK(l, ready[2], NULL, true, "L6: batch 2 lacks a pinned buffer");
    BREAK_AND_CHECK(l, made[3], b, true, "L6: batch 3's pageable buffer is still held after it was pinned or failed");
    BREAK_AND_CHECK(l, pin_st[0], OOM_ENOMEM_PINNED, true, "L7: 1 pin failures counted, 0 recorded");

    cr_assert_eq(loader_check(l, true, why, sizeof why), OOM_OK, "%s", why);
    hostbuf_free(b);
    loader_delete(l);
    rt_close(r);
}

#if OOM_DEBUG >= 2
/* Checked builds validate the loader after each change, under its lock: the consumer's next step aborts. */
Test(checks, a_checked_build_aborts_on_a_broken_loader, .signal = SIGABRT)
{
    rt *r = open_rt();
    hostbuf *b = NULL;
    loader *l = loader_started(r, &b);
    pthread_mutex_lock(&l->mu);
    l->pin_failures = -1; /* L4 */
    pthread_mutex_unlock(&l->mu);
    loader_step_done(l); /* aborts */
}
#endif
