"""Ops that have no CUDA kernel: CUDA runs their CompositeExplicitAutograd kernel, meta its own meta function.

The two can allocate differently: on meta, aten::mean (no dim) makes a 4-byte temporary that its composite
kernel on CUDA does not. aten/src/ATen/native/ReduceOps.cpp (PyTorch 2.11): mean(self, dtype) is
at::mean(self, IntArrayRef{}, false, dtype) and sum(self, dtype) is at::sum(self, IntArrayRef{}, false, dtype):
one call of the op that has the CUDA kernel. REWRITE runs those calls instead (bracketed like any op with a CUDA
kernel, so nothing of meta's leaks).
"""
import torch

aten = torch.ops.aten
SOURCE = "aten/src/ATen/native/ReduceOps.cpp mean(self, dtype) / sum(self, dtype)"

REWRITE = {
    aten.mean.default: lambda x, dtype=None: aten.mean.dim(x, [], False, dtype=dtype),
    aten.sum.default: lambda x, dtype=None: aten.sum.dim_IntList(x, [], False, dtype=dtype),
}
