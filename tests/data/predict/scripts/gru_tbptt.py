"""A GRUCell language model trained with truncated backpropagation through time: the hidden state is carried
from one chunk of the sequence to the next and detached between them."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class CharGRU(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.cell = nn.GRUCell(emb, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, h):
        # tokens: [T, B]
        logits = []
        for t in range(tokens.size(0)):
            h = self.cell(self.embed(tokens[t]), h)
            logits.append(self.head(h))
        return torch.stack(logits), h


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--bptt", type=int, default=16, help="chunk length")
    p.add_argument("--steps", type=int, default=4, help="chunks")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = CharGRU(args.vocab, 128, args.hidden).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    data = torch.randint(0, args.vocab, (args.steps * args.bptt + 1, args.batch))

    h = torch.zeros(args.batch, args.hidden, device=device)
    for step in range(args.steps):
        chunk = data[step * args.bptt:(step + 1) * args.bptt + 1].to(device)
        inp, target = chunk[:-1], chunk[1:]
        h = h.detach()
        logits, h = model(inp, h)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), target.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        print(f"chunk {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
