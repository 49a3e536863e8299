"""cuda -> meta: a TorchFunctionMode that rewrites the device of every torch call the program makes.

device="cuda" (or "cuda:0", torch.device("cuda"), an index) in a factory function or .to(), and .cuda(),
become meta. .item(), .tolist(), .cpu(), .numpy() of a meta tensor are answered with placeholders
(placeholders.py). F.dropout and F.scaled_dot_product_attention are replaced by name in torch.nn.functional
for the capture (patch_functional), and F.linear too (cuda_model.subclass), because a TorchFunctionMode does not see the calls a torch function makes
inside itself (nn.MultiheadAttention's call of scaled_dot_product_attention).
"""
import contextlib
import functools

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import placeholders
from .cuda_model import attention, autocast, dropout, rnn, subclass, unmodelled


def map_device(d):
    if isinstance(d, str) and (d == "cuda" or d.startswith("cuda:")):
        return torch.device("meta")
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("meta")
    return d


_TO = {torch.Tensor.to}
_CUDA = {torch.Tensor.cuda}


class DeviceMap(TorchFunctionMode):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap
        self._patches = None

    def __enter__(self):
        self._patches = patch_functional(self.cap)
        self._patches.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        r = super().__exit__(*exc)
        self._patches.__exit__(*exc)
        return r

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CUDA:
            non_blocking = kwargs.get("non_blocking", False)
            return args[0].to("meta", non_blocking=non_blocking)
        if "device" in kwargs:
            kwargs = dict(kwargs, device=map_device(kwargs["device"]))
        if func in _TO and len(args) > 1:
            d = args[1]
            if isinstance(d, int) and not isinstance(d, bool):
                d = "cuda"
            args = (args[0], map_device(d)) + tuple(args[2:])
        out = placeholders.function(self.cap, func, args, kwargs)
        if out is NotImplemented:
            out = autocast.function(self.cap, func, args, kwargs)
        if out is NotImplemented:
            out = func(*args, **kwargs)
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

    def dropout_cuda(*args, **kwargs):
        out = dropout.replace(cap, None, args, kwargs)
        return orig_do(*args, **kwargs) if out is NotImplemented else out

    def sdpa_cuda(*args, **kwargs):
        if autocast.enabled():  # lower_precision_fp: q, k, v and a float mask
            args, kwargs = autocast.cast_args(cap, args, kwargs, torch.get_autocast_dtype("cuda"), True)
        out = attention.replace(cap, None, args, kwargs)
        return orig_sdpa(*args, **kwargs) if out is NotImplemented else out

    def linear_cuda(input, weight, bias=None):
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
    vf.gru_cell = lambda *a: rnn.gru_cell(cap, orig_gru, *a)
    vf.lstm_cell = lambda *a: rnn.lstm_cell(cap, orig_lstm, *a)
    for n in modules:
        setattr(vf, n, functools.partial(rnn.rnn_module, cap, orig_mod[n]))

    def mha_forward(module, *args, **kwargs):
        return attention.mha_forward(cap, orig_mha, module, *args, **kwargs)

    torch.nn.MultiheadAttention.forward = mha_forward
    orig_compile = torch.compile
    torch.compile = functools.partial(unmodelled.eager_compile, cap)
    try:
        yield
    finally:
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
