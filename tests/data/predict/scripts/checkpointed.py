"""A deep residual MLP classifier trained with activation checkpointing: every block runs under
torch.utils.checkpoint.checkpoint(use_reentrant=False), so its activations are recomputed in the backward pass;
cross-entropy with label smoothing, SGD with Nesterov momentum, a OneCycle schedule, zero_grad() first."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, features, dim, depth, classes):
        super().__init__()
        self.stem = nn.Linear(features, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = Net(256, args.dim, args.depth, 1000).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=args.steps)
    model.train()
    for step in range(args.steps):
        optimizer.zero_grad()
        x = torch.randn(args.batch, 256, device=device)
        y = torch.randint(0, 1000, (args.batch,), device=device)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
