"""A small Gemma (transformers GemmaForCausalLM: multi-query attention, head dim 256, GeGLU) in bfloat16 with
`attn_implementation="eager"` (the attention matrices materialised), AdamW."""
import argparse

import torch
from transformers import GemmaConfig, GemmaForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = GemmaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=args.layers,
                         num_attention_heads=8, num_key_value_heads=1, head_dim=256, max_position_embeddings=4096)
    model = GemmaForCausalLM._from_config(config, attn_implementation="eager", dtype=torch.bfloat16)
    model.to(args.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
    for step in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq)).to(args.device)
        loss = model(input_ids, labels=input_ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
