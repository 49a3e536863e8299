"""Batch norm through CUDA's native kernels with a channels-last-compatible input (BatchNorm1d's [N, C] input).

Which backend: aten/src/ATen/native/Normalization.cpp (PyTorch 2.11) _batch_norm_impl_index calls cudnn_batch_norm
when _select_batch_norm_backend says Cudnn (cuDNN enabled, input.dim() >= 3, not bfloat16, a float16 input only with
float32 weights, weight and bias defined, running stats both or neither in training, N <= 880801 training / 65535
eval, numel < INT32_MAX, eps >= CUDNN_BN_MIN_EPSILON, 0.0 in cuDNN 9's cudnn_ops.h), else native_batch_norm
(batch_norm_cuda), whose backward is native_batch_norm_backward (batch_norm_backward_cuda). Meta runs
native_batch_norm in every case, so only the calls CUDA runs natively are modelled here: forward() marks their
save_mean, and the backward is modelled only for a marked one.

aten/src/ATen/native/cuda/Normalization.cu and Normalization.cuh (PyTorch 2.11), for an input on which
batch_norm_use_channels_last_kernels holds (channels-last 4-D/5-D, or contiguous with stride(1) == 1: every
contiguous [N, C]) with 32-bit indexing:
- forward, training (batch_norm_cuda -> batch_norm_mean_var, Impl::ChannelsLast): output, save_mean, save_invstd
  (meta's order), then batch_norm_stats_channels_last_cuda_template allocates, when flexible_launch_configs gives
  grid.y > 1, staging_data (4 * C * grid.y accumulate-type values) and semaphores (grid.x int32, at::zeros), freed
  when it returns (semaphores first: locals are destroyed in reverse).
- backward (batch_norm_backward_cuda): with a reduction (train or a weight/bias gradient) and grad_input wanted, a
  contiguous non-channels-last input takes the fused kernel (batch_norm_backward_cuda_template: grad_input,
  grad_weight, grad_bias as the mask asks: meta's outputs, in their order). Otherwise the reduction runs first:
  batch_norm_backward_reduce_cuda_channels_last_template (input and gradient channels-last-compatible) allocates
  sum_dy and sum_dy_xmu ([C], the accumulate type), grad_weight and grad_bias ([C], weight's type; whatever the mask
  says, when there is a weight), the staging (2 * C * grid.y values) and semaphores when grid.y > 1, freed at its
  return; the generic batch_norm_backward_reduce_cuda_template allocates sum_dy and sum_dy_xmu only when grad_input
  is wanted and grad_weight, grad_bias as the mask asks. Then batch_norm_elementwise_backward_train (or _eval)
  allocates grad_input when wanted, and sum_dy_xmu, then sum_dy, are freed when batch_norm_backward_cuda returns.
  Meta's function makes grad_input, grad_weight, grad_bias only.
The H200 recording of tests/data/predict/scripts/amp_fp16.py shows the channels-last backward per BatchNorm1d
(float16 [256, 2048] input, float32 weights): four 8,192-byte tensors, the 1,048,576-byte grad_input, two of the four
freed. Not modelled (meta's allocations stand): a generic reduce whose input or gradient reshape to [N, C, -1] copies,
save_mean/save_invstd left empty (only cuDNN's eval forward leaves them so), the forward's statistics beyond 32-bit
indexing (var_mean).
"""
import torch

aten = torch.ops.aten
SOURCE = ("aten/src/ATen/native/cuda/Normalization.cu batch_norm_cuda/batch_norm_backward_cuda, Normalization.cuh "
          "batch_norm_stats_channels_last_cuda_template/batch_norm_backward_reduce_cuda_channels_last_template")
MAX_BLOCK_SIZE, OPTIMAL_TILE_W, ELEMENTS_PER_THREAD, MAX_H_BLOCK = 512, 32, 16, 128
INT32_MAX = 2**31 - 1


def _last_pow2(n):
    """ATen's lastPow2: the largest power of two <= n, at least 1."""
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _ceil_div(a, b):
    return (a + b - 1) // b


def launch(reduction, stride, coop):
    """(grid.x, grid.y) of Normalization.cuh flexible_launch_configs."""
    block_x = min(_last_pow2(stride), OPTIMAL_TILE_W)
    block_y = min(_last_pow2(_ceil_div(reduction, ELEMENTS_PER_THREAD)), MAX_BLOCK_SIZE // block_x)
    if block_x * block_y != MAX_BLOCK_SIZE:
        block_x = min(_last_pow2(stride), MAX_BLOCK_SIZE // block_y)
    grid_x = _ceil_div(stride, block_x)
    grid_y = min(_ceil_div(reduction, block_y * ELEMENTS_PER_THREAD), MAX_H_BLOCK)
    if coop and grid_y < 8:
        grid_y = 1
    return grid_x, grid_y


def _can_32bit(t):
    """at::cuda::detail::canUse32BitIndexMath."""
    n = t.numel()
    if n >= INT32_MAX:
        return False
    return n == 0 or sum((s - 1) * st for s, st in zip(t.shape, t.stride())) < INT32_MAX


def _channels_last_kernels(t):
    """batch_norm_use_channels_last_kernels."""
    return ((t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last))
            or (t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d))
            or (t.is_contiguous() and t.stride(1) == 1))


def _cudnn(x, weight, bias, rm, rv, training, eps):
    """_select_batch_norm_backend == Cudnn (on CUDA, cuDNN 9: CUDNN_BN_MIN_EPSILON 0.0)."""
    return (torch.backends.cudnn.enabled and weight is not None and bias is not None
            and x.dtype != torch.bfloat16 and weight.dtype != torch.bfloat16
            and (x.dtype != torch.float16 or weight.dtype == torch.float32)
            and ((rm is not None and rv is not None) or (rm is None and rv is None and training))
            and x.dim() >= 3 and x.size(0) <= (880801 if training else 65535)
            and eps >= 0.0 and x.numel() < INT32_MAX)


def _staging(cap, what, n_values, elem, grid_x):
    a = cap.fake_alloc(n_values * elem, f"batch norm {what}: staging", SOURCE)
    s = cap.fake_alloc(grid_x * 4, f"batch norm {what}: semaphores", SOURCE)
    cap.fake_free(s, grid_x * 4)
    cap.fake_free(a, n_values * elem)


SOURCE_CUDNN = ("aten/src/ATen/native/cudnn/BatchNorm.cpp cudnn_batch_norm/cudnn_batch_norm_backward (cuDNN's "
                "workspace), measured per call on the GPU: scripts/oomlab_capture/data/%s")
SOURCE_CUDNN_MISS = ("aten/src/ATen/native/cudnn/BatchNorm.cpp: cuDNN's workspace for this call is not in a measured "
                     "table; bounded by the H200 table's largest workspaces relative to their inputs")


def cudnn_workspaces(cap, func, args, outs):
    """After a cuDNN batch norm's outputs (meta's, which are cuDNN's: output, save_mean, save_var; grad_input,
    grad_weight, grad_bias): the workspaces the measured table (cudnn_conv.table, keys op_keys.key) holds for the
    call, allocated and freed in its order; a call not in the table gets its bound in the upper trace. Only a table
    whose workspaces all come after the outputs is replayed here."""
    from . import cudnn_conv, op_keys
    t = cudnn_conv.table(cap.gpu["name"])
    ev = t["entries"].get(op_keys.key(func, args)) if t else None
    sizes = [r.numel() * r.element_size() for r in outs if isinstance(r, torch.Tensor) and r.numel()]
    if ev is not None:
        flags = cudnn_conv._temps(ev)
        kept = [size for (a, size), temp in zip(ev, flags) if a == "a" and not temp]
        first_temp = next((i for i, f in enumerate(flags) if f), len(ev))
        if kept == sizes and all(not (a == "a" and not f) for (a, _), f in zip(ev[first_temp:], flags[first_temp:])):
            src = SOURCE_CUDNN % cudnn_conv.TABLES[cap.gpu["name"]]
            live = {}
            for (a, size), temp in zip(ev[first_temp:], flags[first_temp:]):
                if a == "a":
                    live.setdefault(size, []).append(cap.fake_alloc(size, "cuDNN batch norm: workspace", src))
                elif live.get(size):
                    cap.fake_free(live[size].pop(), size)
            return
    b = cudnn_conv.table(cudnn_conv.BOUND_TABLE)["bound"]["bnf" if func is aten.native_batch_norm.default else "bnb"]
    n = args[0].numel() * args[0].element_size()
    if func is not aten.native_batch_norm.default:
        n += args[1].numel() * args[1].element_size()
    bound = int(min(b["ratio"] * n, b["slope"] * n + b["offset"]))
    if bound:
        cap.fake_free(cap.range_alloc(bound, "cuDNN batch norm workspace (a call not in a measured table: bounded)",
                                      SOURCE_CUDNN_MISS), bound)


def forward(cap, func, args, kwargs, out):
    """After native_batch_norm's outputs: mark a native call's save_mean, add the statistics' staging; a cuDNN
    call's workspaces."""
    if func is not aten.native_batch_norm.default or not isinstance(out, (tuple, list)):
        return
    x, weight, bias, rm, rv, training, _, eps = args[:8]
    if x.numel() == 0:
        return
    if _cudnn(x, weight, bias, rm, rv, training, eps):
        cudnn_workspaces(cap, func, args, out)
        return
    e = cap.ext.storage_entry(out[1])
    if e is not None:
        cap.state.setdefault("batch_norm_native", set()).add(e[0])
    if not training or not _can_32bit(x):
        return
    if not (x.is_contiguous() and x.stride(1) == 1) and not (x.dim() == 4 and x.is_contiguous(
            memory_format=torch.channels_last)):
        return  # batch_norm_choose_impl is not ChannelsLast
    C = x.size(1)
    grid_x, grid_y = launch(x.numel() // C, C, True)
    if grid_y > 1:
        _staging(cap, "statistics", 4 * C * grid_y, out[1].element_size(), grid_x)


def _viewable(t, shape):
    """Whether t.reshape(shape) is a view (no copy)."""
    try:
        t.view(shape)
        return True
    except RuntimeError:
        return False


def backward(cap, grad_out, x, weight, rm, rv, save_mean, save_invstd, train, eps, mask):
    """native_batch_norm_backward as batch_norm_backward_cuda allocates it, for a call CUDA runs natively (REWRITE:
    runs in the op's bracket and allocates the outputs, and what comes between them, in the kernel's order)."""
    res = aten.native_batch_norm_backward.default(grad_out, x, weight, rm, rv, save_mean, save_invstd, train, eps,
                                                  mask)  # meta's answer: its outputs' shapes and types
    e = cap.ext.storage_entry(save_mean) if save_mean is not None else None
    native = e is not None and e[0] in cap.state.get("batch_norm_native", ())
    reduce = train or mask[1] or mask[2]
    fused = reduce and mask[0] and not _channels_last_kernels(x) and _can_32bit(x) and _can_32bit(grad_out)
    shape3 = (x.size(0), x.size(1), -1) if x.numel() > 0 else None
    channels_last = (reduce and _can_32bit(grad_out) and _channels_last_kernels(grad_out)
                     and _channels_last_kernels(x) and (weight is None or weight.is_contiguous())
                     and save_mean.is_contiguous() and save_invstd.is_contiguous())
    generic = reduce and not channels_last and _viewable(x, shape3) and _viewable(grad_out, shape3)
    if not native and x.numel() > 0:  # cuDNN's backward: meta's outputs, then its workspaces
        outs = tuple(None if r is None else torch.empty_like(r) for r in res)
        cudnn_workspaces(cap, aten.native_batch_norm_backward.default,
                         (grad_out, x, weight, rm, rv, save_mean, save_invstd, train, eps, mask), outs)
        return outs
    if (fused or x.numel() == 0 or save_invstd is None or save_mean.numel() == 0
            or save_invstd.numel() == 0 or (reduce and not channels_last and not generic)):
        # the fused kernel allocates meta's outputs in their order; the rest is not modelled
        return tuple(None if r is None else torch.empty_like(r) for r in res)
    C = x.size(1)
    acc = save_mean.element_size()
    held, gw, gb = [], None, None
    if channels_last:  # batch_norm_backward_reduce_cuda_channels_last_template
        held = [cap.fake_alloc(C * acc, f"batch norm backward: {w}", SOURCE) for w in ("sum_dy", "sum_dy_xmu")]
        if weight is not None:
            gw, gb = weight.new_empty((C,)), weight.new_empty((C,))
        grid_x, grid_y = launch(x.numel() // C, C, True)
        if grid_y > 1:
            _staging(cap, "backward reduce", 2 * C * grid_y, acc, grid_x)
    elif generic:  # batch_norm_backward_reduce_cuda_template: what the mask asks for
        if mask[0]:
            held = [cap.fake_alloc(C * acc, f"batch norm backward: {w}", SOURCE) for w in ("sum_dy", "sum_dy_xmu")]
        if mask[1]:
            gw = weight.new_empty((C,))
        if mask[2]:
            gb = weight.new_empty((C,))
    # batch_norm_elementwise_backward_train (channels-last: empty_like(input); general: input's sizes, grad_out's
    # type) or _eval (input's sizes, grad_out's type)
    gi = None
    if mask[0]:
        cl_elemt = train and channels_last
        gi = torch.empty_like(x) if cl_elemt else torch.empty_like(x, dtype=grad_out.dtype)
    for a in reversed(held):  # sum_dy_xmu, then sum_dy, when batch_norm_backward_cuda returns
        cap.fake_free(a, C * acc)
    return gi, gw, gb


# run instead of the op inside its bracket (recorder.RecordMode)
REWRITE = {aten.native_batch_norm_backward.default: backward}
