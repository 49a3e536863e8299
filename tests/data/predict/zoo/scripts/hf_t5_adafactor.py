"""T5-small (transformers T5ForConditionalGeneration) trained with transformers' Adafactor (relative steps, no
learning rate given, as the T5 recipe has it) on padded source batches: an attention mask with zeros past each
source's length, targets padded with -100."""
import argparse

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--src", type=int, default=512)
    p.add_argument("--tgt", type=int, default=128)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                      decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(config).to(args.device)
    optimizer = Adafactor(model.parameters(), scale_parameter=True, relative_step=True, warmup_init=True, lr=None)
    model.train()
    for step in range(args.steps):
        src_len = torch.randint(args.src // 4, args.src + 1, (args.batch,))
        attention_mask = (torch.arange(args.src)[None, :] < src_len[:, None]).long()
        input_ids = torch.randint(3, config.vocab_size, (args.batch, args.src)) * attention_mask
        tgt_len = torch.randint(8, args.tgt + 1, (args.batch,))
        labels = torch.randint(3, config.vocab_size, (args.batch, args.tgt))
        labels[torch.arange(args.tgt)[None, :] >= tgt_len[:, None]] = -100
        out = model(input_ids=input_ids.to(args.device), attention_mask=attention_mask.to(args.device),
                    labels=labels.to(args.device))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
