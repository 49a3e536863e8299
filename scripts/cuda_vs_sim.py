#!/usr/bin/env python3
"""Every counter of every sample of a cuda run against a sim run of the same catalog (the backends' parity).

    python3 scripts/cuda_vs_sim.py SIM_RUN_DIR CUDA_RUN_DIR

Each folder is what `oomlab run --out DIR` leaves (one SCENARIO.json per scenario; the sim run is usually
`oomlab run --dry-run`, full scale like cuda). Per variant it prints `identical`, or the first thing that differs:
the outcome, the OOM's step, the number of samples, or a sample's counter (its label and both values). Exit 0 when
every variant of every scenario is identical, 1 otherwise, 2 on bad input (one line).
"""
import json
import os
import sys

COUNTERS = ("allocated", "reserved", "active", "inactive_split", "allocated_peak", "reserved_peak", "segments",
            "num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms")


def load(folder):
    runs = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                doc = json.load(f)
            if isinstance(doc, dict) and doc.get("schema") in ("oomlab.run/1", "oomlab.run/2", "oomlab.run/3"):
                runs[doc["scenario"]] = {v["name"]: v for v in doc["variants"]}
    return runs


def sample_difference(xa, xb, where=""):
    if len(xa) != len(xb):
        return f"{where}{len(xa)} samples vs {len(xb)}"
    for i, (p, q) in enumerate(zip(xa, xb)):
        for k in COUNTERS:
            if p.get(k) != q.get(k):
                return f"{where}sample {i} ({p.get('label')}): {k} {p.get(k)} vs {q.get(k)}"
    return None


def first_difference(a, b):
    if a.get("outcome") != b.get("outcome"):
        return f"outcome {a.get('outcome')} vs {b.get('outcome')}"
    sa, sb = (a.get("oom") or {}).get("step"), (b.get("oom") or {}).get("step")
    if sa != sb:
        return f"oom step {sa} vs {sb}"
    why = sample_difference(a.get("samples", []), b.get("samples", []))
    if why:
        return why
    # a variant on several devices (one rank each in data_parallel): every device's samples too, rank by rank
    da, db = a.get("devices", []), b.get("devices", [])
    if len(da) != len(db):
        return f"{len(da)} other devices vs {len(db)}"
    for x, y in zip(da, db):
        why = sample_difference(x.get("samples", []), y.get("samples", []), f"device {x.get('index')}: ")
        if why:
            return why
    return None


def main(argv):
    if len(argv) != 3 or not all(os.path.isdir(d) for d in argv[1:]):
        print("cuda_vs_sim: usage: cuda_vs_sim.py SIM_RUN_DIR CUDA_RUN_DIR (two run folders)", file=sys.stderr)
        return 2
    try:
        sim, cuda = load(argv[1]), load(argv[2])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"cuda_vs_sim: cannot read a results file: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    same = total = 0
    for scenario in sorted(set(sim) | set(cuda)):
        for variant in sorted(set(sim.get(scenario, {})) | set(cuda.get(scenario, {})),
                              key=lambda v: list(sim.get(scenario, cuda.get(scenario, {}))).index(v)
                              if v in sim.get(scenario, cuda.get(scenario, {})) else 1 << 30):
            total += 1
            a, b = sim.get(scenario, {}).get(variant), cuda.get(scenario, {}).get(variant)
            why = "missing on " + ("sim" if a is None else "cuda") if a is None or b is None else first_difference(a, b)
            same += why is None
            print(f"{scenario:<18} {variant:<28} {why or 'identical'}")
    print(f"{same} of {total} variants identical on every counter of every sample (every device's)")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
