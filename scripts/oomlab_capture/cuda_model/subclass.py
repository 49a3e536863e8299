"""Out-of-place paths that meta takes and CUDA does not.

PyTorch treats meta tensors as subclass-like (aten/src/ATen/TensorSubclassLikeUtils.h isTensorSubclassLike
includes the Meta key), and some code picks an out-of-place form for them:
- gradient accumulation, torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad(): with a .grad already
  there and grad mode off, CUDA does `variable_grad += new_grad` (no allocation); a subclass-like grad gets
  `update_grad(variable_grad + new_grad)`: a new gradient-sized tensor. The model runs the in-place add when
  aten::add reaches the dispatcher from an AccumulateGrad node.
- gradient accumulation between nodes, torch/csrc/autograd/input_buffer.cpp accumulate(): when two gradients
  reach one input of a node, CUDA adds the second into the first in place if can_accumulate_inplace(old) (not
  subclass-like, non-overlapping and dense in any layout, its storage used once); meta always does `old + var`.
  The model runs the in-place add for an aten::add of two same-shaped gradients during backward whose first
  operand's storage is used by that tensor alone (measured: timm_resnet50_cl's channels-last residual gradients
  are added in place).
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
- advanced indexing's backward, FunctionsManual.cpp index_backward(): zeros_like(self), then
  `at::_index_put_impl_(zeros_like_self, indices, grad, true, true)` in place on CUDA, `index_put` (a copy of
  zeros_like_self) for a subclass-like grad. The model runs the in-place op, with CUDA's sort kernel's allocations
  (indexing.py), when aten::index_put reaches the dispatcher from an IndexBackward node (measured: timm_swin_t's
  relative position bias).
"""
import torch

from .composite import dense

aten = torch.ops.aten
SOURCE = "torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad (isTensorSubclassLike branch)"
SOURCE_LINEAR = "aten/src/ATen/native/Linear.cpp linear (isTensorSubclassLike bias add)"


SOURCE_BUFFER = "torch/csrc/autograd/input_buffer.cpp accumulate/can_accumulate_inplace"


SOURCE_GATHER = "torch/csrc/autograd/FunctionsManual.cpp gather_backward (areAnyTensorSubclassLike branch)"


SOURCE_INDEX = "torch/csrc/autograd/FunctionsManual.cpp index_backward (areAnyTensorSubclassLike branch)"


def replace(cap, func, args, kwargs):
    if func is aten.index_put.default and len(args) >= 4 and args[3] and not kwargs:
        node = torch._C._current_autograd_node()
        if node is None or not node.name().startswith("IndexBackward"):
            return NotImplemented
        from . import indexing
        # index_backward: at::_index_put_impl_(zeros_like_self, indices, grad, true, true) in place on CUDA
        if indexing.index_put_accumulate(cap, args[0], args[1], args[2], True) is None:
            return NotImplemented
        cap.count_modelled("index backward's in-place index_put (meta puts out of place)", 0, SOURCE_INDEX)
        return aten._index_put_impl_.default(args[0], args[1], args[2], True, True)
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
    # the engine's input buffer (input_buffer.cpp accumulate): old += var where can_accumulate_inplace(old) (dense
    # and non-overlapping, any layout: a channels-last gradient too; its storage used by nothing else: its one
    # tensor, plus the reference the use count query itself takes), else old + var (var += old is for sparse old)
    if torch.is_grad_enabled():
        return NotImplemented
    if (dense(a) and not a.requires_grad
            and torch._C._storage_Use_Count(a.untyped_storage()._cdata) <= 2):
        cap.count_modelled("in-place accumulation of two gradients (meta adds out of place)", 0, SOURCE_BUFFER)
        return aten.add_.Tensor(a, b)
    return NotImplemented


def linear(cap, orig, input, weight, bias=None):
    """F.linear as Linear.cpp runs it on CUDA."""
    if (bias is None or not isinstance(input, torch.Tensor) or not input.is_meta or input.dim() == 2
            or input.dim() == 0 or weight.dim() == 0
            or (input.is_contiguous() and (input.dim() == 3 or bias.dim() == 1))):
        return orig(input, weight, bias)
    cap.count_modelled("in-place bias add of linear (meta adds out of place)", 0, SOURCE_LINEAR)
    out = torch.matmul(input, weight.t())
    return out.add_(bias)
