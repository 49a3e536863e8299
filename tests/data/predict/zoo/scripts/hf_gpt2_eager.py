"""GPT-2 (transformers GPT2LMHeadModel, 6 layers) with `attn_implementation="eager"`, dropout off, float32, SGD with
momentum, and a padded batch: right padding in the attention mask, the padded labels set to -100."""
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
    config = GPT2Config(n_layer=6, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel._from_config(config, attn_implementation="eager").to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for step in range(args.steps):
        lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,))
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
        attention_mask = (torch.arange(args.seq)[None, :] < lengths[:, None]).long()
        input_ids[attention_mask == 0] = config.eos_token_id
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        out = model(input_ids=input_ids.to(args.device), attention_mask=attention_mask.to(args.device),
                    labels=labels.to(args.device))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
