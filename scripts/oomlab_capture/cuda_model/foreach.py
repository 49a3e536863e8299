"""The foreach (multi-tensor) paths the optimizers and clip_grad_norm_ take on CUDA.

torch/optim/optimizer.py _default_to_fused_or_foreach() picks the foreach implementation when every parameter
is on a device in torch/utils/_foreach_utils.py _get_foreach_kernels_supported_devices() ("cuda", ...); meta is
not in it, so on meta Adam and SGD would run their per-tensor loops, which allocate in another order and hold
other temporaries. The capture adds "meta" to that list for its duration (both the optimizer's imported name
and _foreach_utils', which clip_grad_norm_ reads), so the program takes the path it takes on CUDA.
"""
import contextlib

SOURCE = "torch/optim/optimizer.py _default_to_fused_or_foreach; torch/utils/_foreach_utils.py"


@contextlib.contextmanager
def cuda_foreach_choice():
    import torch.optim.optimizer as optmod
    import torch.utils._foreach_utils as fu
    orig_fu = fu._get_foreach_kernels_supported_devices
    orig_opt = optmod._get_foreach_kernels_supported_devices

    def devices():
        return orig_fu() + ["meta"]

    fu._get_foreach_kernels_supported_devices = devices
    optmod._get_foreach_kernels_supported_devices = devices
    try:
        yield
    finally:
        fu._get_foreach_kernels_supported_devices = orig_fu
        optmod._get_foreach_kernels_supported_devices = orig_opt
