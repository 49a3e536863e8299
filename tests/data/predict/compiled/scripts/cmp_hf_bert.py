"""BERT (transformers BertForSequenceClassification, 6 layers of 768, 2 labels) compiled with
`torch.compile(model)`, AdamW, full-length batches, the model's own loss."""
import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(num_hidden_layers=6, num_labels=2)).to(args.device)
    model.train()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    for step in range(args.steps):
        ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), device=args.device)
        labels = torch.randint(0, 2, (args.batch,), device=args.device)
        loss = cmodel(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
