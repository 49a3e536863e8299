"""Train llama.py's decoder sharded with FSDP2, one process per GPU (torchrun --nproc_per_node N), as torchtitan
does: the model built on the meta device, every block and then the root fully_shard-ed (on a 1-D mesh, or HSDP's
replicate x shard mesh with --replicate R), the parameters materialised on the GPU (to_empty) and initialised, AdamW.
--checkpoint wraps every block in activation checkpointing (non-reentrant); --bf16 trains in bfloat16 under
MixedPrecisionPolicy (parameters bf16, gradients reduced in fp32); --keep-gathered keeps every block's parameters
gathered after forward; --prefetch K has each block prefetch the next K blocks' all-gathers forward and the previous
K backward; --offload keeps the sharded parameters, gradients and optimizer states on the host (CPUOffloadPolicy)."""
import argparse
import dataclasses
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import CONFIGS, RMSNorm, Transformer  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--layers", type=int, default=0, help="the size's config with L blocks (0: as it is)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--replicate", type=int, default=1, help="HSDP: R replicas of a WORLD/R-way shard")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing of every block")
    p.add_argument("--bf16", action="store_true", help="MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)")
    p.add_argument("--keep-gathered", action="store_true", help="reshard_after_forward=False for every block")
    p.add_argument("--prefetch", type=int, default=0, help="explicit prefetching of the next/previous K blocks")
    p.add_argument("--offload", action="store_true", help="CPUOffloadPolicy(pin_memory=True)")
    args = p.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    world = dist.get_world_size()
    if args.replicate > 1:
        mesh = init_device_mesh("cuda", (args.replicate, world // args.replicate), mesh_dim_names=("rep", "shard"))
    else:
        mesh = init_device_mesh("cuda", (world,))
    torch.manual_seed(0)
    cfg = CONFIGS[args.size]
    if args.layers:
        cfg = dataclasses.replace(cfg, n_layers=args.layers)
    with torch.device("meta"):
        model = Transformer(cfg)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.bf16 else \
        MixedPrecisionPolicy()
    offload = CPUOffloadPolicy() if args.offload else OffloadPolicy()
    for i, block in enumerate(model.layers):
        if args.checkpoint:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
            block = checkpoint_wrapper(block)
            model.layers[i] = block
        # the last block's parameters are gathered again at once by backward: kept, as torchtitan keeps them
        raf = not args.keep_gathered and i < len(model.layers) - 1
        fully_shard(block, mesh=mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=raf)
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
    if args.prefetch:
        blocks = list(model.layers)
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + args.prefetch])
            block.set_modules_to_backward_prefetch(blocks[max(0, i - args.prefetch):i][::-1])
        del blocks
    # CPU offloading keeps the shards on the host: materialised there, FSDP copies them in for each all-gather
    model.to_empty(device="cpu" if args.offload else "cuda")
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)
    n_params = sum(p.numel() for p in model.parameters())
    if dist.get_rank() == 0:
        print(f"llama {args.size} on {world} ranks: {n_params / 1e6:.1f} M parameters, sharded over the ranks")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for step in range(args.steps):
        tokens = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), device="cuda")
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
