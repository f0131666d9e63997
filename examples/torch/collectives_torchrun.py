"""Eight collectives, written for torchrun on GPUs; falls back to gloo on CPUs.

    torchrun --nproc-per-node 4 examples/torch/collectives_torchrun.py
    simcomm launch --nproc-per-node 4 --cluster hgx-h100 examples/torch/collectives_torchrun.py
"""
import torch
import torch.distributed as dist

use_gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if use_gpu else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if use_gpu:
    torch.cuda.set_device(rank % torch.cuda.device_count())
    device = torch.device(torch.cuda.current_device())
else:
    device = torch.device("cpu")


def show(name, value):
    if isinstance(value, list):
        value = [v.cpu().tolist() for v in value]
    elif isinstance(value, torch.Tensor):
        value = value.cpu().tolist()
    print(f"rank {rank} {name}: {value}")


mine = torch.full((3,), float(rank + 1), device=device)

t = mine.clone() if rank == 0 else torch.zeros(3).to(device)
dist.broadcast(t, src=0)
show("broadcast", t)

t = mine.clone()
dist.all_reduce(t, op=dist.ReduceOp.SUM)
show("all_reduce sum", t)

t = (torch.arange(3) * (rank + 1)).cuda() if use_gpu else torch.arange(3) * (rank + 1)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
show("all_reduce max", t)

t = mine.clone()
dist.reduce(t, dst=world - 1)
if rank == world - 1:  # only the destination's tensor is specified
    show("reduce", t)

out = [torch.zeros(3, device=device) for _ in range(world)]
dist.all_gather(out, mine)
show("all_gather", out)

gathered = [torch.zeros(3, device=device) for _ in range(world)] if rank == 0 else None
dist.gather(mine, gathered, dst=0)
if rank == 0:
    show("gather", gathered)

got = torch.zeros(3, device=device)
dist.scatter(got, [torch.full((3,), 10.0 * i, device=device) for i in range(world)] if rank == 0 else None, src=0)
show("scatter", got)

out = torch.zeros(1, dtype=torch.int64, device=device)
dist.reduce_scatter_tensor(out, torch.tensor([10 ** i for i in range(world)], device=device) * rank)
show("reduce_scatter", out)

dist.barrier()
torch.distributed.destroy_process_group()
