#!/usr/bin/env python3
"""Where a predicted trace departs from PyTorch's recording, event by event (a developer's tool for the zoo).

    scripts/predict_diff.py RECORDED.trace.json[.xz] PREDICTED.trace.json [--labelled LABELLED.trace.json[.xz]]
                            [--hunks N] [--context K]

Both traces' allocs and frees (action and size, in order) are aligned (difflib); each hunk where they differ is
printed with the predicted events' labels (the capture's "step S: op at file:line") and, with --labelled, the op
that PyTorch's labelled recording (scripts/twins/oplabels.py) names for the nearest recorded events (that
recording is aligned to the plain one the same way: its labels are a guide, since the mode changes a few
allocations). Standard library only.
"""
import argparse
import difflib
import json
import lzma
import sys


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        ev = json.load(f)["device_traces"][0]
    return [e for e in ev if e["action"] in ("alloc", "free_completed")]


def key(e):
    return ("A" if e["action"] == "alloc" else "F", e["size"])


def fmt(e, label=None):
    lab = label if label is not None else e.get("user_metadata", "")
    return "%s %12d  %s" % (key(e)[0], e["size"], lab)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recorded")
    ap.add_argument("predicted")
    ap.add_argument("--labelled")
    ap.add_argument("--hunks", type=int, default=8)
    ap.add_argument("--context", type=int, default=2)
    o = ap.parse_args(argv)
    rec, pred = load(o.recorded), load(o.predicted)
    labels = [None] * len(rec)
    if o.labelled:
        lab = load(o.labelled)
        sm = difflib.SequenceMatcher(None, [key(e) for e in rec], [key(e) for e in lab], autojunk=False)
        for a, b, n in sm.get_matching_blocks():
            for i in range(n):
                labels[a + i] = "[" + (lab[b + i].get("user_metadata") or "") + "]"
        last = None
        for i in range(len(rec)):  # unmatched events: the label before them, marked "~"
            if labels[i] is None:
                labels[i] = ("~" + last) if last else "~?"
            else:
                last = labels[i]
    ra = sum(1 for e in rec if e["action"] == "alloc")
    pa = sum(1 for e in pred if e["action"] == "alloc")
    sm = difflib.SequenceMatcher(None, [key(e) for e in rec], [key(e) for e in pred], autojunk=False)
    ops = [op for op in sm.get_opcodes() if op[0] != "equal"]
    same = sum(n for _, _, n in sm.get_matching_blocks())
    print("recorded %d events (%d allocs), predicted %d (%d allocs); %d aligned, %d hunks differ" %
          (len(rec), ra, len(pred), pa, same, len(ops)))
    for tag, i1, i2, j1, j2 in ops[:o.hunks]:
        print("\n@@ %s recorded [%d:%d] predicted [%d:%d]" % (tag, i1, i2, j1, j2))
        for i in range(max(0, i1 - o.context), i1):
            print("   = %s" % fmt(rec[i], labels[i]))
        for i in range(i1, min(i2, i1 + 12)):
            print("   R %s" % fmt(rec[i], labels[i]))
        if i2 - i1 > 12:
            print("   R ... %d more" % (i2 - i1 - 12))
        for j in range(j1, min(j2, j1 + 12)):
            print("   P %s" % fmt(pred[j]))
        if j2 - j1 > 12:
            print("   P ... %d more" % (j2 - j1 - 12))
    if len(ops) > o.hunks:
        print("\n... %d more hunks" % (len(ops) - o.hunks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
