"""A Llama-architecture decoder (transformers LlamaForCausalLM, grouped-query attention 16/4 heads) with bfloat16
weights, trained with AdamW on random tokens; the model's own loss from `labels`, no attention mask."""
import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=args.layers,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                         tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(args.device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for step in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=args.device)
        loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
