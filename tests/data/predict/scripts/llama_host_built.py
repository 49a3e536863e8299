"""A Llama-architecture decoder of Llama 3's 1B (3.2, untied), 8B or 70B shape (transformers LlamaForCausalLM from
a config), built on the host in bfloat16 and moved to CUDA, the ordinary way (`from_config(...).to("cuda")`), then
trained with gradient checkpointing and AdamW on random tokens. Predicting it must not build the model on the host:
70B parameters are 141 GB there (issue 31; scripts/bench_predict.py times it)."""
import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

SIZES = {"1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                    num_key_value_heads=8),
         "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=8),
         "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                     num_key_value_heads=8)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="8b", choices=sorted(SIZES))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=1)
    args = p.parse_args()
    config = LlamaConfig(vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, **SIZES[args.size])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to("cuda")
    model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for step in range(args.steps):
        ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
