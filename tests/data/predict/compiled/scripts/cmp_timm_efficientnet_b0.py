"""EfficientNet-B0 (timm efficientnet_b0: depthwise convolutions, batch norm, SiLU, squeeze-excitation) compiled
with `torch.compile(model)` under bfloat16 autocast, AdamW, 100 classes, random images."""
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
    model = timm.create_model("efficientnet_b0", num_classes=100).to(args.device)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 224, 224, device=args.device)
        y = torch.randint(0, 100, (args.batch,), device=args.device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(cmodel(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
