#!/usr/bin/env python3
"""Convert a torch.cuda.memory._dump_snapshot() pickle into the JSON that `oomlab replay` reads.

Standard library only, so it runs where PyTorch is not installed.

    scripts/snapshot2json.py SNAPSHOT.pickle|- [-o OUT.json] [--strip-frames] [--budget SIZE] [--max-objects N]

The output is the snapshot dict exactly as json.dump writes it (tuples become lists).
--strip-frames empties every "frames" list, which makes a trace small enough to commit.
--budget SIZE (bytes, or 1GiB, 512MiB, 1.5GB, ...) adds a top-level "budget": the bytes the program's
torch.cuda.set_per_process_memory_fraction allowed (fraction x total memory), which `oomlab replay` applies.
PyTorch's snapshot does not record it: its "oom" trace entries carry only device_free and size
(torch/csrc/cuda/memory_snapshot.cpp), and the "N GiB allowed" of the OutOfMemoryError text is rounded. A
recording made under a fraction replays faithfully only with its budget.
SNAPSHOT "-" reads the pickle from stdin (`oomlab advise` pipes it: nothing is written to disk).
The pickle is untrusted: it is converted within bounds, each refused in one line. No class is loaded; containers
nest at most MAX_DEPTH deep; and at most --max-objects values are written (default 4 per byte of the pickle plus
1,000,000) and --max-bytes of JSON (default 4 GiB), counting a shared list, dict or string each time it is
written: a 1 KB pickle of lists that share their elements would otherwise expand to 2^100 values.
Exit status: 0 on success, 2 on bad input (one error line on stderr, nothing written). -o OUT writes only a
regular file: an OUT that is a FIFO, a device, a folder or a symbolic link is refused.
"""
import argparse
import fractions
import io
import json
import re
import os
import pickle
import stat
import sys
import tempfile


MAX_DEPTH = 64  # a snapshot nests 7 deep (segments, blocks, frames); json.dumps recurses once a level


class Bound(Exception):
    """The input is beyond a bound: the message says which."""


def walk(obj, strip, max_objects, max_bytes):
    """Visit every value as json.dumps will write it (a shared container or string once per reference), without
    recursion: raise Bound past MAX_DEPTH, max_objects values or about max_bytes of JSON text (a shared string is
    written each time too). With strip, empty every 'frames' list (not visited)."""
    visits = size = 0
    stack = [(obj, 1)]
    while stack:
        o, depth = stack.pop()
        visits += 1
        size += len(o) + 3 if isinstance(o, str) else 24  # at most this much text, with its quotes and comma
        if size > max_bytes:
            raise Bound(f"its JSON would be more than {max_bytes} bytes (shared strings count each time they are "
                        "written); scripts/snapshot2json.py --max-bytes N converts it anyway")
        if visits > max_objects:
            raise Bound(f"it expands to more than {max_objects} values (shared lists and dicts count each time "
                        "they are written: a pickle bomb?); scripts/snapshot2json.py --max-objects N converts it "
                        "anyway")
        if isinstance(o, (dict, list, tuple)) and depth > MAX_DEPTH:
            raise Bound(f"it nests deeper than {MAX_DEPTH} levels (a snapshot nests 7)")
        if isinstance(o, dict):
            for key, value in o.items():
                size += len(key) + 3 if isinstance(key, str) else 24
                if strip and key == "frames" and isinstance(value, list):
                    o[key] = []
                else:
                    stack.append((value, depth + 1))
        elif isinstance(o, (list, tuple)):
            stack.extend((item, depth + 1) for item in o)


def one_line(text):
    """text with its control characters (a newline of a traceback or a key) shown as spaces."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", str(text))


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


class _OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one line (its own are the usage, then the error), exit 2."""

    def error(self, message):
        print(f"snapshot2json: {one_line(message)} (snapshot2json.py --help)", file=sys.stderr)
        sys.exit(2)


def main(argv):
    ap = _OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot", help="the pickle of torch.cuda.memory._dump_snapshot, or - for stdin")
    ap.add_argument("-o", "--output", help="output file (default: stdout)")
    ap.add_argument("--strip-frames", action="store_true", help="drop stack frames")
    ap.add_argument("--budget", metavar="SIZE",
                    help="the bytes set_per_process_memory_fraction allowed (stored as \"budget\")")
    ap.add_argument("--name", help="what to call the snapshot in messages (default: its path)")
    ap.add_argument("--max-objects", metavar="N", type=int,
                    help="the most values written (default: 4 per byte of the pickle + 1000000)")
    ap.add_argument("--max-bytes", metavar="N", type=int, default=4 << 30,
                    help="the most bytes of JSON written (default 4 GiB; oomlab advise passes its --max-input)")
    args = ap.parse_args(argv)
    name = args.name or ("the pickle on stdin" if args.snapshot == "-" else args.snapshot)
    budget = None
    if args.budget is not None:
        budget = parse_size(args.budget)
        if budget is None:
            print(f"snapshot2json: --budget: '{one_line(args.budget)}' is not a size (bytes, or a number with KiB, "
                  "MiB, GiB, TiB, KB, MB, GB, TB)", file=sys.stderr)
            return 2
    refusal = not_regular(args.output) if args.output else None
    if refusal:  # before any work: only regular files are written
        print(f"snapshot2json: {refusal}", file=sys.stderr)
        return 2
    try:
        if args.snapshot == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.snapshot, "rb") as f:
                data = f.read()
        snap = _SafeUnpickler(io.BytesIO(data)).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, MemoryError, RecursionError) as e:
        print(f"snapshot2json: cannot read {one_line(name)}: {one_line(e) or type(e).__name__}", file=sys.stderr)
        return 2
    except Exception as e:  # whatever else a crafted pickle makes the unpickler raise: one line
        print(f"snapshot2json: cannot read {one_line(name)}: {type(e).__name__}: {one_line(e)}", file=sys.stderr)
        return 2
    if not isinstance(snap, dict) or "device_traces" not in snap or "segments" not in snap:
        print(f"snapshot2json: {one_line(name)} is not a memory snapshot "
              "(no 'segments'/'device_traces')", file=sys.stderr)
        return 2
    max_objects = args.max_objects if args.max_objects is not None else 4 * len(data) + 1000000
    try:
        walk(snap, args.strip_frames, max_objects, args.max_bytes)
    except Bound as e:
        print(f"snapshot2json: {one_line(name)}: {e}", file=sys.stderr)
        return 2
    if budget is not None:
        snap["budget"] = budget
    try:
        text = json.dumps(snap, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError, MemoryError) as e:
        print(f"snapshot2json: {one_line(name)}: cannot be written as JSON: {one_line(e) or type(e).__name__}",
              file=sys.stderr)
        return 2
    if not args.output:
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except OSError as e:  # the reader went away (oomlab advise stopped at its bound)
            print(f"snapshot2json: cannot write the JSON: {one_line(e)}", file=sys.stderr)
            return 2
        return 0
    # Atomic write: OUT.tmp.XXXXXXXX beside it (mkstemp: O_EXCL, never follows a planted link), renamed over OUT
    # unless OUT is (now) something other than a regular file; the temp file never outlives a failure.
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"snapshot2json: cannot write {one_line(args.output)}: the folder {one_line(folder)} does not exist",
              file=sys.stderr)
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
        print(f"snapshot2json: cannot write {one_line(args.output)}: {one_line(e)}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
