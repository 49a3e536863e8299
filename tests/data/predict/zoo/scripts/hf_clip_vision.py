"""CLIP's vision tower (transformers CLIPVisionModel, ViT-B/32's shape) with a linear probe head trained jointly,
AdamW, float32, pooled output."""
import argparse

import torch
import torch.nn as nn
from transformers import CLIPVisionConfig, CLIPVisionModel


class Classifier(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.tower = CLIPVisionModel(CLIPVisionConfig(patch_size=32, image_size=224))
        self.head = nn.Linear(self.tower.config.hidden_size, classes)

    def forward(self, pixel_values):
        return self.head(self.tower(pixel_values=pixel_values).pooler_output)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = Classifier(10).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    for step in range(args.steps):
        pixels = torch.randn(args.batch, 3, 224, 224, device=args.device)
        labels = torch.randint(0, 10, (args.batch,), device=args.device)
        loss = nn.functional.cross_entropy(model(pixels), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
