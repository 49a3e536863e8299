"""Ops that have no CUDA kernel: CUDA runs their CompositeExplicitAutograd kernel, meta its own meta function.

The two can allocate differently: on meta, aten::mean (no dim) makes a 4-byte temporary that its composite
kernel on CUDA does not. aten/src/ATen/native/ReduceOps.cpp (PyTorch 2.11): mean(self, dtype) is
at::mean(self, IntArrayRef{}, false, dtype) and sum(self, dtype) is at::sum(self, IntArrayRef{}, false, dtype):
one call of the op that has the CUDA kernel. REWRITE runs those calls instead (bracketed like any op with a CUDA
kernel, so nothing of meta's leaks).

Every other op without a CUDA kernel but with a meta function of its own is bracketed too (its meta
temporaries dropped); the temporaries its composite kernel makes on CUDA are added here where known:
- aten::embedding (aten/src/ATen/native/Embedding.cpp embedding_symint): weight.index_select(0,
  indices.reshape(-1)): reshape copies non-contiguous indices (a [:, :-1] slice of the tokens) before the
  output is allocated; the copy is freed when embedding returns (measured: tests/data/addr_gpt.trace.json).
- aten::index (x[mask], x[i, j]): make_info's allocations on CUDA (a mask's nonzero, host and int32 indices
  moved or widened, indices of differing strides made contiguous) are indexing.advanced_index's; a mask's count
  comes from the data where the capture has it (values.py), else every element is assumed selected (a
  placeholder, listed).
- aten::native_layer_norm and native_layer_norm_backward (CUDA kernels, aten/src/ATen/native/cuda/
  layer_norm_kernel.cu layer_norm_cuda / layer_norm_backward_cuda): X = input.expect_contiguous() copies a
  non-contiguous input (a ViT's x[:, 0] before its final norm) before Y (dX) is allocated, freed when the op
  returns; backward also passes dY.contiguous() to LayerNormBackwardKernelImpl, a copy of a non-contiguous
  gradient made after dX, dgamma and dbeta and freed first. Meta's functions make neither copy. The H200 recording
  of tests/data/predict/scripts/vit.py shows both (its final norm's input; each block's norm1, whose gradient comes
  back through nn.MultiheadAttention's packed in-projection).
- aten::pow.Scalar (a Python number to a tensor's power, `theta ** x`; aten/src/ATen/native/Pow.cpp
  TORCH_IMPL_FUNC(pow_Scalar_out)): unless the base is 1, at::pow_out(out, wrapped_scalar_tensor(base,
  exp.device()), exp), and wrapped_scalar_tensor (ATen/ScalarOps.h scalar_to_tensor) makes a 0-dim tensor of the
  Scalar's own type on the exponent's device: 8 bytes for a float (double) or int (int64), after the output, freed
  when the op returns. The H100 recording of tests/data/predict/scripts/llama.py shows it (rope_tables' inverse
  frequencies, once per step).
"""
import math

import torch

aten = torch.ops.aten


def dense(t):
    """TensorImpl::is_non_overlapping_and_dense (torch._prims_common's transcription)."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false
    return is_non_overlapping_and_dense_or_false(t)
SOURCE = "aten/src/ATen/native/ReduceOps.cpp mean(self, dtype) / sum(self, dtype)"

SOURCE_ROLL = ("aten/src/ATen/native/cuda/TensorTransformations.cu roll_cuda (self.contiguous(), one dim at a "
               "time: native/TensorTransformations.h roll_common)")


def roll(cap, x, shifts, dims=()):
    """aten::roll as roll_cuda runs it: several dims roll one at a time (roll_common), each single-dim roll makes
    a non-contiguous input contiguous first (freed when it returns) and a contiguous output; the intermediate
    results are freed when the next roll has made its own. Meta's function allocates the final output only: the
    rest are fake allocations around it."""
    shifts, dims = list(shifts), list(dims)
    n = x.numel() * x.element_size()
    if not dims and len(shifts) == 1 or n == 0:
        return aten.roll.default(x, shifts, dims)
    steps = list(zip(shifts, dims)) if len(dims) > 1 else [(shifts[0], dims[0])]
    prev, contiguous = None, x.is_contiguous()
    for k in range(len(steps)):
        last = k == len(steps) - 1
        copy = None if contiguous else cap.fake_alloc(n, "roll: input made contiguous", SOURCE_ROLL)
        if last:
            out = aten.roll.default(x, shifts, dims)
        else:
            cur = cap.fake_alloc(n, "roll: one dimension rolled", SOURCE_ROLL)
        if copy is not None:
            cap.fake_free(copy, n)
        if prev is not None:
            cap.fake_free(prev, n)
        if not last:
            prev, contiguous = cur, True
    return out


SOURCE_LN_BWD = ("aten/src/ATen/native/cuda/layer_norm_kernel.cu LayerNormBackwardKernelImplInternal (M > 64 * 1024 "
                 "and N / 32 < SMs / 2: dgamma_blocks, dbeta_blocks, then *dgamma = dgamma_blocks.sum(0))")


def layer_norm_backward(cap, dy, x, normalized_shape, mean, rstd, weight, bias, mask):
    """aten::native_layer_norm_backward: where M rows are many and N columns few, CUDA computes dgamma and dbeta in
    two stages: partial sums per block of 32 rows ([blocks.y, N], dgamma's dtype), then .sum(0) of each into a new
    tensor, which replaces (frees) the empty_like dgamma and dbeta allocated first. Meta's function makes the
    gradients directly: the rest are fake allocations around them. (Measured: timm_swin_t's recording, its first
    stage's 100,352 rows of 96.)"""
    from . import cub, reduction
    n = math.prod(normalized_shape)
    m = x.numel() // n if n else 0
    if not (m > 64 * 1024 and n // 32 < cap.gpu["sm_count"] // 2 and weight is not None and (mask[1] or mask[2])):
        return aten.native_layer_norm_backward.default(dy, x, normalized_shape, mean, rstd, weight, bias, mask)
    dx = aten.native_layer_norm_backward.default(dy, x, normalized_shape, mean, rstd, weight, bias,
                                                 [mask[0], False, False])[0]
    wsize = weight.element_size()
    first = [cap.fake_alloc(n * wsize, "layer norm backward: dgamma and dbeta (empty_like)", SOURCE_LN_BWD)
             if mask[i] else None for i in (1, 2)]
    by = min((32 * 1024) // cub.cdiv(n, 32), cub.cdiv(m, 32))
    blocks = [cap.fake_alloc(by * n * wsize, "layer norm backward: partial sums per block", SOURCE_LN_BWD)
              if first[i] is not None else None for i in (0, 1)]
    out = []
    for i in (0, 1):
        if first[i] is None:
            out.append(None)
            continue
        out.append(torch.empty(tuple(normalized_shape), dtype=weight.dtype, device=x.device))
        reduction.launch(cap, (n, by, False), weight.dtype, "sum")
        cap.fake_free(first[i], n * wsize)
    for b in reversed(blocks):
        if b is not None:
            cap.fake_free(b, by * n * wsize)
    return dx, out[0], out[1]


REWRITE = {
    aten.native_layer_norm_backward.default: layer_norm_backward,
    aten.mean.default: lambda cap, x, dtype=None: aten.mean.dim(x, [], False, dtype=dtype),
    aten.sum.default: lambda cap, x, dtype=None: aten.sum.dim_IntList(x, [], False, dtype=dtype),
    aten.roll.default: roll,
}

SOURCE_EMB = "aten/src/ATen/native/Embedding.cpp embedding_symint (indices.reshape(-1))"


SOURCE_LN = "aten/src/ATen/native/cuda/layer_norm_kernel.cu layer_norm_cuda/layer_norm_backward_cuda (expect_contiguous)"
SOURCE_SAFE_SOFTMAX = "aten/src/ATen/native/transformers/attention.cpp _safe_softmax (isneginf, all, masked_fill_)"
SOURCE_SOFTMAX_BWD = "aten/src/ATen/native/cuda/SoftMax.cu softmax_backward_cuda_out (tmp = grad * output)"
SOURCE_ISINF = "aten/src/ATen/native/TensorCompare.cpp isinf (self.abs() == inf)"
SOURCE_CUM = "aten/src/ATen/native/ReduceOps.cpp impl_func_cum_ops (self.to(result.scalar_type()))"
SOURCE_COPY = "aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda (copy_requires_temporaries, dst_contig)"
SOURCE_POW = "aten/src/ATen/native/Pow.cpp pow_Scalar_out (wrapped_scalar_tensor(base, exp.device()))"
AFTER_OUTPUTS = object()  # a held entry allocated in after(), once the op has made its outputs
LAYER_NORM = {aten.native_layer_norm.default: 0, aten.native_layer_norm_backward.default: 1}  # op -> input's index


# op -> the order (indices into its outputs) in which its CUDA kernel allocates them (recorder.ALLOC_ORDER):
# aten/src/ATen/native/cuda/EmbeddingBag.cu _embedding_bag_cuda (also _embedding_bag_forward_only_cuda's) makes
# bag_size, offset2bag, output, then max_indices and returns (output, offset2bag, bag_size, max_indices); the H100
# recording of tests/data/predict/scripts/inference_nograd.py shows that order
ALLOC_ORDER = {aten._embedding_bag.default: (2, 1, 0, 3), aten._embedding_bag_forward_only.default: (2, 1, 0, 3)}

def before(cap, func, args, kwargs):
    if func is aten.index.Tensor:
        from . import indexing

        def count(m):
            v = cap.values.get(m)
            if v is not None:
                cap.answered("aten::index with a boolean mask")
                return int(v.count_nonzero())
            cap.placeholder("aten::index with a boolean mask (every element selected)")
            return m.numel()
        return indexing.advanced_index(cap, args[0], args[1], count) or None
    if func in LAYER_NORM:
        held = []
        x = args[LAYER_NORM[func]]
        if not x.is_contiguous() and x.numel() > 0:
            n = x.numel() * x.element_size()
            held.append((cap.fake_alloc(n, "layer_norm: input made contiguous", SOURCE_LN), n))
        dy = args[0]
        if func is aten.native_layer_norm_backward.default and not dy.is_contiguous() and dy.numel() > 0:
            held.append((AFTER_OUTPUTS, dy.numel() * dy.element_size(), "layer_norm backward: dY made contiguous",
                         SOURCE_LN))
        return held or None
    if func is aten.pow.Scalar:
        base = args[0] if args else kwargs.get("self")
        exp = args[1] if len(args) > 1 else kwargs.get("exponent")
        if not isinstance(base, (bool, int, float, complex)) or base == 1 or not getattr(exp, "is_meta", False):
            return None
        n = 1 if isinstance(base, bool) else 16 if isinstance(base, complex) else 8
        return [(AFTER_OUTPUTS, n, "pow.Scalar: the base wrapped as a device scalar", SOURCE_POW)]
    if func is aten.isinf.default:
        # TensorCompare.cpp isinf: self.abs() == inf for a floating (not complex) input, the abs a temporary
        # before the output (measured: the Trainer's NaN/inf filter on the loss, hf_gptneox_trainer)
        x = args[0]
        if not x.is_floating_point() or x.numel() == 0:
            return None
        n = x.numel() * x.element_size()
        return [(cap.fake_alloc(n, "isinf: abs(self)", SOURCE_ISINF), n)]
    if func in (aten.cumsum.default, aten.cumprod.default):
        # ReduceOps.cpp impl_func_cum_ops: stub(result, self.to(result.scalar_type()), dim), a converted copy made
        # after the result (an int32 mask's cumsum is int64), freed on return (measured: hf_roberta_mlm's position
        # ids)
        x = args[0]
        dt = args[2] if len(args) > 2 and args[2] is not None else kwargs.get("dtype")
        if dt is None:
            dt = torch.int64 if not (x.is_floating_point() or x.is_complex()) else x.dtype
        if dt == x.dtype or x.dim() == 0 or x.numel() == 0:
            return None
        return [(AFTER_OUTPUTS, x.numel() * dt.itemsize, "cumsum/cumprod: the input in the result's dtype",
                 SOURCE_CUM)]
    if func is aten._safe_softmax.default:
        # attention.cpp _safe_softmax: softmax, then isneginf(self) and its all(dim, keepdim) (bool), and the 0 that
        # masked_fill_ writes (a scalar tensor of the output's dtype), freed when the op returns (measured: the H200
        # SDPA probes, the math path)
        x, dim = args[0], args[1] % max(args[0].dim(), 1)
        if x.numel() == 0:
            return None
        esize = (args[2] if len(args) > 2 and args[2] is not None else kwargs.get("dtype") or x.dtype).itemsize
        return [(AFTER_OUTPUTS, x.numel(), "_safe_softmax: isneginf", SOURCE_SAFE_SOFTMAX),
                (AFTER_OUTPUTS, x.numel() // x.size(dim), "_safe_softmax: all(dim)", SOURCE_SAFE_SOFTMAX),
                (AFTER_OUTPUTS, esize, "_safe_softmax: the fill value", SOURCE_SAFE_SOFTMAX)]
    if func is aten._softmax_backward_data.default:
        # native/cuda/SoftMax.cu softmax_backward_cuda_out: Tensor tmp = grad * output, after grad_input, freed on
        # return (log_softmax's backward has no such product)
        g, y = args[0], args[1]
        n = 1
        for d in torch.broadcast_shapes(g.shape, y.shape):
            n *= d
        if n == 0:
            return None
        return [(AFTER_OUTPUTS, n * torch.promote_types(g.dtype, y.dtype).itemsize,
                 "softmax backward: grad * output", SOURCE_SOFTMAX_BWD)]
    if func is aten.embedding.default:
        idx = args[1]
        if not idx.is_contiguous() and idx.numel() > 0:
            n = idx.numel() * idx.element_size()
            return [(cap.fake_alloc(n, "embedding: indices reshaped (copied)", SOURCE_EMB), n)]
    return None


def _dense_same(a, b):
    """TensorIterator sees one contiguous run: both dense, non-overlapping, with the same strides."""
    return a.shape == b.shape and a.stride() == b.stride() and dense(a)


def copy_temporary(cap, func, args, kwargs, out):
    """native/cuda/Copy.cu copy_kernel_cuda between the host and the device: unless the dtypes are the same and
    TensorIterator sees one contiguous run (copy_requires_temporaries), the copy goes through contiguous
    temporaries; the one on the device is empty_like(dst, contiguous) when the device side is dst and not
    contiguous (the host's are host memory). aten::_to_copy to the device allocates it after its output; copy_
    into a device tensor within the op. Freed when the copy returns."""
    if func is aten._to_copy.default:
        src, dst = args[0], out
    elif func is aten.copy_.default:
        dst, src = args[0], args[1]
    else:
        return
    if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and dst.is_meta and cap.on_host(src)):
        return
    if dst.numel() == 0 or dst.is_contiguous() or (src.dtype == dst.dtype and _dense_same(src, dst)):
        return
    n = dst.numel() * dst.element_size()
    cap.fake_free(cap.fake_alloc(n, "host-to-device copy: a contiguous device temporary", SOURCE_COPY), n)


def after(cap, held):
    """Free what before() held; an AFTER_OUTPUTS entry is a temporary the kernel makes after its outputs: made
    now, freed first."""
    held = held or ()
    post = [(cap.fake_alloc(h[1], h[2], h[3]), h[1]) for h in held if h[0] is AFTER_OUTPUTS]
    for a, n in list(reversed(post)) + [h for h in held if h[0] is not AFTER_OUTPUTS]:
        cap.fake_free(a, n)
