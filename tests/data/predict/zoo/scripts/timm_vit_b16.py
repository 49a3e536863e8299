"""ViT-B/16 (timm vit_base_patch16_224, a convolutional patch embedding) trained in bfloat16 autocast with AdamW,
label smoothing and gradient clipping, as timm's train.py does it."""
import argparse

import timm
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", num_classes=1000, drop_path_rate=0.1).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    model.train()
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 224, 224, device=args.device)
        targets = torch.randint(0, 1000, (args.batch,), device=args.device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
