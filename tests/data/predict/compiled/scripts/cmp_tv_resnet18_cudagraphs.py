"""ResNet-18 (torchvision.models.resnet18) compiled with `torch.compile(model, mode="reduce-overhead")` (CUDA
graphs), float32, SGD with momentum, cross-entropy, random images; cuDNN convolutions as extern kernels."""
import argparse

import torch
import torch.nn.functional as F
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=100).to(args.device)
    model.train()
    cmodel = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 224, 224, device=args.device)
        y = torch.randint(0, 100, (args.batch,), device=args.device)
        loss = F.cross_entropy(cmodel(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
