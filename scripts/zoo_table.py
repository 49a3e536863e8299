#!/usr/bin/env python3
"""The zoo's table: `oomlab predict` on every zoo script against PyTorch's recording (docs/parity.md, "The zoo").

    scripts/zoo_table.py [--oomlab BIN] [-j JOBS] [--gpu H200] [--out DIR] [--markdown] [NAME ...]

For each case of tests/data/predict/zoo (NAME.torch.json, NAME.trace.json.xz; scripts/NAME.py), runs
`BIN predict --json --gpu GPU --trace DIR/NAME.trace.json` on the script (JOBS at once, default 2) and prints, per
script, predicted against recorded: peak allocated, peak reserved, the minimum budgets (defaults and
expandable_segments:True; "-" where the recording has none), and whether the predicted trace is the recording's
event for event (allocs and frees, action and size, in order: "exact"; "allocs" when every allocation is the
recording's in order and only frees are ordered otherwise; else the number of aligned events). --markdown prints
docs/parity.md's table. Standard library only; DIR (default a temporary folder) keeps the outputs.
"""
import argparse
import difflib
import json
import lzma
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
ZOO = os.path.join(ROOT, "tests", "data", "predict", "zoo")
SETTINGS = (("defaults", ""), ("expandable_segments:True", "expandable_segments:True"))


def events(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        ev = json.load(f)["device_traces"][0]
    return [("A" if e["action"] == "alloc" else "F", e["size"]) for e in ev
            if e["action"] in ("alloc", "free_completed")]


def status(rec, pred):
    if rec == pred:
        return "exact"
    ra, pa = [e for e in rec if e[0] == "A"], [e for e in pred if e[0] == "A"]
    if ra == pa and len(rec) == len(pred):
        return "allocs"
    sm = difflib.SequenceMatcher(None, rec, pred, autojunk=False)
    return "%d/%d" % (sum(n for _, _, n in sm.get_matching_blocks()), len(rec))


def one(opts, name):
    out = os.path.join(opts.out, name)
    cmd = [opts.oomlab, "predict", "--json", "--gpu", opts.gpu, "--trace", out + ".trace.json",
           os.path.join(ZOO, "scripts", name + ".py")]
    env = {k: v for k, v in os.environ.items()
           if k not in ("OOMLAB_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    with open(out + ".json", "w") as f, open(out + ".err", "w") as e:
        rc = subprocess.run(cmd, stdout=f, stderr=e, env=env).returncode
    with open(os.path.join(ZOO, name + ".torch.json")) as f:
        rec = json.load(f)
    row = {"name": name, "rc": rc, "rec": rec}
    if rc == 0:
        with open(out + ".json") as f:
            row["pred"] = json.load(f)
        row["events"] = status(events(os.path.join(ZOO, name + ".trace.json.xz")), events(out + ".trace.json"))
    return row


def pct(a, b):
    return "%+.2f%%" % (100.0 * (a - b) / b) if b else "n/a"


def minb(pred, conf):
    for r in pred["advise"]["settings"]:
        if r["alloc_conf"] == conf:
            return r["min_budget_mib"]
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--oomlab", default=os.path.join(ROOT, "build", "oomlab"))
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--out")
    ap.add_argument("--markdown", action="store_true")
    opts = ap.parse_args(argv)
    opts.out = opts.out or tempfile.mkdtemp(prefix="zoo_table.")
    os.makedirs(opts.out, exist_ok=True)
    names = opts.names or sorted(f[:-len(".torch.json")] for f in os.listdir(ZOO) if f.endswith(".torch.json"))
    with ThreadPoolExecutor(opts.jobs) as pool:
        rows = list(pool.map(lambda n: one(opts, n), names))
    exact = 0
    for r in rows:
        rec = r["rec"]
        if r["rc"] != 0:
            print("%-24s predict exit %d (%s)" % (r["name"], r["rc"], os.path.join(opts.out, r["name"] + ".err")))
            continue
        p = r["pred"]
        mins = rec.get("min_budget_mib") or {}
        mb = []
        for s, conf in SETTINGS:
            got, want = minb(p, conf), mins.get(s)
            mb.append("%s/%s" % (got, want if want is not None else "-"))
        da, dr = p["peak_allocated"] - rec["peak_allocated"], p["peak_reserved"] - rec["peak_reserved"]
        exact += da == 0 and dr == 0
        if opts.markdown:
            print("| %s | %s / %s | %s / %s | %s | %s | %s |" % (
                r["name"], format(p["peak_allocated"], ","), format(rec["peak_allocated"], ","),
                format(p["peak_reserved"], ","), format(rec["peak_reserved"], ","), mb[0], mb[1], r["events"]))
        else:
            print("%-24s alloc %+13d (%s)  reserved %+13d (%s)  min %-11s exp %-11s events %s" % (
                r["name"], da, pct(p["peak_allocated"], rec["peak_allocated"]), dr,
                pct(p["peak_reserved"], rec["peak_reserved"]), mb[0], mb[1], r["events"]))
    print("%d of %d exact on both peaks; outputs in %s" % (exact, len(rows), opts.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
