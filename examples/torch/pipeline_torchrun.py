"""Pipeline parallelism with torch.distributed.pipelining (PipelineStage and a 1F1B schedule) on a 2-D
(pp, dp) DeviceMesh, written for torchrun on GPUs; falls back to gloo on CPUs.

    torchrun --nproc-per-node 4 examples/torch/pipeline_torchrun.py
    simcomm launch --nproc-per-node 4 --cluster hgx-h100 examples/torch/pipeline_torchrun.py

Two stages of two linear layers each, four microbatches; each data-parallel replica draws its own batches and
averages its gradients over "dp". The last stage of each replica prints the mean loss of every step.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

p = argparse.ArgumentParser()
p.add_argument("--schedule", choices=("1F1B", "GPipe"), default="1F1B")
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()

use_gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if use_gpu else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if use_gpu else torch.device("cpu")
if use_gpu:
    torch.cuda.set_device(device)
mesh = init_device_mesh(device.type, (2, world // 2), mesh_dim_names=("pp", "dp"))
pp, dp = mesh["pp"], mesh["dp"]

torch.manual_seed(0)  # every rank builds the whole model, then keeps its stage's layers
layers = [nn.Linear(16, 16) for _ in range(4)]
stage_index = pp.get_local_rank()
part = nn.Sequential(*layers[2 * stage_index:2 * stage_index + 2]).to(device)
stage = PipelineStage(part, stage_index, pp.size(), device, group=pp.get_group())
schedule = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe}[args.schedule](
    stage, n_microbatches=4, loss_fn=lambda out, y: ((out - y) ** 2).mean())
optimizer = torch.optim.SGD(part.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(dp.get_local_rank())  # each replica its own batches
for step in range(args.steps):
    x = torch.randn(8, 16, generator=generator).to(device)
    y = torch.randn(8, 16, generator=generator).to(device)
    losses = []
    if stage_index == 0:
        schedule.step(x)
    else:
        schedule.step(target=y, losses=losses)
    for param in part.parameters():
        dist.all_reduce(param.grad, group=dp.get_group())
        param.grad /= dp.size()
    optimizer.step()
    optimizer.zero_grad()
    if losses:
        print(f"rank {rank} step {step} loss {sum(loss.item() for loss in losses) / len(losses):.6f}")
dist.barrier()  # every rank done communicating before any tears gloo down (a lone exit can abort a peer)
dist.destroy_process_group()
