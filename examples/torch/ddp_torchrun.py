"""DistributedDataParallel training, written for torchrun on GPUs; falls back to gloo on CPUs.

    torchrun --nproc-per-node 2 examples/torch/ddp_torchrun.py --steps 3
    simcomm launch --nproc-per-node 8 --cluster hgx-h100 --compute examples/torch/ddp_torchrun.py

The replicas start different (rank r adds r to every weight): DDP broadcasts rank 0's weights when it wraps the
model, then all-reduces the gradients in buckets during backward. Every rank prints the same weights.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--dim", type=int, default=64)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--bucket-mb", type=float, default=0.01, help="DDP's bucket_cap_mb: small, so several buckets")
parser.add_argument("--find-unused", action="store_true", help="DDP's find_unused_parameters")
parser.add_argument("--comm-hook", choices=("none", "allreduce", "fp16"), default="none",
                    help="a DDP communication hook from torch's default_hooks")
args = parser.parse_args()

use_gpu = torch.cuda.is_available()
local_rank = int(os.environ["LOCAL_RANK"])
if use_gpu:
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if use_gpu else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.GELU(), nn.Linear(4 * args.dim, args.dim),
                      nn.LayerNorm(args.dim), nn.Linear(args.dim, 1)).to(device)
with torch.no_grad():
    for p in model.parameters():
        p.add_(rank)
net = nn.ModuleDict({"model": model})
if args.find_unused:  # parameters no loss reaches: DDP must find them in every step
    net["unused"] = nn.Linear(args.dim, args.dim).to(device)


class Wrapper(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net["model"](x)


ddp = DDP(Wrapper(net), device_ids=[local_rank] if use_gpu else None, bucket_cap_mb=args.bucket_mb,
          find_unused_parameters=args.find_unused)
if args.comm_hook != "none":
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp.register_comm_hook(None, {"allreduce": default_hooks.allreduce_hook,
                                  "fp16": default_hooks.fp16_compress_hook}[args.comm_hook])
optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
generator = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
for step in range(args.steps):
    x = torch.randn(args.batch, args.dim, generator=generator).to(device)
    y = torch.randn(args.batch, 1, generator=generator).to(device)
    loss = nn.functional.mse_loss(ddp(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"rank {rank} step {step} loss {loss.item():.8f}")
weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
print(f"rank {rank} weights sum {weights.sum().item():.8f} max {weights.abs().max().item():.8f}")
dist.barrier()  # every rank done communicating before any tears gloo down (a lone exit can abort a peer)
dist.destroy_process_group()
