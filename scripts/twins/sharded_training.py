#!/usr/bin/env python3
"""PyTorch twin of scenarios/sharded_training.c: FSDP2 (fully_shard) on 2 GPUs with torchrun, every Linear sharded,
with reshard_after_forward=False (the gathered parameters kept after forward), the default reshard_after_forward=True,
reshard_after_forward=False with model(x) as checkpoint_sequential(model, segments, x, use_reentrant=False), the
default with each Linear prefetching the next `prefetch` Linears (set_modules_to_forward_prefetch, and the previous ones
with set_modules_to_backward_prefetch) or one, and the default at ranks x the per-rank batch.

    python3 scripts/twins/sharded_training.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Each variant runs as `torchrun --standalone --nproc_per_node RANKS` (twinlib's nproc): rank k on GPU k, each with the
budget as its own memory fraction. Parameters (the scenario's --set names and full-scale defaults): width 4096,
depth 8, batch 2048, ranks 2, steps 3, segments 2, prefetch 6; budget 1200 MiB. Samples carry the scenario's labels on every rank (rank 0's
are the variant's, rank 1's its "devices" entry). Each rank notes NCCL's buffers as measured (nccl_buffers_bytes).
"""
import functools
import gc
import sys

import twinlib

VARIANTS = {
    "bug": "",
    "fix-reshard-after-forward": "",
    "fix-activation-checkpointing": "",
    "bug-prefetch-ahead": "",
    "fix-limit-gathers": "",
    "myth-shards-divide-all": "",
}
PARAMS = {"width": 4096, "depth": 8, "batch": 2048, "ranks": 2, "steps": 3, "segments": 2, "prefetch": 6}
BUDGET = 1200 * twinlib.MiB
CLASSES = 10


def body(t, variant, p):
    torch = t.torch
    nn, F = torch.nn, torch.nn.functional
    from torch.distributed.fsdp import fully_shard
    width, depth, steps = p["width"], p["depth"], p["steps"]
    batch = p["batch"] * (p["ranks"] if variant == "myth-shards-divide-all" else 1)
    ckpt = variant == "fix-activation-checkpointing"
    raf = variant not in ("bug", "fix-activation-checkpointing")

    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, CLASSES)).to("cuda")
    del layers
    t.step("model")
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, reshard_after_forward=raf)
    fully_shard(model, reshard_after_forward=raf)
    if ckpt:  # model(x) runs checkpoint_sequential(model, segments, x, use_reentrant=False) inside FSDP's root hooks
        from torch.utils.checkpoint import checkpoint_sequential
        model.forward = functools.partial(checkpoint_sequential, list(model.children()), p["segments"],
                                          use_reentrant=False)
    # explicit prefetching: each Linear issues the next K Linears' all-gathers in its pre-forward and the previous K
    # (nearest first) in its pre-backward
    ahead = {"bug-prefetch-ahead": p["prefetch"], "fix-limit-gathers": 1}.get(variant, 0)
    if ahead:
        lin = [mod for mod in model if isinstance(mod, nn.Linear)]
        for i in range(len(lin)):  # no loop variable left holding a module
            lin[i].set_modules_to_forward_prefetch(lin[i + 1:i + 1 + ahead])
            lin[i].set_modules_to_backward_prefetch(lin[max(0, i - ahead):i][::-1])
        del lin
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    t.step("fully_shard(model)")

    x = y = loss = None
    failed = None
    done = 0
    for k in range(1, steps + 1):
        phase = "step %d: forward" % k
        try:
            opt.zero_grad()
            x = torch.randn(batch, width, device="cuda")
            y = torch.randint(0, CLASSES, (batch,), device="cuda")
            loss = F.cross_entropy(model(x), y)
            t.step(phase)
            phase = "step %d: backward" % k
            loss.backward()
            t.step(phase)
            phase = "step %d: optimizer step" % k
            opt.step()
            t.step(phase)
            done = k
        except torch.OutOfMemoryError as e:
            t.caught(e, phase)
            failed = phase
        if failed:  # sampled after the except block, once the traceback's frames are gone
            t.step("step %d: %s: OOM" % (done + 1, failed.split(": ", 1)[1]))
            break
    t.nccl_probe()
    del loss, y, x, opt, model, m  # m: the fully_shard loop's variable, which holds the last Linear (and FSDP's state)
    gc.collect()  # FSDP's states and hooks hold the modules in reference cycles
    t.step("everything released")


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "sharded_training", VARIANTS, PARAMS, BUDGET, body, nproc=PARAMS["ranks"]))
