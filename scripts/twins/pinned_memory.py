#!/usr/bin/env python3
"""PyTorch twin of scenarios/pinned_memory.c: a DataLoader with pin_memory=True, every variant, on a real GPU.

    python3 scripts/twins/pinned_memory.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): workers 8, prefetch 2, batch 32, channels 3,
height 224, width 224, step_ms 400, produce_ms 50, pinned_mib 500, steps 24; budget 1 GiB. A dataset of `steps`
batches of torch.randn(batch, channels, height, width), each made in produce_ms (a worker pads with a sleep);
DataLoader(num_workers=W, prefetch_factor=P, pin_memory=True, batch_size=None); the main loop copies each batch
with non_blocking=True and sleeps step_ms. Every step records torch.cuda.host_memory_stats() (t.metric "host.KEY")
and the batches in flight (the iterator's _send_idx - _rcvd_idx), the device counters through t.step.

The pinned budget. A real host pins what its RAM allows, so the twin emulates the scenario's cap (pinned_mib) in
the batch's pin_memory(), which the pin thread calls: when no cached block is free (every block is held by a live
pinned batch) and one more block would pass the cap, it raises RuntimeError("CUDA error: out of memory") before
pinning, where oomlab's cudaHostAlloc is refused. That counts blocks freed and waiting for their copy's event as
free: with the slow consumer, their copies finished long before (an assumption the recording checks).

With PINNED_ARRIVALS=FILE in the environment (scripts/twins/pinned_spread.py sets it), each loop also appends one
JSON line to FILE: {"tag", "arrivals": the batch indices in the order the main loop got them from the pin thread,
"held_max": the most batches pinned out of order and kept in the iterator's _task_info at once}. Nothing else
changes: the recording is the same with or without it.
"""
import json
import os
import sys
import threading
import time
import weakref

import twinlib

MiB = twinlib.MiB
VARIANTS = {
    "bug": "",
    "fix-fewer-workers": "",
    "fix-prefetch-1": "",
    "fix-no-pin-memory": "",
    "myth-pinned-leak": "",
    "myth-gpu-memory": "",
}
PARAMS = {"workers": 8, "prefetch": 2, "batch": 32, "channels": 3, "height": 224, "width": 224, "step_ms": 400,
          "produce_ms": 50, "pinned_mib": 500, "steps": 24}
BUDGET = 1 << 30
HOST_KEYS = ["allocations.current", "allocations.peak", "allocated_bytes.current", "allocated_bytes.peak",
             "active_requests.current", "active_bytes.current", "num_host_alloc", "num_host_free"]

CAP = 0  # the pinned budget in bytes (0: none), set by body()
_live = [0]  # pinned batches alive
_lock = threading.Lock()


def _dead():
    with _lock:
        _live[0] -= 1


class Batch:
    """A batch the DataLoader pins through its pin_memory() (torch.utils.data._utils.pin_memory.pin_memory)."""

    def __init__(self, x):
        self.x = x

    def pin_memory(self, device=None):
        import torch
        n = self.x.numel() * self.x.element_size()
        block = 1 << (n - 1).bit_length()  # PowerOf2Ceil
        st = torch.cuda.host_memory_stats()
        with _lock:
            free = st.get("allocations.current", 0) - _live[0]
        if CAP and free <= 0 and st.get("allocated_bytes.current", 0) + block > CAP:
            raise RuntimeError("CUDA error: out of memory (the pinned budget, emulated)")
        p = Batch(self.x.pin_memory())
        with _lock:
            _live[0] += 1
        weakref.finalize(p.x, _dead)
        return p


class RandnBatches:
    def __init__(self, n, shape, produce_ms):
        self.n, self.shape, self.produce_ms = n, shape, produce_ms

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        import torch
        t0 = time.perf_counter()
        x = torch.randn(*self.shape)
        left = self.produce_ms / 1000 - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)
        return Batch(x)


def _watch_arrivals(it):
    """With PINNED_ARRIVALS set: wrap the iterator's _get_data (its read of the pin thread's data_queue) to note
    each batch index as it arrives, and the batches kept out of order (_next_data stores a batch whose index is not
    _rcvd_idx in _task_info until its turn). Returns (arrivals, [held_max]), or (None, None) without it."""
    if not os.environ.get("PINNED_ARRIVALS"):
        return None, None
    arrivals, held = [], [0]
    get = it._get_data

    def noted(*a, **kw):
        idx, data = get(*a, **kw)
        arrivals.append(idx)
        kept = sum(1 for v in it._task_info.values() if len(v) == 2) + (idx != it._rcvd_idx)
        held[0] = max(held[0], kept)
        return idx, data

    it._get_data = noted
    return arrivals, held


def host_metrics(t):
    st = t.torch.cuda.host_memory_stats()
    for k in HOST_KEYS:
        t.metric("host." + k, "bytes" if "bytes" in k else "1", int(st.get(k, 0)))


def run_loop(t, p, tag, workers, prefetch, pin, step_ms):
    """for i, batch in enumerate(loader): x = batch.x.to("cuda", non_blocking=True); step."""
    torch = t.torch
    from torch.utils.data import DataLoader
    shape = (p["batch"], p["channels"], p["height"], p["width"])
    loader = DataLoader(RandnBatches(p["steps"], shape, p["produce_ms"]), batch_size=None, num_workers=workers,
                        prefetch_factor=prefetch, pin_memory=pin)
    it = iter(loader)
    arrivals, held = _watch_arrivals(it)
    batch = x = None
    out = {"received": 0, "failed_at": -1, "nbytes": 0}
    i = 0
    try:
        for i, nb in enumerate(it):
            batch = nb
            out["nbytes"] = batch.x.numel() * batch.x.element_size()
            x = batch.x.to("cuda", non_blocking=True)
            time.sleep(step_ms / 1000)
            out["received"] = i + 1
            t.step("%sstep %d" % (tag, i))
            host_metrics(t)
            t.metric("in_flight", "1", it._send_idx - it._rcvd_idx)
        i = None
    except RuntimeError as e:  # the pin thread's exception, re-raised for batch i
        i = out["received"]
        out["failed_at"] = i
        t.caught(e, "%spinning batch %d" % (tag, i), kind="pinned host")
        t.note(str(e).splitlines()[0])
        t.step("%sstep %d: pinning failed" % (tag, i))
        host_metrics(t)
        t.metric("in_flight", "1", it._send_idx - it._rcvd_idx)
    del batch, x
    if arrivals is not None:
        with open(os.environ["PINNED_ARRIVALS"], "a") as f:
            f.write(json.dumps({"tag": tag.strip(), "arrivals": arrivals, "held_max": held[0]}) + "\n")
    it._shutdown_workers()
    del it
    t.step("%sloader shut down" % tag)
    host_metrics(t)
    return out


def measure_tradeoff(t, nbytes):
    torch = t.torch
    t0 = t.clock()
    p = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    t1 = t.clock()
    del p  # no stream recorded: cached at once
    t2 = t.clock()
    p = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)  # a cache hit
    t3 = t.clock()
    d = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    t.metric("pinned_alloc_miss_s", "s", t1 - t0)
    t.metric("pinned_alloc_hit_s", "s", t3 - t2)
    pageable = torch.ones(nbytes, dtype=torch.uint8)
    p.fill_(1)
    dv = d.view(torch.uint8)
    a = t.clock()
    for _ in range(10):
        dv.copy_(p)
    b = t.clock()
    for _ in range(10):
        dv.copy_(pageable)
    e = t.clock()
    t.metric("h2d_pinned_GBps", "GB/s", nbytes * 10 / 1e9 / (b - a))
    t.metric("h2d_pageable_GBps", "GB/s", nbytes * 10 / 1e9 / (e - b))
    del pageable, dv, d, p
    t.step("trade-off measured")
    host_metrics(t)


def body(t, variant, p):
    global CAP
    torch = t.torch
    CAP = p["pinned_mib"] * MiB
    W, P, step_ms = p["workers"], p["prefetch"], p["step_ms"]
    pin = True
    tag = ""
    if variant == "fix-fewer-workers":
        W = max(1, W // 2)
    if variant == "fix-prefetch-1":
        P = 1
    if variant == "fix-no-pin-memory":
        pin = False
    if variant in ("myth-pinned-leak", "myth-gpu-memory"):
        step_ms = 0
    if variant == "myth-gpu-memory":
        tag = "pinned "
    t.step("start")
    a = run_loop(t, p, tag, W, P, pin, step_ms)
    if variant == "myth-gpu-memory":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        run_loop(t, p, "pageable ", W, P, False, step_ms)
    if variant == "fix-no-pin-memory":
        measure_tradeoff(t, a["nbytes"])
    if variant == "myth-pinned-leak":
        torch._C._host_emptyCache()
        t.step("host cache emptied")
        host_metrics(t)


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "pinned_memory", VARIANTS, PARAMS, BUDGET, body))
