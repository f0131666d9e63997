"""Adversarial Session call sequences (issue 21): hypothesis draws a few calls (collectives, sends, compute, memory
operations, timeouts, all_of), each with arguments that are mostly right and sometimes hostile (negative,
fractional, huge, NaN or empty amounts, lists where arrays go, arrays of the wrong shape or dtype, unknown names,
`after=` holding what is not an operation or another Session's), chained through `after=`.

Laws (tests/adversarial.py): every call returns an Op or raises a SimcommError naming what it refused, before
anything starts; the run ends within a watchdog's time; every recorded figure (start, end, time, algbw, busbw, each
activity's span and bytes) is finite and not negative; the same sequence gives the same outcomes and records.

CI runs 150 sequences, the same ones every run; `pytest -m fuzz tests/test_session_adversarial.py` runs 3,000 new
ones.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial import bounded, figures
from simcomm.errors import SimcommError
from simcomm.session import Op, Session

RANKS = 16  # two hgx-h100 nodes: groups inside and across nodes
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter", "all_to_all",
         "barrier", "sendrecv", "allreduce", "zzz"]
HOSTILE_AMOUNTS = [-5, -1e-9, 2.7, 10 ** 30, 10 ** 400, float("nan"), float("inf"), "abc", "2PiB", None, [1, 2, 3], [],
                   [[1]], True]
OTHER = Session("hgx-h100")
OUTCOMES: Counter = Counter()


def hostile(draw, good, bad, one_in: int = 12):
    """A good value, or (one time in `one_in`) a hostile one."""
    return draw(st.sampled_from(bad)) if draw(st.sampled_from(range(one_in))) == one_in - 1 else draw(good)


@st.composite
def groups(draw):
    n = draw(st.integers(1, RANKS))
    return draw(st.permutations(range(RANKS)))[:n]


@st.composite
def call(draw, index: int):
    what = draw(st.sampled_from(["collective"] * 4 + ["send", "compute", "memory_op", "timeout", "all_of"]))
    after = hostile(draw, st.lists(st.integers(0, max(0, index - 1)), max_size=2).map(lambda xs: ("ops", xs)),
                    [("raw", [5]), ("raw", 5), ("raw", "x"), ("other", None)])
    c = {"what": what, "after": after if index else ("ops", [])}
    if what == "collective":
        kind = hostile(draw, st.sampled_from(KINDS), ["zzz", 5, None])
        group = hostile(draw, groups(), [[], [0, 0], [-1], [99], [0.5], "x", None, 3])
        n = len(group) if isinstance(group, list) else 1
        how = draw(st.sampled_from(["size", "count"]))
        amount = hostile(draw, st.sampled_from([0, 4, 1024, 65536, 1 << 20, "256KiB", "8MiB"]) if how == "size"
                         else st.integers(0, 4096), HOSTILE_AMOUNTS)
        dtype = hostile(draw, st.sampled_from(["float32", "bfloat16", "float16", "int64", "f8e4m3", np.float32]),
                        ["x", 5, np.dtype("V8"), "float128"])
        c.update(kind=kind, ranks=group, how=how, amount=amount, dtype=dtype,
                 op=hostile(draw, st.sampled_from(["sum", "max", "min", "avg", "prod"]), ["band", "zzz", 7]),
                 root=hostile(draw, st.integers(0, max(0, n - 1)), [-1, 99, 1.5, True]),
                 data=hostile(draw, st.sampled_from(["none", "none", "good"]), ["list", "shape", "dtype"]),
                 splits=hostile(draw, st.sampled_from(["none", "good"] if kind == "all_to_all" else ["none"]),
                                ["ragged", "negative", "good"]),
                 algorithm=hostile(draw, st.sampled_from([None, None, "ring", "tree"]), ["zzz", "nvls"], 25),
                 tags=hostile(draw, st.sampled_from([None, {"stage": 1}, {"axis": "dp", "layer": 3}]), [["x"], 5],
                              25))
    elif what == "send":
        src = hostile(draw, groups(), [[], [-1], "x"])
        dst = draw(st.permutations(range(RANKS)))[:len(src) if isinstance(src, list) else 1]
        c.update(src=src, dst=hostile(draw, st.just(dst), [[0], [99]], 25),
                 nbytes=hostile(draw, st.sampled_from([0, 1, 4096, "1MiB"]), HOSTILE_AMOUNTS + [[1, 2]]))
    elif what in ("compute", "memory_op"):
        c.update(ranks=hostile(draw, groups(), [[], [99], "x"]),
                 amount=hostile(draw, st.sampled_from([0, 1e-6, 1e9, 1e12, "1GB"]), HOSTILE_AMOUNTS),
                 seconds=hostile(draw, st.sampled_from([0.0, 1e-6, 1e-3]), HOSTILE_AMOUNTS, 25),
                 rate=hostile(draw, st.sampled_from([None, None, 1e12]), [0, -1, float("nan")], 25))
    elif what == "timeout":
        c.update(delay=hostile(draw, st.sampled_from([0, 1e-6, 1e-3]), HOSTILE_AMOUNTS))
    return c


@st.composite
def sequences(draw):
    n = draw(st.integers(1, 6))
    return [draw(call(i)) for i in range(n)]


def _data(c, np_dtype):
    n = len(c["ranks"])
    count = c["amount"] if c["how"] == "count" and isinstance(c["amount"], int) and not isinstance(
        c["amount"], bool) and 0 <= c["amount"] <= 4096 else 4
    width = n * count if c["kind"] in ("all_gather", "reduce_scatter", "gather", "scatter", "all_to_all") else count
    if c["data"] == "list":
        return [[1] * width] * n
    if c["data"] == "shape":
        return np.ones((n, width + 1), np_dtype)
    if c["data"] == "dtype":
        return np.ones((n, width), np.float64 if np_dtype != np.float64 else np.float32)
    return np.arange(n * width, dtype=np_dtype).reshape(n, width) % 7


def _splits(c):
    n = len(c["ranks"]) if isinstance(c["ranks"], list) else 1
    return {"none": None, "good": np.arange(n * n).reshape(n, n) % 3, "ragged": [[1, 2], [3]],
            "negative": -np.ones((n, n), dtype=int)}[c["splits"]]


def execute(seq) -> tuple[list, list, float]:
    """Run the calls on a fresh Session: (what each call did, the records, the end time)."""
    s = Session("hgx-h100", nodes=2)
    ops, outcomes = [], []
    for c in seq:
        tag, refs = c["after"]
        after = [ops[i] for i in refs if i < len(ops)] if tag == "ops" else \
            [OTHER.timeout(1)] if tag == "other" else refs
        try:
            ops.append(_call(s, c, after))
            outcomes.append("ok")
        except SimcommError as exc:
            assert str(exc) and len(str(exc)) < 2000, exc
            outcomes.append(f"{type(exc).__name__}: {exc}")
    assert s.now == 0, "a call moved time"
    bounded(lambda: s.run(), 30, seq)
    records = [(a.kind, a.rank, a.start, a.end, a.nbytes) for a in s.sim.recorder.activities()]
    for a in s.sim.recorder.activities():
        figures([a.start, a.end, a.end - a.start, a.nbytes], f"activity {a.kind}")
    for op in ops:
        if not isinstance(op, Op):  # a timeout or all_of
            continue
        figures([op.start, op.end], f"{op!r}")
        if op.record is not None:
            r = op.record
            figures([r.time, r.algbw, r.busbw, r.size, r.count, r.start, r.end], f"record {r.collective}")
            records.append((r.collective, r.algorithm, r.protocol, r.time, r.busbw))
    return outcomes, records, s.now


def _call(s: Session, c: dict, after):
    what = c["what"]
    if what == "collective":
        np_dtype = np.dtype(c["dtype"]) if c["dtype"] in ("float32", "int64", "float16", np.float32) else None
        data = None if c["data"] == "none" or c["how"] == "size" or np_dtype is None or \
            not isinstance(c["ranks"], list) or not c["ranks"] else _data(c, np_dtype)
        kw = {"size": c["amount"]} if c["how"] == "size" else {"count": c["amount"]}
        return s.collective(c["kind"], c["ranks"], dtype=c["dtype"], op=c["op"], root=c["root"], data=data,
                            splits=_splits(c), algorithm=c["algorithm"], tags=c["tags"], after=after, **kw)
    if what == "send":
        return s.send(c["src"], c["dst"], c["nbytes"], after=after)
    if what == "compute":
        return s.compute(c["ranks"], flops=c["amount"], seconds=c["seconds"], rate=c["rate"], after=after)
    if what == "memory_op":
        return s.memory_op(c["ranks"], c["amount"], after=after)
    if what == "timeout":
        return s.timeout(c["delay"])
    return s.all_of(after)


def check(seq) -> None:
    first = execute(seq)
    assert execute(seq) == first, "the same calls gave other outcomes or records"
    OUTCOMES.update("ok" if o == "ok" else o.split(":")[0] for o in first[0])


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=150, derandomize=True, **COMMON)
@given(sequences())
def test_session_call_sequences_run_or_refuse_cleanly(seq):
    check(seq)


def test_the_sample_reaches_runs_and_refusals():
    """The laws hold vacuously if every call is refused: the CI sample must run many and refuse many."""
    if sum(OUTCOMES.values()) < 150:  # run alone (-k)
        test_session_call_sequences_run_or_refuse_cleanly()
    print(f"\nSession calls: {dict(OUTCOMES)}")
    assert OUTCOMES["ok"] >= 150 and sum(OUTCOMES.values()) - OUTCOMES["ok"] >= 60


FUZZ: Counter = Counter()


@settings(max_examples=3_000, derandomize=False, database=None, **COMMON)
@given(sequences())
def _fuzz(seq):
    check(seq)
    FUZZ["sequences"] += 1


@pytest.mark.fuzz
def test_fuzz_session_call_sequences():
    """3,000 new sequences each run; deselected by default, run with `pytest -m fuzz`."""
    _fuzz()
    assert FUZZ["sequences"] >= 3_000
