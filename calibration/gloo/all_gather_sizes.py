"""Where gloo's all_gather gets slower per byte: 2 ranks of real torch.distributed gloo on this host, 8 to 96 MiB.

    python calibration/gloo/all_gather_sizes.py > calibration/gloo/all-gather-sizes-DATE.txt

torch's gloo backend gathers into a flat buffer of the whole output allocated on every call, then copies it out.
glibc maps allocations of 32 MiB and more afresh each time (its mmap threshold's ceiling), so from there every
call faults its output in page by page: all_gather's time per MiB doubles between 24 and 32 MiB while
all_reduce's and broadcast's stay flat. simcomm charges this as protocols.fresh_output_time.
"""
from __future__ import annotations

import os
import time

SIZES_MIB = (8, 16, 24, 28, 32, 40, 48, 64, 96)
RUNS = 5  # the fastest of RUNS calls is kept


def _run(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    if rank == 0:
        print(f"# gloo, {world} ranks on this host ({os.cpu_count()} cores); fastest of {RUNS} calls; ms (ms/MiB)")
        print("#  MiB   all_gather (tensor)   all_gather (list)   all_reduce          broadcast")
    for mib in SIZES_MIB:
        size = mib << 20
        inp, out, buf = torch.ones(size // 4 // world), torch.empty(size // 4), torch.ones(size // 4)
        ops = (lambda: gather(out, inp), lambda: dist.all_gather(list(out.chunk(world)), inp),
               lambda: dist.all_reduce(buf), lambda: dist.broadcast(buf, 0))
        best = []
        for op in ops:
            op()
            times = []
            for _ in range(RUNS):
                dist.barrier()
                t0 = time.perf_counter()
                op()
                times.append(time.perf_counter() - t0)
            mine = torch.tensor([min(times)], dtype=torch.float64)
            dist.all_reduce(mine, op=dist.ReduceOp.MAX)
            best.append(mine.item() * 1e3)
        if rank == 0:
            print(f"{mib:6d} " + " ".join(f"{ms:9.2f} ({ms / mib:5.3f})" for ms in best), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(_run, args=(2, 29537), nprocs=2)
