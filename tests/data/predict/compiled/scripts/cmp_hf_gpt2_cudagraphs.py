"""GPT-2 (transformers GPT2LMHeadModel, 6 layers of 768, dropout 0.1 as configured) compiled with
`torch.compile(model, mode="reduce-overhead")` (CUDA graphs), AdamW, the model's own loss from `labels`, random
tokens."""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6)).to(args.device)
    model.train()
    cmodel = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    for step in range(args.steps):
        x = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device=args.device)
        loss = cmodel(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
