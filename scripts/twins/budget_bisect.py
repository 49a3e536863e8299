#!/usr/bin/env python3
"""The smallest budget (whole MiB) under which a record_traces.py workload runs in PyTorch without an OOM
(run on a GPU with PyTorch).

    python3 scripts/twins/budget_bisect.py OUTDIR NAME [-j JOBS]

NAME is a record_traces.py trace. Each try is a fresh process recording NAME under
set_per_process_memory_fraction(B MiB / total) (OOMLAB_TRACE_BUDGET); JOBS tries run at once, spread evenly
over the interval still open, until the largest failing and the smallest passing budget are 1 MiB apart.
The interval starts at [allocated peak - 1 MiB, reserved peak] of the uncapped run (OUTDIR/NAME.*, recorded
first when missing). Writes OUTDIR/NAME.bisect.json ({"tries": {MiB: {"allowed", "ooms", "reserved_peak"}},
"pass_mib", "fail_mib"}) and the two recordings at the edge: OUTDIR/NAME_cap_pass.{trace,stats}.json and
OUTDIR/NAME_cap_oom.{trace,stats}.json.
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


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir, name = argv[0], argv[1]
    jobs = int(argv[3]) if len(argv) > 3 and argv[2] == "-j" else 8
    os.makedirs(outdir, exist_ok=True)
    stats_path = os.path.join(outdir, name + ".stats.json")
    if not os.path.exists(stats_path) and not record_traces.record(outdir, name):
        return 1
    with open(stats_path) as f:
        st = json.load(f)["memory_stats"]
    lo = st["allocated_bytes.all.peak"] // MiB - 1
    hi = -(-st["reserved_bytes.all.peak"] // MiB)
    work = tempfile.mkdtemp(prefix="bisect_")
    tries = {}

    def attempt(mib):
        d = os.path.join(work, str(mib))
        os.makedirs(d, exist_ok=True)
        if not record_traces.record(d, name, {"OOMLAB_TRACE_BUDGET": str(mib * MiB)}):
            raise SystemExit(f"budget_bisect: {name} at {mib} MiB failed to run")
        with open(os.path.join(d, name + ".stats.json")) as f:
            rec = json.load(f)
        m = rec["memory_stats"]
        tries[mib] = {"allowed": rec["allowed"], "ooms": m["num_ooms"], "reserved_peak": m["reserved_bytes.all.peak"],
                      "retries": m["num_alloc_retries"]}
        return m["num_ooms"] == 0

    while hi - lo > 1:
        n = min(jobs, hi - lo - 1)
        pts = sorted({lo + (hi - lo) * (k + 1) // (n + 1) for k in range(n)} - {lo, hi})
        with ThreadPoolExecutor(jobs) as pool:
            ok = dict(zip(pts, pool.map(attempt, pts)))
        passing = [p for p in pts if ok[p]]
        if passing:
            hi = min(passing)
        failing = [p for p in pts if not ok[p] and p < hi]
        if failing:
            lo = max(failing)
        print(f"budget_bisect: {name}: fails at {lo} MiB, runs at {hi} MiB", flush=True)
    if lo not in tries:
        attempt(lo)
    if hi not in tries:
        attempt(hi)
    for mib, tag in ((hi, "cap_pass"), (lo, "cap_oom")):
        for ext in ("trace.json", "stats.json"):
            shutil.copy(os.path.join(work, str(mib), f"{name}.{ext}"), os.path.join(outdir, f"{name}_{tag}.{ext}"))
    with open(os.path.join(outdir, name + ".bisect.json"), "w") as f:
        json.dump({"name": name, "pass_mib": hi, "fail_mib": lo,
                   "tries": {str(k): v for k, v in sorted(tries.items())}}, f, indent=1)
    shutil.rmtree(work)
    print(f"budget_bisect: {name} needs {hi} MiB (OOM at {lo} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
