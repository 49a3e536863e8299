"""A Triton kernel's configs as the GPU's autotuner ends up with them: compiled for the target of --gpu on the host
(Triton's own compiler and its bundled ptxas; no device), and what the driver would report on loading each one
(registers, spills) read from its cubin with the bundled cuobjdump.

The count matters to memory: a kernel launched with more than one config is benchmarked at its first run, each
config with its flush buffer and clones (compiled.py _Kernel). Inductor's CachingAutotuner decides the count after
loading (triton_heuristics.py): precompile drops configs that do not compile (_precompile_worker),
_dynamic_scale_rblock adds a reduction config with half the R0_BLOCK where the loaded kernel's registers limit its
occupancy, and bench skips a config that spills more than spill_threshold registers. Those methods run here
unchanged on a real CachingAutotuner, with the load replaced by the cubin's figures.

The compiled kernels are cached under build/ (TRITON_CACHE_DIR, set by the capture: triton_cache_dir()).
"""
import os
import re
import subprocess

SOURCE = "torch/_inductor/runtime/triton_heuristics.py CachingAutotuner (precompile, _dynamic_scale_rblock, bench)"


def triton_cache_dir():
    from .. import ext
    return os.path.join(ext.build_dir(), "triton-cache")


def _usage(cubin):
    """(registers, spills) of a cubin's one kernel, as cuFuncGetAttribute reports them to Triton's loader
    (NUM_REGS; LOCAL_SIZE_BYTES / 4: backends/nvidia/driver.c load_binary)."""
    import tempfile

    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    reg = re.search(r"\bREG:(\d+)", out)
    local = re.search(r"\bLOCAL:(\d+)", out)
    if not reg or not local:
        raise RuntimeError("cuobjdump gave no resource usage")
    return int(reg.group(1)), int(local.group(1)) // 4


def _cubin(kernel):
    raw = getattr(kernel, "cubin_raw", None)  # the static launcher's kernel (static_triton_launcher.py)
    if raw is None and getattr(kernel, "cubin_path", None):
        with open(kernel.cubin_path, "rb") as f:
            raw = f.read()
    if raw is None:
        raw = kernel.asm["cubin"]  # triton's CompiledKernel
    return raw


class _Launcher:
    """What _dynamic_scale_rblock and bench read of a loaded config."""

    def __init__(self, config, n_regs, n_spills):
        self.config, self.n_regs, self.n_spills = config, n_regs, n_spills


def needs_compile(size_hints, configs, heuristic_type, inductor_meta, device_props):
    """Whether the config count could differ from the heuristics': several configs (one may fail or spill), or a
    reduction _dynamic_scale_rblock could split (an R block over 64, and more blocks than the GPU has SMs: at
    least one block fits an SM, so fewer never split)."""
    if len(configs) > 1:
        return True
    from torch._inductor.runtime.triton_heuristics import HeuristicType
    if heuristic_type != HeuristicType.REDUCTION or not inductor_meta.get("dynamic_scale_rblock", True) \
            or inductor_meta.get("persistent_reduction") or (device_props.major or 0) < 8 or not size_hints:
        return False
    for c in configs:
        r = 1
        for k, v in c.kwargs.items():
            if k.startswith("R"):
                r *= v
        x = c.kwargs.get("XBLOCK", 1)
        if r > 64 and (size_hints.get("x", 1) + x - 1) // x > (device_props.multi_processor_count or 0):
            return True
    return False


def launchers(autotuner):
    """The configs a real CachingAutotuner keeps after compiling and 'loading' each one here: a list of _Launcher
    (config, registers, spills). Raises where Triton cannot compile for the target on the host."""
    def make_launchers():
        if len(autotuner.launchers) == len(autotuner.compile_results):
            return
        out = []
        for result in autotuner.compile_results:
            n_regs, n_spills = _usage(_cubin(result.kernel))
            result.kernel.n_regs, result.kernel.n_spills = n_regs, n_spills  # what the load sets
            out.append(_Launcher(result.config, n_regs, n_spills))
        autotuner.launchers = out
    autotuner._make_launchers = make_launchers
    autotuner._precompile_worker()
    make_launchers()
    autotuner._dynamic_scale_rblock()
    return list(autotuner.launchers)


def timed_launchers(cap, autotuner):
    """launchers(), counted in cap.state["triton"]: kernels compiled and the seconds they took (the report's
    compile line; a kernel already in the cache takes milliseconds)."""
    import time
    t0 = time.perf_counter()
    try:
        return launchers(autotuner)
    finally:
        st = cap.state.setdefault("triton", {"kernels": 0, "seconds": 0.0})
        st["kernels"] += 1
        st["seconds"] += time.perf_counter() - t0


def benched(autotuner, loaded):
    """How many configs bench() times: none for a single config, and a config that spills over the threshold is
    skipped before it allocates anything (bench: 'Skip config ... because of register spilling')."""
    if len(loaded) <= 1:
        return 0
    threshold = autotuner.inductor_meta.get("spill_threshold", 16)
    return sum(1 for launcher in loaded if autotuner.custom_kernel or launcher.n_spills is None
               or launcher.n_spills <= threshold)
