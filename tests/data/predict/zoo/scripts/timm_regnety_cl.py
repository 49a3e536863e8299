"""RegNetY-1.6GF (timm regnety_016: grouped convolutions, squeeze-excitation) in channels_last, bfloat16 autocast,
SGD with momentum, gradient clipping."""
import argparse

import timm
import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = timm.create_model("regnety_016", num_classes=1000)
    model = model.to(args.device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.4, momentum=0.9, weight_decay=5e-5)
    model.train()
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 224, 224, device=args.device).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (args.batch,), device=args.device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
