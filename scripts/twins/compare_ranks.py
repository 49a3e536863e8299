#!/usr/bin/env python3
"""A distributed twin's recording against an oomlab run of the same scenario, rank by rank.

    python3 scripts/twins/compare_ranks.py [--all] TWIN.torch.json RUN.json

TWIN is what a twin run with nproc > 1 writes (twinlib: rank 0's samples are the variant's, rank k's in "devices");
RUN is `oomlab run NAME --json` or the file `--out` leaves (full scale: --dry-run on sim, or cuda). Per variant it
prints `identical`, or the first difference: outcome, OOM step, a rank's sample count or a counter (label, both
values); with --all, every sample of every rank that differs, each with every counter that differs (PyTorch/oomlab).
Exit 0 when every variant is identical, 1 otherwise, 2 on bad input.
"""
import json
import sys

# twinlib's memory_stats() names -> the results JSON's sample keys
KEYS = {"allocated_bytes.all.current": "allocated", "reserved_bytes.all.current": "reserved",
        "active_bytes.all.current": "active", "inactive_split_bytes.all.current": "inactive_split",
        "allocated_bytes.all.peak": "allocated_peak", "reserved_bytes.all.peak": "reserved_peak",
        "segment.all.current": "segments", "num_device_alloc": "num_device_alloc",
        "num_device_free": "num_device_free", "num_alloc_retries": "num_alloc_retries", "num_ooms": "num_ooms"}


def differ(rank, ts, rs):
    if len(ts) != len(rs):
        return f"rank {rank}: {len(ts)} samples in PyTorch, {len(rs)} in oomlab"
    for i, (t, r) in enumerate(zip(ts, rs)):
        if t["label"] != r["label"]:
            return f"rank {rank}: sample {i} is '{t['label']}' in PyTorch, '{r['label']}' in oomlab"
        for tk, rk in KEYS.items():
            if t.get(tk) != r.get(rk):
                return f"rank {rank}: sample {i} ({t['label']}): {tk} {t.get(tk)} (PyTorch) vs {r.get(rk)}"
    return None


def every_difference(name, rank, ts, rs):
    """--all: one line per differing sample, its differing counters as PyTorch/oomlab."""
    for t, r in zip(ts, rs):
        diff = [f"{rk} {t.get(tk)}/{r.get(rk)}" for tk, rk in KEYS.items() if t.get(tk) != r.get(rk)]
        if diff:
            print(f"  {name:<28} rank {rank} {t['label']:<28} " + " ".join(diff))


def main(argv):
    every = len(argv) > 1 and argv[1] == "--all"
    if every:
        argv = argv[:1] + argv[2:]
    if len(argv) != 3:
        print("compare_ranks: usage: compare_ranks.py [--all] TWIN.torch.json RUN.json", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            twin = json.load(f)
        with open(argv[2], encoding="utf-8") as f:
            run = {v["name"]: v for v in json.load(f)["variants"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"compare_ranks: cannot read: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    same = 0
    for tv in twin["variants"]:
        name = tv["variant"]
        rv = run.get(name)
        why = None
        if rv is None:
            why = "missing in the oomlab run"
        elif tv["outcome"] != rv["outcome"]:
            why = f"outcome {tv['outcome']} (PyTorch) vs {rv['outcome']}"
        elif (tv.get("oom") or {}).get("step") != (rv.get("oom") or {}).get("step"):
            why = f"OOM step {(tv.get('oom') or {}).get('step')} (PyTorch) vs {(rv.get('oom') or {}).get('step')}"
        else:
            why = differ(0, tv["samples"], rv["samples"])
            tds, rds = tv.get("devices", []), rv.get("devices", [])
            if not why and len(tds) != len(rds):
                why = f"{len(tds)} other ranks in PyTorch, {len(rds)} in oomlab"
            for td, rd in zip(tds, rds):
                why = why or differ(td["index"], td["samples"], rd["samples"])
        same += why is None
        print(f"{name:<28} {why or 'identical'}")
        if why and every and rv is not None:
            every_difference(name, 0, tv["samples"], rv["samples"])
            for td, rd in zip(tv.get("devices", []), rv.get("devices", [])):
                every_difference(name, td["index"], td["samples"], rd["samples"])
    print(f"{same} of {len(twin['variants'])} variants identical on every counter of every rank's samples")
    return 0 if same == len(twin["variants"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
