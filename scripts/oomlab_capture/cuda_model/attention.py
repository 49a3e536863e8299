"""F.scaled_dot_product_attention: the backend CUDA would choose, and what that backend allocates and saves.

On meta, scaled_dot_product_attention's choice (the _fused_sdp_choice stub) has no meta kernel and takes the
math path: the full L x L attention matrices, saved for backward. CUDA picks by
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (PyTorch 2.11) select_sdp_backend, in the order flash,
memory-efficient, math (cuDNN attention only when asked for), each subject to the torch.backends.cuda
*_sdp_enabled() switches and its checks:
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


def choose(gpu, q, k, v, mask, dropout_p, is_causal, enable_gqa):
    from .. import gpus
    major, minor = gpus.capability(gpu)
    be = torch.backends.cuda
    d = q.size(-1)
    four_d = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same_heads = k.size(-1) == d and v.size(-1) == d
    if enable_gqa or not four_d:
        return "math"
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
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
    backend = choose(cap.gpu, q, k, v, mask, dropout_p, is_causal, gqa)
    cap.count_modelled(f"scaled_dot_product_attention backend {backend}", 0, SOURCE)
    if backend == "math":
        return NotImplemented
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
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
