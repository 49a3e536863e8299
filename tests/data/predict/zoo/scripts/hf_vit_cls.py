"""ViT-B/16 image classification in transformers (ViTForImageClassification, its own loss from `labels`) in float16
mixed precision (torch.autocast, GradScaler), AdamW, 10 classes."""
import argparse

import torch
from transformers import ViTConfig, ViTForImageClassification


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = ViTForImageClassification(ViTConfig(num_labels=10)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
    scaler = torch.amp.GradScaler()
    model.train()
    for step in range(args.steps):
        pixel_values = torch.randn(args.batch, 3, 224, 224).to(args.device)
        labels = torch.randint(0, 10, (args.batch,)).to(args.device)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(pixel_values=pixel_values, labels=labels).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
