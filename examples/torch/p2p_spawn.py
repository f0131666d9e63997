"""A script that starts its own ranks with torch.multiprocessing.spawn (gloo, CPU tensors).

    python examples/torch/p2p_spawn.py
    simcomm launch --cluster cpu-host examples/torch/p2p_spawn.py
"""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, greeting):
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
    # a token passed around the ring, then every rank's greeting to everyone
    token = torch.zeros(2, dtype=torch.int64)
    if rank == 0:
        token += 100
        dist.send(token, dst=1)
        dist.recv(token, src=world_size - 1)
    else:
        dist.recv(token, src=rank - 1)
        token += rank
        dist.send(token, dst=(rank + 1) % world_size)
    left, right = (rank - 1) % world_size, (rank + 1) % world_size
    inbox = torch.zeros(3)
    requests = [dist.isend(torch.full((3,), float(rank)), dst=right), dist.irecv(inbox, src=left)]
    for request in requests:
        request.wait()
    notes = [None] * world_size
    dist.all_gather_object(notes, {"rank": rank, "says": greeting})
    t = torch.arange(2, dtype=torch.int64) + 1 + 2 * rank
    dist.reduce(t, dst=world_size - 1, op=dist.ReduceOp.SUM)
    print(f"rank {rank}: token {token.tolist()} inbox {inbox.tolist()} notes {notes} reduce {t.tolist()}")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29522")
    mp.spawn(worker, args=(4, "hello"), nprocs=4, join=True, daemon=False, start_method="spawn")
    print("all ranks done")
