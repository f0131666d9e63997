"""Conformance: the same torch.distributed program on real gloo (processes, torch.multiprocessing) and on simcomm
(through `simcomm launch`'s interception), for every collective, p2p and object call, world sizes 2-4, float32
and int64. Each backend's results must equal closed-form expectations, and simcomm's must equal gloo's bitwise.

gloo's quirks are part of the expectations, and simcomm models them (algorithms/gloo.py):
- reduce: non-root tensors are not left alone; they hold the partial results of gloo's ring (for these 2-element
  tensors, rank r keeps x[r] op x[r+1] op ... op x[n-1]), e.g. [16,20], [15,18], [12,14] after a 4-rank SUM to
  rank 3 of [1,2], [3,4], [5,6], [7,8].
- bool SUM adds the bytes: True + True stores 2 in the bool's byte (a count, not 0/1).
- list reduce_scatter honours the op in torch 2.13 (pytorch#162338's "always sums" does not show).
- integer AVG fails (gloo sums, then cannot divide in place in the integer dtype). Real gloo raises it
  asynchronously, at the call or at a later wait (seen at the next barrier with 3 ranks), leaving the group
  unusable, so it is not in the battery; simcomm raises at the call on every rank (tests/distributed).
- list all_to_all needs every tensor of a list the same size (uneven sizes raise; all_to_all_single takes splits).
One real run per world size (xdist never repeats it): the gloo test also runs simcomm and compares bitwise.

NCCL: the battery's NCCL form (CUDA tensors; no any-source recv, monitored_barrier or bitwise ops, which NCCL
lacks; non-root reduce buffers untouched; a bool SUM is torch's MAX) runs on simulated H100s here. On a machine
with 2+ GPUs, `SIMCOMM_NCCL=1 python -m pytest tests/backends/test_conformance.py` also runs it on real NCCL
(world sizes 2 to min(4, GPUs)) and compares with simcomm; asked for without GPUs, it fails (NoGPUs), it does not
skip. These NCCL expectations have not been run on real NCCL yet (docs/validation.md).
"""
import functools
import os
import warnings

import numpy as np
import pytest
import torch

from simcomm.backends import NoGPUs, check_gpus, diff, run_real
from simcomm.backends.launch import run_launched

NS = (2, 3, 4)
DTYPES = ("float32", "int64")


def x(rank, dtype, count=2, offset=0):
    """Rank inputs: small integers (exact in float32 sums and products); int64 adds 2**40 to test its width."""
    base = torch.arange(count, dtype=torch.int64) + 1 + count * rank + offset
    return base.to(getattr(torch, dtype)) if dtype == "float32" else base + (1 << 40)


def battery(rank, dist, dtypes=DTYPES):
    """Every call, every root; returns {case: value} (tensors, lists, or the name of what was raised).

    Under NCCL every tensor is a CUDA tensor (`.cuda()`: the rank's GPU; under `simcomm launch`, a CPU tensor
    standing in for it) and the calls NCCL does not have are left out: recv from any source, monitored_barrier."""
    warnings.filterwarnings("ignore", r".*is deprecated", FutureWarning)
    n = dist.get_world_size()
    nccl = dist.get_backend() == "nccl"

    def X(*args, **kw):  # noqa: N802 - x() on the backend's device
        return x(*args, **kw).cuda() if nccl else x(*args, **kw)

    def on(t):
        return t.cuda() if nccl else t
    out = {}
    for dt in dtypes:
        tdt = getattr(torch, dt)
        for root in range(n):
            t = X(rank, dt)
            dist.broadcast(t, src=root)
            out[f"{dt}/broadcast/{root}"] = t
        ops = ["SUM", "PRODUCT", "MIN", "MAX"] + (["AVG"] if dt == "float32" else [] if nccl else ["BAND", "BOR",
                                                                                                "BXOR"])
        for op in ops:
            t = X(rank, dt) if op != "PRODUCT" else on(torch.full((2,), rank + 2, dtype=tdt))
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            out[f"{dt}/all_reduce/{op}"] = t
        t = X(rank, dt)
        dist.all_reduce(t, async_op=True).wait()
        out[f"{dt}/all_reduce/async"] = t
        for root in range(n):
            for op in ("SUM", "MAX"):
                t = X(rank, dt)
                dist.reduce(t, dst=root, op=getattr(dist.ReduceOp, op))
                out[f"{dt}/reduce/{op}/{root}"] = t  # non-roots included: gloo's partial results
        lst = [on(torch.zeros(2, dtype=tdt)) for _ in range(n)]
        dist.all_gather(lst, X(rank, dt))
        out[f"{dt}/all_gather"] = lst
        flat = on(torch.zeros(2 * n, dtype=tdt))
        dist.all_gather_into_tensor(flat, X(rank, dt))
        out[f"{dt}/all_gather_into_tensor"] = flat
        for root in range(n):
            lst = [on(torch.zeros(2, dtype=tdt)) for _ in range(n)] if rank == root else None
            dist.gather(X(rank, dt), lst, dst=root)
            out[f"{dt}/gather/{root}"] = lst
            got = on(torch.zeros(2, dtype=tdt))
            dist.scatter(got, [X(root, dt, offset=100 * i) for i in range(n)] if rank == root else None, src=root)
            out[f"{dt}/scatter/{root}"] = got
        for op in ("SUM", "MAX"):
            got = on(torch.zeros(2, dtype=tdt))
            dist.reduce_scatter(got, [X(rank, dt, offset=10 * j) for j in range(n)], op=getattr(dist.ReduceOp, op))
            out[f"{dt}/reduce_scatter/{op}"] = got
        got = on(torch.zeros(2, dtype=tdt))
        dist.reduce_scatter_tensor(got, X(rank, dt, count=2 * n))
        out[f"{dt}/reduce_scatter_tensor"] = got
        ins = [X(rank, dt, count=2, offset=10 * j) for j in range(n)]
        outs = [on(torch.zeros(2, dtype=tdt)) for _ in range(n)]
        dist.all_to_all(outs, ins)
        out[f"{dt}/all_to_all"] = outs
        try:  # gloo's list form needs equal sizes: rank i sending j + 1 elements to rank j raises
            dist.all_to_all([on(torch.zeros(rank + 1, dtype=tdt)) for _ in range(n)],
                            [X(rank, dt, count=j + 1) for j in range(n)])
            out[f"{dt}/all_to_all/uneven"] = "ran"
        except Exception as exc:  # noqa: BLE001
            out[f"{dt}/all_to_all/uneven"] = "raises" if "invalid tensor size" in str(exc) else repr(exc)
        single = on(torch.zeros(n, dtype=tdt))
        dist.all_to_all_single(single, X(rank, dt, count=n))
        out[f"{dt}/all_to_all_single"] = single
        sizes_in = [j + 1 for j in range(n)]
        sizes_out = [rank + 1] * n
        single = on(torch.zeros(sum(sizes_out), dtype=tdt))
        dist.all_to_all_single(single, X(rank, dt, count=sum(sizes_in)), sizes_out, sizes_in)
        out[f"{dt}/all_to_all_single/uneven"] = single
        # point to point: a ring with send/recv, any-source recv, isend/irecv, batch_isend_irecv, tags
        right, left = (rank + 1) % n, (rank - 1) % n
        got = on(torch.zeros(2, dtype=tdt))
        if rank % 2 == 0:
            dist.send(X(rank, dt), dst=right)
            dist.recv(got, src=left)
        else:
            dist.recv(got, src=left)
            dist.send(X(rank, dt), dst=right)
        out[f"{dt}/send_recv"] = got
        if not nccl:  # NCCL has no recv from any source
            got = torch.zeros(2, dtype=tdt)
            if rank == 0:
                out[f"{dt}/recv_any"] = sorted(dist.recv(got) for _ in range(n - 1))
            else:
                dist.send(X(rank, dt), dst=0)
                out[f"{dt}/recv_any"] = None
        got = on(torch.zeros(2, dtype=tdt))
        for w in [dist.isend(X(rank, dt), dst=right, tag=7), dist.irecv(got, src=left, tag=7)]:
            w.wait()
        out[f"{dt}/isend_irecv"] = got
        got = on(torch.zeros(2, dtype=tdt))
        ops = [dist.P2POp(dist.isend, X(rank, dt), right), dist.P2POp(dist.irecv, got, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        out[f"{dt}/batch_isend_irecv"] = got
        # a subgroup of the first and last rank
        sub = dist.new_group([0, n - 1])
        t = X(rank, dt)
        if rank in (0, n - 1):
            dist.all_reduce(t, group=sub)
        out[f"{dt}/subgroup"] = [t, dist.get_rank(sub), dist.get_world_size(sub)]
    for kind, values in (("bool", [True, rank % 2 == 0, False]),):
        t = on(torch.tensor(values))
        dist.all_reduce(t)
        out[f"{kind}/all_reduce/SUM"] = t.view(torch.uint8)  # gloo adds the bytes; torch's NCCL takes the max
    dist.barrier()
    if not nccl:
        dist.monitored_barrier()  # gloo only
    objs = [{"from": rank}, rank * 10] if rank == 1 else [None, None]
    dist.broadcast_object_list(objs, src=1)
    out["objects/broadcast_object_list"] = objs
    objs = [None] * n
    dist.all_gather_object(objs, ("rank", rank))
    out["objects/all_gather_object"] = objs
    objs = [None] * n if rank == n - 1 else None
    dist.gather_object({"r": rank}, objs, dst=n - 1)
    out["objects/gather_object"] = objs
    got = [None]
    dist.scatter_object_list(got, [f"to {i}" for i in range(n)] if rank == 0 else None, src=0)
    out["objects/scatter_object_list"] = got
    got = [None, None]
    if rank == 0:
        dist.send_object_list([{"k": 1}, [2, 3]], dst=n - 1)
    elif rank == n - 1:
        dist.recv_object_list(got, src=0)
    out["objects/send_recv_object_list"] = got
    out["queries"] = [dist.get_rank(), dist.get_world_size(), dist.get_backend(), dist.is_initialized()]
    return out


# ---- closed-form expectations ------------------------------------------------------------------------------------
def _np(rank, dt, **kw):
    return x(rank, dt, **kw).numpy()


def _fold(op, arrays):
    f = {"SUM": np.add, "PRODUCT": np.multiply, "MIN": np.minimum, "MAX": np.maximum, "BAND": np.bitwise_and,
         "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}[op]
    return functools.reduce(f, arrays)


def expected(case: str, rank: int, n: int, backend: str = "gloo"):
    parts = case.split("/")
    dt = parts[0]
    tdt = np.dtype(dt) if dt in DTYPES else None
    xs = [_np(r, dt) for r in range(n)] if tdt is not None else None
    kind = parts[1] if len(parts) > 1 else ""
    if case == "queries":
        return [rank, n, backend, True]
    if case == "bool/all_reduce/SUM":  # gloo: byte counts, not booleans; NCCL: torch maps a bool SUM to MAX (an OR)
        if backend == "nccl":
            return np.array([1, 1, 0], dtype=np.uint8)
        return np.array([n, sum(r % 2 == 0 for r in range(n)), 0], dtype=np.uint8)
    if kind == "broadcast":
        return xs[int(parts[2])]
    if kind == "all_reduce":
        op = parts[2]
        if op == "PRODUCT":
            return np.full(2, np.prod([r + 2 for r in range(n)]), dtype=tdt)
        if op == "AVG":
            return (_fold("SUM", xs) / np.float32(n)).astype(np.float32)
        return _fold("SUM" if op == "async" else op, xs)
    if kind == "reduce":
        op, root = parts[2], int(parts[3])
        # gloo leaves x[r] op ... op x[n-1] on non-root rank r (2-element tensors sit in one ring chunk); NCCL
        # writes only the root's buffer
        return _fold(op, xs) if rank == root else xs[rank] if backend == "nccl" else _fold(op, xs[rank:])
    if kind == "all_gather":
        return xs
    if kind == "all_gather_into_tensor":
        return np.concatenate(xs)
    if kind == "gather":
        return xs if rank == int(parts[2]) else None
    if kind == "scatter":
        return _np(int(parts[2]), dt, offset=100 * rank)
    if kind == "reduce_scatter":
        return _fold(parts[2], [_np(r, dt, offset=10 * rank) for r in range(n)])
    if kind == "reduce_scatter_tensor":
        return _fold("SUM", [_np(r, dt, count=2 * n) for r in range(n)])[2 * rank:2 * rank + 2]
    if case.endswith("all_to_all/uneven"):
        return "ran" if backend == "nccl" else "raises"
    if kind == "all_to_all":
        return [_np(i, dt, offset=10 * rank) for i in range(n)]
    if kind == "all_to_all_single" and len(parts) == 2:
        return np.array([_np(i, dt, count=n)[rank] for i in range(n)], dtype=tdt)
    if kind == "all_to_all_single":
        return np.concatenate([_np(i, dt, count=n * (n + 1) // 2)[rank * (rank + 1) // 2:][:rank + 1]
                               for i in range(n)])
    if kind in ("send_recv", "isend_irecv", "batch_isend_irecv"):
        return xs[(rank - 1) % n]
    if kind == "recv_any":
        return list(range(1, n)) if rank == 0 else None
    if kind == "subgroup":
        member = rank in (0, n - 1)
        return [_fold("SUM", [xs[0], xs[n - 1]]) if member else xs[rank], (0 if rank == 0 else 1) if member else -1,
                2 if member else -1]
    if case == "objects/broadcast_object_list":
        return [{"from": 1}, 10]
    if case == "objects/all_gather_object":
        return [("rank", r) for r in range(n)]
    if case == "objects/gather_object":
        return [{"r": r} for r in range(n)] if rank == n - 1 else None
    if case == "objects/scatter_object_list":
        return [f"to {rank}"]
    if case == "objects/send_recv_object_list":
        return [{"k": 1}, [2, 3]] if rank == n - 1 else [None, None]
    raise KeyError(case)


def _plain(value):
    """Tensors as numpy, recursively (so expectations compare by value and dtype)."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and \
            a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return a == b


def check_expectations(results: list, n: int, label: str, backend: str = "gloo") -> None:
    bad = []
    for rank, res in enumerate(results):
        for case, value in res.items():
            want = expected(case, rank, n, backend)
            if not _same(_plain(value), want):
                bad.append(f"{label} n={n} rank {rank} {case}: got {_plain(value)!r}, expected {want!r}")
    assert not bad, "\n".join(bad[:40])


@functools.lru_cache(maxsize=None)
def simulated(n, backend="gloo"):
    return run_launched(battery, nprocs=n, cluster="cpu-host" if backend == "gloo" else "hgx-h100", backend=backend)




@pytest.mark.parametrize("n", NS)
def test_simcomm_meets_the_expectations(n):
    results = simulated(n)
    assert len(results[0]) > 60  # every case ran
    check_expectations(results, n, "simcomm")


@pytest.mark.parametrize("n", NS)
def test_gloo_meets_the_expectations_and_equals_simcomm_bitwise(n):
    real = run_real(battery, nprocs=n, timeout=180)
    check_expectations(real, n, "gloo")
    sim = simulated(n)
    bad = []
    for rank in range(n):
        assert sim[rank].keys() == real[rank].keys()
        for case in real[rank]:
            eq, _, why = diff(sim[rank][case], real[rank][case], case)
            if not eq:
                bad.append(f"rank {rank}: " + "; ".join(why))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("n", NS)
def test_the_nccl_battery_on_simcomm(n):
    """The battery's NCCL form (CUDA tensors, no any-source recv or monitored_barrier) on simulated H100s."""
    results = simulated(n, "nccl")
    assert len(results[0]) > 55 and "float32/recv_any" not in results[0]
    check_expectations(results, n, "simcomm (nccl)", "nccl")


def test_real_nccl_needs_a_gpu_per_rank():
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        assert check_gpus("nccl", 2) is None
    else:
        with pytest.raises(NoGPUs, match="real NCCL with 2 ranks needs 2 CUDA GPUs"):
            run_real(battery, nprocs=2, backend="nccl")


if os.environ.get("SIMCOMM_NCCL") == "1":  # asked for on a GPU machine: fails (NoGPUs) where there are none
    GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0

    @pytest.mark.parametrize("n", range(2, max(2, min(4, GPUS)) + 1))  # 2 .. min(4, GPUs); 2 without GPUs
    def test_real_nccl_equals_simcomm(n):
        real = run_real(battery, nprocs=n, backend="nccl", timeout=300)
        check_expectations(real, n, "nccl", "nccl")
        sim = simulated(n, "nccl")
        bad = [f"rank {rank}: " + "; ".join(why) for rank in range(n) for case in real[rank]
               for eq, _, why in [diff(sim[rank][case], real[rank][case], case)] if not eq]
        assert not bad, "\n".join(bad)
