#!/usr/bin/env python3
"""Write a synthetic snapshot for timing `oomlab replay` (BENCHMARKS.md, "The checked build and the optimised one"):
105,000 events on cuda:0 with 5,000 blocks live throughout: 5,000 allocations, then 50,000 pairs of a free of a
random live block and a new allocation (sizes 512 B to 12 MiB). It records no segment events, so the replay reports
a divergence at event 0 and exits 1: the figure is the time, not the check.

    scripts/make_bench_trace.py OUT.json
"""
import json
import random
import sys


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: make_bench_trace.py OUT.json")
    rng = random.Random(1)
    events, live, addr = [], [], 1 << 40

    def alloc():
        nonlocal addr
        size = rng.choice([512, 4096, 65536, 1 << 20, 3 << 20]) * rng.randint(1, 4)
        events.append({"action": "alloc", "addr": addr, "size": size})
        live.append(addr)
        addr += 1 << 24

    for _ in range(5000):
        alloc()
    for _ in range(50000):
        i = rng.randrange(len(live))
        a = live[i]
        live[i] = live[-1]
        live.pop()
        events.append({"action": "free_requested", "addr": a, "size": 0})
        alloc()
    with open(argv[1], "w") as f:
        json.dump({"device_traces": [events], "allocator_settings": {}}, f)
    print(f"{argv[1]}: {len(events)} events, {len(live)} live blocks")


if __name__ == "__main__":
    main(sys.argv)
