/* autograd.h - the graph that backward walks, the tensors it saves, and the engine.
 *
 * As in PyTorch (torch/csrc/autograd): an op on tensors that require grad, with grad mode on, creates a node
 * (its grad_fn, e.g. "AddmmBackward0") whose next edges point at the nodes of its inputs: their grad_fn, or for
 * a leaf its AccumulateGrad node. The node saves exactly the tensors PyTorch's derivatives.yaml formula needs
 * (ops.c lists them per op). The output holds its grad_fn, each node holds its next nodes, and AccumulateGrad
 * holds its leaf, so a tensor keeps its whole history alive, and with it every saved activation: that is how a
 * graph leaks. Dropping the last reference frees the saved tensors.
 *
 * A saved tensor remembers the version of its storage (tensor.h). Unpacking it in backward checks that the
 * version has not moved and that the graph has not been freed, with PyTorch's messages:
 *   "Trying to backward through the graph a second time (or directly access saved tensors after they have
 *    already been freed). ..."
 *   "one of the variables needed for gradient computation has been modified by an inplace operation: [...]"
 * A saved output of the node itself is kept without its grad_fn, as SavedVariable does, so a node never owns
 * itself.
 *
 * backward(root, grad, retain_graph) runs nodes in dependency order (ready nodes by decreasing sequence
 * number, as PyTorch's ready queue does), sums the gradients that meet at a node, frees each node's saved
 * tensors after it ran unless retain_graph, and accumulates into leaves' .grad the PyTorch way: the first
 * gradient is taken over when nothing else holds it (else cloned), later ones are added in place.
 */
#ifndef OOMLAB_AUTOGRAD_H
#define OOMLAB_AUTOGRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/compat.h"
#include "runtime/runtime.h"
#include "core/status.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

#define AG_MAX_NEXT 5  /* _thnn_fused_gru_cell: input_gates, hidden_gates, hx, input_bias, hidden_bias */
#define AG_MAX_SAVED 6 /* ... and its workspace (result1) */

typedef struct ag_node ag_node;

/* The backward formula of a node: given grad (the gradient of the node's output; borrowed), write into
 * grads[i] a new reference to the gradient for next edge i, or NULL, for every i < nnext whose edge is set.
 * Return OOM_OK, or the failure already recorded in the rt. */
typedef oom_status (*ag_apply_fn)(ag_node *n, tensor *grad, tensor **grads);

typedef struct ag_fn {
    const char *name; /* PyTorch's class name: "AddmmBackward0", "ReluBackward0", "AccumulateGrad", ... */
    ag_apply_fn apply;
    bool is_view; /* the node of a view op (t, view, narrow): see ag_unpack's message */
} ag_fn;

typedef struct ag_edge {
    ag_node *fn; /* owned reference; NULL: this input needs no gradient */
    int input_nr;
} ag_edge;

/* A saved tensor (SavedVariable). Inside a non-reentrant checkpoint's forward the slot keeps no tensor, only a
 * placeholder (frame, holder): unpacking it recomputes the checkpointed segment (autograd_checkpoint_nr). */
typedef struct ag_saved {
    tensor *t;        /* owned; NULL once released (or never saved, or a placeholder not unpacked) */
    uint32_t version; /* the storage version when saved */
    bool defined;     /* a tensor was saved in this slot */
    bool is_output;   /* saved output of this node: kept without grad_fn */
    struct ck_frame *frame; /* a placeholder's checkpoint (a reference), else NULL */
    int holder;             /* which of frame's placeholders */
} ag_saved;

/* Invariants (ag_node_check; checked builds run it where a node is made, saves, unpacks, releases or takes an
 * output, and autograd_graph_check on the whole graph when backward starts):
 *   A1  fn and rt are set; refcount >= 1 while referenced (by a tensor's grad_fn, another node's edge, the engine);
 *   A2  0 <= nnext <= AG_MAX_NEXT and 0 <= nsaved <= AG_MAX_SAVED; the edges and slots past them are empty;
 *   A3  variable != NULL exactly for AccumulateGrad nodes, and then variable->grad_acc == this node, the variable
 *       is a leaf, the node has no next edges and the largest sequence number (UINT64_MAX); every other node's
 *       seq is below rt->next_seq;
 *   A4  every next edge points at an older node (a smaller seq) or at an AccumulateGrad: the graph is acyclic, as
 *       PyTorch's sequence numbers make it;
 *   A5  released implies every saved slot is empty (no tensor, no placeholder);
 *   A6  a slot holding a tensor or a placeholder is defined; a placeholder's frame has that holder, still alive;
 *       a saved output is kept without its grad_fn (no node owns itself);
 *   A7  (expensive) every saved tensor holds tensor_check's cheap invariants.
 * The graph (autograd_graph_check): A1-A6 at every node reachable from the root, and no more of them than the
 * rt's live_nodes. */
struct ag_node {
    const ag_fn *fn;
    rt *rt;
    int refcount;
    uint64_t seq;
    int nnext;
    ag_edge next[AG_MAX_NEXT];
    int nsaved;
    ag_saved saved[AG_MAX_SAVED];
    bool released;
    tensor *variable; /* AccumulateGrad: the leaf (owned) */
    /* what the formula needs besides saved tensors (PyTorch saves these as plain values) */
    dtype in_dtype, out_dtype;
    int in_ndim;
    int64_t in_shape[TENSOR_MAX_DIMS];
    int64_t iparam[2];
    double fparam[2];
    /* custom nodes (checkpoint): a context and its destructor */
    void *ctx;
    void (*ctx_free)(void *ctx);
    ag_node *link; /* the teardown worklist */
};

/* Grad mode is on and some input requires grad: the op must record a node. NULL inputs are skipped. A predicate. */
bool ag_any_requires_grad(rt *r, int n, tensor *const *inputs);

/* A node for an op, with next edges for inputs[0..n) (NULL inputs, or inputs that need no grad, get none). Never
 * NULL (host bookkeeping aborts). */
ag_node *ag_node_new(rt *r, const ag_fn *fn, int n, tensor *const *inputs);
ag_node *ag_node_retain(ag_node *n); /* NULL: returns NULL; cannot fail */
/* Drop a reference. Frees the node, its saved tensors and (transitively) what only it kept alive; iterative,
 * so a graph chained over many steps is freed without deep recursion. */
void ag_node_release(ag_node *n);

/* Save t in slot i (is_output: t is this node's output). Cannot fail. */
void ag_save(ag_node *n, int i, tensor *t, bool is_output);
/* The tensor saved in slot i, borrowed, or NULL with the autograd error recorded in the rt. */
tensor *ag_unpack(ag_node *n, int i);
/* Free the saved tensors (a backward without retain_graph did it). Cannot fail. */
void ag_release_saved(ag_node *n);

/* Make out the output of n (out->grad_fn = n, taking the caller's reference to n). Cannot fail. */
void ag_set_history(tensor *out, ag_node *n);
/* In-place op on self recorded by n: self's history moves to n (rebase_history). Takes the reference to n. Cannot
 * fail. */
void ag_rebase_history(tensor *self, ag_node *n);

/* The engine: tensor.backward(gradient=grad, retain_graph). grad NULL: ones for a one-element root. On failure the
 * first failure's status, recorded in the rt (an OOM, OOM_EAUTOGRAD with PyTorch's message); OOM_EINVAL for a
 * NULL root. */
oom_status autograd_backward(tensor *root, tensor *grad, bool retain_graph);

/* torch.utils.checkpoint(fn, x) (reentrant variant): run fn under no_grad now, keeping only x; in backward,
 * recompute fn(x) with grad on and backpropagate through the recomputed segment. fn returns a new reference. NULL
 * on failure (recorded in the rt) or for a NULL x. */
typedef tensor *(*ag_checkpoint_fn)(void *ctx, tensor *x);
tensor *autograd_checkpoint(ag_checkpoint_fn fn, void *ctx, tensor *x);
/* torch.utils.checkpoint(fn, x, use_reentrant=False), as torch/utils/checkpoint.py does it:
 *   forward: fn runs with grad on and records its graph, but every tensor a node would save is replaced by a
 *     placeholder (_checkpoint_hook's pack hook); the checkpoint keeps x (frame.save_inputs) as long as any
 *     placeholder lives;
 *   backward: the first placeholder unpacked recomputes fn(x) with grad on (under the forward's autocast),
 *     filling the placeholders in order, and stops as soon as the last one is filled (early stop: an op that
 *     saves only inputs stops before computing its output); each recomputed tensor is handed over when unpacked
 *     and freed when its node has run, even with retain_graph (a later backward recomputes again).
 * Without grad mode it is fn(x). One level: checkpoints do not nest. fn returns a new reference, and must return
 * NULL when an op gives NULL (the early stop ends it that way). NULL on failure, recorded in the rt (OOM_EINVAL when
 * nested in another). */
tensor *autograd_checkpoint_nr(ag_checkpoint_fn fn, void *ctx, tensor *x);

/* A run of a sequence's functions [first, end), the context of a checkpointed segment (owner: whose functions). */
typedef struct ag_segment {
    void *owner;
    int first, end;
} ag_segment;

/* torch.utils.checkpoint.checkpoint_sequential(functions, nseg, x): nfun functions cut into segments of
 * nfun / nseg (the last takes the rest), every segment but the last under checkpoint (autograd_checkpoint when
 * reentrant, else autograd_checkpoint_nr), the last run plainly; run(segment, x) runs one segment, and `input` (the
 * running h) holds each segment's input until the segment returns. segs (nseg - 1 entries, the caller's) are the
 * checkpoint nodes' contexts, so they must outlive the backward. nseg > nfun fails as range() does (OOM_EINVAL,
 * "range() arg 3 must not be zero", `what` naming the functions). Returns a new reference, NULL on failure. */
tensor *autograd_checkpoint_sequential(ag_checkpoint_fn run, void *owner, ag_segment *segs, int nfun, int nseg,
                                       bool reentrant, const char *what, tensor *x);

/* A post hook on every parameter's AccumulateGrad node of r (NULL removes it): called with the leaf once its .grad
 * holds the new gradient, as DDP's Reducer registers its autograd_hook on each parameter's grad accumulator
 * (add_post_hook). The hook may replace leaf->grad (the reducer points it into a bucket). A failure it returns stops
 * the backward as an op's would. */
void autograd_set_post_accumulate_hook(rt *r, oom_status (*hook)(void *ctx, tensor *leaf), void *ctx);
/* A hook called before each node of r's backward runs (with its gradient in hand; NULL removes it), where a
 * Tensor.register_hook on one of the node's outputs runs in PyTorch (the engine's call_tensor_pre_hooks): FSDP2
 * registers its pre-backward unshard that way on each module's outputs. The hook picks its nodes by identity
 * (tensor->grad_fn); a failure it returns stops the backward as an op's would. */
void autograd_set_pre_node_hook(rt *r, oom_status (*hook)(void *ctx, ag_node *node), void *ctx);

/* ---- validators (core/check.h) ---- */
/* Invariants A1-A7 above of one node: OOM_OK, or OOM_ECORRUPT with the broken one named in why[cap]. Touches no
 * error record. */
oom_status ag_node_check(const ag_node *n, bool expensive, char *why, size_t cap);
/* Every node reachable from root through next edges (A1-A6, A7 with expensive) and their count against the rt's
 * live_nodes. O(nodes); OOM_OK or OOM_ECORRUPT as ag_node_check. */
oom_status autograd_graph_check(const ag_node *root, bool expensive, char *why, size_t cap);

OOM_END_DECLS

#endif
