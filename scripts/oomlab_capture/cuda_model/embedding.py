"""aten::embedding_dense_backward as CUDA runs it: every allocation of both paths, in the kernel's order.

aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda (PyTorch 2.11): indices_.contiguous() and
grad_.contiguous() copy a non-contiguous input first (held to the end). With at most 3072 indices and no
scale_grad_by_freq it allocates only grad_weight (zeros [V, D]). Otherwise it sorts: sorted_indices,
orig_indices, range = arange(N), then cub's DeviceRadixSort::SortPairs temporary (at::cuda::cub, CUB_WRAPPER: one
caching-allocator block per CUB call, freed after the launch); with scale_grad_by_freq, count and two
scan-by-key temporaries; then native/cuda/EmbeddingBackwardKernel.cu embedding_backward_cuda_kernel: grad_weight,
segment_offsets, num_of_segments (int64 scalar), unique_by_key's keys_out and temporary, partials_per_segment and
its offsets, the exclusive scan's temporary, num_of_partial_segments, partial_segment_offset and
grad_weight_per_segment (float32 for half, bfloat16 and float), freed in reverse at the end.

CUB's temporary sizes are CCCL 3.0's (CUDA 13) for sm_90: onesweep radix sort over the whole key (nbits is not
passed: begin 0, end 8 x sizeof(index)), is_overwrite_okay false (an extra key and value buffer), OffsetT 64-bit;
the tile sizes of each algorithm's sm_90 tuning (cub/device/dispatch/tuning/tuning_*.cuh). Checked against 46
calls recorded on an H200 and the H100 recording of tests/data/predict/transformer_encoder.py, every size equal
(docs/parity.md, "Predicting without a GPU"). Other architectures tune other tiles: their sizes here are sm_90's,
a few KiB apart at most, and the prediction says so ("modelled" names the assumption).
"""
import torch

aten = torch.ops.aten
SOURCE = ("aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda, EmbeddingBackwardKernel.cu "
          "embedding_backward_cuda_kernel; cub (CCCL 3.0) temporaries, sm_90 tunings")
SOURCE_OTHER = SOURCE + " (this GPU's own tunings not modelled: sm_90's assumed)"
SORT_PATH_MIN = 3073  # more indices than this take the sort path (num_indices <= 3072: the feature kernel)


def _cdiv(a, b):
    return -(-a // b)


def _a256(x):
    return _cdiv(x, 256) * 256


def sort_pairs_temp(n, ib, bits=None):
    """DeviceRadixSort::SortPairs(index_t keys and values, int64 n, bits [0, bits)): temp_storage_bytes on sm_90
    (dispatch_radix_sort.cuh InvokeOnesweep: the extra key and value buffers only for more than one pass)."""
    single_tile, tile = (2304, 4608) if ib == 8 else (4864, 6528)
    if n <= single_tile:
        return 1
    passes = _cdiv(8 * ib if bits is None else bits, 8)
    portion = ((1 << 28) - 1) // tile * tile
    portions = _cdiv(n, portion)
    blocks = _cdiv(min(n, portion), tile)
    extra = 2 * _a256(n * ib) if passes > 1 else 0
    return (_a256(portions * passes * 256 * 8) + _a256(blocks * 256 * 4) + extra
            + _a256(portions * passes * 4) + 255)


def _tile_state(tiles, word):
    return _a256(word * (32 + tiles)) + 511


def unique_by_key_temp(n, ib):
    return _tile_state(_cdiv(n, 640 * 7 if ib == 8 else 512 * 14), 16)


def exclusive_sum_temp(m, ib):
    return _tile_state(_cdiv(m, 128 * 7 if ib == 8 else 128 * 15), 16 if ib == 8 else 8)


def scan_by_key_temp(n, ib):
    t = _cdiv(n, 224 * 11 if ib == 8 else 288 * 14)
    return _a256(16 * (t + 32)) + _a256(ib * (t + 1)) + 255


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
    free(alloc(sort_pairs_temp(n, ib), "cub radix sort temporary"))
    free(rng)
    if scale_grad_by_freq:
        alloc(n * ib, "count")
        free(alloc(scan_by_key_temp(n, ib), "cub inclusive sum by key temporary"))
        free(alloc(scan_by_key_temp(n, ib), "cub inclusive scan by key temporary"))
    out = aten.embedding_dense_backward.default(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
    kernel = [alloc(n * ib, "segment offsets"), alloc(8, "number of segments")]
    keys = alloc(n * ib, "unique_by_key keys")
    free(alloc(unique_by_key_temp(n, ib), "cub unique_by_key temporary"))
    free(keys)
    kernel += [alloc(m * ib, "partials per segment"), alloc(m * ib, "partials per segment offset")]
    free(alloc(exclusive_sum_temp(m, ib), "cub exclusive scan temporary"))
    kernel += [alloc(8, "number of partial segments"), alloc(p * ib, "partial segment offset"),
               alloc(p * grad.size(-1) * acc, "grad_weight per segment")]
    for e in reversed(kernel):
        free(e)
    for e in reversed(held[base:]):  # count, orig_indices, sorted_indices
        free(e)
    for e in reversed(list(held)):  # the contiguous copies
        free(e)
    return out


REWRITE = {aten.embedding_dense_backward.default: dense_backward}
