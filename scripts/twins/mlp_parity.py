#!/usr/bin/env python3
"""PyTorch twin of `oomlab parity`: the runtime's memory against PyTorch's, workload by workload.

    python3 scripts/twins/mlp_parity.py [--json OUT] [WORKLOAD ...]

Each workload runs in a fresh process and prints one JSON object; `oomlab parity --json` prints the same keys
for oomlab's runtime (harness/bench/parity.c mirrors this file line by line). The canonical MLP is depth x
[Linear(width, width), ReLU] then Linear(width, 10), width 4096, depth 4, batch 256.

Workloads:
  eval_leak     an evaluation loop with grad enabled that keeps `total = total + loss`: memory_allocated()
                after each step (each step's graph stays alive through total)
  eval_item     the same with `total += loss.item()`: flat
  eval_nograd   the same under torch.no_grad(): flat
  train_sgd     SGD(lr=0.01, momentum=0.9), three steps of zero_grad / forward / backward / step:
                memory_allocated() and max_memory_allocated() after each
  train_adam    the same with Adam(lr=1e-3)
  workspace     the bytes the first matmul leaves allocated beyond its output (cuBLAS's workspace)
  rnn_chain     RNNCell(256, 512), batch 64, hidden state carried without detach() and
                backward(retain_graph=True) each step: memory_allocated() per step
  errors        the texts of autograd's errors (second backward, in-place on a saved tensor, optimizer step
                between backward passes of a retained RNN chain, in-place on a leaf, no grad_fn, non-scalar)
Environment: CUBLAS_WORKSPACE_CONFIG / CUBLASLT_WORKSPACE_SIZE are passed through (":0:0" and "0" take the
cuBLAS workspaces out of the picture).
"""
import json
import os
import subprocess
import sys

WIDTH, DEPTH, BATCH, CLASSES = 4096, 4, 256, 10
WORKLOADS = ["eval_leak", "eval_item", "eval_nograd", "train_sgd", "train_adam", "workspace", "rnn_chain", "errors"]


def mlp(torch, dev):
    nn = torch.nn
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES)).to(dev)


def run(name):
    import torch
    import torch.nn.functional as F
    dev = "cuda"
    torch.manual_seed(0)
    torch.cuda.init()
    res = {"workload": name, "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
           "cublaslt_workspace_size": os.environ.get("CUBLASLT_WORKSPACE_SIZE")}
    alloc = torch.cuda.memory_allocated
    if name.startswith("eval_"):
        model = mlp(torch, dev)
        res["params_bytes"] = alloc()
        steps = 6
        per_step = []
        total = torch.zeros((), device=dev) if name == "eval_leak" else 0.0
        for _ in range(steps):
            x = torch.randn(BATCH, WIDTH, device=dev)
            y = torch.randint(0, CLASSES, (BATCH,), device=dev)
            if name == "eval_nograd":
                with torch.no_grad():
                    out = model(x)
                    loss = F.cross_entropy(out, y)
                total += loss.item()
            else:
                out = model(x)
                loss = F.cross_entropy(out, y)
                if name == "eval_leak":
                    total = total + loss
                else:
                    total += loss.item()
            torch.cuda.synchronize()
            per_step.append(alloc())
        res["allocated_per_step"] = per_step
        res["bytes_per_step"] = [b - a for a, b in zip(per_step, per_step[1:])]
    elif name.startswith("train_"):
        model = mlp(torch, dev)
        res["params_bytes"] = alloc()
        if name == "train_sgd":
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step():
            x = torch.randn(BATCH, WIDTH, device=dev)
            y = torch.randint(0, CLASSES, (BATCH,), device=dev)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        res["allocated_per_step"], res["peak_per_step"] = [], []
        for _ in range(3):
            step()
            torch.cuda.synchronize()
            res["allocated_per_step"].append(alloc())
            res["peak_per_step"].append(torch.cuda.max_memory_allocated())
        res["steady_allocated"] = res["allocated_per_step"][-1]
        st = torch.cuda.memory_stats()
        res["stats"] = {k: st[k] for k in ["allocated_bytes.all.peak", "reserved_bytes.all.peak",
                                           "reserved_bytes.all.current", "num_device_alloc", "segment.all.current"]}
    elif name == "workspace":
        a = torch.randn(BATCH, WIDTH, device=dev)
        w = torch.randn(WIDTH, WIDTH, device=dev)
        b = torch.randn(WIDTH, device=dev)
        before = alloc()
        out = a @ w.t()
        res["mm_workspace_bytes"] = alloc() - before - out.numel() * 4
        before = alloc()
        out2 = torch.nn.functional.linear(a, w, b)
        res["addmm_extra_bytes"] = alloc() - before - out2.numel() * 4
        del out, out2
    elif name == "rnn_chain":
        cell = torch.nn.RNNCell(256, 512).to(dev)
        h = None
        per_step = []
        for _ in range(6):
            x = torch.randn(64, 256, device=dev)
            h = cell(x, h)
            h.sum().backward(retain_graph=True)
            torch.cuda.synchronize()
            per_step.append(alloc())
        res["allocated_per_step"] = per_step
        res["bytes_per_step"] = [b - a for a, b in zip(per_step, per_step[1:])]
    elif name == "errors":
        msgs = {}
        x = torch.randn(3, 3, device=dev, requires_grad=True)
        s = x.relu().sum()
        s.backward()
        try:
            s.backward()
        except RuntimeError as e:
            msgs["second_backward"] = str(e)
        x = torch.randn(2, 3, device=dev, requires_grad=True)
        y = x.relu()
        z = y.tanh()
        y.add_(torch.ones(2, 3, device=dev))
        try:
            z.sum().backward()
        except RuntimeError as e:
            msgs["inplace_saved_output"] = str(e)
        w = torch.randn(4, device=dev, requires_grad=True)
        try:
            w.add_(torch.ones(4, device=dev))
        except RuntimeError as e:
            msgs["leaf_inplace"] = str(e)
        try:
            torch.randn(3, device=dev).backward()
        except RuntimeError as e:
            msgs["no_grad_fn"] = str(e)
        try:
            torch.randn(3, device=dev, requires_grad=True).relu().backward()
        except RuntimeError as e:
            msgs["non_scalar"] = str(e)
        cell = torch.nn.RNNCell(8, 16).to(dev)
        opt = torch.optim.SGD(cell.parameters(), lr=0.01)
        h = None
        for _ in range(4):
            h = cell(torch.randn(4, 8, device=dev), h)
            h.sum().backward(retain_graph=True)
        opt.step()
        h = cell(torch.randn(4, 8, device=dev), h)
        try:
            h.sum().backward(retain_graph=True)
        except RuntimeError as e:
            msgs["rnn_after_step"] = str(e)
        res["messages"] = msgs
    else:
        raise SystemExit(f"unknown workload {name}")
    return res


def main(argv):
    out = None
    names = []
    i = 0
    while i < len(argv):
        if argv[i] == "--json":
            out = argv[i + 1]
            i += 2
        elif argv[i] == "--child":
            print(json.dumps(run(argv[i + 1])))
            return 0
        else:
            names.append(argv[i])
            i += 1
    names = names or WORKLOADS
    results = []
    for n in names:
        if n not in WORKLOADS:
            print(f"mlp_parity: unknown workload '{n}' (known: {', '.join(WORKLOADS)})", file=sys.stderr)
            return 2
        p = subprocess.run([sys.executable, __file__, "--child", n], capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        r = json.loads(p.stdout.strip().splitlines()[-1])
        results.append(r)
        brief = {k: v for k, v in r.items() if k not in ("torch", "device", "messages")}
        print(json.dumps(brief))
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
