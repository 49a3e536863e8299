#!/usr/bin/env python3
"""PyTorch twin of scenarios/fragmentation.c: the same allocation pattern, every variant, on a real GPU.

    python3 scripts/twins/fragmentation.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): pairs 100, short_mib 6, long_mib 3,
request_mib 100; budget 1 GiB. N pairs of a short_mib tensor that dies young and a long_mib tensor that lives on,
allocated interleaved (or, for fix-long-lived-first, the long-lived ones first); the short-lived ones are freed;
then one request_mib request. Samples carry the scenario's labels (scripts/twins/twinlib.py has the format).
"""
import sys

import twinlib

MiB = twinlib.MiB
VARIANTS = {
    "bug": "",
    "fix-expandable-segments": "expandable_segments:True",
    "fix-long-lived-first": "",
    "myth-empty-cache": "",
    "myth-max-split-size": "max_split_size_mb:128",
    "myth-gc-threshold": "garbage_collection_threshold:0.6",
}
PARAMS = {"pairs": 100, "short_mib": 6, "long_mib": 3, "request_mib": 100}
BUDGET = 1 << 30


def body(t, variant, p):
    torch = t.torch
    pairs = p["pairs"]

    def empty_mib(mib):
        return torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")

    t.step("start")
    keep, drop = [], []
    fit = True
    try:
        if variant == "fix-long-lived-first":
            for _ in range(pairs):
                keep.append(empty_mib(p["long_mib"]))
            for _ in range(pairs):
                drop.append(empty_mib(p["short_mib"]))
        else:
            for _ in range(pairs):
                drop.append(empty_mib(p["short_mib"]))
                keep.append(empty_mib(p["long_mib"]))
    except torch.OutOfMemoryError as e:
        t.caught(e, "allocating the pairs")
        fit = False
    whole = min(len(keep), len(drop))  # whole pairs, as the scenario counts them
    t.step("%d pairs allocated" % pairs if fit else "OOM after %d of %d pairs" % (whole, pairs))
    del drop
    t.step("short-lived tensors freed")
    if variant == "myth-empty-cache":
        torch.cuda.empty_cache()
        t.step("torch.cuda.empty_cache()")
    if fit:
        ok = True
        try:
            big = empty_mib(p["request_mib"])
            t.step("holding the %d MiB tensor" % p["request_mib"])
            del big
        except torch.OutOfMemoryError as e:
            t.caught(e, "the large request")
            ok = False
        t.step("%d MiB request %s" % (p["request_mib"], "served, then freed" if ok else "failed"))
    del keep
    t.step("everything released")


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "fragmentation", VARIANTS, PARAMS, BUDGET, body))
