"""ConvNeXt-T (timm convnext_tiny: depthwise 7x7 convolutions, LayerNorm, stochastic depth) in float32, AdamW, as
fine-tuned on a 100-class problem."""
import argparse

import timm
import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = timm.create_model("convnext_tiny", num_classes=100, drop_path_rate=0.1).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)
    model.train()
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 224, 224, device=args.device)
        y = torch.randint(0, 100, (args.batch,), device=args.device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
