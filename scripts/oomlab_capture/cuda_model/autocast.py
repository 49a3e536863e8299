"""autocast("cuda"), emulated: meta tensors have no Autocast key, so autocast changes nothing on meta.

aten/src/ATen/autocast_mode.cpp (PyTorch 2.11) registers, for the AutocastCUDA key, per op:
  lower_precision_fp  cast every eligible (floating, not float64) tensor argument to the autocast dtype
                      (mm, matmul, linear, addmm, bmm, baddbmm, conv*, scaled_dot_product_attention, ...);
  fp32                cast them to float32 (exp, log, pow, layer_norm, group_norm, mse_loss, nll_loss, ...);
  fp32_set_opt_dtype  run with dtype=float32 when the input is of lower precision: no copy of the input, an
                      fp32 output (softmax, log_softmax, sum, prod, cumsum, cumprod, linalg_vector_norm);
and aten/src/ATen/autocast_mode.h cached_cast(): a lower-precision cast of a leaf float32 tensor that requires
grad (a weight) is cached until the outermost autocast region exits (clear_autocast_cache), so each weight
is cast once per region and its copy lives until then. The casts are .to() calls, recorded by autograd (the
casted tensors are what the op saves), so their allocations and lifetimes come out as on CUDA.

The emulation casts at the torch-function level (devmap.DeviceMap, and the by-name patches of F.linear and
F.scaled_dot_product_attention, which also reach calls made inside other torch functions such as
nn.MultiheadAttention's). Calls made inside a torch function that is not patched by name are not cast (the
function mode does not see them): F.cross_entropy is handled as a whole (log_softmax in the input's dtype, then
nll_loss on its float32 cast), as its CompositeImplicit decomposition runs under AutocastCUDA. Not modelled: the "promote" ops
(cat, stack, addcmul, ...), which run in the widest input type.
"""
import torch
import torch.nn.functional as F

SOURCE = "aten/src/ATen/autocast_mode.cpp (CUDA op lists); autocast_mode.h cached_cast"

T = torch.Tensor
LOWER = {torch.matmul, T.matmul, T.__matmul__, T.__rmatmul__, torch.mm, T.mm, torch.bmm, T.bmm, torch.addmm,
         T.addmm, torch.baddbmm, T.baddbmm, torch.addbmm, torch.addmv, torch.mv, torch.addr, torch.einsum,
         F.linear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d,
         torch.prelu, torch.chain_matmul}
FP32 = {torch.exp, T.exp, torch.log, T.log, torch.log2, torch.log10, torch.log1p, T.log1p, torch.expm1,
        torch.reciprocal, T.reciprocal, torch.rsqrt, T.rsqrt, torch.acos, torch.asin, torch.cosh, torch.sinh,
        torch.tan, torch.erfinv, torch.pow, T.pow, T.__pow__, F.softplus, F.layer_norm, F.group_norm,
        F.cosine_similarity, F.nll_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.mse_loss, F.kl_div,
        F.binary_cross_entropy_with_logits, F.margin_ranking_loss, F.soft_margin_loss, F.poisson_nll_loss,
        torch.cdist, torch.dist, torch.logsumexp, T.logsumexp, torch.renorm}
SET_DTYPE = {torch.softmax, T.softmax, F.softmax, torch.log_softmax, T.log_softmax, F.log_softmax, torch.sum,
             T.sum, torch.prod, T.prod, torch.cumsum, T.cumsum, torch.cumprod, T.cumprod,
             torch.linalg.vector_norm}
CROSS_ENTROPY = F.cross_entropy
_LOG_SOFTMAX = {torch.log_softmax, T.log_softmax, F.log_softmax}
_SOFTMAX = _LOG_SOFTMAX | {torch.softmax, T.softmax, F.softmax}


def enabled():
    return torch.is_autocast_enabled("cuda")


def _eligible(t):
    return isinstance(t, torch.Tensor) and t.is_meta and t.is_floating_point() and t.dtype != torch.float64


def cast(cap, t, dtype, lower):
    if not _eligible(t) or t.dtype == dtype:
        return t
    cache = cap.state.setdefault("autocast_cache", {})
    cacheable = (lower and torch.is_autocast_cache_enabled() and t.is_leaf and t.requires_grad
                 and t.dtype == torch.float32)
    if cacheable and id(t) in cache and cache[id(t)][0] is t:
        return cache[id(t)][1]
    out = t.to(dtype)
    cap.count_modelled(f"autocast cast to {str(dtype).replace('torch.', '')}", 0, SOURCE)
    if cacheable:
        cache[id(t)] = (t, out)
    return out


def _map(cap, x, dtype, lower):
    if isinstance(x, (list, tuple)):
        return type(x)(_map(cap, v, dtype, lower) for v in x)
    return cast(cap, x, dtype, lower)


def cast_args(cap, args, kwargs, dtype, lower):
    """The arguments cast, last argument first: autocast_mode.h's WrapFunction_::call is
    `(*F)(cached_cast(dtype, args, device_type)...)`, a pack expansion in a function call, whose arguments GCC
    (the compiler of PyTorch's Linux wheels) evaluates right to left on x86-64; the H100 recording of
    autocast_bf16 shows F.linear's casts as bias, weight, input. A list argument is cast in its order
    (cached_cast's loop)."""
    items = [(None, i, a) for i, a in enumerate(args)] + [(k, None, v) for k, v in kwargs.items()]
    done = {}
    for key, i, v in reversed(items):
        done[(key, i)] = _map(cap, v, dtype, lower)
    return (tuple(done[(None, i)] for i in range(len(args))),
            {k: done[(k, None)] for k in kwargs})


def function(cap, func, args, kwargs):
    """The call as AutocastCUDA runs it, or NotImplemented."""
    if not enabled():
        return NotImplemented
    if func in LOWER:
        a, k = cast_args(cap, args, kwargs, torch.get_autocast_dtype("cuda"), True)
        return func(*a, **k)
    if func in FP32:
        a, k = cast_args(cap, args, kwargs, torch.float32, False)
        return func(*a, **k)
    if func in SET_DTYPE:
        x = args[0] if args else kwargs.get("input")
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if func in _SOFTMAX and _eligible(x) and x.dtype == torch.float16 and isinstance(dim, int):
            # SoftMax.cpp softmax/log_softmax(dtype=float): a CUDA half input takes _softmax(half_to_float)
            # with no float copy of the input (every other case, meta included, copies first)
            op = torch.ops.aten._log_softmax if func in _LOG_SOFTMAX else torch.ops.aten._softmax
            return op(x, dim, True)
        if _eligible(x) and x.dtype in (torch.float16, torch.bfloat16) and kwargs.get("dtype") is None:
            return func(*args, **dict(kwargs, dtype=torch.float32))
        return NotImplemented
    if func is CROSS_ENTROPY:
        x = args[0] if args else kwargs.get("input")
        target = args[1] if len(args) > 1 else kwargs.get("target")
        extra = dict(zip(["weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"],
                         args[2:]), **{k: v for k, v in kwargs.items() if k not in ("input", "target")})
        if (_eligible(x) and extra.get("label_smoothing") and isinstance(target, torch.Tensor)
                and not target.is_floating_point() and extra.get("size_average") is None
                and extra.get("reduce") is None):
            return _ce_label_smoothing(cap, x, target, extra.get("weight"), extra.get("reduction", "mean"),
                                       extra.get("ignore_index", -100), extra["label_smoothing"])
        if (_eligible(x) and not extra.get("label_smoothing") and isinstance(target, torch.Tensor)
                and not target.is_floating_point()):
            # native/LossNLL.cpp cross_entropy_loss_symint: log_softmax(self, class_dim, self.scalar_type()), whose
            # dtype is given, so fp32_set_opt_dtype keeps it (autocast_mode.h set_opt_dtype): the log-probs are in
            # the input's dtype; then nll_loss, an fp32 op, casts them (and a lower-precision weight) to float32,
            # the last argument first as every autocast wrapper does (cast_args).
            lsm = F.log_softmax(x, 1 if x.dim() > 1 else 0, dtype=x.dtype)
            weight = extra.get("weight")
            if isinstance(weight, torch.Tensor):
                weight = cast(cap, weight, torch.float32, False)
            lsm = cast(cap, lsm, torch.float32, False)
            return F.nll_loss(lsm, target, weight=weight, ignore_index=extra.get("ignore_index", -100),
                              reduction=extra.get("reduction", "mean"))
    return NotImplemented


def _ce_label_smoothing(cap, x, target, weight, reduction, ignore_index, label_smoothing):
    """native/LossNLL.cpp cross_entropy_loss_label_smoothing under AutocastCUDA, op for op: the log-probs in the
    input's dtype (dtype given), nll_loss an fp32 op (its casts, the last argument first), sum fp32_set_opt_dtype
    (a float32 result of lower-precision log-probs, no copy); a / b and a + b evaluate b first, as GCC does, and
    tensors die as C++ destroys them (a full expression's temporaries in reverse, then a block's locals in reverse
    order of declaration)."""
    cd = 0 if x.dim() == 1 else 1
    inp = F.log_softmax(x, cd, dtype=x.dtype)
    w32 = cast(cap, weight, torch.float32, False) if isinstance(weight, torch.Tensor) else weight
    nll = F.nll_loss(cast(cap, inp, torch.float32, False), target, weight=w32, ignore_index=ignore_index,
                     reduction=reduction)
    del w32
    n_classes = inp.size(cd)

    def fp32_sum(t, *dim):
        return t.sum(*dim, dtype=torch.float32) if t.dtype in (torch.float16, torch.bfloat16) else t.sum(*dim)
    if isinstance(weight, torch.Tensor):
        shape = [1] * inp.dim()
        shape[cd] = weight.size(0)
        smooth = -fp32_sum(inp * weight.view(shape), cd)
    else:
        smooth = -fp32_sum(inp, cd)
    ignore_mask = target == ignore_index
    smooth.masked_fill_(ignore_mask, 0.0)
    if reduction == "mean":
        if isinstance(weight, torch.Tensor):
            den = weight.gather(0, target.masked_select(~ignore_mask).flatten()).sum()
            num = smooth.sum()
            ret = num / den
            del num, den
        else:
            true_mask = ~ignore_mask
            den = true_mask.sum()
            num = smooth.sum()
            ret = num / den
            del num, den, true_mask
    elif reduction == "sum":
        ret = smooth.sum()
    else:
        ret = smooth
    b = ret * (label_smoothing / n_classes)
    out = (1 - label_smoothing) * nll + b
    del b, ret, ignore_mask, smooth, nll
    return out


def clear(cap):
    cap.state.pop("autocast_cache", None)
