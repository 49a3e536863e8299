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
"""
import weakref

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten
LIMIT_BYTES = 16 << 20  # an op is mirrored only when each output's storage is at most this (CPU time stays small)
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

    def put(self, t, cpu):
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
    def before(self, func, args, kwargs):
        """Before the meta op (which bumps the version of what it writes): its inputs' values, or None."""
        if func in NEVER or torch.Tag.nondeterministic_seeded in func.tags:
            return None
        if func in OVERWRITE and args and isinstance(args[0], torch.Tensor) and args[0].is_meta \
                and self.get(args[0]) is None:
            try:
                return ("overwrite", tree_map(self.known, list(args[1:])), kwargs)
            except KeyError:
                return None
        if func in SHAPE_ONLY and args and isinstance(args[0], torch.Tensor) and args[0].is_meta \
                and self.get(args[0]) is None:
            x = args[0]
            args = (torch.empty_strided(x.shape, x.stride(), dtype=x.dtype),) + tuple(args[1:])
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
        if not metas or any(t.untyped_storage().nbytes() > LIMIT_BYTES for t in metas):
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
            self.put(dst, cpu)
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
                self.put(m, c)
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = _writes(func)
        for i, name in writes:
            t = cargs[i] if i < len(cargs) else ckw.get(name)
            if isinstance(t, torch.Tensor):
                self._touch(t)
