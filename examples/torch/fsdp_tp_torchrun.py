"""torchtitan-style training: FSDP2 (`fully_shard`) over the "dp" dimension and DTensor tensor parallelism
(`parallelize_module` with Colwise/RowwiseParallel) over the "tp" dimension of a 2-D DeviceMesh, AdamW.

    torchrun --nproc-per-node 4 examples/torch/fsdp_tp_torchrun.py --tp 2           # gloo on CPUs, NCCL on GPUs
    simcomm launch --nproc-per-node 8 --cluster hgx-h100 examples/torch/fsdp_tp_torchrun.py --tp 2
    simcomm launch --nnodes 64 --nproc-per-node 8 --cluster hgx-h100 --cuda-as meta --compute \\
        examples/torch/fsdp_tp_torchrun.py --tp 8 --dim 8192 --layers 2 --batch 1 --seq 4096 --steps 1

Rank 0 prints each step's loss (averaged over the data-parallel ranks); at the end every rank prints the sum of its
weight shards. With parameters on the meta device (size only, as `--cuda-as meta` gives them) there are no values
to print: rank 0 prints each step's (simulated) wall time instead.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=2)
p.add_argument("--dim", type=int, default=32)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--batch", type=int, default=4)  # sequences per data-parallel rank
p.add_argument("--seq", type=int, default=8)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()


class FeedForward(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return x + self.w2(F.gelu(self.w1(x)))


class Model(nn.Module):
    def __init__(self, dim: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(FeedForward(dim) for _ in range(layers))
        self.out = nn.Linear(dim, 1, bias=False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


use_gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if use_gpu else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if use_gpu:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
device = torch.device("cuda" if use_gpu else "cpu")
mesh = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
dp_rank = mesh["dp"].get_local_rank()

torch.manual_seed(0)  # the same initial weights on every rank
with torch.device(device):
    model = Model(args.dim, args.layers)
meta = next(model.parameters()).is_meta
for layer in model.layers:
    parallelize_module(layer, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    fully_shard(layer, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

for step in range(args.steps):
    start = time.perf_counter()
    if meta:  # sizes only: the batch, too, lives on the (meta) device
        x, y = torch.empty(args.batch, args.seq, args.dim, device=device), torch.empty(args.batch, args.seq, 1,
                                                                                      device=device)
    else:
        g = torch.Generator().manual_seed(1000 * step + dp_rank)  # each data-parallel rank its own batch
        x = torch.randn(args.batch, args.seq, args.dim, generator=g).to(device)
        y = torch.randn(args.batch, args.seq, 1, generator=g).to(device)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if meta:
        if use_gpu:
            torch.cuda.synchronize()
        if rank == 0:
            print(f"step {step} time {1e3 * (time.perf_counter() - start):.3f} ms")
        continue
    loss = loss.detach().clone()
    dist.all_reduce(loss, group=mesh["dp"].get_group())
    if rank == 0:
        print(f"step {step} loss {loss.item() / mesh['dp'].size():.6f}")

if not meta:
    total = sum(float(p.detach().to_local().double().sum()) for p in model.parameters())
    print(f"rank {rank} weights {total:.6f}")
dist.barrier()  # every rank done communicating before any tears gloo down (a lone exit can abort a peer)
dist.destroy_process_group()
