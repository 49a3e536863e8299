#!/usr/bin/env python3
"""Check `oomlab advise`'s minimum budgets against PyTorch (run on a GPU with PyTorch).

    python3 scripts/twins/advise_verify.py ADVISE.json NAME OUT.verdict.json [--setting S]... [-j JOBS]

ADVISE.json is `oomlab advise NAME.trace.json --json` for the recording of advise_record.py workload NAME. For each
setting checked (default: PyTorch's defaults, expandable_segments:True, and advise's best setting), the workload runs
in fresh processes under PYTORCH_CUDA_ALLOC_CONF=S and set_per_process_memory_fraction(B / total_memory) at the
predicted minimum budget B and at B - 1 MiB; advise's definition of B (advise.h) holds in PyTorch when the first
runs without an OOM and the second runs out of memory. Where advise knew the recorded budget, every setting also
runs there, against advise's "fits_at_recorded_budget".

Writes OUT.verdict.json (schema oomlab.advise_verdict/1, read by tests/test_advise.c):
  {"schema", "workload", "trace": "NAME.trace.json" (beside the verdict), "device_total", "torch", "device",
   "step_marker" (when advise used one), "checks": [{"alloc_conf", "min_budget_mib", "at_min": {"allowed", "ooms"},
   "below": {"allowed", "ooms"}, "agree"}], "at_recorded_budget": [{"alloc_conf", "budget", "oomlab_fits",
   "pytorch_ooms", "agree"}]}
A check PyTorch disagrees with stays in the file with "agree": false; tests/test_advise.c fails on it until it is
explained with "known_difference": "why" (docs/parity.md).
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import advise_record  # noqa: E402

MiB = 1 << 20


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    advise_path, name, out = argv[0], argv[1], argv[2]
    settings, jobs, rest = [], 6, argv[3:]
    while rest:
        a = rest.pop(0)
        if a == "--setting":
            settings.append(rest.pop(0))
        elif a == "-j":
            jobs = int(rest.pop(0))
        else:
            print("advise_verify: unexpected argument %r" % a, file=sys.stderr)
            return 2
    with open(advise_path) as f:
        adv = json.load(f)
    rows = {r["alloc_conf"]: r for r in adv["settings"]}
    if not settings:
        settings = ["", "expandable_segments:True"]
        if adv.get("best") is not None and adv["best"] not in settings:
            settings.append(adv["best"])
    runs = []  # (kind, conf, budget)
    for s in settings:
        r = rows.get(s)
        if r is None:
            print("advise_verify: %s has no setting %r" % (advise_path, s), file=sys.stderr)
            return 2
        if r["fits"]:
            b = r["min_budget_mib"]
            runs += [("at_min", s, b * MiB), ("below", s, (b - 1) * MiB)]
    rec = adv.get("recorded_budget")
    if rec:
        runs += [("recorded", s, rec) for s in settings]
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda k: advise_record.run(name, k[1], k[2]), runs))
    if any(r is None for r in results):
        return 1
    got = {(k[0], k[1]): r for k, r in zip(runs, results)}
    total = results[0]["total_memory"] if results else None
    if total is not None and total != adv["device_total"]:
        print("advise_verify: this GPU has %d bytes, advise's budgets are fractions of %d (an H100 80GB): the "
              "caps differ, so the verdict is not comparable" % (total, adv["device_total"]), file=sys.stderr)
    checks, at_rec = [], []
    for s in settings:
        r = rows[s]
        if not r["fits"]:
            continue
        a, b = got[("at_min", s)], got[("below", s)]
        checks.append({"alloc_conf": s, "min_budget_mib": r["min_budget_mib"],
                       "at_min": {"allowed": a["allowed"], "ooms": a["ooms"], "reserved_peak": a["reserved_peak"]},
                       "below": {"allowed": b["allowed"], "ooms": b["ooms"], "reserved_peak": b["reserved_peak"]},
                       "agree": a["ooms"] == 0 and b["ooms"] > 0})
    if rec:
        for s in settings:
            p = got[("recorded", s)]
            fits = rows[s]["fits_at_recorded_budget"]
            at_rec.append({"alloc_conf": s, "budget": rec, "oomlab_fits": fits, "pytorch_ooms": p["ooms"],
                           "agree": fits == (p["ooms"] == 0)})
    verdict = {"schema": "oomlab.advise_verdict/1", "workload": name, "trace": name + ".trace.json",
               "device_total": total, "torch": results[0]["torch"] if results else None,
               "device": results[0]["device"] if results else None, "checks": checks,
               "at_recorded_budget": at_rec}
    if adv.get("steps", {}).get("found_by") == "--step-marker":
        verdict["step_marker"] = "step "
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(verdict, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)
    for c in checks:
        print("advise_verify: %-20s %-32r %5d MiB: PyTorch %s there, %s 1 MiB below  %s" %
              (name, c["alloc_conf"], c["min_budget_mib"], "OOMs" if c["at_min"]["ooms"] else "runs",
               "OOMs" if c["below"]["ooms"] else "runs", "agrees" if c["agree"] else "DISAGREES"), flush=True)
    for c in at_rec:
        print("advise_verify: %-20s %-32r at the recorded %d bytes: oomlab %s, PyTorch %s  %s" %
              (name, c["alloc_conf"], c["budget"], "fits" if c["oomlab_fits"] else "OOMs",
               "OOMs" if c["pytorch_ooms"] else "runs", "agrees" if c["agree"] else "DISAGREES"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
