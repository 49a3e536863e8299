"""A Qwen2-style decoder (transformers Qwen2ForCausalLM: 14 query / 2 key-value heads, a 151,936-token vocabulary)
in float32 weights under torch.autocast(bfloat16), fused AdamW, an all-ones attention mask from the batch."""
import argparse

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=args.layers,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device.startswith("cuda"))
    model.train()
    for step in range(args.steps):
        batch = {"input_ids": torch.randint(0, config.vocab_size, (args.batch, args.seq)),
                 "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long)}
        batch = {k: v.to(args.device) for k, v in batch.items()}
        with torch.autocast(device_type="cuda" if args.device.startswith("cuda") else "cpu", dtype=torch.bfloat16):
            out = model(**batch, labels=batch["input_ids"])
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
