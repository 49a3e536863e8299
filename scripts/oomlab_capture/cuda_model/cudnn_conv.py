"""Convolutions as PyTorch runs them on a GPU whose cuDNN behaviour is measured: every allocation, in order.

On CUDA, aten::convolution and convolution_backward go through aten/src/ATen/native/Convolution.cpp
select_conv_backend (cuDNN, or a native kernel for some depthwise and dilated cases: the depthwise one is
modelled from its source, native_depthwise, no workspace and grad_weight before grad_input); cuDNN's calls allocate the
workspace of the plan its heuristics pick (cudnn/Conv_v8.cpp run_conv_plan), freed when the call returns. The
plan is cuDNN's choice per GPU, library version and problem, and it cannot be had without the GPU: cuDNN's
deviceless heuristics choose other knobs (docs/parity.md, "cuDNN workspaces"). So the sizes come from a table
measured on the GPU (data/cudnn_conv_GPU.json.xz, scripts/twins/predict_probes.py convs, then table-convs):
per call (op_keys.key: sizes, strides, dtypes, the convolution's parameters, the gradients asked for) every
allocation and free PyTorch made inside the op. A call in the table is replayed event for event: its outputs
come from meta's own function, one at a time in the recorded order (convolution_backward's gradients asked one
by one), its workspaces are fake allocations between them.

A call not in the table (another GPU, batch, image size or model) gets no workspace in the trace: the lower end
of a range. Its size for the upper end is bound(): hulls of the H200 table's workspaces over their calls' tensor
bytes, applied to this call's (an explicit bound, measured over the table, not a derivation, and for another GPU
the H200's: the prediction says so).

Invariants (validate.py):
  C1 a replayed call allocates exactly the table's outputs: as many, of the same sizes, in the same order;
  C2 every workspace a replayed call allocates is freed within the call.
"""
import functools
import json
import lzma
import math
import os

import torch

from . import op_keys

aten = torch.ops.aten
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
TABLES = {"H200": "cudnn_conv_H200.json.xz"}  # predict's --gpu name -> the table measured on it
SOURCE = ("aten/src/ATen/native/cudnn/Conv_v8.cpp run_conv_plan (each plan's workspace), measured per call on "
          "the GPU: scripts/oomlab_capture/data/%s")
SOURCE_DW = "aten/src/ATen/native/cuda/DepthwiseConv2d.cu (Convolution.cpp select_conv_backend: CudaDepthwise2d)"
SOURCE_MISS = ("aten/src/ATen/native/cudnn/Conv_v8.cpp run_conv_plan: a workspace of cuDNN's choosing per call; "
               "this call is not in a measured table; bounded by the H200 table's largest workspaces relative to "
               "their calls' tensors")


@functools.lru_cache(maxsize=None)
def table(gpu_name):
    """The measured table for a GPU of gpus.py, or None."""
    name = TABLES.get(gpu_name)
    if name is None:
        return None
    with lzma.open(os.path.join(HERE, name), "rt") as f:
        return json.load(f)


def _temps(events):
    """Each allocation's flag: True for a workspace (freed later within the call; frees pair with the most recent
    open allocation of their size)."""
    flags, open_ = [None] * len(events), {}
    for i, (a, size) in enumerate(events):
        if a == "a":
            open_.setdefault(size, []).append(i)
            flags[i] = False
        elif open_.get(size):
            flags[open_[size].pop()] = True
    return flags


def _nbytes(t):
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def lookup(cap, func, args):
    t = table(cap.gpu["name"])
    if t is None:
        return None
    return t["entries"].get(op_keys.key(func, args))


def replay(cap, events, make_outputs):
    """The call's events in order: outputs from make_outputs (a generator yielding each output as it is asked
    for), workspaces as fake allocations. None (nothing allocated) where the table's outputs are not meta's."""
    src = SOURCE % TABLES[cap.gpu["name"]]
    flags = _temps(events)
    outs, live = [], {}
    gen = make_outputs()
    for (a, size), temp in zip(events, flags):
        if a == "a" and not temp:
            o = next(gen, None)
            if o is None or _nbytes(o) != size:
                raise LookupError("the table's outputs are not meta's")
            outs.append(o)
        elif a == "a":
            live.setdefault(size, []).append(cap.fake_alloc(size, "cuDNN convolution: workspace", src))
        elif live.get(size):
            cap.fake_free(live[size].pop(), size)
    if next(gen, None) is not None:
        raise LookupError("meta makes more outputs than the table")
    return outs


def _backend_format(x, w):
    """Convolution.cpp determine_backend_memory_format for cuDNN: cudnn_conv_suggest_memory_format(input, weight),
    channels-last when either suggests it (4-D)."""
    from torch._prims_common import suggest_memory_format
    if x.dim() == 4 and torch.channels_last in (suggest_memory_format(x), suggest_memory_format(w)):
        return torch.channels_last
    return torch.contiguous_format


def _cuda_layout(out, x, w):
    """The output as CUDA lays it out: _convolution allocates cuDNN's output in the backend's memory format;
    meta's convolution is always contiguous. (Made inside the op's bracket, so meta's contiguous tensor is dropped
    as a temporary.)"""
    fmt = _backend_format(x, w)
    if fmt is torch.channels_last and not out.is_contiguous(memory_format=fmt):
        return out.contiguous(memory_format=fmt)
    return out


def native_depthwise(x, w, transposed, groups):
    """Convolution.cpp select_conv_backend: a 4-D depthwise convolution (groups == in_channels > 1, out_channels a
    multiple) runs the native CudaDepthwise2d kernel unless use_cudnn_depthwise: channels-last, or float16 with
    no dilation, a square stride and 32 channels or more, where check_cudnn_depthwise_workload_with_filter
    decides (left to the measured table)."""
    if (transposed or x.dim() != 4 or groups <= 1 or x.size(1) != groups or w.size(0) % groups != 0
            or _backend_format(x, w) is torch.channels_last):
        return False
    return not (x.dtype == torch.float16 and w.dtype == torch.float16)


def _copy_if(cap, t, what):
    if t.is_contiguous() or t.numel() == 0:
        return None
    n = _nbytes(t)
    return cap.fake_alloc(n, "depthwise convolution: %s made contiguous" % what, SOURCE_DW), n


def _free(cap, *entries):
    for e in entries:
        if e is not None:
            cap.fake_free(*e)


def depthwise_forward(cap, args):
    """_convolution's CudaDepthwise2d: _conv_depthwise2d(input.contiguous(), weight, ...), whose
    conv_depthwise2d_cuda_out makes the weight contiguous too; no workspace; a contiguous output."""
    xc, wc = _copy_if(cap, args[0], "input"), _copy_if(cap, args[1], "weight")
    out = aten.convolution.default(*args)
    _free(cap, wc, xc)
    return out


def depthwise_backward(cap, args):
    """convolution_backward's CudaDepthwise2d (DepthwiseConv2d.cu conv_depthwise2d_backward_cuda_out):
    grad_output made contiguous, then grad_weight (the input made contiguous for it, freed after), then
    grad_input (the weight made contiguous); the bias gradient after the backend (grad_output.sum)."""
    mask, got = list(args[10]), [None, None, None]

    def one(i):
        return aten.convolution_backward.default(*args[:10], [j == i for j in range(3)])[i]
    go = _copy_if(cap, args[0], "grad_output")
    if mask[1]:
        xc = _copy_if(cap, args[1], "input")
        got[1] = one(1)
        _free(cap, xc)
    if mask[0]:
        wc = _copy_if(cap, args[2], "weight")
        got[0] = one(0)
        _free(cap, wc)
    _free(cap, go)
    if mask[2]:
        got[2] = one(2)
    return tuple(got)


def forward(cap, *args):
    """REWRITE of aten::convolution."""
    if native_depthwise(args[0], args[1], args[6], args[8]):
        return depthwise_forward(cap, args)
    ev = lookup(cap, aten.convolution.default, args)
    if ev is None:
        return _miss(cap, aten.convolution.default, args)

    def outputs():
        yield _cuda_layout(aten.convolution.default(*args), args[0], args[1])
    try:
        return replay(cap, ev, outputs)[0]
    except LookupError:
        return _miss(cap, aten.convolution.default, args)


def backward(cap, *args):
    """REWRITE of aten::convolution_backward: the gradients asked one at a time, in the table's order."""
    if native_depthwise(args[1], args[2], args[7], args[9]):
        return depthwise_backward(cap, args)
    ev = lookup(cap, aten.convolution_backward.default, args)
    if ev is None:
        return _miss(cap, aten.convolution_backward.default, args)
    mask = list(args[10])
    got = [None, None, None]
    # convolution_backward makes grad_output, input and weight contiguous in the backend's memory format first
    # (their copies are the table's temporaries), so the gradients come out in that format, not in meta's choice
    fmt = _backend_format(args[1], args[2])
    cargs = [t.contiguous(memory_format=fmt) if i < 3 and isinstance(t, torch.Tensor) and t.dim() == 4 else t
             for i, t in enumerate(args[:10])]

    def outputs():
        for i in range(3):
            if mask[i]:
                one = [j == i for j in range(3)]
                got[i] = aten.convolution_backward.default(*cargs, one)[i]
                yield got[i]
    try:
        replay(cap, ev, outputs)
    except LookupError:
        return _miss(cap, aten.convolution_backward.default, args)
    return tuple(got)


def _miss(cap, func, args):
    """Not in a table: meta's outputs alone in the lower trace; in the upper one, after them, a workspace of
    bound() bytes for the call, freed with it."""
    out = func(*args)
    if func is aten.convolution.default:
        out = _cuda_layout(out, args[0], args[1])
    n = bound(func, args)
    if n:
        cap.fake_free(cap.range_alloc(n, "cuDNN convolution workspace (a call not in a measured table: "
                                         "bounded)", SOURCE_MISS), n)
    return out


BOUND_TABLE = "H200"  # the table whose hulls bound a call found in no table (the only one measured)


def bound(func, args):
    """An upper bound of the workspace of a call not in the table: the smaller of the measured table's two hulls
    over the call's tensors' bytes T (input and weight forward, gradient and input backward), ratio * T and
    slope * T + offset (predict_probes.py conv_bounds: every call of the table under both)."""
    b = table(BOUND_TABLE)["bound"]["fwd" if func is aten.convolution.default else "bwd"]
    t = _nbytes(args[0]) + _nbytes(args[1])
    return int(math.ceil(min(b["ratio"] * t, b["slope"] * t + b["offset"])))


REWRITE = {aten.convolution.default: forward, aten.convolution_backward.default: backward}
