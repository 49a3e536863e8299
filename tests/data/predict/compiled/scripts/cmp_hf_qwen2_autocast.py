"""A small Qwen2-style decoder (transformers Qwen2ForCausalLM: 4 layers of 896, 14 query / 2 key-value heads, a
151,936-token vocabulary) in float32 weights under torch.autocast(bfloat16), compiled with `torch.compile(model)`,
AdamW, an all-ones attention mask."""
import argparse

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=4, num_attention_heads=14,
                      num_key_value_heads=2, vocab_size=151936, max_position_embeddings=2048)
    model = Qwen2ForCausalLM(cfg).to(args.device)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(args.steps):
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(input_ids=x, attention_mask=torch.ones_like(x), labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
