#!/usr/bin/env python3
"""`oomlab advise` proven against PyTorch in one GPU call: record, advise, verify (run on a GPU with PyTorch).

    python3 scripts/twins/advise_gpu.py --out DIR --oomlab BINARY [-j JOBS] [NAME ...]

1. scripts/twins/advise_record.py records the workloads (default: all three) into DIR;
2. BINARY advise DIR/NAME.trace.json --json (and the text, for the README) on the sim backend's replays, with
   --step-marker "step " where the recording carries step marks;
3. scripts/twins/advise_verify.py runs each workload at the predicted minimum budget and 1 MiB below for
   PyTorch's defaults, expandable_segments:True and the best setting, and at the recorded budget;
4. DIR/summary.txt: every check, agreed or not; DIR/advise.tar.gz: every file, for tests/data/advise/.
BINARY's own lib/ folder (make gpu-bundle's .gpubundle/lib) goes on LD_LIBRARY_PATH: the GPU machine has no cJSON.
Takes about 2 to 4 minutes on an H100 (the recordings, then 6 runs at once per workload).
"""
import json
import os
import re
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import advise_record  # noqa: E402
import advise_verify  # noqa: E402


def main(argv):
    out, binary, jobs, names = None, None, "6", []
    rest = list(argv)
    while rest:
        a = rest.pop(0)
        if a == "--out":
            out = rest.pop(0)
        elif a == "--oomlab":
            binary = rest.pop(0)
        elif a == "-j":
            jobs = rest.pop(0)
        else:
            names.append(a)
    if not out or not binary:
        print(__doc__, file=sys.stderr)
        return 2
    names = names or list(advise_record.WORKLOADS)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    lib = os.path.join(os.path.dirname(os.path.abspath(binary)), "lib")
    if os.path.isdir(lib):
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    for k in ("OOMLAB_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
        env.pop(k, None)
    t0 = time.time()
    if advise_record.main([out, "-j", "3"] + names) != 0:
        return 1
    print("advise_gpu: recorded in %.0f s" % (time.time() - t0), flush=True)
    lines, failed = [], False
    for n in names:
        trace = os.path.join(out, n + ".trace.json")
        with open(trace) as f:
            marked = re.search(r'"user_metadata":\s*"step ', f.read()) is not None
        args = [binary, "advise", trace]  # its replays run on the sim's model whatever the machine
        if marked:
            args += ["--step-marker", "step "]
        for fmt, ext in (([], ".advise.txt"), (["--json"], ".advise.json")):
            p = subprocess.run(args + fmt, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                print("advise_gpu: %s failed (%d): %s" % (" ".join(args + fmt), p.returncode, p.stderr),
                      file=sys.stderr)
                return 1
            with open(os.path.join(out, n + ext), "w") as f:
                f.write(p.stdout)
        print("advise_gpu: advised %s" % n, flush=True)
        verdict = os.path.join(out, n + ".verdict.json")
        if advise_verify.main([os.path.join(out, n + ".advise.json"), n, verdict, "-j", jobs]) != 0:
            return 1
        with open(verdict) as f:
            v = json.load(f)
        for c in v["checks"]:
            failed |= not c["agree"]
            lines.append("%-20s %-34r min budget %5d MiB: PyTorch %s at it, %s 1 MiB below: %s" %
                         (n, c["alloc_conf"], c["min_budget_mib"], "OOMs" if c["at_min"]["ooms"] else "runs",
                          "OOMs" if c["below"]["ooms"] else "runs", "agrees" if c["agree"] else "DISAGREES"))
        for c in v["at_recorded_budget"]:
            failed |= not c["agree"]
            lines.append("%-20s %-34r recorded budget %d: oomlab %s, PyTorch %s: %s" %
                         (n, c["alloc_conf"], c["budget"], "fits" if c["oomlab_fits"] else "OOMs",
                          "OOMs" if c["pytorch_ooms"] else "runs", "agrees" if c["agree"] else "DISAGREES"))
    lines.append("advise_gpu: %s in %.0f s (%s)" % ("every check agrees" if not failed else "SOME CHECKS DISAGREE",
                                                   time.time() - t0, v.get("device")))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with tarfile.open(os.path.join(out, "advise.tar.gz"), "w:gz") as tar:
        for n in names:
            for ext in (".trace.json", ".stats.json", ".advise.json", ".advise.txt", ".verdict.json"):
                tar.add(os.path.join(out, n + ext), arcname=n + ext)
    for n in names:  # only summary.txt and the archive come back from the device tool (8 files at most)
        for ext in (".trace.json", ".stats.json", ".advise.json", ".advise.txt", ".verdict.json"):
            os.unlink(os.path.join(out, n + ext))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
