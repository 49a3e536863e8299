"""The foreach (multi-tensor) paths the optimizers and clip_grad_norm_ take on CUDA.

torch/optim/optimizer.py _default_to_fused_or_foreach() picks the foreach implementation when every parameter
is on a device in torch/utils/_foreach_utils.py _get_foreach_kernels_supported_devices() ("cuda", ...); meta is
not in it, so on meta Adam and SGD would run their per-tensor loops, which allocate in another order and hold
other temporaries. The capture adds "meta" to that list for its duration (both the optimizer's imported name
and _foreach_utils', which clip_grad_norm_ reads), so the program takes the path it takes on CUDA. Likewise
_get_fused_kernels_supported_devices(): optimizer.py _device_dtype_check_for_fused refuses fused=True (Adam,
AdamW, SGD, Adagrad) for a parameter on a device outside it. The fused kernels (aten/src/ATen/native/cuda/
FusedAdamWKernel.cu, fused_adam_utils.cuh multi_tensor_apply_for_fused_optimizer) update in place and allocate
nothing; meta's functions (torch/_meta_registrations.py meta__fused_adam_) do the same.

_foreach_norm (clip_grad_norm_'s per-tensor norms), aten/src/ATen/native/cuda/ForeachReduceOp.cu
foreach_tensor_norm_cuda (PyTorch 2.11, the fast route: p of 1, 2 or inf, floating tensors on one device):
first output_per_tensor = at::zeros({ntensors * max_chunks_per_tensor}) in the op-math type (max_chunks_per_tensor
= the largest tensor's numel / kChunkSize 65536, rounded up), then one 0-d output per tensor (what meta's
function allocates too); output_per_tensor is freed when the op returns. Read from the source, not yet checked
against a recording.
"""
import contextlib

import torch

aten = torch.ops.aten
SOURCE_NORM = "aten/src/ATen/native/cuda/ForeachReduceOp.cu foreach_tensor_norm_cuda (output_per_tensor)"
K_CHUNK = 65536  # aten/src/ATen/native/cuda/MultiTensorApply.cuh kChunkSize

SOURCE = "torch/optim/optimizer.py _default_to_fused_or_foreach; torch/utils/_foreach_utils.py"


@contextlib.contextmanager
def cuda_foreach_choice():
    import torch.optim.optimizer as optmod
    import torch.utils._foreach_utils as fu
    names = ("_get_foreach_kernels_supported_devices", "_get_fused_kernels_supported_devices")
    orig = {(mod, n): getattr(mod, n) for mod in (fu, optmod) for n in names}

    def with_meta(f):
        return lambda: f() + ["meta"]

    for (mod, n), f in orig.items():
        setattr(mod, n, with_meta(getattr(fu, n)))
    try:
        yield
    finally:
        for (mod, n), f in orig.items():
            setattr(mod, n, f)


def before(cap, func, args, kwargs):
    if func is not aten._foreach_norm.Scalar:
        return None
    ts = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    if (not ts or float(p) not in (1.0, 2.0, float("inf")) or any(not t.is_floating_point() for t in ts)
            or len({(t.dtype, t.device) for t in ts}) != 1 or any(not t.is_contiguous() for t in ts)):
        return None  # the slow path: per-tensor linalg_vector_norm
    chunks = max((t.numel() + K_CHUNK - 1) // K_CHUNK for t in ts)
    out_dtype = dtype or ts[0].dtype
    opmath = 8 if out_dtype == torch.float64 else 4
    n = len(ts) * chunks * opmath
    if n == 0:
        return None
    return [(cap.fake_alloc(n, "foreach norm: output_per_tensor", SOURCE_NORM), n)]


def after(cap, held):
    for a, n in held or ():
        cap.fake_free(a, n)
