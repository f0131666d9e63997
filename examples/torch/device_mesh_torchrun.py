"""Groups from a DeviceMesh, written for torchrun on GPUs (NCCL), falling back to gloo on CPUs.

    torchrun --nproc-per-node 8 examples/torch/device_mesh_torchrun.py
    simcomm launch --nproc-per-node 8 --cluster hgx-h100 examples/torch/device_mesh_torchrun.py

A 2 x 2 x 2 (dp, cp, tp) mesh: a tensor-parallel all-reduce, a context-parallel all-gather, a data-parallel
average, and the (dp, tp) sub-mesh's groups.
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

use_gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if use_gpu else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if use_gpu:
    torch.cuda.set_device(rank % torch.cuda.device_count())
device = "cuda" if use_gpu else "cpu"
mesh = init_device_mesh(device, (2, 2, world // 4), mesh_dim_names=("dp", "cp", "tp"))
coordinate = tuple(mesh.get_coordinate())
print(f"rank {rank} coordinate {coordinate} local tp {mesh.get_local_rank('tp')} sizes "
      f"{[mesh.size(d) for d in range(mesh.ndim)]}")

tp, cp, dp = (mesh[name].get_group() for name in ("tp", "cp", "dp"))
x = torch.full((2,), float(rank + 1), device=device)
dist.all_reduce(x, group=tp)
print(f"rank {rank} tp {dist.get_process_group_ranks(tp)} sum {x.cpu().tolist()}")

parts = [torch.zeros(1, device=device) for _ in range(mesh.size(1))]
dist.all_gather(parts, torch.tensor([float(10 * rank)], device=device), group=cp)
print(f"rank {rank} cp {dist.get_process_group_ranks(cp)} gathered {[p.item() for p in parts]}")

g = torch.tensor([float(rank)], device=device)
dist.all_reduce(g, group=dp)
print(f"rank {rank} dp {dist.get_process_group_ranks(dp)} mean {g.item() / mesh.size(0)}")

sub = mesh["dp", "tp"]
print(f"rank {rank} (dp, tp) coordinate {tuple(sub.get_coordinate())} groups "
      f"{[dist.get_process_group_ranks(sub.get_group(d)) for d in ('dp', 'tp')]}")
dist.barrier()  # every rank done communicating before any tears gloo down (a lone exit can abort a peer)
dist.destroy_process_group()
