"""A 2-D DeviceMesh (HSDP's shape: replicate x shard) for `torchrun --nproc_per_node 4`: the mesh's groups made on
the world group, one CUDA tensor per rank, and what the mesh says of this rank printed."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("replicate", "shard"))
x = torch.empty(1 << 20, device="cuda")
print(mesh["shard"].get_group().group_name != "", mesh["replicate"].size(), mesh.get_coordinate())
dist.destroy_process_group()
