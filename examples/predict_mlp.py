"""predict_mlp.py - an ordinary PyTorch training script, for `oomlab predict` (README, "Will it fit?").

    build/oomlab predict examples/predict_mlp.py --batch 4096 --width 8192

A 4-layer MLP trained with Adam on random data for a few steps, with a gradient-norm clip each step: nothing in
it knows about oomlab. On a GPU it runs as it is; under oomlab predict it runs on the CPU's meta device.
"""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=256)
p.add_argument("--width", type=int, default=4096)
p.add_argument("--depth", type=int, default=4)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

layers = []
for _ in range(args.depth):
    layers += [nn.Linear(args.width, args.width), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(args.width, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

for step in range(args.steps):
    x = torch.randn(args.batch, args.width, device="cuda")
    y = torch.randint(0, 10, (args.batch,), device="cuda")
    loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
