"""A residual MLP classifier trained with mixed precision: the forward pass and loss under
torch.autocast("cuda", dtype=torch.bfloat16), weights and optimizer in float32."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualMLP(nn.Module):
    def __init__(self, dim, depth, classes):
        super().__init__()
        self.stem = nn.Linear(784, dim)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = ResidualMLP(args.dim, args.depth, 10).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    for step in range(args.steps):
        x = torch.randn(args.batch, 784, device=device)
        y = torch.randint(0, 10, (args.batch,), device=device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} logits {logits.dtype}")


if __name__ == "__main__":
    main()
