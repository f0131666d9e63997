"""simcomm with gloo numerics against real torch.distributed gloo, bitwise (torch CPU, spawned processes).

One program per group size runs every check (spawning costs seconds), once on simcomm and once on real gloo,
through simcomm.backends.compare. The real results also feed the gloo plans directly (reduce with its partial
sums on non-roots, both reduce_scatter forms).
"""
import warnings

import numpy as np
import pytest
import torch

from simcomm.algorithms.gloo import (
    chunk_owner,
    gloo_all_reduce,
    gloo_reduce,
    gloo_reduce_scatter,
    gloo_reference,
    segmentation,
)
from simcomm.algorithms.plan import Buffers, Collective
from simcomm.algorithms.reduce_ops import ReduceOp
from simcomm.backends import bitwise_equal, compare, diff

SIZES = [1, 7, 65537]  # plus 1000+3N+1 (not divisible by N) and just over 2N MiB (more segments than 2N)
# Results simcomm is not expected to share with gloo: none (non-root reduce tensors hold gloo's partial sums).
NOT_YET: set[str] = set()


def sizes_for(n):
    return SIZES + [1000 + 3 * n + 1, 2 * n * (1 << 18) + 4099]


def _gen(seed, rank):
    return torch.Generator().manual_seed(seed * 7919 + rank)


def _floats(g, count, dtype=torch.float32):
    """Random values spanning a few binades (so association order shows), with some +0.0 and -0.0."""
    v = torch.randn(count, generator=g, dtype=dtype)
    v *= torch.exp2(torch.randint(-3, 4, (count,), generator=g, dtype=torch.int8).to(dtype))  # exact scaling
    u = torch.rand(count, generator=g)
    v[u < 0.05] = 0.0
    v[u > 0.95] = -0.0
    return v


def _ints(g, count, lo=-(1 << 40), hi=1 << 40):
    return torch.randint(lo, hi, (count,), generator=g, dtype=torch.int64)


def battery(rank, dist, sizes):
    """Every collective gloo has, on inputs that expose order; returns {name: result}."""
    warnings.filterwarnings("ignore", r".*is deprecated\. Please use", FutureWarning)  # torch 2.13's *_single
    n = dist.get_world_size()
    out = {}
    for c in sizes:
        t = _floats(_gen(c, rank), c)
        dist.all_reduce(t)
        out[f"sum_{c}"] = t
    g = _gen(1, rank)
    for op in ("MAX", "MIN", "AVG"):
        t = _floats(g, 1001)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        out[op.lower()] = t
    t = torch.empty(1001).uniform_(0.5, 1.5, generator=g)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    out["product"] = t
    t = _floats(g, 4099, torch.float64)
    dist.all_reduce(t)
    out["sum_f64"] = t
    t = _floats(g, 1001, torch.float16)
    dist.all_reduce(t)
    out["sum_f16"] = t
    t = torch.randn(333, generator=g, dtype=torch.complex64)
    dist.all_reduce(t)
    out["sum_c64"] = t
    t = _ints(g, 1003)
    dist.all_reduce(t)
    out["sum_i64"] = t
    t = _ints(g, 1003)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["max_i64"] = t
    t = torch.rand(1001, generator=g) > 0.5
    dist.all_reduce(t)  # gloo adds the bool bytes
    out["sum_bool"] = t
    # copies
    t = _floats(g, 33) if rank == n - 1 else torch.zeros(33)
    dist.broadcast(t, src=n - 1)
    out["broadcast"] = t
    mine = _floats(g, 17)
    lst = [torch.empty(17) for _ in range(n)]
    dist.all_gather(lst, mine)
    out["all_gather"] = lst
    flat = torch.empty(17 * n)
    dist.all_gather_into_tensor(flat, mine)
    out["all_gather_into_tensor"] = flat
    gl = [torch.empty(17) for _ in range(n)] if rank == 0 else None
    dist.gather(mine, gl, dst=0)
    out["gather"] = gl
    t = torch.empty(19)
    dist.scatter(t, [_floats(g, 19) for _ in range(n)] if rank == n - 1 else None, src=n - 1)
    out["scatter"] = t
    outs = [torch.empty(5) for _ in range(n)]
    dist.all_to_all(outs, [_floats(g, 5) for _ in range(n)])
    out["all_to_all"] = outs
    single = torch.empty(3 * n)
    dist.all_to_all_single(single, _floats(g, 3 * n))
    out["all_to_all_single"] = single
    # reductions whose result does not depend on the order (integers, integer-valued floats)
    o = torch.empty(1001)
    dist.reduce_scatter(o, [torch.randint(-1000, 1000, (1001,), generator=g).float() for _ in range(n)])
    out["rs_exact_list"] = o
    o = torch.empty(1001, dtype=torch.int64)
    dist.reduce_scatter_tensor(o, _ints(g, 1001 * n))
    out["rs_exact_flat"] = o
    t = torch.randint(-1000, 1000, (1001,), generator=g).float()
    dist.reduce(t, dst=n // 2)
    out["reduce_exact"] = t if rank == n // 2 else None
    # send/recv around the ring
    recv = torch.empty(9)
    reqs = [dist.isend(_floats(g, 9), dst=(rank + 1) % n), dist.irecv(recv, src=(rank - 1) % n)] if n > 1 else []
    for q in reqs:
        q.wait()
    out["ring_p2p"] = recv if n > 1 else None
    # reductions in gloo's own orders (also checked against the gloo plans below)
    for c in (7, 65537):
        o = torch.empty(c)
        dist.reduce_scatter(o, [_floats(_gen(10 + j, rank), c) for j in range(n)])
        out[f"rs_random_list_{c}"] = o
        o = torch.empty(c)
        dist.reduce_scatter_tensor(o, _floats(_gen(20, rank), c * n))
        out[f"rs_random_flat_{c}"] = o
    big = 2 * n * (1 << 18) + 4099  # reduce's segments differ from all_reduce's above 2N MiB
    for c in (1001, big):
        t = _floats(_gen(30 + c, rank), c)
        root = c % n
        dist.reduce(t, dst=root)
        out[f"reduce_random_{c}"] = t if rank == root else None
        out[f"reduce_nonroot_{c}"] = t if rank != root else None
    return out


NS = [2, 3, 4, 5, 6]


@pytest.mark.parametrize("n", NS)
def test_gloo_bitwise(n):
    """One spawn per N (so xdist never repeats it): simcomm vs real gloo, then the gloo plans vs real gloo."""
    rep = compare(battery, (sizes_for(n),), nprocs=n, timeout=150)
    check_simcomm_equals_real(rep, n)
    check_reduce_plan(rep, n)
    check_reduce_scatter_plans(rep, n)


def check_simcomm_equals_real(rep, n):
    bad = []
    for r in range(n):
        sim, real = rep.simulated[r], rep.real[r]
        assert sim.keys() == real.keys()
        for key in sim:
            if any(key.startswith(k) for k in NOT_YET):
                continue
            eq, _, why = diff(sim[key], real[key], key)
            if not eq:
                bad.append(f"rank {r}: " + "; ".join(why))
    assert not bad, "\n".join(bad)


def _plan(plan, kind, rows, op=ReduceOp.SUM, count=None, root=0, **kw):
    n = rows.shape[0]
    coll = Collective(kind, np.arange(n), rows.shape[1] if count is None else count, rows.dtype, op, root)
    buf = Buffers(rows.copy(), op)
    steps = list(plan(coll, buf, **kw))
    return buf.rows, steps


def check_reduce_plan(rep, n):
    """Root result AND the partial sums gloo leaves on the other ranks, incl. reduce's own segment sizes."""
    for c in (1001, 2 * n * (1 << 18) + 4099):
        root = c % n
        rows = np.stack([_floats(_gen(30 + c, r), c).numpy() for r in range(n)])
        got, _ = _plan(gloo_reduce, "reduce", rows, root=root)
        for r in range(n):
            real = rep.real[r][f"reduce_random_{c}" if r == root else f"reduce_nonroot_{c}"].numpy()
            assert bitwise_equal(got[r], real), (c, r, diff(got[r], real)[2])


def check_reduce_scatter_plans(rep, n):
    for c in (7, 65537):
        rows = np.stack([np.concatenate([_floats(_gen(10 + j, r), c).numpy() for j in range(n)]) for r in range(n)])
        got, _ = _plan(gloo_reduce_scatter, "reduce_scatter", rows, count=c, flat=False)
        for r in range(n):
            assert bitwise_equal(got[r, r * c:(r + 1) * c], rep.real[r][f"rs_random_list_{c}"].numpy()), (c, r)
        rows = np.stack([_floats(_gen(20, r), c * n).numpy() for r in range(n)])
        got, _ = _plan(gloo_reduce_scatter, "reduce_scatter", rows, count=c, flat=True)
        for r in range(n):
            assert bitwise_equal(got[r, r * c:(r + 1) * c], rep.real[r][f"rs_random_flat_{c}"].numpy()), (c, r)


def test_random_floats_do_depend_on_the_order():
    """The checks above have teeth: for N >= 3 the rank-order sum differs from gloo's for these inputs."""
    n, c = 4, 65537
    rows = np.stack([_floats(_gen(c, r), c).numpy() for r in range(n)])
    naive = rows[0] + rows[1] + rows[2] + rows[3]
    gloo = gloo_reference(rows, ReduceOp.SUM)[0]
    assert (naive != gloo).mean() > 0.05


def test_segmentation_facts():
    # chunks follow gloo's segments, not count/N: 10 floats on 4 ranks -> 4, 4, 2, 0
    assert list(np.bincount(chunk_owner(10, 4, 4), minlength=4)) == [4, 4, 2, 0]
    # all_reduce evens its segments; reduce caps them at 1 MiB (10 MB float32 over 3 ranks)
    assert segmentation(2_500_001, 3, 4) == (12, 833336, 833336)
    assert segmentation(2_500_001, 3, 4, "reduce") == (12, 1 << 20, 1 << 20)
    # uneven chunks 4, 4, 2, 0: each phase one step rotating its sizes, stage s rank r sending chunk r+1+s
    # (reduce-scatter) or r+s (all-gather)
    _, steps = _plan(gloo_all_reduce, "all_reduce", np.zeros((4, 10), np.float32))
    assert [(s.repeat, s.rotate, s.reduce) for s in steps] == [(3, 1, True), (3, 1, False)]
    assert all((s.dst == (s.src - 1) % 4).all() for s in steps)
    chunk = np.array([16, 16, 8, 0])
    for s, first in zip(steps, (1, 0)):
        for j in range(3):
            assert list(s.rotated(j).nbytes) == list(chunk[(s.src + first + j) % 4])
    assert sum(int(s.nbytes.sum()) * s.repeat for s in steps) == 2 * (4 - 1) * 10 * 4  # 2(N-1) x the tensor
    # even chunks: every stage of a phase is the same flows, one step repeated N-1 times
    _, steps = _plan(gloo_all_reduce, "all_reduce", np.zeros((5, 10), np.float32))
    assert [s.repeat for s in steps] == [4, 4] and [s.reduce for s in steps] == [True, False]
    assert all((s.dst == (s.src - 1) % 5).all() for s in steps)
    assert sum(int(s.nbytes.sum()) * s.repeat for s in steps) == 2 * (5 - 1) * 10 * 4


# ---- a tutorial program: a three-rank chain of send/recv, then a softmax over ranks -------------------------
def seed_programs(rank, dist):
    if rank == 0:
        tensor = torch.tensor([100, 200], dtype=torch.float32)
        dist.send(tensor, dst=1)
    elif rank == 1:
        tensor = torch.zeros(2, dtype=torch.float32)
        dist.recv(tensor, src=0)
        tensor += 100
        dist.send(tensor, dst=2)
    else:
        tensor = torch.zeros(2, dtype=torch.float32)
        dist.recv(tensor, src=1)
    dist.barrier()
    torch.manual_seed(rank)
    logit = torch.zeros(1, dtype=torch.float32)
    logit.uniform_(-10.0, 10.0)
    max_logit = logit.clone()
    dist.all_reduce(max_logit, op=dist.ReduceOp.MAX)
    prob = (logit - max_logit).exp()
    prob_sum = prob.clone()
    dist.all_reduce(prob_sum, op=dist.ReduceOp.SUM)
    norm_prob = prob / prob_sum
    norm_prob_sum = norm_prob.clone()
    dist.all_reduce(norm_prob_sum, op=dist.ReduceOp.SUM)
    return {"chain": tensor, "logit": logit, "prob": norm_prob, "sum": norm_prob_sum}


def test_seed_chain_and_softmax_match_real_gloo():
    rep = compare(seed_programs, nprocs=3)
    assert rep.equal, str(rep)
    assert rep.max_abs_diff == 0.0
    assert torch.equal(rep.real[2]["chain"], torch.tensor([200.0, 300.0]))
    assert abs(float(rep.real[0]["sum"]) - 1.0) < 1e-6
    assert "bitwise equal" in str(rep)
