"""max-autotune under the capture: torch.compile mode="max-autotune" or "max-autotune-no-cudagraphs" (or
options={"max_autotune": True}), with the device memory its benchmarks make on the GPU and none of them timed.

Inductor lowers a matmul (or a convolution) to a choice between ATen's kernel and Triton templates, and picks one
by timing each on random inputs during the compile (torch/_inductor/select_algorithm.py AlgorithmSelectorCache).
What that costs the GPU's caching allocator is the same whatever the timings say, and is made here on meta and
recorded:
- `get_inputs` makes each distinct input and the output with `rand_strided` on the device (benchmark_example_value),
  held while every choice is benchmarked;
- each benchmark is `benchmarker.benchmark_gpu` (runtime/benchmarking.py): a warm-up call, then a flush buffer of
  the L2's size while the timed calls run, freed at the end; an ATen choice's calls are its extern op (here on
  meta, with cuBLAS's workspace taken as on the GPU); a template's kernel is neither compiled nor run;
- the scheduler's epilogue (and prologue) fusion benchmark (scheduler.py speedup_by_fusion with
  benchmark_epilogue_fusion) times the node a template would fuse with on its own first: its benchmark module's
  `get_args()` are made on the device, one call on clones of its mutated arguments makes its first-run autotuning,
  then benchmark_gpu on fresh clones (codegen/triton.py benchmark_codegened_module); a module's timing is cached
  beside its source (`.kernel_perf`), so the same source is benchmarked once;
- every pointwise and reduction kernel is tuned by coordinate descent at its first launch (the mode sets
  coordinate_descent_tuning: triton_heuristics.py coordinate_descent_tuning): one benchmark more, on clones of its
  mutated arguments (compiled.py _Kernel).
The choice itself is timing, taken as the capture's --timed-choices says: "first", ATen's kernel everywhere (the
templates timed slower, so no fused candidate is compiled or benchmarked); "other", the Triton templates (timed
faster than ATen's kernels and than a template beside its epilogue, so each fusion the scheduler benchmarks is
taken, its fused module benchmarked as above). oomlab predict runs both and gives the range.
The benchmarks' inputs and arguments are freed here when their last reference goes; on the GPU some are in
reference cycles and Python's garbage collector frees them later, at a point set by the interpreter's own
allocations (an H200 recording's frees inside sympy and Triton code: docs/parity.md, "Compiled training"). So
they are a range: the upper trace holds each until the end of its graph's compile (compiled.py `_backend`).
"""
import functools
import re

import torch
import torch.utils._python_dispatch

SOURCE = "torch/_inductor/select_algorithm.py AlgorithmSelectorCache; scheduler.py speedup_by_fusion"
REPEAT = "torch.compile max-autotune selections benchmarked again (a template Triton refuses for its shared " \
         "memory fails at its precompile where that runs in Inductor's process, not in the compile workers: " \
         "timing, async_compile.py use_process_pool; the upper end repeats them)"
HELD = "torch.compile max-autotune benchmark tensors, freed by Python's garbage collector on the GPU (the upper " \
       "end holds each to the end of its graph's compile; the order of those frees sets the segments' layout, " \
       "and oomlab predict replays orders between the two)"
# the timings the stand-ins report. "first": ATen's choice the fastest, a template slower than ATen plus the node it
# would fuse with (so no fused candidate is compiled or benchmarked: scheduler.py speedup_by_fusion); "other": a
# template faster than ATen, and a fused module faster than a template and its epilogue apart (the fusion taken)
ATEN = 1.0
TEMPLATE = {"first": 2.0, "other": 0.5}
FUSED_NODE = 0.5

_installed = False


def install(cap, on_meta):
    """The benchmarks' stand-ins, for the whole capture (a compile without max-autotune never reaches them).
    on_meta(cap): the context in which device factories make recorded meta tensors (compiled._CudaOnMeta)."""
    global _installed
    if _installed:
        return
    _installed = True
    from torch._inductor import config
    from torch._inductor import select_algorithm as sa
    from torch._inductor.codegen import triton as triton_codegen
    from torch._inductor.runtime import benchmarking

    from .. import gpus
    from . import compiled

    # the timings here are stand-ins: Inductor's tables of them (stderr) are not printed
    sa.PRINT_AUTOTUNE = False
    config.max_autotune_report_choices_stats = False
    l2 = cap.gpu.get("l2_bytes", 0)
    template_ms = TEMPLATE[cap.choices]

    def flush_buffer():  # benchmark_gpu's L2 flush: a quarter of the L2 in int (triton#840)
        return torch.empty(l2 // 4, dtype=torch.int, device="meta")

    def benchmark_gpu(_callable, *args, **kwargs):
        # the warm-up call, the flush buffer, the timed calls (the same blocks as the warm-up's: one call)
        with _Bracketed(cap):
            _callable()
        buffer = flush_buffer()
        with _Bracketed(cap):
            _callable()
        del buffer
        return ATEN
    benchmarking.benchmarker.benchmark_gpu = benchmark_gpu

    def recorded(fn):
        def call(*args, **kwargs):
            was = cap.ext.pause(False)
            try:
                with on_meta(cap):
                    return fn(*args, **kwargs)
            finally:
                cap.ext.pause(was)
        return call

    cls = sa.AlgorithmSelectorCache
    # templates are compiled on the GPU host before they are timed (no device memory): not compiled here, but
    # those Triton refuses for their shared memory fail as on the GPU (make_precompile_fn's structure kept: its
    # cache lookup, its per-key precompile function, which marks the first selection's choices only)
    smem = gpus.smem_per_block_optin(cap.gpu)
    precompiled = {}

    def make_precompile_fn(self, choices, name, inputs_key, precompilation_timeout_seconds=3600):
        if precompilation_timeout_seconds is None or precompilation_timeout_seconds <= 0:
            return _no_op
        timings = self.lookup(choices, name, inputs_key, benchmark=None)
        if timings and len(timings) == len(choices):
            return _no_op
        key = sa.create_precompile_key(name, inputs_key, choices)
        if key in precompiled:
            return precompiled[key]

        @functools.cache
        def wait_on_futures():
            for c in choices:
                if _over_smem(c, smem):
                    c.mark_failed()
            return {}
        precompiled[key] = wait_on_futures
        return wait_on_futures
    cls.make_precompile_fn = make_precompile_fn
    get_inputs = cls.get_inputs.__func__

    def held_inputs(cls, *args, **kwargs):
        autotune_args = get_inputs(cls, *args, **kwargs)
        for t in _tensors(autotune_args):
            cap.hold_in_upper(t, HELD, SOURCE)
        return autotune_args
    cls.get_inputs = classmethod(held_inputs)
    in_process = recorded(cls.benchmark_in_current_process.__func__)

    def benchmark_in_current_process(cls, choices, *args, **kwargs):
        if any(_over_smem(c, smem) and not c.failed for c in choices):
            # a repeat of a selection whose refused template the first one pruned: its inputs key missed the
            # timings cache for that choice; made on the GPU only where the precompile ran in-process
            with cap.upper_only(REPEAT, SOURCE):
                return in_process(cls, choices, *args, **kwargs)
        return in_process(cls, choices, *args, **kwargs)
    cls.benchmark_in_current_process = classmethod(benchmark_in_current_process)
    choice_bench = cls.benchmark_choice.__func__

    def benchmark_choice(cls, choice, autotune_args):
        if cls._is_extern(choice):
            return choice_bench(cls, choice, autotune_args)
        inputs, output = autotune_args.get_benchmark_tensors(False).unpack()
        output.zero_()
        if _over_smem(choice, smem):  # its compile raises before benchmark_gpu: timed inf (benchmark_choices)
            return float("inf")
        flush_buffer()  # its benchmark_gpu: the template's kernel is not run here
        return template_ms
    cls.benchmark_choice = classmethod(benchmark_choice)
    # each selection among several choices is a timed choice (counted once, where its timings are made)
    do_autotuning = cls.do_autotuning

    def counted(self, name, input_nodes, layout, input_gen_fns, inputs_key, choices, *args, **kwargs):
        compiled.timed_choice(cap, "max_autotune")
        return do_autotuning(self, name, input_nodes, layout, input_gen_fns, inputs_key, choices, *args, **kwargs)
    cls.do_autotuning = counted

    timed = {}

    def benchmark_codegened_module(self, mod, n_spills_threshold=8, node_names=None):
        path = mod.__file__
        if path in timed:  # its .kernel_perf: benchmarked once per source
            return timed[path], path
        with open(path) as f:
            kernel = compiled._kernel_of(cap, "triton_", f.read())
        if kernel is None:
            cap.count_unmodelled("torch.compile max-autotune fusion benchmark of a kernel whose heuristics did not "
                                 "run here (its allocations are not in the trace)", SOURCE)

        def clones(args):
            return kernel._clones(args, ()) if kernel is not None else []

        @recorded
        def run():
            args = mod.get_args()
            for t in args:
                cap.hold_in_upper(t, HELD, SOURCE)
            first = clones(args)
            if kernel is not None:
                kernel.run(*args)  # the first call: the kernel's own autotuning, on the clones
            del first
            benchmark_gpu(lambda: clones(args))
            if kernel is not None and kernel.mutated:
                benchmark_gpu(lambda: clones(args))  # the clones' own cost, subtracted from the timing
            del args
        run()
        timed[path] = FUSED_NODE
        return FUSED_NODE, path
    triton_codegen.TritonScheduling.benchmark_codegened_module = benchmark_codegened_module


_CONFIG = re.compile(r"\b(BLOCK_M|BLOCK_N|BLOCK_K|num_stages|ALLOW_TF32)=(\w+)")


def _no_op(*args, **kwargs):
    return {}


def _over_smem(choice, limit):
    """Whether Triton refuses a matmul template's config for its shared memory: an A and a B tile per pipeline
    buffer, num_stages buffers where the dot runs on tensor cores and num_stages - 1 for float32 without TF32 (the
    H200's refusals: docs/measurements/h200-2026-12-04-autotune, "out of resource ... Required")."""
    if not limit or not isinstance(choice, _template_caller()):
        return False
    cfg = dict(_CONFIG.findall(getattr(choice, "description", "") or ""))
    try:
        m, n, k, stages = (int(cfg[x]) for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"))
        size = choice.input_nodes[0].get_dtype().itemsize
    except (KeyError, ValueError, AttributeError, IndexError):
        return False
    buffers = stages - 1 if size == 4 and cfg.get("ALLOW_TF32") != "True" else stages
    return (m * k + k * n) * size * buffers > limit


def _template_caller():
    from torch._inductor.select_algorithm import TritonTemplateCaller
    return TritonTemplateCaller


def _tensors(x, depth=0):
    """The tensors of an AutotuneArgs (its BenchmarkTensors' inputs and output, the expected result)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y, depth + 1)
    elif depth < 2 and hasattr(x, "__dataclass_fields__"):
        for name in x.__dataclass_fields__:
            yield from _tensors(getattr(x, name, None), depth + 1)


class _Bracketed(torch.utils._python_dispatch.TorchDispatchMode):
    """Each op a benchmark runs allocates only its outputs, as its CUDA kernel does (recorder.RecordMode's bracket:
    a meta kernel's temporaries, an out= variant's result before its copy, are not device allocations)."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        x = self.cap.ext
        x.op_begin()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            x.op_end([])
