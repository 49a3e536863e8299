#!/usr/bin/env python3
"""Raw seed inputs of the libFuzzer harnesses (tests/fuzz/README.md), cut small enough for -max_len.

    tests/fuzz/make_seeds.py OUTDIR [RESULTS_DIR]

writes OUTDIR/replay, OUTDIR/allocconf and OUTDIR/results:
  replay     every tests/data/*.trace.json, its trace cut to its first 8, 40 and 200 events per device (the
             keys the reader reads: action, addr or device_free, size, stream), with its allocator_settings and
             budget; the segments list is dropped (replay does not read it)
  allocconf  every settings string in tests/test_allocconf.c and in the traces' allocator_settings
  results    every results file under RESULTS_DIR (oomlab run --out RESULTS_DIR), without memory_stats, at most
             3 variants of 6 samples each
The committed corpora are these, minimised with libFuzzer's -merge=1 (README.md).
"""
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LEN = 65536


def write(out, name, text):
    data = text.encode()
    if len(data) <= MAX_LEN:
        (out / name).write_bytes(data)


def compact(doc):
    return json.dumps(doc, separators=(",", ":"))


def replay_seeds(out):
    for path in sorted((ROOT / "tests/data").glob("*.trace.json")):
        doc = json.loads(path.read_text())
        for n in (8, 40, 200):
            cut = {k: doc[k] for k in ("allocator_settings", "budget") if k in doc}
            cut["device_traces"] = [
                [{k: e[k] for k in ("action", "addr", "device_free", "size", "stream") if k in e} for e in t[:n]]
                for t in doc["device_traces"]
            ]
            write(out, f"{path.stem}.{n}.json", compact(cut))


def allocconf_seeds(out):
    seen = set()
    src = (ROOT / "tests/test_allocconf.c").read_text()
    for s in re.findall(r'"((?:[^"\\]|\\.)*)"', src):
        if ":" in s and re.match(r"\s*[a-z_]+\s*:", s):
            seen.add(s.encode().decode("unicode_escape"))
    for path in (ROOT / "tests/data").glob("*.trace.json"):
        conf = json.loads(path.read_text()).get("allocator_settings", {}).get("PYTORCH_CUDA_ALLOC_CONF")
        if conf:
            seen.add(conf)
    for i, s in enumerate(sorted(seen)):
        write(out, f"conf{i:03d}.txt", s)


def results_seeds(out, results_dir):
    for i, path in enumerate(sorted(pathlib.Path(results_dir).rglob("*.json"))):
        doc = json.loads(path.read_text())
        for v in doc.get("variants", [])[:3]:
            v.pop("memory_stats", None)
            v["samples"] = v.get("samples", [])[:6]
            for d in v.get("devices", []):
                d.pop("memory_stats", None)
                d["samples"] = d.get("samples", [])[:6]
        doc["variants"] = doc.get("variants", [])[:3]
        write(out, f"{i:03d}.{path.stem}.json", compact(doc))


def main():
    out = pathlib.Path(sys.argv[1])
    for name in ("replay", "allocconf", "results"):
        (out / name).mkdir(parents=True, exist_ok=True)
    replay_seeds(out / "replay")
    allocconf_seeds(out / "allocconf")
    if len(sys.argv) > 2:
        results_seeds(out / "results", sys.argv[2])


if __name__ == "__main__":
    main()
