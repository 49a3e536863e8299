"""torch.compile under the capture: Dynamo, AOTAutograd and Inductor run as on the GPU, and the wrapper Inductor
generates runs on meta with every buffer it allocates recorded (docs/parity.md, "Compiled training").

- Dynamo traces the program's (meta) tensors with PyTorch's own functions (devmap's eager stand-ins put back,
  the recording paused); the backend (`_backend`) gives Inductor's compile_fx the same graph with fake CUDA inputs
  (`_retarget`), so AOTAutograd partitions and Inductor lowers, fuses and schedules for device cuda, the GPU named
  by --gpu as its device properties. The CUDA calls that path makes only ask (the current stream, a primary
  context, the properties): fakecuda.c answers them. Constant folding's one-element tensors and the tracers'
  constants are made on the host (`_no_device_constants`).
- The generated wrapper (torch/_inductor/codegen/wrapper.py) allocates with empty_strided_cuda, here a meta tensor
  the recording allocator logs, frees with `del`, and reuses buffers as generated; its extern kernels (mm,
  convolution, SDPA) are aten ops RecordMode sees with the CUDA-path models, as in eager; its layout asserts hold.
- Its Triton kernels are never compiled or run (`_Kernel`): their heuristics run on their source to give the
  configs they are autotuned over, and a kernel's first launch makes autotuning's allocations (a cold cache, as a
  GPU's first run: clones of the mutated arguments, the L2-sized flush buffer); pad_mm's benchmark makes its
  inputs and outputs on meta, recorded, and its timing-dependent choice is taken as the capture's --timed-choices
  says: unpadded ("first"), padded ("other"; oomlab predict runs both where there is such a choice).
- CUDA graphs (mode "reduce-overhead", "max-autotune", or options={"triton.cudagraphs": True}): Inductor wraps the
  graphs as on the GPU, and cudagraphs.py makes the cudagraph trees' warm-ups, recordings and replays in their
  private pool.
- max-autotune (the mode's options applied as torch.compile applies them): max_autotune.py makes its benchmarks'
  allocations, ATen's kernel ("first") or the Triton templates ("other") taken at each timed choice; the benchmark
  tensors the GPU's garbage collector frees are the range (the upper trace holds them to the end of their graph's
  compile: `inner` below).
- The choices made by timing are counted (`timed_choice`: the compile summary's "timed"); said in the report as
  predicted otherwise (count_unmodelled): a graph or a Dynamo trace that needs the GPU here (predicted as eager,
  with the step that failed).
"""
import builtins
import contextlib
import functools
import linecache
import os
import time

import torch
import torch.utils._python_dispatch

from . import cudagraphs, max_autotune

SOURCE = "torch/_inductor/compile_fx.py compile_fx; codegen/wrapper.py (empty_strided_cuda, del, buffer reuse)"
_orig_compile = torch.compile
_installed = False


class _Kernel:
    """A Triton kernel of the wrapper: never run. Its first launch makes the device allocations of autotuning
    where it keeps several configs (triton_heuristics.py CachingAutotuner: benchmark_all_configs, bench,
    copy_args_to_cpu_if_needed; benchmarking.py benchmark_gpu): per config benched, a warm-up call on clones of
    the mutated arguments, then a flush buffer of the L2's size held while the timed calls run on fresh clones (the
    same blocks each time: one call stands for them), freed at the end. Each config decides anew which clones
    would raise the peak and are host copies instead: the previous config's flush buffer raised it."""

    def __init__(self, cap, name, benches=0, mutated=(), optimize_mem=True, arg_names=(), key=None,
                 coordesc=False):
        self.__name__ = name
        self.cap = cap
        self.key = key
        self.benches = benches
        self.mutated = tuple(mutated)
        self.optimize_mem = optimize_mem
        self.arg_names = tuple(arg_names)
        # coordinate descent tuning (max-autotune) benchmarks once more at least: the start config's neighbours
        # (triton_heuristics.py coordinate_descent_tuning; the same blocks each time: one stands for them)
        self.coordesc = 1 if coordesc else 0
        self.tuned = benches == 0 and not coordesc

    @staticmethod
    def _storage(a):
        return 0 if 0 in a.shape else sum((d - 1) * st for d, st in zip(a.shape, a.stride())) + 1

    def _on_host(self, args):
        on_host = set()
        if self.optimize_mem:
            allocated, peak, _ = self.cap.ext.counters()
            budget = peak - allocated
            for name, a in zip(self.arg_names, args):
                if name in self.mutated and isinstance(a, torch.Tensor):
                    size = self._storage(a) * a.element_size()
                    if size > budget:
                        on_host.add(name)
                    else:
                        budget -= size
        return on_host

    def _clones(self, args, on_host):
        return [torch.empty(self._storage(a), dtype=a.dtype, device="meta")
                for name, a in zip(self.arg_names, args)
                if name in self.mutated and name not in on_host and isinstance(a, torch.Tensor)]

    def run(self, *args, **kwargs):
        if self.tuned:
            return None
        self.tuned = True
        self.cap.state.setdefault("autotuned", set()).add(self.key)
        l2 = self.cap.gpu.get("l2_bytes", 0)
        for _ in range(self.benches + self.coordesc):
            on_host = self._on_host(args)
            clones = self._clones(args, on_host)
            del clones
            flush = torch.empty(l2 // 4, dtype=torch.int, device="meta")
            clones = self._clones(args, on_host)
            del clones
            del flush
        return None


def _kernel_of(cap, kernel_name, source_code):
    """The wrapper's kernel from its generated source: the module run with cached_autotune taken over, so that
    its heuristics give the configs, mutated arguments and memory setting it would be autotuned with, and where
    the count depends on the loaded kernels, Triton compiles them for the target (triton_loader.py); None when the
    source does not run here."""
    import hashlib
    from torch._inductor.runtime import triton_heuristics as th

    from . import triton_loader
    orig = th.cached_autotune
    found = {}
    key = hashlib.sha256(source_code.encode()).hexdigest()

    def cached_autotune(size_hints, configs, triton_meta, heuristic_type, filename=None, inductor_meta=None,
                        custom_kernel=False):
        meta = dict(inductor_meta or {})
        mutated = tuple(meta.get("mutated_arg_names", ())) + tuple((triton_meta or {}).get("restore_value", ()))

        def decorate(fn):
            benches = 0
            # a kernel of the same source tuned before this module loaded: its best config is read from the
            # autotuning cache (check_autotune_cache), nothing is benchmarked
            if key not in cap.state.get("autotuned", ()):
                unique = th.unique_configs(configs)
                benches = len(unique) if len(unique) > 1 else 0
                at = orig(size_hints, configs, triton_meta, heuristic_type, filename=filename,
                          inductor_meta=inductor_meta, custom_kernel=custom_kernel)(fn)
                if triton_loader.needs_compile(size_hints, unique, heuristic_type, at.inductor_meta,
                                               at.device_props):
                    try:
                        benches = triton_loader.benched(at, triton_loader.timed_launchers(cap, at))
                    except Exception as e:
                        if os.environ.get("OOMLAB_CAPTURE_DEBUG"):
                            import traceback
                            traceback.print_exception(e)
                        cap.count_unmodelled("torch.compile kernel that Triton could not compile for the target here "
                                             "(autotuned over its heuristics' configs)", triton_loader.SOURCE)
            coordesc = key not in cap.state.get("autotuned", ()) and meta.get("coordinate_descent_tuning") \
                and heuristic_type not in (th.HeuristicType.TEMPLATE, th.HeuristicType.USER_AUTOTUNE,
                                           th.HeuristicType.FIXED)
            k = _Kernel(cap, kernel_name, benches, mutated, meta.get("optimize_mem", True),
                        getattr(fn, "arg_names", ()), key, coordesc)
            found["kernel"] = k
            return k
        return decorate
    th.cached_autotune = cached_autotune
    try:
        path = f"<oomlab kernel {kernel_name}>"  # triton.jit reads the source back through linecache
        linecache.cache[path] = (len(source_code), None, source_code.splitlines(True), path)
        exec(builtins.compile(source_code, path, "exec"), {"__name__": "oomlab_kernel_" + kernel_name, "__file__": path})
    except Exception as e:
        if os.environ.get("OOMLAB_CAPTURE_DEBUG"):
            import traceback
            traceback.print_exception(e)
        return None
    finally:
        th.cached_autotune = orig
    return found.get("kernel")


class _Driver:
    """Triton's active driver for the compile: the target of the GPU named by --gpu, no device behind it."""

    def __init__(self, cc):
        from triton.backends.compiler import GPUTarget
        self.target = GPUTarget("cuda", cc, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def set_current_device(self, device):
        pass

    def get_device_interface(self):
        return torch.cuda

    def is_active(self):
        return True

    def get_active_torch_device(self):
        return torch.device("cuda", 0)


def available():
    """Whether the compile path can run here: fakecuda interposed and Triton importable."""
    from .. import fakecuda
    if not fakecuda.active():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _install(cap):
    """Patches kept for the whole capture (compilation and the wrappers' runs), installed at the first compile."""
    global _installed
    if _installed:
        return
    _installed = True
    from torch._dynamo import device_interface
    from torch._inductor import async_compile, config
    from torch._inductor.fx_passes import pad_mm
    from torch._subclasses import fake_tensor
    from triton.runtime.driver import driver

    from .. import gpus

    major, minor = gpus.capability(cap.gpu)
    l2 = cap.gpu.get("l2_bytes", 0)
    from . import triton_loader
    os.environ.setdefault("TRITON_CACHE_DIR", triton_loader.triton_cache_dir())
    if cap.choices == "other":
        # Inductor's caches (the FX graph cache, pad_mm's and the autotuner's timings: cache_dir()) key nothing on
        # how the timed choices were taken: the other way compiles in a folder of its own
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir(), "other-choices")
    driver.set_active(_Driver(major * 10 + minor))
    from torch._inductor.runtime import triton_helpers
    triton_helpers.set_driver_to_gpu = lambda: None  # a kernel module's first line: the fake driver stays
    cuda = torch.cuda
    ci = device_interface.CudaInterface
    for name in ("get_device_properties", "current_device", "set_device", "device_count", "synchronize",
                 "is_bf16_supported"):
        setattr(ci, name, staticmethod(getattr(cuda, name)))
    ci.memory_allocated = staticmethod(lambda device=None: cap.allocated())
    # fake CUDA tensors need no context (FakeTensor.__new__ would make a real one); rng state is the host's
    fake_tensor.init_gpu_context = lambda device: None
    cuda.get_rng_state = lambda device="cuda": torch.zeros(16, dtype=torch.uint8)
    cuda.set_rng_state = lambda new_state, device="cuda": None
    cuda._lazy_init = lambda: None


    def empty_strided_cuda(size, stride, dtype):
        return torch.empty_strided(size, stride, dtype=dtype, device="meta")
    torch._C._dynamo.guards._empty_strided_cuda = empty_strided_cuda
    # The wrapper asserts each extern kernel's output layout, and on the GPU those asserts hold: where a meta
    # kernel's (or a cuda_model rewrite's) strides differ for the same dense bytes (convolution_backward's
    # grad_weight beside Inductor's channels-last inputs), the tensor takes the asserted ones
    assert_size_stride = torch._C._dynamo.guards.assert_size_stride

    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    def assert_layout(t, size, stride, *args):
        if t.is_meta and tuple(t.shape) == tuple(size) and tuple(t.stride()) != tuple(stride) \
                and dense(t) and t.storage_offset() == 0 \
                and dense(torch.empty_strided(size, stride, device="meta")):
            t.as_strided_(size, stride)
        return assert_size_stride(t, size, stride, *args)
    torch._C._dynamo.guards.assert_size_stride = assert_layout
    def triton(self, kernel_name, source_code, device_str="cuda"):
        k = _kernel_of(cap, kernel_name, source_code)
        if k is None:
            cap.count_unmodelled("torch.compile autotuning of a kernel whose heuristics did not run here (its "
                                 "first run's benchmark allocations are not in the trace)",
                                 "torch/_inductor/runtime/triton_heuristics.py cached_autotune")
            return _Kernel(cap, kernel_name)
        return k
    async_compile.AsyncCompile.triton = triton

    # pad_mm times a matmul unpadded and padded on the GPU during the compile, on random inputs it makes there:
    # those device allocations are made here on meta and recorded (the inputs, each call's output, the
    # benchmarker's L2 flush buffer), and the choice, timing-dependent, is taken as --timed-choices says
    should_pad = pad_mm._should_pad

    call = {}

    def should_pad_recorded(match, mat1, mat2, op, input=None):
        was = cap.ext.pause(False)
        call.clear()
        call["input"] = input
        try:
            with _CudaOnMeta(cap):
                return should_pad(match, mat1, mat2, op, input)
        finally:
            call.clear()
            cap.ext.pause(was)
    pad_mm._should_pad = should_pad_recorded
    # addmm's padded run takes a random bias made only `if input.is_cuda` (meta here): made as the GPU makes it,
    # once, at the first padded call
    pad_addmm = pad_mm.pad_addmm

    def pad_addmm_recorded(input, *args, **kwargs):
        if input is None and call.get("input") is not None:
            if "bias" not in call:
                b = call["input"]
                call["bias"] = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device="meta")
            input = call["bias"]
        return pad_addmm(input, *args, **kwargs)
    pad_mm.pad_addmm = pad_addmm_recorded

    padded = 0.1 if cap.choices == "other" else 1.0  # is_padded_faster: padded wins below unpadded / 1.1

    def bench(fn, **kwargs):
        timed_choice(cap, "pad_mm")
        fn()  # benchmark_gpu's warm-up call, then the flush buffer while the timed calls reuse fn's blocks
        flush = torch.empty(l2 // 4, dtype=torch.int, device="meta")
        fn()
        del flush
        return padded if getattr(fn, "__name__", "") == "pad_bench_fn" else 1.0
    pad_mm.get_do_bench = lambda: bench
    # the joint graph's patterns (attention fusions) are traced once from example tensors made with data on the
    # input's device (torch.tensor(2.0, device=...)); traced on meta they are the same patterns, with no device
    from torch._inductor.fx_passes import joint_graph
    lazy = joint_graph.lazy_init
    joint_graph.lazy_init = lambda input_device=None: lazy(torch.device("meta"))
    # Dynamo's tracing of a frame makes fake tensors too: paused; the frame's bytecode (graphs and the eager code
    # between them) runs afterwards, recorded
    from torch._dynamo import convert_frame
    trace_frame = convert_frame._compile

    @functools.wraps(trace_frame)
    def traced(*args, **kwargs):
        with _Paused(cap), _pytorch_functions(cap), _meta_factories_fake():
            return trace_frame(*args, **kwargs)
    convert_frame._compile = traced
    # constant folding runs the graph's constant ops on real one-element tensors of the graph's device
    # (constant_folding.py ConstantFolder; joint_graph.py UniformValueConstantFolder): on the host here, their
    # values are the same
    from torch._inductor import constant_folding
    fold = constant_folding.ConstantFolder.run

    def fold_on_host(self, *args, **kwargs):
        with _OnHost():
            return fold(self, *args, **kwargs)
    constant_folding.ConstantFolder.run = fold_on_host
    # Dynamo folds the autocast queries to constants (variables/torch.py constant_fold_functions, the functions
    # as they were when Dynamo was imported): devmap's meta -> cuda wrappers call PyTorch's, which must fold too,
    # or each query is a graph break the GPU run does not have (transformers' RoPE under maybe_autocast)
    from torch._dynamo.variables import torch as dynamo_torch
    for f in cap.state.get("autocast_queries", ()):
        dynamo_torch.constant_fold_functions.setdefault(f, None)
    config.compile_threads = 1  # no compile workers


@contextlib.contextmanager
def _pytorch_functions(cap):
    """PyTorch's own functions where devmap replaced them for eager runs (F.linear, F.dropout, SDPA, ...): Dynamo
    traces them as PyTorch's ops, and AOTAutograd and Inductor take the CUDA path from there."""
    patches = cap.state.get("functional_patches", [])
    mine = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, orig in patches:
        setattr(owner, name, orig)
    try:
        yield
    finally:
        for owner, name, patched in mine:
            setattr(owner, name, patched)


@contextlib.contextmanager
def _meta_factories_fake():
    """Dynamo's fake mode takes the real meta tensors a factory makes under it (FakeTensorMode returns meta outputs
    unwrapped: `torch.tensor([], device=x.device)`, a cache's first keys) as the fake tensors the same call makes
    for a CUDA device on the GPU."""
    from torch._subclasses import fake_tensor
    cls = fake_tensor.FakeTensorMode
    init = cls.__init__

    @functools.wraps(init)
    def fake_init(self, *args, **kwargs):
        kwargs["allow_non_fake_inputs"] = True
        init(self, *args, **kwargs)
    cls.__init__ = fake_init
    try:
        yield
    finally:
        cls.__init__ = init


def _retarget(gm, inputs):
    """The Dynamo graph with its meta devices made cuda, and fake CUDA inputs in Dynamo's fake mode."""
    mode = torch._guards.detect_fake_mode(inputs)
    cuda0 = torch.device("cuda", 0)

    def fake(t):
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            with mode:
                f = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=cuda0)
            return f.requires_grad_(t.requires_grad)
        return t

    def dev(a):
        if isinstance(a, torch.device) and a.type == "meta":
            return cuda0
        if isinstance(a, str) and a == "meta":
            return cuda0
        return a
    for n in gm.graph.nodes:
        n.args = torch.fx.node.map_aggregate(n.args, dev)
        n.kwargs = torch.fx.node.map_aggregate(n.kwargs, dev)
    gm.recompile()
    return gm, [fake(t) for t in inputs]


def _function_modes():
    """Pop the capture's TorchFunctionModes (DeviceMap): Dynamo would trace them. Returns them, innermost last."""
    modes = []
    while torch._C._len_torch_function_stack() > 0:
        modes.append(torch._C._pop_torch_function_stack())
    return modes[::-1]


def _push(modes):
    for m in modes:
        torch._C._push_on_torch_function_stack(m)


class _Paused:
    """The recording allocator paused: the compile's fake tensors (meta storages) are no device allocations.
    Nested uses keep the outer setting; the time spent is the compile's (cap.state["compile_seconds"])."""

    def __init__(self, cap):
        self.cap = cap

    def __enter__(self):
        self.was = self.cap.ext.pause(True)
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.cap.ext.pause(self.was)
        if not self.was:
            st = self.cap.state
            st["compile_seconds"] = st.get("compile_seconds", 0.0) + time.perf_counter() - self.t0


@contextlib.contextmanager
def _no_device_constants():
    """Tracing keeps the values of small constant tensors by running each op on them for real (fake_tensor.py's
    constant propagation; proxy_tensor.py's `constant` of a traced tensor), a host constant's `.to("cuda")` too (a
    KV cache's sliding-window tensor): no device here, so fake mode leaves device moves unfolded, as PyTorch does
    where CUDA is unavailable (FakeTensorMode.avoid_device_init), and the tracer's constants are made on the host
    (the same values)."""
    from torch._subclasses import fake_tensor
    from torch.fx.experimental import proxy_tensor
    cls = fake_tensor.FakeTensorMode
    prop = cls.__dict__["avoid_device_init"]
    unset = proxy_tensor.unset_fake_temporarily

    @contextlib.contextmanager
    def unset_on_host():
        with unset(), _OnHost():
            yield
    cls.avoid_device_init = property(lambda self: True)
    proxy_tensor.unset_fake_temporarily = unset_on_host
    try:
        yield
    finally:
        cls.avoid_device_init = prop
        proxy_tensor.unset_fake_temporarily = unset


def _backend(cap, patches, gm, example_inputs):
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner(*args, **kwargs):  # forward's and backward's (compiled at its first run or now: AOTAutograd decides)
        try:
            with _Paused(cap):
                return compile_fx_inner(*args, **kwargs)
        finally:
            cap.release_held()  # max-autotune's benchmark tensors, in the upper trace (max_autotune.py)
    try:
        with _Paused(cap), _no_device_constants():
            gm, fakes = _retarget(gm, example_inputs)
            fn = compile_fx(gm, fakes, inner_compile=inner, config_patches=patches)
    except Exception as e:  # a step of the CUDA path that needs the device: this graph runs eagerly, said
        cause = e
        while getattr(cause, "inner_exception", None) is not None:
            cause = cause.inner_exception
        where = _needs_device(cause)
        if os.environ.get("OOMLAB_CAPTURE_DEBUG"):
            import traceback
            traceback.print_exception(cause)
        cap.count_unmodelled(f"torch.compile graph predicted as eager ({where})", SOURCE)
        for n in gm.graph.nodes:  # back to the program's device for the eager run
            n.args = torch.fx.node.map_aggregate(n.args, _to_meta)
            n.kwargs = torch.fx.node.map_aggregate(n.kwargs, _to_meta)
        gm.recompile()
        return gm.forward
    cap.state["compiled_graphs"] = cap.state.get("compiled_graphs", 0) + 1
    return fn


def timed_choice(cap, what):
    """A choice the GPU makes by timing (what: "pad_mm" per benchmark, "max_autotune" per selection), counted for
    the report's compile summary: oomlab predict captures the script the other way too where there is one."""
    timed = cap.state.setdefault("timed", {})
    timed[what] = timed.get(what, 0) + 1


def summary(cap):
    """The report's compile line (recorder.trace "compile"): None without torch.compile, else the graphs compiled
    for the GPU, the seconds the compile took (Dynamo, AOTAutograd, Inductor, the Triton compiles for the target),
    those Triton compiles with their cache, the choices made by timing and how they were taken ("choices")."""
    st = cap.state
    if "compile_seconds" not in st and "compiled_graphs" not in st:
        return None
    from . import triton_loader
    tr = st.get("triton", {"kernels": 0, "seconds": 0.0})
    return {"graphs": st.get("compiled_graphs", 0), "seconds": round(st.get("compile_seconds", 0.0), 3),
            "triton_kernels": tr["kernels"], "triton_seconds": round(tr["seconds"], 3),
            "triton_cache": os.environ.get("TRITON_CACHE_DIR") or triton_loader.triton_cache_dir(),
            "timed": dict(sorted(st.get("timed", {}).items())), "choices": cap.choices}


class _CudaOnMeta(torch.overrides.TorchFunctionMode):
    """Factories asking for a CUDA device make meta tensors (real ones, recorded): pad_mm's benchmark inputs. Its
    matmuls are the compiling thread's first cuBLAS calls on the GPU: they take that thread's workspace
    (cublas.py), which the wrapper's own matmuls then find."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from . import cublas
        kwargs = kwargs or {}
        if isinstance(kwargs.get("device"), (str, torch.device)) and torch.device(kwargs["device"]).type == "cuda":
            kwargs = dict(kwargs, device="meta")
        out = func(*args, **kwargs)
        op = getattr(func, "default", None) if isinstance(func, torch._ops.OpOverloadPacket) else \
            _TORCH_MATMULS.get(func, func)
        if op in cublas.OPS:
            cublas.after(self.cap, op, args, kwargs, out)
        return out


_TORCH_MATMULS = {torch.mm: torch.ops.aten.mm.default, torch.addmm: torch.ops.aten.addmm.default,
                  torch.bmm: torch.ops.aten.bmm.default, torch.matmul: None}


class _OnHost(torch.utils._python_dispatch.TorchDispatchMode):
    """Ops asking for a CUDA tensor get a host one (constant folding's real one-element tensors)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = torch.fx.node.map_aggregate(kwargs or {}, _to_host)
        return func(*torch.fx.node.map_aggregate(args, _to_host), **kwargs)


def _to_host(a):
    if isinstance(a, torch.device) and a.type == "cuda":
        return torch.device("cpu")
    return a


def _to_meta(a):
    if isinstance(a, torch.device) and a.type == "cuda":
        return torch.device("meta")
    return a


def _needs_device(exc):
    """Which step of the compile needed a GPU, from the deepest frame in torch: one short phrase."""
    import traceback
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" in f.filename]
    last = frames[-1] if frames else None
    at = f"{last.filename.split('/torch/')[-1]}:{last.lineno} {last.name}" if last else type(exc).__name__
    return f"{at} needs the GPU: {str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__}"


def _outside_modes(cap, fn, eager):
    """fn (Dynamo's entry) with the capture's function modes off and PyTorch's own functions in place (the eager
    code Dynamo leaves between graphs runs with them too: an op at a graph break is seldom one devmap replaces);
    when Dynamo cannot trace the program for the CUDA target here, eager(...) from then on, said in the report."""
    from torch._dynamo import exc
    state = {"eager": False}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if state["eager"]:
            return eager(*args, **kwargs)
        modes = _function_modes()
        try:
            # PyTorch's functions, as when Dynamo traced them: its guards hold their identities (ID_MATCH on
            # F.linear ...), and devmap's stand-ins would fail them at every call, a recompile the GPU run has not
            with _pytorch_functions(cap):
                return fn(*args, **kwargs)
        except (exc.Unsupported, exc.TorchRuntimeError, exc.InternalTorchDynamoError) as e:
            state["eager"] = True
            if os.environ.get("OOMLAB_CAPTURE_DEBUG"):
                import traceback
                traceback.print_exception(e)
            first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
            cap.count_unmodelled(f"torch.compile predicted as eager (Dynamo on meta tensors: {first})", SOURCE)
        finally:
            _push(modes)
        return eager(*args, **kwargs)
    return call


_MODELLED_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(cap, model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
            disable=False):
    """torch.compile's stand-in: Inductor as on the GPU where the capture can run it, else eager (said)."""
    if model is None:
        return lambda fn: compile(cap, fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                  options=options, disable=disable)
    if disable:
        return model
    if backend != "inductor" or not available():
        why = "no Triton or fakecuda here" if backend == "inductor" else f"backend {backend!r}"
        cap.count_unmodelled(f"torch.compile ({why}: predicted as eager)", SOURCE)
        return model
    _install(cap)
    patches = {}
    if mode not in _MODELLED_MODES:
        cap.count_unmodelled(f"torch.compile mode {mode!r} (unknown: predicted as the default mode)", SOURCE)
    if mode in _MODELLED_MODES and mode:
        patches.update(torch._inductor.list_mode_options(mode))  # max_autotune, coordinate_descent_tuning, ...
    if options:
        patches.update(options)
    if patches.get("max_autotune") or patches.get("max_autotune_gemm"):
        max_autotune.install(cap, _CudaOnMeta)  # its benchmarks' memory (max_autotune.py)
    if patches.get("triton.cudagraphs"):
        cudagraphs.install(cap)  # CUDA graphs: the cudagraph trees' memory (cudagraphs.py)
    compiled = _orig_compile(model, backend=functools.partial(_backend, cap, patches), fullgraph=fullgraph,
                             dynamic=dynamic)
    if isinstance(compiled, torch.nn.Module):
        object.__setattr__(compiled, "forward", _outside_modes(cap, compiled.forward, model.forward))
        return compiled
    return _outside_modes(cap, compiled, model)
