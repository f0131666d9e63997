"""Adversarial rank programs (issue 13): random mixes of collectives, point-to-point, groups, object calls,
dtypes (every numpy dtype, torch's and the rest), views and strides, size-only and data tensors, async work with
polling, early exits, exceptions and one-rank mistakes. Law: every program ends, within a watchdog's time, with
the correct result on every rank or with a SimcommError that names a rank.

CI runs a few hundred programs; `pytest -m fuzz tests/distributed/test_adversarial.py` runs 2,000.
"""
from __future__ import annotations

import re
import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simcomm
import simcomm.distributed as dist
from simcomm import clock

LIMIT_S = 30.0
DTYPES = sorted(set(np.typecodes["All"])) + ["U1", "S2", "M8[s]", "m8[ms]", "V8", ">f4", "<i4"]
STEPS = ["all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
         "ring", "group_all_reduce", "barrier", "objects", "time"]
FAULTS = ["exit", "raise", "shape", "dtype", "size_only", "readonly", "skip"]
OUTCOMES: Counter = Counter()


@st.composite
def programs(draw):
    n = draw(st.sampled_from([2, 3, 4]))
    steps = draw(st.lists(st.fixed_dictionaries({
        "kind": st.sampled_from(STEPS), "dtype": st.sampled_from(DTYPES + ["float32", "int64", "float64"] * 4),
        "op": st.sampled_from(["SUM", "MAX", "MIN"]), "layout": st.sampled_from(["plain", "transposed", "strided"]),
        "mode": st.sampled_from(["sync", "wait", "poll"]), "root": st.integers(0, n - 1),
        "size_only": st.booleans(), "count": st.integers(1, 3)}), min_size=1, max_size=5))
    fault = draw(st.one_of(st.none(), st.fixed_dictionaries({
        "kind": st.sampled_from(FAULTS), "rank": st.integers(0, n - 1), "step": st.integers(0, len(steps) - 1)})))
    return {"n": n, "cluster": draw(st.sampled_from(["hgx-h100", "cpu-host"])), "steps": steps, "fault": fault}


def _values(rank: int, count: int, dtype) -> np.ndarray:
    """Small values every dtype holds exactly (so sums are exact in float16 too)."""
    base = (np.arange(count) % 3 + rank).astype(np.int64)
    try:
        return (base % 2).astype(dtype) if np.dtype(dtype).kind == "b" else base.astype(dtype)
    except (TypeError, ValueError):  # numpy cannot make such values from integers (void): any content will do
        return np.zeros(count, dtype=dtype)


def _buffer(values: np.ndarray, layout: str) -> np.ndarray:
    """A writable array holding `values` (1-D) as a plain, transposed or strided view."""
    if layout == "transposed":
        out = np.zeros((1, values.size), dtype=values.dtype).T
        out[:, 0] = values
        return out
    if layout == "strided":
        base = np.zeros(values.size * 2, dtype=values.dtype)
        view = base[::2]
        view[...] = values
        return view
    return values.copy()


def _reduce(op: str, rows: list[np.ndarray]) -> np.ndarray:
    out = rows[0].copy()
    for r in rows[1:]:
        if out.dtype.kind == "b":
            out = (out | r) if op in ("SUM", "MAX") else (out & r)
        else:
            out = {"SUM": np.add, "MAX": np.maximum, "MIN": np.minimum}[op](out, r).astype(out.dtype)
    return out


def _finish(work, mode: str) -> None:
    if work is None:
        return
    if mode == "poll":
        while not work.is_completed():
            pass
        if work.exception() is not None:
            raise work.exception()
    else:
        work.wait()


def rank_program(rank: int, prog: dict, wrong: list) -> str:
    """Run prog's steps on this rank; record any value that is not the expected one in `wrong`."""
    n, fault = prog["n"], prog["fault"]
    mine = fault if fault and fault["rank"] == rank else None
    for i, s in enumerate(prog["steps"]):
        f = mine["kind"] if mine and mine["step"] == i else None
        if f == "exit":
            return "left early"
        if f == "raise":
            raise ValueError(f"rank {rank} fails on purpose at step {i}")
        if f == "skip":
            continue
        dtype = np.dtype(s["dtype"])
        if f == "dtype":
            dtype = np.dtype("float64" if dtype != np.float64 else "int32")
        count = s["count"] + (1 if f == "shape" else 0)
        kind, mode, op = s["kind"], s["mode"], s["op"]
        size_only = s["size_only"] != (f == "size_only")
        async_op = mode != "sync"

        def data(r=rank, c=count):
            if size_only:
                return simcomm.size_only(c if kind != "all_to_all_single" else c * n,
                                         dtype=dtype if dtype.kind in "biufc" and dtype.isnative else "float32")
            t = _buffer(_values(r, c, dtype), s["layout"])
            if f == "readonly":
                t.flags.writeable = False
            return t

        def check(got, expected, what):
            """expected: a function giving the values (only computed for data tensors)."""
            if size_only:
                return
            want = np.asarray(expected()).reshape(-1)
            if not np.array_equal(np.asarray(got).reshape(-1), want):
                wrong.append((rank, i, what, np.asarray(got).tolist(), want.tolist()))

        if kind == "all_reduce":
            t = data()
            _finish(dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=async_op), mode)
            check(t, lambda: _reduce(op, [_values(r, count, dtype) for r in range(n)]), kind)
        elif kind == "broadcast":
            t = data()
            _finish(dist.broadcast(t, src=s["root"], async_op=async_op), mode)
            check(t, lambda: _values(s["root"], count, dtype), kind)
        elif kind == "all_gather_into_tensor":
            out = simcomm.size_only(n * count, dtype=data().torch_dtype) if size_only else \
                _buffer(np.zeros(n * count, dtype=dtype), s["layout"])
            _finish(dist.all_gather_into_tensor(out, data(), async_op=async_op), mode)
            check(out, lambda: np.concatenate([_values(r, count, dtype) for r in range(n)]), kind)
        elif kind == "reduce_scatter_tensor":
            inp = np.concatenate([_values(rank, count, dtype)] * n) if not size_only else \
                simcomm.size_only(n * count, dtype=data().torch_dtype)
            out = data()
            _finish(dist.reduce_scatter_tensor(out, inp, async_op=async_op), mode)
            check(out, lambda: _reduce("SUM", [_values(r, count, dtype) for r in range(n)]), kind)
        elif kind == "all_to_all_single":
            inp = data(c=count * n) if size_only else _values(rank, count * n, dtype)
            out = data(c=count * n) if size_only else _buffer(np.zeros(count * n, dtype=dtype), s["layout"])
            if f == "readonly" and not size_only:
                out.flags.writeable = False
            _finish(dist.all_to_all_single(out, inp, async_op=async_op), mode)
            expected = np.concatenate([_values(r, count * n, dtype)[rank * count:(rank + 1) * count]
                                       for r in range(n)])
            check(out, lambda: expected, kind)
        elif kind == "ring":
            send, recv = data(), data(r=-1)
            if not size_only and recv.flags.writeable:
                recv[...] = np.zeros((), dtype=recv.dtype)
            right, left = (rank + 1) % n, (rank - 1) % n
            if mode == "sync" and n > 1:
                if rank % 2 == 0:
                    dist.send(send, dst=right)
                    dist.recv(recv, src=left)
                else:
                    dist.recv(recv, src=left)
                    dist.send(send, dst=right)
            else:
                works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, right),
                                                dist.P2POp(dist.irecv, recv, left)])
                for w in works:
                    _finish(w, mode)
            check(recv, lambda: _values(left, count, dtype), kind)
        elif kind == "group_all_reduce":
            members = list(range(0, n, 2))
            g = dist.new_group(members)
            if rank in members:
                t = data()
                _finish(dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g, async_op=async_op), mode)
                check(t, lambda: _reduce(op, [_values(r, count, dtype) for r in members]), kind)
        elif kind == "barrier":
            _finish(dist.barrier(async_op=async_op), mode)
        elif kind == "objects":
            got = [None] * n
            dist.all_gather_object(got, {"rank": rank, "step": i})
            if got != [{"rank": r, "step": i} for r in range(n)]:
                wrong.append((rank, i, kind, got, None))
        else:
            clock.sleep(1e-6 * (rank + 1))
            clock.compute(flops=1e6 * count)
    return "done"


def run_program(prog: dict) -> str:
    """'correct', or the kind of clean error; fails the test on a hang, a wrong value or an unnamed error."""
    wrong: list = []
    box: dict = {}

    def target():
        try:
            box["result"] = simcomm.spawn(rank_program, args=(prog, wrong), nprocs=prog["n"],
                                          cluster=prog["cluster"])
        except BaseException as exc:  # noqa: BLE001 - judged below, on the test's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(LIMIT_S)
    assert not t.is_alive(), f"the program did not end within {LIMIT_S} s: {prog}"
    error = box.get("error")
    if error is None:
        assert not wrong, f"wrong results {wrong[:3]} for {prog}"
        return "correct"
    assert isinstance(error, simcomm.SimcommError), f"{type(error).__name__}: {error} for {prog}"
    assert re.search(r"\brank \d+\b", str(error)), f"the error names no rank: {error} for {prog}"
    if isinstance(error, simcomm.RankFailed):  # only the faulty rank's deliberate failure may escape
        assert prog["fault"] and prog["fault"]["kind"] == "raise" and error.rank == prog["fault"]["rank"], error
    assert not wrong, f"wrong results {wrong[:3]} before the error {error} for {prog}"
    return type(error).__name__


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@settings(max_examples=200, **COMMON)
@given(programs())
def test_adversarial_rank_programs_end_correctly_or_name_a_rank(prog):
    OUTCOMES[run_program(prog)] += 1


def test_the_suite_reaches_correct_results_and_errors():
    """The laws above hold vacuously if every program errs: the CI sample must exercise both outcomes."""
    if sum(OUTCOMES.values()) < 200:  # run alone (-k), the sample is not there
        test_adversarial_rank_programs_end_correctly_or_name_a_rank()
    print(f"\nadversarial programs: {sum(OUTCOMES.values())}, outcomes {dict(OUTCOMES)}")
    assert OUTCOMES["correct"] >= 40 and sum(OUTCOMES.values()) - OUTCOMES["correct"] >= 40


FUZZ: Counter = Counter()


@settings(max_examples=2_000, **COMMON)
@given(programs())
def _fuzz(prog):
    FUZZ[run_program(prog)] += 1


@pytest.mark.fuzz
def test_fuzz_adversarial_rank_programs():
    """2,000 programs; deselected by default, run with `pytest -m fuzz`."""
    _fuzz()
    print(f"\nadversarial programs: {sum(FUZZ.values())}, outcomes {dict(FUZZ)}")
    assert sum(FUZZ.values()) >= 2_000
