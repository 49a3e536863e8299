"""ViT-B/16 from torchvision (torchvision.models.vit_b_16: nn.MultiheadAttention blocks, a convolutional patch
projection) in float32 with SGD and a cosine schedule, cross-entropy with label smoothing."""
import argparse

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(num_classes=1000).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.11)
    model.train()
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 224, 224, device=args.device)
        target = torch.randint(0, 1000, (args.batch,), device=args.device)
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
