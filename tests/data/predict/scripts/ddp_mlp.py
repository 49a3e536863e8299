"""Train an MLP classifier with DistributedDataParallel, one process per GPU (torchrun --nproc_per_node N)."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=int, default=25)
    p.add_argument("--bucket-view", action="store_true")
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    layers = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model = DDP(model, device_ids=[rank], bucket_cap_mb=args.bucket_cap_mb,
                gradient_as_bucket_view=args.bucket_view)

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
