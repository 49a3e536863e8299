"""The GPUs a prediction can be made for: total memory, SM count, architecture, CUDA context.

Every figure says where it comes from ("sources"). "measured" figures were read on the lent GPU machine with
torch 2.11.0 (torch.cuda.get_device_properties, recorded in tests/data/*.stats.json as total_memory); the others
are from NVIDIA's datasheets / the CUDA programming guide's compute-capability tables, where cudaDeviceProp's
totalGlobalMem is the board memory less what the driver keeps (so they are the nominal figure, an upper bound).

context_bytes: the device memory a process's CUDA context holds outside PyTorch's allocator (module images,
the driver's heaps). It is not in memory_stats(); a budget given as the whole device must leave it out. No
measurement of it is in this repository yet: the figures are the commonly observed sizes for CUDA 12/13 with
PyTorch's kernels loaded lazily (CUDA_MODULE_LOADING=LAZY, the default), documented, not measured.
"""

MiB = 1 << 20

# name -> properties. l2_bytes: cudaDeviceProp.l2CacheSize (H200: measured, the 62,914,560-byte buffer Inductor's
# benchmarker sizes to it in docs/measurements/h200-2026-12-02-compiled; the others from the datasheets), for
# torch.compile's device properties (cuda_model.compiled). sm_count and arch feed the ATen reduction model (Reduce.cuh's setReduceConfig reads
# multiProcessorCount and maxThreadsPerMultiProcessor) and the SDPA backend choice (sdp_utils.cpp checks sm).
GPUS = {
    "H100-80GB": {
        "l2_bytes": 52_428_800,
        "total_memory": 85_017_493_504, "sm_count": 132, "arch": "sm_90", "max_threads_per_sm": 2048,
        "context_bytes": 536_870_912,
        "sources": {"total_memory": "measured (tests/data/*.stats.json, H100 80GB HBM3, torch 2.11.0)",
                    "sm_count": "measured (H100 SXM5: 132 SMs; harness/runtime/reduce_config.h ATEN_H100_PROPS)",
                    "arch": "measured (compute capability 9.0)",
                    "context_bytes": "documented estimate (about 500 MiB for a CUDA 12/13 context with lazy "
                                     "module loading); not measured here"}},
    "H200": {
        "l2_bytes": 62_914_560,
        "total_memory": 150_109_880_320, "sm_count": 132, "arch": "sm_90", "max_threads_per_sm": 2048,
        "context_bytes": 536_870_912,
        "sources": {"total_memory": "measured (tests/data/predict/vit.torch.json: NVIDIA H200, torch 2.11.0)",
                    "sm_count": "documentation (H200 SXM: 132 SMs)", "arch": "documentation (compute 9.0)",
                    "context_bytes": "documented estimate, as H100"}},
    "A100-40GB": {
        "l2_bytes": 41_943_040,
        "total_memory": 42_505_076_736, "sm_count": 108, "arch": "sm_80", "max_threads_per_sm": 2048,
        "context_bytes": 452_984_832,
        "sources": {"total_memory": "documentation (40 GB HBM2; torch reports total_memory=40536MB)",
                    "sm_count": "documentation (A100: 108 SMs)", "arch": "documentation (compute 8.0)",
                    "context_bytes": "documented estimate (about 430 MiB); not measured here"}},
    "A100-80GB": {
        "l2_bytes": 41_943_040,
        "total_memory": 85_197_848_576, "sm_count": 108, "arch": "sm_80", "max_threads_per_sm": 2048,
        "context_bytes": 452_984_832,
        "sources": {"total_memory": "documentation (80 GB HBM2e; torch reports total_memory=81251MB)",
                    "sm_count": "documentation (A100: 108 SMs)", "arch": "documentation (compute 8.0)",
                    "context_bytes": "documented estimate, as A100-40GB"}},
    "L4": {
        "total_memory": 23_569_891_328, "sm_count": 58, "arch": "sm_89", "max_threads_per_sm": 1536,
        "context_bytes": 377_487_360,
        "sources": {"total_memory": "documentation (24 GB GDDR6; torch reports total_memory=22478MB)",
                    "sm_count": "documentation (L4: 58 SMs)",
                    "arch": "documentation (compute 8.9; 1536 threads per SM)",
                    "context_bytes": "documented estimate (about 360 MiB); not measured here"}},
    "RTX-4090": {
        "total_memory": 25_393_364_992, "sm_count": 128, "arch": "sm_89", "max_threads_per_sm": 1536,
        "context_bytes": 377_487_360,
        "sources": {"total_memory": "documentation (24 GB GDDR6X; torch reports total_memory=24217MB)",
                    "sm_count": "documentation (RTX 4090: 128 SMs)",
                    "arch": "documentation (compute 8.9; 1536 threads per SM)",
                    "context_bytes": "documented estimate, as L4"}},
}
DEFAULT = "H100-80GB"
# Names users type for the same GPU.
ALIASES = {"H100": "H100-80GB", "H100-SXM": "H100-80GB", "A100": "A100-80GB", "4090": "RTX-4090",
           "RTX4090": "RTX-4090"}


def lookup(name):
    """The table entry (a dict with "name" added) for NAME or an alias of it, case-insensitive; None if unknown."""
    key = {k.lower(): k for k in GPUS}.get(name.lower())
    if key is None:
        alias = {k.lower(): v for k, v in ALIASES.items()}.get(name.lower())
        key = alias
    if key is None:
        return None
    return dict(GPUS[key], name=key)


def known():
    return ", ".join(GPUS)


def capability(gpu):
    """(major, minor) from "sm_90"."""
    digits = gpu["arch"][3:]
    return int(digits[:-1]), int(digits[-1])


# cudaDevAttrMaxSharedMemoryPerBlockOptin by compute capability (the CUDA C++ Programming Guide's table of
# technical specifications): what fakecuda.c answers, and the limit Triton's compile checks a kernel against
SMEM_OPTIN = {(9, 0): 232_448, (8, 0): 166_912, (8, 9): 101_376}


def smem_per_block_optin(gpu):
    return SMEM_OPTIN.get(capability(gpu), 0)


def table_text():
    lines = [f"{'GPU':<11} {'total memory':>16} {'SMs':>4} {'arch':>6} {'context':>12}"]
    for name, g in GPUS.items():
        lines.append(f"{name:<11} {g['total_memory']:>16,} {g['sm_count']:>4} {g['arch']:>6} "
                     f"{g['context_bytes']:>12,}")
    return "\n".join(lines)
