"""Adversarial rank programs (issue 13): random mixes of collectives (the list forms too), point-to-point, groups,
object calls, numpy arrays of every numpy dtype (torch's and the rest) and torch CPU tensors of torch's dtypes
(bfloat16 included), views and strides, size-only tensors (simcomm's and torch meta tensors), every reduce op a
program can pass (SUM, MAX, MIN, AVG, PRODUCT, PREMUL_SUM), async work finished by wait(), wait(timeout) or
polling, early exits, exceptions and one-rank mistakes.

Laws: every program ends within a watchdog's time with the correct result on every rank or with a SimcommError
that names a rank. A program without a planted mistake must end correctly unless one of its calls is one torch
refuses (the oracle `refused` says which: a dtype the backend cannot carry, an op it cannot apply, data simcomm
cannot reduce); then it must end with an error. Expected values come from numpy in the tensors' own dtype
(`_reduce`), with each backend's AVG (NCCL premultiplies by 1/n) and each rank's own PREMUL_SUM factor.

CI runs `tour()` (17 programs that together cover every step, op, library and way of waiting) and 300 random
programs, the same ones every run; `pytest -m fuzz tests/distributed/test_adversarial.py` runs 2,000 new ones each
time (not derandomized).
"""
from __future__ import annotations

import datetime
import re
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import simcomm
import simcomm.distributed as dist
from adversarial import bounded
from simcomm import clock

LIMIT_S = 30.0
NUMPY_DTYPES = sorted(set(np.typecodes["All"])) + ["U1", "S2", "M8[s]", "m8[ms]", "V8", ">f4", "<i4"]
TORCH_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex64", "complex128"]
USUAL = ["float32", "float64", "float16", "int64", "int32", "uint8", "bool", "complex64"]
REDUCING = ["all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "group_all_reduce"]
STEPS = REDUCING + ["broadcast", "all_gather", "all_gather_into_tensor", "gather", "scatter", "all_to_all",
                    "all_to_all_single", "ring", "barrier", "objects", "time"]
OPS = ["SUM", "MAX", "MIN", "AVG", "PRODUCT", "PREMUL_SUM"]
MODES = ["sync", "wait", "poll", "timeout", "short_timeout"]
FAULTS = ["exit", "raise", "shape", "dtype", "size_only", "readonly", "skip"]
OUTCOMES: Counter = Counter()
# What torch 2.13's gloo cannot carry in any collective ("Invalid scalar type", measured; gather: no complex).
GLOO_NO_DTYPES = {"int16", "uint16", "uint32", "uint64"}


@st.composite
def programs(draw):
    n = draw(st.sampled_from([2, 3, 4]))
    steps = draw(st.lists(st.fixed_dictionaries({
        "kind": st.sampled_from(STEPS), "lib": st.sampled_from(["numpy", "numpy", "torch"]),
        "dtype": st.sampled_from(NUMPY_DTYPES + USUAL * 4),  # mostly dtypes torch has, so most calls can run
        "torch_dtype": st.sampled_from(TORCH_DTYPES + USUAL * 2 + ["bfloat16"] * 3),
        "op": st.sampled_from(OPS), "layout": st.sampled_from(["plain", "transposed", "strided"]),
        "mode": st.sampled_from(MODES), "root": st.integers(0, n - 1),
        "size_only": st.booleans(), "count": st.integers(1, 3)}), min_size=1, max_size=4))
    fault = draw(st.one_of(st.none(), st.none(), st.fixed_dictionaries({
        "kind": st.sampled_from(FAULTS), "rank": st.integers(0, n - 1), "step": st.integers(0, len(steps) - 1)})))
    return {"n": n, "cluster": draw(st.sampled_from(["hgx-h100", "cpu-host"])), "steps": steps, "fault": fault}


# ---- the oracle ------------------------------------------------------------------------------------------------
def torch_name(s: dict, size_only: bool) -> str | None:
    """The torch dtype a step's tensors carry; None for a numpy dtype torch has no twin for (a data tensor of it
    is refused; a size-only one is made float32)."""
    if s["lib"] == "torch":
        return s["torch_dtype"]
    d = np.dtype(s["dtype"])
    name = d.name if d.isnative and d.fields is None and d.kind in "biufc" else None
    if name not in TORCH_DTYPES:
        return "float32" if size_only else None
    return name


def refused(s: dict, backend: str) -> bool:
    """Whether torch (or simcomm, for data it cannot reduce) refuses step s on `backend` ("gloo" or "nccl")."""
    kind, size_only = s["kind"], s["size_only"]
    if kind in ("barrier", "objects", "time"):
        return False
    name = torch_name(s, size_only)
    if name is None:
        return True
    if kind == "ring":  # send/recv carry any dtype, contiguous torch tensors only (one element always is)
        return s["lib"] == "torch" and s["layout"] == "strided" and not size_only and s["count"] > 1
    if backend == "gloo" and (name in GLOO_NO_DTYPES or (kind == "gather" and name.startswith("complex"))):
        return True
    if kind not in REDUCING:
        return False
    op, k = s["op"], _kind(name)
    if name == "bfloat16" and not size_only:
        return True  # simcomm cannot reduce bfloat16 data (numpy has no bfloat16)
    if k == "c" and op in ("MAX", "MIN", "PRODUCT"):
        return True
    if backend == "nccl":
        return (op == "AVG" and k == "b") or (op == "PREMUL_SUM" and k in "biu")
    return op == "PREMUL_SUM" or (op == "AVG" and k in "biu")


def _kind(name: str) -> str:
    return "b" if name == "bool" else "c" if name.startswith("complex") else \
        "f" if name.startswith(("float", "bfloat")) else "u" if name.startswith("uint") else "i"


def _value_dtype(s: dict, dtype) -> np.dtype:
    """The numpy dtype holding a step's values (bfloat16's exactly, in float32)."""
    if s["lib"] == "torch":
        return np.dtype("float32" if dtype == "bfloat16" else dtype)
    return np.dtype(dtype)


def _values(rank: int, count: int, dtype: np.dtype) -> np.ndarray:
    """Small values every dtype holds exactly (so sums and products are exact in float16 and bfloat16 too)."""
    base = (np.arange(count) % 3 + rank).astype(np.int64)
    try:
        return (base % 2).astype(dtype) if dtype.kind == "b" else base.astype(dtype)
    except (TypeError, ValueError):  # numpy cannot make such values from integers (void): any content will do
        return np.zeros(count, dtype=dtype)


def _factor(rank: int) -> float:
    """Each rank's PREMUL_SUM factor."""
    return 0.5 * (rank + 1)


def _reduce(op: str, rows: list[np.ndarray], backend: str, ranks=None) -> np.ndarray:
    """What torch gives for op over the rows of `ranks` (default 0, 1, ...), in their dtype (integers wrap around
    as on a device)."""
    n, dt, ranks = len(rows), rows[0].dtype, ranks or range(len(rows))
    if dt.kind == "b":
        either = op in ("SUM", "MAX")  # (AVG and PREMUL_SUM of booleans are refused)
        return np.logical_or.reduce(rows) if either else np.logical_and.reduce(rows)
    if op == "PREMUL_SUM":
        rows = [(r * dt.type(_factor(i))).astype(dt) for i, r in zip(ranks, rows)]
    elif op == "AVG" and backend == "nccl" and dt.kind in "fc":  # NCCL premultiplies each input by 1/n
        rows = [(r * dt.type(1.0 / n)).astype(dt) for r in rows]
    ufunc = {"PRODUCT": np.multiply, "MAX": np.maximum, "MIN": np.minimum}.get(op, np.add)
    out = rows[0].copy()
    for r in rows[1:]:
        out = ufunc(out, r).astype(dt)
    if op == "AVG" and dt.kind in "iu":  # integer AVG (NCCL only): the sum divided by n, truncated toward zero
        return np.where(out < 0, -(np.abs(out) // n), out // n).astype(dt)
    if op == "AVG" and backend == "gloo":
        return (out / dt.type(n)).astype(dt)
    return out


# ---- tensors ---------------------------------------------------------------------------------------------------
def _torch_dtype(name: str):
    return getattr(torch, name)


def _tensor(values: np.ndarray, s: dict, dtype, layout: str):
    """A writable tensor (numpy array, or torch tensor of torch dtype `dtype`) holding `values` (1-D) as a plain,
    transposed or strided view."""
    if s["lib"] == "torch":
        src = torch.from_numpy(values.copy()).to(_torch_dtype(dtype))
        if layout == "transposed":
            out = torch.zeros((1, values.size), dtype=src.dtype).t()
            out[:, 0] = src
        elif layout == "strided":
            out = torch.zeros(values.size * 2, dtype=src.dtype)[::2]
            out.copy_(src)
        else:
            out = src
        return out
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


def _size_only(count: int, s: dict, dtype):
    """A tensor without data: simcomm.size_only, or a torch meta tensor."""
    if s["lib"] == "torch":
        return torch.empty(count, dtype=_torch_dtype(dtype), device="meta")
    return simcomm.size_only(count, dtype=dtype)


def _read(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy().reshape(-1)
    return np.asarray(t).reshape(-1)


def _finish(work, mode: str) -> None:
    if work is None:
        return
    if mode == "poll":
        while not work.is_completed():
            pass
        if work.exception() is not None:
            raise work.exception()
    elif mode == "timeout":
        work.wait(timeout=datetime.timedelta(seconds=60))
    elif mode == "short_timeout":
        work.wait(timeout=1e-12)
    else:
        work.wait()


def rank_program(rank: int, prog: dict, wrong: list) -> str:
    """Run prog's steps on this rank; record any value that is not the expected one in `wrong`."""
    n, fault = prog["n"], prog["fault"]
    backend = "gloo" if prog["cluster"] == "cpu-host" else "nccl"
    mine = fault if fault and fault["rank"] == rank else None
    for i, s in enumerate(prog["steps"]):
        f = mine["kind"] if mine and mine["step"] == i else None
        if f == "exit":
            return "left early"
        if f == "raise":
            raise ValueError(f"rank {rank} fails on purpose at step {i}")
        if f == "skip":
            continue
        size_only = s["size_only"] != (f == "size_only")
        if s["lib"] == "torch":
            dtype = s["torch_dtype"]
        else:  # a size-only tensor of a dtype torch lacks is made float32 (see torch_name)
            dtype = np.dtype(s["dtype"] if torch_name(s, size_only) != "float32" else "float32")
        if f == "dtype":
            dtype = ("float64" if dtype != "float64" else "int32") if s["lib"] == "torch" else \
                np.dtype("float64" if dtype != np.float64 else "int32")
        vdt = _value_dtype(s, dtype)
        count = s["count"] + (1 if f == "shape" else 0)
        kind, mode, op, root, layout = s["kind"], s["mode"], s["op"], s["root"], s["layout"]
        async_op = mode != "sync"

        def tensor(v, c=None):
            """A tensor of c elements holding _values(v) (or zeros for v None); size-only when the step is."""
            c = count if c is None else c
            if size_only:
                return _size_only(c, s, dtype)
            t = _tensor(np.zeros(c, dtype=vdt) if v is None else _values(v, c, vdt), s, dtype, layout)
            if f == "readonly" and isinstance(t, np.ndarray):
                t.flags.writeable = False
            return t

        def check(got, expected, what):
            """expected: a function giving the values (only computed for data tensors)."""
            if size_only:
                return
            want = np.asarray(expected()).reshape(-1)
            g = _read(got)
            same = np.allclose(g, want, rtol=4e-3, atol=4e-3) if op == "AVG" and vdt.kind in "fc" and \
                kind in REDUCING else np.array_equal(g, want)
            if not same:
                wrong.append((rank, i, what, g.tolist(), want.tolist()))

        reduce_op = dist._make_nccl_premul_sum(_factor(rank)) if op == "PREMUL_SUM" else getattr(dist.ReduceOp, op)
        rows = [_values(r, count, vdt) for r in range(n)]
        if kind == "all_reduce":
            t = tensor(rank)
            _finish(dist.all_reduce(t, op=reduce_op, async_op=async_op), mode)
            check(t, lambda: _reduce(op, rows, backend), kind)
        elif kind == "reduce":
            t = tensor(rank)
            _finish(dist.reduce(t, dst=root, op=reduce_op, async_op=async_op), mode)
            if rank == root:
                check(t, lambda: _reduce(op, rows, backend), kind)
            elif backend == "nccl":  # gloo leaves its ring's partial results in the others
                check(t, lambda: rows[rank], kind)
        elif kind == "reduce_scatter":
            ins = [tensor(rank + j) for j in range(n)]
            out = tensor(None)
            _finish(dist.reduce_scatter(out, ins, op=reduce_op, async_op=async_op), mode)
            check(out, lambda: _reduce(op, [_values(r + rank, count, vdt) for r in range(n)], backend), kind)
        elif kind == "reduce_scatter_tensor":
            inp = _size_only(n * count, s, dtype) if size_only else \
                _tensor(np.concatenate([_values(rank, count, vdt)] * n), s, dtype, "plain")
            out = tensor(None)
            _finish(dist.reduce_scatter_tensor(out, inp, op=reduce_op, async_op=async_op), mode)
            check(out, lambda: _reduce(op, rows, backend), kind)
        elif kind == "group_all_reduce":
            members = list(range(0, n, 2))
            g = dist.new_group(members)
            if rank in members:
                t = tensor(rank)
                _finish(dist.all_reduce(t, op=reduce_op, group=g, async_op=async_op), mode)
                check(t, lambda: _reduce(op, [rows[r] for r in members], backend, members), kind)
        elif kind == "broadcast":
            t = tensor(rank)
            _finish(dist.broadcast(t, src=root, async_op=async_op), mode)
            check(t, lambda: rows[root], kind)
        elif kind == "all_gather":
            outs = [tensor(None) for _ in range(n)]
            _finish(dist.all_gather(outs, tensor(rank), async_op=async_op), mode)
            for j, o in enumerate(outs):
                check(o, lambda j=j: rows[j], kind)
        elif kind == "all_gather_into_tensor":
            out = tensor(None, n * count)
            _finish(dist.all_gather_into_tensor(out, tensor(rank), async_op=async_op), mode)
            check(out, lambda: np.concatenate(rows), kind)
        elif kind == "gather":
            outs = [tensor(None) for _ in range(n)] if rank == root else None
            _finish(dist.gather(tensor(rank), outs, dst=root, async_op=async_op), mode)
            for j, o in enumerate(outs or []):
                check(o, lambda j=j: rows[j], kind)
        elif kind == "scatter":
            ins = [tensor(root + j + 1) for j in range(n)] if rank == root else None
            out = tensor(None)
            _finish(dist.scatter(out, ins, src=root, async_op=async_op), mode)
            check(out, lambda: _values(root + rank + 1, count, vdt), kind)
        elif kind == "all_to_all":
            ins, outs = [tensor(rank + 2 * j) for j in range(n)], [tensor(None) for _ in range(n)]
            _finish(dist.all_to_all(outs, ins, async_op=async_op), mode)
            for j, o in enumerate(outs):
                check(o, lambda j=j: _values(j + 2 * rank, count, vdt), kind)
        elif kind == "all_to_all_single":
            inp = _size_only(count * n, s, dtype) if size_only else \
                _tensor(_values(rank, count * n, vdt), s, dtype, "plain")
            out = tensor(None, count * n)
            _finish(dist.all_to_all_single(out, inp, async_op=async_op), mode)
            check(out, lambda: np.concatenate([_values(r, count * n, vdt)[rank * count:(rank + 1) * count]
                                               for r in range(n)]), kind)
        elif kind == "ring":
            send, recv = tensor(rank), tensor(None)
            right, left = (rank + 1) % n, (rank - 1) % n
            if mode == "sync":
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
            check(recv, lambda: rows[left], kind)
        elif kind == "barrier":
            _finish(dist.barrier(async_op=async_op), mode)
        elif kind == "objects":
            got = [None] * n
            dist.all_gather_object(got, {"rank": rank, "step": i})
            skipped = fault and fault["kind"] == "skip"  # a rank that skips a call meets the others' next one
            if got != [{"rank": r, "step": i} for r in range(n)] and not skipped:  # (as on torch: same sizes)
                wrong.append((rank, i, kind, got, None))
        else:
            clock.sleep(1e-6 * (rank + 1))
            clock.compute(flops=1e6 * count)
    return "done"


def expected_outcome(prog: dict) -> str:
    """'correct', 'error' or 'any' for a program: 'any' with a planted mistake; without one, 'error' if a step
    is one torch refuses (before any wait with a short timeout), 'any' if such a wait may time out first."""
    if prog["fault"]:
        return "any"
    backend = "gloo" if prog["cluster"] == "cpu-host" else "nccl"
    for s in prog["steps"]:
        if refused(s, backend):
            return "error"
        if s["mode"] == "short_timeout" and s["kind"] not in ("objects", "time"):
            return "any"
    return "correct"


def run_program(prog: dict) -> str:
    """'correct', or the kind of clean error; fails the test on a hang, a wrong value or an unnamed error."""
    wrong: list = []
    try:
        bounded(lambda: simcomm.spawn(rank_program, args=(prog, wrong), nprocs=prog["n"], cluster=prog["cluster"]),
                LIMIT_S, f"the program {prog}")
        error = None
    except Exception as exc:  # noqa: BLE001 - judged below (a hang is an AssertionError that fails it)
        error = exc
    expected = expected_outcome(prog)
    if error is None:
        assert not wrong, f"wrong results {wrong[:3]} for {prog}"
        assert expected != "error", f"simcomm ran a call torch refuses: {prog}"
        return "correct"
    assert isinstance(error, simcomm.SimcommError), f"{type(error).__name__}: {error} for {prog}"
    assert re.search(r"\brank \d+\b", str(error)), f"the error names no rank: {error} for {prog}"
    assert expected != "correct", f"a program torch runs failed: {type(error).__name__}: {error} for {prog}"
    if isinstance(error, simcomm.RankFailed):  # only the faulty rank's deliberate failure may escape
        assert prog["fault"] and prog["fault"]["kind"] == "raise" and error.rank == prog["fault"]["rank"], error
    assert not wrong, f"wrong results {wrong[:3]} before the error {error} for {prog}"
    return type(error).__name__


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))
CI_CASES = 300


def tour() -> list[dict]:
    """Programs that together run, with data and on both backends, every kind of step, every op the backend takes,
    numpy arrays and torch tensors (bfloat16 where simcomm can carry it), every layout and every way of waiting:
    run before the random sample, so CI covers each whatever the sample draws."""
    progs = []
    modes, layouts = ["sync", "wait", "poll", "timeout"], ["plain", "transposed", "strided"]
    for cluster, n, ops in (("hgx-h100", 3, OPS), ("cpu-host", 4, [o for o in OPS if o != "PREMUL_SUM"])):
        steps = [(kind, op) for kind in REDUCING for op in ops] + [(k, "SUM") for k in STEPS if k not in REDUCING]
        steps += [(k, "SUM") for k in STEPS if k not in REDUCING]  # once as numpy, once as torch
        made = []
        for i, (kind, op) in enumerate(steps):
            lib = "torch" if i % 2 else "numpy"
            dtype = ("float16" if lib == "torch" else "float32") if kind in REDUCING else \
                ("bfloat16" if lib == "torch" else "float64")
            layout = layouts[i % 3] if (kind, lib) != ("ring", "torch") else "plain"
            made.append({"kind": kind, "lib": lib, "dtype": dtype, "torch_dtype": dtype, "op": op, "layout": layout,
                         "mode": modes[i % 4], "root": i % n, "size_only": False, "count": 1 + i % 3})
        progs += [{"n": n, "cluster": cluster, "steps": made[i:i + 6], "fault": None} for i in range(0, len(made), 6)]
    return progs


def covered(prog: dict) -> set:
    """What a program exercised with data: its steps' kinds, ops (of reductions), libraries, torch dtypes and
    ways of finishing async work."""
    out = set()
    for s in prog["steps"]:
        if not s["size_only"]:
            out |= {s["kind"], s["lib"], s["mode"]} | ({s["op"]} if s["kind"] in REDUCING else set()) | \
                ({s["torch_dtype"]} if s["lib"] == "torch" else set())
    return out


CORRECT: set = set()  # what the CI sample's correct programs exercised


@settings(max_examples=CI_CASES, derandomize=True, **COMMON)
@given(programs())
def test_adversarial_rank_programs_end_correctly_or_name_a_rank(prog):
    outcome = run_program(prog)
    OUTCOMES[outcome] += 1
    if outcome == "correct":
        CORRECT.update(covered(prog))


for _prog in tour():
    test_adversarial_rank_programs_end_correctly_or_name_a_rank = example(_prog)(
        test_adversarial_rank_programs_end_correctly_or_name_a_rank)


def test_the_suite_reaches_correct_results_and_errors():
    """The laws above hold vacuously if every program errs: the CI sample must exercise both outcomes, and its
    correct results (the tour's among them) must cover every kind of step, every op, torch tensors (bfloat16 too)
    and every way of waiting (but a 1e-12 s timeout, which rarely lets a call finish)."""
    if sum(OUTCOMES.values()) < CI_CASES:  # run alone (-k), the sample is not there
        test_adversarial_rank_programs_end_correctly_or_name_a_rank()
    print(f"\nadversarial programs: {sum(OUTCOMES.values())}, outcomes {dict(OUTCOMES)}")
    assert OUTCOMES["correct"] >= 60 and sum(OUTCOMES.values()) - OUTCOMES["correct"] >= 60
    missing = (set(STEPS) | set(OPS) | set(MODES) | {"torch", "bfloat16"}) - {"short_timeout"} - CORRECT
    assert not missing, f"no correct program exercised {sorted(missing)} with data"


FUZZ: Counter = Counter()


@settings(max_examples=2_000, derandomize=False, database=None, **COMMON)  # new programs every run
@given(programs())
def _fuzz(prog):
    FUZZ[run_program(prog)] += 1


@pytest.mark.fuzz
def test_fuzz_adversarial_rank_programs():
    """2,000 programs, others each run; deselected by default, run with `pytest -m fuzz` (hypothesis prints a
    failing program in full, so a failure found once can be replayed)."""
    _fuzz()
    print(f"\nadversarial programs: {sum(FUZZ.values())}, outcomes {dict(FUZZ)}")
    assert sum(FUZZ.values()) >= 2_000
