#!/usr/bin/env python3
"""Which PyTorch function made each device allocation of a script (run on a GPU with PyTorch): a guide for
reading a plain recording (predict_record.py keeps no frames), as oplabels.py is for eager ops.

    python3 scripts/twins/alloc_frames.py --out LOG [--inductor-cache DIR] SCRIPT [ARGS...]

The script runs unmodified (as `python SCRIPT ARGS`) under torch.cuda.memory._record_memory_history with Python
stacks; LOG gets one line per trace event: its index, action, size, stream, and the innermost frames inside torch/
(function and file:line, at most four), else the script's own. --inductor-cache: TORCHINDUCTOR_CACHE_DIR for the
run (a fresh one is made under $TMPDIR by default: a cold compile).
"""
import argparse
import os
import runpy
import sys
import tempfile


def frames_of(ev):
    fr = ev.get("frames") or []
    inner = [f for f in fr if "/torch/" in f.get("filename", "")][:4]
    if not inner:
        inner = fr[:2]
    return " < ".join("%s %s:%d" % (f.get("name"), f.get("filename", "").split("/torch/")[-1], f.get("line", 0))
                      for f in inner)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--inductor-cache")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    o = ap.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = o.inductor_cache or tempfile.mkdtemp(prefix="inductor-")
    import torch
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2000000)
    sys.argv = [o.script] + o.args
    try:
        runpy.run_path(o.script, run_name="__main__")
    finally:
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        tmp = o.out + ".tmp"
        with open(tmp, "w") as f:
            for i, ev in enumerate(snap["device_traces"][0]):
                f.write("%d %s %d s%d %s\n" % (i, ev["action"], ev["size"], ev.get("stream", 0), frames_of(ev)))
        os.replace(tmp, o.out)


if __name__ == "__main__":
    main()
