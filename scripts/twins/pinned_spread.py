#!/usr/bin/env python3
"""How many pinned blocks PyTorch's DataLoader holds with a fast consumer, over repeated runs, and the copy
bandwidths oomlab's loader clock uses (harness/training/loader.h, LOADER_*_GBPS). Run on the GPU machine:

    python3 scripts/twins/pinned_spread.py [--out DIR] [-n RUNS] [--workers 4,8]

DIR defaults to $OUT (else the current folder). For each worker count, RUNS (default 10) fresh runs of the
pinned_memory twin's fast consumer (scripts/twins/pinned_memory.py myth-pinned-leak --set workers=W: prefetch 2,
24 batches of 32x3x224x224 f32 made in 50 ms each, no step time), one after another (the spread is a matter of
timing: nothing else runs beside them). Then, in a fresh process, the bandwidths on one CPU thread, as the pin
thread runs (_pin_memory_loop calls torch.set_num_threads(1)), for one batch's 19,267,584 bytes, the median of ten:
  pin_copy_GBps       a pageable CPU tensor copied into a pinned one (pinned.copy_(pageable));
  pin_memory_GBps     batch.pin_memory() of batches a DataLoader worker made (shared memory, as the pin thread gets
                      them; the host allocator's cache warm);
  h2d_pinned_GBps     x.to("cuda", non_blocking=True) from pinned memory, synchronised;
  h2d_pageable_GBps   the same from pageable memory.
Writes DIR/pinned_memory.spread.json ({"torch", "device", "params", "variant", "bandwidths": {...}, "sets":
[{"workers", "peaks": [the run's largest host.allocations.peak], "made": [num_host_alloc at the end], "held": [the
most batches pinned and kept out of order at once], "arrivals": [the batch indices in the order the main loop got
them from the pin thread], "errors"}]}; held and arrivals come from the twin's PINNED_ARRIVALS, docs/parity.md says
what they test)
and DIR/pinned_spread.txt (the distribution per worker count and the bandwidths). Commit the JSON as
tests/data/twins/pinned_memory.spread.json (tests/test_scenario_pinned_memory.c checks every run within the
scenario's bounds, 2 to W + 1) and put the distribution and pin_memory_GBps into docs/parity.md and loader.h.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "pinned_memory.py")
VARIANT = "myth-pinned-leak"
SHAPE = (32, 3, 224, 224)


class Batches:
    """A dataset of torch.randn batches (made by the worker, so they reach the main process in shared memory)."""

    def __len__(self):
        return 12

    def __getitem__(self, k):
        import torch
        return torch.randn(*SHAPE)


def measure():
    """The bandwidths, in this (fresh) process: printed as one JSON line."""
    import torch
    from torch.utils.data import DataLoader
    torch.set_num_threads(1)
    torch.cuda.init()
    nbytes = 1
    for d in SHAPE:
        nbytes *= d
    nbytes *= 4

    def median_gbps(fn, reps=10, warm=2):
        for _ in range(warm):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return nbytes / 1e9 / statistics.median(ts)

    pageable = torch.randn(*SHAPE)
    pinned = torch.empty(*SHAPE, pin_memory=True)
    dev = torch.empty(*SHAPE, device="cuda")
    out = {"bytes": nbytes, "threads": torch.get_num_threads()}
    out["pin_copy_GBps"] = median_gbps(lambda: pinned.copy_(pageable))

    def h2d(src):
        dev.copy_(src, non_blocking=True)
        torch.cuda.synchronize()

    out["h2d_pinned_GBps"] = median_gbps(lambda: h2d(pinned))
    out["h2d_pageable_GBps"] = median_gbps(lambda: h2d(pageable))
    # pin_memory() of batches from a worker: the first misses the host cache (cudaHostAlloc), the rest hit it
    ts = []
    for k, b in enumerate(DataLoader(Batches(), batch_size=None, num_workers=1, pin_memory=False)):
        t0 = time.perf_counter()
        p = b.pin_memory()
        dt = time.perf_counter() - t0
        del p  # no stream recorded: back in the cache at once
        if k >= 2:
            ts.append(dt)
    out["pin_memory_GBps"] = nbytes / 1e9 / statistics.median(ts)
    out["torch"] = torch.__version__
    out["device"] = torch.cuda.get_device_name(0)
    print(json.dumps(out))


def one_run(workers, work):
    """One fresh run: (peak, made, doc, arrivals), or (None, None, why, None)."""
    path = os.path.join(work, "w%d.json" % workers)
    apath = os.path.join(work, "w%d.arrivals" % workers)
    if os.path.exists(apath):
        os.unlink(apath)
    p = subprocess.run([sys.executable, TWIN, "--set", "workers=%d" % workers, "--json", path, VARIANT],
                       capture_output=True, text=True, env=dict(os.environ, PINNED_ARRIVALS=apath))
    if p.returncode != 0 or not os.path.exists(path):
        return None, None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-500:]), None
    with open(path) as f:
        doc = json.load(f)
    os.unlink(path)
    arr = None
    if os.path.exists(apath):
        with open(apath) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        os.unlink(apath)
        arr = lines[0] if lines else None  # the loop with pin_memory (the variant's first)
    v = doc["variants"][0]
    if v["outcome"] != "ok":
        return None, None, "outcome %s: %s" % (v["outcome"], v.get("error")), None
    peak = max((m["value"] for m in v["metrics"] if m["name"] == "host.allocations.peak"), default=0)
    made = [m["value"] for m in v["metrics"] if m["name"] == "host.num_host_alloc"]
    return int(peak), int(made[-1]) if made else 0, doc, arr


def main(argv):
    out, runs, workers = os.environ.get("OUT") or ".", 10, [4, 8]
    while argv:
        a = argv.pop(0)
        if a == "--out":
            out = argv.pop(0)
        elif a == "-n":
            runs = int(argv.pop(0))
        elif a == "--workers":
            workers = [int(w) for w in argv.pop(0).split(",")]
        elif a == "--measure":
            measure()
            return 0
        else:
            print(__doc__, file=sys.stderr)
            return 2
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="pinned_spread_")
    sets, meta = [], {}
    for w in workers:
        s = {"workers": w, "peaks": [], "made": [], "held": [], "arrivals": [], "errors": []}
        for k in range(runs):
            peak, made, doc, arr = one_run(w, work)
            if peak is None:
                s["errors"].append(doc)
                print("workers %d run %d: %s" % (w, k, doc), file=sys.stderr)
                continue
            s["peaks"].append(peak)
            s["made"].append(made)
            s["held"].append(arr["held_max"] if arr else None)
            s["arrivals"].append(arr["arrivals"] if arr else None)
            meta = {"torch": doc["torch"], "device": doc["device"], "params": doc["params"]}
            print("workers %d run %d: %d pinned blocks at the peak, %s held out of order at once, arrivals %s"
                  % (w, k, peak, arr["held_max"] if arr else "-", arr["arrivals"] if arr else "-"), file=sys.stderr)
        sets.append(s)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure"], capture_output=True, text=True)
    bw = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else {
        "error": p.stderr.strip()[-500:]}
    doc = dict(meta, variant=VARIANT, runs=runs, bandwidths=bw, sets=sets)
    with open(os.path.join(out, "pinned_memory.spread.json"), "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    lines = ["PyTorch %s on %s: %s with a fast consumer, %d fresh runs per worker count"
             % (meta.get("torch"), meta.get("device"), VARIANT, runs)]
    for s in sets:
        dist = {v: s["peaks"].count(v) for v in sorted(set(s["peaks"]))}
        lines.append("  %d workers: pinned blocks at the peak %s (blocks: runs), min %s, max %s, %d errors"
                     % (s["workers"], dist, min(s["peaks"], default="-"), max(s["peaks"], default="-"),
                        len(s["errors"])))
        lines.append("    per run, pinned blocks at the peak / batches held out of order at once: %s"
                     % ", ".join("%d/%s" % (pk, "-" if h is None else h) for pk, h in zip(s["peaks"], s["held"])))
    lines.append("  bandwidths (GB/s, one CPU thread, %s bytes): %s" % (bw.get("bytes"), ", ".join(
        "%s %.2f" % (k, v) for k, v in bw.items() if k.endswith("GBps"))))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "pinned_spread.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    return 0 if all(not s["errors"] for s in sets) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
