"""BERT-base sequence classification (transformers BertForSequenceClassification, 2 labels) fine-tuned with fused
AdamW and a linear schedule on padded batches (an attention mask with zeros past each length, token type ids)."""
import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(num_labels=2)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, 100)
    model.train()
    for step in range(args.steps):
        lengths = torch.randint(16, args.seq + 1, (args.batch,))
        attention_mask = (torch.arange(args.seq)[None, :] < lengths[:, None]).long()
        batch = {"input_ids": torch.randint(1000, 30000, (args.batch, args.seq)) * attention_mask,
                 "token_type_ids": torch.zeros(args.batch, args.seq, dtype=torch.long),
                 "attention_mask": attention_mask, "labels": torch.randint(0, 2, (args.batch,))}
        batch = {k: v.to(args.device) for k, v in batch.items()}
        outputs = model(**batch)
        outputs.loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        print(f"step {step} loss {outputs.loss.item():.4f}")


if __name__ == "__main__":
    main()
