#!/usr/bin/env python3
"""PyTorch twin of scenarios/data_parallel.c: DistributedDataParallel on 2 GPUs with torchrun, its gradient buckets
beside the gradients, against gradient_as_bucket_view=True, a smaller per-rank batch, a smaller bucket_cap_mb,
the same model trained on one GPU first, and ZeroRedundancyOptimizer(SGD) in place of SGD.

    python3 scripts/twins/data_parallel.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Each variant runs as `torchrun --standalone --nproc_per_node RANKS` (twinlib's nproc): rank k on GPU k, each with
the budget as its own memory fraction. Parameters (the scenario's --set names and full-scale defaults): width 4096,
depth 4, batch 2048, small_batch 512, bucket_cap_mib 25, small_bucket_cap_mib 1, ranks 2, steps 3; budget 1136 MiB.
Samples carry the scenario's labels on every rank (rank 0's are the variant's, rank 1's its "devices" entry). Each
rank notes NCCL's buffers as measured (nccl_buffers_bytes: free memory before init_process_group less free memory
after the variant's last step, less what the caching allocator holds reserved then).
"""
import sys

import twinlib

VARIANTS = {
    "bug": "",
    "fix-bucket-view": "",
    "fix-smaller-batch": "",
    "myth-smaller-buckets": "",
    "myth-ddp-shards": "",
    "myth-zero-redundancy-optimizer": "",
}
PARAMS = {"width": 4096, "depth": 4, "batch": 2048, "small_batch": 512, "bucket_cap_mib": 25,
          "small_bucket_cap_mib": 1, "ranks": 2, "steps": 3}
BUDGET = 1136 * twinlib.MiB
CLASSES = 10


def body(t, variant, p):
    torch = t.torch
    nn, F = torch.nn, torch.nn.functional
    from torch.nn.parallel import DistributedDataParallel as DDP
    width, depth, steps = p["width"], p["depth"], p["steps"]
    batch = p["small_batch"] if variant == "fix-smaller-batch" else p["batch"]
    cap = p["small_bucket_cap_mib"] if variant == "myth-smaller-buckets" else p["bucket_cap_mib"]

    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, CLASSES)).to("cuda")
    if variant == "myth-zero-redundancy-optimizer":  # ZeRO-1: each rank steps (and keeps state for) its partition
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    t.step("model and optimizer")

    if variant == "myth-ddp-shards":  # every rank trains alone first, as `python train.py` on one GPU
        x = torch.randn(batch, width, device="cuda")
        y = torch.randint(0, CLASSES, (batch,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        t.step("one GPU, no DDP: forward")
        loss.backward()
        t.step("one GPU, no DDP: backward")
        opt.step()
        del x, y, loss
        opt.zero_grad()
        t.step("one GPU, no DDP: optimizer step")

    ddp = DDP(model, device_ids=[t.device], bucket_cap_mb=cap,
              gradient_as_bucket_view=(variant == "fix-bucket-view"))
    t.step("DDP(model): buckets")

    x = y = loss = None
    failed = None
    for k in range(1, steps + 1):
        phase = "step %d: forward" % k
        try:
            opt.zero_grad()
            x = torch.randn(batch, width, device="cuda")
            y = torch.randint(0, CLASSES, (batch,), device="cuda")
            loss = F.cross_entropy(ddp(x), y)
            t.step(phase)
            phase = "step %d: backward" % k
            loss.backward()
            t.step(phase)
            phase = "step %d: optimizer step" % k
            opt.step()
            t.step(phase)
        except torch.OutOfMemoryError as e:
            t.caught(e, phase)
            failed = phase
        if failed:  # sampled after the except block, once the traceback's frames are gone
            t.step("%s: OOM" % failed)
            break
    t.nccl_probe()  # after the collectives this variant ran (NCCL connects its channels on first use)
    del loss, y, x, ddp, opt, model, layers
    t.step("everything released")


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "data_parallel", VARIANTS, PARAMS, BUDGET, body, nproc=PARAMS["ranks"]))
