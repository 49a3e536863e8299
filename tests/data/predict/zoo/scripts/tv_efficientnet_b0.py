"""EfficientNet-B0 (torchvision.models.efficientnet_b0: depthwise convolutions, squeeze-excitation, SiLU) with
RMSprop as its paper trains it, float32."""
import argparse

import torch
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.efficientnet_b0(num_classes=1000).to(args.device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=0.016, alpha=0.9, eps=0.0316, momentum=0.9,
                                    weight_decay=1e-5)
    criterion = torch.nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 224, 224).to(args.device)
        labels = torch.randint(0, 1000, (args.batch,)).to(args.device)
        loss = criterion(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
