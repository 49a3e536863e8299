"""aten::embedding_dense_backward as CUDA runs it: every allocation of both paths, in the kernel's order.

aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda (PyTorch 2.11): indices_.contiguous() and
grad_.contiguous() copy a non-contiguous input first (held to the end). With at most 3072 indices and no
scale_grad_by_freq it allocates only grad_weight (zeros [V, D]). Otherwise it sorts: sorted_indices,
orig_indices, range = arange(N), then cub's DeviceRadixSort::SortPairs temporary (at::cuda::cub, CUB_WRAPPER: one
caching-allocator block per CUB call, freed after the launch); with scale_grad_by_freq, count and two
scan-by-key temporaries; then native/cuda/EmbeddingBackwardKernel.cu embedding_backward_cuda_kernel: grad_weight,
segment_offsets, num_of_segments (int64 scalar), unique_by_key's keys_out and temporary, partials_per_segment and
its offsets, the exclusive scan's temporary, num_of_partial_segments, partial_segment_offset, then either
grad_weight_per_segment (float32 for half, bfloat16 and float; the two-pass path) or, where sum_and_scatter's grid
(min(V, N) rows) is under 4 blocks per SM and the partial segments outnumber it 4 to 1 (not deterministic mode),
the fused atomic kernel's partial_to_segment_idx and, for half and bfloat16, a float32 [V, D] accumulator freed
at once (a token-type embedding of 1 or 2 rows: BERT's, RoBERTa's); all freed in reverse at the end.

CUB's temporary sizes are cub.py's: the radix sort over the whole key (nbits is not passed: begin 0, end 8 x
sizeof(index)), so with more than one pass its extra key and value buffers. Checked against 46
calls recorded on an H200 and the H100 recording of tests/data/predict/transformer_encoder.py, every size equal
(docs/parity.md, "Predicting without a GPU"). Other architectures tune other tiles: their sizes here are sm_90's,
a few KiB apart at most, and the prediction says so ("modelled" names the assumption).
"""
import torch

from . import cub

aten = torch.ops.aten
SOURCE = ("aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda, EmbeddingBackwardKernel.cu "
          "embedding_backward_cuda_kernel; cub (CCCL 3.0) temporaries, sm_90 tunings")
SOURCE_OTHER = SOURCE + " (this GPU's own tunings not modelled: sm_90's assumed)"
SORT_PATH_MIN = 3073  # more indices than this take the sort path (num_indices <= 3072: the feature kernel)
MAX_BLOCK_SIZE = 1024  # EmbeddingBackwardKernel.cuh
MAX_ATOMIC_ACCUM_BLOCKS_PER_SM = 4  # EmbeddingBackwardKernel.cu: below SMs x 4 blocks the fused kernel runs


def dense_backward(cap, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The REWRITE of aten::embedding_dense_backward: its allocations in the CUDA kernel's order; returns
    grad_weight (meta's own function allocates it, at its place in the sequence)."""
    src = SOURCE if cap.gpu["arch"] == "sm_90" else SOURCE_OTHER
    held = []

    def alloc(n, what):
        a = cap.fake_alloc(n, "embedding backward: " + what, src)
        held.append((a, n))
        return a, n

    def free(entry):
        held.remove(entry)
        cap.fake_free(*entry)

    n, ib = indices.numel(), indices.element_size()
    if not indices.is_contiguous() and n:
        alloc(n * ib, "indices made contiguous")
    if not grad.is_contiguous() and grad.numel():
        alloc(grad.numel() * grad.element_size(), "grad made contiguous")
    if n < SORT_PATH_MIN and not scale_grad_by_freq:
        out = aten.embedding_dense_backward.default(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
        for e in reversed(list(held)):
            free(e)
        return out
    m, p = min(n, num_weights), n // 10 + min(n, num_weights)
    acc = 8 if grad.dtype == torch.float64 else 4
    base = len(held)
    alloc(n * ib, "sorted indices")
    alloc(n * ib, "original indices")
    rng = alloc(n * ib, "range (arange)")
    free(alloc(cub.radix_sort_pairs(n, ib), "cub radix sort temporary"))
    free(rng)
    if scale_grad_by_freq:
        alloc(n * ib, "count")
        free(alloc(cub.scan_by_key(n, ib), "cub inclusive sum by key temporary"))
        free(alloc(cub.scan_by_key(n, ib), "cub inclusive scan by key temporary"))
    out = aten.embedding_dense_backward.default(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
    kernel = [alloc(n * ib, "segment offsets"), alloc(8, "number of segments")]
    keys = alloc(n * ib, "unique_by_key keys")
    free(alloc(cub.unique_by_key(n, ib), "cub unique_by_key temporary"))
    free(keys)
    kernel += [alloc(m * ib, "partials per segment"), alloc(m * ib, "partials per segment offset")]
    free(alloc(cub.exclusive_sum(m, ib), "cub exclusive scan temporary"))
    kernel += [alloc(8, "number of partial segments"), alloc(p * ib, "partial segment offset")]
    d = grad.size(-1)
    warped = cub.cdiv(d, 32) * 32
    scatter_grid = cub.cdiv(m * warped, min(warped, MAX_BLOCK_SIZE))
    if (scatter_grid < cap.gpu["sm_count"] * MAX_ATOMIC_ACCUM_BLOCKS_PER_SM and p > scatter_grid * 4
            and not torch.are_deterministic_algorithms_enabled()):
        # the fused atomic kernel: few segments, many partial segments
        kernel.append(alloc(p * ib, "partial segment to segment"))
        if grad.dtype in (torch.float16, torch.bfloat16):
            free(alloc(num_weights * d * 4, "grad_weight accumulated in float32"))
    else:
        kernel.append(alloc(p * d * acc, "grad_weight per segment"))
    for e in reversed(kernel):
        free(e)
    for e in reversed(held[base:]):  # count, orig_indices, sorted_indices
        free(e)
    for e in reversed(list(held)):  # the contiguous copies
        free(e)
    return out


REWRITE = {aten.embedding_dense_backward.default: dense_backward}
