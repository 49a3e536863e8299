"""Gradient accumulation: several micro-batches per optimizer step, the loss scaled by their number, with a
learning-rate schedule."""
import argparse

import torch
import torch.nn as nn


def make_model(width):
    return nn.Sequential(
        nn.Linear(512, width), nn.LayerNorm(width), nn.SiLU(),
        nn.Linear(width, width), nn.LayerNorm(width), nn.SiLU(),
        nn.Linear(width, width), nn.LayerNorm(width), nn.SiLU(),
        nn.Linear(width, 1),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=128, help="micro-batch size")
    p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = make_model(args.width).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    loss_fn = nn.MSELoss()

    inputs = torch.randn(args.steps * args.accum * args.batch, 512)
    targets = inputs[:, :8].sum(dim=1, keepdim=True)
    model.train()
    optimizer.zero_grad()
    for i in range(args.steps * args.accum):
        x = inputs[i * args.batch:(i + 1) * args.batch].to(device)
        y = targets[i * args.batch:(i + 1) * args.batch].to(device)
        loss = loss_fn(model(x), y) / args.accum
        loss.backward()
        if (i + 1) % args.accum == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            print(f"step {(i + 1) // args.accum} loss {loss.item() * args.accum:.4f}")


if __name__ == "__main__":
    main()
