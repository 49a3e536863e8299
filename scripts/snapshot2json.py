#!/usr/bin/env python3
"""Convert a torch.cuda.memory._dump_snapshot() pickle into the JSON that `oomlab replay` reads.

Standard library only, so it runs where PyTorch is not installed.

    scripts/snapshot2json.py SNAPSHOT.pickle [-o OUT.json] [--strip-frames]

The output is the snapshot dict exactly as json.dump writes it (tuples become lists).
--strip-frames empties every "frames" list, which makes a trace small enough to commit.
Exit status: 0 on success, 2 on bad input (one error line on stderr, nothing written).
"""
import argparse
import json
import os
import pickle
import sys
import tempfile


def strip_frames(obj):
    """Empty every 'frames' list in place, recursively."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "frames" and isinstance(value, list):
                obj[key] = []
            else:
                strip_frames(value)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            strip_frames(item)
    return obj


class _SafeUnpickler(pickle.Unpickler):
    """A snapshot holds only plain containers and scalars: refuse anything else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in snapshot")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", help="output file (default: stdout)")
    ap.add_argument("--strip-frames", action="store_true", help="drop stack frames")
    args = ap.parse_args(argv)
    try:
        with open(args.snapshot, "rb") as f:
            snap = _SafeUnpickler(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as e:
        print(f"snapshot2json: cannot read {args.snapshot}: {e}", file=sys.stderr)
        return 2
    if not isinstance(snap, dict) or "device_traces" not in snap or "segments" not in snap:
        print(f"snapshot2json: {args.snapshot} is not a memory snapshot "
              "(no 'segments'/'device_traces')", file=sys.stderr)
        return 2
    if args.strip_frames:
        strip_frames(snap)
    text = json.dumps(snap, separators=(",", ":"))
    if not args.output:
        sys.stdout.write(text + "\n")
        return 0
    # Atomic write: a temp file in the same folder, then rename.
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"snapshot2json: cannot write {args.output}: the folder {folder} does not exist", file=sys.stderr)
        return 2
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".snapshot2json.")
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        print(f"snapshot2json: cannot write {args.output}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
