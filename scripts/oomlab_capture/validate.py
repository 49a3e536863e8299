"""Compare captures of scripts/twins/record_traces.py's workloads with their H100 recordings in tests/data.

    PYTHONPATH=scripts python -m oomlab_capture.validate [--out DIR] [NAME ...]

For each workload: the capture's alloc/free sequence against the recording's (segment events and
free_completed left out; addresses matched by first appearance), the first difference, and the peak of the
live requested bytes rounded to 512 as the caching allocator rounds them (allocated_bytes up to unsplit
blocks). Needs no GPU.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# workload -> its recording under tests/data
RECORDED = {"train_mlp": "train_mlp", "transformer": "addr_transformer", "transformer_s2": "addr_transformer_s2",
            "tfm4": "addr_tfm4", "gpt": "addr_gpt", "resnet18": "resnet18", "resnet18_b16": "addr_resnet18_b16",
            "resnet50_b8": "addr_resnet50_b8", "resnet50_b32": "addr_resnet50_b32"}


def seq(events):
    ids, out, n = {}, [], 0
    for e in events:
        if e["action"] not in ("alloc", "free_requested"):
            continue
        if e["action"] == "alloc":
            ids[e["addr"]] = n = len(out)
        out.append((e["action"], e["size"], ids.get(e["addr"], -1), e.get("user_metadata", "")))
    return out


def peak(s):
    live = cur = top = 0
    sizes = {}
    for action, size, i, _ in s:
        r = max(512, (size + 511) // 512 * 512)
        if action == "alloc":
            sizes[i] = r
            cur += r
            top = max(top, cur)
        else:
            cur -= sizes.pop(i, 0)
    return top


def compare(pred, rec):
    a, b = seq(pred), seq(rec)
    first = None
    for i, (x, y) in enumerate(zip(a, b)):
        if x[:3] != y[:3]:
            first = i
            break
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    sizes_first = next((i for i, (x, y) in enumerate(zip(a, b)) if x[:2] != y[:2]), None)
    return {"events_pred": len(a), "events_rec": len(b), "equal": first is None, "first_diff": first,
            "first_size_diff": sizes_first,
            "peak_pred": peak(a), "peak_rec": peak(b),
            "context": None if first is None else {"pred": a[max(0, first - 3):first + 6],
                                                   "rec": [t[:3] for t in b[max(0, first - 3):first + 6]]},
            "size_context": None if sizes_first is None else {
                "pred": a[max(0, sizes_first - 3):sizes_first + 6],
                "rec": [t[:3] for t in b[max(0, sizes_first - 3):sizes_first + 6]]}}


def run(name, outdir):
    sys.path.insert(0, os.path.join(REPO, "scripts", "twins"))
    import torch
    import record_traces
    import oomlab_capture
    path = os.path.join(outdir, name + ".pred.json")
    with oomlab_capture.capture(path, quiet=True) as cap:
        record_traces.workload(name, torch, [])
    with open(os.path.join(REPO, "tests", "data", RECORDED[name] + ".trace.json")) as f:
        rec = json.load(f)["device_traces"][0]
    r = compare(cap.events, rec)
    r["seconds"] = round(cap.seconds, 2)
    r["ops"] = len(cap.labels) - 1
    return r


def main(argv):
    outdir = "/tmp"
    if argv[:1] == ["--out"]:
        outdir, argv = argv[1], argv[2:]
    for name in argv or list(RECORDED):
        r = run(name, outdir)
        print(json.dumps({name: r}, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
