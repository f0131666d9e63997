"""`simcomm bench launch-cpu-host-4000`'s script: an unmodified torch.distributed program, as torchrun would run it.

Every rank all-reduces 1,024 float32 values (its rank number) over gloo and checks the sum.
    simcomm launch --nproc-per-node 4000 --cluster cpu-host benchmarks/launch/allreduce.py
"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.full((1024,), float(dist.get_rank()))
dist.all_reduce(x)
n = dist.get_world_size()
if not bool((x == n * (n - 1) / 2).all()):
    raise AssertionError(f"rank {dist.get_rank()}: all_reduce gave {x[0].item()}, expected {n * (n - 1) / 2}")
dist.destroy_process_group()
