"""cuBLAS and cuBLASLt workspaces.

aten/src/ATen/cuda/CublasHandlePool.cpp (PyTorch 2.11): getCurrentCUDABlasHandle() gives each thread its own
handle (a per-thread pool) and sets on it a workspace from getCUDABlasWorkspace(), one per (handle, stream),
allocated from the caching allocator the first time and kept for the life of the process (never freed, so it
stays in memory_allocated). Its size, parseChosenWorkspaceSize(): CUBLAS_WORKSPACE_CONFIG (every ":SIZE_KiB:COUNT"
match, summed; the default when none matches) if set, else 4096 KiB x 8 = 32 MiB on compute capability 9.0 and 4096 KiB x 2 + 16 KiB x 8 =
8,519,680 B elsewhere. The autograd engine runs a CUDA backward on its own device thread, so a program that
trains holds two. On meta the backward runs on the caller's thread: the model keys the workspace by "forward"
or "backward" (torch._C._current_autograd_node() is set while the engine runs a node).

cuBLASLt: aten/src/ATen/native/cuda/Blas.cpp's addmm_out_cuda_impl takes the Lt path (gemm_and_bias, the bias
fused as an epilogue) for beta == 1, a 1-D contiguous bias of length n, a 2-D result, float/half/bf16 and all
of m, n, k > 1; that path takes a second workspace from getCUDABlasLtWorkspace(): CUBLASLT_WORKSPACE_SIZE KiB,
default 1024 KiB, again once per handle and stream. Measured on the H100 (tests/data/train_mlp.trace.json): the
first Linear's addmm allocates its output, then 33,554,432 B, then 1,048,576 B; the first backward mm another
33,554,432 B.
"""
import os

import torch

aten = torch.ops.aten
SOURCE_WS = "aten/src/ATen/cuda/CublasHandlePool.cpp getCUDABlasWorkspace/parseChosenWorkspaceSize"
SOURCE_LT = "aten/src/ATen/cuda/CublasHandlePool.cpp getCUDABlasLtWorkspace; native/cuda/Blas.cpp addmm Lt path"

# ops whose CUDA kernels call cuBLAS through getCurrentCUDABlasHandle (aten/src/ATen/native/cuda/Blas.cpp)
OPS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.addbmm.default,
       aten.addmv.default, aten.mv.default, aten.dot.default, aten.vdot.default, aten._addmm_activation.default,
       aten.addmm_.default, aten.baddbmm_.default, aten.mm.out, aten.bmm.out, aten.addmm.out}
FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def _config_size(conf):
    """CUBLAS_WORKSPACE_CONFIG as parseChosenWorkspaceSize reads it: every match of ":([0-9]+):([0-9]+)" adds
    SIZE KiB x COUNT; None when nothing matches (PyTorch warns and takes its default)."""
    import re
    pairs = re.findall(r":([0-9]+):([0-9]+)", conf)
    return sum(int(a) * 1024 * int(b) for a, b in pairs) if pairs else None


def workspace_size(gpu):
    conf = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    size = _config_size(conf) if conf is not None else None
    if size is not None:
        return size
    return 4096 * 1024 * 8 if gpu["arch"] == "sm_90" else 4096 * 1024 * 2 + 16 * 1024 * 8


INT_MAX = 2**31 - 1


def _stoi(text):
    """std::stoi: leading blanks, a sign, digits, the rest ignored; None where it throws (no digits: invalid_argument;
    outside int: out_of_range), which parseCUDABlasLtWorkspaceSize catches and warns of."""
    import re
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    if not m:
        return None
    v = int(m.group(1))
    return v if -INT_MAX - 1 <= v <= INT_MAX else None


def lt_workspace_size():
    """CUBLASLT_WORKSPACE_SIZE in KiB as parseCUDABlasLtWorkspaceSize reads it (std::stoi; 1024 where that throws)."""
    v = _stoi(os.environ.get("CUBLASLT_WORKSPACE_SIZE", "1024"))
    return (1024 if v is None else v) * 1024


def check_env():
    """The one line for a cuBLAS variable PyTorch would read into a size no GPU can give, or None: a negative
    CUBLASLT_WORKSPACE_SIZE becomes a size_t of about 2^64 (workspace_size = std::stoi(...), then * 1024)."""
    text = os.environ.get("CUBLASLT_WORKSPACE_SIZE")
    v = _stoi(text) if text is not None else None
    if v is not None and v < 0:
        return (f"CUBLASLT_WORKSPACE_SIZE={text.strip()[:20]}: PyTorch reads it with std::stoi into a size_t, so "
                f"the cuBLASLt workspace would be {(v * 1024) % 2**64:,} bytes, which no GPU can allocate (the "
                f"first matmul with a bias runs out of memory); unset it or give a size in KiB")
    return None


def takes_lt_path(args, kwargs):
    bias, m1, m2 = args[0], args[1], args[2]
    beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
    return (beta == 1 and bias.dim() == 1 and m1.dim() == 2 and m2.dim() == 2 and bias.is_contiguous()
            and bias.size(0) == m2.size(1) and m1.dtype in FLOAT_TYPES
            and m1.size(0) > 1 and m1.size(1) > 1 and m2.size(1) > 1)


def after(cap, func, args, kwargs, out):
    if func not in OPS:
        return
    if any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args[:3]):
        return  # an empty product launches nothing
    st = cap.state.setdefault("cublas", {"ws": {}, "lt": {}})
    thread = "backward" if cap.in_backward() else "forward"
    if thread not in st["ws"]:
        n = workspace_size(cap.gpu)
        st["ws"][thread] = (cap.fake_alloc(n, "cuBLAS workspace", SOURCE_WS, keep=True), n)
    if func in (aten.addmm.default, aten.addmm.out) and thread not in st["lt"] and takes_lt_path(args, kwargs):
        n = lt_workspace_size()
        st["lt"][thread] = (cap.fake_alloc(n, "cuBLASLt workspace", SOURCE_LT, keep=True), n)


def clear(cap):
    """torch._C._cuda_clearCublasWorkspaces (CublasHandlePool.cpp clearCublasWorkspaces: the cuBLAS map, then
    cuBLASLt's): every workspace freed; the next product on a thread takes a new one. Lightning's teardown calls
    it (lightning/fabric/accelerators/cuda.py _clear_cuda_memory)."""
    st = cap.state.get("cublas")
    if not st:
        return
    for kind in ("ws", "lt"):
        for addr, n in st[kind].values():
            cap.fake_free(addr, n)
        st[kind].clear()
