"""Sequence classification with nn.TransformerEncoder, Adam and dropout, over batches of varying length."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, vocab, d_model, nhead, layers, classes, max_len=1024, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=4 * d_model, dropout=dropout,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):
        x = self.embed(tokens) * self.scale + self.pos[:, :tokens.size(1)]
        x = self.encoder(x)
        return self.head(self.norm(x.mean(dim=1)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lengths", default="128,512,256,384,64", help="sequence length of each step")
    p.add_argument("--steps", type=int, default=None, help="steps (default: one per length)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = Classifier(vocab=16000, d_model=args.d_model, nhead=8, layers=args.layers, classes=5).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    model.train()
    lengths = [int(n) for n in args.lengths.split(",")][:args.steps]
    for step, length in enumerate(lengths):
        tokens = torch.randint(0, 16000, (args.batch, length)).to(device)
        labels = torch.randint(0, 5, (args.batch,)).to(device)
        logits = model(tokens)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} len {length} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
