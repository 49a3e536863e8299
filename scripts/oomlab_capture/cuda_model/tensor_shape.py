"""The packed metadata of split_with_sizes_copy's and _chunk_cat's CUDA fast paths (FSDP2's copy-out and reduce-scatter
input), after aten/src/ATen/native/cuda/TensorShape.cu; the same rules as harness/training/fsdp.c.

Both pack their per-split vectors into one int64 tensor copied to the device (detail::pack_vecs: pinned host, then
.to(device)): a device allocation of that many int64, freed when the op returns (get_chunk_cat_metadata frees it
before its kernel runs). Both launch blocks of BLOCK_SIZE 128 threads moving BYTES_PER_THREAD 16 bytes each. On meta
neither op allocates anything but its outputs, so the block is made here, on the op's stream.
"""
import math

import torch

aten = torch.ops.aten
SOURCE = "aten/src/ATen/native/cuda/TensorShape.cu (detail::pack_vecs)"
BLOCK_BYTES = 128 * 16


def _cdiv(a, b):
    return -(-a // b)


def _fast(tensors, dtype):
    return all(isinstance(t, torch.Tensor) and t.is_meta and t.is_contiguous() and t.dtype == dtype for t in tensors)


def split_copy_numel(cap, chunks, split_bytes):
    """split_with_sizes_copy_out_cuda_contiguous_no_cast over a (chunks, -1) view, dim 1: dst and src base addresses
    and chunk sizes (one each per split), block_idx_to_split_idx (one per block), blocks_cumsums (splits + 1). The
    blocks per split follow the kernel's grid: iter_factor = ceil(blocks x chunks / max_blocks), max_blocks = SMs x
    max threads per SM / 128 x 2, spread between chunks_per_block and iters_per_chunk."""
    gpu = cap.gpu
    blocks = sum(_cdiv(b, BLOCK_BYTES) for b in split_bytes)
    max_blocks = int(gpu["sm_count"] * gpu["max_threads_per_sm"] // 128 * 2.0)
    iter_factor = _cdiv(blocks * chunks, max_blocks)
    per_block = min(math.ceil(math.sqrt(iter_factor)), chunks)
    iters = _cdiv(iter_factor, per_block)
    n = len(split_bytes)
    return 3 * n + n + 1 + sum(_cdiv(b, BLOCK_BYTES * iters) for b in split_bytes)


def chunk_cat_numel(tensors, num_chunks, es):
    """get_chunk_cat_metadata over the tensors in num_chunks chunks along dim 0: srcs, actual sizes, padded chunk
    sizes and blocks per tensor (one each per tensor), the start offsets and start blocks (tensors + 1 each) and
    block_idx_to_tensor_idx (one per block of a padded chunk)."""
    n = len(tensors)
    numel = 4 * n + 2 * (n + 1)
    for t in tensors:
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // rows if rows else 0
        numel += _cdiv(_cdiv(rows, num_chunks) * row * es, BLOCK_BYTES)
    return numel


def after(cap, func, args, kwargs, out):
    """The packed metadata of the op just run, allocated and freed (the two ops' fast paths only)."""
    numel = 0
    name = func.name()  # FSDP2 calls them through its own ops, fsdp::split_with_sizes_copy and fsdp::chunk_cat
    if func is aten.split_with_sizes_copy.out or name == "fsdp::split_with_sizes_copy":
        src, sizes = args[0], args[1]
        dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
        outs = kwargs.get("out", args[3] if len(args) > 3 else None)
        dim = dim % src.dim() if src.dim() else 0
        if outs and _fast([src, *outs], src.dtype) and dim == 1 and src.dim() == 2:
            es = src.element_size()
            numel = split_copy_numel(cap, src.shape[0], [s * es for s in sizes])
    elif func is aten._chunk_cat.out or name == "fsdp::chunk_cat":
        tensors, dim, num_chunks = args[0], args[1], args[2]
        dst = kwargs.get("out", args[3] if len(args) > 3 else None)
        if tensors and dst is not None and dim == 0 and _fast(tensors, tensors[0].dtype):
            numel = chunk_cat_numel(tensors, num_chunks, tensors[0].element_size())
    if numel:
        n = numel * 8
        a = cap.fake_alloc(n, f"{func.name()}: its packed metadata", SOURCE)
        cap.fake_free(a, n)
