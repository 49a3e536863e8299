#!/usr/bin/env python3
"""Where does the CUDA driver put cudaMalloc'd memory? Record the addresses of scripted cuMemAlloc/cuMemFree
(and cuMemAddressReserve) sequences, each in a fresh process (run on a GPU; needs libcuda, PyTorch only for the
"torch" flavour).

    python3 scripts/twins/addr_probe.py OUT.json [-j N] [NAME ...]

cudaMalloc is cuMemAlloc_v2 in the primary context, so the addresses are the ones PyTorch's caching allocator
gets. Each experiment is a list of ops:
    ["a", id, bytes]    cuMemAlloc_v2      -> its address
    ["f", id]           cuMemFree_v2
    ["r", id, bytes]    cuMemAddressReserve(bytes, alignment 0, addr 0) -> its address
    ["R", id]           cuMemAddressFree
    ["k", id]           a kernel launch (PyTorch's fill_ on a small tensor, made by torch.empty at the first "k",
                        which needs no kernel: its 2 MiB segment's address is recorded as the op's address)
    ["K", id]           another kernel (torch.randn into that tensor: cuRAND's)
The flavour "clean" makes the primary context current with nothing else loaded; "torch" first runs
torch.cuda.init() and a small tensor op, as a PyTorch program would have before its first allocations (the
tensor is PyTorch's own cudaMalloc, outside the script: its segment's address and size are recorded too);
"torch0" only runs torch.cuda.init() and makes the primary context current, as a PyTorch program has before its
first allocation.

OUT.json: {"driver": ..., "experiments": [{"name", "flavour", "ops": [[op, id, bytes, addr], ...]}]}; addr is
null for frees and for a failed call (then "err" holds the CUresult).
The random experiments ("rand_*") draw PyTorch-like segment sizes (2 MiB, 20 MiB, 2 MiB multiples up to
300 MiB, a few GiB-sized) and free random live ones; the seeds make them reproducible.
"""
import ctypes
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

MiB = 1 << 20
GiB = 1 << 30


def _seq(*sizes):
    return [["a", i, s] for i, s in enumerate(sizes)]


def experiments():
    """name -> (flavour, ops)"""
    ex = {}
    # one of each size in a fresh process: alignment and region rounding per size
    sizes = [2 * MiB, 4 * MiB, 6 * MiB, 8 * MiB, 10 * MiB, 12 * MiB, 14 * MiB, 16 * MiB, 18 * MiB, 20 * MiB,
             22 * MiB, 24 * MiB, 26 * MiB, 28 * MiB, 30 * MiB, 32 * MiB, 34 * MiB, 40 * MiB, 62 * MiB, 64 * MiB,
             66 * MiB, 96 * MiB, 126 * MiB, 128 * MiB, 130 * MiB, 200 * MiB, 256 * MiB, 258 * MiB, 300 * MiB,
             510 * MiB, 512 * MiB, 514 * MiB, 1 * GiB, 1 * GiB + 2 * MiB, 2 * GiB, 4 * GiB]
    for s in sizes:
        ex[f"first_{s // MiB}m"] = ("clean", [["a", 0, s], ["a", 1, 2 * MiB], ["a", 2, 20 * MiB], ["a", 3, s]])
    # sub-2 MiB requests (the driver's own sub-allocation)
    ex["tiny"] = ("clean", _seq(512, 4096, 65536, MiB, MiB + 1, 2 * MiB - 1, 512, 2 * MiB, 512, 3 * MiB))
    # a stack of equal sizes, then frees in the middle
    for s in (2 * MiB, 20 * MiB, 64 * MiB, 300 * MiB):
        ops = _seq(*([s] * 12))
        ops += [["f", 5], ["a", 100, s], ["f", 3], ["f", 4], ["a", 101, s], ["a", 102, s], ["a", 103, s],
                ["f", 8], ["f", 10], ["a", 104, s], ["a", 105, s], ["a", 106, s]]
        ex[f"stack_{s // MiB}m"] = ("clean", ops)
    # most recently freed or lowest? free A then B (same size), allocate twice
    for order in ("lowfirst", "highfirst"):
        ops = _seq(*([64 * MiB] * 6))
        ops += [["f", 1], ["f", 4]] if order == "lowfirst" else [["f", 4], ["f", 1]]
        ops += [["a", 10, 64 * MiB], ["a", 11, 64 * MiB], ["a", 12, 64 * MiB]]
        ex[f"reuse_{order}"] = ("clean", ops)
    # a gap of 64 MiB asked for by smaller pieces; a released region reused by smaller and larger requests
    ex["split_gap"] = ("clean", _seq(64 * MiB, 64 * MiB, 64 * MiB) + [["f", 1], ["a", 10, 20 * MiB], ["a", 11, 2 * MiB],
                                                                    ["a", 12, 40 * MiB], ["a", 13, 20 * MiB]])
    ex["region_release"] = ("clean", _seq(20 * MiB, 100 * MiB, 20 * MiB) + [
        ["f", 1], ["a", 10, 2 * MiB], ["a", 11, 120 * MiB], ["a", 12, 80 * MiB], ["f", 0], ["f", 2],
        ["a", 13, 20 * MiB], ["a", 14, 20 * MiB], ["a", 15, 20 * MiB]])
    # growth: 2 MiB segments filling regions, interleaved with 20 MiB ones
    ops = []
    for i in range(60):
        ops.append(["a", i, 2 * MiB if i % 3 else 20 * MiB])
    ex["interleave"] = ("clean", ops)
    # VMM reservations among cudaMalloc segments (expandable segments reserve ~1.125x the device)
    ex["vmm"] = ("clean", [["a", 0, 20 * MiB], ["r", 1, 95651758080], ["a", 2, 20 * MiB], ["r", 3, 10 * GiB],
                           ["r", 4, 2 * MiB], ["R", 3], ["r", 5, 4 * GiB], ["a", 6, 2 * GiB], ["R", 1],
                           ["r", 7, 95651758080], ["a", 8, 20 * MiB]])
    # the same sequences after PyTorch's initialisation
    for name in ("stack_20m", "interleave", "region_release", "first_2m", "first_20m", "first_300m"):
        ex["torch_" + name] = ("torch", ex[name][1])
    # random PyTorch-like sequences
    for seed in range(24):
        ex[f"rand_{seed:02d}"] = ("clean" if seed < 20 else "torch", rand_ops(seed))
    # the first kernel launch: what the driver gives back and takes
    m20 = 20 * MiB
    ex["k_basic"] = ("torch0", _seq(m20, 2 * MiB, m20, m20) + [["k", 50]] + [["a", 10 + i, m20] for i in range(8)]
                     + [["a", 20, 2 * MiB], ["a", 21, 64 * MiB], ["a", 22, 64 * MiB], ["a", 23, 300 * MiB]])
    ex["k_late"] = ("torch0", _seq(*([m20] * 10)) + [["f", 3], ["f", 4], ["k", 50]]
                    + [["a", 10 + i, m20] for i in range(10)])
    ex["k_twice"] = ("torch0", _seq(m20, m20) + [["k", 50]] + [["a", 10 + i, m20] for i in range(3)] + [["K", 51]]
                     + [["a", 20 + i, m20] for i in range(3)] + [["a", 30, 200 * MiB], ["a", 31, 200 * MiB]])
    ex["k_small"] = ("torch0", [["a", 0, 2 * MiB], ["a", 1, m20], ["k", 50], ["f", 0], ["a", 2, 2 * MiB],
                                ["a", 3, 2 * MiB], ["a", 4, 2 * MiB], ["a", 5, 40 * MiB], ["a", 6, 2 * MiB]])
    ex["k_first"] = ("torch0", [["k", 50]] + _seq(2 * MiB, m20, 2 * MiB, m20, 2 * MiB, 100 * MiB, 2 * MiB))
    ex["k_release"] = ("torch0", [["k", 50]] + _seq(*([100 * MiB] * 6)) + [["f", i] for i in range(6)]
                       + [["a", 10 + i, 60 * MiB] for i in range(8)])
    for seed in range(4):
        ops = rand_ops(40 + seed)
        ops.insert(25 + 10 * seed, ["k", 999])
        ex[f"rand_k{seed}"] = ("torch0", ops)
    return ex


def rand_ops(seed):
    rng = random.Random(1000 + seed)
    nops = 300
    live, ops, nid = [], [], 0
    big = seed % 4 == 3  # every fourth has GiB-sized segments too
    for _ in range(nops):
        if live and (rng.random() < 0.42 or len(live) > 40):
            i = live.pop(rng.randrange(len(live)))
            ops.append(["f", i])
            continue
        r = rng.random()
        if r < 0.35:
            s = 2 * MiB
        elif r < 0.6:
            s = 20 * MiB
        elif r < 0.9:
            s = rng.randint(5, 150) * 2 * MiB
        elif r < 0.97 or not big:
            s = rng.randint(150, 400) * 2 * MiB
        else:
            s = rng.randint(500, 1600) * 2 * MiB
        ops.append(["a", nid, s])
        live.append(nid)
        nid += 1
    return ops


# ---- the child: run one experiment ----

def child(name):
    flavour, ops = experiments()[name]
    pre = []
    torch, tens = None, []
    if flavour == "torch0":
        import torch
        torch.cuda.init()
    if flavour == "torch":
        import torch
        torch.cuda.init()
        t = torch.ones(1024, device="cuda") * 2  # a kernel, PyTorch's first segment
        torch.cuda.synchronize()
        seg = torch.cuda.memory_snapshot()[0]
        pre.append({"torch_segment": seg["address"], "size": seg["total_size"]})
    cu = ctypes.CDLL("libcuda.so.1")
    P = ctypes.c_uint64
    cu.cuInit.argtypes = [ctypes.c_uint]
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(P), ctypes.c_size_t]
    cu.cuMemFree_v2.argtypes = [P]
    cu.cuMemAddressReserve.argtypes = [ctypes.POINTER(P), ctypes.c_size_t, ctypes.c_size_t, P, ctypes.c_ulonglong]
    cu.cuMemAddressFree.argtypes = [P, ctypes.c_size_t]
    if flavour in ("clean", "torch0"):  # torch.cuda.init() makes no context: the first cudaMalloc would
        dev = ctypes.c_int()
        ctx = ctypes.c_void_p()
        assert cu.cuInit(0) == 0
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
    addr, size, out = {}, {}, []
    for op in ops:
        kind, i = op[0], op[1]
        p = P(0)
        if kind == "a":
            err = cu.cuMemAlloc_v2(ctypes.byref(p), op[2])
            addr[i], size[i] = p.value, op[2]
            out.append([kind, i, op[2], p.value if err == 0 else None] + ([] if err == 0 else [err]))
        elif kind == "r":
            err = cu.cuMemAddressReserve(ctypes.byref(p), op[2], 0, 0, 0)
            addr[i], size[i] = p.value, op[2]
            out.append([kind, i, op[2], p.value if err == 0 else None] + ([] if err == 0 else [err]))
        elif kind == "f":
            err = cu.cuMemFree_v2(addr[i])
            out.append([kind, i, size[i], None] + ([] if err == 0 else [err]))
        elif kind == "R":
            err = cu.cuMemAddressFree(addr[i], size[i])
            out.append([kind, i, size[i], None] + ([] if err == 0 else [err]))
        elif kind in ("k", "K"):
            new = None
            if not tens:
                tens.append(torch.empty(1024, device="cuda"))
                new = torch.cuda.memory_snapshot()[0]["address"]
            if kind == "k":
                tens[0].fill_(1.0)
            else:
                torch.randn(1024, device="cuda", out=tens[0])
            torch.cuda.synchronize()
            out.append([kind, i, 0, new])
    json.dump({"name": name, "flavour": flavour, "pre": pre, "ops": out}, sys.stdout, separators=(",", ":"))


def main(argv):
    if len(argv) >= 2 and argv[0] == "--child":
        child(argv[1])
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    outpath, jobs, names = argv[0], 8, []
    rest = argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "-j":
            jobs = int(rest.pop(0))
        else:
            names.append(a)
    names = names or list(experiments())

    def run(name):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name], capture_output=True,
                           text=True)
        if p.returncode != 0:
            print(f"addr_probe: {name} failed ({p.returncode}): {p.stderr[-2000:]}", file=sys.stderr)
            return None
        return json.loads(p.stdout)

    with ThreadPoolExecutor(jobs) as pool:
        results = [r for r in pool.map(run, names) if r is not None]
    drv = ""
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    with open(outpath, "w") as f:
        json.dump({"driver": drv, "experiments": results}, f, separators=(",", ":"))
        f.write("\n")
    print(f"addr_probe: {len(results)}/{len(names)} experiments -> {outpath}")
    return 0 if len(results) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
