#!/usr/bin/env python3
"""Run one record_traces.py workload several times, each in a fresh process, at a budget or uncapped, and say
whether the runs agree (run on a GPU with PyTorch). The CUDA driver's placement of segments is not the same
from run to run of a program that launches kernels, so neither are the caching allocator's best-fit choices.

    python3 scripts/twins/repeat_runs.py OUT.json NAME[@MiB] ... [-n RUNS] [-j JOBS]

NAME@MiB runs under set_per_process_memory_fraction(MiB / total), NAME alone uncapped. OUT.json:
{"NAME[@MiB]": [{"ooms", "retries", "segments", "device_allocs", "reserved_peak", "allocated_peak",
"layout": [[MiB, offset from the first region in MiB], ...] for the first 24 segments}, ...]}.
"""
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_traces  # noqa: E402

MiB = 1 << 20


def layout(trace):
    segs = [e for e in trace["device_traces"][0] if e["action"] in ("segment_alloc", "segment_map")]
    if not segs:
        return []
    e0 = segs[0]
    first_region = e0["addr"] + 66 * MiB if e0["size"] <= 2 * MiB else e0["addr"] - 8 * MiB
    return [[e["size"] // MiB, (e["addr"] - first_region) // MiB] for e in segs[:24]]


def main(argv):
    out, specs, runs, jobs = None, [], 4, 8
    while argv:
        a = argv.pop(0)
        if a == "-n":
            runs = int(argv.pop(0))
        elif a == "-j":
            jobs = int(argv.pop(0))
        elif out is None:
            out = a
        else:
            specs.append(a)
    if not out or not specs:
        print(__doc__, file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="repeat_")

    def one(job):
        spec, k = job
        name, _, mib = spec.partition("@")
        d = os.path.join(work, f"{spec}.{k}")
        os.makedirs(d)
        env = {"OOMLAB_TRACE_BUDGET": str(int(mib) * MiB)} if mib else {}
        if not record_traces.record(d, name, env):
            return spec, None
        with open(os.path.join(d, name + ".stats.json")) as f:
            m = json.load(f)["memory_stats"]
        with open(os.path.join(d, name + ".trace.json")) as f:
            lay = layout(json.load(f))
        return spec, {"ooms": m["num_ooms"], "retries": m["num_alloc_retries"], "segments": m["segment.all.current"],
                      "device_allocs": m["num_device_alloc"], "reserved_peak": m["reserved_bytes.all.peak"],
                      "allocated_peak": m["allocated_bytes.all.peak"], "layout": lay}

    result = {s: [] for s in specs}
    with ThreadPoolExecutor(jobs) as pool:
        for spec, r in pool.map(one, [(s, k) for s in specs for k in range(runs)]):
            if r is not None:
                result[spec].append(r)
    shutil.rmtree(work)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    for spec, rs in result.items():
        summary = sorted({(r["ooms"], r["segments"], r["device_allocs"], r["reserved_peak"]) for r in rs})
        layouts = len({json.dumps(r["layout"]) for r in rs})
        print(f"{spec:24s} {len(rs)} runs: (ooms, segments, device allocs, reserved peak) {summary}; "
              f"{layouts} distinct layouts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
