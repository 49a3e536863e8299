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


def cudnn_usable(gpu, q, k, v, dropout_p):
    """sdp_utils.cpp can_use_cudnn_attention for dense inputs without a mask."""
    from .. import gpus
    major, minor = gpus.capability(gpu)
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    if not (q.dtype in (torch.float16, torch.bfloat16) and k.dtype == q.dtype and v.dtype == q.dtype):
        return False
    if not (q.dim() == 4 and k.dim() == 4 and v.dim() == 4) or not (8, 0) <= (major, minor) <= (12, 1):
        return False
    if q.size(2) == 0 or k.size(2) == 0 or any(t.stride(-1) != 1 and t.size(-1) != 1 for t in (q, k, v)):
        return False
    if not (q.size(0) == k.size(0) == v.size(0)) or q.size(1) % k.size(1) or q.size(1) % v.size(1):
        return False
    d_qk, d_v = q.size(3), v.size(3)
    limit = 256 if (major, minor) == (9, 0) and CUDNN_RUNTIME >= 91000 else 128
    if d_qk > limit or d_v > limit or d_qk % 8 or d_v % 8:
        return False
    return k.size(2) != 1 and not (q.size(2) == 1 and dropout_p != 0.0)


def choose(gpu, q, k, v, mask, dropout_p, is_causal, enable_gqa, cap=None):
    from .. import gpus
    major, minor = gpus.capability(gpu)
    be = torch.backends.cuda
    d = q.size(-1)
    four_d = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same_heads = k.size(-1) == d and v.size(-1) == d
    if enable_gqa or not four_d:
        return "math"
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if cudnn_preferred(gpu) and cudnn_usable(gpu, q, k, v, dropout_p):
        if mask is None:
            return "cudnn"
        if cap is not None:
            cap.count_unmodelled("scaled_dot_product_attention with attn_mask on cuDNN attention (its bias path)",
                                 SOURCE_CUDNN)
    if (be.flash_sdp_enabled() and q.dtype in (torch.float16, torch.bfloat16) and mask is None and d <= 256
            and d % 8 == 0 and same_heads and major >= 8
            and not ((major, minor) in ((8, 6), (8, 9)) and d > 192 and grad)):
        return "flash"
    align = 8 if major >= 8 or q.dtype != torch.float32 else 4
    if (be.mem_efficient_sdp_enabled() and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and d % align == 0 and same_heads):
        return "efficient"
    return "math"


def replace(cap, func, args, kwargs):
    q, k, v, mask, dropout_p, is_causal, scale, gqa = _unpack(args, kwargs)
    if not (isinstance(q, torch.Tensor) and q.is_meta):
        return NotImplemented
    backend = choose(cap.gpu, q, k, v, mask, dropout_p, is_causal, gqa, cap)
    cap.count_modelled(f"scaled_dot_product_attention backend {backend}", 0, SOURCE)
    if backend == "math":
        return NotImplemented
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if backend == "cudnn":
        # attention.cpp scaled_dot_product_attention: compute_logsumexp when grad is needed; the op's seed and
        # offset are device tensors (ALLOC_ORDER), the logsumexp only allocated when computed (MHA.cpp)
        res = aten._scaled_dot_product_cudnn_attention(q, k, v, None, grad, dropout_p, is_causal, False,
                                                       scale=scale)
        if not grad:
            cap.forget(res[1])
        return res[0]
    if backend == "flash":
        res = aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)
        out = res[0]
        for t in res[6:8]:
            if isinstance(t, torch.Tensor):
                cap.forget(t)
        return out
    bias = mask
    if bias is not None:
        if bias.dtype == torch.bool:  # sdp_utils convert_boolean_attn_mask
            bias = torch.where(bias.logical_not(), -float("inf"), 0.0).to(q.dtype)
        bias = _pad_bias(bias, q, k)
    res = aten._scaled_dot_product_efficient_attention(q, k, v, bias, grad, dropout_p, is_causal, scale=scale)
    for t in res[2:4]:
        cap.forget(t)
    return res[0]


def _pad_bias(bias, q, k):
    """attention.cpp preprocess_mask: the bias expanded to [B, H, L, S], its last dim padded to a multiple of 16."""
    target = (q.size(0), q.size(1), q.size(2), k.size(2))
    last = bias.size(-1)
    if last % 16 != 0:
        pad = 16 - last % 16
        bias = torch.nn.functional.pad(bias, (0, pad))[..., :last]
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


def after(cap, func, args, kwargs, out, held):
    """After the gradients (which the meta function allocates as the CUDA kernel does): delta, the workspace,
    then everything the function held is freed.

    delta: the fp32 kernels do not compute it (Kernel::kKernelComputesDelta is false; measured: the H100
    recordings show the product): (grad_out.to(float) * out.to(float)).sum(-1).transpose(-2, -1).contiguous(),
    i.e. a [B, M, H, K] fp32 product, its [B, M, H] sum, the [B, H, M] copy; the product and sum are freed at
    once. For fp16/bf16 the same expression is assumed (not measured; .to(float) copies are added).
    workspace (p.workspace_size()): for fp32 the split-keys kernel needs a gradQ accumulator: fitted to the
    H100 recordings (B*H * ceil(M/64) * (ceil(K/64) * 4096 + 4) floats; head dim 64 measured, others assumed).
    """
    _cudnn_after(cap, func, args, kwargs, out)
    if held is None:
        return
    g, q, o = args[0], args[1], args[5]
    B, H, M, K = q.shape
    f32 = 4
    temps = []
    if q.dtype != torch.float32:
        for t in (g, o):
            n = t.numel() * f32
            temps.append((cap.fake_alloc(n, "efficient attention backward: .to(float) copy", SOURCE_BWD), n))
    prod = B * M * H * g.size(-1) * f32
    pa = cap.fake_alloc(prod, "efficient attention backward: grad_out * out", SOURCE_BWD)
    sn = B * M * H * f32
    sa = cap.fake_alloc(sn, "efficient attention backward: delta sum", SOURCE_BWD)
    da = cap.fake_alloc(sn, "efficient attention backward: delta", SOURCE_BWD)
    cap.fake_free(sa, sn)
    cap.fake_free(pa, prod)
    for a, n in reversed(temps):
        cap.fake_free(a, n)
    ws = 0
    if q.dtype == torch.float32:
        ws = B * H * _div_up(M, 64) * (_div_up(K, 64) * 4096 + 4) * f32
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
