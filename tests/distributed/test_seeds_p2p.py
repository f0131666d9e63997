"""The point-to-point examples of the source tutorials, ported to simcomm by swapping imports.

Each rank program keeps the shape of the tutorial's code (`dist.` calls with torch.distributed's names); tensors are
numpy arrays (torch tensors in the *_torch variants), `time.sleep` becomes simulated through `simcomm.clock`, and the
values the tutorials print are the oracles.
"""
import random

import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm import clock as time


def spawn(fn, nprocs, cluster="hgx-h100", args=()):
    return simcomm.spawn(fn, args=args, nprocs=nprocs, cluster=cluster)


def printed(capsys) -> list[str]:
    """The non-empty lines the rank programs printed."""
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


# ---- launching: mp.spawn(fn, args=("A0", "B1"), nprocs=4) ------------------------------------------------------
def test_spawn_passes_rank_then_args(capsys):
    def fn(rank, param1, param2):
        print(f"{param1} {param2} - rank: {rank}")
        return rank

    res = spawn(fn, 4, args=("A0", "B1"))
    assert res.results == [0, 1, 2, 3]
    assert sorted(printed(capsys)) == [f"A0 B1 - rank: {r}" for r in range(4)]


def test_process_group_per_rank():
    def fn(rank, world_size):
        dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
        group = dist.new_group([_ for _ in range(world_size)])
        assert dist.get_rank() == rank and dist.get_world_size() == world_size
        out = (dist.get_rank(group), dist.get_world_size(group), dist.get_process_group_ranks(group))
        dist.destroy_process_group()
        return out

    assert spawn(fn, 4, args=(4,)).results == [(r, 4, [0, 1, 2, 3]) for r in range(4)]


def test_whole_script_per_rank(capsys):
    """torchrun-style: the whole program runs once per rank and asks dist for its rank."""
    def script(_rank):
        print(f"hello world, {dist.get_rank()}")

    spawn(script, 4)
    assert sorted(printed(capsys)) == [f"hello world, {r}" for r in range(4)]


def test_single_process_group():
    def script(_rank):
        dist.init_process_group(backend="nccl", rank=0, world_size=1)
        process_group = dist.new_group([0])
        return process_group

    group = spawn(script, 1).results[0]
    assert isinstance(group, dist.ProcessGroup) and group.ranks == (0,)


def test_broadcast_in_a_pair_group_is_a_p2p_send():
    """DeepSpeed's fallback: without send/recv, broadcast inside new_group([src, dst]) moves src's tensor to dst."""
    def fn(rank):
        pair = dist.new_group([0, 1])
        tensor = np.arange(4, dtype=np.float32) if rank == 0 else np.zeros(4, dtype=np.float32)
        if rank in (0, 1):
            dist.broadcast(tensor, 0, group=pair)
        return tensor.tolist()

    assert spawn(fn, 3).results == [[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]]


# ---- blocking send/recv of a 2x2 tensor (gloo) ---------------------------------------------------------------
def test_blocking_send_recv_2x2():
    sent = np.random.default_rng(7).standard_normal((2, 2)).astype(np.float32)

    def fn(_rank):
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            tensor = sent.copy()
            dist.send(tensor, dst=1)
        elif dist.get_rank() == 1:
            tensor = np.zeros((2, 2), dtype=np.float32)
            before = tensor.copy()
            dist.recv(tensor, src=0)
            return before, tensor
        else:
            raise RuntimeError("wrong rank")

    res = spawn(fn, 2, cluster="cpu-host")
    before, after = res.results[1]
    np.testing.assert_array_equal(before, np.zeros((2, 2)))
    np.testing.assert_array_equal(after, sent)
    assert after.dtype == np.float32


def test_blocking_send_recv_2x2_torch(capsys):
    import torch

    def fn(_rank):
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            tensor = torch.tensor([[3.4373, 1.1562], [0.1356, -1.2088]])
            dist.send(tensor, dst=1)
        elif dist.get_rank() == 1:
            tensor = torch.zeros(2, 2)
            print(f"rank 1 before: {tensor}\n")
            dist.recv(tensor, src=0)
            print(f"rank 1 after: {tensor}\n")
        else:
            raise RuntimeError("wrong rank")

    spawn(fn, 2, cluster="cpu-host")
    assert printed(capsys) == ["rank 1 before: tensor([[0., 0.],", "        [0., 0.]])",
                               "rank 1 after: tensor([[ 3.4373,  1.1562],", "        [ 0.1356, -1.2088]])"]


# ---- non-blocking isend/irecv then wait() -------------------------------------------------------------------
def test_non_blocking_isend_irecv():
    sent = np.random.default_rng(1).standard_normal((2, 2)).astype(np.float32)

    def fn(_rank):
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            tensor = sent.copy()
            request = dist.isend(tensor, dst=1)
        elif dist.get_rank() == 1:
            tensor = np.zeros((2, 2), dtype=np.float32)
            request = dist.irecv(tensor, src=0)
        else:
            raise RuntimeError("wrong rank")
        request.wait()
        return tensor

    res = spawn(fn, 2, cluster="cpu-host").results
    np.testing.assert_array_equal(res[0], sent)
    np.testing.assert_array_equal(res[1], sent)


def test_non_blocking_isend_irecv_torch(capsys):
    import torch

    def fn(_rank):
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            tensor = torch.tensor([[-1.2224, 0.7753], [0.9491, -1.0411]])
            request = dist.isend(tensor, dst=1)
        elif dist.get_rank() == 1:
            tensor = torch.zeros(2, 2)
            request = dist.irecv(tensor, src=0)
        else:
            raise RuntimeError("wrong rank")
        request.wait()
        print(f"rank {dist.get_rank()}: {tensor}")

    spawn(fn, 2, cluster="cpu-host")
    expected = ["tensor([[-1.2224,  0.7753],", "        [ 0.9491, -1.0411]])"]
    assert printed(capsys) == ["rank 0: " + expected[0], expected[1], "rank 1: " + expected[0], expected[1]]


# ---- the three-rank chain 0 -> 1 (+100) -> 2 (rank 3 only joins the barriers) -------------------------------------
def chain_blocking(rank: int, world_size: int):
    dist.init_process_group(backend="gloo", world_size=world_size, rank=rank)
    assert rank == dist.get_rank()
    assert world_size == dist.get_world_size()
    dist.barrier()
    log = []
    if rank == 0:
        tensor = np.array([100, 200], dtype=np.float32)
        log.append(tensor.copy())
        dist.send(tensor, dst=1)
    elif rank == 1:
        tensor = np.zeros(2, dtype=np.float32)
        log.append(tensor.copy())
        dist.recv(tensor, src=0)
        tensor += 100
        log.append(tensor.copy())
        dist.send(tensor, dst=2)
    elif rank == 2:
        tensor = np.zeros(2, dtype=np.float32)
        log.append(tensor.copy())
        dist.recv(tensor, src=1)
    else:
        tensor = np.zeros(2, dtype=np.float32)
    dist.barrier()
    dist.destroy_process_group()
    return tensor, log


def test_chain_blocking():
    res = spawn(chain_blocking, 4, cluster="cpu-host", args=(4,)).results
    final = [r[0].tolist() for r in res]
    assert final == [[100, 200], [200, 300], [200, 300], [0, 0]]
    np.testing.assert_array_equal(res[1][1][0], [0, 0])  # "Initial data in rank=1"
    np.testing.assert_array_equal(res[1][1][1], [200, 300])  # "Modified data in rank=1"


def test_chain_blocking_torch(capsys):
    import torch

    def fn(rank, world_size):
        dist.init_process_group(backend="gloo", world_size=world_size, rank=rank)
        dist.barrier()
        if rank == 0:
            tensor = torch.tensor([100, 200], dtype=torch.float32)
            dist.send(tensor, dst=1)
        elif rank == 1:
            tensor = torch.zeros(2, dtype=torch.float32)
            dist.recv(tensor, src=0)
            tensor += 100
            print(f"Modified data in {rank=} is: {tensor}")
            dist.send(tensor, dst=2)
        elif rank == 2:
            tensor = torch.zeros(2, dtype=torch.float32)
            dist.recv(tensor, src=1)
        else:
            tensor = torch.zeros(2, dtype=torch.float32)
        dist.barrier()
        print(f"Data in {rank=} is: {tensor}")

    spawn(fn, 4, cluster="cpu-host", args=(4,))
    lines = printed(capsys)
    assert lines[0] == "Modified data in rank=1 is: tensor([200., 300.])"
    assert sorted(lines[1:]) == ["Data in rank=0 is: tensor([100., 200.])", "Data in rank=1 is: tensor([200., 300.])",
                                 "Data in rank=2 is: tensor([200., 300.])", "Data in rank=3 is: tensor([0., 0.])"]


def chain_async(rank: int, world_size: int, seed: int):
    rng = random.Random(seed * 100 + rank)
    stamps = {}

    def do_other_work(rank: int):
        time.sleep(rng.uniform(1.0, 3.0))

    dist.init_process_group(backend="gloo", world_size=world_size, rank=rank)
    dist.barrier()
    start = time.time()
    if rank == 0:
        tensor = np.array([100, 200], dtype=np.float32)
        send_req = dist.isend(tensor, dst=1)
        do_other_work(rank)
        send_req.wait()
    elif rank == 1:
        tensor = np.zeros(2, dtype=np.float32)
        recv_req = dist.irecv(tensor, src=0)
        do_other_work(rank)
        stamps["worked"] = time.time() - start
        recv_req.wait()
        tensor += 100
        send_req = dist.isend(tensor, dst=2)
        stamps["sent"] = time.time() - start
        do_other_work(rank)
        send_req.wait()
    elif rank == 2:
        tensor = np.zeros(2, dtype=np.float32)
        recv_req = dist.irecv(tensor, src=1)
        do_other_work(rank)
        stamps["recv_done_before_wait"] = recv_req.is_completed()
        recv_req.wait()
        stamps["received"] = time.time() - start
    else:
        tensor = np.zeros(2, dtype=np.float32)
    dist.destroy_process_group()
    return tensor, stamps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chain_async(seed):
    res = spawn(chain_async, 4, cluster="cpu-host", args=(4, seed)).results
    assert [r[0].tolist() for r in res] == [[100, 200], [200, 300], [200, 300], [0, 0]]
    st1, st2 = res[1][1], res[2][1]
    # Rank 1 forwards only after its own work; rank 2 has the data once it waited and not before rank 1 sent it.
    assert st1["sent"] >= st1["worked"] >= 1.0
    assert st2["received"] >= st1["sent"]


# ---- ping-pong: rank 0 sends 1, rank 1 adds 1 and sends it back -------------------------------------------------
def ping_pong(rank_id, size):
    tensor = np.zeros(1)
    if rank_id == 0:
        tensor += 1
        dist.send(tensor=tensor, dst=1)
        dist.recv(tensor=tensor, src=1)
    else:
        dist.recv(tensor=tensor, src=0)
        tensor += 1
        dist.send(tensor=tensor, dst=0)
    return float(tensor[0])


def test_ping_pong():
    res = spawn(ping_pong, 2, cluster="cpu-host", args=(2,))
    assert res.results == [2.0, 2.0]
    # Two messages of 8 bytes in sequence over loopback: twice the one-way time.
    bw, lat = res.cluster.bottleneck(0, 1)
    assert res.elapsed == pytest.approx(2 * (lat + 8 / bw), rel=1e-9)


def test_ping_pong_torch():
    import torch

    def run(rank_id, size):
        tensor = torch.zeros(1)
        if rank_id == 0:
            tensor += 1
            dist.send(tensor=tensor, dst=1)
            dist.recv(tensor=tensor, src=1)
        else:
            dist.recv(tensor=tensor, src=0)
            tensor += 1
            dist.send(tensor=tensor, dst=0)
        return tensor

    res = spawn(run, 2, cluster="cpu-host", args=(2,)).results
    assert [t.tolist() for t in res] == [[2.0], [2.0]]
    assert all(isinstance(t, torch.Tensor) for t in res)
