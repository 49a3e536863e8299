"""Allocations the CUDA path makes that the capture does not model: counted per op and said in the report
(predict's "not modelled" lines, the trace's oomlab_capture.not_modelled), so that a prediction low by them is
labelled as such, never silently.

  convolution        aten::convolution / convolution_backward: on CUDA PyTorch runs them through cuDNN
                     (aten/src/ATen/native/Convolution.cpp select_conv_backend); each cuDNN call allocates the
                     workspace of the plan cuDNN's heuristics pick (aten/src/ATen/native/cudnn/Conv_v8.cpp
                     run_conv_plan: at::empty({plan.getWorkspaceSize()})), freed when the call returns. Its size
                     is cuDNN's choice per GPU, library version and shape (docs/parity.md, "Predicting without a
                     GPU": 9.6 to 134.5 MB each for ResNet-18 at batch 32 on an H100).
"""
import torch

aten = torch.ops.aten

CONV = {aten.convolution.default, aten.convolution_backward.default}
SOURCE_CONV = "aten/src/ATen/native/cudnn/Conv_v8.cpp run_conv_plan: a workspace per call, of cuDNN's choosing"


def note(cap, func, args, kwargs):
    if func in CONV:
        cap.count_unmodelled("cuDNN convolution workspaces", SOURCE_CONV)


SOURCE_COMPILE = "torch/__init__.py compile; torch/_inductor (kernels and buffer plans made for the GPU)"


def eager_compile(cap, model=None, **kwargs):
    """torch.compile's stand-in: the model or function itself (as a decorator too), counted as not modelled."""
    cap.count_unmodelled("torch.compile (predicted as eager)", SOURCE_COMPILE)
    if model is None:
        return lambda fn: fn
    return model
