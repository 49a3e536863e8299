"""A small Qwen3 decoder (transformers Qwen3ForCausalLM: 4 layers of 1024, grouped-query attention 16/8 heads with
q/k RMSNorm, tied embeddings) in bfloat16 weights, compiled with `torch.compile(model)`, AdamW, the model's own
loss."""
import argparse

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    cfg = Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=4, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, vocab_size=32000, max_position_embeddings=4096,
                      tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg).to(args.device, torch.bfloat16)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(args.steps):
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
        loss = cmodel(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
