"""ResNet-50 (timm resnet50) in channels_last memory format with float16 mixed precision (torch.autocast, GradScaler),
SGD with Nesterov momentum, timm's label-smoothing loss."""
import argparse

import timm
import timm.loss
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = timm.create_model("resnet50", num_classes=1000).to(args.device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-5)
    criterion = timm.loss.LabelSmoothingCrossEntropy(smoothing=0.1)
    scaler = torch.amp.GradScaler("cuda")
    model.train()
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 224, 224, device=args.device).contiguous(memory_format=torch.channels_last)
        targets = torch.randint(0, 1000, (args.batch,), device=args.device)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(images), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
