"""BART-base (transformers BartForConditionalGeneration) for summarisation-style training in float16 mixed
precision (torch.autocast, GradScaler), AdamW, padded sources and targets."""
import argparse

import torch
from transformers import BartConfig, BartForConditionalGeneration


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src", type=int, default=512)
    p.add_argument("--tgt", type=int, default=128)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = BartConfig(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6,
                        encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                        decoder_ffn_dim=3072, max_position_embeddings=1024)
    model = BartForConditionalGeneration(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
    scaler = torch.amp.GradScaler()
    model.train()
    for step in range(args.steps):
        src_len = torch.randint(args.src // 2, args.src + 1, (args.batch,))
        attention_mask = (torch.arange(args.src)[None, :] < src_len[:, None]).long()
        input_ids = torch.randint(4, config.vocab_size, (args.batch, args.src)).masked_fill(attention_mask == 0, 1)
        labels = torch.randint(4, config.vocab_size, (args.batch, args.tgt))
        labels[:, -args.tgt // 4:] = -100
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(input_ids=input_ids.to(args.device), attention_mask=attention_mask.to(args.device),
                         labels=labels.to(args.device)).loss
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
