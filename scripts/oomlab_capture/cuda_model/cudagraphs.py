"""CUDA graphs under the capture: torch.compile mode="reduce-overhead" (torch/_inductor/cudagraph_trees.py), with
the memory the cudagraph trees make, and no graph ever captured.

Inductor decides as on the GPU which compiled graphs become CUDA graphs and which of their inputs are static
(compile_fx.cudagraphify, output_code.py cudagraph_post_compile); `_Tree` stands for the tree that runs them
(CUDAGraphTreeManager), put in place of cudagraph_trees.cudagraphify:
- The tree is made at the first graph's first run. torch.cuda.graph's __enter__ empties the cache, and its empty
  capture registers the default generator: a seed and an offset of 8 bytes each (CUDAGeneratorState::register_graph,
  seed_extragraph_ and offset_extragraph_), on the tree's own stream in the default pool, kept for the process.
- Every warm-up and capture allocates on the tree's stream (STREAM) in its private pool (POOL: graph_pool_handle),
  and cuBLAS's workspaces are cleared before and after (clear_cublas_manager).
- A function's first run, and any run in a generation that began with warm-ups, is a warm-up (CUDAWarmupNode: the
  compiled code as it is). Otherwise the node recorded for it at this point of the generation's path is replayed:
  nothing is allocated, and the outputs live in the pool, counted nowhere. Where there is none, it is recorded
  (CUDAGraphNode): its non-static tensor inputs are copied into the pool (static_input), torch.cuda.graph's
  __enter__ empties the cache, and the compiled code runs captured; its outputs are pool blocks the program holds.
- A new generation (a new torch.compile invocation with no forward waiting for its backward: GenerationTracker)
  after warm-ups or a recording frees the outputs of that path the program still holds
  (dealloc_current_path_weakrefs).
Said in the report instead: a second path recorded while a replayed path's outputs live (the tree checkpoints the
pool's state: apply_checkpoint_execution_state_in_allocator; recorded here as if the pool were as the path left
it).
"""
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import cublas

STREAM = 1  # the tree's stream (CUDAGraphTreeManager.stream): the trace's stream 1
POOL = 1    # its private pool (graph_pool_handle(): (0, 1) in a process that makes no other)
SOURCE = "torch/_inductor/cudagraph_trees.py CUDAGraphTreeManager (warm-up, record and replay in its private pool)"


def _storage(t):
    return t.untyped_storage()._cdata  # the StorageImpl: a meta storage's data pointer is null


def _storages(xs):
    return frozenset(_storage(x) for x in xs if isinstance(x, torch.Tensor))


def _generation():
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager
    return CUDAGraphTreeManager.get_curr_generation()


class _Function:
    """One cudagraphified callable (WrappedFunction): the compiled code, its static inputs and its mode."""

    def __init__(self, tree, model, static_input_idxs, mode):
        self.tree = tree
        self.model = model
        self.static = set(static_input_idxs)
        self.mode = mode  # "forward", "backward", "inference"
        self.id = len(tree.functions)
        tree.functions.append(self)

    def __call__(self, inputs):
        return self.tree.run(self, inputs)


class _Tree:
    """The cudagraph tree of one device: its path in this generation, the recorded nodes, the warmed functions."""

    def __init__(self, cap):
        self.cap = cap
        self.functions = []
        self.warmed = set()
        self.recorded = set()   # paths (tuples of function ids from the root) with a recorded node
        self.path = []          # the current path: (function id, kind "warmup"|"record"|"replay", output refs)
        self.state = "none"     # path_state: none, warmup, recording, execution
        self.gen = None
        self.pending_backward = False
        # CUDAGraphTreeManager.__init__: torch.cuda.graph(self.graph, pool, stream) with nothing inside
        cap.empty_cache()
        was = cap.set_context(STREAM, 0)
        try:
            self.generator_state = [torch.empty(1, dtype=torch.int64, device="meta") for _ in range(2)]
        finally:
            cap.set_context(*was)

    # -- the manager's run: CUDAGraphTreeManager.run / _run -------------------------------------------------------
    def run(self, fn, inputs):
        new_gen = self.gen != _generation() and not self.pending_backward  # can_start_new_generation
        if self.state in ("warmup", "recording"):  # try_end_curr_warmup / try_end_curr_recording
            if new_gen:
                self._dealloc_path()
                self._clear()
            elif self._outputs_dead():
                self._clear()
        if fn.id not in self.warmed or self.state == "warmup":
            out = self._warmup(fn, inputs)
        else:
            key = tuple(f for f, _, _ in self.path) + (fn.id,)
            if self.state == "execution" and key not in self.recorded and (fn.id,) in self.recorded and \
                    (new_gen or self._outputs_dead()):
                self._clear()  # try_end_curr_execution: the root again
                key = (fn.id,)
            if self.state != "recording" and key in self.recorded:
                out = self._replay(fn, inputs)
            else:
                if self.state == "execution" and self.path:
                    self.cap.count_unmodelled("torch.compile CUDA graph recorded beside a replayed path (the tree "
                                              "checkpoints its pool's state: apply_checkpoint_execution_state_in_"
                                              "allocator)", SOURCE)
                out = self._record(fn, inputs, key)
        self.gen = _generation()  # update_generation
        if fn.mode == "forward":
            self.pending_backward = True
        elif fn.mode == "backward":
            self.pending_backward = False
        return out

    def _clear(self):
        self.path = []
        self.state = "none"

    def _live(self, kinds=("warmup", "record", "replay")):
        """path_live_weakrefs: the storages of the path's outputs still alive (the storage, not the tensor: an
        output lives on in any view of it)."""
        return [r for _, kind, refs in self.path if kind in kinds for r in refs if not r.expired()]

    def _outputs_dead(self):
        return not self._live()  # all_outputs_are_dead

    def _dealloc_path(self):
        """dealloc_current_path_weakrefs: the warm-up's or recording's outputs still held lose their memory
        (torch._C._free_And_Remove_DeleterFn)."""
        for r in self._live(("warmup", "record")):
            st = torch.UntypedStorage._new_with_weak_ptr(r.cdata)
            self.cap.ext.free_now(torch.empty(0, dtype=torch.uint8, device="meta").set_(st))

    def _track(self, fn, kind, out, inputs=frozenset()):
        """The node's outputs the tree follows, one per storage: not those over an input's storage (a view of a
        parameter saved for the backward: add_ref's non_cudagraph_inps_storage_ptrs, _add_first_outputs' static
        outputs)."""
        refs, seen = [], set(inputs)
        for o in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(o, torch.Tensor) and _storage(o) not in seen:
                seen.add(_storage(o))
                refs.append(StorageWeakRef(o.untyped_storage()))
        self.path.append((fn.id, kind, refs))

    # -- the three ways a function runs ---------------------------------------------------------------------------
    def _in_pool(self, call):
        """call() as a warm-up or a capture runs: cuBLAS cleared around it, allocations on the tree's stream in its
        pool (clear_cublas_manager, _use_cuda_memory_pool_manager or torch.cuda.graph)."""
        cublas.clear(self.cap)
        was = self.cap.set_context(STREAM, POOL)
        try:
            return call()
        finally:
            self.cap.set_context(*was)
            cublas.clear(self.cap)

    def _warmup(self, fn, inputs):
        """CUDAWarmupNode.run."""
        self.warmed.add(fn.id)
        self.state = "warmup"
        ins = _storages(inputs)
        out = self._in_pool(lambda: fn.model(inputs))
        self._track(fn, "warmup", out, ins)
        return out

    def _record(self, fn, inputs, key):
        """CUDAGraphNode: _allocate_and_copy_recording_inputs, then _record under torch.cuda.graph."""
        managed = {r.cdata for r in self._live()}  # _is_cuda_graph_recorded_tensor: the path's outputs, no copy
        ins = _storages(inputs)
        was = self.cap.set_context(STREAM, POOL)
        try:
            rec = [torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
                   if isinstance(x, torch.Tensor) and i not in fn.static and _storage(x) not in managed
                   else x for i, x in enumerate(inputs)]
        finally:
            self.cap.set_context(*was)
        inputs.clear()
        self.state = "recording"
        cublas.clear(self.cap)  # clear_cublas_manager's enter, then the graph's own empty_cache
        self.cap.empty_cache()
        out = self._in_pool(lambda: fn.model(rec))
        del rec
        self.recorded.add(key)
        self._track(fn, "record", out, ins)
        return out

    def _replay(self, fn, inputs):
        """CUDAGraphNode.run: the graph replayed. Its outputs are tensors over the pool's memory that no allocation
        owns (reconstruct_outputs), so the compiled code runs with nothing recorded and the CUDA path's own
        allocations (workspaces) left out; the inputs are let go as the replay lets them go."""
        saved = self.cap.state.get("cublas")
        saved = {k: dict(v) for k, v in saved.items()} if saved else None
        was = self.cap.ext.pause(True)
        self.cap.dry += 1
        try:
            out = fn.model(inputs)
        finally:
            self.cap.dry -= 1
            self.cap.ext.pause(was)
            if saved is not None:
                self.cap.state["cublas"] = saved
        self.state = "execution"
        self._track(fn, "replay", out)
        return out


def cudagraphify(cap, model, inputs, static_input_idxs, *, is_backward, is_inference, **_):
    """cudagraph_trees.cudagraphify: the function added to the device's tree, and its first run's outputs."""
    tree = cap.state.get("cudagraph_tree")
    if tree is None:
        tree = cap.state["cudagraph_tree"] = _Tree(cap)
    fn = _Function(tree, model, static_input_idxs,
                   "backward" if is_backward else "inference" if is_inference else "forward")
    return fn, fn(inputs)


def install(cap):
    """Put the model in place of the trees (once per capture)."""
    import functools

    import torch._inductor.cudagraph_trees as trees
    if getattr(trees.cudagraphify, "oomlab", False):
        return
    f = functools.partial(cudagraphify, cap)
    f.oomlab = True
    trees.cudagraphify = f
