"""Tensor arguments: exactly torch's dtypes, results written into any view, read-only buffers refused (issue 13)."""
import numpy as np
import pytest
import torch

import simcomm
import simcomm.distributed as dist
from simcomm.distributed.tensors import TORCH_DTYPES, torch_dtype

from .helpers import run

NUMPY_WITHOUT_TORCH = ["<U1", "S2", "O", "datetime64[s]", "timedelta64[ms]", "V8", [("a", "i4"), ("b", "f4")],
                       ">f4", "longdouble", "clongdouble"]


def test_the_table_is_torchs_dtypes():
    """Every name is a torch dtype of the same size; a numpy dtype is accepted exactly when torch takes it (or an
    equal numpy dtype: numpy's ulonglong equals uint64, which torch takes), as the same torch dtype."""
    for name, dt in TORCH_DTYPES.items():
        assert getattr(torch, name).itemsize == dt.itemsize
    taken = {}
    for code in np.typecodes["All"]:
        try:
            taken[np.dtype(code)] = str(torch.from_numpy(np.zeros(1, code)).dtype).removeprefix("torch.")
        except TypeError:
            pass
    for code in np.typecodes["All"] + "SUVOMm":
        np_dtype = np.dtype(code)
        if np_dtype in taken:
            assert torch_dtype(np_dtype).name == taken[np_dtype]
        else:
            with pytest.raises(simcomm.DistError, match="no torch equivalent|non-native"):
                torch_dtype(np_dtype)


@pytest.mark.parametrize("dtype", NUMPY_WITHOUT_TORCH, ids=str)
def test_numpy_dtypes_torch_lacks_are_refused_naming_rank_and_call(dtype):
    def fn(rank):
        dist.all_reduce(np.zeros(2, dtype=dtype))

    with pytest.raises(simcomm.DistError, match=r"rank 0: all_reduce: tensor: numpy dtype .* (no torch equivalent|"
                                                r"non-native byte order)"):
        run(fn)


def test_strings_and_objects_never_reduce():
    def fn(rank):
        dist.broadcast(np.array(["a", "b"]), src=0)

    with pytest.raises(simcomm.DistError, match="rank 0: broadcast: tensor: numpy dtype '<U1'"):
        run(fn)


@pytest.mark.parametrize("call", ["all_to_all_single", "all_gather_into_tensor", "all_reduce", "broadcast",
                                  "recv", "reduce_scatter_tensor", "scatter", "all_to_all", "gather"])
def test_results_land_in_non_contiguous_views(call):
    """Every write-back honours strides: the transposed output gets the logical result, not a reshaped copy."""
    n = 4

    def fn(rank):
        if call == "all_to_all_single":
            out = np.zeros((4, 4 * n)).T
            dist.all_to_all_single(out, np.full((4 * n, 4), float(rank)))
            return out, np.repeat(np.arange(n, dtype=float), 4)[:, None] * np.ones((1, 4))
        if call == "all_gather_into_tensor":
            out = np.zeros((3, 2 * n)).T
            dist.all_gather_into_tensor(out, np.full((2, 3), float(rank)))
            return out, np.repeat(np.arange(n, dtype=float), 2)[:, None] * np.ones((1, 3))
        if call == "all_reduce":
            base = np.ones(8)
            dist.all_reduce(base[::2])
            return base, np.array([n, 1] * 4, dtype=float)
        if call == "broadcast":
            t = (np.arange(6.0).reshape(2, 3) * (rank == 0)).T
            dist.broadcast(t, src=0)
            return t, np.arange(6.0).reshape(2, 3).T
        if call == "recv":
            if rank == 0:
                for peer in range(1, n):
                    dist.send(np.arange(6.0).reshape(2, 3), dst=peer)
                return np.zeros(1), np.zeros(1)
            t = np.zeros((3, 2)).T
            dist.recv(t, src=0)
            return t, np.arange(6.0).reshape(2, 3)
        if call == "reduce_scatter_tensor":
            out = np.zeros((2, 3)).T
            dist.reduce_scatter_tensor(out, np.ones(6 * n))
            return out, np.full((3, 2), float(n))
        if call == "scatter":
            out = np.zeros((2, 3)).T
            lst = [np.full((3, 2), float(i)) for i in range(n)] if rank == 0 else None
            dist.scatter(out, lst, src=0)
            return out, np.full((3, 2), float(rank))
        if call == "all_to_all":
            outs = [np.zeros((2, 3)).T for _ in range(n)]
            dist.all_to_all(outs, [np.full((3, 2), float(rank)) for _ in range(n)])
            return np.stack(outs), np.stack([np.full((3, 2), float(i)) for i in range(n)])
        outs = [np.zeros((2, 3)).T for _ in range(n)] if rank == 1 else None
        dist.gather(np.full((3, 2), float(rank)), outs, dst=1)
        return (np.stack(outs), np.stack([np.full((3, 2), float(i)) for i in range(n)])) if rank == 1 else \
            (np.zeros(1), np.zeros(1))

    for got, expected in run(fn, nprocs=n).results:
        np.testing.assert_array_equal(got, expected)


def test_torch_transposed_output_gets_the_logical_result():
    def fn(rank):
        out = torch.zeros(4, 8).t()
        dist.all_to_all_single(out, torch.full((8, 4), float(rank)))
        return out

    for out in run(fn).results:
        assert out.tolist() == [[0.0] * 4] * 4 + [[1.0] * 4] * 4


@pytest.mark.parametrize("call", ["recv", "all_reduce", "all_gather", "broadcast"])
def test_read_only_buffers_are_refused_with_rank_and_call(call):
    def fn(rank):
        ro = np.zeros(2)
        ro.flags.writeable = False
        if call == "recv":
            if rank == 0:
                dist.send(np.ones(2), dst=1)
            else:
                dist.recv(ro, src=0)
        elif call == "all_reduce":
            dist.all_reduce(ro if rank == 1 else np.zeros(2))
        elif call == "all_gather":
            dist.all_gather([ro, np.zeros(2)] if rank == 1 else [np.zeros(2), np.zeros(2)], np.ones(2))
        else:
            dist.broadcast(ro if rank == 1 else np.ones(2), src=0)

    role = {"recv": "tensor", "all_reduce": "tensor", "all_gather": r"tensor_list\[0\]", "broadcast": "tensor"}[call]
    with pytest.raises(simcomm.DistError, match=fr"rank 1: {call}: {role} is read-only"):
        run(fn)


def test_broadcast_root_may_send_from_a_read_only_array():
    def fn(rank):
        t = np.arange(3.0) if rank == 0 else np.zeros(3)
        t.flags.writeable = rank != 0
        dist.broadcast(t, src=0)
        return t.tolist()

    assert run(fn).results == [[0.0, 1.0, 2.0]] * 2


def test_mixing_size_only_and_data_in_a_collective_names_the_ranks():
    def fn(rank):
        dist.all_reduce(simcomm.size_only(4) if rank == 0 else np.ones(4, np.float32))

    with pytest.raises(simcomm.MismatchError, match=r"^rank 0: collective mismatch on WORLD at call #1: ranks 1, 2, 3 "
                                                    r"called all_reduce\(.*data=values.*rank 0 called all_reduce\(.*"
                                                    r"data=size-only"):
        run(fn, nprocs=4)


def test_a_meta_tensor_on_one_rank_blames_that_rank():
    def fn(rank):
        dist.all_reduce(torch.ones(2, device="meta") if rank == 1 else torch.ones(2))

    with pytest.raises(simcomm.MismatchError, match=r"^rank 1: .*rank 1 called all_reduce\(.*data=size-only"):
        run(fn, nprocs=4)


def test_bfloat16_is_not_float16():
    """bf16 and fp16 have the same size but are different dtypes: mixing them is a mismatch naming the bf16 rank."""
    def fn(rank):
        dist.all_reduce(simcomm.size_only(4, dtype="bfloat16" if rank == 0 else "float16"))

    with pytest.raises(simcomm.MismatchError, match=r"^rank 0: .*rank 0 called all_reduce\(shape=\[4\], "
                                                    r"dtype=bfloat16"):
        run(fn, nprocs=4)


def test_bfloat16_torch_data_moves_bitwise_and_fp16_into_bf16_is_a_mismatch():
    def moves(rank):
        t = torch.arange(4, dtype=torch.bfloat16) if rank == 0 else torch.zeros(4, dtype=torch.bfloat16)
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        dist.broadcast(t, src=1)
        return t.float().tolist()

    assert run(moves).results == [[0.0, 1.0, 2.0, 3.0]] * 2

    def mixed(rank):
        if rank == 0:
            dist.send(torch.ones(2, dtype=torch.float16), dst=1)
        else:
            dist.recv(torch.zeros(2, dtype=torch.bfloat16), src=0)

    with pytest.raises(simcomm.MismatchError, match=r"rank 0 sends float16\[2\] to rank 1 \(tag 0\), but rank 1 "
                                                    r"receives into bfloat16\[2\]"):
        run(mixed)


def test_output_and_input_dtypes_must_match_as_in_torch():
    def gather_into(rank):
        dist.all_gather_into_tensor(np.zeros(8, np.float64), np.ones(2, np.float32))

    def all_to_all(rank):
        dist.all_to_all([np.zeros(2, np.float32), np.zeros(2, np.float32)],
                        [np.ones(2, np.float32), np.ones(2, np.float64)])

    with pytest.raises(simcomm.DistError, match="rank 0: all_gather_into_tensor: invalid tensor type: output_tensor "
                                                r"is float64\[8\], input_tensor is float32\[2\]"):
        run(gather_into, nprocs=4)
    with pytest.raises(simcomm.DistError, match=r"rank 0: all_to_all: Invalid usage of tensors with different dtypes: "
                                                r"input_tensor_list\[1\] is float64\[2\]"):
        run(all_to_all)


def test_non_tensors_are_refused_naming_rank_and_call():
    def fn(rank):
        dist.send([1, 2], dst=1) if rank == 0 else dist.recv(np.zeros(2), src=0)

    with pytest.raises(simcomm.DistError, match="rank 0: send: tensor: expected a numpy array"):
        run(fn)


def test_size_only_counts_elements_and_says_how_to_give_a_size_in_bytes():
    """Issue 11: size_only('512MiB') said only "a shape is whole numbers >= 0"."""
    from simcomm.errors import DistError
    from simcomm.units import parse_size
    with pytest.raises(DistError) as err:
        simcomm.size_only("512MiB", dtype="bfloat16")
    assert str(err.value) == ("size_only: a shape counts elements (whole numbers >= 0), got ('512MiB',); for "
                              "'512MiB' of bfloat16 use size_only(parse_size('512MiB') // 2, dtype='bfloat16') "
                              "(from simcomm.units import parse_size)")
    t = simcomm.size_only(parse_size("512MiB") // 2, dtype="bfloat16")  # what the message suggests
    assert t.nbytes == 512 << 20 and t.shape == (256 << 20,)
    with pytest.raises(DistError, match=r"counts elements \(whole numbers >= 0\), got \(4, -1\)$"):
        simcomm.size_only(4, -1)



@pytest.mark.parametrize("kind", ["all_reduce", "broadcast"])
def test_results_copied_in_threads_land_in_every_rank_whatever_its_strides(kind, monkeypatch):
    """write_all spreads large copies over threads (here: every copy, 3 threads); each rank's tensor (a strided
    view, a torch tensor) gets exactly its result."""
    from simcomm import arrays
    monkeypatch.setattr(arrays, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(simcomm.distributed.tensors, "PARALLEL_BYTES", 0)
    monkeypatch.setenv("SIMCOMM_THREADS", "3")

    def program(rank):
        base = np.zeros((100, 2), dtype=np.float32)
        x = base[:, 1] if rank % 2 else torch.zeros(100)
        (x if rank % 2 else x.numpy())[:] = np.arange(100) + rank
        if kind == "all_reduce":
            dist.all_reduce(x)
        else:
            dist.broadcast(x, src=2)
        return np.asarray(x).copy(), base[:, 0].copy()
    for got, untouched in simcomm.spawn(program, nprocs=7, cluster="cpu-host").results:
        assert not untouched.any()
        want = 7 * np.arange(100) + 21 if kind == "all_reduce" else np.arange(100) + 2
        assert np.array_equal(got, want)


def test_results_for_tensors_that_share_memory_are_written_in_rank_order(monkeypatch):
    """Ranks that pass views of one array (one process here) get their copies one after another, in rank order, as
    without threads: the last rank's result is what stays."""
    from simcomm import arrays
    from simcomm.distributed.tensors import _arg, write_all
    monkeypatch.setattr(arrays, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(simcomm.distributed.tensors, "PARALLEL_BYTES", 0)
    monkeypatch.setenv("SIMCOMM_THREADS", "4")
    shared = np.zeros(1000, dtype=np.int64)
    views = [shared[i * 100:i * 100 + 500] for i in range(6)]  # overlapping
    write_all([(_arg(v), np.full(500, i)) for i, v in enumerate(views)])
    expect = np.zeros(1000, dtype=np.int64)
    for i in range(6):
        expect[i * 100:i * 100 + 500] = i
    assert np.array_equal(shared, expect)
