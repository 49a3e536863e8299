"""nonzero and index_put with accumulate as CUDA runs them: every allocation, in the kernels' order.

aten/src/ATen/native/cuda/Nonzero.cu nonzero_cuda_out_impl (2.11: chunks of at most 2^30 elements below INT_MAX
none): self.contiguous() when it is not, num_nonzeros (an int per chunk), cub::DeviceReduce::Sum's temporary per
chunk, the output [ndim, nnz] int64 (transposed into [nnz, ndim]), cub::DeviceSelect::Flagged's temporary per chunk,
then num_nonzeros freed. (Its 4-byte pinned host count is host memory.)

aten/src/ATen/native/cuda/Indexing.cu index_put_with_sort_kernel (_index_put_impl_ with accumulate, the backward of
advanced indexing): self.contiguous(); makeLinearIndex (IndexingUtils.h expandTensors: a mask's nonzero; int32
indices to int64; transposeToFront where the indexed dims are not adjacent; computeLinearIndex: per index
remainder(size) * stride, summed), the value expanded and made contiguous where it is not already the indexed
shape, then (for a non-empty index) src made contiguous when permuted, sorted and original indices, range =
arange, cub's radix sort over get_num_bits of the largest linear index (its temporary), freed in reverse.
Checked on an H200 against 180 nonzero and 40 index_put calls (scripts/twins/predict_probes.py ops) and
timm_swin_t's recording (its relative position bias backward).

aten/src/ATen/native/TensorAdvancedIndexing.cpp make_info and AdvancedIndex (index.Tensor's meta function and
_index_put_impl_ without accumulate): expandTensors (a mask becomes mask.nonzero(), one column per dim),
expand_outplace (the indices broadcast), a host index moved to the device and an int32 one made int64 (each a new
contiguous tensor of the broadcast shape), then, on CUDA with two or more indices whose strides differ, every
index made contiguous ("to simplify the CUDA kernel"; meta skips it); all held until the op returns. The zoo's
recordings show it (transformers' masking_utils indexing a padding mask with a broadcast batch and kv index).
"""
import math

import torch

from . import cub

aten = torch.ops.aten
SOURCE_NZ = "aten/src/ATen/native/cuda/Nonzero.cu nonzero_cuda_out_impl (cub reduce and select temporaries)"
SOURCE_AI = "aten/src/ATen/native/TensorAdvancedIndexing.cpp make_info / AdvancedIndex (indices on CUDA)"
SOURCE_MASK = "aten/src/ATen/native/IndexingUtils.h expandTensors (mask.nonzero())"
SOURCE_IP = ("aten/src/ATen/native/cuda/Indexing.cu index_put_with_sort_kernel (makeLinearIndex, cub radix sort; "
             "IndexingUtils.h)")
INT_MAX = 2**31 - 1


def nonzero(cap, x, make_output):
    """nonzero of meta tensor x: its allocations around make_output() (which allocates [nnz, ndim] int64 and returns
    it); the output."""
    n = x.numel()
    copy = None
    if not x.is_contiguous() and n:
        copy = cap.fake_alloc(n * x.element_size(), "nonzero: input made contiguous", SOURCE_NZ)
    chunks = [n] if n < INT_MAX else [min(1 << 30, n - i * (1 << 30)) for i in range(cub.cdiv(n, 1 << 30))]
    count = cap.fake_alloc(4 * len(chunks), "nonzero: the count", SOURCE_NZ)
    for c in chunks:
        t = cub.reduce_sum(c, cap.gpu["sm_count"])
        cap.fake_free(cap.fake_alloc(t, "nonzero: cub reduce temporary", SOURCE_NZ), t)
    out = make_output()
    if x.dim() > 0:
        for c in chunks:
            t = cub.select_flagged(c)
            cap.fake_free(cap.fake_alloc(t, "nonzero: cub select temporary", SOURCE_NZ), t)
    cap.fake_free(count, 4 * len(chunks))
    if copy is not None:
        cap.fake_free(copy, n * x.element_size())
    return out


def _contiguous(shape, strides):
    """TensorImpl's is_contiguous: size-1 dims ignored, an empty tensor contiguous."""
    if 0 in shape:
        return True
    expect = 1
    for sz, st in zip(reversed(shape), reversed(strides)):
        if sz != 1:
            if st != expect:
                return False
            expect *= sz
    return True


def advanced_index(cap, self, indices, mask_count):
    """make_info's allocations for self[indices] on CUDA (index.Tensor, _index_put_impl_ without accumulate), in
    order: each mask's nonzero, host indices moved, int32 indices made int64, then every index made contiguous
    where two or more indices' strides differ. mask_count(m): a mask's number of true elements. Returns the held
    entries [(addr, bytes)], freed when the op returns."""
    held = []

    def alloc(n, what, src=SOURCE_AI):
        held.append((cap.fake_alloc(n, what, src), n))

    idx = []  # [shape, strides, element size, on the device]
    for m in indices:
        if not isinstance(m, torch.Tensor):
            continue
        if m.dtype in (torch.bool, torch.uint8):
            if not m.is_meta:
                return held  # a host mask: nonzero on the host, then moved; not modelled
            count, d = mask_count(m), max(m.dim(), 1)
            n = count * m.dim() * 8
            if m.numel() > 0:
                def make(n=n):
                    return (cap.fake_alloc(n, "boolean mask index: nonzero()", SOURCE_MASK), n)
                e = nonzero(cap, m, make)
                if e[1]:
                    held.append(e)
            idx += [[[count], [d], 8, True] for _ in range(m.dim())]
        else:
            idx.append([list(m.shape), list(m.stride()), m.element_size(), m.is_meta])
    if not idx:
        return held
    bshape = list(torch.broadcast_shapes(*[tuple(i[0]) for i in idx]))
    bn = math.prod(bshape)
    contig = [math.prod(bshape[k + 1:]) for k in range(len(bshape))]
    for i in idx:  # expand_outplace: stride 0 where broadcast
        shape, strides, off = i[0], i[1], len(bshape) - len(i[0])
        i[1] = [0 if k < off or (shape[k - off] == 1 and bshape[k] != 1) else strides[k - off]
                for k in range(len(bshape))]
        i[0] = bshape
    for i in idx:
        if not i[3]:  # indice.to(self.device()): a dense host tensor keeps its strides, an expanded one not
            dense = _contiguous(i[0], i[1]) or 0 not in [st for sz, st in zip(i[0], i[1]) if sz != 1]
            if bn:
                alloc(bn * i[2], "a host index moved to the device")
            if not dense:
                i[1] = contig
            i[3] = True
    for i in idx:
        if i[2] == 4:
            if bn:
                alloc(bn * 8, "an int32 index made int64")
            i[1], i[2] = contig, 8
    if len(idx) >= 2 and any(i[1] != idx[0][1] for i in idx[1:]):
        for i in idx:
            if not _contiguous(i[0], i[1]) and bn:
                alloc(bn * i[2], "an index made contiguous (its strides differ from another's)")
    return held


def _num_bits(max_key):
    """ATen/cuda/cub.h get_num_bits."""
    n = 1
    while max_key > 1:
        max_key >>= 1
        n += 1
    return n


def index_put_accumulate(cap, self, indices, values, unsafe):
    """The allocations of _index_put_impl_(self, indices, values, accumulate=True, unsafe) (meta's in-place op
    allocates nothing); None where an index is a mask or on the host (not modelled here: the caller keeps meta's
    behaviour and says so)."""
    held = []

    def alloc(n, what):
        if n <= 0:
            return None
        return (cap.fake_alloc(n, "index_put (accumulate): " + what, SOURCE_IP), n)

    def free(e):
        if e is not None:
            cap.fake_free(*e)

    shape, ndim = list(self.shape), self.dim()
    esize = self.element_size()
    idx = list(indices) + [None] * (ndim - len(indices))
    if any(i is not None and (i.dtype in (torch.bool, torch.uint8) or not i.is_meta) for i in idx):
        return None
    self_copy = alloc(self.numel() * esize, "self made contiguous") if not self.is_contiguous() else None
    for i in idx:  # int32 indices become int64 (kept until makeLinearIndex returns)
        if i is not None and i.dtype == torch.int32:
            held.append(alloc(i.numel() * 8, "an int32 index made int64"))
    defined = [k for k, i in enumerate(idx) if i is not None]
    bshape = torch.broadcast_shapes(*[idx[k].shape for k in defined]) if defined else ()
    bn = math.prod(bshape)
    adjacent = defined == list(range(defined[0], defined[-1] + 1)) if defined else True
    perm = list(range(ndim)) if adjacent else defined + [k for k in range(ndim) if k not in defined]
    src_sizes = [shape[p] for p in perm]
    base = [math.prod(shape[k + 1:]) for k in range(ndim)]
    src_strides = [base[p] for p in perm]
    expect, permuted = 1, False
    for sz, st in reversed(list(zip(src_sizes, src_strides))):
        if sz != 1 and st != expect:
            permuted = True
        expect *= sz if sz != 1 else 1
    linear, first, slice_size, dims_before = None, True, 1, 0
    for pos in range(ndim):
        p = perm[pos]
        if idx[p] is not None:
            if not unsafe and bn > 0:  # _assert_async(index.max() < size), then min >= -size
                for _ in range(2):
                    a, b = alloc(8, "range check"), alloc(1, "range check")
                    free(b)
                    free(a)
            rem = alloc(bn * 8, "index.remainder(size)")
            cur = alloc(bn * 8, "index * stride")
            free(rem)
            if not first:
                free(cur)  # added into the linear index
            else:
                linear = cur
            first = False
        elif not first:
            slice_size *= src_sizes[pos]
        else:
            dims_before += 1
    for h in held:
        free(h)
    n_def = len(defined)
    vals_numel = math.prod(src_sizes[:dims_before]) * bn * math.prod(src_sizes[dims_before + n_def:])
    value_copy = None
    if not values.is_contiguous() or values.numel() != vals_numel:
        value_copy = alloc(vals_numel * esize, "the value expanded and made contiguous")
    if bn > 0 and slice_size > 0:
        src_copy = alloc(self.numel() * esize, "src made contiguous") if permuted else None
        sort = [alloc(bn * 8, "sorted indices"), alloc(bn * 8, "original indices"), alloc(bn * 8, "range (arange)")]
        t = cub.radix_sort_pairs(bn, 8, _num_bits((self.numel() - 1) // slice_size))
        free(alloc(t, "cub radix sort temporary"))
        for e in reversed(sort):
            free(e)
        free(src_copy)
    free(value_copy)
    free(linear)
    free(self_copy)
    return True


def index_put_impl(cap, self, indices, values, accumulate=False, unsafe=False):
    """REWRITE of aten::_index_put_impl_: with accumulate, CUDA's sort kernel's allocations, then meta's in-place op
    (which allocates nothing that survives)."""
    if accumulate:
        index_put_accumulate(cap, self, indices, values, unsafe)
        return aten._index_put_impl_.default(self, indices, values, accumulate, unsafe)
    held = []
    if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
        held = advanced_index(cap, self, indices, None)
    out = aten._index_put_impl_.default(self, indices, values, accumulate, unsafe)
    for a, n in held:
        cap.fake_free(a, n)
    return out


REWRITE = {aten._index_put_impl_.default: index_put_impl}
