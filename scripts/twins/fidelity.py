#!/usr/bin/env python3
"""PyTorch twin of oomlab's allocator-fidelity details (issue 7): what PyTorch 2.11 does on a real GPU.

    python3 scripts/twins/fidelity.py [--json OUT]

Every probe runs in a fresh process (environment variables are read once, and CUDA initialisation is part of
what is measured). It records, as one JSON object:
  device          mem_get_info() and get_device_properties().total_memory right after torch.cuda.init()
  context         what a CUDA context holds: total - free right after init (no tensor yet) and after a first
                  tensor (minus what the allocator reserved), and NVML's figure for this process at both points
  oom_plain       the OOM of a request larger than the device (100 GiB), no cap
  oom_capped      set_per_process_memory_fraction((1 << 30) / total): the cap (int(fraction * total)), whether
                  torch.empty(1 << 30, dtype=uint8) OOMs, and the message
  empty_cache     num_sync_all_streams after torch.cuda.empty_cache() before any allocation: in a fresh
                  process, after torch.cuda.init(), and after set_per_process_memory_fraction()
  large_segment   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,large_segment_size_mb:21, first allocation of
                  30 MiB: exception type and text (then a 1 MiB one, and large_segment_size_mb:21 alone)
  aliases         release_lock_on_hipmalloc / pinned_use_hip_host_register through
                  torch.cuda.memory._set_allocator_settings and through the environment; an unknown key's error
  env             which of PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF PyTorch applies
                  (expandable_segments on or off, seen in the segments) and what it writes to stderr; and what an
                  unknown key in PYTORCH_CUDA_ALLOC_CONF does (2.11 on the H100: the process dies, SIGSEGV)
"""
import ctypes
import json
import os
import subprocess
import sys

MiB = 1 << 20
GiB = 1 << 30
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "OOMLAB_ALLOC_CONF")


class NvmlProc(ctypes.Structure):  # nvmlProcessInfo_v1_t: what the unversioned symbol fills
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def nvml_self():
    """NVML's usedGpuMemory for this process on GPU 0, every compute process it lists, or None without NVML."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        return None
    dev = ctypes.c_void_p()
    if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) != 0:
        return None
    n = ctypes.c_uint(64)
    procs = (NvmlProc * 64)()
    r = lib.nvmlDeviceGetComputeRunningProcesses(dev, ctypes.byref(n), procs)
    if r != 0:
        return {"error": r}
    me = os.getpid()
    listed = [{"pid": procs[i].pid, "used": procs[i].usedGpuMemory, "self": procs[i].pid == me}
              for i in range(n.value)]
    mine = [p["used"] for p in listed if p["self"]]
    return {"self_used": mine[0] if mine else None, "processes": listed}


def stats(torch, keys=("num_sync_all_streams", "num_device_alloc", "num_ooms", "reserved_bytes.all.current",
                       "segment.all.current", "allocated_bytes.all.current")):
    s = torch.cuda.memory_stats()
    return {k: s.get(k) for k in keys}


def probe_device():
    import torch
    torch.cuda.init()
    free0, total0 = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0)
    nv0 = nvml_self()
    x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    free1, total1 = torch.cuda.mem_get_info()
    reserved1 = torch.cuda.memory_reserved()
    nv1 = nvml_self()
    del x
    plain = {"request": 100 * GiB}
    try:
        y = torch.empty(100 * GiB, dtype=torch.uint8, device="cuda")
        del y
        plain["outcome"] = "ok"
    except torch.OutOfMemoryError as e:
        plain.update(outcome="oom", type=type(e).__name__, message=str(e))
    free2, _ = torch.cuda.mem_get_info()
    plain["mem_get_info_free_after"] = free2
    plain["reserved_after"] = torch.cuda.memory_reserved()
    plain["nvml_after"] = nvml_self()
    return {
        "torch": torch.__version__,
        "name": torch.cuda.get_device_name(0),
        "total_memory": props.total_memory,
        "mem_get_info": {"free": free0, "total": total0},
        "context": {
            "after_init": {"total_minus_free": total0 - free0, "nvml": nv0},
            "after_first_tensor": {"total_minus_free": total1 - free1, "reserved": reserved1,
                                   "total_minus_free_minus_reserved": total1 - free1 - reserved1, "nvml": nv1},
        },
        "oom_plain": plain,
    }


def probe_capped():
    import torch
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    budget = 1 << 30
    fraction = budget / total
    torch.cuda.set_per_process_memory_fraction(fraction)
    r = {"budget": budget, "fraction": fraction, "allowed": int(fraction * total), "request": 1 << 30}
    try:
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        del x
        r["outcome"] = "ok"
    except torch.OutOfMemoryError as e:
        r.update(outcome="oom", type=type(e).__name__, message=str(e))
    r["stats_after"] = stats(torch)
    r["mem_get_info_free_after"] = torch.cuda.mem_get_info()[0]
    r["nvml_after"] = nvml_self()
    try:
        y = torch.empty((1 << 30) - 2 * MiB, dtype=torch.uint8, device="cuda")  # 1022 MiB fits under the cap
        r["just_under_outcome"] = "ok"
        del y
    except torch.OutOfMemoryError as e:
        r.update(just_under_outcome="oom", just_under_message=str(e))
    return r


def probe_empty_cache(mode):
    import torch
    if mode == "after_init":
        torch.cuda.init()
    elif mode == "after_fraction":
        torch.cuda.set_per_process_memory_fraction(0.5)
    before_init = torch.cuda.is_initialized()
    torch.cuda.empty_cache()
    x = torch.empty(1024, dtype=torch.uint8, device="cuda")
    s = stats(torch)
    del x
    return {"mode": mode, "initialized_at_empty_cache": before_init, "stats_after_first_alloc": s}


def probe_alloc(req):
    """The first allocation of req bytes under the environment's settings: outcome, exception, counters."""
    import torch
    r = {"request": req, "env": {k: os.environ.get(k) for k in ENV_VARS if k in os.environ}}
    try:
        x = torch.empty(req, dtype=torch.uint8, device="cuda")
        r["outcome"] = "ok"
        r["stats"] = stats(torch)
        segs = torch.cuda.memory._snapshot()["segments"]
        r["segments"] = [{"size": s["total_size"], "is_expandable": s.get("is_expandable")} for s in segs]
        del x
    except Exception as e:  # the type is the point
        r.update(outcome="error", type=type(e).__module__ + "." + type(e).__qualname__, message=str(e))
        try:
            r["stats"] = stats(torch)
        except Exception as e2:
            r["stats_error"] = str(e2)
    try:
        r["allocator_settings"] = torch.cuda.memory._snapshot()["allocator_settings"].get("PYTORCH_CUDA_ALLOC_CONF")
    except Exception as e:
        r["allocator_settings_error"] = str(e)
    return r


def probe_then_small():
    r = probe_alloc(30 * MiB)
    import torch
    try:
        x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        r["then_1MiB"] = {"outcome": "ok", "stats": stats(torch)}
        del x
    except Exception as e:
        r["then_1MiB"] = {"outcome": "error", "type": type(e).__qualname__, "message": str(e)}
    return r


def probe_settings():
    import torch
    out = {}
    for s in ("release_lock_on_hipmalloc:True", "pinned_use_hip_host_register:True",
              "release_lock_on_cudamalloc:True", "pinned_use_cuda_host_register:False", "bogus_key:1"):
        try:
            torch.cuda.memory._set_allocator_settings(s)
            out[s] = {"accepted": True}
        except Exception as e:
            out[s] = {"accepted": False, "type": type(e).__qualname__, "message": str(e)}
    return out


PROBES = {
    "device": (probe_device, {}),
    "capped": (probe_capped, {}),
    "empty_cache_fresh": (lambda: probe_empty_cache("fresh"), {}),
    "empty_cache_after_init": (lambda: probe_empty_cache("after_init"), {}),
    "empty_cache_after_fraction": (lambda: probe_empty_cache("after_fraction"), {}),
    "large_segment_21_expandable": (probe_then_small,
                                    {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,large_segment_size_mb:21"}),
    "large_segment_21_plain": (lambda: probe_alloc(3 * MiB // 2),
                               {"PYTORCH_CUDA_ALLOC_CONF": "large_segment_size_mb:21"}),
    "aliases_set_allocator_settings": (probe_settings, {}),
    "aliases_env": (lambda: probe_alloc(30 * MiB),
                    {"PYTORCH_CUDA_ALLOC_CONF": "release_lock_on_hipmalloc:True,pinned_use_hip_host_register:False"}),
    "unknown_key_env": (lambda: probe_alloc(30 * MiB), {"PYTORCH_CUDA_ALLOC_CONF": "bogus_key:1"}),
    "env_cuda_over_alloc": (lambda: probe_alloc(30 * MiB), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                                            "PYTORCH_ALLOC_CONF": "expandable_segments:False"}),
    "env_alloc_only": (lambda: probe_alloc(30 * MiB), {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}),
    "env_hip_only": (lambda: probe_alloc(30 * MiB), {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}),
}


def run_probe(name):
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(PROBES[name][1])
    env["PYTHONUNBUFFERED"] = "1"
    p = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True, text=True,
                       timeout=120)
    lines = p.stdout.strip().splitlines()
    try:
        r = json.loads(lines[-1])
    except (IndexError, ValueError):
        r = {"child_failed": True, "stdout": p.stdout[-2000:]}
    r["returncode"] = p.returncode
    r["stderr"] = p.stderr[-3000:]
    return r


def main(argv):
    if len(argv) == 2 and argv[0] == "--child":
        print(json.dumps(PROBES[argv[1]][0]()))
        return 0
    out = None
    if len(argv) == 2 and argv[0] == "--json":
        out = argv[1]
    elif argv:
        print(__doc__, file=sys.stderr)
        return 2
    results = {}
    for name in PROBES:
        results[name] = run_probe(name)
        print(name, json.dumps(results[name])[:600], flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
