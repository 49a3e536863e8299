#!/usr/bin/env python3
"""Raw seed inputs of the libFuzzer harnesses (tests/fuzz/README.md), cut small enough for -max_len.

    tests/fuzz/make_seeds.py OUTDIR [RESULTS_DIR]

writes OUTDIR/replay, OUTDIR/allocconf, OUTDIR/results and OUTDIR/figures:
  replay     every tests/data/*.trace.json, its trace cut to its first 8, 40 and 200 events per device (the
             keys the reader reads: action, addr or device_free, size, stream), with its allocator_settings and
             budget; the segments list is dropped (replay does not read it)
  allocconf  every settings string in tests/test_allocconf.c and in the traces' allocator_settings
  results    every results file under RESULTS_DIR (oomlab run --out RESULTS_DIR), without memory_stats, at most
             3 variants of 6 samples each
  figures    every results file under RESULTS_DIR cut the same way but keeping memory_stats (as {}: plot and
             report read results through runset, which asks for it), then fragmentation's and inference_oom's
             with issue 16's crafted strings (backquotes, $( ), newlines, quotes, <script>, ../) in every string a
             figure or the page shows, and history CSVs with them in every field
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


CRAFTED = [
    "bug`touch ran`",
    "v$(touch ran)",
    "n\nsystem 'touch ran'\n!touch ran",
    "q'\"`touch ran`\"' \\ @m",
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(1)>",
    "../../escaped",
]


def cut(doc, keep_stats):
    for v in doc.get("variants", [])[:3]:
        if keep_stats:
            v["memory_stats"] = {}
        else:
            v.pop("memory_stats", None)
        v["samples"] = v.get("samples", [])[:6]
        for d in v.get("devices", []):
            d.pop("memory_stats", None)
            d["samples"] = d.get("samples", [])[:6]
    doc["variants"] = doc.get("variants", [])[:3]
    return doc


def figures_seeds(out, results_dir):
    for i, path in enumerate(sorted(pathlib.Path(results_dir).rglob("*.json"))):
        doc = cut(json.loads(path.read_text()), True)
        write(out, f"{i:03d}.{path.stem}.json", compact(doc))
        if path.stem not in ("fragmentation", "inference_oom"):
            continue
        for k, s in enumerate(CRAFTED):
            d = json.loads(compact(doc))
            for key in ("backend", "scale", "device"):
                d[key] = s
            d["params"][s] = 1
            for j, v in enumerate(d["variants"]):
                v["name"] = f"{s}{j}"
                v["outcome"] = s
                v["kind"] = s
                v["summary"] = s
                v["notes"] = [s]
                for e in v["expectations"]:
                    e["text"] = s
                for smp in v["samples"]:
                    smp["label"] = s
                if isinstance(v.get("oom"), dict):
                    v["oom"]["what"] = s
                    v["oom"]["message"] = s
            write(out, f"crafted{k}.{path.stem}.json", compact(d))
            d["scenario"] = s  # not in the catalog: the report refuses it, the figures draw it
            write(out, f"crafted{k}.scenario.json", compact(d))
    header = "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
    for k, s in enumerate(CRAFTED):
        q = '"' + s.replace('"', '""') + '"'
        rows = "".join(f"2026-11-0{n + 1},{q},sim,{q},ci,fragmentation,{q},peak_reserved,{n + 1}\n" for n in range(3))
        rows += f"2026-11-04,c,{q},sim,{q},{q},bug,{q},5\n"
        write(out, f"history{k}.csv", header + rows)


def main():
    out = pathlib.Path(sys.argv[1])
    for name in ("replay", "allocconf", "results", "figures"):
        (out / name).mkdir(parents=True, exist_ok=True)
    replay_seeds(out / "replay")
    allocconf_seeds(out / "allocconf")
    if len(sys.argv) > 2:
        results_seeds(out / "results", sys.argv[2])
        figures_seeds(out / "figures", sys.argv[2])


if __name__ == "__main__":
    main()
