#!/usr/bin/env python3
"""Probe of PyTorch's pinned host caching allocator: the two sequences of tests/test_hostalloc.c
(stats_after_each_operation, reuse_only_after_the_recorded_event_completes) on a real GPU, with the
host_memory_stats() oomlab expects after each step (PyTorch 2.11's source, quirks Q1/Q2 of alloc/hostalloc.h).

    python3 scripts/twins/host_alloc_probe.py [--json OUT]

Run it in a fresh process (the active_* stats cannot be reset). Prints one line per step, "ok" or the keys that
differ, and exits 1 when one differs. The times themselves are not compared, only their counts.
"""
import json
import sys

import torch

M = 1 << 20
K64, K128 = 65536, 131072


def stats():
    s = torch.cuda.host_memory_stats()
    return {k: v for k, v in s.items() if "_time." not in k or k.endswith(".count")}


def want(ab, ar, alb, al, alloc_count, free_count, nalloc, nfree):
    w = {}
    for name, vals in (("active_bytes", ab), ("active_requests", ar), ("allocated_bytes", alb),
                       ("allocations", al)):
        for field, v in zip(("allocated", "current", "freed", "peak"), vals):
            w[f"{name}.{field}"] = v
    w.update({"host_alloc_time.count": alloc_count, "host_free_time.count": free_count,
              "num_host_alloc": nalloc, "num_host_free": nfree})
    return w


def main():
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    torch.cuda.init()
    steps, bad = [], 0

    def check(label, expected):
        nonlocal bad
        got = stats()
        diff = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
        steps.append({"step": label, "stats": got, "expected": expected, "diff": diff})
        print(f"{label}: " + ("ok" if not diff else f"DIFF (got, want) {diff}"))
        bad += bool(diff)

    print("torch", torch.__version__, "keys:", sorted(torch.cuda.host_memory_stats().keys()))
    # 1. PyTorch's test_host_memory_stats sizes, then a free with no recorded stream (Q1) and a reuse.
    a = torch.empty(10 * 1024 * 4, dtype=torch.uint8, pin_memory=True)
    check("malloc a", want([K64, K64, 0, K64], [1, 1, 0, 1], [K64, K64, 0, K64], [1, 1, 0, 1], 1, 0, 1, 0))
    b = torch.empty(20 * 1024 * 4, dtype=torch.uint8, pin_memory=True)
    w = want([K64 + K128, K64 + K128, 0, K64 + K128], [2, 2, 0, 2], [K64 + K128, K64 + K128, 0, K64 + K128],
             [2, 2, 0, 2], 2, 0, 2, 0)
    check("malloc b", w)
    a_ptr = a.data_ptr()
    del a
    check("free a (no stream: Q1)", w)
    c = torch.empty(50000, dtype=torch.uint8, pin_memory=True)
    assert c.data_ptr() == a_ptr, "c did not reuse a's block"
    w = want([2 * K64 + K128] * 2 + [0, 2 * K64 + K128], [3, 3, 0, 3], [K64 + K128, K64 + K128, 0, K64 + K128],
             [2, 2, 0, 2], 2, 0, 2, 0)
    check("malloc c (reuses a)", w)
    del b, c
    torch._C._host_emptyCache()
    w = want([2 * K64 + K128] * 2 + [0, 2 * K64 + K128], [3, 3, 0, 3], [K64 + K128, 0, K64 + K128, K64 + K128],
             [2, 0, 2, 2], 2, 2, 2, 2)
    check("free b, c, empty_cache", w)

    # 2. A block whose non_blocking copy is still running is not reused; once it completes it is (Q2).
    torch.cuda.reset_peak_host_memory_stats()
    torch.cuda.reset_accumulated_host_memory_stats()
    base = stats()
    side = torch.cuda.Stream()
    dst = torch.empty(M, dtype=torch.uint8, device="cuda")
    x = torch.empty(M, dtype=torch.uint8, pin_memory=True)
    x_ptr = x.data_ptr()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # about a second of work ahead of the copy
        dst.copy_(x, non_blocking=True)  # records side on x's block
    del x  # its event is recorded on side: pending
    y = torch.empty(M, dtype=torch.uint8, pin_memory=True)
    assert y.data_ptr() != x_ptr, "a pending block was reused (the sleep was too short?)"
    side.synchronize()
    z = torch.empty(M, dtype=torch.uint8, pin_memory=True)
    assert z.data_ptr() == x_ptr, "the completed block was not reused"
    # relative to base: x and y new blocks (2 x 1 MiB), three hand-outs, one return through its event
    ab0 = base["active_bytes.current"]
    ar0 = base["active_requests.current"]
    w = want([3 * M, ab0 + 3 * M + 1, -1, None], [3, ar0 + 2, 1, None], [2 * M, 2 * M, 0, 2 * M], [2, 2, 0, 2],
             2, 0, 2, 0)
    w = {k: v for k, v in w.items() if v is not None}  # peaks: summed per bucket, they depend on base
    check("event reuse (Q2)", w)
    del y, z, dst

    if out:
        with open(out, "w") as f:
            json.dump({"torch": torch.__version__, "steps": steps}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
