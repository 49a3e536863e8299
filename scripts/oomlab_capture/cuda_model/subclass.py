"""Out-of-place paths that meta takes and CUDA does not.

PyTorch treats meta tensors as subclass-like (aten/src/ATen/TensorSubclassLikeUtils.h isTensorSubclassLike
includes the Meta key), and some code picks an out-of-place form for them:
- gradient accumulation, torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad(): with a .grad already
  there and grad mode off, CUDA does `variable_grad += new_grad` (no allocation); a subclass-like grad gets
  `update_grad(variable_grad + new_grad)`: a new gradient-sized tensor. The model runs the in-place add when
  aten::add reaches the dispatcher from an AccumulateGrad node.
- gradient accumulation between nodes, torch/csrc/autograd/input_buffer.cpp accumulate(): when two gradients
  reach one input of a node, CUDA adds the second into the first in place if can_accumulate_inplace(old) (not
  subclass-like, dense, its storage used once); meta always does `old + var`. The model runs the in-place add
  for an aten::add of two same-shaped gradients during backward whose first operand's storage is used by that
  tensor alone.
- F.linear, aten/src/ATen/native/Linear.cpp linear(): when neither the fused addmm (2-D input) nor
  _flatten_nd_linear (a contiguous input) applies, it computes matmul and adds the bias: `output.add_(bias)` on
  CUDA, `output = at::add(output, bias)` for a subclass-like bias (a second output-sized tensor). Met by
  nn.MultiheadAttention's in-projection of a batch_first input (transposed, so not contiguous). The model
  replaces F.linear by that same logic with the in-place add.
- torch.gather's backward, torch/csrc/autograd/FunctionsManual.cpp gather_backward(): grad.new_zeros(self's
  sizes), then `result.scatter_add_(dim, index, grad)` on CUDA, `result.scatter_add(...)` (a second tensor of
  self's size) for a subclass-like index or grad. The model runs the in-place scatter_add_ when aten::scatter_add
  reaches the dispatcher from a GatherBackward node (measured: hf_deberta_v2's recording, its relative
  attention's gathers).
"""
import torch

aten = torch.ops.aten
SOURCE = "torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad (isTensorSubclassLike branch)"
SOURCE_LINEAR = "aten/src/ATen/native/Linear.cpp linear (isTensorSubclassLike bias add)"


SOURCE_BUFFER = "torch/csrc/autograd/input_buffer.cpp accumulate/can_accumulate_inplace"


SOURCE_GATHER = "torch/csrc/autograd/FunctionsManual.cpp gather_backward (areAnyTensorSubclassLike branch)"


def replace(cap, func, args, kwargs):
    if func is aten.scatter_add.default:
        node = torch._C._current_autograd_node()
        if node is None or not node.name().startswith("GatherBackward") or kwargs:
            return NotImplemented
        cap.count_modelled("gather backward's in-place scatter_add_ (meta scatters out of place)", 0, SOURCE_GATHER)
        return aten.scatter_add_.default(*args)
    if func is not aten.add.Tensor or kwargs.get("alpha", 1) != 1 or len(args) != 2:
        return NotImplemented
    node = torch._C._current_autograd_node()
    if node is None:
        return NotImplemented
    a, b = args[0], args[1]
    if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
        return NotImplemented
    if "AccumulateGrad" in node.name():
        cap.count_modelled("in-place gradient accumulation into .grad (meta adds out of place)", 0, SOURCE)
        return aten.add_.Tensor(a, b)
    # the engine's input buffer: the old gradient is used by nothing else (its storage's one tensor, plus the
    # reference the use count query itself takes)
    if (torch.is_grad_enabled() or not a.is_contiguous() or a.requires_grad
            or torch._C._storage_Use_Count(a.untyped_storage()._cdata) > 2):
        return NotImplemented
    cap.count_modelled("in-place accumulation of two gradients (meta adds out of place)", 0, SOURCE_BUFFER)
    return aten.add_.Tensor(a, b)


def linear(cap, orig, input, weight, bias=None):
    """F.linear as Linear.cpp runs it on CUDA."""
    if (bias is None or not isinstance(input, torch.Tensor) or not input.is_meta or input.dim() == 2
            or input.dim() == 0 or weight.dim() == 0
            or (input.is_contiguous() and (input.dim() == 3 or bias.dim() == 1))):
        return orig(input, weight, bias)
    cap.count_modelled("in-place bias add of linear (meta adds out of place)", 0, SOURCE_LINEAR)
    out = torch.matmul(input, weight.t())
    return out.add_(bias)
