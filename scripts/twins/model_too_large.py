#!/usr/bin/env python3
"""PyTorch twin of scenarios/model_too_large.c: model.to("cuda") of a model whose weights alone exceed the budget,
beside half-precision weights, the layers split over several devices, and weights offloaded to pinned host memory.

    python3 scripts/twins/model_too_large.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): width 8192, depth 24, devices 2, batch 64; budget
3968 MiB. The model, Stack(width, depth), is depth x nn.Linear(width, width) built on the CPU; model.to("cuda") is
done as Module._apply does it, one parameter at a time (`p.data = p.data.to("cuda")`), layer after layer, so the
OOM can be named (layers.15.weight) and a sample taken after each layer ("moved layer I"). The forward pass is
`x = F.relu(layer(x))` under no_grad in run_layers(), called as `x = run_layers(torch, model, x, mine)`: the caller's
x keeps the input (on device k > 0, the activation that arrived there) allocated until the call returns, as
`out = model(x)` does, so four activations are live at the peak; the scenario's forward() holds it the same way.
Timed with synchronisation (time_per_sample = seconds / batch).

fix-model-parallel on one GPU. PyTorch gives a process one caching allocator per device, and this machine may have
one GPU, so each device's share runs as its own process (`--share K`), with its own allocator and its own
set_per_process_memory_fraction(budget / total): the process of device K takes a sample at every one of the
scenario's steps (its layers moved, the others' steps with nothing new on it), receives the activation of the
previous share as a host tensor copied in (`x.to("cuda")`: one device allocation, as `x.to("cuda:K")` makes on
a second GPU), and passes its output on by copying it out (`x = x.cpu()`, which frees it, as the rebinding of
`x = x.to("cuda:K+1")` does). Device 0's samples are the variant's; devices 1.. go to "devices". The shares run one
after another: where one of them runs out of memory, the ones before it are run again told where the model stopped,
so that every device shows the same steps as in oomlab. time_per_sample is the sum of the shares' forward times
(a naive pipeline: one device works at a time). On a machine with several GPUs the same split can be run in one
process on cuda:0..cuda:N-1; that run is not what this twin records.

fix-offload keeps the weights in pinned host memory (`p.data.pin_memory()`) and two layer slots on the device;
layer i+1 is copied into its slot on a side stream (non_blocking) while layer i computes, the side stream waiting
for the compute that last read that slot. pinned_host_bytes is host_memory_stats()["allocated_bytes.current"].
"""
import json
import os
import subprocess
import sys

import twinlib

VARIANTS = {
    "bug": "",
    "fix-half": "",
    "fix-model-parallel": "",
    "fix-offload": "",
}
PARAMS = {"width": 8192, "depth": 24, "devices": 2, "batch": 64}
BUDGET = 3968 * twinlib.MiB
BUDGET_IN_USE = [BUDGET]  # --budget, as the variant's process was given it: its shares run under the same


def make_model(torch, width, depth, half=False):
    """Stack(width, depth), built on the CPU (every parameter in host memory); .half() there for fix-half."""
    nn = torch.nn

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    m = Stack()
    return m.half() if half else m


def dev_of(i, depth, ndev):
    """Layer i's device: contiguous shares, in order (the scenario's split)."""
    return i * ndev // depth


def move(t, model, mine, stop=None):
    """model.to("cuda") as Module._apply does it, for the layers `mine(i)` says are this process's; a sample after
    every layer (the others' too). Returns the layer whose parameter ran out of memory, else None; `stop`: another
    device ran out at that layer, so the loading ends there."""
    torch = t.torch
    for i, layer in enumerate(model.layers):
        if stop is not None and i == stop:
            return stop
        if mine(i):
            for name in ("weight", "bias"):
                p = getattr(layer, name)
                try:
                    p.data = p.data.to("cuda")
                except torch.OutOfMemoryError as e:
                    t.caught(e, "model.to(device): layers.%d.%s" % (i, name))
                    return i
        t.step("moved layer %d" % i)
    return None


def run_layers(torch, model, x, mine):
    F = torch.nn.functional
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            if mine(i):
                x = F.relu(layer(x))
    return x


def loaded_single(t, variant, p):
    """bug and fix-half: one device."""
    torch = t.torch
    width, depth, batch = p["width"], p["depth"], p["batch"]
    half = variant == "fix-half"
    dt = torch.float16 if half else torch.float32
    model = make_model(torch, width, depth, half)
    stopped = move(t, model, lambda i: True)
    if stopped is not None:
        t.step("after the OOM")
        model = None
        t.step("freed the model")
        return
    failed = False
    x = None
    try:
        x = torch.randn(batch, width, device="cuda", dtype=dt)
        t.step("input")
        t0 = t.clock()
        x = run_layers(torch, model, x, lambda i: True)
        t1 = t.clock()
        t.step("forward")
        t.metric("time_per_sample", "s", (t1 - t0) / batch)
    except torch.OutOfMemoryError as e:
        t.caught(e, "forward")
        failed = True
    x = None
    if failed:
        t.step("after the OOM")
        model = None
        return
    model = None
    t.step("freed the model")
    # weights_on_device is the scenario's allocated after loading: the sample "moved layer depth-1"
    t.metric("weights_on_device", "bytes", t.samples[depth - 1]["allocated_bytes.all.current"])


def share(k, p, budget, stop, fwd_fail):
    """Device k's share of fix-model-parallel, in its own process. stop: the layer where another device ran out
    while loading; fwd_fail: the forward pass runs out of memory on a later device."""
    import torch
    torch.manual_seed(0)
    t = twinlib.Twin(torch, budget)
    width, depth, ndev, batch = p["width"], p["depth"], p["devices"], p["batch"]
    mine = lambda i: dev_of(i, depth, ndev) == k
    model = make_model(torch, width, depth)
    res = {"load_oom": None, "fwd_oom": False, "seconds": 0.0}
    stopped = move(t, model, mine, stop)
    if stopped is not None:
        res["load_oom"] = stopped if t.oom is not None else None
        t.step("after the OOM")
        model = None
        t.step("freed the model")
    else:
        last = dev_of(depth - 1, depth, ndev)
        has_layers = any(mine(i) for i in range(depth))
        reached = fwd_fail is None or fwd_fail >= k  # nothing reaches k past a device that ran out
        failed = False
        x = None
        try:
            if k == 0:
                x = torch.randn(batch, width, device="cuda")
            t.step("input")
            if has_layers and reached:
                t0 = t.clock()
                if k != 0:  # x = x.to("cuda:k"): the previous share's output arrives
                    x = torch.randn(batch, width).to("cuda")
                x = run_layers(torch, model, x, mine)
                if k != last:  # x = x.to("cuda:k+1") frees it here
                    x = x.cpu()
                t1 = t.clock()
                res["seconds"] = t1 - t0
            if fwd_fail is None:
                t.step("forward")
        except torch.OutOfMemoryError as e:
            t.caught(e, "forward")
            failed = True
        x = None
        res["fwd_oom"] = failed
        if failed or fwd_fail is not None:
            t.step("after the OOM")
            model = None
        else:
            model = None
            t.step("freed the model")
    oom = dict(t.oom, device=k) if t.oom is not None else None
    res.update({"samples": t.samples, "oom": oom})
    return res


def model_parallel(t, variant, p):
    ndev, depth, batch = p["devices"], p["depth"], p["batch"]

    def run_share(k, stop, fwd_fail):
        cmd = [sys.executable, os.path.abspath(__file__), "--share", str(k), json.dumps(p), str(BUDGET_IN_USE[0]),
               json.dumps(stop), json.dumps(fwd_fail)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError("share %d crashed: %s" % (k, out.stderr.strip()[-2000:]))
        return json.loads(out.stdout)

    results, stop, fwd_fail = {}, None, None
    k = 0
    while k < ndev:
        r = run_share(k, stop, fwd_fail)
        if r["load_oom"] is not None and stop is None:
            stop = r["load_oom"]  # the devices before it: again, told where the loading ended
            results = {j: run_share(j, stop, None) for j in range(k)}
        elif r["fwd_oom"] and fwd_fail is None:
            fwd_fail = k
            results = {j: run_share(j, None, k) for j in range(k)}
        results[k] = r
        k += 1
    t.samples = results[0]["samples"]
    t.devices = [{"index": j, "name": "cuda:0 in a process of its own (own allocator and fraction)",
                  "samples": results[j]["samples"]} for j in range(1, ndev)]
    ooms = [results[j]["oom"] for j in range(ndev) if results[j]["oom"] is not None]
    if ooms:
        t.oom = ooms[0]
    labels = [s["label"] for s in t.samples]
    if "forward" in labels:
        t.metrics.append({"name": "time_per_sample", "unit": "s",
                          "value": sum(results[j]["seconds"] for j in range(ndev)) / batch,
                          "sample": labels.index("forward")})
    if stop is None and fwd_fail is None:
        held = sum(results[j]["samples"][depth - 1]["allocated_bytes.all.current"] for j in range(ndev))
        t.metric("weights_on_device", "bytes", held)


def offload(t, variant, p):
    torch = t.torch
    F = torch.nn.functional
    width, depth, batch = p["width"], p["depth"], p["batch"]
    model = make_model(torch, width, depth)
    slots = []
    failed = False
    try:  # the two device slots first: a layer that cannot be held twice fails before anything is pinned
        for _ in range(2):
            w = torch.empty(width, width, device="cuda")
            b = torch.empty(width, device="cuda")
            slots.append((w, b))
            w = b = None
    except torch.OutOfMemoryError as e:
        t.caught(e, "layer slots")
        failed = True
    if failed:
        slots = w = b = None
        t.step("after the OOM")
        return
    t.step("layer slots")
    pinned = [(l.weight.data.pin_memory(), l.bias.data.pin_memory()) for l in model.layers]
    pinned_bytes = torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
    model = None
    side = torch.cuda.Stream()
    compute = torch.cuda.current_stream()

    def issue(i):
        side.wait_stream(compute)  # the slot's previous reader (layer i-2) has run
        with torch.cuda.stream(side):
            slots[i % 2][0].copy_(pinned[i][0], non_blocking=True)
            slots[i % 2][1].copy_(pinned[i][1], non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(side)
        return ev

    x = None
    try:
        x = torch.randn(batch, width, device="cuda")
        t.step("input")
        t0 = t.clock()
        with torch.no_grad():
            ev = issue(0)
            for i in range(depth):
                compute.wait_event(ev)
                if i + 1 < depth:
                    ev = issue(i + 1)  # overlaps with layer i's compute
                x = F.relu(F.linear(x, slots[i % 2][0], slots[i % 2][1]))
                t.step("layer %d" % i)
        t1 = t.clock()
        t.step("forward")
        t.metric("time_per_sample", "s", (t1 - t0) / batch)
        t.metric("pinned_host_bytes", "bytes", pinned_bytes)
    except torch.OutOfMemoryError as e:
        t.caught(e, "forward")
        failed = True
    x = None
    torch.cuda.synchronize()  # no copy still writing into a slot when it is freed
    slots = pinned = None
    if not failed:
        t.step("freed the model")


def body(t, variant, p):
    if variant == "fix-model-parallel":
        model_parallel(t, variant, p)
    elif variant == "fix-offload":
        offload(t, variant, p)
    else:
        loaded_single(t, variant, p)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--share":
        k, params, budget = int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(share(k, params, budget, json.loads(sys.argv[5]), json.loads(sys.argv[6]))))
        sys.exit(0)
    if "--budget" in sys.argv:  # the shares take the budget the variant runs under
        BUDGET_IN_USE[0] = int(sys.argv[sys.argv.index("--budget") + 1])
    sys.exit(twinlib.main(__doc__, "model_too_large", VARIANTS, PARAMS, BUDGET, body))
