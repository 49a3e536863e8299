"""A Mistral-style decoder (transformers MistralForCausalLM: grouped-query attention, 4 layers of 1024, 8 heads
over 2 key-value heads) in bfloat16 compiled with `torch.compile(model)`, AdamW, the model's own loss."""
import argparse

import torch
from transformers import MistralConfig, MistralForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=4,
                           num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048)
    model = MistralForCausalLM(config).to(device=args.device, dtype=torch.bfloat16)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(args.steps):
        x = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=args.device)
        loss = cmodel(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
