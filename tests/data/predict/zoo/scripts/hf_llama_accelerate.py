"""A Llama-architecture decoder trained through accelerate.Accelerator(mixed_precision="bf16") with gradient
accumulation over 2 micro-batches, accelerator.clip_grad_norm_, AdamW and a cosine schedule; float32 weights."""
import argparse

import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM, get_cosine_schedule_with_warmup


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=args.layers,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048)
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.utils.data.TensorDataset(torch.randint(0, config.vocab_size, (64, args.seq)))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True)
    scheduler = get_cosine_schedule_with_warmup(optimizer, 2, 100)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()
    done = 0
    for (input_ids,) in loader:
        with accelerator.accumulate(model):
            loss = model(input_ids=input_ids, labels=input_ids).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            done += 1
            accelerator.print(f"step {done} loss {loss.item():.4f}")
            if done == args.steps:
                break


if __name__ == "__main__":
    main()
