#!/usr/bin/env python3
"""Record PyTorch memory traces for `oomlab replay` parity tests (run on a GPU with PyTorch).

    python3 scripts/twins/record_traces.py OUTDIR [-j JOBS] [NAME ...]

Each trace runs in a fresh process (-j: that many at once; each has its own address space), so
PYTORCH_CUDA_ALLOC_CONF takes effect and every counter starts at zero.
History recording starts before the first CUDA allocation, with no stack context, so frames are empty.
For each NAME it writes:
    OUTDIR/NAME.trace.json   the _snapshot() dict, converted by scripts/snapshot2json.py --strip-frames
    OUTDIR/NAME.stats.json   {"memory_stats": torch.cuda.memory_stats(), "alloc_conf", "total_memory",
                              "fraction", "allowed", "torch", "device", "oom_messages"}

The "whatif_*" workloads are one deterministic program (torch.empty and del only, no cuBLAS, no OOM) recorded under
different configs: replaying whatif_default under another --alloc-conf must predict that config's stats.
The "addr_*" workloads test the sim's model of where the driver puts segments (docs/parity.md): replayed with
addresses left to the model, they must still give PyTorch's segments. budget_bisect.py records the capped
addr_*_cap_pass/_cap_oom runs.
"""
import json
import math
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
    # the address model (docs/parity.md, "Where the driver puts segments"): replayed with addresses left to the
    # sim's model of the driver, these must still give PyTorch's segments
    "addr_transformer": ("", None, "transformer"),
    "addr_transformer_expandable": ("expandable_segments:True", None, "transformer"),
    "addr_resnet18_b16": ("", None, "resnet18_b16"),
    "addr_resnet50_b8": ("", None, "resnet50_b8"),
    "addr_resnet50_b32": ("", None, "resnet50_b32"),
    "addr_resnet50_b8_expandable": ("expandable_segments:True", None, "resnet50_b8"),
    "addr_mixed_1": ("", None, "addr_mixed_1"),
    "addr_mixed_2": ("", None, "addr_mixed_2"),
    "addr_mixed_3": ("", None, "addr_mixed_3"),
    "addr_mixed_expandable": ("expandable_segments:True", None, "addr_mixed_1"),
    "addr_mixed_k1": ("", None, "addr_mixed_k1"),
    "addr_mixed_k2": ("", None, "addr_mixed_k2"),
    "addr_transformer_s2": ("", None, "transformer_s2"),
    "addr_tfm4": ("", None, "tfm4"),
    "addr_tfm4_expandable": ("expandable_segments:True", None, "tfm4"),
    "addr_gpt": ("", None, "gpt"),
}

# OOMLAB_TRACE_BUDGET=BYTES records a trace under that budget instead (set_per_process_memory_fraction(
# BYTES / total), as budget_bisect.py does); OOMLAB_TRACE_DIAG=1 also writes NAME.diag.json: after every aten op
# where it changes, the device memory in use outside PyTorch's segments (cudaMemGetInfo: device-wide, so other
# processes on the GPU count too), the allocator's counters at that point, and the allocations near PyTorch's
# segments that cuMemGetAddressRange finds and PyTorch did not make (cuBLAS's, cuDNN's, cuRAND's). The dispatch
# mode it uses can change a program's own allocations (it did for the resnets): record the trace without it.


def workload(name, torch, oom_messages):
    dev = "cuda"

    def try_alloc(nbytes):
        try:
            return torch.empty(nbytes, dtype=torch.uint8, device=dev)
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
            return None

    if name in ("transformer", "transformer_s2"):
        # one nn.TransformerEncoderLayer trained on variable-length batches: forward, backward, Adam
        torch.manual_seed(0)
        rng = random.Random(11 if name == "transformer" else 12)
        lens = [rng.randint(64, 2048) for _ in range(8)]
        layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                                 batch_first=True).to(dev)
        opt = torch.optim.Adam(layer.parameters(), lr=1e-4)
        try:
            for n in lens:
                x = torch.randn(8, n, 1024, device=dev)
                loss = layer(x).pow(2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                del x, loss
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
        torch.cuda.synchronize()
    elif name in ("tfm4", "gpt"):
        # a 4-layer encoder (d_model 512) on variable-length batches; "gpt" adds a 32000-token embedding and
        # LM head with a causal mask (logits of batch x length x 32000)
        torch.manual_seed(0)
        rng = random.Random(21)
        gpt = name == "gpt"
        batch, lens = (4, [rng.randint(64, 1024) for _ in range(10)]) if gpt else \
            (8, [rng.randint(64, 2048) for _ in range(10)])
        enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
            d_model=512, nhead=8, dim_feedforward=2048, batch_first=True), num_layers=4, enable_nested_tensor=False)
        mods = [enc] + ([torch.nn.Embedding(32000, 512), torch.nn.Linear(512, 32000)] if gpt else [])
        params = [p for m in mods for p in m.parameters()]
        for m in mods:
            m.to(dev)
        opt = torch.optim.Adam(params, lr=1e-4)
        try:
            for n in lens:
                if gpt:
                    tok = torch.randint(0, 32000, (batch, n + 1), device=dev)
                    mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=dev)
                    h = enc(mods[1](tok[:, :-1]), mask=mask, is_causal=True)
                    loss = torch.nn.functional.cross_entropy(mods[2](h).flatten(0, 1), tok[:, 1:].flatten())
                    del tok, mask, h
                else:
                    x = torch.randn(batch, n, 512, device=dev)
                    loss = enc(x).pow(2).mean()
                    del x
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                del loss
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
        torch.cuda.synchronize()
    elif name.startswith("resnet") and "_b" in name:
        import torchvision
        arch, batch = name.split("_b")
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = False
        model = getattr(torchvision.models, arch)(num_classes=100).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        try:
            for _ in range(3):
                x = torch.randn(int(batch), 3, 224, 224, device=dev)
                y = torch.randint(0, 100, (int(batch),), device=dev)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                del x, y, loss
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
        torch.cuda.synchronize()
    elif name.startswith("addr_mixed_"):
        # torch.empty of 512 B to 300 MiB (log-uniform), each held for a random number of steps; "_k" programs
        # draw the same sizes but make each tensor with torch.zeros (a kernel launch)
        rng = random.Random(100 + int(name[-1]))
        if "_k" in name:
            def try_alloc(nbytes):
                try:
                    return torch.zeros(nbytes, dtype=torch.uint8, device=dev)
                except torch.OutOfMemoryError as e:
                    oom_messages.append(str(e))
                    return None
        live = {}
        for step in range(1500):
            for k in [k for k, (t, until) in live.items() if until <= step]:
                del live[k]
            if rng.random() < 0.7:
                n = int(math.exp(rng.uniform(math.log(512), math.log(300 * MiB))))
                t = try_alloc(n)
                if t is not None:
                    live[step] = (t, step + int(rng.expovariate(1 / 12)) + 1)
                t = None
            if step % 500 == 499:
                torch.cuda.empty_cache()
        del live
    elif name == "train_mlp":
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


class Diag:
    """A dispatch mode that notes, after every aten op, the device memory held outside PyTorch's segments."""

    def __init__(self, torch):
        import ctypes
        from torch.utils._python_dispatch import TorchDispatchMode
        self.torch = torch
        self.log = []
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.P = ctypes.c_uint64
        self.ctypes = ctypes
        self.cu.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(self.P), ctypes.POINTER(ctypes.c_size_t), self.P]
        self.last = None
        diag = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                diag.note(str(func))
                return out

        self.mode = Mode()
        self.note("start")

    def __enter__(self):
        self.mode.__enter__()

    def __exit__(self, *a):
        self.mode.__exit__(*a)

    def scan(self, segs):
        """Allocations that cuMemGetAddressRange finds near PyTorch's segments but are not theirs."""
        if not segs:
            return []
        lo = min(segs) - (4 << 30)
        hi = max(segs) + (1 << 30)
        found, p = [], hi
        base, size = self.P(0), self.ctypes.c_size_t(0)
        while p > lo:
            p -= 2 * MiB
            if self.cu.cuMemGetAddressRange_v2(self.ctypes.byref(base), self.ctypes.byref(size), p) == 0:
                if base.value not in segs:
                    found.append([base.value, size.value])
                p = min(p, base.value)
        return found

    def note(self, what):
        torch = self.torch
        free, total = torch.cuda.mem_get_info()
        ext = total - free - torch.cuda.memory_reserved()
        if ext == self.last:
            return
        self.last = ext
        st = torch.cuda.memory_stats()
        segs = {s["address"] for s in torch.cuda.memory_snapshot()}
        self.log.append({"op": what, "external": ext, "allocs": st.get("allocation.all.allocated", 0),
                         "frees": st.get("allocation.all.freed", 0), "seg_allocs": st.get("num_device_alloc", 0),
                         "seg_frees": st.get("num_device_free", 0), "found": self.scan(segs)})


def child(outdir, name):
    import torch
    conf, fraction, wl = TRACES[name]
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    budget = os.environ.get("OOMLAB_TRACE_BUDGET")
    if budget:
        fraction = int(budget) / total
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction)
    oom_messages = []
    if os.environ.get("OOMLAB_TRACE_DIAG"):
        diag = Diag(torch)
        with diag:
            workload(wl, torch, oom_messages)
        diag.note("end")
        with open(os.path.join(outdir, name + ".diag.json"), "w") as f:
            json.dump(diag.log, f, separators=(",", ":"))
    else:
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
        "budget": int(budget) if budget else None,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "oom_messages": oom_messages,
        "memory_stats": dict(stats),
        "memory_summary": torch.cuda.memory_summary(),
    }
    with open(os.path.join(outdir, name + ".stats.json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)


def record(outdir, name, env_extra=None):
    """Record NAME into OUTDIR in a fresh process; False when the child failed."""
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = TRACES[name][0]
    env.pop("PYTORCH_ALLOC_CONF", None)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, os.path.abspath(__file__), outdir, "--child", name], env=env)
    if p.returncode != 0:
        print(f"record_traces: {name} failed ({p.returncode})", file=sys.stderr)
        return False
    pkl = os.path.join(outdir, name + ".pickle")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "snapshot2json.py"), "--strip-frames",
                    pkl, "-o", os.path.join(outdir, name + ".trace.json")], check=True)
    os.unlink(pkl)
    with open(os.path.join(outdir, name + ".stats.json")) as f:
        st = json.load(f)["memory_stats"]
    print(f"{name:18s} alloc.peak={st['allocated_bytes.all.peak']:>12} "
          f"reserved.peak={st['reserved_bytes.all.peak']:>12} segs={st['segment.all.current']:>3} "
          f"dev_alloc={st['num_device_alloc']:>4} retries={st['num_alloc_retries']} ooms={st['num_ooms']}",
          flush=True)
    return True


def main(argv):
    if len(argv) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = argv[0]
    if len(argv) > 1 and argv[1] == "--child":
        child(outdir, argv[2])
        return 0
    names, jobs, rest = [], 1, argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "-j":
            jobs = int(rest.pop(0))
        else:
            names.append(a)
    names = names or list(TRACES)
    os.makedirs(outdir, exist_ok=True)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(jobs) as pool:
        ok = list(pool.map(lambda n: record(outdir, n), names))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
