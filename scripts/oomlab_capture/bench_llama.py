"""The capture's cost: a llama-style decoder (RMSNorm, rotary-free attention through
F.scaled_dot_product_attention, SwiGLU MLP) built on the device with `with torch.device("cuda")`, one bf16-autocast
training step with AdamW, captured; prints the parameters, ops, events, seconds and the cost per op.

    PYTHONPATH=scripts python -m oomlab_capture.bench_llama [1B|7B] [--seq N] [--batch N]
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {"1B": dict(dim=2048, layers=16, heads=16, ffn=5632, vocab=32000),
         "7B": dict(dim=4096, layers=32, heads=32, ffn=11008, vocab=32000)}


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class Block(nn.Module):
    def __init__(self, d, h, f):
        super().__init__()
        self.h = h
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, dim, layers, heads, ffn, vocab):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tok):
        x = self.emb(tok)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def step(size, batch, seq):
    with torch.device("cuda"):
        model = Llama(**SIZES[size])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tok = torch.randint(0, 32000, (batch, seq + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tok[:, 1:].flatten())
    loss.backward()
    opt.step()
    return sum(p.numel() for p in model.parameters())


def main(argv):
    import oomlab_capture
    size = argv[0] if argv and not argv[0].startswith("-") else "1B"
    seq = int(argv[argv.index("--seq") + 1]) if "--seq" in argv else 2048
    batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 1
    t0 = time.time()
    with oomlab_capture.capture(None, quiet=True) as cap:
        n = step(size, batch, seq)
    total = time.time() - t0
    ops = len(cap.labels) - 1
    print(f"{size}: {n:,} parameters, batch {batch} x {seq}: {ops} ops, {len(cap.events)} events, capture "
          f"{cap.seconds:.2f} s ({total:.2f} s with the extension load), {1e6 * cap.seconds / ops:.0f} us per op, "
          f"peak live {cap.max_allocated():,} B")


if __name__ == "__main__":
    main(sys.argv[1:])
