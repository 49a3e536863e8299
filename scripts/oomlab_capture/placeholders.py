"""Values a meta tensor cannot give: answered with placeholders, each listed in the trace's "placeholders".

- .item() / float() / int() / bool() (aten::_local_scalar_dense; aten::item itself under torch.inference_mode(),
  where the composite reaches the dispatch mode undecomposed): 0.0 for floating types, 1 for integers
  (a divisor stays valid), False for bool (a found-inf or NaN check says "fine", so the step runs).
- .tolist(), .cpu(), .numpy(), .to("cpu"): host copies filled with those values; no device bytes.
- torch.equal: False (CUDA's eq and all() tensors are charged);
- data-dependent shapes: nonzero() as if every element were non-zero, masked_select() as if every element were
  selected: the largest output, so a prediction is never low because of them.
Control flow that depends on these values runs as the placeholder says; the trace lists where that happened.
Each is asked of values.py first: a tensor with a CPU value (from the data) answers as the GPU would, and the
trace lists that too ("answered"); only a value the capture cannot have gets a placeholder.
"""
import torch

aten = torch.ops.aten


def value(dtype):
    if dtype == torch.bool:
        return False
    if dtype.is_floating_point or dtype.is_complex:
        return 0.0
    return 1


def _host(t):
    v = value(t.dtype)
    return torch.full(t.shape, v, dtype=t.dtype, device="cpu")


def dispatch(cap, func, args, kwargs):
    if func is aten._to_copy.default and args[0].is_meta and str(kwargs.get("device", "")).startswith("cpu"):
        # a device-to-host copy below the capture's device map (FSDP2's CPU offloading copies each reduced
        # gradient to the host in its backward hook, which the autograd engine runs): as Tensor.to("cpu") above;
        # non_blocking pins the host tensor (_to_copy: pin_out)
        h = _to_host(cap, args[0], "aten::_to_copy(cpu)")
        if kwargs.get("dtype") is not None:
            h = h.to(kwargs["dtype"])
        if kwargs.get("non_blocking"):
            cap.pinned(h)
        return h
    if func in (aten._local_scalar_dense.default, aten.item.default) and args[0].is_meta:
        v = cap.values.get(args[0])
        if v is not None:
            cap.answered("aten::item")
            return v.item()
        cap.placeholder("aten::item")
        return value(args[0].dtype)
    if func is aten.nonzero.default and args[0].is_meta:
        from .cuda_model import indexing
        x = args[0]
        v = cap.values.get(x)
        if v is not None:
            cap.answered("aten::nonzero")
            nz = v.nonzero()

            def make():
                out = torch.empty(nz.shape, dtype=torch.long, device="meta")
                cap.values.put(out, nz)
                return out
            return indexing.nonzero(cap, x, make)
        cap.placeholder("aten::nonzero (every element counted)")
        return indexing.nonzero(cap, x, lambda: torch.empty((x.numel(), x.dim()), dtype=torch.long, device="meta"))
    if func is aten.equal.default and any(isinstance(a, torch.Tensor) and a.is_meta for a in args[:2]):
        return _equal(cap, args[0], args[1])
    if func is aten.masked_select.default and args[0].is_meta:
        vx, vm = cap.values.get(args[0]), cap.values.get(args[1]) if args[1].is_meta else args[1]
        if vm is not None:
            cap.answered("aten::masked_select")
            n = int(torch.broadcast_to(vm, torch.broadcast_shapes(args[0].shape, args[1].shape)).sum())
            out = torch.empty((n,), dtype=args[0].dtype, device="meta")
            if vx is not None:
                cap.values.put(out, torch.masked_select(vx, vm))
            return out
        cap.placeholder("aten::masked_select (every element selected)")
        shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
        n = 1
        for s in shape:
            n *= s
        return torch.empty((n,), dtype=args[0].dtype, device="meta")
    return NotImplemented


SOURCE_EQUAL = "aten/src/ATen/native/cuda/Equal.cpp cuda_equal (at::eq(self, src).all().item())"


def _equal(cap, a, b):
    """torch.equal of device tensors (meta has no kernel): sizes that differ answer False at once; otherwise CUDA's
    cuda_equal makes eq's bool tensor and all()'s, freed once read. The answer from the data where both have
    values, else a placeholder (False)."""
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    n = a.numel()
    e = cap.fake_alloc(n, "torch.equal: eq(self, src)", SOURCE_EQUAL)
    t = cap.fake_alloc(1, "torch.equal: all()", SOURCE_EQUAL)
    cap.fake_free(t, 1)
    cap.fake_free(e, n)
    va, vb = cap.values.get(a) if a.is_meta else a, cap.values.get(b) if b.is_meta else b
    if va is not None and vb is not None:
        cap.answered("aten::equal")
        return bool(torch.equal(va, vb))
    cap.placeholder("aten::equal")
    return False


SOURCE_COPY = "aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda (copy_requires_temporaries, src_contig)"
_HOST_COPY = {torch.Tensor.cpu: "Tensor.cpu", torch.Tensor.numpy: "Tensor.numpy", torch.Tensor.tolist: "Tensor.tolist"}


def _to_host(cap, x, name):
    """The host copy of the device tensor x: its values where known (answered), else a placeholder."""
    if x.numel() and not x.is_contiguous() and not cap.on_host(x):
        # Copy.cu copy_kernel_cuda to the host: src.expand_as(dst).contiguous() on the device first
        n = x.numel() * x.element_size()
        cap.fake_free(cap.fake_alloc(n, "device-to-host copy: a contiguous device temporary", SOURCE_COPY), n)
    h = cap.values.get(x)
    if h is not None:
        cap.answered(name)
        return h.clone()
    cap.placeholder(name)
    return _host(x)


def function(cap, func, args, kwargs):
    name = _HOST_COPY.get(func)
    if name is None and func is torch.Tensor.to and len(args) > 1:
        d = args[1]
        if (isinstance(d, str) and d.startswith("cpu")) or (isinstance(d, torch.device) and d.type == "cpu"):
            name = "Tensor.to(cpu)"
    if name is None and func is torch.Tensor.to and isinstance(kwargs.get("device"), (str, torch.device)):
        if str(kwargs["device"]).startswith("cpu"):
            name = "Tensor.to(cpu)"
    if name is None or not args or not isinstance(args[0], torch.Tensor) or not args[0].is_meta:
        return NotImplemented
    h = _to_host(cap, args[0], name)
    if func is torch.Tensor.numpy:
        return h.numpy()
    if func is torch.Tensor.tolist:
        return h.tolist()
    return h
