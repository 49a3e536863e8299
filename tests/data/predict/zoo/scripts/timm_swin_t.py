"""Swin-T (timm swin_tiny_patch4_window7_224: shifted windows, relative position bias) in float32 with AdamW and a
cosine schedule (timm.scheduler.CosineLRScheduler stepped per update)."""
import argparse

import timm
import timm.scheduler
import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", num_classes=100).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
    scheduler = timm.scheduler.CosineLRScheduler(optimizer, t_initial=100, warmup_t=5, warmup_lr_init=1e-6)
    model.train()
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 224, 224).to(args.device)
        targets = torch.randint(0, 100, (args.batch,)).to(args.device)
        loss = F.cross_entropy(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step_update(step + 1)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
