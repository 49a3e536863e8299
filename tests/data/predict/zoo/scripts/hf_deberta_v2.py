"""DeBERTa-v2 sequence classification (transformers DebertaV2ForSequenceClassification: disentangled relative
attention, its own attention code, 3 labels), AdamW, gradient clipping, padded batches."""
import argparse

import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=args.layers,
                             num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512,
                             relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
                             share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                             num_labels=3)
    model = DebertaV2ForSequenceClassification(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model.train()
    for step in range(args.steps):
        lengths = torch.randint(32, args.seq + 1, (args.batch,))
        attention_mask = (torch.arange(args.seq)[None, :] < lengths[:, None]).long()
        input_ids = torch.randint(5, config.vocab_size, (args.batch, args.seq)) * attention_mask
        labels = torch.randint(0, 3, (args.batch,))
        out = model(input_ids=input_ids.to(args.device), attention_mask=attention_mask.to(args.device),
                    labels=labels.to(args.device))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
