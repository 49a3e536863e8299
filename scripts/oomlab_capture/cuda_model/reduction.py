"""ATen's CUDA reductions: the global-memory staging buffer and semaphores gpu_reduce_kernel allocates.

aten/src/ATen/native/cuda/Reduce.cuh (PyTorch 2.11): setReduceConfig(iter) decides the launch; when it splits
each output's inputs across several blocks (should_global_reduce), the kernel allocates global_memory_size()
bytes of staging and semaphore_size() bytes of block counters from the caching allocator for the launch:
buffer, then semaphores, freed in reverse order after the launch. The configuration depends on the GPU's SM
count and threads per SM. This is the same transcription as harness/runtime/reduce_config.c (keep the two
equal), generalised to the three layouts TensorIterator coalesces a contiguous reduction to:
  all     every element into one output (sum(), mean());
  rows    leading dims reduced, trailing kept ([m, n] over m: a bias gradient's sum(0));
  inner   leading dims kept, trailing reduced (mean(-1)): the reduction runs along the fastest dimension.
  rows of a view: a non-contiguous input whose kept dims are trailing and dense (innermost stride 1) and whose
          reduced dims lead with any strides (a bias gradient's sum over a slice x[:, 1:] of a contiguous
          tensor): the rows layout, with output_vec_size also limited by the reduced dims' strides and the view's
          offset, as get_output_vec_size (Reduce.cuh) limits it by every input stride but the output's and the
          base address. The H200 recording of tests/data/predict/scripts/vit.py shows its staging.
  any other: iter_layout, TensorIterator's reordering and coalescing of the dims for any strides (a channels-last
          gradient summed over (0, 2, 3), a reduced middle dimension). Inputs with a zero stride (broadcast) are
          not modelled: no staging is added.

A sum whose input type is not its output type (a bool or int32 mask summed into int64, sum(dtype=...)) first casts
the input: aten/src/ATen/native/ReduceOpsUtils.h make_reduction_from_out_ty / make_reduction reduce
self.to(in_dtype), in_dtype the output's type except for CUDA's half/bfloat16 into float32 (reduced in place). The
copy (numel x the output's element size) is allocated after the output and freed when the op returns, around the
staging; meta's sum allocates no copy. The H200 recording of tests/data/predict/scripts/checkpointed.py shows it:
cross_entropy's label smoothing divides by (~ignore_mask).sum(), 1,024 bools summed through an 8,192-byte copy.
"""
import torch

aten = torch.ops.aten
SOURCE = "aten/src/ATen/native/cuda/Reduce.cuh setReduceConfig/global_memory_size (harness/runtime/reduce_config.c)"
MAX_NUM_THREADS, MIN_VALUES_PER_THREAD, MAX_VALUES_PER_THREAD = 512, 16, 256


def _div_up(a, b):
    return (a + b - 1) // b


def _last_pow2(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def config(gpu, num_outputs, num_inputs, fastest, arg_size, scalar_size, input_vec_size, in_addr_elems=0, strides=(),
           vec=True, out_dim=None):
    """(global_memory_size, semaphore_size) of setReduceConfig for this reduction; (0, 0) without staging. vec:
    whether setReduceConfig may vectorize (the fastest moving stride is one element, and along the input one
    reduced dimension only); out_dim: the iterator's size of its first kept dimension (get_output_vec_size), where
    it is not num_outputs."""
    warp = 32
    c = {"step_input": 1, "step_output": 1, "output_vec_size": 1}
    dim0 = num_inputs if fastest else num_outputs
    dim1 = num_outputs if fastest else num_inputs
    if num_inputs * num_outputs == 1:
        dim0 = dim1 = 1
    elif fastest:
        if dim0 >= 128 and vec:
            dim0 //= input_vec_size
    elif vec:
        v = 4
        for val in (in_addr_elems, num_outputs if out_dim is None else out_dim, *strides):
            while val % v != 0:
                v //= 2
        c["output_vec_size"] = v
        dim0 //= v
    ovs = c["output_vec_size"]
    max_num_threads = MAX_NUM_THREADS // ovs
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_num_threads else max_num_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_num_threads else max_num_threads
    block_width = min(dim0_pow2, warp)
    block_height = min(dim1_pow2, max_num_threads // block_width)
    block_width = min(dim0_pow2, max_num_threads // block_height)
    num_threads = block_width * block_height

    def split_input(p):
        s = c["step_input"]
        c["step_input"] *= p
        return s

    def split_output(p):
        s = c["step_output"]
        c["step_output"] *= p
        return s

    input_mult = [0, 0, 0]
    if fastest:
        input_mult[0] = split_input(block_width)
    else:
        split_output(block_width)

    def values_per_thread():
        return _div_up(num_inputs, c["step_input"])

    def grid_x():
        return _div_up(num_outputs // ovs, c["step_output"])

    if values_per_thread() >= min(block_height * 16, MAX_VALUES_PER_THREAD):
        input_mult[1] = split_input(block_height)
    else:
        split_output(block_height)
    blocks_per_sm = gpu["max_threads_per_sm"] // num_threads
    target_grid = gpu["sm_count"] * blocks_per_sm
    ctas_per_output = 1
    if input_mult[1] != 0 and values_per_thread() >= MAX_VALUES_PER_THREAD and grid_x() <= target_grid:
        ctas1 = _div_up(target_grid, grid_x())
        ctas2 = _div_up(values_per_thread(), MIN_VALUES_PER_THREAD)
        ctas3 = _div_up(values_per_thread(), MAX_VALUES_PER_THREAD)
        ctas_per_output = max(min(ctas1, ctas2), ctas3)
        if ctas_per_output > 1:
            input_mult[2] = split_input(ctas_per_output)
    if input_mult[2] == 0:
        return 0, 0
    size = arg_size * num_outputs * ctas_per_output
    if input_mult[0] == 0:
        size *= block_width * ovs
    return size, 4 * grid_x()


def view_rows(x, red):
    """(num_outputs, num_inputs, reduced strides) of reducing a non-contiguous x over its leading dims red when its
    kept dims are trailing and dense, or None."""
    nd = x.dim()
    kept = [i for i in range(nd) if i not in red and x.size(i) != 1]
    if not kept or not red or kept != list(range(nd - len(kept), nd)) or any(i >= kept[0] for i in red):
        return None
    want = 1
    for i in reversed(kept):
        if x.stride(i) != want:
            return None
        want *= x.size(i)
    n_in = 1
    for i in red:
        n_in *= x.size(i)
    return want, n_in, [x.stride(i) for i in red if x.size(i) != 1]


def layout(x, dims):
    """(num_outputs, num_inputs, fastest) of reducing contiguous x over dims, or None if not modelled."""
    if x.numel() == 0:
        return None
    nd = x.dim()
    red = set(range(nd)) if not dims else {d % max(nd, 1) for d in dims}
    if not x.is_contiguous():
        return None
    sizes = [(x.size(i), i in red) for i in range(nd) if x.size(i) != 1]
    if not sizes:
        return 1, 1, True
    groups = []  # coalesce neighbours of the same kind
    for n, r in sizes:
        if groups and groups[-1][1] == r:
            groups[-1][0] *= n
        else:
            groups.append([n, r])
    if len(groups) == 1:
        return (1, groups[0][0], True) if groups[0][1] else None  # nothing reduced: a copy
    if len(groups) == 2:
        (a, ra), (b, rb) = groups
        return (b, a, False) if ra else (a, b, True)
    return None


def iter_layout(x, red):
    """TensorIterator's view of reducing x over the dims red, any strides: (num_outputs, num_inputs, fastest, vec,
    offset, strides, out_dim) for config(), or None (a broadcast input: not modelled).

    TensorIteratorBase::reorder_dimensions sorts the dims by stride, reduced dims first (strides[0] the fastest),
    coalesce_dimensions merges neighbours whose strides chain; setReduceConfig reduces along the fastest striding
    dimension when every dim is reduced or the first reduced dim's stride is below the first kept dim's, vectorizes
    the input only then with one reduced dim left and a unit stride, and else the output, by get_output_vec_size
    (the base address, the first kept dim's size, every other dim's stride)."""
    dims = [d for d in range(x.dim()) if x.size(d) != 1]
    if any(x.stride(d) == 0 for d in dims):
        return None
    order = (sorted((d for d in dims if d in red), key=lambda d: (x.stride(d), -d))
             + sorted((d for d in dims if d not in red), key=lambda d: (x.stride(d), -d)))
    groups = []  # [size, stride, reduced]
    for d in order:
        r = d in red
        if groups and groups[-1][2] == r and x.stride(d) == groups[-1][0] * groups[-1][1]:
            groups[-1][0] *= x.size(d)
        else:
            groups.append([x.size(d), x.stride(d), r])
    n_red = sum(1 for g in groups if g[2])
    num_in = 1
    for g in groups[:n_red]:
        num_in *= g[0]
    num_out = max(1, x.numel() // max(num_in, 1))
    if n_red == len(groups):
        return 1, num_in, True, n_red <= 1 and (not groups or groups[0][1] == 1), x.storage_offset(), (), None
    fastest = n_red > 0 and groups[0][1] < groups[n_red][1]
    if fastest:
        return num_out, num_in, True, n_red == 1 and groups[0][1] == 1, x.storage_offset(), (), None
    others = [g[1] for i, g in enumerate(groups) if i != n_red]
    return num_out, num_in, False, groups[n_red][1] == 1, x.storage_offset(), others, groups[n_red][0]


_OPS = {aten.sum.default: "sum", aten.sum.dim_IntList: "sum", aten.mean.default: "mean",
        aten.mean.dim: "mean", aten.amax.default: "amax", aten.amin.default: "amin",
        aten.linalg_vector_norm.default: "norm"}


def after(cap, func, args, kwargs, out):
    kind = _OPS.get(func)
    if kind is None:
        return
    x = args[0]
    cast = 0
    if (kind == "sum" and isinstance(out, torch.Tensor) and x.dtype != out.dtype and x.numel() > 0
            and not (x.dtype in (torch.float16, torch.bfloat16) and out.dtype == torch.float32)):
        cast = x.numel() * out.element_size()
        c = cap.fake_alloc(cast, "sum: input cast to the output's type", SOURCE_CAST)
    try:
        _staging(cap, func, kind, x, out.dtype if cast else x.dtype, args, kwargs)
    finally:
        if cast:
            cap.fake_free(c, cast)


SOURCE_CAST = "aten/src/ATen/native/ReduceOpsUtils.h make_reduction_from_out_ty/make_reduction (self.to(in_dtype))"


def _staging(cap, func, kind, x, dtype, args, kwargs):
    """The staging of reducing x (its values of type dtype: x's own, or the cast's) over the op's dims."""
    dims = args[1] if len(args) > 1 and func not in (aten.sum.default, aten.mean.default) else kwargs.get("dim")
    if kind == "norm":
        dims = args[2] if len(args) > 2 else kwargs.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    lay, offset, strides = layout(x, dims), 0, ()
    if lay is None and not x.is_contiguous() and x.numel() > 0:
        nd = x.dim()
        rows = view_rows(x, set(range(nd)) if not dims else {d % max(nd, 1) for d in dims})
        if rows is not None:
            lay, offset, strides = (rows[0], rows[1], False), x.storage_offset(), rows[2]
    if lay is None and x.numel() > 0:
        nd = x.dim()
        it = iter_layout(x, set(range(nd)) if not dims else {d % max(nd, 1) for d in dims})
        if it is not None:
            n_out, n_in, fastest, vec, offset, strides, out_dim = it
            launch(cap, (n_out, n_in, fastest), dtype, kind, offset, strides, vec, out_dim)
        return
    if lay is None:
        return
    launch(cap, lay, dtype, kind, offset, strides)


def launch(cap, lay, dtype, kind, offset=0, strides=(), vec=True, out_dim=None):
    """One reduction kernel's staging and semaphores for layout lay (layout()'s (num_outputs, num_inputs,
    fastest)) over values of type dtype: allocated, then freed, as gpu_reduce_kernel does around its launch."""
    scalar = dtype.itemsize
    arg = 8 if dtype in (torch.float64, torch.int64, torch.complex64) else 4
    if not dtype.is_floating_point and kind in ("sum", "mean"):
        arg = 8  # integer sums accumulate in int64
    buf, sem = config(cap.gpu, lay[0], lay[1], lay[2], arg, scalar, 8 if kind == "sum" and scalar == 2 else 4, offset,
                      strides, vec, out_dim)
    if buf == 0:
        return
    a = cap.fake_alloc(buf, "reduction staging", SOURCE)
    s = cap.fake_alloc(sem, "reduction semaphores", SOURCE)
    cap.fake_free(s, sem)
    cap.fake_free(a, buf)
