"""A small Mistral (transformers MistralForCausalLM, 16/4 heads) in float32 with gradient checkpointing
(`gradient_checkpointing_enable()`, `use_cache=False`), AdamW, gradient clipping, an all-ones attention mask."""
import argparse

import torch
from transformers import MistralConfig, MistralForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=args.layers,
                           num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                           sliding_window=None, use_cache=False)
    model = MistralForCausalLM(config)
    model.gradient_checkpointing_enable()
    model.to(args.device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for step in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=args.device)
        attention_mask = torch.ones_like(input_ids)
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
