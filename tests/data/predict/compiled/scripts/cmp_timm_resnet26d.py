"""ResNet-26-D (timm resnet26d: the deep stem and average-pool downsampling) in channels_last, compiled with
`torch.compile(model)`, float32, SGD with momentum and Nesterov, 100 classes, random images."""
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
    model = timm.create_model("resnet26d", num_classes=100).to(args.device, memory_format=torch.channels_last)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 224, 224, device=args.device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 100, (args.batch,), device=args.device)
        loss = F.cross_entropy(cmodel(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
