#!/usr/bin/env python3
"""Convert a torch.cuda.memory._dump_snapshot() pickle into the JSON that `oomlab replay` reads.

Standard library only, so it runs where PyTorch is not installed.

    scripts/snapshot2json.py SNAPSHOT.pickle [-o OUT.json] [--strip-frames] [--budget SIZE]

The output is the snapshot dict exactly as json.dump writes it (tuples become lists).
--strip-frames empties every "frames" list, which makes a trace small enough to commit.
--budget SIZE (bytes, or 1GiB, 512MiB, 1.5GB, ...) adds a top-level "budget": the bytes the program's
torch.cuda.set_per_process_memory_fraction allowed (fraction x total memory), which `oomlab replay` applies.
PyTorch's snapshot does not record it: its "oom" trace entries carry only device_free and size
(torch/csrc/cuda/memory_snapshot.cpp), and the "N GiB allowed" of the OutOfMemoryError text is rounded. A
recording made under a fraction replays faithfully only with its budget.
Exit status: 0 on success, 2 on bad input (one error line on stderr, nothing written). -o OUT writes only a
regular file: an OUT that is a FIFO, a device, a folder or a symbolic link is refused.
"""
import argparse
import fractions
import json
import re
import os
import pickle
import stat
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


# The units of `oomlab --budget` (harness/core/units.c): powers of 1024, or of 1000 for KB..TB.
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def parse_size(text):
    """Bytes from "1073741824", "1GiB", "1.5GiB", "512MB": a whole number > 0, else None."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]{1,12})?)([A-Za-z]*)", text)
    if not m or m.group(2) not in _UNITS:
        return None
    value = fractions.Fraction(m.group(1)) * _UNITS[m.group(2)]
    if value.denominator != 1 or value <= 0 or value >= 1 << 64:
        return None
    return int(value)


class _SafeUnpickler(pickle.Unpickler):
    """A snapshot holds only plain containers and scalars: refuse anything else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in snapshot")


def not_regular(path):
    """Why path cannot be written (it exists and is not a regular file: lstat, a link is not followed), else None.
    The rule of oomlab's writers (harness/core/fileio.c)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot write {path}: {e.strerror}"
    kinds = [(stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket")]
    kind = next((k for test, k in kinds if test(mode)), "not a regular file")
    return f"{path} is {kind}, not a regular file: not replaced (oomlab writes only regular files)" if kind else None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", help="output file (default: stdout)")
    ap.add_argument("--strip-frames", action="store_true", help="drop stack frames")
    ap.add_argument("--budget", metavar="SIZE",
                    help="the bytes set_per_process_memory_fraction allowed (stored as \"budget\")")
    args = ap.parse_args(argv)
    budget = None
    if args.budget is not None:
        budget = parse_size(args.budget)
        if budget is None:
            print(f"snapshot2json: --budget: '{args.budget}' is not a size (bytes, or a number with KiB, MiB, "
                  "GiB, TiB, KB, MB, GB, TB)", file=sys.stderr)
            return 2
    refusal = not_regular(args.output) if args.output else None
    if refusal:  # before any work: only regular files are written
        print(f"snapshot2json: {refusal}", file=sys.stderr)
        return 2
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
    if budget is not None:
        snap["budget"] = budget
    text = json.dumps(snap, separators=(",", ":"))
    if not args.output:
        sys.stdout.write(text + "\n")
        return 0
    # Atomic write: OUT.tmp.XXXXXXXX beside it (mkstemp: O_EXCL, never follows a planted link), renamed over OUT
    # unless OUT is (now) something other than a regular file; the temp file never outlives a failure.
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"snapshot2json: cannot write {args.output}: the folder {folder} does not exist", file=sys.stderr)
        return 2
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(args.output) + ".tmp.")
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # what open() would give, not mkstemp's 0600
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        refusal = not_regular(args.output)
        if refusal:
            print(f"snapshot2json: {refusal}", file=sys.stderr)
            return 2
        os.replace(tmp, args.output)
        tmp = None
    except OSError as e:
        print(f"snapshot2json: cannot write {args.output}: {e}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
