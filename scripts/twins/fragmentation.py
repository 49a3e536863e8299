#!/usr/bin/env python3
"""PyTorch twin of scenarios/fragmentation.c: the same allocation pattern, every variant, on a real GPU.

    python3 scripts/twins/fragmentation.py [--budget BYTES] [--pairs N] [--json OUT]

Each variant runs in a fresh process (so PYTORCH_CUDA_ALLOC_CONF takes effect and the counters start at zero)
under torch.cuda.set_per_process_memory_fraction(budget / total). The pattern: N pairs of a 6 MiB tensor that
dies young and a 3 MiB tensor that lives on, allocated interleaved (or, for fix-long-lived-first, the long-lived
ones first); the short-lived ones are freed; then one 100 MiB request. It prints one JSON object per variant:
the outcome ("oom" or "ok"), the OOM message, and memory_stats() at the moment after the request.
"""
import json
import os
import subprocess
import sys

MiB = 1 << 20

# variant -> (PYTORCH_CUDA_ALLOC_CONF, long-lived first?, empty_cache() before the request?)
VARIANTS = {
    "bug": ("", False, False),
    "fix-expandable-segments": ("expandable_segments:True", False, False),
    "fix-long-lived-first": ("", True, False),
    "myth-empty-cache": ("", False, True),
    "myth-max-split-size": ("max_split_size_mb:128", False, False),
    "myth-gc-threshold": ("garbage_collection_threshold:0.6", False, False),
}

KEYS = ["allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
        "reserved_bytes.all.peak", "segment.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc",
        "num_device_free", "inactive_split_bytes.all.current"]


def child(variant, budget, pairs, short_mib, long_mib, request_mib):
    import torch
    conf, long_first, empty = VARIANTS[variant]
    dev = "cuda"
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(budget / total)
    long_lived, short_lived = [], []
    if long_first:
        for _ in range(pairs):
            long_lived.append(torch.empty(long_mib * MiB, dtype=torch.uint8, device=dev))
        for _ in range(pairs):
            short_lived.append(torch.empty(short_mib * MiB, dtype=torch.uint8, device=dev))
    else:
        for _ in range(pairs):
            short_lived.append(torch.empty(short_mib * MiB, dtype=torch.uint8, device=dev))
            long_lived.append(torch.empty(long_mib * MiB, dtype=torch.uint8, device=dev))
    del short_lived
    before = torch.cuda.memory_stats()
    if empty:
        torch.cuda.empty_cache()
    after_empty = torch.cuda.memory_stats()
    outcome, message = "ok", ""
    try:
        big = torch.empty(request_mib * MiB, dtype=torch.uint8, device=dev)
        del big
    except torch.OutOfMemoryError as e:
        outcome, message = "oom", str(e)
    st = torch.cuda.memory_stats()
    return {
        "variant": variant,
        "alloc_conf": conf,
        "budget": budget,
        "allowed": int(budget / total * total),
        "outcome": outcome,
        "message": message,
        "reserved_unallocated_before_request": before["reserved_bytes.all.current"]
        - before["allocated_bytes.all.current"],
        "empty_cache_released": before["reserved_bytes.all.current"] - after_empty["reserved_bytes.all.current"],
        "stats": {k: st[k] for k in KEYS},
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
    }


def main(argv):
    budget, pairs, out = 1 << 30, 100, None
    i = 0
    while i < len(argv):
        if argv[i] == "--budget":
            budget = int(argv[i + 1]); i += 2
        elif argv[i] == "--pairs":
            pairs = int(argv[i + 1]); i += 2
        elif argv[i] == "--json":
            out = argv[i + 1]; i += 2
        elif argv[i] == "--child":
            print(json.dumps(child(argv[i + 1], budget, pairs, 6, 3, 100)))
            return 0
        else:
            print(__doc__, file=sys.stderr)
            return 2
    results = []
    for v in VARIANTS:
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = VARIANTS[v][0]
        env.pop("PYTORCH_ALLOC_CONF", None)
        p = subprocess.run([sys.executable, __file__, "--budget", str(budget), "--pairs", str(pairs), "--child", v],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        r = json.loads(p.stdout.strip().splitlines()[-1])
        results.append(r)
        s = r["stats"]
        print(f"{v:26s} {r['outcome']:4s} alloc.peak={s['allocated_bytes.all.peak']:>11} "
              f"reserved.peak={s['reserved_bytes.all.peak']:>11} unalloc.before={r['reserved_unallocated_before_request']:>10} "
              f"retries={s['num_alloc_retries']} ooms={s['num_ooms']}")
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
