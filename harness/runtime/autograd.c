/* autograd.c - nodes, saved tensors, the backward engine, AccumulateGrad and checkpointing. See autograd.h. */
#include "runtime/autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fail.h"
#include "runtime/amp.h"
#include "runtime/ops.h"

static const char second_backward_msg[] =
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if you "
    "need to access saved tensors after calling backward.";

/* ---- nodes ------------------------------------------------------------------------------------------- */

static ag_node *node_alloc(rt *r, const ag_fn *fn, uint64_t seq)
{
    ag_node *n = xcalloc(1, sizeof *n);
    n->fn = fn;
    n->rt = r;
    n->refcount = 1;
    n->seq = seq;
    r->live_nodes++;
    return n;
}

static oom_status accumulate_grad_apply(ag_node *n, tensor *grad, tensor **grads);
static const ag_fn accumulate_grad_fn = {"AccumulateGrad", accumulate_grad_apply, false};

/* The leaf's AccumulateGrad node, made on first use and cached (weakly) in the leaf. AccumulateGrad runs as
 * soon as it is ready: its sequence number is the largest there is, as in PyTorch. */
static ag_node *grad_accumulator(tensor *leaf)
{
    if (leaf->grad_acc)
        return ag_node_retain(leaf->grad_acc);
    ag_node *n = node_alloc(leaf->rt, &accumulate_grad_fn, UINT64_MAX);
    n->variable = tensor_retain(leaf);
    leaf->grad_acc = n;
    OOM_VALIDATE("autograd node", ag_node_check, n);
    return n;
}

/* The edge that carries the gradient of t (gradient_edge / impl::gradient_edge). */
static ag_edge gradient_edge(tensor *t)
{
    if (!t || !t->requires_grad)
        return (ag_edge){NULL, 0};
    if (t->grad_fn)
        return (ag_edge){ag_node_retain(t->grad_fn), t->output_nr};
    return (ag_edge){grad_accumulator(t), 0};
}

bool ag_any_requires_grad(rt *r, int n, tensor *const *inputs)
{
    if (!r->grad_enabled)
        return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad)
            return true;
    return false;
}

ag_node *ag_node_new(rt *r, const ag_fn *fn, int n, tensor *const *inputs)
{
    ag_node *node = node_alloc(r, fn, r->next_seq++);
    node->nnext = n;
    oom_assert(n >= 0 && n <= AG_MAX_NEXT);
    for (int i = 0; i < n; i++)
        node->next[i] = gradient_edge(inputs[i]);
    OOM_VALIDATE("autograd node", ag_node_check, node);
    return node;
}

ag_node *ag_node_retain(ag_node *n)
{
    if (n) {
        OOM_VALIDATE("autograd node", ag_node_check, n);
        n->refcount++;
    }
    return n;
}

static void slot_release(ag_saved *s);

static void node_free(ag_node *n)
{
    rt *r = n->rt;
    for (int i = 0; i < n->nsaved; i++)
        slot_release(&n->saved[i]);
    for (int i = 0; i < n->nnext; i++)
        ag_node_release(n->next[i].fn);
    if (n->variable) {
        n->variable->grad_acc = NULL;
        tensor_release(n->variable);
    }
    if (n->ctx_free)
        n->ctx_free(n->ctx);
    r->live_nodes--;
    free(n);
}

void ag_node_release(ag_node *n)
{
    if (!n)
        return;
    OOM_VALIDATE("autograd node", ag_node_check, n);
    if (--n->refcount > 0)
        return;
    rt *r = n->rt;
    n->link = r->dying;
    r->dying = n;
    if (r->draining)
        return; /* an outer call is freeing nodes: it will get to this one */
    r->draining = true;
    while ((n = r->dying) != NULL) {
        r->dying = n->link;
        node_free(n);
    }
    r->draining = false;
}

/* ---- non-reentrant checkpoints (torch/utils/checkpoint.py: _CheckpointFrame and its two hooks) ----------- */

/* A checkpoint's frame. Invariants: refcount counts the placeholders that hold it (plus the forward while it
 * runs); input is retained while the frame lives; alive[i] says placeholder i is still saved in some node;
 * recomputed[i] is placeholder i's recomputed tensor (owned) from the last recompute until it is unpacked or
 * the placeholder goes; counter counts the saves of the recompute in progress. */
typedef struct ck_frame {
    rt *r;
    int refcount;
    ag_checkpoint_fn fn;
    void *ctx;
    tensor *input;
    bool autocast; /* the forward's autocast state, restored for the recompute */
    dtype autocast_dtype;
    int nholders, cap;
    bool *alive;
    tensor **recomputed;
    uint64_t recomputed_for; /* the graph task that recomputed it last (0: none) */
    int counter;
} ck_frame;

static void frame_release(ck_frame *f)
{
    if (!f || --f->refcount > 0)
        return;
    for (int i = 0; i < f->nholders; i++)
        tensor_release(f->recomputed[i]);
    tensor_release(f->input);
    free(f->alive);
    free(f->recomputed);
    free(f);
}

/* _checkpoint_hook's pack hook: a new placeholder of f. */
static int frame_add_holder(ck_frame *f)
{
    if (f->nholders == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 8;
        f->alive = realloc(f->alive, (size_t)f->cap * sizeof *f->alive);
        f->recomputed = realloc(f->recomputed, (size_t)f->cap * sizeof *f->recomputed);
        if (!f->alive || !f->recomputed) {
            fprintf(stderr, "oomlab: out of host memory\n");
            abort();
        }
    }
    f->alive[f->nholders] = true;
    f->recomputed[f->nholders] = NULL;
    f->refcount++;
    return f->nholders++;
}

/* _recomputation_hook's pack hook: the recompute saved t, the next placeholder's tensor (kept detached unless
 * that placeholder is gone already); the last one stops the recompute. */
static void frame_recomputed(ck_frame *f, tensor *t)
{
    rt *r = f->r;
    int i = f->counter++;
    if (i >= f->nholders)
        return; /* more saves than the forward made: the count check after the recompute reports it */
    if (f->alive[i]) /* detached: the recompute's graph must not live on through it */
        f->recomputed[i] = tensor_alias(t, t->offset, t->ndim, t->shape, t->transposed);
    if (f->counter == f->nholders)
        r->ck_stop = true; /* _StopRecomputationError */
}

/* The saved slot's reference goes (SavedVariable::reset_data drops its hooks, and with them the placeholder). */
static void slot_release(ag_saved *s)
{
    tensor_release(s->t);
    s->t = NULL;
    ck_frame *f = s->frame;
    if (f) {
        f->alive[s->holder] = false;
        tensor_release(f->recomputed[s->holder]);
        f->recomputed[s->holder] = NULL;
        s->frame = NULL;
        frame_release(f);
    }
}

/* _checkpoint_hook's unpack hook, the first time in a graph task: run fn(input) again with grad on. */
static oom_status frame_recompute(ck_frame *f)
{
    rt *r = f->r;
    f->recomputed_for = r->graph_task;
    f->counter = 0;
    ck_frame *pack = r->ck_pack, *recompute = r->ck_recompute;
    r->ck_pack = NULL; /* recompute as if no checkpoint were active (Rule 3) */
    r->ck_recompute = f;
    bool prev = rt_set_grad_enabled(r, true);
    bool outer = r->autocast;
    if (f->autocast && !outer)
        amp_autocast_enter(r, f->autocast_dtype);
    tensor *y = f->fn(f->ctx, f->input);
    if (f->autocast && !outer)
        amp_autocast_exit(r);
    rt_set_grad_enabled(r, prev);
    r->ck_pack = pack;
    r->ck_recompute = recompute;
    r->ck_stop = false;
    tensor_release(y); /* the recompute's own graph goes with it */
    if (!rt_ok(r))
        return r->status;
    if (f->counter != f->nholders)
        return rt_fail(r, OOM_EAUTOGRAD,
                       "torch.utils.checkpoint: A different number of tensors was saved during the original forward "
                       "and recomputation.\nNumber of tensors saved during forward: %d\nNumber of tensors saved "
                       "during recomputation: %d.",
                       f->nholders, f->counter);
    return OOM_OK;
}

/* ---- saved tensors --------------------------------------------------------------------------------- */

void ag_save(ag_node *n, int i, tensor *t, bool is_output)
{
    oom_assert(i >= 0 && i < AG_MAX_SAVED && !n->saved[i].defined);
    ag_saved *s = &n->saved[i];
    rt *r = n->rt;
    if (i >= n->nsaved)
        n->nsaved = i + 1;
    if (!t)
        return;
    s->defined = true;
    s->is_output = is_output;
    s->version = t->st->version;
    if (r->ck_pack) { /* inside a checkpoint's forward: a placeholder, not the tensor */
        s->frame = r->ck_pack;
        s->holder = frame_add_holder(r->ck_pack);
        OOM_VALIDATE("autograd node", ag_node_check, n);
        return;
    }
    if (r->ck_recompute && !r->ck_stop)
        frame_recomputed(r->ck_recompute, t);
    /* an output is saved without its grad_fn (this node), so the node does not own itself */
    s->t = is_output ? tensor_alias(t, t->offset, t->ndim, t->shape, t->transposed) : tensor_retain(t);
    OOM_VALIDATE("autograd node", ag_node_check, n);
}

/* A placeholder's tensor: recomputed on the first unpack of the graph task, then handed over to the slot. */
static tensor *unpack_placeholder(ag_saved *s, rt *r)
{
    ck_frame *f = s->frame;
    if (s->t)
        return s->t;
    if (f->recomputed_for != r->graph_task || r->graph_task == 0) {
        if (frame_recompute(f) != OOM_OK)
            return NULL;
    }
    s->t = f->recomputed[s->holder];
    f->recomputed[s->holder] = NULL;
    if (!s->t)
        rt_fail(r, OOM_EAUTOGRAD, "torch.utils.checkpoint: Unpack is being triggered for a tensor that was already "
                                  "unpacked once. If you are calling ctx.saved_tensors in backward, make sure to do so "
                                  "only once. Otherwise please open an issue with details on your use case.");
    return s->t; /* no version check: PyTorch checks versions only without hooks */
}

tensor *ag_unpack(ag_node *n, int i)
{
    oom_assert(i >= 0 && i < n->nsaved);
    OOM_VALIDATE("autograd node", ag_node_check, n);
    ag_saved *s = &n->saved[i];
    rt *r = n->rt;
    if (!s->defined)
        return NULL;
    if (s->frame)
        return unpack_placeholder(s, r);
    if (!s->t) {
        rt_fail(r, OOM_EAUTOGRAD, "%s", second_backward_msg);
        return NULL;
    }
    uint32_t now = s->t->st->version;
    if (now != s->version) {
        char shape[96], which[128] = "";
        const ag_node *producer = s->is_output ? n : s->t->grad_fn;
        /* A view whose base changed in place gets its grad_fn regenerated when it is read (VariableHooks::
         * grad_fn): PyTorch names AsStridedBackward0, not the view op, in this message. */
        const char *name = producer && !s->is_output && producer->fn->is_view ? "AsStridedBackward0"
                           : producer                                         ? producer->fn->name
                                                                              : NULL;
        if (name)
            snprintf(which, sizeof which, ", which is output %d of %s,", s->is_output ? 0 : s->t->output_nr, name);
        rt_fail(r, OOM_EAUTOGRAD,
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                "[%s %s]%s is at version %u; expected version %u instead. Hint: enable anomaly detection to find "
                "the operation that failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, "
                "check_nan=False).",
                tensor_type_str(s->t), tensor_shape_str(s->t, shape, sizeof shape), which, now, s->version);
        return NULL;
    }
    return s->t;
}

void ag_release_saved(ag_node *n)
{
    n->released = true;
    for (int i = 0; i < n->nsaved; i++)
        slot_release(&n->saved[i]);
    OOM_VALIDATE("autograd node", ag_node_check, n);
}

/* After a node ran with retain_graph: the recomputed tensors it unpacked go all the same (checkpoint.py's Rule 4);
 * the placeholders stay, for the next backward to recompute. */
static void drop_unpacked(ag_node *n)
{
    for (int i = 0; i < n->nsaved; i++) {
        if (n->saved[i].frame) {
            tensor_release(n->saved[i].t);
            n->saved[i].t = NULL;
        }
    }
}

/* ---- history --------------------------------------------------------------------------------------- */

void ag_set_history(tensor *out, ag_node *n)
{
    out->requires_grad = true;
    out->grad_fn = n;
    out->output_nr = 0;
    n->out_dtype = out->dt;
    OOM_VALIDATE("autograd node", ag_node_check, n);
    OOM_VALIDATE("tensor", tensor_check, out);
}

void ag_rebase_history(tensor *self, ag_node *n)
{
    ag_node *old = self->grad_fn;
    ag_set_history(self, n);
    ag_node_release(old); /* n's edge 0 holds it if it is still needed */
}

/* ---- AccumulateGrad -------------------------------------------------------------------------------- */

/* accumulate_grad.h: the first gradient becomes .grad, taken over when nothing else holds it (use_count <=
 * num_expected_refs, 1 without post hooks) and it obeys the layout contract, else cloned; taken over as
 * new_grad.detach(), so a view's base goes with the engine's reference (the storage stays); once .grad exists, with
 * grad mode off (backward without create_graph), later gradients are added in place, `variable_grad += new_grad`,
 * whatever else holds .grad (no use_count condition on that path). The engine drops the new gradient when this
 * returns, so while it is added both are held: the peak of a backward into existing gradients. */
void autograd_set_post_accumulate_hook(rt *r, oom_status (*hook)(void *ctx, tensor *leaf), void *ctx)
{
    r->post_acc_hook = hook;
    r->post_acc_ctx = hook ? ctx : NULL;
}

void autograd_set_pre_node_hook(rt *r, oom_status (*hook)(void *ctx, ag_node *node), void *ctx)
{
    r->pre_node_hook = hook;
    r->pre_node_ctx = hook ? ctx : NULL;
}

static oom_status accumulate_grad_run(ag_node *n, tensor *grad);

/* AccumulateGrad, then its post hook (the engine's call_function runs post hooks after the node's apply). */
static oom_status accumulate_grad_apply(ag_node *n, tensor *grad, tensor **grads)
{
    (void)grads;
    oom_status st = accumulate_grad_run(n, grad);
    if (st == OOM_OK && grad && n->rt->post_acc_hook)
        st = n->rt->post_acc_hook(n->rt->post_acc_ctx, n->variable);
    return st;
}

static oom_status accumulate_grad_run(ag_node *n, tensor *grad)
{
    tensor *var = n->variable;
    rt *r = n->rt;
    if (!grad)
        return OOM_OK;
    if (!var->grad) {
        /* take it over when the engine's buffer holds the only reference and it obeys the layout contract
         * (the leaf's own layout), as accumulate_grad.h does; else clone */
        if (grad->refcount == 1 && grad->transposed == var->transposed && grad->dt == var->dt &&
            tensor_same_shape(grad, var) && !grad->grad_fn) {
            var->grad = tensor_alias(grad, grad->offset, grad->ndim, grad->shape, grad->transposed);
        } else {
            var->grad = op_clone(grad);
            if (!var->grad)
                return r->status;
        }
    } else if (!op_add_(var->grad, grad, 1.0)) {
        return r->status;
    }
    oom_assert(var->grad->dt == var->dt); /* T7's dtype: the engine gives a leaf gradients of its own dtype */
    OOM_VALIDATE("tensor", tensor_check, var);
    return OOM_OK;
}

/* ---- the engine ------------------------------------------------------------------------------------ */

/* Per-backward state of a node, in an open-addressing map keyed by the node (the engine may be re-entered
 * by checkpointing, so nothing lives in the nodes themselves). */
typedef struct node_state {
    ag_node *node; /* NULL: empty slot */
    int deps;
    tensor *buffer;
    size_t order; /* when the engine first met the node: ties of seq (AccumulateGrad's) broken without addresses */
} node_state;

typedef struct graph_task {
    node_state *map;
    size_t mask;
    size_t count;
    ag_node **heap; /* ready nodes, max-heap by seq */
    size_t nheap, capheap;
} graph_task;

static size_t slot_of(const graph_task *g, const ag_node *n)
{
    uint64_t h = (uint64_t)(uintptr_t)n * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 17) & g->mask;
}

/* qsort order of node states: the highest seq (the newest node) first; equal seqs (every AccumulateGrad has the
 * largest) in the order the engine met them. */
static int state_newest_first(const void *a, const void *b)
{
    const node_state *p = a, *q = b;
    if (p->node->seq != q->node->seq)
        return p->node->seq < q->node->seq ? 1 : -1;
    return p->order < q->order ? -1 : p->order > q->order;
}

static node_state *state_find(graph_task *g, const ag_node *n)
{
    for (size_t i = slot_of(g, n);; i = (i + 1) & g->mask) {
        if (g->map[i].node == n)
            return &g->map[i];
        if (!g->map[i].node)
            return NULL;
    }
}

static node_state *state_insert(graph_task *g, ag_node *n)
{
    if ((g->count + 1) * 2 > g->mask + 1) {
        node_state *old = g->map;
        size_t oldn = g->mask + 1;
        g->mask = oldn * 2 - 1;
        g->map = xcalloc(oldn * 2, sizeof *g->map);
        for (size_t i = 0; i < oldn; i++) {
            if (!old[i].node)
                continue;
            size_t j = slot_of(g, old[i].node);
            while (g->map[j].node)
                j = (j + 1) & g->mask;
            g->map[j] = old[i];
        }
        free(old);
    }
    size_t i = slot_of(g, n);
    while (g->map[i].node)
        i = (i + 1) & g->mask;
    g->map[i] = (node_state){.node = n, .order = g->count};
    g->count++;
    return &g->map[i];
}

static void heap_push(graph_task *g, ag_node *n)
{
    if (g->nheap == g->capheap) {
        g->capheap = g->capheap ? g->capheap * 2 : 64;
        g->heap = realloc(g->heap, g->capheap * sizeof *g->heap);
        if (!g->heap) {
            fprintf(stderr, "oomlab: out of host memory\n");
            abort();
        }
    }
    size_t i = g->nheap++;
    while (i > 0 && g->heap[(i - 1) / 2]->seq < n->seq) {
        g->heap[i] = g->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    g->heap[i] = n;
}

#if OOM_DEBUG >= 3
/* The ready queue is a max-heap by seq: no node above a newer child (oom_assert_expensive: O(ready nodes)). */
static bool heap_ok(const graph_task *g)
{
    for (size_t i = 1; i < g->nheap; i++)
        if (g->heap[(i - 1) / 2]->seq < g->heap[i]->seq)
            return false;
    return true;
}
#endif

static ag_node *heap_pop(graph_task *g)
{
    oom_assert_expensive(heap_ok(g));
    ag_node *top = g->heap[0], *last = g->heap[--g->nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= g->nheap)
            break;
        if (c + 1 < g->nheap && g->heap[c + 1]->seq > g->heap[c]->seq)
            c++;
        if (g->heap[c]->seq <= last->seq)
            break;
        g->heap[i] = g->heap[c];
        i = c;
    }
    if (g->nheap)
        g->heap[i] = last;
    return top;
}

/* Count, for every node reachable from root, how many edges point at it (compute_dependencies). */
static void compute_dependencies(graph_task *g, ag_node *root)
{
    state_insert(g, root);
    ag_node *stack = root;
    root->link = NULL;
    while (stack) {
        ag_node *n = stack;
        stack = n->link;
        for (int i = 0; i < n->nnext; i++) {
            ag_node *m = n->next[i].fn;
            if (!m)
                continue;
            node_state *s = state_find(g, m);
            if (!s) {
                s = state_insert(g, m);
                m->link = stack;
                stack = m;
            }
            s->deps++;
        }
    }
}

/* InputBuffer::accumulate (input_buffer.cpp, can_accumulate_inplace): with grad mode off, add into the buffered
 * gradient when nothing else holds it (use_count 1) nor its storage (storage use_count 1: a view's base counts, so
 * the weight gradient mm_mat2_backward makes, (grad.t() @ mat1).t() and TBackward0's .t() of it, is summed out of
 * place while it lives), else add out of place. Takes var's reference. (PyTorch adds any dense layout in place;
 * oomlab's kernels need one, which the out-of-place path then refuses too.) The first gradient is moved in (*var
 * becomes NULL); a gradient added stays the caller's, as the node's outputs hold it until the engine drops them
 * all, after passing them on; `buffer[pos] = old_var + var` drops the old buffer at once. */
static oom_status buffer_add(node_state *s, tensor **var)
{
    tensor *old = s->buffer, *v = *var;
    if (!old) {
        s->buffer = v;
        *var = NULL;
        return OOM_OK;
    }
    if (old->refcount == 1 && old->st->refcount == 1 && old->transposed == v->transposed &&
        tensor_same_shape(old, v))
        return op_add_(old, v, 1.0) ? OOM_OK : old->rt->status;
    tensor *sum = op_add(old, v, 1.0);
    if (!sum)
        return old->rt->status;
    s->buffer = sum;
    tensor_release(old);
    return OOM_OK;
}

static oom_status run_backward(ag_node *root, tensor *root_grad, bool retain_graph)
{
    graph_task g = {.mask = 63};
    g.map = xcalloc(64, sizeof *g.map);
    compute_dependencies(&g, root);
    state_find(&g, root)->buffer = root_grad;
    heap_push(&g, root);
    oom_status st = OOM_OK;
    while (g.nheap && st == OOM_OK) {
        ag_node *n = heap_pop(&g);
        node_state *ns = state_find(&g, n);
        tensor *grad = ns->buffer;
        ns->buffer = NULL;
        tensor *grads[AG_MAX_NEXT] = {0};
        if (grad && n->rt->pre_node_hook) /* call_tensor_pre_hooks */
            st = n->rt->pre_node_hook(n->rt->pre_node_ctx, n);
        if (grad && st == OOM_OK) /* a node that got no gradient at all has nothing to pass on */
            st = n->fn->apply(n, grad, grads);
        tensor_release(grad);
        if (!retain_graph && st == OOM_OK)
            ag_release_saved(n);
        else
            drop_unpacked(n);
        for (int i = 0; i < n->nnext; i++) {
            ag_node *m = n->next[i].fn;
            if (!m || st != OOM_OK)
                continue;
            node_state *ms = state_find(&g, m);
            if (grads[i])
                st = buffer_add(ms, &grads[i]);
            if (--ms->deps == 0)
                heap_push(&g, m);
        }
        for (int i = 0; i < n->nnext; i++) /* evaluate_function's outputs go when it returns */
            tensor_release(grads[i]);
    }
    /* Left over only after a failure: released newest node first (state_newest_first), not in the map's slot
     * order, which follows the nodes' host addresses and made the allocator's splits differ from run to run
     * (retained_graph's myth-retain-graph-with-sgd: inactive_split.all.allocated 15, 16 or 17). */
    size_t left = 0;
    for (size_t i = 0; i <= g.mask; i++)
        if (g.map[i].buffer)
            g.map[left++] = g.map[i];
    qsort(g.map, left, sizeof *g.map, state_newest_first);
    for (size_t i = 0; i < left; i++)
        tensor_release(g.map[i].buffer);
    free(g.map);
    free(g.heap);
    return st;
}

oom_status autograd_backward(tensor *root, tensor *grad, bool retain_graph)
{
    if (!root)
        return OOM_EINVAL;
    rt *r = root->rt;
    if (!rt_ok(r))
        return r->status;
    if (!root->requires_grad)
        return rt_fail(r, OOM_EAUTOGRAD, "element 0 of tensors does not require grad and does not have a grad_fn");
    tensor *g;
    if (!grad) {
        if (tensor_numel(root) != 1)
            return rt_fail(r, OOM_EAUTOGRAD, "grad can be implicitly created only for scalar outputs");
        g = tensor_full(r, root->dt, root->ndim, root->shape, 1.0); /* torch.ones_like(output) */
        if (!g)
            return r->status;
    } else {
        if (!tensor_same_shape(grad, root)) {
            char a[64], b[64];
            return rt_fail(r, OOM_EINVAL, "Mismatch in shape: grad_output[0] has a shape of %s and output[0] has a "
                                          "shape of %s.",
                           tensor_shape_str(grad, a, sizeof a), tensor_shape_str(root, b, sizeof b));
        }
        if (grad->dt != root->dt)
            return rt_fail(r, OOM_EINVAL, "backward: the gradient is %s but the output is %s", dtype_str(grad->dt),
                           dtype_str(root->dt));
        g = tensor_retain(grad);
    }
    ag_node *node = root->grad_fn ? ag_node_retain(root->grad_fn) : grad_accumulator(root);
    OOM_VALIDATE("autograd graph", autograd_graph_check, node);
    /* the caller's gradient list (torch.autograd.backward's grad_tensors) holds the seed until backward returns */
    tensor *held = tensor_retain(g);
    bool prev = rt_set_grad_enabled(r, false); /* create_graph = false */
    uint64_t outer_task = r->graph_task;
    r->graph_task = ++r->graph_tasks; /* a graph task of its own, as a nested backward gets one */
    oom_status st = run_backward(node, g, retain_graph);
    r->graph_task = outer_task;
    rt_set_grad_enabled(r, prev);
    tensor_release(held);
    ag_node_release(node);
    return st;
}

/* ---- checkpointing --------------------------------------------------------------------------------- */

typedef struct checkpoint_ctx {
    ag_checkpoint_fn fn;
    void *ctx;
    bool autocast; /* the forward's autocast state, restored for the recompute (CheckpointFunction does) */
    dtype autocast_dtype;
} checkpoint_ctx;

/* CheckpointFunction.backward: recompute the segment from the saved input with grad on, backpropagate the
 * incoming gradient through it (parameters accumulate their .grad there), return the input's gradient. */
static oom_status checkpoint_apply(ag_node *n, tensor *grad, tensor **grads)
{
    rt *r = n->rt;
    checkpoint_ctx *c = n->ctx;
    tensor *x = ag_unpack(n, 0);
    if (!x)
        return r->status;
    tensor *xd = tensor_detach(x);
    if (!xd)
        return r->status;
    xd->requires_grad = n->next[0].fn != NULL;
    bool prev = rt_set_grad_enabled(r, true);
    bool outer = r->autocast;
    if (c->autocast && !outer)
        amp_autocast_enter(r, c->autocast_dtype);
    tensor *y = c->fn(c->ctx, xd);
    if (c->autocast && !outer)
        amp_autocast_exit(r);
    rt_set_grad_enabled(r, prev);
    oom_status st = !y ? r->status : y->requires_grad ? autograd_backward(y, grad, false) : OOM_OK;
    /* (a segment that needs no gradient at all gives none) */
    tensor_release(y);
    if (st == OOM_OK && n->next[0].fn) {
        grads[0] = xd->grad;
        xd->grad = NULL;
    }
    tensor_release(xd);
    return st;
}

static const ag_fn checkpoint_fn = {"CheckpointFunctionBackward", checkpoint_apply, false};

tensor *autograd_checkpoint(ag_checkpoint_fn fn, void *ctx, tensor *x)
{
    if (!x || !rt_ok(x->rt))
        return NULL;
    rt *r = x->rt;
    bool record = r->grad_enabled; /* the segment's parameters need gradients even when x does not */
    tensor *y;
    RT_NO_GRAD(r) { y = fn(ctx, x); }
    if (!y || !record)
        return y;
    ag_node *n = ag_node_new(r, &checkpoint_fn, 1, &x);
    checkpoint_ctx *c = xcalloc(1, sizeof *c);
    c->fn = fn;
    c->ctx = ctx;
    c->autocast = r->autocast;
    c->autocast_dtype = r->autocast_dtype;
    n->ctx = c;
    n->ctx_free = free;
    ag_save(n, 0, x, false);
    ag_set_history(y, n);
    return y;
}

/* ---- non-reentrant checkpointing ------------------------------------------------------------------------- */

tensor *autograd_checkpoint_nr(ag_checkpoint_fn fn, void *ctx, tensor *x)
{
    if (!x || !rt_ok(x->rt))
        return NULL;
    rt *r = x->rt;
    if (!r->grad_enabled) /* "if not torch.is_grad_enabled(): yield; return": fn runs as it is */
        return fn(ctx, x);
    if (r->ck_pack || r->ck_recompute) {
        rt_fail(r, OOM_EINVAL, "checkpoint(use_reentrant=False) inside another one: nesting is not modelled");
        return NULL;
    }
    ck_frame *f = xcalloc(1, sizeof *f);
    f->r = r;
    f->refcount = 1; /* the forward's, until fn returns */
    f->fn = fn;
    f->ctx = ctx;
    f->input = tensor_retain(x); /* frame.save_inputs(*args) */
    f->autocast = r->autocast;
    f->autocast_dtype = r->autocast_dtype;
    r->ck_pack = f;
    tensor *y = fn(ctx, x);
    r->ck_pack = NULL;
    frame_release(f); /* the placeholders keep it, and x, alive */
    return y;
}

/* ---- validators (autograd.h: A1-A7 and the graph) ------------------------------------------------------ */

oom_status ag_node_check(const ag_node *n, bool expensive, char *why, size_t cap)
{
    OOM_REQUIRE(n && n->fn && n->rt, why, cap, "A1: no node, or no fn or rt behind it");
    const char *name = n->fn->name;
    OOM_REQUIRE(n->refcount >= 1, why, cap, "A1: %s with refcount %d", name, n->refcount);
    OOM_REQUIRE(n->nnext >= 0 && n->nnext <= AG_MAX_NEXT && n->nsaved >= 0 && n->nsaved <= AG_MAX_SAVED, why, cap,
                "A2: %s with %d next edges and %d saved slots", name, n->nnext, n->nsaved);
    for (int i = n->nnext; i < AG_MAX_NEXT; i++)
        OOM_REQUIRE(!n->next[i].fn, why, cap, "A2: %s has edge %d past its %d", name, i, n->nnext);
    for (int i = n->nsaved; i < AG_MAX_SAVED; i++)
        OOM_REQUIRE(!n->saved[i].t && !n->saved[i].frame, why, cap, "A2: %s holds slot %d past its %d", name, i,
                    n->nsaved);
    bool acc = n->fn == &accumulate_grad_fn;
    OOM_REQUIRE(acc == (n->variable != NULL), why, cap, "A3: %s %s a variable", name, acc ? "without" : "with");
    if (acc) {
        OOM_REQUIRE(n->variable->grad_acc == n && !n->variable->grad_fn, why, cap,
                    "A3: AccumulateGrad's variable is no leaf pointing back at it");
        OOM_REQUIRE(n->nnext == 0 && n->seq == UINT64_MAX, why, cap,
                    "A3: AccumulateGrad with %d next edges and seq %llu", n->nnext, (unsigned long long)n->seq);
    } else {
        OOM_REQUIRE(n->seq < n->rt->next_seq, why, cap, "A3: %s has seq %llu, not below the rt's next %llu", name,
                    (unsigned long long)n->seq, (unsigned long long)n->rt->next_seq);
    }
    for (int i = 0; i < n->nnext; i++) {
        const ag_node *m = n->next[i].fn;
        OOM_REQUIRE(!m || m->fn == &accumulate_grad_fn || m->seq < n->seq, why, cap,
                    "A4: %s (seq %llu) has edge %d to %s (seq %llu), not older", name, (unsigned long long)n->seq, i,
                    m->fn->name, (unsigned long long)m->seq);
    }
    for (int i = 0; i < n->nsaved; i++) {
        const ag_saved *s = &n->saved[i];
        OOM_REQUIRE(!n->released || (!s->t && !s->frame), why, cap, "A5: %s is released and holds slot %d", name, i);
        OOM_REQUIRE(s->defined || (!s->t && !s->frame), why, cap, "A6: %s's slot %d holds data and is undefined",
                    name, i);
        if (s->frame)
            OOM_REQUIRE(s->holder >= 0 && s->holder < s->frame->nholders && s->frame->alive[s->holder], why, cap,
                        "A6: %s's slot %d is placeholder %d of a checkpoint with %d, or a dead one", name, i,
                        s->holder, s->frame->nholders);
        if (s->t) {
            OOM_REQUIRE(s->t->grad_fn != n, why, cap, "A6: %s saves a tensor whose grad_fn is itself", name);
            char sub[160];
            if (expensive && tensor_check(s->t, false, sub, sizeof sub) != OOM_OK)
                return snprintf(why, cap, "A7: %s's saved slot %d: %s", name, i, sub), OOM_ECORRUPT;
        }
    }
    return OOM_OK;
}

oom_status autograd_graph_check(const ag_node *root, bool expensive, char *why, size_t cap)
{
    oom_status st = ag_node_check(root, expensive, why, cap);
    if (st != OOM_OK)
        return st;
    /* a depth-first walk with a visited set of its own: the nodes' link fields belong to the teardown */
    size_t mask = 63, count = 0, nstack = 0, capstack = 64;
    const ag_node **seen = xcalloc(mask + 1, sizeof *seen);
    const ag_node **stack = xcalloc(capstack, sizeof *stack);
    stack[nstack++] = root;
    seen[((uintptr_t)root * 0x9E3779B97F4A7C15ULL >> 17) & mask] = root;
    count = 1;
    while (nstack && st == OOM_OK) {
        const ag_node *n = stack[--nstack];
        st = ag_node_check(n, expensive, why, cap);
        for (int i = 0; st == OOM_OK && i < n->nnext; i++) {
            const ag_node *m = n->next[i].fn;
            if (!m)
                continue;
            size_t j = ((uintptr_t)m * 0x9E3779B97F4A7C15ULL >> 17) & mask;
            while (seen[j] && seen[j] != m)
                j = (j + 1) & mask;
            if (seen[j])
                continue;
            seen[j] = m;
            if (++count * 2 > mask + 1) { /* grow the set */
                const ag_node **old = seen;
                size_t oldn = mask + 1;
                mask = oldn * 2 - 1;
                seen = xcalloc(mask + 1, sizeof *seen);
                for (size_t k = 0; k < oldn; k++) {
                    if (!old[k])
                        continue;
                    size_t h = ((uintptr_t)old[k] * 0x9E3779B97F4A7C15ULL >> 17) & mask;
                    while (seen[h])
                        h = (h + 1) & mask;
                    seen[h] = old[k];
                }
                free(old);
            }
            if (nstack == capstack) {
                capstack *= 2;
                const ag_node **grown = realloc(stack, capstack * sizeof *stack);
                if (!grown) {
                    fprintf(stderr, "oomlab: out of host memory\n");
                    abort();
                }
                stack = grown;
            }
            stack[nstack++] = m;
        }
    }
    free(seen);
    free(stack);
    if (st == OOM_OK && count > root->rt->live_nodes)
        st = (snprintf(why, cap, "graph: %zu nodes reachable from %s, more than the rt's %zu live ones", count,
                       root->fn->name, root->rt->live_nodes),
              OOM_ECORRUPT);
    return st;
}

tensor *autograd_checkpoint_sequential(ag_checkpoint_fn run, void *owner, ag_segment *segs, int nfun, int nseg,
                                       bool reentrant, const char *what, tensor *x)
{
    if (!x || !rt_ok(x->rt))
        return NULL;
    if (nseg < 1 || nseg > nfun) {
        rt_fail(x->rt, OOM_EINVAL, "range() arg 3 must not be zero (checkpoint_sequential: %d segments of %d %s)",
                nseg, nfun, what);
        return NULL;
    }
    const int size = nfun / nseg; /* segment_size = len(functions) // segments */
    tensor *h = tensor_retain(x);
    int first = 0;
    for (int k = 0; k < nseg - 1 && h; k++, first += size) {
        segs[k] = (ag_segment){owner, first, first + size};
        tensor_assign(&h, reentrant ? autograd_checkpoint(run, &segs[k], h) : autograd_checkpoint_nr(run, &segs[k], h));
    }
    ag_segment last = {owner, first, nfun};
    if (h)
        tensor_assign(&h, run(&last, h));
    return h;
}
