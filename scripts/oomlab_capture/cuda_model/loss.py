"""Losses that are structured TensorIterator kernels: mse_loss and smooth_l1_loss with a reduction.

aten/src/ATen/native/Loss.cpp (PyTorch 2.11; native_functions.yaml: `structured: True`, `structured_inherits:
TensorIteratorBase`, CPU and CUDA `mse_loss_out` / `smooth_l1_loss_out`):
- TORCH_META_FUNC(mse_loss) / (smooth_l1_loss): build_borrowing_binary_op(maybe_get_output(), input, target)
  allocates the output at the broadcast shape of input and target (their common dtype), then
  maybe_get_output().resize_({}) makes it 0-dim for 'mean' and 'sum'. resize_ never shrinks a storage, so the
  loss CUDA returns keeps the full numel x element size bytes (512 for a [128, 1] float32 input), where meta's
  own function returns 4.
- TORCH_IMPL_FUNC(mse_loss_out) / (smooth_l1_loss_out): `Tensor loss; TensorIterator::borrowing_binary_op(loss,
  input, target)` allocates the unreduced loss (the same size again), then at::mean_out / at::sum_out reduces it
  into the output (a reduction kernel, with its staging when setReduceConfig splits it: reduction.py), and the
  unreduced loss is freed when the function returns.
The H100 recording of tests/data/predict/scripts/grad_accum.py shows both per micro-batch (nn.MSELoss of a
[128, 1] prediction: a 512-byte output kept as the loss, a 512-byte temporary; no 4-byte output).
reduction 'none' (0) is an ordinary TensorIterator op: the output only, as meta makes it.
"""
import torch

from . import reduction

aten = torch.ops.aten
SOURCE = ("aten/src/ATen/native/Loss.cpp TORCH_META_FUNC(mse_loss)/(smooth_l1_loss) (output resize_({}) keeps "
          "its storage), TORCH_IMPL_FUNC(mse_loss_out)/(smooth_l1_loss_out) (unreduced loss, mean_out/sum_out)")

# op -> index of its reduction argument
STRUCTURED = {aten.mse_loss.default: 2, aten.smooth_l1_loss.default: 2}


def _reduction(func, args, kwargs):
    i = STRUCTURED[func]
    return args[i] if len(args) > i else kwargs.get("reduction", 1)


def _structured(func):
    def run(cap, *args, **kwargs):
        res = func(*args, **kwargs)  # meta's answer, for its dtype: a temporary the bracket drops
        if _reduction(func, args, kwargs) == 0:
            return res
        x, target = args[0], args[1]
        out = x.new_empty(torch.broadcast_shapes(x.shape, target.shape), dtype=res.dtype)
        out.resize_(())
        return out
    return run


# run instead of the op inside its bracket (recorder.RecordMode): the output as the structured meta allocates it
REWRITE = {f: _structured(f) for f in STRUCTURED}


def after(cap, func, args, kwargs, out):
    """The unreduced loss and the reduction's staging, after the output; the loss freed last."""
    if func not in STRUCTURED or not isinstance(out, torch.Tensor):
        return
    red = _reduction(func, args, kwargs)
    if red == 0:
        return
    numel = 1
    for s in torch.broadcast_shapes(args[0].shape, args[1].shape):
        numel *= s
    n = numel * out.element_size()
    if n == 0:
        return
    a = cap.fake_alloc(n, f"{func.name()}: unreduced loss", SOURCE)
    reduction.launch(cap, (1, numel, True), out.dtype, "mean" if red == 1 else "sum")
    cap.fake_free(a, n)
