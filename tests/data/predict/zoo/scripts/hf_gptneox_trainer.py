"""A small GPT-NeoX (transformers GPTNeoXForCausalLM: parallel residual, rotary on a quarter of each head) trained
by transformers.Trainer: bf16 mixed precision, its AdamW and linear schedule, gradient clipping at 1.0, 3 steps over
a map-style dataset of random token blocks."""
import argparse
import tempfile

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Trainer, TrainingArguments


class RandomBlocks(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=50304, hidden_size=1024, intermediate_size=4096, num_hidden_layers=args.layers,
                           num_attention_heads=16, rotary_pct=0.25, max_position_embeddings=2048)
    model = GPTNeoXForCausalLM(config)
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                                  learning_rate=3e-4, weight_decay=0.01, bf16=True, logging_steps=1,
                                  save_strategy="no", report_to="none", dataloader_num_workers=0,
                                  disable_tqdm=True)
        trainer = Trainer(model=model, args=targs, train_dataset=RandomBlocks(64, args.seq, config.vocab_size))
        result = trainer.train()
    print(f"train loss {result.training_loss:.4f}")


if __name__ == "__main__":
    main()
