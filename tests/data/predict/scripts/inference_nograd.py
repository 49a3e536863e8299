"""Batch inference of a text classifier (EmbeddingBag + MLP) under torch.no_grad: a DataLoader over a dataset whose
last batch is short, top-5 predictions gathered on the host."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class BagClassifier(nn.Module):
    def __init__(self, vocab, dim, classes):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Dropout(0.2), nn.Linear(4 * dim, classes))

    def forward(self, tokens):
        return self.mlp(self.bag(tokens))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--steps", type=int, default=None, help="stop after this many batches (default: all)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = BagClassifier(50000, args.dim, 1000).to(device)
    model.eval()
    dataset = TensorDataset(torch.randint(0, 50000, (args.samples, args.seq)))
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=False)

    top5 = []
    with torch.no_grad():
        for i, (tokens,) in enumerate(loader):
            if i == args.steps:
                break
            probs = torch.softmax(model(tokens.to(device)), dim=-1)
            top5.append(probs.topk(5, dim=-1).indices.cpu())
    preds = torch.cat(top5)
    print(f"{preds.shape[0]} predictions, first {preds[0].tolist()}")


if __name__ == "__main__":
    main()
