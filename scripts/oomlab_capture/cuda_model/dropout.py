"""F.dropout: CUDA's fused kernel, which meta does not take.

aten/src/ATen/native/Dropout.cpp (PyTorch 2.11): dropout() calls native_dropout when is_fused_kernel_acceptable
(input.is_cuda(), 0 < p < 1, numel > 0); its CUDA kernel (native/cuda/Dropout.cu, dropout_cuda) allocates the
output and a bool mask of one byte per element, and autograd saves the mask (native_dropout_backward). On meta
the test fails (not is_cuda) and _dropout_impl builds a float noise tensor and multiplies: other sizes. The
model routes dropout to native_dropout, as CUDA does; dropout_ (inplace=True) takes _dropout_impl on both. The Philox seed and offset are host values: no device bytes.

dropout_cuda allocates the mask before the output (measured: tests/data/addr_transformer.trace.json, 8,110,080 B
of mask, then the 32,440,320 B output), so ALLOC_ORDER gives the capture that order for native_dropout's outputs.
"""
import torch

# op -> the order (indices into its outputs) in which its CUDA kernel allocates them, where not output order
ALLOC_ORDER = {torch.ops.aten.native_dropout.default: (1, 0)}

SOURCE = "aten/src/ATen/native/Dropout.cpp is_fused_kernel_acceptable; native/cuda/Dropout.cu dropout_cuda"


def replace(cap, func, args, kwargs):
    """F.dropout / torch.dropout as CUDA runs them, or NotImplemented when the plain path is CUDA's too."""
    x = args[0] if args else kwargs.get("input")
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    training = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
    inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
    if (not isinstance(x, torch.Tensor) or not x.is_meta or not training or not (0 < p < 1) or x.numel() == 0
            or inplace):
        # dropout_ is _dropout<true> on CUDA too (no fused kernel): empty_like noise, bernoulli_, div_, mul_
        # (measured: torchvision MobileNetV3's nn.Dropout(inplace=True), tv_mobilenet_lightning)
        return NotImplemented
    return torch.native_dropout(x, p, True)[0]
