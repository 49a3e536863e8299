"""What the capture does not model, said in the report (predict's "not modelled" lines, the trace's
oomlab_capture.not_modelled), so that a prediction low by it is labelled as such, never silently.

  torch.compile      runs eagerly: Inductor's kernels and buffer plans exist only for the GPU.
"""
import torch

aten = torch.ops.aten

SOURCE_COMPILE = "torch/__init__.py compile; torch/_inductor (kernels and buffer plans made for the GPU)"


def eager_compile(cap, model=None, **kwargs):
    """torch.compile's stand-in: the model or function itself (as a decorator too), counted as not modelled."""
    cap.count_unmodelled("torch.compile (predicted as eager)", SOURCE_COMPILE)
    if model is None:
        return lambda fn: fn
    return model
