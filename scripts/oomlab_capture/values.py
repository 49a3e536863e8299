"""Values the program's control flow reads from device tensors, computed from the data where they can be had.

A meta tensor has no values, but many of the tensors a program branches on are small and made from known data:
attention masks and labels copied from the host (.to("cuda")), factories (torch.ones, arange, full), and what is
computed from them (mask.sum() == mask.numel(), labels.ne(-100)). Each such tensor keeps a CPU shadow beside its
meta self: every aten op whose tensor inputs all have values (a shadow, or a CPU tensor) and whose outputs are
small is run a second time on the CPU, and its outputs keep the results. .item(), .tolist(), .cpu(), nonzero(),
a boolean mask's index and torch.unique then answer from the shadow, as the GPU run would; a placeholder
(placeholders.py) only where no shadow exists, and the report names those lines.

Invariants (checked by validate.py's capture self-test):
  V1 a shadow has its meta tensor's dtype and shape (sizes), and lives on the CPU;
  V2 a shadow is used only while its meta tensor's version counter is the one it was taken at: an in-place op
     not mirrored here (an operand without a value) bumps the counter, which views share, so every alias of a
     written tensor stops answering; a mirrored in-place op updates the recorded version of every shadow that
     shares the written CPU storage (those aliases were written on the CPU too);
  V3 random ops (Tag.nondeterministic_seeded) make no shadow: the GPU's random numbers are not the CPU's.
Tensors made under torch.inference_mode have no version counter: their shadows are taken as current.
  V5 a shadow of a fill (FILLS: zeros_like, torch.zeros, ...) is made when it is first read (a _Fill until then):
     an optimizer's states and a gradient's zeros are never read, and cost no CPU time or memory.
  V4 the live shadows hold at most about BUDGET_BYTES of host memory: past SWEEP_BYTES of shadows asked for the
     stale ones (V2: never used again) are dropped, and while the current ones still hold BUDGET_BYTES no op is
     mirrored (an optimizer's zero-filled states of a 70B model would otherwise keep gigabytes of zeros).
"""
import weakref

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten
LIMIT_BYTES = 16 << 20  # an op is mirrored only when each output's storage is at most this (CPU time stays small)
BUDGET_BYTES = 1 << 30  # V4: the shadows' host memory
SWEEP_BYTES = 256 << 20  # V4: new shadows' bytes between two sweeps
# ops never mirrored: their values are not the data's (random, uninitialised) or they are answered elsewhere
NEVER = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
         aten.new_empty_strided.default, aten._local_scalar_dense.default, aten.item.default,
         aten.nonzero.default, aten.masked_select.default}
# ops that overwrite their first argument entirely: a shadow can be made for it even if it had none
OVERWRITE = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default}
# ops whose values do not depend on their first argument's (only its shape, dtype and layout): torch.ones_like(
# input_ids) has a value though input_ids (random) has none
SHAPE_ONLY = {aten.ones_like.default, aten.zeros_like.default, aten.full_like.default, aten.new_ones.default,
              aten.new_zeros.default, aten.new_full.default}
# ops whose output is one value everywhere, made from no tensor's values: V5 (their shadows made when read)
FILLS = SHAPE_ONLY | {aten.zeros.default, aten.ones.default, aten.full.default}


class _Fill:
    """V5: a fill's shadow not made yet: the op and its CPU arguments, the first one (a SHAPE_ONLY op's tensor)
    as its (shape, strides, dtype), so that no meta tensor is kept alive by it."""
    __slots__ = ("func", "like", "args", "kwargs")

    def __init__(self, func, like, args, kwargs):
        self.func, self.like, self.args, self.kwargs = func, like, args, kwargs

    def make(self):
        args = self.args
        if self.like is not None:
            shape, stride, dtype = self.like
            args = (torch.empty_strided(shape, stride, dtype=dtype),) + tuple(args)
        with torch.no_grad():
            return self.func(*args, **self.kwargs)


def _version(t):
    try:
        return t._version
    except RuntimeError:  # an inference tensor: no version counter
        return -1


def _writes(func):
    """(index, name) of the schema's arguments the op writes (in-place self, out=)."""
    return [(i, a.name) for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


class Values:
    def __init__(self):
        self.shadow = WeakTensorKeyDictionary()  # meta tensor -> [cpu tensor, version]
        self.aliases = {}                        # cpu storage data_ptr -> [weakref(meta tensor)]
        self.answered = {}                       # (what, where) -> count: questions answered from the data
        self.mirrored = 0                        # ops run on the CPU
        self._writes = {}
        self._since = 0                          # V4: bytes of shadows asked for since the last sweep
        self.full = False                        # V4: the live shadows hold BUDGET_BYTES: no new one

    # -- lookups -------------------------------------------------------------------------------------------
    def get(self, t):
        """The CPU value of meta tensor t, or None."""
        if not isinstance(t, torch.Tensor) or not t.is_meta:
            return None
        e = self.shadow.get(t)
        if e is None:
            return None
        if e[1] != _version(t):
            del self.shadow[t]
            return None
        if type(e[0]) is _Fill:  # V5: made now
            try:
                cpu = e[0].make()
            except Exception:  # noqa: BLE001 - the CPU cannot make it: no value
                cpu = None
            del self.shadow[t]
            if not isinstance(cpu, torch.Tensor) or self._room(cpu.untyped_storage().nbytes()):
                return None
            self._put(t, cpu)
            e = self.shadow.get(t)
            return None if e is None else e[0]
        return e[0]

    def known(self, x):
        """x as the CPU computation takes it, or KeyError when a meta tensor in it has no value."""
        if isinstance(x, torch.Tensor) and x.is_meta:
            v = self.get(x)
            if v is None:
                raise KeyError
            return v
        if isinstance(x, torch.device) and x.type == "meta":
            return torch.device("cpu")
        return x

    def _sweep(self):
        """V4: drop the stale shadows; full while the current ones hold BUDGET_BYTES."""
        live, seen = 0, set()
        for t, e in list(self.shadow.items()):
            if e[1] != _version(t):
                del self.shadow[t]
                continue
            if type(e[0]) is _Fill:
                continue
            s = e[0].untyped_storage()
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                live += s.nbytes()
        self._since = 0
        self.full = live >= BUDGET_BYTES

    def _room(self, nbytes):
        """V4: whether nbytes more of shadows must not be made (the budget held; swept every SWEEP_BYTES asked)."""
        self._since += nbytes
        if self._since >= SWEEP_BYTES:
            self._sweep()
        return self.full

    def put(self, t, cpu):
        """t's value is cpu (an answer computed outside the mirroring: placeholders' nonzero, masked_select)."""
        if not self._room(cpu.untyped_storage().nbytes()):
            self._put(t, cpu)

    def _put(self, t, cpu):
        if cpu.device.type != "cpu" or cpu.shape != t.shape or cpu.dtype != t.dtype:
            return
        if cpu.stride() != t.stride() and t.numel() > 1:
            if cpu.untyped_storage().data_ptr() in self.aliases:
                return  # a view of another shadow laid out otherwise: as_strided on it would misread
            cpu = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(cpu)
        old = self.shadow.get(t)
        self.shadow[t] = [cpu, _version(t)]
        if old is not None and old[0].untyped_storage().data_ptr() == cpu.untyped_storage().data_ptr():
            return
        if cpu.numel():
            self.aliases.setdefault(cpu.untyped_storage().data_ptr(), []).append(weakref.ref(t))

    def _touch(self, cpu):
        """Every shadow on cpu's storage is current again (a mirrored write reached all of them)."""
        refs = self.aliases.get(cpu.untyped_storage().data_ptr(), [])
        keep = []
        for r in refs:
            t = r()
            if t is None:
                continue
            e = self.shadow.get(t)
            if e is not None and e[0].untyped_storage().data_ptr() == cpu.untyped_storage().data_ptr():
                e[1] = _version(t)
                keep.append(r)
        self.aliases[cpu.untyped_storage().data_ptr()] = keep

    def answer(self, what, where):
        self.answered[(what, where)] = self.answered.get((what, where), 0) + 1

    # -- mirroring -----------------------------------------------------------------------------------------
    def before(self, func, args, kwargs, leaves=()):
        """Before the meta op (which bumps the version of what it writes): its inputs' values, or None. leaves: the
        tensors among its arguments (recorder._leaves), for the quick answer that one has no value."""
        if func in NEVER or torch.Tag.nondeterministic_seeded in func.tags:
            return None
        if func in OVERWRITE and args and isinstance(args[0], torch.Tensor) and args[0].is_meta \
                and self.get(args[0]) is None:
            try:
                return ("overwrite", tree_map(self.known, list(args[1:])), kwargs)
            except KeyError:
                return None
        if func in FILLS:
            like = None
            if func in SHAPE_ONLY:
                if not (args and isinstance(args[0], torch.Tensor)):
                    return None
                x = args[0]
                like, args = (tuple(x.shape), tuple(x.stride()), x.dtype), tuple(args[1:])
            try:
                return ("fill", _Fill(func, like, tree_map(self.known, args), tree_map(self.known, kwargs)))
            except KeyError:
                return None
        for x in leaves:
            if isinstance(x, torch.Tensor) and x.is_meta and self.get(x) is None:
                return None
        try:
            return ("op", tree_map(self.known, args), tree_map(self.known, kwargs))
        except KeyError:
            return None

    def after(self, func, args, out, prep):
        """After the meta op: run it on the CPU on the values before() took; give its outputs theirs."""
        if prep is None:
            return
        flat_out, _ = tree_flatten(out)
        metas = [t for t in flat_out if isinstance(t, torch.Tensor) and t.is_meta]
        sizes = [t.untyped_storage().nbytes() for t in metas]
        if not metas or max(sizes) > LIMIT_BYTES:
            return
        if prep[0] == "fill":
            if len(metas) == 1 and isinstance(out, torch.Tensor):
                self.mirrored += 1
                self.shadow[out] = [prep[1], _version(out)]
            return
        if self._room(sum(sizes)):
            return
        kind, cargs, ckw = prep
        if kind == "overwrite":
            dst = args[0]
            cpu = torch.empty_strided(dst.shape, dst.stride(), dtype=dst.dtype)
            try:
                with torch.no_grad():
                    func(cpu, *cargs, **ckw)
            except Exception:  # noqa: BLE001 - an op the CPU cannot run: no values, as before
                return
            self.mirrored += 1
            self._put(dst, cpu)
            return
        try:
            with torch.no_grad():
                res = func(*cargs, **ckw)
        except Exception:  # noqa: BLE001
            return
        self.mirrored += 1
        flat_res, _ = tree_flatten(res)
        if len(flat_res) != len(flat_out):
            return
        for m, c in zip(flat_out, flat_res):
            if isinstance(m, torch.Tensor) and m.is_meta and isinstance(c, torch.Tensor):
                self._put(m, c)
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = _writes(func)
        for i, name in writes:
            t = cargs[i] if i < len(cargs) else ckw.get(name)
            if isinstance(t, torch.Tensor):
                self._touch(t)
