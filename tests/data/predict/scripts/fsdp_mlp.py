"""Train an MLP sharded with FSDP2 (fully_shard on every Linear, then the root), one process per GPU (torchrun
--nproc_per_node N): scripts/twins/sharded_training.py's model and loop (4096 wide, 8 deep, 10 classes, SGD)."""
import argparse
import functools
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--keep-gathered", action="store_true", help="reshard_after_forward=False")
    p.add_argument("--checkpoint-segments", type=int, default=0,
                   help="model(x) as checkpoint_sequential(model, S, x, use_reentrant=False)")
    p.add_argument("--prefetch", type=int, default=0,
                   help="each Linear prefetches the next K Linears' all-gathers forward and the previous K backward")
    args = p.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    layers = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10)).to("cuda")
    del layers
    raf = not args.keep_gathered
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, reshard_after_forward=raf)
    fully_shard(model, reshard_after_forward=raf)
    if args.checkpoint_segments:
        from torch.utils.checkpoint import checkpoint_sequential
        model.forward = functools.partial(checkpoint_sequential, list(model.children()), args.checkpoint_segments,
                                          use_reentrant=False)
    if args.prefetch:
        lin = [m for m in model if isinstance(m, nn.Linear)]
        for i in range(len(lin)):
            lin[i].set_modules_to_forward_prefetch(lin[i + 1:i + 1 + args.prefetch])
            lin[i].set_modules_to_backward_prefetch(lin[max(0, i - args.prefetch):i][::-1])
        del lin
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        opt.zero_grad()
        x = torch.randn(args.batch, args.width, device="cuda")
        y = torch.randint(0, 10, (args.batch,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
