"""Ranks as torch.multiprocessing.Process objects; each sleeps a different time, then meets at a barrier.

    python examples/torch/barrier_processes.py
    simcomm launch --cluster cpu-host examples/torch/barrier_processes.py
"""
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

NAP = 0.2  # seconds per rank


def run(rank, size):
    dist.init_process_group("gloo", rank=rank, world_size=size)
    dist.barrier()  # start the clocks together (processes start at different moments)
    start = time.time()
    time.sleep(NAP * rank)
    dist.barrier()
    waited = time.time() - start
    # every rank leaves the barrier only after the sleepiest one arrived (10% slack: the first barrier's exits
    # are not simultaneous on a real host)
    print(f"rank {rank}: left the barrier after the last sleeper: {waited >= 0.9 * NAP * (size - 1)}; "
          f"backend {dist.get_backend()}, world {dist.get_world_size()}")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29523")
    mp.set_start_method("spawn")
    processes = []
    for r in range(3):
        p = mp.Process(target=run, args=(r, 3))
        p.daemon = True
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    print("exit codes", [p.exitcode for p in processes])
