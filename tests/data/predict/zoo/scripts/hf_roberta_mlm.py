"""RoBERTa-base masked language modelling (transformers RobertaForMaskedLM) with the library's own masking:
DataCollatorForLanguageModeling without a tokenizer's files (a minimal tokenizer stand-in), AdamW, full-length
sequences with an all-ones attention mask."""
import argparse

import torch
from transformers import RobertaConfig, RobertaForMaskedLM


def mask_tokens(input_ids, mask_id, vocab, prob=0.15):
    """BERT's masking (transformers DataCollatorForLanguageModeling.torch_mask_tokens), on the CPU."""
    labels = input_ids.clone()
    masked = torch.bernoulli(torch.full(labels.shape, prob)).bool()
    labels[~masked] = -100
    replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked
    input_ids[replaced] = mask_id
    rand = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked & ~replaced
    input_ids[rand] = torch.randint(vocab, labels.shape, dtype=torch.long)[rand]
    return input_ids, labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
    model = RobertaForMaskedLM(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6)
    model.train()
    for step in range(args.steps):
        ids = torch.randint(4, config.vocab_size, (args.batch, args.seq))
        ids[:, 0], ids[:, -1] = 0, 2
        ids, labels = mask_tokens(ids, 50264, config.vocab_size)
        attention_mask = torch.ones_like(ids)
        out = model(input_ids=ids.to(args.device), attention_mask=attention_mask.to(args.device),
                    labels=labels.to(args.device))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
