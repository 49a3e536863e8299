"""A small GPT-NeoX (transformers GPTNeoXForCausalLM: 4 layers of 768, 12 heads, partial rotary, parallel
residual) compiled with `torch.compile(model)`, float32 weights under bfloat16 autocast, AdamW, the model's own
loss."""
import argparse

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=4, num_attention_heads=12,
                        vocab_size=50304, max_position_embeddings=2048, rotary_pct=0.25)
    model = GPTNeoXForCausalLM(cfg).to(args.device)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(args.steps):
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
