"""Data-parallel training of a small MLP, written for torchrun: gradients averaged with all_reduce(AVG).

    torchrun --nproc-per-node 2 examples/torch/data_parallel.py --steps 3
    simcomm launch --nproc-per-node 2 --cluster cpu-host --compute examples/torch/data_parallel.py --steps 3
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--dim", type=int, default=32)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)  # every rank builds the same model and data
data = torch.randn(8 * world, args.dim)
params = [torch.nn.Parameter(torch.randn(args.dim, args.dim) / args.dim ** 0.5) for _ in range(2)]
optimizer = torch.optim.AdamW(params, lr=1e-2)
mine = data[rank * 8:(rank + 1) * 8]
for step in range(args.steps):
    x = mine
    for p in params:
        x = F.gelu(x @ p)
    loss = x.square().mean()
    loss.backward()
    for p in params:
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    optimizer.step()
    optimizer.zero_grad()
    print(f"rank {rank} step {step} loss {loss.item():.6f} param sum {sum(p.sum().item() for p in params):.6f}")
dist.barrier()  # every rank done communicating before any tears gloo down (a lone exit can abort a peer)
dist.destroy_process_group()
