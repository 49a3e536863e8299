#!/usr/bin/env python3
"""Record PyTorch memory traces for `oomlab replay` parity tests (run on a GPU with PyTorch).

    python3 scripts/twins/record_traces.py OUTDIR [NAME ...]

Each trace runs in a fresh process, so PYTORCH_CUDA_ALLOC_CONF takes effect and every counter starts at zero.
History recording starts before the first CUDA allocation, with no stack context, so frames are empty.
For each NAME it writes:
    OUTDIR/NAME.trace.json   the _snapshot() dict, converted by scripts/snapshot2json.py --strip-frames
    OUTDIR/NAME.stats.json   {"memory_stats": torch.cuda.memory_stats(), "alloc_conf", "total_memory",
                              "fraction", "allowed", "torch", "device", "oom_messages"}

The "whatif_*" workloads are one deterministic program (torch.empty and del only, no cuBLAS, no OOM) recorded under
different configs: replaying whatif_default under another --alloc-conf must predict that config's stats.
"""
import json
import os
import pickle
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20

# name -> (PYTORCH_CUDA_ALLOC_CONF, per-process fraction of total memory or None, workload)
TRACES = {
    "train_mlp": ("", None, "train_mlp"),
    "resnet18": ("", None, "resnet18"),
    "oom_fraction": ("", 1.0 / 80, "fragment_oom"),
    "expandable_train": ("expandable_segments:True", None, "train_mlp"),
    "expandable_oom": ("expandable_segments:True", 1.0 / 80, "fragment_oom"),
    "max_split": ("max_split_size_mb:64", None, "mixed"),
    "roundup": ("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", None, "mixed"),
    "gc_threshold": ("garbage_collection_threshold:0.6", 1.0 / 40, "mixed"),
    "pressure": ("", 1.0 / 60, "mixed_pressure"),
    "whatif_default": ("", None, "whatif"),
    "whatif_expandable": ("expandable_segments:True", None, "whatif"),
    "whatif_max_split": ("max_split_size_mb:40", None, "whatif"),
    "whatif_roundup": ("roundup_power2_divisions:4", None, "whatif"),
    "whatif_gc": ("garbage_collection_threshold:0.5", 1.0 / 30, "whatif"),
}


def workload(name, torch, oom_messages):
    dev = "cuda"

    def try_alloc(nbytes):
        try:
            return torch.empty(nbytes, dtype=torch.uint8, device=dev)
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
            return None

    if name == "train_mlp":
        torch.manual_seed(0)
        layers = []
        for _ in range(3):
            layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(3):
            x = torch.randn(256, 1024, device=dev)
            y = torch.randint(0, 10, (256,), device=dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
    elif name == "resnet18":
        import torchvision
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = False
        model = torchvision.models.resnet18(num_classes=10).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(8, 3, 64, 64, device=dev)
        y = torch.randint(0, 10, (8,), device=dev)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
    elif name == "fragment_oom":
        # 6 MiB and 3 MiB tensors share 20 MiB segments; free the 6 MiB ones; ask for 100 MiB under a ~1 GiB cap.
        keep, drop = [], []
        for _ in range(60):
            drop.append(try_alloc(6 * MiB))
            keep.append(try_alloc(3 * MiB))
        del drop
        big = try_alloc(100 * MiB)
        del big
        torch.cuda.empty_cache()
        del keep
        after = try_alloc(100 * MiB)
        del after
    elif name in ("mixed", "mixed_pressure", "whatif"):
        rng = random.Random({"mixed": 1, "mixed_pressure": 2, "whatif": 3}[name])
        live = []
        steps = {"mixed": 1500, "mixed_pressure": 2500, "whatif": 2000}[name]
        cap_live = {"mixed": 60, "mixed_pressure": 80, "whatif": 50}[name]
        for step in range(steps):
            r = rng.random()
            if live and (r < 0.45 or len(live) >= cap_live):
                live.pop(rng.randrange(len(live)))
                continue
            band = rng.random()
            if band < 0.45:
                n = rng.randint(1, MiB)
            elif band < 0.8:
                n = rng.randint(MiB + 1, 10 * MiB)
            elif band < 0.97:
                n = rng.randint(10 * MiB, 96 * MiB)
            else:
                n = rng.randint(96 * MiB, 300 * MiB)
            t = try_alloc(n)
            if t is not None:
                live.append(t)
            if step % 400 == 399:
                torch.cuda.empty_cache()
        del live
    else:
        raise SystemExit(f"unknown workload {name}")


def child(outdir, name):
    import torch
    conf, fraction, wl = TRACES[name]
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction)
    oom_messages = []
    workload(wl, torch, oom_messages)
    stats = torch.cuda.memory_stats()
    pkl = os.path.join(outdir, name + ".pickle")
    torch.cuda.memory._dump_snapshot(pkl)
    torch.cuda.memory._record_memory_history(enabled=None)
    record = {
        "name": name,
        "alloc_conf": conf,
        "fraction": fraction,
        "total_memory": total,
        "allowed": int(fraction * total) if fraction is not None else None,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "oom_messages": oom_messages,
        "memory_stats": dict(stats),
        "memory_summary": torch.cuda.memory_summary(),
    }
    with open(os.path.join(outdir, name + ".stats.json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)


def main(argv):
    if len(argv) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = argv[0]
    if len(argv) > 1 and argv[1] == "--child":
        child(outdir, argv[2])
        return 0
    names = argv[1:] or list(TRACES)
    os.makedirs(outdir, exist_ok=True)
    rc = 0
    for name in names:
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = TRACES[name][0]
        env.pop("PYTORCH_ALLOC_CONF", None)
        p = subprocess.run([sys.executable, __file__, outdir, "--child", name], env=env)
        if p.returncode != 0:
            print(f"record_traces: {name} failed ({p.returncode})", file=sys.stderr)
            rc = 1
            continue
        pkl = os.path.join(outdir, name + ".pickle")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "snapshot2json.py"), "--strip-frames",
                        pkl, "-o", os.path.join(outdir, name + ".trace.json")], check=True)
        os.unlink(pkl)
        with open(os.path.join(outdir, name + ".stats.json")) as f:
            st = json.load(f)["memory_stats"]
        print(f"{name:18s} alloc.peak={st['allocated_bytes.all.peak']:>12} "
              f"reserved.peak={st['reserved_bytes.all.peak']:>12} segs={st['segment.all.current']:>3} "
              f"dev_alloc={st['num_device_alloc']:>4} retries={st['num_alloc_retries']} ooms={st['num_ooms']}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
