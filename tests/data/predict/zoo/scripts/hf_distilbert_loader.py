"""DistilBERT sequence classification fed by the usual input pipeline: a DataLoader with 2 worker processes and
pinned memory (`num_workers=2, pin_memory=True`), batches moved with `non_blocking=True`; AdamW."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import DistilBertConfig, DistilBertForSequenceClassification


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    n = args.batch * args.steps
    lengths = torch.randint(32, args.seq + 1, (n,))
    mask = (torch.arange(args.seq)[None, :] < lengths[:, None]).long()
    data = TensorDataset(torch.randint(1000, 30000, (n, args.seq)) * mask, mask, torch.randint(0, 4, (n,)))
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers, pin_memory=True)
    model = DistilBertForSequenceClassification(DistilBertConfig(num_labels=4)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    model.train()
    for step, (input_ids, attention_mask, labels) in enumerate(loader):
        input_ids = input_ids.to(args.device, non_blocking=True)
        attention_mask = attention_mask.to(args.device, non_blocking=True)
        labels = labels.to(args.device, non_blocking=True)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
