"""A word-level language model: Embedding, a 2-layer nn.LSTM (batch_first, dropout between layers), a Linear
decoder; Adam, gradient clipping, the hidden state carried between batches and detached."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class LSTMModel(nn.Module):
    def __init__(self, vocab, emb, hidden, layers, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens, state=None):
        out, state = self.lstm(self.drop(self.embed(tokens)), state)
        return self.decoder(self.drop(out)), state


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = LSTMModel(args.vocab, 512, args.hidden, args.layers, 0.2).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randint(0, args.vocab, (args.batch, args.steps * args.seq + 1))
    model.train()
    state = None
    for step in range(args.steps):
        chunk = data[:, step * args.seq:(step + 1) * args.seq + 1].to(device)
        inp, target = chunk[:, :-1], chunk[:, 1:]
        if state is not None:
            state = tuple(s.detach() for s in state)
        logits, state = model(inp, state)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), target.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} ppl {loss.exp().item():.1f}")


if __name__ == "__main__":
    main()
