#!/usr/bin/env python3
"""Record the workloads `oomlab advise` is proven on (run on a GPU with PyTorch), or run one under a budget.

    python3 scripts/twins/advise_record.py OUTDIR [-j JOBS] [NAME ...]
    python3 scripts/twins/advise_record.py --run NAME --alloc-conf S --budget BYTES   (one run, no history: JSON)

Workloads (each in a fresh process, cuBLAS's workspaces off as in every twin: CUBLAS_WORKSPACE_CONFIG=:0:0,
CUBLASLT_WORKSPACE_SIZE=0):
  advise_mlp          the canonical MLP of `oomlab parity` (depth 4 x [Linear(4096, 4096), ReLU], Linear(4096, 10),
                      batch 256) trained with SGD(lr=0.01, momentum=0.9) for 6 steps of zero_grad / forward /
                      backward / step; each step marked with torch.cuda.memory._set_memory_metadata("step K")
                      where PyTorch has it (advise --step-marker "step ")
  advise_transformer  one TransformerEncoderLayer(d_model 1024, 16 heads, 4096 feed-forward) trained with Adam on
                      batches of 8 at 8 sequence lengths drawn between 64 and 2048 (record_traces.py's
                      "transformer", the addr_transformer recording)
  advise_frag         scenarios/fragmentation.c's bug: 100 pairs of a 6 MiB tensor that dies young and a 3 MiB one
                      that lives on, interleaved; the short ones freed; one 100 MiB request. Recorded under the
                      scenario's 1 GiB budget, where PyTorch runs out of memory (the OOM is caught, as there)
Recording writes OUTDIR/NAME.trace.json (the _snapshot() dict through scripts/snapshot2json.py --strip-frames,
with --budget for a capped recording) and OUTDIR/NAME.stats.json ({"memory_stats", "allowed", "budget",
"total_memory", "torch", "device", "oom_messages"}). History starts before the first CUDA allocation.

--run prints one JSON line: {"name", "alloc_conf", "budget", "allowed", "total_memory", "ooms", "reserved_peak",
"allocated_peak", "oom_messages", "torch", "device"}: what scripts/twins/advise_verify.py reads. The budget is
applied as torch.cuda.set_per_process_memory_fraction(BYTES / total_memory), whose cap is
(size_t)(fraction * total): the arithmetic `oomlab advise` models.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MiB = 1 << 20

# name -> the budget it is recorded under (None: none)
WORKLOADS = {"advise_mlp": None, "advise_transformer": None, "advise_frag": 1 << 30}
NO_WORKSPACES = {"CUBLAS_WORKSPACE_CONFIG": ":0:0", "CUBLASLT_WORKSPACE_SIZE": "0"}


def workload(name, torch, oom_messages):
    dev = "cuda"
    if name == "advise_mlp":
        import torch.nn.functional as F
        torch.manual_seed(0)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(4096, 10)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        mark = getattr(torch.cuda.memory, "_set_memory_metadata", None)
        try:
            for k in range(6):
                if mark:
                    mark("step %d" % k)
                x = torch.randn(256, 4096, device=dev)
                y = torch.randint(0, 10, (256,), device=dev)
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                del x, y, loss
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
        if mark:
            mark("")
        torch.cuda.synchronize()
    elif name == "advise_transformer":
        import record_traces
        record_traces.workload("transformer", torch, oom_messages)
    elif name == "advise_frag":
        def empty_mib(mib):
            return torch.empty(mib * MiB, dtype=torch.uint8, device=dev)

        keep, drop = [], []
        try:
            for _ in range(100):
                drop.append(empty_mib(6))
                keep.append(empty_mib(3))
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
        del drop
        try:
            big = empty_mib(100)
            del big
        except torch.OutOfMemoryError as e:
            oom_messages.append(str(e))
        del keep
    else:
        raise SystemExit("advise_record: unknown workload %s (workloads: %s)" % (name, " ".join(WORKLOADS)))


def apply_budget(torch, budget):
    """Cap this process at budget bytes (None or 0: no cap) the way `oomlab advise` models it:
    set_per_process_memory_fraction(budget / total), whose cap is (size_t)(fraction * total). The bytes allowed
    (None without a budget). CUDA must be initialised and nothing allocated yet."""
    if not budget:
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(budget / total)
    return int(budget / total * total)


def alloc_conf_env(alloc_conf):
    """os.environ for a child run under PYTORCH_CUDA_ALLOC_CONF=alloc_conf ("": PyTorch's defaults), with the
    other spellings of the variable removed so that they cannot override it."""
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    env.pop("PYTORCH_ALLOC_CONF", None)
    env.pop("PYTORCH_HIP_ALLOC_CONF", None)
    return env


def snapshot_to_trace(pickle_path, trace_path, budget=None):
    """A _dump_snapshot() pickle to the trace `oomlab replay` reads (scripts/snapshot2json.py --strip-frames, with
    --budget for a capped recording); the pickle is removed."""
    conv = [sys.executable, os.path.join(HERE, "..", "snapshot2json.py"), "--strip-frames", pickle_path,
            "-o", trace_path]
    if budget:
        conv += ["--budget", str(budget)]
    subprocess.run(conv, check=True)
    os.unlink(pickle_path)


def child(name, budget, record_to):
    """One run in this process: the workload under budget (None: none), history recorded into record_to."""
    import torch
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    if record_to:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
    allowed = apply_budget(torch, budget)
    oom_messages = []
    workload(name, torch, oom_messages)
    st = dict(torch.cuda.memory_stats())
    res = {"name": name, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "budget": budget,
           "allowed": allowed, "total_memory": total, "ooms": int(st.get("num_ooms", 0)),
           "reserved_peak": int(st.get("reserved_bytes.all.peak", 0)),
           "allocated_peak": int(st.get("allocated_bytes.all.peak", 0)), "oom_messages": oom_messages,
           "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    if record_to:
        torch.cuda.memory._dump_snapshot(record_to + ".pickle")
        torch.cuda.memory._record_memory_history(enabled=None)
        res["memory_stats"] = st
    return res


def run(name, alloc_conf, budget, record_to=None):
    """The workload in a fresh process under alloc_conf and budget; its result dict (None if it failed)."""
    env = alloc_conf_env(alloc_conf)
    env.update(NO_WORKSPACES)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, str(budget or 0), record_to or ""]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        print("advise_record: %s (%r, budget %s) failed (%d)" % (name, alloc_conf, budget, p.returncode),
              file=sys.stderr)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def record(outdir, name):
    """Record name into outdir: NAME.trace.json and NAME.stats.json. False if it failed."""
    base = os.path.join(outdir, name)
    budget = WORKLOADS[name]
    res = run(name, "", budget, record_to=base)
    if res is None:
        return False
    snapshot_to_trace(base + ".pickle", base + ".trace.json", budget)
    with open(base + ".stats.json", "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    print("advise_record: %-20s allocated peak %d, reserved peak %d, OOMs %d" %
          (name, res["allocated_peak"], res["reserved_peak"], res["ooms"]), flush=True)
    return True


def main(argv):
    if len(argv) >= 4 and argv[0] == "--child":
        print(json.dumps(child(argv[1], int(argv[2]) or None, argv[3] or None)))
        return 0
    if argv and argv[0] == "--run":
        args = dict(zip(argv[2::2], argv[3::2]))
        res = run(argv[1], args.get("--alloc-conf", ""), int(args.get("--budget", "0")) or None)
        if res is None:
            return 1
        print(json.dumps(res))
        return 0
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    outdir, names, jobs, rest = argv[0], [], 3, argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "-j":
            jobs = int(rest.pop(0))
        else:
            names.append(a)
    for n in names:
        if n not in WORKLOADS:
            print("advise_record: unknown workload %s (workloads: %s)" % (n, " ".join(WORKLOADS)), file=sys.stderr)
            return 2
    os.makedirs(outdir, exist_ok=True)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(jobs) as pool:
        ok = list(pool.map(lambda n: record(outdir, n), names or list(WORKLOADS)))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
