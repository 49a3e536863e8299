"""cuda -> meta: a TorchFunctionMode that rewrites the device of every torch call the program makes.

device="cuda" (or "cuda:0", torch.device("cuda"), an index) in a factory function or .to(), and .cuda(),
become meta. .item(), .tolist(), .cpu(), .numpy() of a meta tensor are answered with placeholders
(placeholders.py). F.dropout and F.scaled_dot_product_attention are replaced by name in torch.nn.functional
for the capture (patch_functional), and F.linear too (cuda_model.subclass), because a TorchFunctionMode does not see the calls a torch function makes
inside itself (nn.MultiheadAttention's call of scaled_dot_product_attention).

A module's parameter built on the host (`Model().to("cuda")`, `from_config(...).cuda()`) is never materialised:
nn.Parameter of a CPU tensor of DEFER_BYTES or more, outside a conversion (Module._apply: model.cpu()), takes a
deferred host tensor instead (defer_host: meta, marked host in meta_alloc, no device memory), so its initialisation
costs nothing and a 70B model needs no host memory; its move to CUDA allocates as the real one does, in the same
order (_to_copy, with the host-to-device copy's temporaries: cuda_model.composite), and host work on it takes
none of the CUDA path's replacements (host_call). What the program reads back from one before the move is a
placeholder.

The program's tensors report device meta where the GPU run's report cuda: torch.autocast and its queries take
"meta" as "cuda", `x[i] = 2` makes its value a host scalar as THPVariable_setitem does for a CUDA tensor, and
LIBRARY_PATCHES adjusts library code that branches on the device type (transformers' maybe_autocast).
"""
import contextlib
import functools
import importlib.abc
import os
import sys

import torch
import torch.utils._device as torch_device_ctx
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from . import placeholders
from .cuda_model import attention, autocast, compiled, dropout, rnn, subclass


def map_device(d):
    if isinstance(d, str) and (d == "cuda" or d.startswith("cuda:")):
        return torch.device("meta")
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("meta")
    return d


def _named_device(func, args, kwargs):
    """The device a call names (device=, .to(device), .cuda()) as a torch.device, or None, and whether that is
    the program's own meta device: named by a string ("meta"), or the default device of a torch.device("meta")
    context or torch.set_default_device("meta") (DeviceContext puts its own object in the call). A torch.device
    object of type meta is otherwise a capture CUDA tensor's (device=x.device), so CUDA's."""
    if func in _CUDA:
        return torch.device("cuda"), False
    d = kwargs.get("device")
    if d is None and func in _TO and len(args) > 1:
        d = args[1]
    if isinstance(d, int) and not isinstance(d, bool):
        return (torch.device("cuda") if func in _TO else None), False
    if isinstance(d, str):
        try:
            named = torch.device(d)
        except RuntimeError:
            return None, False
        return named, named.type == "meta"
    if not isinstance(d, torch.device):
        return None, False
    return d, d.type == "meta" and d is _CONTEXT["device"]


# the device a DeviceContext (with torch.device(...), set_default_device) is putting into the call it passes on
_CONTEXT = {"device": None}


def _context_function(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    if func not in torch_device_ctx._device_constructors() or kwargs.get("device") is not None:
        return func(*args, **kwargs)
    was = _CONTEXT["device"]
    _CONTEXT["device"] = kwargs["device"] = self.device
    try:
        return func(*args, **kwargs)
    finally:
        _CONTEXT["device"] = was


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep  # the capture's own calls never make own meta
_TO = {torch.Tensor.to}
_FROM_DATA = {torch.tensor, torch.as_tensor}
_CUDA = {torch.Tensor.cuda}
_SETITEM = torch.Tensor.__setitem__
# a parameter's host storage at least this large is deferred (defer_host); smaller ones are made, so that the
# values of a scale or a bias the program reads back stay known (values.py), at little host memory
DEFER_BYTES = 1 << 20
OWN_HOST = 2  # meta_alloc's Own: a deferred host storage


def defer_host(cap, data):
    """The tensor nn.Parameter(data) wraps: data, or for a plain CPU tensor of DEFER_BYTES or more a deferred host
    tensor of its shape, strides and dtype."""
    if type(data) is not torch.Tensor or data.device.type != "cpu" or data.is_inference() \
            or data.untyped_storage().nbytes() < DEFER_BYTES:
        return data
    return host_tensor(cap, data.shape, data.stride(), data.dtype)


def host_tensor(cap, shape, stride, dtype):
    """A deferred host tensor: meta, marked host in meta_alloc (made with no mode active: no op, no entry), counted
    in cap.deferred."""
    from torch.utils._python_dispatch import _disable_current_modes
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        was = cap.ext.own_meta(OWN_HOST)
        try:
            t = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        finally:
            cap.ext.own_meta(was)
    n = cap.deferred
    n[0] += 1
    n[1] += t.numel()
    n[2] += t.untyped_storage().nbytes()
    return t


# safetensors' dtype names (its header's "dtype") -> torch's
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn,
                      "F8_E5M2": torch.float8_e5m2}


def _safetensors(cap, mod):
    """safetensors.safe_open(..., framework="pt") under the capture: the file's keys, metadata and each tensor's
    shape and dtype come from its header (safetensors parses it; the data stays unread in its mapping), and a
    tensor read (get_tensor, a slice's [...]) is a deferred host tensor (host_tensor): from_pretrained loads a 70B
    checkpoint without reading it, and its move to CUDA allocates as the real one does."""
    orig = mod.safe_open
    if getattr(orig, "_oomlab", False):
        return

    def tensor(shape, dtype, index=None):
        if index is not None:  # the slice's shape, from a meta tensor no trace sees (host storage, no entry)
            from torch.utils._python_dispatch import _disable_current_modes
            with torch._C.DisableTorchFunction(), _disable_current_modes():
                was = cap.ext.own_meta(OWN_HOST)
                try:
                    shape = torch.empty(shape, dtype=torch.uint8, device="meta")[index].shape
                finally:
                    cap.ext.own_meta(was)
        stride, n = [], 1
        for d in reversed(shape):
            stride.append(n)
            n *= d
        return host_tensor(cap, tuple(shape), tuple(reversed(stride)), SAFETENSORS_DTYPES[dtype])

    class Slice:
        def __init__(self, s):
            self._s = s

        def get_shape(self):
            return self._s.get_shape()

        def get_dtype(self):
            return self._s.get_dtype()

        def __getitem__(self, index):
            if self._s.get_dtype() not in SAFETENSORS_DTYPES:
                return self._s[index]
            return tensor(self._s.get_shape(), self._s.get_dtype(), index)

    class SafeOpen:
        _oomlab = True

        def __init__(self, filename, framework, *args, **kwargs):
            self._f = orig(filename, framework, *args, **kwargs)
            self._pt = framework in ("pt", "torch", "pytorch")
            if self._pt and "HF_DEACTIVATE_ASYNC_LOAD" not in os.environ:
                # transformers loads a checkpoint's tensors in a thread pool unless this is set, where the capture's
                # modes (per thread) do not reach: loading is made serial, host work's order only; said once
                os.environ["HF_DEACTIVATE_ASYNC_LOAD"] = "1"
                if not cap.quiet:
                    print("oomlab_capture: safetensors checkpoints are read as headers only (shapes and dtypes, no "
                          "weights), and transformers loads them serially (HF_DEACTIVATE_ASYNC_LOAD=1 set)",
                          file=sys.stderr)

        def __enter__(self):
            self._f.__enter__()
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

        def __getattr__(self, name):  # keys, metadata, offset_keys, ...
            return getattr(self._f, name)

        def get_slice(self, name):
            s = self._f.get_slice(name)
            return Slice(s) if self._pt else s

        def get_tensor(self, name):
            if not self._pt:
                return self._f.get_tensor(name)
            s = self._f.get_slice(name)
            if s.get_dtype() not in SAFETENSORS_DTYPES:
                return self._f.get_tensor(name)
            return tensor(s.get_shape(), s.get_dtype())
    mod.safe_open = SafeOpen


class DeviceMap(TorchFunctionMode):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap
        self._patches = None

    def __enter__(self):
        self._patches = patch_functional(self.cap)
        self._patches.__enter__()
        cap = self.cap
        self._param_new, self._module_apply = torch.nn.Parameter.__new__, torch.nn.Module._apply
        converting = [0]  # inside Module._apply: a conversion (model.cpu(), .half()) keeps what it makes

        def param_new(cls, data=None, requires_grad=True, _orig=self._param_new):
            if data is not None and not converting[0]:
                data = defer_host(cap, data)
            return _orig(cls, data, requires_grad)

        def module_apply(module, *args, _orig=self._module_apply, **kwargs):
            converting[0] += 1
            try:
                return _orig(module, *args, **kwargs)
            finally:
                converting[0] -= 1
        torch.nn.Parameter.__new__ = staticmethod(param_new)
        torch.nn.Module._apply = module_apply
        self._context_function = torch_device_ctx.DeviceContext.__torch_function__
        torch_device_ctx.DeviceContext.__torch_function__ = _context_function
        return super().__enter__()

    def __exit__(self, *exc):
        r = super().__exit__(*exc)
        torch.nn.Parameter.__new__ = staticmethod(self._param_new)
        torch.nn.Module._apply = self._module_apply
        torch_device_ctx.DeviceContext.__torch_function__ = self._context_function
        self._patches.__exit__(*exc)
        return r

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        named, own = _named_device(func, args, kwargs)
        if (func is torch.Tensor.cpu or (func in _TO and named is not None and named.type == "cpu")) and args \
                and isinstance(args[0], torch.Tensor) and args[0].is_meta and self.cap.on_host(args[0]):
            # a deferred host tensor to the host (from_pretrained's copy of a loaded weight): it stays deferred,
            # in the dtype asked for
            if func is torch.Tensor.cpu:
                return args[0]
            _, dtype, _, fmt = torch._C._nn._parse_to(*args[1:], **kwargs)
            return self._function(torch.Tensor.to, (args[0],), {"dtype": dtype or args[0].dtype,
                                                                "memory_format": fmt or torch.preserve_format})
        if own and (named is _CONTEXT["device"] or not sys._getframe(1).f_code.co_filename.startswith(_PACKAGE)):
            # the program's own meta tensors (with torch.device("meta"), device="meta": a model built on meta
            # before fully_shard and to_empty, as torchtitan builds it): no device memory on the GPU either, and
            # none here; what is computed from them alone is the program's own too (recorder._own_meta)
            was = self.cap.ext.own_meta(True)
            try:
                return self._function(func, args, kwargs)
            finally:
                self.cap.ext.own_meta(was)
        if named is not None and (named.type == "cuda" or (func in _TO and named.type == "meta" and not own)):
            # to_empty(device="cuda") of an own meta tensor makes CUDA memory; so does .to(device) of a deferred
            # host tensor, device "cuda" or the meta device standing for it (Module.to parses its arguments
            # through torch._C._nn._parse_to, which this mode maps)
            self.cap.named_cuda += 1
            try:
                return self._function(func, args, kwargs)
            finally:
                self.cap.named_cuda -= 1
        return self._function(func, args, kwargs)

    def _function(self, func, args, kwargs):
        if func in _FROM_DATA and map_device(kwargs.get("device")) != kwargs.get("device"):
            # torch.tensor(data, device="cuda") builds the tensor on the host and copies it (internal_new_from_data
            # in torch/csrc/utils/tensor_new.cpp): made so here, the copy is an op values.py sees, and the tensor
            # keeps its data for the control flow that reads it (labels, lengths, masks)
            grad = kwargs.get("requires_grad", False)
            host = func(*args, **{k: v for k, v in kwargs.items() if k not in ("device", "requires_grad")})
            with torch.no_grad():
                out = host.to("meta")
            return out.requires_grad_() if grad else out
        if func in _CUDA:
            non_blocking = kwargs.get("non_blocking", False)
            out = args[0].to("meta", non_blocking=non_blocking)
            if out is args[0] and self.cap.ext.is_own(out) == OWN_HOST:
                out = torch.ops.aten._to_copy.default(out)  # .cuda() of a deferred host tensor: as .to above
            return out
        if "device" in kwargs:
            kwargs = dict(kwargs, device=map_device(kwargs["device"]))
        if func in _TO and len(args) > 1:
            d = args[1]
            if isinstance(d, int) and not isinstance(d, bool):
                d = "cuda"
            args = (args[0], map_device(d)) + tuple(args[2:])
        if func is _SETITEM and len(args) == 3 and isinstance(args[2], (bool, int, float, complex)) \
                and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            # x[i] = 2 on a CUDA tensor: THPVariable_setitem (torch/csrc/autograd/python_variable_indexing.cpp)
            # makes the value a 0-dim tensor on the host (self_device.is_cuda()), so copy_to fills, and a mask
            # index goes to masked_fill_ (canDispatchToMaskedFill): no device scalar, no nonzero. On meta it would
            # be a meta scalar (8 bytes charged).
            args = (args[0], args[1], torch.tensor(args[2], dtype=args[0].dtype))
        out = placeholders.function(self.cap, func, args, kwargs)
        if out is NotImplemented:
            out = autocast.function(self.cap, func, args, kwargs)
        if out is NotImplemented:
            out = func(*args, **kwargs)
        if self.cap.named_cuda and func in _TO and out is args[0] and self.cap.ext.is_own(out) == OWN_HOST:
            # .to("cuda") of a deferred host tensor (meta already, so .to returned it): the copy the real move
            # makes (Tensor.to -> aten::_to_copy), recorded as a device allocation (named_cuda)
            out = torch.ops.aten._to_copy.default(out)
        return out


@contextlib.contextmanager
def patch_functional(cap):
    orig_do, orig_sdpa, orig_linear = F.dropout, F.scaled_dot_product_attention, F.linear
    orig_clear = torch.clear_autocast_cache
    vf = torch._VF
    had_gru, had_lstm = "gru_cell" in vf.__dict__, "lstm_cell" in vf.__dict__
    orig_gru, orig_lstm = vf.gru_cell, vf.lstm_cell
    orig_mha = torch.nn.MultiheadAttention.forward
    modules = ("lstm", "gru", "rnn_tanh", "rnn_relu")  # nn.LSTM, nn.GRU, nn.RNN
    had_mod = {n: n in vf.__dict__ for n in modules}
    orig_mod = {n: getattr(vf, n) for n in modules}

    def host_call(args, kwargs):
        """Host work on a deferred host tensor (devmap.defer_host): one among the arguments and none of the
        program's CUDA tensors; the CUDA path's replacements below are not taken."""
        host = False
        for x in tree_flatten((args, kwargs))[0]:
            if isinstance(x, torch.Tensor) and x.is_meta:
                o = cap.ext.is_own(x)
                if o == 0:
                    return False
                host = host or o == OWN_HOST
        return host

    def dropout_cuda(*args, **kwargs):
        if host_call(args, kwargs):
            return orig_do(*args, **kwargs)
        out = dropout.replace(cap, None, args, kwargs)
        return orig_do(*args, **kwargs) if out is NotImplemented else out

    def sdpa_cuda(*args, **kwargs):
        if host_call(args, kwargs):
            return orig_sdpa(*args, **kwargs)
        if autocast.enabled():  # lower_precision_fp: q, k, v and a float mask
            args, kwargs = autocast.cast_args(cap, args, kwargs, torch.get_autocast_dtype("cuda"), True)
        out = attention.replace(cap, None, args, kwargs)
        return orig_sdpa(*args, **kwargs) if out is NotImplemented else out

    def linear_cuda(input, weight, bias=None):
        if host_call((input, weight, bias), {}):
            return orig_linear(input, weight, bias)
        if autocast.enabled():
            (input, weight, bias), _ = autocast.cast_args(cap, (input, weight, bias), {},
                                                          torch.get_autocast_dtype("cuda"), True)
        return subclass.linear(cap, orig_linear, input, weight, bias)

    def clear_cache():
        autocast.clear(cap)
        orig_clear()

    F.dropout, F.scaled_dot_product_attention, F.linear = dropout_cuda, sdpa_cuda, linear_cuda
    torch.clear_autocast_cache = clear_cache
    # nn.GRUCell / nn.LSTMCell call torch._VF.gru_cell / lstm_cell (an attribute set on the _VF module object
    # shadows its __getattr__)
    vf.gru_cell = lambda *a: orig_gru(*a) if host_call(a, {}) else rnn.gru_cell(cap, orig_gru, *a)
    vf.lstm_cell = lambda *a: orig_lstm(*a) if host_call(a, {}) else rnn.lstm_cell(cap, orig_lstm, *a)

    def rnn_module(orig, *a, **k):
        return orig(*a, **k) if host_call(a, k) else rnn.rnn_module(cap, orig, *a, **k)
    for n in modules:
        setattr(vf, n, functools.partial(rnn_module, orig_mod[n]))

    def mha_forward(module, *args, **kwargs):
        if host_call((list(module.parameters()),) + args, kwargs):
            return orig_mha(module, *args, **kwargs)
        return attention.mha_forward(cap, orig_mha, module, *args, **kwargs)

    torch.nn.MultiheadAttention.forward = mha_forward
    # what Dynamo must see as PyTorch's own while it traces (cuda_model.compiled): (owner, name, PyTorch's)
    cap.state["functional_patches"] = [(F, "dropout", orig_do), (F, "scaled_dot_product_attention", orig_sdpa),
                                       (F, "linear", orig_linear), (torch, "clear_autocast_cache", orig_clear),
                                       (torch.nn.MultiheadAttention, "forward", orig_mha)] + \
        [(vf, n, orig_mod[n]) for n in modules if had_mod[n]] + \
        [(vf, n, o) for n, o, had in (("gru_cell", orig_gru, had_gru), ("lstm_cell", orig_lstm, had_lstm)) if had]
    orig_compile = torch.compile
    torch.compile = functools.partial(compiled.compile, cap)
    # The program's tensors report device meta, so `torch.autocast(x.device.type, enabled=False)` (transformers'
    # maybe_autocast around RoPE, forcing float32) names "meta": it means the GPU's autocast, "cuda".
    orig_ac_init = torch.amp.autocast_mode.autocast.__init__
    orig_ac_query = {n: getattr(torch, n) for n in ("is_autocast_enabled", "get_autocast_dtype")}

    @functools.wraps(orig_ac_init)  # PyTorch's signature: Dynamo binds autocast's arguments by it
    def ac_init(self, device_type, *a, **k):
        orig_ac_init(self, "cuda" if device_type == "meta" else device_type, *a, **k)

    def ac_query(orig):
        return lambda device_type=None, *a: (orig(*a) if device_type is None else
                                             orig("cuda" if device_type == "meta" else device_type, *a))
    torch.amp.autocast_mode.autocast.__init__ = ac_init
    cap.state["autocast_queries"] = list(orig_ac_query.values())  # compiled.py: Dynamo folds them to constants
    for n, f in orig_ac_query.items():
        setattr(torch, n, ac_query(f))
    finder = _PatchOnImport(dict(LIBRARY_PATCHES, **{m: functools.partial(_safetensors, cap)
                                                     for m in ("safetensors", "safetensors.torch")}))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        torch.amp.autocast_mode.autocast.__init__ = orig_ac_init
        for n, f in orig_ac_query.items():
            setattr(torch, n, f)
        restore = [("gru_cell", had_gru, orig_gru), ("lstm_cell", had_lstm, orig_lstm)]
        restore += [(n, had_mod[n], orig_mod[n]) for n in modules]
        for name, had, orig in restore:
            if had:
                setattr(vf, name, orig)
            else:
                delattr(vf, name)
        F.dropout, F.scaled_dot_product_attention, F.linear = orig_do, orig_sdpa, orig_linear
        torch.nn.MultiheadAttention.forward = orig_mha
        torch.compile = orig_compile
        torch.clear_autocast_cache = orig_clear


def _maybe_autocast(mod):
    """transformers.utils.generic.maybe_autocast returns a null context for device "meta" (the program's tensors'
    device here): on the GPU it is "cuda", and `maybe_autocast("cuda", enabled=False)` turns autocast off (RoPE's
    cos and sin in float32 under bfloat16 autocast: Llama, Qwen2, Mistral, Gemma, Phi)."""
    orig = mod.maybe_autocast

    @functools.wraps(orig)
    def maybe_autocast(device_type, *args, **kwargs):
        return orig("cuda" if device_type == "meta" else device_type, *args, **kwargs)
    mod.maybe_autocast = maybe_autocast


# module -> patch(module), applied when the program imports it: library code that asks the program's tensors for
# their device type and would branch on "meta" where the GPU run sees "cuda"
LIBRARY_PATCHES = {"transformers.utils.generic": _maybe_autocast}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """A finder that lets the other finders find a module of `patches` and patches it once it has executed (its
    importers then bind the patched names); a module already imported is patched at once."""

    def __init__(self, patches):
        self.patches = dict(patches)
        for name in list(self.patches):
            if name in sys.modules:
                self.patches.pop(name)(sys.modules[name])

    def find_spec(self, name, path, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        inner = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                patch(module)
        spec.loader = Loader()
        return spec
