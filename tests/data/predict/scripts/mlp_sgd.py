"""Train a 4-layer MLP classifier with SGD, clipping the gradient norm each step."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = nn.Sequential(
        nn.Linear(1024, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for step in range(args.steps):
        x = torch.randn(args.batch, 1024, device=device)
        y = torch.randint(0, 10, (args.batch,), device=device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        print(f"step {step} loss {loss.item():.4f} grad norm {gnorm.item():.3f}")


if __name__ == "__main__":
    main()
