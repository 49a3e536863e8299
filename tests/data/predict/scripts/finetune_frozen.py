"""Fine-tuning with a frozen backbone: a transformer encoder whose weights are frozen (requires_grad_(False)) and a
new classification head, the only parameters the optimizer gets."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Backbone(nn.Module):
    def __init__(self, vocab, d_model, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, tokens):
        return self.encoder(self.embed(tokens))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    backbone = Backbone(30000, args.d_model, args.layers)
    backbone.requires_grad_(False)  # keep the "pretrained" weights
    head = nn.Sequential(nn.Linear(args.d_model, 256), nn.Tanh(), nn.Linear(256, 3))
    model = nn.Sequential(backbone, head).to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable {sum(p.numel() for p in trainable)} of {sum(p.numel() for p in model.parameters())}")
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)

    model.train()
    for step in range(args.steps):
        tokens = torch.randint(0, 30000, (args.batch, args.seq), device=device)
        labels = torch.randint(0, 3, (args.batch,), device=device)
        features = backbone(tokens)[:, 0]  # the first token's features
        loss = F.cross_entropy(head(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
