"""The capture: a program's CUDA work run on meta, its device allocations recorded as a snapshot trace.

Three layers, entered together by Capture.__enter__:
- devmap.DeviceMap (a TorchFunctionMode): device="cuda", .to("cuda"), .cuda() become meta; F.dropout and
  F.scaled_dot_product_attention take the path CUDA takes (cuda_model.dropout, cuda_model.attention);
  .item(), .tolist(), .cpu() of a meta tensor get placeholders.
- RecordMode (a TorchDispatchMode): every aten op that touches the device (a meta tensor or device among its
  arguments; host work passes through untouched, charged nothing), forward and backward (on meta the autograd
  engine runs backward on the calling thread). Each op is bracketed (ext op_begin/op_end) so the meta function's own
  temporaries are dropped and its outputs are logged in the order a CUDA kernel allocates them; around the op
  the CUDA path's own allocations are added (cuda_model); data-dependent ops get placeholders.
- cudaapi: torch.cuda.* answers as a GPU of the chosen kind would, without a CUDA context.
The allocations themselves come from the recording Meta allocator (ext, meta_alloc.cpp).
"""
import contextlib
import json
import os
import sys
import tempfile
import threading
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_map

from . import distributed, ext, frames, placeholders, values, versions
from .cuda_model import (attention, batch_norm, compiled, composite, cublas, cudnn_conv, dropout, embedding, foreach,
                         indexing, loss, reduction, rnn, subclass, tensor_shape)

aten = torch.ops.aten
SCHEMA = "oomlab.capture/1"
# the meta allocator's tag: the label's index, and from this bit on the context (Capture.set_context)
TAG_CTX_SHIFT = 40
OWN_HOST = 2  # meta_alloc's Own: a deferred host storage (devmap.defer_host)
MARK_EMPTY_CACHE = 1  # ext.mark's kinds
MARK_RELEASE_HELD = 2  # the upper trace frees what hold_in_upper held (release_held)
MARK_UPPER_BEGIN, MARK_UPPER_END = 3, 4  # upper_only's bracket: what is allocated inside is in the upper trace only
# one placeholder line answered this often is said on stderr as a possible endless loop (`while not x.item():`)
LOOP_WARN = 20_000
# op -> the order (indices into its outputs) in which its CUDA kernel allocates them, where not output order
ALLOC_ORDER = {**dropout.ALLOC_ORDER, **rnn.ALLOC_ORDER, **composite.ALLOC_ORDER, **attention.ALLOC_ORDER}
# op -> what runs on meta in its bracket instead, where CUDA's kernel allocates otherwise than meta's function:
# called as rewrite(cap, *args, **kwargs), it allocates the op's outputs (and any cuda_model additions between them)
# in the CUDA kernel's order itself
REWRITE = {**composite.REWRITE, **loss.REWRITE, **batch_norm.REWRITE, **embedding.REWRITE, **cudnn_conv.REWRITE,
           **indexing.REWRITE}


def _leaves(args, kwargs):
    """The tensors and devices among an aten op's arguments, in order (its schema nests no deeper than Tensor[]
    and Tensor?[]; what else is in a list is passed over)."""
    out = []
    stack = [kwargs.values(), args] if kwargs else [args]
    while stack:
        for x in stack.pop():
            if isinstance(x, torch.Tensor) or isinstance(x, torch.device):
                out.append(x)
            elif isinstance(x, (list, tuple)):
                out.extend(y for y in x if isinstance(y, (torch.Tensor, torch.device)))
    return out


def _on_device(leaves):
    """Whether an op touches the device (the program's CUDA, meta here): a meta tensor among its arguments, or a
    meta device asked for (factories)."""
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if x.is_meta:
                return True
        elif x.type == "meta":
            return True
    return False


def _own_meta(cap, leaves):
    """The meta_alloc own mode an op runs in: 1 when it works on the program's own meta tensors alone (made under
    torch.device("meta"), and what is computed from them only, through a tensor subclass's inner tensors), 2 when
    a deferred host tensor is among them (devmap.defer_host: host work, its outputs host tensors too); no device
    memory on the GPU either way. 0 (recorded) otherwise, and while a call names CUDA (to_empty(device="cuda"),
    .to("cuda") of a deferred host tensor: devmap)."""
    if cap.named_cuda:
        return 0
    own = 0
    stack = [x for x in leaves if isinstance(x, torch.Tensor)]
    while stack:
        t = stack.pop()
        if is_traceable_wrapper_subclass(t):
            stack.extend(getattr(t, a) for a in t.__tensor_flatten__()[0])
            continue
        o = cap.ext.is_own(t)
        if o == 0:
            return 0
        own = max(own, o)
    return own


def _without_meta_kernel(cap, func, prep, exc):
    """An op with no meta kernel (torch.unique: aten::_unique2) whose inputs all have CPU values (values.py): run
    on them, its outputs made on meta with the CPU results' shapes and strides (the CUDA kernel's outputs), and the
    op counted as not modelled (its CUDA temporaries are unknown). Without the values the error stands: the
    capture says it in one line (__main__.outside_capture)."""
    if "Meta" not in str(exc) or prep is None or prep[0] != "op":
        raise exc
    _, cargs, ckw = prep
    with torch.no_grad():
        res = func(*cargs, **ckw)
    cap.count_unmodelled(f"{func.name()} (no meta kernel: its outputs from the CPU values, its CUDA temporaries "
                         f"unknown)", "the op's CUDA kernel")

    def meta(c):
        if isinstance(c, torch.Tensor):
            return torch.empty_strided(c.shape, c.stride(), dtype=c.dtype, device="meta")
        return c
    return tree_map(meta, res)


class RecordMode(TorchDispatchMode):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    @classmethod
    def ignore_compile_internals(cls):
        """Off while torch.compile traces and compiles (Dynamo would otherwise run the program eagerly), on while
        the compiled code runs: its wrapper's allocations and extern kernels are recorded (cuda_model.compiled)."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        cap = self.cap
        leaves = _leaves(args, kwargs)
        if not _on_device(leaves):
            # host work (a CPU matmul, a reduction of CPU tensors): no device bytes, no CUDA library's either
            return func(*args, **kwargs)
        own = _own_meta(cap, leaves)
        if own == OWN_HOST and func in (aten._local_scalar_dense.default, aten.item.default):
            # a value read from a deferred host tensor (devmap.defer_host): the host has none to give
            cap.placeholder("aten::item (a tensor the host never built)")
            return placeholders.value(args[0].dtype)
        if own:
            was = cap.ext.own_meta(own)
            try:
                return func(*args, **kwargs)
            finally:
                cap.ext.own_meta(was)
        t0 = time.perf_counter_ns()
        try:
            return self._device_op(cap, func, args, kwargs, leaves)
        finally:
            cap.op_ns.append(time.perf_counter_ns() - t0)

    def _device_op(self, cap, func, args, kwargs, leaves):
        """An op on the program's CUDA tensors: recorded, with the CUDA path's own allocations around it."""
        cap.begin_op(func)
        prep = cap.values.before(func, args, kwargs, leaves)
        held = attention.before(cap, func, args, kwargs)
        held_c = composite.before(cap, func, args, kwargs)
        held_f = foreach.before(cap, func, args, kwargs)
        out = placeholders.dispatch(cap, func, args, kwargs)
        if out is NotImplemented:
            out = subclass.replace(cap, func, args, kwargs)
        if out is NotImplemented:
            x = cap.ext
            # Every op is bracketed: an op with a CUDA kernel allocates only its outputs there (plus what
            # cuda_model adds); one without runs a composite kernel on CUDA whose own temporaries are added
            # by cuda_model.composite where known, never meta's.
            rewrite = REWRITE.get(func)
            x.op_begin()
            order = []
            try:
                try:
                    out = rewrite(cap, *args, **kwargs) if rewrite else func(*args, **kwargs)
                except NotImplementedError as e:
                    out = _without_meta_kernel(cap, func, prep, e)
                if isinstance(out, (tuple, list)) and not rewrite:
                    perm = ALLOC_ORDER.get(func)
                    for t in (out if perm is None else [out[i] for i in perm]):
                        if isinstance(t, torch.Tensor) and t.is_meta:
                            e = x.storage_entry(t)
                            if e is not None:
                                order.append(e[0])
            finally:
                x.op_end(order)
        cublas.after(cap, func, args, kwargs, out)
        tensor_shape.after(cap, func, args, kwargs, out)
        reduction.after(cap, func, args, kwargs, out)
        loss.after(cap, func, args, kwargs, out)
        batch_norm.forward(cap, func, args, kwargs, out)
        attention.after(cap, func, args, kwargs, out, held)
        composite.after(cap, held_c)
        composite.copy_temporary(cap, func, args, kwargs, out)
        foreach.after(cap, held_f)
        cap.values.after(func, args, out, prep)
        return out


class Capture:
    """One capture: `with Capture(gpu): ...` then .trace() / .write(path)."""

    def __init__(self, gpu, quiet=False, dist=None, choices="first"):
        self.gpu = gpu
        self.choices = choices    # the choices the GPU makes by timing: "first" or "other" (--timed-choices)
        self.dist = dist          # (rank, world size): torch.distributed on the fake group (distributed.py)
        self.quiet = quiet
        self.ext = ext.load(quiet=quiet)
        self.labels = []          # per op tag: (op name, step, user frames); also one per optimizer step
        self.n_ops = 0            # device ops recorded
        self.state = {}           # the cuda_model modules' own state
        self.steps = 0            # optimizer.step calls completed
        self.placeholders = {}    # (what, where) -> count
        self.values = values.Values()  # the CPU values of small tensors: what control flow reads
        self.modelled = {}        # (what, source) -> [bytes, count]
        self.unmodelled = {}      # (what, source) -> ops that make allocations the capture does not model
        self.budget = None        # set_per_process_memory_fraction(f) * total_memory
        self.torch_note = versions.note(torch.__version__)  # None for the modelled torch (versions.py)
        self.events = []
        self.events_hi = []       # the upper trace: the range's allocations (range_alloc, upper_only) too, and
                                  # hold_in_upper's frees later
        self.hi_only = set()      # the fake addresses of those allocations
        self.hi_held = set()      # fake addresses whose free the upper trace makes at the next release_held
        self._upper_keys = []     # the range key of each upper_only bracket, in order
        self.ranges = {}          # (what, source) -> [count, largest, total bytes]
        self.pins = []            # the bytes of each Tensor.pin_memory call, in order (pinned host memory)
        self._pin_lock = threading.Lock()
        self.seconds = 0.0
        self._stack = None
        self.ctx = (0, 0)         # (stream, private pool) new allocations are made on (cuda_model/cudagraphs.py)
        self._label = 0           # the label the events are tagged with now
        self.dry = 0              # > 0: the CUDA path's own allocations are not made (a CUDA graph's replay)
        self.named_cuda = 0       # > 0: inside a torch call that names the CUDA device (devmap)
        self.deferred = [0, 0, 0]  # parameters built on the host and never materialised: count, elements, bytes
        self.op_ns = []           # each device op's time in the capture (RecordMode), ns

    # -- used by the models --------------------------------------------------------------------------------
    def in_backward(self):
        return torch._C._current_autograd_node() is not None

    def on_host(self, t):
        """Whether tensor t is the program's host memory: a CPU tensor, or a deferred host one (devmap.defer_host)."""
        return not t.is_meta or self.ext.is_own(t) == OWN_HOST

    def begin_op(self, func):
        self.n_ops += 1
        self.labels.append((func.name(), self.steps, frames.user_frames()))
        self._set_tag(len(self.labels) - 1)

    def label(self, what):
        """What is allocated or freed from here on is labelled what, at the user's line (a call that is no op)."""
        self.labels.append((what, self.steps, frames.user_frames()))
        self._set_tag(len(self.labels) - 1)

    def _set_tag(self, label):
        # the tag carries the label and, above bit TAG_CTX_SHIFT, the context (stream << 8 | pool)
        self._label = label
        stream, pool = self.ctx
        self.ext.set_tag(label | ((stream << 8 | pool) << TAG_CTX_SHIFT))

    def set_context(self, stream, pool):
        """Allocations from here on are made on this stream (0: the default) and in this private pool (0: none),
        as a CUDA graph's warm-up or capture makes them; the previous (stream, pool) returned."""
        was = self.ctx
        self.ctx = (stream, pool)
        self._set_tag(self._label)
        return was

    def empty_cache(self):
        """torch.cuda.empty_cache() at this point of the trace (an "empty_cache" entry the replay carries out)."""
        self.empty_cache_calls = getattr(self, "empty_cache_calls", 0) + 1
        self.ext.mark(MARK_EMPTY_CACHE)

    def fake_alloc(self, size, what, source, keep=False):
        if self.dry:  # a replayed CUDA graph allocates nothing: an address no event names
            self._dry_next = getattr(self, "_dry_next", 0) + 1
            return -self._dry_next
        self.count_modelled(what, size, source)
        return self.ext.fake_alloc(size)

    def pinned(self, t):
        """Tensor.pin_memory on the host tensor t: its bytes, as CachingHostAllocator is asked for them (the
        DataLoader's pin thread calls this beside the program's thread)."""
        n = t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
        with self._pin_lock:
            self.pins.append(n)

    def range_alloc(self, size, what, source):
        """An allocation the CUDA path may make whose size the CPU cannot know: in the upper trace only (the
        range's high end, events_hi), with size its bound; its free with fake_free as any other."""
        self._count_range((what, source), 1, size)
        a = self.ext.fake_alloc(size)
        self.hi_only.add(a)
        return a

    def hold_in_upper(self, t, what, source):
        """A storage whose free may come later on the GPU than its last reference here (Python's cyclic garbage
        collector frees it): the upper trace frees it at the next release_held, the lower one when it dies."""
        e = self.ext.storage_entry(t) if isinstance(t, torch.Tensor) else None
        if e is None or e[0] in self.hi_held:
            return
        self.hi_held.add(e[0])
        self._count_range((what, source), 1, e[1])

    @contextlib.contextmanager
    def upper_only(self, what, source):
        """Allocations made inside (and their frees, wherever they come) are in the upper trace only: work the GPU
        may or may not do, as the range's what says."""
        self._count_range((what, source), 1, 0)
        self._upper_keys.append((what, source))  # its allocations' bytes are counted in _collect
        self.ext.mark(MARK_UPPER_BEGIN)
        try:
            yield
        finally:
            self.ext.mark(MARK_UPPER_END)

    def _count_range(self, key, count, size):
        r = self.ranges.setdefault(key, [0, 0, 0])  # [count, largest, total bytes]
        r[0] += count
        r[1] = max(r[1], size)
        r[2] += size

    def release_held(self):
        """The point by which the storages hold_in_upper named are freed in the upper trace."""
        if self.hi_held:
            self.ext.mark(MARK_RELEASE_HELD)

    def fake_free(self, addr, size):
        if addr < 0:
            return  # made during a CUDA graph's replay: no allocation
        self.ext.fake_free(addr, size)

    def forget(self, t):
        self.ext.forget(t)

    def count_modelled(self, what, size, source):
        m = self.modelled.setdefault((what, source), [0, 0])
        m[0] += size
        m[1] += 1

    def count_unmodelled(self, what, source):
        self.unmodelled[(what, source)] = self.unmodelled.get((what, source), 0) + 1

    def placeholder(self, what):
        key = (what, self._where())
        n = self.placeholders[key] = self.placeholders.get(key, 0) + 1
        if n == LOOP_WARN:  # said once per line, whatever --quiet says: the capture may never end
            print(f"oomlab_capture: {key[0]} at {key[1]} was answered with a placeholder {n:,} times: a loop "
                  f"on a guessed value may never end (oomlab predict --timeout stops it)", file=sys.stderr,
                  flush=True)

    def busiest_placeholder(self):
        """The placeholder answered most often, as (what, where, count), or None."""
        if not self.placeholders:
            return None
        (what, where), n = max(self.placeholders.items(), key=lambda kv: kv[1])
        return what, where, n

    def answered(self, what):
        """A value the program read that the capture computed from the data (values.py), not a placeholder."""
        self.values.answer(what, self._where())

    @staticmethod
    def _where():
        f = frames.user_frames(1)
        return f"{f[0]['filename']}:{f[0]['line']}" if f else "?"

    def allocated(self):
        return self.ext.counters()[0]

    def max_allocated(self):
        return self.ext.counters()[1]

    # -- entering and leaving ------------------------------------------------------------------------------
    def __enter__(self):
        import contextlib
        from . import cudaapi, devmap
        assert not torch.cuda.is_initialized()
        self._t0 = time.time()
        self.labels.append(("(start)", 0, []))
        self.ext.start()
        stack = contextlib.ExitStack()
        stack.enter_context(foreach.cuda_foreach_choice())
        # meta's nonzero (used inside index with a boolean mask) assumes every element is non-zero, as the
        # placeholders do (placeholders.py); by default it refuses
        import torch.fx.experimental._config as fxconf
        stack.enter_context(fxconf.patch(meta_nonzero_assume_all_nonzero=True))
        # Module.to("cuda") keeps each Parameter object on CUDA (CPU and CUDA are shallow-copy compatible:
        # param.data = moved); CPU and meta are not, so it would make new Parameters and an optimizer built
        # on the old ones (a list taken before .to) would never see a gradient. Swapping keeps the objects.
        swap = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        stack.callback(torch.__future__.set_swap_module_params_on_conversion, swap)
        stack.enter_context(cudaapi.patched(self))
        if self.dist is not None:
            stack.enter_context(distributed.patched(self, *self.dist))
        handle = register_optimizer_step_post_hook(self._step_hook)
        stack.callback(handle.remove)
        stack.enter_context(devmap.DeviceMap(self))
        stack.enter_context(RecordMode(self))
        self._stack = stack
        return self

    def _step_hook(self, opt, args, kwargs):
        # what is freed after optimizer.step belongs to the next step (its label, until the next op's)
        self.steps += 1
        self.labels.append(("optimizer.step", self.steps, frames.user_frames()))
        self._set_tag(len(self.labels) - 1)

    def __exit__(self, *exc):
        self._stack.close()
        self.oversized = self.ext.oversized()
        self.ext.stop()
        self.seconds = time.time() - self._t0
        self._collect()
        from . import fakecuda
        if fakecuda.active() and torch.cuda.is_initialized():
            # CUDA's lazy init succeeds against fakecuda's answers (Lightning asks for it); no memory can be had
            held = torch._C._cuda_memoryStats(0)["reserved_bytes"]["all"]["peak"]
            assert held == 0, "the capture allocated real CUDA memory"
        else:
            assert not torch.cuda.is_initialized(), "the capture created a CUDA context"
        return False

    def _collect(self):
        t = int(self._t0 * 1e6)
        held = []  # the upper trace's frees of hold_in_upper's storages, until the next release mark
        upper, upper_addrs, brackets = [], set(), 0  # the open upper_only brackets' keys; their allocations
        for i, (action, addr, size, tag) in enumerate(self.ext.drain()):
            ctx, tag = tag >> TAG_CTX_SHIFT, tag & ((1 << TAG_CTX_SHIFT) - 1)
            name, step, fr = self.labels[tag] if 0 <= tag < len(self.labels) else ("?", 0, [])
            where = f" at {os.path.basename(fr[0]['filename'])}:{fr[0]['line']}" if fr else ""
            if action == 3 and size == MARK_RELEASE_HELD:
                self.events_hi.extend(dict(e, time_us=t + i) for e in held)
                held = []
                continue
            if action == 3 and size == MARK_UPPER_BEGIN:
                upper.append(self._upper_keys[brackets])
                brackets += 1
                continue
            if action == 3 and size == MARK_UPPER_END:
                upper.pop()
                continue
            if action == 3:  # a mark: torch.cuda.empty_cache()
                e = {"action": "empty_cache", "addr": 0, "size": 0, "stream": 0, "time_us": t + i, "frames": fr,
                     "user_metadata": f"step {step}: torch.cuda.empty_cache(){where}"}
                self.events_hi.append(e)
                self.events.append(e)
                continue
            what = name if action != 1 else "free"
            kind = ("alloc", "free_requested", "oom")[action]
            e = {"action": kind, "addr": addr, "size": size, "stream": ctx >> 8,
                 "time_us": t + i, "frames": fr, "user_metadata": f"step {step}: {what}{where}"}
            if action == 0 and ctx & 0xFF:
                e["pool"] = ctx & 0xFF  # a CUDA graph's private pool (the trace's own key: PyTorch's has none)
            if action == 2:  # a request above any GPU (meta_alloc.cpp, kTraceMax): the OOM the GPU run raises
                e = dict(e, device_free=0)
                del e["addr"]
            evs = [e]
            if action == 1:
                evs.append(dict(e, action="free_completed"))
            if action == 1 and addr in self.hi_held:
                held.extend(evs)
            else:
                self.events_hi.extend(evs)
            if upper and action == 0:
                upper_addrs.add(addr)
                self._count_range(upper[-1], 0, size)
            if addr not in self.hi_only and addr not in upper_addrs:
                self.events.extend(evs)
        self.events_hi.extend(held)

    # -- the result ----------------------------------------------------------------------------------------
    def n_allocs(self):
        return sum(1 for e in self.events if e["action"] in ("alloc", "oom"))

    def trace(self, upper=False):
        """The snapshot dict; upper: the range's upper trace (range_alloc's allocations in it)."""
        g = self.gpu
        meta = {
            "schema": SCHEMA,
            "gpu": {k: g[k] for k in ("name", "total_memory", "sm_count", "arch", "context_bytes", "sources")},
            "torch": torch.__version__,
            # versions.note: what a prediction under a torch other than the modelled one means (None: 2.11)
            "torch_note": self.torch_note,
            "ops": self.n_ops,
            "seconds": round(self.seconds, 3),
            # the device ops' share of seconds (the rest: the script's imports, host work, model building)
            "op_seconds": round(sum(self.op_ns) / 1e9, 3),
            "op_median_us": round(sorted(self.op_ns)[len(self.op_ns) // 2] / 1e3, 1) if self.op_ns else 0,
            "compile": compiled.summary(self),  # torch.compile's graphs and time; None without it
            "placeholders": [{"what": w, "count": n, "where": where}
                             for (w, where), n in sorted(self.placeholders.items())],
            "answered": [{"what": w, "count": n, "where": where}
                         for (w, where), n in sorted(self.values.answered.items())],
            "mirrored_ops": self.values.mirrored,
            "modelled": [{"what": w, "bytes": b, "count": n, "source": s}
                         for (w, s), (b, n) in sorted(self.modelled.items())],
            "not_modelled": [{"what": w, "ops": n, "source": s}
                             for (w, s), n in sorted(self.unmodelled.items())],
            # what the CPU cannot know, as a bound: in the upper trace only ([] when the trace is exact there)
            "range": [{"what": w, "count": n, "largest": big, "bytes": total, "source": s}
                      for (w, s), (n, big, total) in sorted(self.ranges.items())],
            "trace": "upper" if upper else "lower",
            # host memory pinned by Tensor.pin_memory (a DataLoader's pin_memory=True): the calls and their bytes;
            # the caching host allocator's reuse depends on the loader's timing, so only the calls are counted
            "pinned": {"calls": len(self.pins), "bytes": sum(self.pins), "largest": max(self.pins, default=0)},
            "steps": self.steps,
            # module parameters built on the host that were never materialised there (devmap.defer_host)
            "deferred": {"parameters": self.deferred[0], "elements": self.deferred[1], "bytes": self.deferred[2]},
            # torch.cuda.empty_cache() calls (the program's and the CUDA graph trees'), each an "empty_cache" entry
            "empty_cache_calls": getattr(self, "empty_cache_calls", 0),
        }
        big = getattr(self, "oversized", 0)
        if big:  # the request logged as an oom event of 2^53 bytes (meta_alloc.cpp, kTraceMax): its real size
            meta["oversized"] = {"bytes": str(big), "recorded": 2**53,
                                 "message": "CUDA out of memory. Tried to allocate more than 1EB memory."
                                 if big >= 2**60 else f"CUDA out of memory. Tried to allocate {big} bytes."}
        st = self.state.get("dist")
        if st is not None:
            meta["distributed"] = {"rank": st.rank, "world_size": st.world, "initialised": st.initialised,
                                   "backend": st.backend, "stashed_bytes": st.stashed_bytes}
            if st.initialised:
                meta["distributed"]["rank_class"] = st.rank_classes()
        doc = {"segments": [], "device_traces": [self.events_hi if upper else self.events], "allocator_settings": {},
               "external_annotations": [], "oomlab_capture": meta}
        if self.budget is not None:
            doc["budget"] = self.budget
        return doc

    def write(self, path, upper=False):
        """The trace as JSON (upper: the range's upper trace), atomically (a temp file beside it, then
        rename)."""
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".oomlab_capture.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.trace(upper), f, separators=(",", ":"))
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
