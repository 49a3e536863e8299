"""F.scaled_dot_product_attention: the backend CUDA would choose, and what that backend allocates and saves.

On meta, scaled_dot_product_attention's choice (the _fused_sdp_choice stub) has no meta kernel and takes the
math path: the full L x L attention matrices, saved for backward. CUDA picks by
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (PyTorch 2.11) select_sdp_backend, in priority_order: cuDNN
attention first where check_prefer_cudnn_attention() holds (TORCH_CUDNN_SDPA_DEPRIORITIZED unset, the runtime
cuDNN newer than 9.15.0, compute capability 9.0, 10.0 or 10.3: torch 2.11.0+cu130 requires cuDNN 9.19.0.56, and
its libtorch_cuda.so carries that function's TORCH_CUDNN_SDPA_DEPRIORITIZED and cudnn_version statics), then flash,
memory-efficient, math, each subject to the torch.backends.cuda *_sdp_enabled() switches and its checks:
  cudnn      can_use_cudnn_attention: fp16/bf16 (all three alike), 4-D dense q/k/v with a unit last stride,
             deterministic algorithms off, head dim a multiple of 8 and <= 256 on sm 9.0 (<= 128 elsewhere),
             key length > 1, no dropout with query length 1 (check_cudnn_tensor_shapes); an attn_mask goes in as a
             bias, which is not modelled: with a mask the capture keeps the choice below and says so;
  flash      fp16/bf16, 4-D q/k/v, no attn_mask, head dim <= 256 and a multiple of 8, compute capability >= 8.0
             (sm 8.6/8.9 refuse head dim > 192 with grad);
  efficient  fp16/bf16/fp32, 4-D q/k/v, head dim a multiple of 8 (4 for fp32 before sm 8.0), same head dim for
             q, k and v; an attn_mask goes in as a bias (bool masks become float first,
             sdp_utils convert_boolean_attn_mask).
The chosen op then runs on meta, where its meta function allocates what the CUDA kernel allocates: flash:
output and logsumexp [B, H, L] fp32; efficient (attention_backward/attention.cu _efficient_attention_forward):
output [B, L, H, Dv] and logsumexp [B, H, ceil(L/32)*32] fp32 when grad is needed. The Philox seed and offset
are CPU tensors on CUDA: the meta function's 8-byte meta tensors for them are not device bytes and are left out.
"""
import torch

aten = torch.ops.aten
SOURCE = "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp select_sdp_backend; attention.cu"


def _unpack(args, kwargs):
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    vals = dict(zip(names, args))
    vals.update(kwargs)
    return (vals["query"], vals["key"], vals["value"], vals.get("attn_mask"), vals.get("dropout_p", 0.0),
            vals.get("is_causal", False), vals.get("scale"), vals.get("enable_gqa", False))


# The runtime cuDNN of torch 2.11.0+cu130 (its wheel's Requires-Dist: nvidia-cudnn-cu13==9.19.0.56), as
# cudnnGetVersion() gives it (major * 10000 + minor * 100 + patch)
CUDNN_RUNTIME = 91900


def _env_true(name):
    """c10::utils::check_env(name) == true."""
    import os
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE", "Y")


def cudnn_preferred(gpu):
    """sdp_utils.cpp check_prefer_cudnn_attention()."""
    from .. import gpus
    major, minor = gpus.capability(gpu)
    return (not _env_true("TORCH_CUDNN_SDPA_DEPRIORITIZED") and CUDNN_RUNTIME > 91500 and major in (9, 10)
            and minor in (0, 3))


def _dense_last_stride(ts, ignore_singleton):
    """sdp_utils_cpp.h check_last_dim_stride_equals_1_dense (a mask included, as on the GPU)."""
    return all(t.stride(-1) == 1 or (ignore_singleton and t.size(-1) == 1) for t in ts if t is not None)


def _heads_ok(q, k, v, enable_gqa, supports_gqa, same_kv_heads):
    """check_batch_size_and_num_heads_dense<supports_gqa, requires_same_num_heads> (2.11: two parameters)."""
    if not (q.size(0) == k.size(0) == v.size(0)):
        return False
    hq, hk, hv = q.size(1), k.size(1), v.size(1)
    if enable_gqa and supports_gqa:
        if same_kv_heads and hk != hv:
            return False
        return hq % hk == 0 and hq % hv == 0
    return hq == hk == hv


def _mask_shape_ok(mask, q, k):
    """check_attn_mask_shape (cuDNN only): no grad; 2-D, or 4-D with batch in {1, B} and heads in {1, Hq};
    its last two dims L or 1 and S or 1."""
    if mask is None:
        return True
    if mask.requires_grad:
        return False
    L, S = q.size(2), k.size(2)
    if mask.size(-2) not in (L, 1) or mask.size(-1) not in (S, 1):
        return False
    if mask.dim() == 2:
        return True
    if mask.dim() != 4:
        return False
    return mask.size(0) in (1, q.size(0)) and mask.size(1) in (1, q.size(1))


def cudnn_usable(gpu, q, k, v, mask, dropout_p, enable_gqa):
    """sdp_utils.cpp can_use_cudnn_attention (2.11): low-precision dtypes, the mask's shape (a bias is taken,
    not one that needs a gradient), grouped-query heads with enable_gqa, check_cudnn_tensor_shapes."""
    from .. import gpus
    major, minor = gpus.capability(gpu)
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    if not (q.dtype in (torch.float16, torch.bfloat16) and k.dtype == q.dtype and v.dtype == q.dtype):
        return False
    if not (8, 0) <= (major, minor) <= (12, 1) or not _mask_shape_ok(mask, q, k):
        return False
    if q.size(2) == 0 or k.size(2) == 0 or not _dense_last_stride((q, k, v, mask), True):
        return False
    if not _heads_ok(q, k, v, enable_gqa, True, False):
        return False
    d_qk, d_v = q.size(3), v.size(3)
    limit = 256 if (major, minor) == (9, 0) and CUDNN_RUNTIME >= 91000 else 128
    if major == 10 and CUDNN_RUNTIME >= 91100 and d_qk == 192 and d_v == 128:
        limit = 192
    if d_qk > limit or d_v > limit or d_qk % 8 or d_v % 8:
        return False
    return k.size(2) != 1 and not (q.size(2) == 1 and dropout_p != 0.0)


def flash_usable(gpu, q, k, v, mask, is_causal, enable_gqa):
    """can_use_flash_attention (2.11): no mask, equal head dims up to 256, sm 8.0 to 12.1, fp16/bf16, a causal
    mask only for L == S, grouped-query heads with enable_gqa and as many key as value heads."""
    from .. import gpus
    major, minor = gpus.capability(gpu)
    if not torch.backends.cuda.flash_sdp_enabled() or mask is not None:
        return False
    d = q.size(-1)
    if not (k.size(-1) == d and v.size(-1) == d and d <= 256) or not (8, 0) <= (major, minor) <= (12, 1):
        return False
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if (major, minor) in ((8, 6), (8, 9), (12, 0)) and d > 192 and grad:
        return False
    if is_causal and q.size(2) != k.size(2):
        return False
    if not (q.dtype in (torch.float16, torch.bfloat16) and k.dtype == q.dtype and v.dtype == q.dtype):
        return False
    return (_heads_ok(q, k, v, enable_gqa, True, True) and q.size(2) > 0 and k.size(2) > 0
            and _dense_last_stride((q, k, v), True))


def efficient_usable(gpu, q, k, v, mask):
    """can_use_mem_efficient_attention (2.11): sm 5.0 to 12.1, fp16/bf16/fp32, equal query and key head dims, both
    head dims a multiple of the GEMM alignment (8 in half precision, 4 in float32), no grouped-query heads (2.11
    instantiates check_batch_size_and_num_heads_dense<false, true> only), the mask's last stride 1."""
    from .. import gpus
    major, minor = gpus.capability(gpu)
    if not torch.backends.cuda.mem_efficient_sdp_enabled() or not (5, 0) <= (major, minor) <= (12, 1):
        return False
    dts = (torch.float16, torch.bfloat16, torch.float32) if major >= 8 else (torch.float16, torch.float32)
    if not (q.dtype in dts and k.dtype == q.dtype and v.dtype == q.dtype):
        return False
    align = 8 if q.dtype != torch.float32 else 4
    if q.size(-1) != k.size(-1) or q.size(-1) % align or v.size(-1) % align:
        return False
    return (q.size(2) > 0 and k.size(2) > 0 and _dense_last_stride((q, k, v, mask), False)
            and _heads_ok(q, k, v, False, False, True))


def choose(gpu, q, k, v, mask, dropout_p, is_causal, enable_gqa, cap=None):
    """select_sdp_backend: the first usable backend in priority order (cuDNN first where preferred)."""
    if not (q.dim() == 4 and k.dim() == 4 and v.dim() == 4):
        return "math"
    tests = {"cudnn": lambda: cudnn_usable(gpu, q, k, v, mask, dropout_p, enable_gqa),
             "flash": lambda: flash_usable(gpu, q, k, v, mask, is_causal, enable_gqa),
             "efficient": lambda: efficient_usable(gpu, q, k, v, mask),
             "math": lambda: True}
    order = ("cudnn", "flash", "efficient", "math") if cudnn_preferred(gpu) else ("flash", "efficient", "math")
    return next(b for b in order if tests[b]())


def _bool_to_float(mask, dtype, neg):
    """attention.cpp convert_boolean_attn_mask_(mask, dtype, neg): where(mask, scalar_tensor(0), scalar_tensor(neg))
    in the query's dtype, at the mask's own shape; a float mask passes through."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    low = torch.scalar_tensor(neg, dtype=dtype, device=mask.device)
    out = torch.where(mask, zero, low)
    del zero, low  # freed before the caller lets go of the bool mask
    return out


def replace(cap, func, args, kwargs):
    q, k, v, mask, dropout_p, is_causal, scale, gqa = _unpack(args, kwargs)
    if not (isinstance(q, torch.Tensor) and q.is_meta):
        return NotImplemented
    backend = choose(cap.gpu, q, k, v, mask, dropout_p, is_causal, gqa, cap)
    cap.count_modelled(f"scaled_dot_product_attention backend {backend}", 0, SOURCE)
    if backend == "math":
        return _math(q, k, v, _bool_to_float(mask, q.dtype, -float("inf")), dropout_p, is_causal, scale, gqa)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if backend == "cudnn":
        # attention.cpp: convert_boolean_attn_mask_cudnn (-65504, the largest negative half), then the op; the
        # logsumexp only when grad is needed (MHA.cpp), the Philox seed and offset on the device (ALLOC_ORDER)
        bias = _bool_to_float(mask, q.dtype, -65504.0)
        res = aten._scaled_dot_product_cudnn_attention(q, k, v, bias, grad, dropout_p, is_causal, False,
                                                       scale=scale)
        if not grad:
            cap.forget(res[1])
        return res[0]
    if backend == "flash":
        res = aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)
        return res[0]  # its Philox seed and offset: dropped by after (PHILOX_ON_HOST)
    bias = _bool_to_float(mask, q.dtype, -float("inf"))
    if bias is not None:
        bias = _pad_bias(bias, q, k)
    res = aten._scaled_dot_product_efficient_attention(q, k, v, bias, grad, dropout_p, is_causal, scale=scale)
    return res[0]  # its Philox seed and offset: dropped by after (PHILOX_ON_HOST)


# The GPU run being modelled had a Python dispatch mode active, which makes every tensor subclass-like to ATen
# (at::areAnyTensorSubclassLike): true only for the SDPA probes, recorded under scripts/twins/oplabels.py's mode
# (predict_probes.py check-sdpa sets it); a user's program runs without one.
RUN_UNDER_MODE = False


def _math(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa):
    """attention.cpp _scaled_dot_product_attention_math as CUDA runs it. On meta the C++ function would take
    at::dropout's unfused path (is_fused_kernel_acceptable wants a CUDA tensor: a float noise tensor, not
    native_dropout's bool mask) and add the mask out of place (meta is subclass-like), so it is transcribed:
    fp16/bf16 upcast to float32 (allow_fp16_bf16_reduction_math_sdp off), both operands scaled by the square
    root of the scale, a causal mask made and converted, grouped-query keys and values repeated to the query's
    heads, the mask added in place, _safe_softmax, native_dropout, and
    both results cast back (the attention weights' cast is made and dropped, as the C++ returns and discards
    it)."""
    import math
    if is_causal and mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    origin = q.dtype
    qa, ka, va = q, k, v
    if origin in (torch.float16, torch.bfloat16) and not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed():
        qa, ka, va = q.to(torch.float32), k.to(torch.float32), v.to(torch.float32)
    sf = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(qa.size(-1)))
    query = qa * sf
    if is_causal:
        mask = _bool_to_float(torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(),
                              query.dtype, -float("inf"))
    ke, ve = ka, va
    if enable_gqa and q.dim() >= 3 and (k.size(-3) != q.size(-3) or v.size(-3) != q.size(-3)):
        ke = ka.repeat_interleave(q.size(-3) // k.size(-3), -3)
        ve = va.repeat_interleave(q.size(-3) // v.size(-3), -3)
    attn = torch.matmul(query, ke.transpose(-2, -1) * sf)
    if mask is not None:
        # in place unless areAnyTensorSubclassLike({attn, mask}) (measured: hf_mistral_ckpt's recording adds in
        # place); meta is subclass-like, and so is any tensor while a Python dispatch mode runs (RUN_UNDER_MODE)
        attn = attn.add(mask) if RUN_UNDER_MODE else attn.add_(mask)
    attn = aten._safe_softmax(attn, -1)
    if dropout_p > 0.0:
        attn = aten.native_dropout(attn, dropout_p, True)[0]
    # make_tuple(matmul(attn, v).to(origin), attn.to(origin)): GCC evaluates the arguments right to left
    weights = attn.to(origin)
    result = torch.matmul(attn, ve)
    out = result.to(origin)
    # C++'s order of destruction: the full expression's temporary, the locals in reverse, the mask (a parameter),
    # then the discarded attention weights
    del result
    del attn, ve, ke, query, va, ka, qa
    del mask
    del weights
    return out


def _pad_bias(bias, q, k):
    """attention.cpp preprocess_mask: unless every stride but the last is a multiple of 8 and the last is 1
    (aligned_tensor<8>), the bias is copied padded by 8 - S % 8 and sliced back (pad_bias<8>); then expanded to
    [B, H, L, S] (a view)."""
    target = (q.size(0), q.size(1), q.size(2), k.size(2))
    if not (all(bias.stride(i) % 8 == 0 for i in range(bias.dim() - 1)) and bias.stride(-1) == 1):
        last = bias.size(-1)
        bias = torch.nn.functional.pad(bias, (0, 8 - last % 8))[..., :last]
    return bias.expand(target)


# -- the memory-efficient backward ------------------------------------------------------------------------------
SOURCE_BWD = ("aten/src/ATen/native/transformers/cuda/attention_backward.cu _efficient_attention_backward "
              "(grad_out.contiguous(), delta, workspace)")


def _div_up(a, b):
    return (a + b - 1) // b


def before(cap, func, args, kwargs):
    """_efficient_attention_backward's first allocation: `grad_out = grad_out_.contiguous()` (grad_out_ in
    [B, M, H, K]), made before the gradients; freed when the function returns."""
    if func is not aten._scaled_dot_product_efficient_attention_backward.default:
        return None
    g = args[0]
    gt = g.transpose(1, 2)
    if gt.is_contiguous():
        return []
    n = g.numel() * g.element_size()
    return [(cap.fake_alloc(n, "efficient attention backward: grad_out made contiguous", SOURCE_BWD), n)]


def _backward_kernel(dtype, d, n_q, n_k, dropout):
    """The first kernel of mem_eff_attention/kernels/cutlassB.h's sm80 list (used up to sm 12.0) that
    attention_backward.cu's launchKernel accepts: (kBlockSizeI, kBlockSizeJ, kMaxK) with kMaxK >= the head dim;
    a "seqaligned" kernel only where both sequence lengths are multiples of its blocks (same sizes either way)."""
    if dtype == torch.float32:
        kernels = [(64, 64, 32), (64, 64, 64), (128, 64, 128), (64, 64, 128), (128, 64, 65536), (64, 64, 65536)]
    else:
        kernels = [(64, 64, 32), (64, 64, 64), (128, 128, 128), (64, 64, 128), (128, 64, 65536), (64, 64, 65536)]
    return next(kn for kn in kernels if kn[2] >= d)


def _efficient_workspace(q, k, v, dropout_p):
    """kernel_backward.h Params::workspace_size(): B * H * align_up(gk + gv + gq, 4) floats, gq the gradQ
    accumulators (ceil(M / BI) * ceil(D / BJ) tiles of 4 + BI * BJ floats, kNeedsAccumGradQ on sm >= 7.0), gk and
    gv zero where the gradients stay in registers (float32, or half precision with kMaxK <= BI); None where they
    are not (half precision, head dim > 128: num_splits_key's heuristic, not modelled)."""
    B, H, M, D = q.shape
    bi, bj, kmax = _backward_kernel(q.dtype, max(D, v.size(-1)), M, k.size(2), dropout_p)
    if q.dtype != torch.float32 and kmax > bi:
        return None
    gq = _div_up(M, bi) * _div_up(D, bj) * (4 + bi * bj)
    return B * H * ((gq + 3) // 4 * 4) * 4


# op -> the slice of its outputs that are the Philox seed and offset, host tensors on CUDA (after)
PHILOX_ON_HOST = {aten._scaled_dot_product_efficient_attention.default: (2, 4),
                  aten._scaled_dot_product_flash_attention.default: (6, 8)}


def after(cap, func, args, kwargs, out, held):
    """After the gradients (which the meta function allocates as the CUDA kernel does): delta, the workspace,
    then everything the function held is freed.

    delta: in half precision the kernel computes it (Kernel::kKernelComputesDelta): an empty [B, H, M] float32;
    the float32 kernels do not: (grad_out.to(float) * out.to(float)).sum(-1).transpose(-2, -1).contiguous(), a
    [B, M, H, K] float32 product, its [B, M, H] sum, the [B, H, M] copy; the product and sum are freed at once.
    workspace: _efficient_workspace. Measured: the H100 recordings (float32) and the H200 SDPA probes (float16,
    bfloat16 and float32; head dims 32 to 256).

    The flash and efficient forwards' Philox seed and offset are host tensors on CUDA (attention.cu: at::empty
    or at::scalar_tensor with kLong, no device): dropped from the trace whoever calls the op, SDPA's choice above or
    a compiled graph's wrapper (an extern kernel of Inductor's)."""
    _cudnn_after(cap, func, args, kwargs, out)
    philox = PHILOX_ON_HOST.get(func)
    if philox is not None and isinstance(out, (tuple, list)):
        for t in out[philox[0]:philox[1]]:
            if isinstance(t, torch.Tensor):
                cap.forget(t)
        return
    if held is None:
        return
    g, q, k, v, o = args[0], args[1], args[2], args[3], args[5]
    dropout_p = args[9] if len(args) > 9 else kwargs.get("dropout_p", 0.0)
    B, H, M, K = q.shape
    f32 = 4
    sn = B * M * H * f32
    if q.dtype != torch.float32:
        da = cap.fake_alloc(sn, "efficient attention backward: delta", SOURCE_BWD)
    else:
        prod = B * M * H * g.size(-1) * f32
        pa = cap.fake_alloc(prod, "efficient attention backward: grad_out * out", SOURCE_BWD)
        sa = cap.fake_alloc(sn, "efficient attention backward: delta sum", SOURCE_BWD)
        da = cap.fake_alloc(sn, "efficient attention backward: delta", SOURCE_BWD)
        cap.fake_free(sa, sn)
        cap.fake_free(pa, prod)
    ws = _efficient_workspace(q, k, v, dropout_p)
    if ws is None:
        cap.count_unmodelled("efficient attention backward in half precision, head dim > 128 (its gradK/gradV "
                             "accumulators)", SOURCE_BWD)
        ws = 0
    wa = cap.fake_alloc(ws, "efficient attention backward: workspace", SOURCE_BWD) if ws else None
    cap.fake_free(da, sn)
    if wa is not None:
        cap.fake_free(wa, ws)
    for a, n in held:
        cap.fake_free(a, n)


# -- cuDNN attention (_scaled_dot_product_cudnn_attention and its backward) ----------------------------------------
SOURCE_CUDNN = ("aten/src/ATen/native/transformers/cuda/sdp_utils.cpp check_prefer_cudnn_attention/"
                "can_use_cudnn_attention; attention.cu _cudnn_attention_forward (seed, offset); aten/src/ATen/native/"
                "cudnn/MHA.cpp run_cudnn_SDP_fprop/bprop (o, softmaxstats, workspace); cudnn-frontend "
                "SDPABackwardNode (dQ_accum)")
# The cuDNN engines' own share of mha_graph.get_workspace_size(), which the library decides: measured, not
# derived. tests/data/predict/llama1b.trace.json (H100, cuDNN 9.19, bfloat16, causal, [1, 32, 512, 64]) shows a
# 256-byte forward workspace and a 4,260,096-byte backward one: dQ_accum's 4,194,304 (below), plus b * h_q * s_q
# floats (65,536: the softmax_sum that cudnn-frontend's SDPABackwardNode kept in its own workspace before cuDNN
# 8.9.5, now the engine's) plus the same 256. Other shapes are assumed to follow that split.
CUDNN_ENGINE_WS = 256

# op -> the order in which CUDA allocates its outputs: _cudnn_attention_forward makes the Philox seed and offset
# (at::zeros({1}, kLong) on the device) before run_cudnn_SDP_fprop allocates o and softmaxstats
ALLOC_ORDER = {aten._scaled_dot_product_cudnn_attention.default: (6, 7, 0, 1)}


def _cudnn_after(cap, func, args, kwargs, out):
    """The workspace run_cudnn_SDP_fprop/bprop takes from the caching allocator for mha_graph.execute, freed when it
    returns; the backward's copy of a grad_output whose last stride is not 1 (permute_to_matching_layout, cuDNN >=
    9.5.1) lives around it."""
    if func is aten._scaled_dot_product_cudnn_attention.default:
        q = args[0]
        if q.numel() and args[1].numel() and args[2].numel():
            a = cap.fake_alloc(CUDNN_ENGINE_WS, "cuDNN attention forward: workspace (engine, measured)",
                               SOURCE_CUDNN)
            cap.fake_free(a, CUDNN_ENGINE_WS)
        return
    if func is not aten._scaled_dot_product_cudnn_attention_backward.default:
        return
    g, q, k = args[0], args[1], args[2]
    if not (q.numel() and k.numel() and g.numel()):
        return
    b, h_q, s_q, d_qk = q.shape
    copy = g.numel() * g.element_size() if g.stride(-1) != 1 else 0
    c = cap.fake_alloc(copy, "cuDNN attention backward: grad_output copied to match out", SOURCE_CUDNN) \
        if copy else None
    dq_accum = b * h_q * s_q * d_qk * 4  # SDPABackwardNode: non-virtual dQ_accum without the dP workspace opt.
    ws = dq_accum + b * h_q * s_q * 4 + CUDNN_ENGINE_WS
    v = args[3]
    if k.size(1) != h_q:  # grouped-query: dK and dV at the query's heads, summed down (dK_fullhead, dV_fullhead)
        s_kv = k.size(2)
        ws += b * h_q * s_kv * (k.size(3) + v.size(3)) * q.element_size()
    a = cap.fake_alloc(ws, "cuDNN attention backward: workspace (dQ_accum from cudnn-frontend, rest measured)",
                       SOURCE_CUDNN)
    cap.fake_free(a, ws)
    if c is not None:
        cap.fake_free(c, copy)


SOURCE_MHA_FAST = ("torch/nn/modules/activation.py MultiheadAttention.forward (fast path); aten/src/ATen/native/"
                   "transformers/cuda/attention.cu native_multi_head_attention_cuda; torch/nn/modules/transformer.py "
                   "TransformerEncoderLayer._transformer_encoder_layer_fwd")


def mha_forward(cap, orig, module, *args, **kwargs):
    """nn.MultiheadAttention.forward. In eval mode without grad, CUDA takes its fast path,
    torch._native_multi_head_attention, when forward's checks pass; on meta two of them fail for the capture's
    sake alone: torch.overrides.has_torch_function (true under the capture's modes) and _check_arg_device (meta is
    not cpu or cuda). They are answered as on CUDA for the call, so forward decides with its own conditions and takes
    the path CUDA takes; the fast path's output is allocated (its meta function), its kernel's temporaries are not
    modelled (attention.cu: qkv projection, _transform_bias_rescale_qkv, attention, all freed within the op) and are
    counted as such. A TransformerEncoderLayer's own fast path (_transformer_encoder_layer_fwd) checks the device
    against a list of its own, so on meta the layer runs its slow path around this fast attention: counted too."""
    import torch.nn.modules.activation as act
    orig_htf, orig_dev = torch.overrides.has_torch_function, act._check_arg_device
    orig_native = torch._native_multi_head_attention

    def native(*a, **k):
        cap.count_unmodelled("nn.MultiheadAttention inference fast path (_native_multi_head_attention)",
                             SOURCE_MHA_FAST)
        return orig_native(*a, **k)

    def on_device(x):
        return x is None or x.device.type in ("meta", "cpu", "cuda")

    torch.overrides.has_torch_function = lambda *a: False
    act._check_arg_device = on_device
    torch._native_multi_head_attention = native
    try:
        return orig(module, *args, **kwargs)
    finally:
        torch.overrides.has_torch_function, act._check_arg_device = orig_htf, orig_dev
        torch._native_multi_head_attention = orig_native
