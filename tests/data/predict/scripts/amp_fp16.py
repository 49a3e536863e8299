"""An MLP classifier with BatchNorm1d and dropout trained in float16 mixed precision: the forward pass and loss
under torch.autocast("cuda", dtype=torch.float16), a GradScaler scaling the loss, the gradients unscaled before
clipping, AdamW."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model(features, width, depth, classes):
    layers = []
    d = features
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(0.1)]
        d = width
    layers.append(nn.Linear(d, classes))
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = make_model(512, args.width, args.depth, 100).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scaler = torch.amp.GradScaler(device.type)
    model.train()
    for step in range(args.steps):
        x = torch.randn(args.batch, 512, device=device)
        y = torch.randint(0, 100, (args.batch,), device=device)
        optimizer.zero_grad()
        with torch.autocast(device_type=device.type, dtype=torch.float16):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}")


if __name__ == "__main__":
    main()
