"""A Llama-architecture decoder (12/4 heads) in float32 under torch.autocast(bfloat16) with right-padded batches:
the attention mask has zeros past each sequence's length, so transformers builds a 4-D mask for SDPA; padded labels
are -100."""
import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=args.layers,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=4096,
                         pad_token_id=0)
    model = LlamaForCausalLM(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    model.train()
    for step in range(args.steps):
        lengths = torch.randint(args.seq // 4, args.seq + 1, (args.batch,))
        lengths[0] = args.seq
        attention_mask = (torch.arange(args.seq)[None, :] < lengths[:, None]).long()
        input_ids = torch.randint(1, config.vocab_size, (args.batch, args.seq)) * attention_mask
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        input_ids, attention_mask, labels = (t.to(args.device) for t in (input_ids, attention_mask, labels))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
