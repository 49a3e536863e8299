#!/usr/bin/env python3
"""Where the driver put each cudaMalloc segment in a process that initialised NCCL, against sim's model of it.

Reads PyTorch `_record_memory_history` snapshots (`torch.cuda.memory._dump_snapshot()`, a pickle of plain dicts;
torch is not needed: classes it does not know load as dicts) and replays each one's segment allocations and frees,
in order, through a transcription of harness/device/sim.c's NCCL layout (device_note_nccl): the first region
[T-192, T) with its bottom 12 MiB the driver's, the driver's [T-928, T-192), NCCL's region [T-1440, T-928) held
until NCCL's first collective, the driver's [T-1728, T-1440); the first kernel launch carves 160 MiB of the
driver's below the regions, NCCL's first collective frees NCCL's region and carves a 32 MiB region whose bottom 30
MiB the driver holds. A snapshot records no kernel launch or collective: both are taken right around the first
segment on a side stream (the first all-gather's output: the launch before it, at torch.randn, and the collective
after it). Segments the driver put in its low heap (below 0x700000000000: a few small ones per run) are not
modelled and keep their recorded address.

For each snapshot it prints every segment action, PyTorch's address relative to the first segment and, where the
model differs, the model's after a slash; then how many addresses the model predicts, and how many pairs of
equal-size segments live at once on one stream it puts in PyTorch's order (the ties the caching allocator breaks
by address). Usage:

    python3 scripts/twins/nccl_layout.py [--quiet] SNAPSHOT.pickle...

e.g. docs/measurements/h200x2-2026-11-27-sharded-history/*.rank0.pickle (docs/parity.md, "sharded_training").
"""
import argparse
import pickle
import sys

MiB = 1 << 20
LOW_HEAP = 0x700000000000  # below it: the driver's low heap, not modelled
TOP = 1 << 46


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return dict


def segment_actions(path):
    """[(action, addr, size, stream)] of the first device's segment allocations and frees, in order."""
    with open(path, "rb") as f:
        snap = _Unpickler(f).load()
    traces = snap.get("device_traces") or [[]]
    return [(e["action"][len("segment_"):], e["addr"], e["size"], e["stream"]) for e in traces[0]
            if e.get("action") in ("segment_alloc", "segment_free")]


class Driver:
    """sim.c's region model (place_segment, region_carve, region_release_segment), NCCL layout."""

    def __init__(self):
        self.regions = []  # dicts: base, size, seq, live, held, perm
        self.segs = {}  # key -> (base, size)
        self.seq = 0
        # heap_init_nccl's order: NCCL's region is newer than the first
        self.add(TOP - 192 * MiB, 192 * MiB, held=12 * MiB)
        self.add(TOP - 928 * MiB, 736 * MiB, perm=True)
        self.comm = self.add(TOP - 1440 * MiB, 512 * MiB, held=512 * MiB)
        self.add(TOP - 1728 * MiB, 288 * MiB, perm=True)

    def add(self, base, size, held=0, perm=False):
        self.seq += 1
        r = dict(base=base, size=size, seq=self.seq, live=1 if held else 0, held=held, perm=perm)
        self.regions.append(r)
        return r

    def gap(self, r, size):
        """The smallest gap of at least size in r (ties: lowest address): (base, length) or None."""
        cur, end, best = r["base"] + r["held"], r["base"] + r["size"], None
        inside = sorted(v for v in self.segs.values() if r["base"] <= v[0] < end)
        for b, sz in inside + [(end, 0)]:
            if b - cur >= size and (best is None or b - cur < best[1]):
                best = (cur, b - cur)
            cur = max(cur, b + sz)
        return best

    def carve(self, z):
        rs = sorted(self.regions, key=lambda r: r["base"])
        for i in range(len(rs) - 1, 0, -1):
            lo, hi = rs[i - 1]["base"] + rs[i - 1]["size"], rs[i]["base"]
            if hi - lo > z:
                return hi - z
        return rs[0]["base"] - z

    def alloc(self, key, size):
        best = None
        for r in self.regions:
            g = None if r["perm"] else self.gap(r, size)
            if g and (best is None or r["seq"] > best[0]["seq"]):
                best = (r, g)
        if best:
            r, (at, _) = best
        else:
            z = -(-size // (32 * MiB)) * 32 * MiB
            at = self.carve(z)
            r = self.add(at, z)
        r["live"] += 1
        self.segs[key] = (at, size)
        return at

    def free(self, key):
        at, _ = self.segs.pop(key)
        for r in self.regions:
            if not r["perm"] and r["base"] <= at < r["base"] + r["size"]:
                r["live"] -= 1
                if r["live"] == 0:
                    self.regions.remove(r)
                return

    def first_kernel(self):
        self.add(self.carve(160 * MiB), 160 * MiB, perm=True)

    def first_collective(self):
        self.comm["held"] = 0
        self.comm["live"] -= 1
        self.add(self.carve(32 * MiB), 32 * MiB, held=30 * MiB)


def replay(path):
    """(lines, predicted, modelled, pairs in order, pairs) for one snapshot."""
    d = Driver()
    first = model_first = None
    collective = False
    live = {}  # PyTorch's address -> (model address or None, size, stream)
    out, hits, total, agree, pairs = [], 0, 0, 0, 0
    for act, addr, size, stream in segment_actions(path):
        if first is None:
            first = addr
        rel = (addr - first) // MiB
        if act == "free":
            p, _, _ = live.pop(addr)
            if p is not None:
                d.free(addr)
            out.append("F%g@%d" % (size / MiB, rel))
            continue
        side = stream != 0 and not collective
        if side:
            d.first_kernel()
        p = None if addr < LOW_HEAP else d.alloc(addr, size)
        if side:
            d.first_collective()
            collective = True
        if model_first is None:
            model_first = p
        tag = "%g%s@%d" % (size / MiB, "s" if stream else "", rel)
        if p is None:
            out.append(tag + "(low heap)")
        else:
            total += 1
            prel = (p - model_first) // MiB
            hits += prel == rel
            out.append(tag if prel == rel else "%s/%d" % (tag, prel))
            for a2, (p2, s2, st2) in live.items():
                if p2 is not None and s2 == size and st2 == stream and a2 >= LOW_HEAP:
                    pairs += 1
                    agree += (addr < a2) == (p < p2)
        live[addr] = (p, size, stream)
    return out, hits, total, agree, pairs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quiet", action="store_true", help="the counts only")
    ap.add_argument("snapshots", nargs="+")
    a = ap.parse_args(argv)
    th = tt = ta = tp = 0
    for path in a.snapshots:
        try:
            out, hits, total, agree, pairs = replay(path)
        except (OSError, pickle.UnpicklingError, KeyError, TypeError, EOFError) as e:
            print("nccl_layout: %s: not a memory snapshot (%s)" % (path, e), file=sys.stderr)
            return 2
        print("%s: addresses %d of %d, equal-size pairs in order %d of %d" % (path, hits, total, agree, pairs))
        if not a.quiet:
            print("  " + " ".join(out))
        th, tt, ta, tp = th + hits, tt + total, ta + agree, tp + pairs
    print("all: addresses %d of %d, equal-size pairs in order %d of %d" % (th, tt, ta, tp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
