"""A small Phi (transformers PhiForCausalLM: partial rotary embeddings, parallel attention and MLP) in float16
mixed precision: torch.autocast(float16) around forward, torch.amp.GradScaler, clip_grad_norm_ after unscale_."""
import argparse

import torch
from transformers import PhiConfig, PhiForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = PhiConfig(vocab_size=51200, hidden_size=1024, intermediate_size=4096, num_hidden_layers=args.layers,
                       num_attention_heads=16, partial_rotary_factor=0.5, max_position_embeddings=2048)
    model = PhiForCausalLM(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cuda")
    model.train()
    for step in range(args.steps):
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=args.device)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}")


if __name__ == "__main__":
    main()
