"""GPT-2 small (transformers GPT2LMHeadModel, 12 layers of 768, dropout 0.1 as configured) trained with AdamW and a
linear warm-up schedule (transformers.get_linear_schedule_with_warmup) on random tokens."""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=1000)
    model.train()
    data = torch.randint(0, model.config.vocab_size, (64, args.seq + 1))
    for step in range(args.steps):
        ix = torch.randint(0, data.size(0), (args.batch,))
        x = data[ix, :-1].to(args.device)
        outputs = model(x, labels=x)
        outputs.loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        print(f"step {step} loss {outputs.loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
