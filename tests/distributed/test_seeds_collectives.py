"""The collective examples of the source tutorials, ported to simcomm by swapping imports.

Oracles are the values the tutorials print. NCCL examples run on "hgx-h100", gloo ones on "cpu-host". The torch
variants compare the exact text torch prints (the tutorials' `device='cuda:N'` suffixes removed).
"""
import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm import clock as time


def spawn(fn, nprocs, cluster="hgx-h100", args=()):
    return simcomm.spawn(fn, args=args, nprocs=nprocs, cluster=cluster)


def lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def f32(*values):
    return np.array(values, dtype=np.float32)


# =============================================================================================================
# Tutorial 1: eight collectives on 3 GPUs (nccl), values [rank + 1] * 5
# =============================================================================================================
def example_broadcast(_rank):
    if dist.get_rank() == 0:
        tensor = np.array([1, 2, 3, 4, 5], dtype=np.float32)
    else:
        tensor = np.zeros(5, dtype=np.float32)
    before = tensor.copy()
    dist.broadcast(tensor, src=0)
    return before, tensor


def test_t1_broadcast():
    res = spawn(example_broadcast, 3).results
    np.testing.assert_array_equal(res[0][0], f32(1, 2, 3, 4, 5))
    for r in (1, 2):
        np.testing.assert_array_equal(res[r][0], np.zeros(5))
    for r in range(3):
        np.testing.assert_array_equal(res[r][1], f32(1, 2, 3, 4, 5))


def example_reduce(_rank):
    tensor = np.array([dist.get_rank() + 1] * 5, dtype=np.float32)
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
    return tensor


def test_t1_reduce():
    res = spawn(example_reduce, 3).results
    # The tutorial prints the root's sum and the other ranks' tensors as they were.
    for r, v in enumerate((6, 2, 3)):
        np.testing.assert_array_equal(res[r], np.full(5, v, dtype=np.float32))


def example_all_reduce(_rank):
    tensor = np.array([dist.get_rank() + 1] * 5, dtype=np.float32)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def test_t1_all_reduce():
    for t in spawn(example_all_reduce, 3).results:
        np.testing.assert_array_equal(t, np.full(5, 6, dtype=np.float32))


def example_gather(_rank):
    tensor = np.array([dist.get_rank() + 1] * 5, dtype=np.float32)
    if dist.get_rank() == 0:
        gather_list = [np.zeros(5, dtype=np.float32) for _ in range(dist.get_world_size())]
    else:
        gather_list = None
    dist.gather(tensor, gather_list, dst=0)
    return gather_list


def test_t1_gather():
    res = spawn(example_gather, 3).results
    assert res[1] is None and res[2] is None
    np.testing.assert_array_equal(np.stack(res[0]), np.repeat([[1], [2], [3]], 5, axis=1))


def example_all_gather(_rank):
    tensor = np.array([dist.get_rank() + 1] * 5, dtype=np.float32)
    gather_list = [np.zeros(5, dtype=np.float32) for _ in range(dist.get_world_size())]
    dist.all_gather(gather_list, tensor)
    return gather_list


def test_t1_all_gather():
    for lst in spawn(example_all_gather, 3).results:
        np.testing.assert_array_equal(np.stack(lst), np.repeat([[1], [2], [3]], 5, axis=1))


def example_scatter(_rank):
    if dist.get_rank() == 0:
        scatter_list = [np.array([i + 1] * 5, dtype=np.float32) for i in range(dist.get_world_size())]
    else:
        scatter_list = None
    tensor = np.zeros(5, dtype=np.float32)
    dist.scatter(tensor, scatter_list, src=0)
    return tensor


def test_t1_scatter():
    res = spawn(example_scatter, 3).results
    for r in range(3):
        np.testing.assert_array_equal(res[r], np.full(5, r + 1, dtype=np.float32))


def example_reduce_scatter(_rank):
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    input_tensor = [np.array([(rank + 1) * i for i in range(1, 3)], dtype=np.float32) ** (j + 1)
                    for j in range(world_size)]
    output_tensor = np.zeros(2, dtype=np.float32)
    before = [t.copy() for t in input_tensor]
    dist.reduce_scatter(output_tensor, input_tensor, op=dist.ReduceOp.SUM)
    return before, output_tensor


def test_t1_reduce_scatter_powers():
    res = spawn(example_reduce_scatter, 3).results
    inputs = {0: [[1, 2], [1, 4], [1, 8]], 1: [[2, 4], [4, 16], [8, 64]], 2: [[3, 6], [9, 36], [27, 216]]}
    for r in range(3):
        np.testing.assert_array_equal(np.stack(res[r][0]), inputs[r])
    expected = {0: [6, 12], 1: [14, 56], 2: [36, 288]}
    for r in range(3):
        np.testing.assert_array_equal(res[r][1], f32(*expected[r]))


def example_barrier(_rank):
    rank = dist.get_rank()
    t_start = time.time()
    time.sleep(rank)  # a different amount of work per rank
    dist.barrier()
    return time.time() - t_start


def test_t1_barrier():
    barrier_cost = spawn(lambda _r: dist.barrier(), 3).elapsed
    assert 0 < barrier_cost < 1e-3
    deltas = spawn(example_barrier, 3).results
    for d in deltas:
        assert d == pytest.approx(2.0 + barrier_cost, rel=1e-9)
    assert f"{deltas[0]:.4f}" == "2.0000"  # the tutorial printed 2.0025 s of real overhead; simulated is tiny


def test_t1_all_examples_torch(capsys):
    """The whole tutorial with torch tensors, comparing the printed text."""
    import torch

    def fn(_rank):
        rank = dist.get_rank()
        tensor = torch.tensor([1, 2, 3, 4, 5], dtype=torch.float32) if rank == 0 else torch.zeros(5)
        dist.broadcast(tensor, src=0)
        print(f"After broadcast on rank {rank}: {tensor}")
        tensor = torch.tensor([rank + 1] * 5, dtype=torch.float32)
        dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
        print(f"After reduce on rank {rank}: {tensor}")
        tensor = torch.tensor([rank + 1] * 5, dtype=torch.float32)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        print(f"After all_reduce on rank {rank}: {tensor}")
        tensor = torch.tensor([rank + 1] * 5, dtype=torch.float32)
        gather_list = [torch.zeros(5) for _ in range(3)] if rank == 0 else None
        dist.gather(tensor, gather_list, dst=0)
        if rank == 0:
            print(f"After gather on rank 0: {gather_list}")
        gather_list = [torch.zeros(5) for _ in range(3)]
        dist.all_gather(gather_list, tensor)
        print(f"After all_gather on rank {rank}: {gather_list}")
        scatter_list = [torch.tensor([i + 1] * 5, dtype=torch.float32) for i in range(3)] if rank == 0 else None
        tensor = torch.zeros(5)
        dist.scatter(tensor, scatter_list, src=0)
        print(f"After scatter on rank {rank}: {tensor}")
        input_tensor = [torch.tensor([(rank + 1) * i for i in range(1, 3)], dtype=torch.float32) ** (j + 1)
                        for j in range(3)]
        output_tensor = torch.zeros(2, dtype=torch.float32)
        dist.reduce_scatter(output_tensor, input_tensor, op=dist.ReduceOp.SUM)
        print(f"After ReduceScatter on rank {rank}: {output_tensor}")

    spawn(fn, 3)
    out = lines(capsys)
    ones = ", ".join(f"tensor([{v}., {v}., {v}., {v}., {v}.])" for v in (1, 2, 3))
    expected = (
        [f"After broadcast on rank {r}: tensor([1., 2., 3., 4., 5.])" for r in range(3)]
        + ["After reduce on rank 0: tensor([6., 6., 6., 6., 6.])", "After reduce on rank 1: tensor([2., 2., 2., 2., 2.])",
           "After reduce on rank 2: tensor([3., 3., 3., 3., 3.])"]
        + [f"After all_reduce on rank {r}: tensor([6., 6., 6., 6., 6.])" for r in range(3)]
        + [f"After gather on rank 0: [{ones}]"]
        + [f"After all_gather on rank {r}: [{ones}]" for r in range(3)]
        + [f"After scatter on rank {r}: tensor([{r + 1}., {r + 1}., {r + 1}., {r + 1}., {r + 1}.])" for r in range(3)]
        + ["After ReduceScatter on rank 0: tensor([ 6., 12.])", "After ReduceScatter on rank 1: tensor([14., 56.])",
           "After ReduceScatter on rank 2: tensor([ 36., 288.])"])
    assert sorted(out) == sorted(expected)


# =============================================================================================================
# Tutorial 2: collectives on 4 processes (ones * rank, 2 nodes x 2 GPUs in the tutorial)
# =============================================================================================================
def test_t2_broadcast_random_2x2():
    data = np.random.default_rng(3).standard_normal((2, 2)).astype(np.float32)

    def fn(rank):
        tensor = data.copy() if rank == 0 else np.zeros((2, 2), dtype=np.float32)
        dist.broadcast(tensor, src=0)
        return tensor

    for t in spawn(fn, 4).results:
        np.testing.assert_array_equal(t, data)


@pytest.mark.parametrize("op, expected", [("SUM", 6.0), ("MAX", 3.0)])
def test_t2_reduce(op, expected):
    def fn(rank):
        tensor = np.ones((2, 2), dtype=np.float32) * rank
        dist.reduce(tensor, op=getattr(dist.ReduceOp, op), dst=0)
        return tensor

    res = spawn(fn, 4).results
    np.testing.assert_array_equal(res[0], np.full((2, 2), expected, dtype=np.float32))


@pytest.mark.parametrize("op, expected", [("SUM", 6.0), ("MAX", 3.0)])
def test_t2_all_reduce(op, expected):
    def fn(rank):
        tensor = np.ones((2, 2), dtype=np.float32) * rank
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
        return tensor

    for t in spawn(fn, 4).results:
        np.testing.assert_array_equal(t, np.full((2, 2), expected, dtype=np.float32))


def test_t2_all_reduce_torch(capsys):
    import torch

    def fn(rank):
        tensor = torch.ones(2, 2) * rank
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        print(f"rank {rank}: {tensor}\n")

    spawn(fn, 4)
    out = lines(capsys)
    assert sorted(out[0::2]) == [f"rank {r}: tensor([[3., 3.]," for r in range(4)]
    assert out[1::2] == ["        [3., 3.]])"] * 4


def test_t2_scatter_split():
    def fn(rank):
        output = np.zeros(1, dtype=np.float32)
        if rank == 0:
            inputs = np.array([10.0, 20.0, 30.0, 40.0], dtype=np.float32)
            inputs = np.split(inputs, 4)
            dist.scatter(output, scatter_list=list(inputs), src=0)
        else:
            dist.scatter(output, src=0)
        return float(output[0])

    assert spawn(fn, 4, cluster="cpu-host").results == [10.0, 20.0, 30.0, 40.0]


def test_t2_scatter_without_communication():
    """The nccl workaround: every rank slices the full input itself."""
    def fn(rank):
        inputs = np.split(np.array([10.0, 20.0, 30.0, 40.0], dtype=np.float32), 4)
        return np.ascontiguousarray(inputs[rank])

    res = spawn(fn, 4)
    assert [float(t[0]) for t in res.results] == [10.0, 20.0, 30.0, 40.0]
    assert res.elapsed == 0


def test_t2_gather():
    def fn(rank):
        input = np.ones(1, dtype=np.float32) * rank  # noqa: A001 - the tutorial's name
        if rank == 0:
            outputs_list = [np.zeros(1, dtype=np.float32) for _ in range(4)]
            dist.gather(input, gather_list=outputs_list, dst=0)
            return [float(t[0]) for t in outputs_list]
        dist.gather(input, dst=0)

    assert spawn(fn, 4, cluster="cpu-host").results == [[0.0, 1.0, 2.0, 3.0], None, None, None]


def test_t2_all_gather():
    def fn(rank):
        input = np.ones(1, dtype=np.float32) * rank  # noqa: A001
        outputs_list = [np.zeros(1, dtype=np.float32) for _ in range(4)]
        dist.all_gather(tensor_list=outputs_list, tensor=input)
        return [float(t[0]) for t in outputs_list]

    assert spawn(fn, 4).results == [[0.0, 1.0, 2.0, 3.0]] * 4


def test_t2_reduce_scatter_powers_of_ten():
    def fn(rank):
        input_list = np.array([1, 10, 100, 1000]) * rank
        input_list = np.split(input_list, 4)
        output = np.array([0])
        dist.reduce_scatter(output=output, input_list=list(input_list), op=dist.ReduceOp.SUM)
        return output

    res = spawn(fn, 4).results
    assert [t.tolist() for t in res] == [[6], [60], [600], [6000]]
    assert all(t.dtype == np.int64 for t in res)


def test_t2_reduce_scatter_powers_of_ten_torch(capsys):
    import torch

    def fn(rank):
        input_list = torch.tensor([1, 10, 100, 1000]) * rank
        input_list = torch.split(input_list, dim=0, split_size_or_sections=1)
        output = torch.tensor([0])
        print(f"Before: rank {rank} output: {output}\n")
        dist.reduce_scatter(output=output, input_list=list(input_list), op=dist.ReduceOp.SUM)
        print(f"After: rank {rank} output: {output}\n")

    spawn(fn, 4)
    out = lines(capsys)
    assert sorted(out) == sorted([f"Before: rank {r} output: tensor([0])" for r in range(4)]
                                 + ["After: rank 3 output: tensor([6000])", "After: rank 1 output: tensor([60])",
                                    "After: rank 0 output: tensor([6])", "After: rank 2 output: tensor([600])"])


def test_t2_barrier_waits_for_the_sleeper(capsys):
    def fn(rank):
        if rank == 0:
            seconds = 0
            while seconds <= 3:
                time.sleep(1)
                seconds += 1
                print(f"rank 0 - seconds: {seconds}\n")
        print(f"rank {rank}: no-barrier\n")
        dist.barrier()
        print(f"rank {rank}: barrier\n")
        return time.time()

    res = spawn(fn, 4)
    out = lines(capsys)
    # Ranks 1-3 reach the barrier at once; rank 0 counts to 4 first; nobody passes before rank 0 arrives.
    assert out[:3] == ["rank 1: no-barrier", "rank 2: no-barrier", "rank 3: no-barrier"]
    assert out[3:8] == [f"rank 0 - seconds: {s}" for s in range(1, 5)] + ["rank 0: no-barrier"]
    assert sorted(out[8:]) == [f"rank {r}: barrier" for r in range(4)]
    cost = spawn(lambda _r: dist.barrier(), 4).elapsed
    assert res.finish_times == pytest.approx([4.0 + cost] * 4, rel=1e-12)


# =============================================================================================================
# Tutorial 3: a notebook of gloo examples on 4 CPU processes
# =============================================================================================================
def task_suite(rank, world_size):
    dist.init_process_group(backend="gloo", world_size=world_size, rank=rank)
    assert rank == dist.get_rank()
    assert world_size == dist.get_world_size()
    dist.barrier()
    out = {}

    # Task 1: all_gather of strings encoded as int32 tensors
    process_info = f"Process {rank} Information..."
    max_len = 100
    process_info_tensor = np.zeros(max_len, dtype=np.int32)
    process_info_bytes = process_info.encode("utf-8")
    process_info_tensor[:len(process_info_bytes)] = np.array([b for b in process_info_bytes], dtype=np.int32)
    gathered_tensors = [np.zeros(max_len, dtype=np.int32) for _ in range(world_size)]
    dist.all_gather(gathered_tensors, process_info_tensor)
    out["strings"] = [t.astype("uint8").tobytes().decode("utf-8", "ignore").strip("\x00") for t in gathered_tensors]
    dist.barrier()

    # Task 2: all_reduce (sum) of ones
    tensor = np.ones((4,), dtype=np.float32)
    dist.all_reduce(tensor)
    out["all_reduce"] = tensor
    dist.barrier()

    # Task 3: all_reduce in the subgroup [1, 3]
    sub_group_ranks = [1, 3]
    sub_group = dist.new_group(ranks=sub_group_ranks)
    if rank in sub_group_ranks:
        sub_group_tensor = np.ones((4,), dtype=np.float32)
        dist.all_reduce(sub_group_tensor, group=sub_group)
        out["sub_group"] = sub_group_tensor
    dist.barrier()

    # Task 4: sums in two halves, then a MAX over everyone
    group_1_sum = np.array([1, 1, 1, 1])
    group_2_sum = np.array([1.5] * 4, dtype=np.float32)
    group_1_ranks = list(range(world_size // 2))
    group_2_ranks = list(range(world_size // 2, world_size))
    group_1 = dist.new_group(ranks=group_1_ranks)
    group_2 = dist.new_group(ranks=group_2_ranks)
    if rank in group_1_ranks:
        dist.all_reduce(group_1_sum, group=group_1)
    else:
        dist.all_reduce(group_2_sum, group=group_2)
    dist.all_reduce(group_1_sum, op=dist.ReduceOp.MAX)
    dist.all_reduce(group_2_sum, op=dist.ReduceOp.MAX)
    out["group_sums"] = (group_1_sum, group_2_sum)
    dist.destroy_process_group()
    return out


def test_t3_task_suite():
    res = spawn(task_suite, 4, cluster="cpu-host", args=(4,)).results
    for rank, out in enumerate(res):
        assert out["strings"] == [f"Process {r} Information..." for r in range(4)]
        np.testing.assert_array_equal(out["all_reduce"], np.full(4, 4.0))
        if rank in (1, 3):
            np.testing.assert_array_equal(out["sub_group"], np.full(4, 2.0))
        else:
            assert "sub_group" not in out
        g1, g2 = out["group_sums"]
        assert g1.tolist() == [2, 2, 2, 2] and g1.dtype == np.int64
        assert g2.tolist() == [3.0, 3.0, 3.0, 3.0]


def test_t3_task_suite_torch(capsys):
    import torch

    def fn(rank, world_size):
        process_info_tensor = torch.zeros(100, dtype=torch.int32)
        info = f"Process {rank} Information...".encode("utf-8")
        process_info_tensor[:len(info)] = torch.tensor([b for b in info], dtype=torch.int32)
        gathered_tensors = [torch.zeros(100, dtype=torch.int32) for _ in range(world_size)]
        dist.all_gather(gathered_tensors, process_info_tensor)
        if rank == 0:
            for t in gathered_tensors:
                print(t.numpy().astype("uint8").tobytes().decode("utf-8", "ignore").strip("\x00"))
        dist.barrier()
        group_1_sum = torch.tensor([1, 1, 1, 1])
        group_2_sum = torch.tensor([1.5] * 4)
        group_1 = dist.new_group(ranks=[0, 1])
        group_2 = dist.new_group(ranks=[2, 3])
        if rank in (0, 1):
            dist.all_reduce(group_1_sum, group=group_1)
        else:
            dist.all_reduce(group_2_sum, group=group_2)
        dist.all_reduce(group_1_sum, op=dist.ReduceOp.MAX)
        dist.all_reduce(group_2_sum, op=dist.ReduceOp.MAX)
        print(f"In rank {rank}, {group_1_sum=}, {group_2_sum=}")

    spawn(fn, 4, cluster="cpu-host", args=(4,))
    out = lines(capsys)
    assert out[:4] == [f"Process {r} Information..." for r in range(4)]
    assert sorted(out[4:]) == [f"In rank {r}, group_1_sum=tensor([2, 2, 2, 2]), "
                               f"group_2_sum=tensor([3., 3., 3., 3.])" for r in range(4)]


def test_t3_all_gather_and_all_reduce():
    def fn(rank, world_size):
        tensor = np.array([rank * 10, rank * 10 + 1], dtype=np.float32)
        gathered = [np.zeros(2, dtype=np.float32) for _ in range(world_size)]
        dist.all_gather(gathered, tensor)
        dist.barrier()
        reduced_tensor = tensor.copy()
        dist.all_reduce(reduced_tensor, op=dist.ReduceOp.SUM)
        return gathered, reduced_tensor

    for gathered, reduced in spawn(fn, 4, cluster="cpu-host", args=(4,)).results:
        np.testing.assert_array_equal(np.stack(gathered), [[0, 1], [10, 11], [20, 21], [30, 31]])
        np.testing.assert_array_equal(reduced, [60, 64])


def softmax_rank(rank, world_size):
    # torch.manual_seed(rank); logit.uniform_(-10, 10) becomes a numpy generator seeded by rank.
    logit = np.random.default_rng(rank).uniform(-10.0, 10.0, size=1).astype(np.float32)
    max_logit = logit.copy()
    dist.all_reduce(max_logit, op=dist.ReduceOp.MAX)
    prob = np.exp(logit - max_logit)
    prob_sum = prob.copy()
    dist.all_reduce(prob_sum, op=dist.ReduceOp.SUM)
    norm_prob = prob / prob_sum
    norm_prob_sum = norm_prob.copy()
    dist.all_reduce(norm_prob_sum, op=dist.ReduceOp.SUM)
    return float(logit[0]), float(norm_prob[0]), norm_prob_sum


@pytest.mark.parametrize("cluster", ["cpu-host", "hgx-h100"])
def test_t3_distributed_softmax(cluster):
    res = spawn(softmax_rank, 4, cluster=cluster, args=(4,)).results
    logits = np.array([r[0] for r in res])
    probs = np.array([r[1] for r in res])
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(probs, expected, rtol=1e-6)
    for r in res:
        np.testing.assert_allclose(r[2], np.ones(1), rtol=1e-6)
    assert probs.sum() == pytest.approx(1.0, rel=1e-6)


def test_t3_two_tensor_broadcast():
    def fn(rank, world_size):
        if rank == 0:
            tensor_1 = np.array([1.0, 2.0, 3.0], dtype=np.float32)
            tensor_2 = np.zeros(2, dtype=np.float32)
        elif rank == 1:
            tensor_1 = np.zeros(3, dtype=np.float32)
            tensor_2 = np.array([4.0, 5.0], dtype=np.float32)
        else:
            tensor_1 = np.zeros(3, dtype=np.float32)
            tensor_2 = np.zeros(2, dtype=np.float32)
        dist.broadcast(tensor_1, src=0)
        dist.broadcast(tensor_2, src=1)
        return tensor_1.tolist(), tensor_2.tolist()

    assert spawn(fn, 4, cluster="cpu-host", args=(4,)).results == [([1.0, 2.0, 3.0], [4.0, 5.0])] * 4


def test_t3_scatter_ones_times_i():
    def fn(rank, world_size):
        output_t = np.zeros(2, dtype=np.float32)
        scatter_list = [np.ones(2, dtype=np.float32) * i for i in range(world_size)] if rank == 0 else None
        dist.scatter(output_t, scatter_list, src=0)
        return output_t.tolist()

    # The notebook prints rank=3 [3., 3.], rank=2 [2., 2.], rank=1 [1., 1.], rank=0 [0., 0.]
    assert spawn(fn, 4, cluster="cpu-host", args=(4,)).results == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]


# =============================================================================================================
# Tutorial 4: int64 arange examples on 4 processes (gloo)
# =============================================================================================================
def start_tensor(rank_id):
    return np.arange(2, dtype=np.int64) + 1 + 2 * rank_id


def test_t4_broadcast():
    def run(rank_id, size):
        tensor = start_tensor(rank_id)
        dist.broadcast(tensor, src=0)
        return tensor

    for t in spawn(run, 4, cluster="cpu-host", args=(4,)).results:
        assert t.tolist() == [1, 2] and t.dtype == np.int64


def test_t4_scatter():
    def run(rank_id, size):
        tensor = start_tensor(rank_id)
        if rank_id == 0:
            scatter_list = [np.array([0, 0]), np.array([1, 1]), np.array([2, 2]), np.array([3, 3])]
            dist.scatter(tensor, src=0, scatter_list=scatter_list)
        else:
            dist.scatter(tensor, src=0)
        return tensor.tolist()

    assert spawn(run, 4, cluster="cpu-host", args=(4,)).results == [[0, 0], [1, 1], [2, 2], [3, 3]]


def test_t4_gather():
    def run(rank_id, size):
        tensor = start_tensor(rank_id)
        if rank_id == 0:
            gather_list = [np.zeros(2, dtype=np.int64) for _ in range(4)]
            dist.gather(tensor, dst=0, gather_list=gather_list)
            return [t.tolist() for t in gather_list]
        dist.gather(tensor, dst=0)

    assert spawn(run, 4, cluster="cpu-host", args=(4,)).results[0] == [[1, 2], [3, 4], [5, 6], [7, 8]]


def test_t4_reduce_to_rank_3():
    def run(rank_id, size):
        tensor = start_tensor(rank_id)
        dist.reduce(tensor, dst=3, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    # Only the destination's result is specified ("the tensor in every rank might be altered"); with gloo
    # numerics the other ranks hold the partial sums real gloo leaves there (checked against gloo in
    # tests/backends/test_conformance.py).
    assert spawn(run, 4, cluster="cpu-host", args=(4,)).results == [[16, 20], [15, 18], [12, 14], [16, 20]]


def test_t4_all_gather_and_all_reduce():
    def run(rank_id, size):
        tensor = start_tensor(rank_id)
        gather_list = [np.zeros(2, dtype=np.int64) for _ in range(4)]
        dist.all_gather(gather_list, tensor)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return [t.tolist() for t in gather_list], tensor.tolist()

    for gathered, reduced in spawn(run, 4, cluster="cpu-host", args=(4,)).results:
        assert gathered == [[1, 2], [3, 4], [5, 6], [7, 8]]
        assert reduced == [16, 20]


def test_t4_examples_torch():
    import torch

    def run(rank_id, size):
        tensor = torch.arange(2, dtype=torch.int64) + 1 + 2 * rank_id
        gather_list = [torch.zeros(2, dtype=torch.int64) for _ in range(4)]
        dist.all_gather(gather_list, tensor)
        dist.reduce(tensor, dst=3, op=dist.ReduceOp.SUM)
        return [t.tolist() for t in gather_list], tensor.tolist()

    res = spawn(run, 4, cluster="cpu-host", args=(4,)).results
    assert all(g == [[1, 2], [3, 4], [5, 6], [7, 8]] for g, _ in res)
    assert res[3][1] == [16, 20]


# =============================================================================================================
# Beyond the tutorials: results keep the tensors' dtype and exact values
# =============================================================================================================
def test_int64_beyond_float64_precision_stays_exact():
    big = 2 ** 53 + 1

    def fn(rank):
        t = np.array([big if rank == 0 else 0, big - rank], dtype=np.int64)
        dist.all_reduce(t)
        b = np.array([big + rank], dtype=np.int64)
        dist.broadcast(b, src=3)
        return t.tolist(), b.tolist()

    for t, b in spawn(fn, 4).results:
        assert t == [big, 4 * big - 6]
        assert b == [big + 3]


@pytest.mark.parametrize("cluster", ["hgx-h100", "cpu-host"])
def test_float32_reductions_accumulate_in_float32(cluster):
    vals = np.random.default_rng(9).standard_normal((2, 257)).astype(np.float32)

    def fn(rank):
        t = vals[rank].copy()
        dist.all_reduce(t)
        return t

    res = spawn(fn, 2, cluster=cluster).results
    # Two ranks: any order is x0 + x1 rounded once to float32.
    for t in res:
        assert t.dtype == np.float32
        np.testing.assert_array_equal(t, vals[0] + vals[1])


@pytest.mark.parametrize("cluster", ["hgx-h100", "cpu-host"])
def test_all_reduce_is_bitwise_equal_on_every_rank(cluster):
    vals = np.random.default_rng(10).standard_normal((4, 1000)).astype(np.float32)

    def fn(rank):
        t = vals[rank].copy()
        dist.all_reduce(t)
        return t

    res = spawn(fn, 4, cluster=cluster).results
    for t in res[1:]:
        np.testing.assert_array_equal(t, res[0])
    np.testing.assert_allclose(res[0], vals.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


def test_bitwise_and_bool_reductions():
    def fn(rank):
        t = np.array([1 << rank, 0xFF], dtype=np.int32)
        dist.all_reduce(t, op=dist.ReduceOp.BOR)
        a = np.array([0b1110 | (1 << rank)], dtype=np.uint8)
        dist.all_reduce(a, op=dist.ReduceOp.BAND)
        x = np.array([rank], dtype=np.int64)  # gloo has no int16 collectives
        dist.all_reduce(x, op=dist.ReduceOp.BXOR)
        flags = np.array([rank == 2, False])
        dist.all_reduce(flags)  # SUM on bool is a logical or
        return t.tolist(), a.tolist(), x.tolist(), flags.tolist()

    for t, a, x, flags in spawn(fn, 3, cluster="cpu-host").results:
        assert t == [7, 255] and a == [0b1110] and x == [0 ^ 1 ^ 2] and flags == [True, False]


def test_complex_sum_keeps_the_imaginary_part():
    def fn(rank):
        t = np.array([1 + 2j, rank * 1j], dtype=np.complex64)
        dist.all_reduce(t)
        return t.tolist()

    assert spawn(fn, 3).results == [[3 + 6j, 3j]] * 3


def test_async_collective_work():
    def fn(rank):
        t = np.full(4, float(rank))
        work = dist.all_reduce(t, async_op=True)
        pending, before = work.is_completed(), t.copy()
        work.wait()
        return pending, before.tolist(), work.is_completed(), t.tolist()

    for rank, (pending, before, done, after) in enumerate(spawn(fn, 4).results):
        assert pending is False and before == [float(rank)] * 4  # nothing lands before completion
        assert done is True and after == [6.0] * 4


def test_avg_of_integers_truncates_like_c():
    def fn(rank):
        t = np.array([rank, -rank, 7], dtype=np.int64)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t.tolist()

    # NCCL sums, then divides truncating like C; torch 2.13's gloo cannot cast its float quotient back (measured).
    assert spawn(fn, 4, cluster="hgx-h100").results == [[1, -1, 7]] * 4
    with pytest.raises(simcomm.AlgorithmError, match="AVG on int64 tensors fails on gloo"):
        spawn(fn, 4, cluster="cpu-host")
