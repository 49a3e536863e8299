"""T5 (transformers T5ForConditionalGeneration, 4 + 4 layers of 512, relative attention bias) compiled with
`torch.compile(model)`, float32, AdamW, encoder-decoder batches, the model's own loss."""
import argparse

import torch
from transformers import T5Config, T5ForConditionalGeneration


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src", type=int, default=256)
    p.add_argument("--tgt", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=4, num_decoder_layers=4,
                      num_heads=8, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(config).to(args.device)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(args.steps):
        ids = torch.randint(0, config.vocab_size, (args.batch, args.src), device=args.device)
        labels = torch.randint(0, config.vocab_size, (args.batch, args.tgt), device=args.device)
        loss = cmodel(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
