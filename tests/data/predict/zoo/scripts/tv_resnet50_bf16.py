"""ResNet-50 (torchvision.models.resnet50) trained under torch.autocast(bfloat16) with SGD (momentum, weight
decay), as torchvision's reference recipe; cuDNN convolutions, benchmark mode off (PyTorch's default)."""
import argparse

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=1000).to(args.device)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    model.train()
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, args.image_size, args.image_size).to(args.device, non_blocking=True)
        target = torch.randint(0, 1000, (args.batch,)).to(args.device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            output = model(images)
            loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        acc1 = (output.argmax(1) == target).float().mean() * 100
        print(f"step {step} loss {loss.item():.4f} acc@1 {acc1.item():.1f}")


if __name__ == "__main__":
    main()
