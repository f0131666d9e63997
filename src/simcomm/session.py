"""The group-level Session: one simulation, and calls that run collectives, point-to-point transfers, compute and
memory operations over groups of ranks.

Every call starts its operation (now, or once the events in `after` have fired) and returns an `Op`: a simpy event
that fires when the operation completes, so a schedule can `yield` it, combine several with `session.all_of`, or
chain them with `after=`. Every operation is recorded with structured tags (stage, microbatch, layer, phase, axis,
... whatever the caller passes, plus what the operation was), which reports read directly.

    s = Session("hgx-h100", nodes=2)
    fwd = s.compute(range(8), seconds=1e-3, tags={"phase": "forward"})
    ar = s.collective("all_reduce", range(8), "256MiB", after=[fwd], tags={"axis": "dp"})
    s.run()
    print(ar.record.time, ar.record.busbw)

Identical uncontended collectives on identical groups reuse the engine's cached rate solves and replays, so a
schedule that repeats the same TP all-reduce thousands of times pays for one solve.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import simpy

from .algorithms import Buffers, Collective, ReduceOp, run_collective
from .algorithms.channels import p2p_channels
from .algorithms.reduce_ops import as_reduce_op
from .engine import NO_TAGS, SPREAD_MIX, Mix, Simulation
from .engine.compute import holding
from .errors import SimcommError
from .hardware import Cluster, build_cluster
from .units import parse_size
from .vocab import OP_NAMES, PER_RANK_SHARD, Bandwidth, canonical_dtype, canonical_kind, numpy_dtype, per_rank_count


@dataclass
class CollectiveRecord(Bandwidth):
    """What one collective did: nccl-tests' size S and count, the algorithm and protocol that ran, when."""

    collective: str
    ranks: int  # group size
    size: int  # nccl-tests' S in bytes
    count: int  # elements as nccl-tests counts them (the whole buffer for all_reduce, S / typesize otherwise)
    dtype: str
    op: str
    root: int
    algorithm: str
    protocol: str
    predicted: float | None  # seconds, the tuner's model
    start: float
    end: float
    tags: Mapping = field(default_factory=lambda: NO_TAGS, repr=False)
    channels: int = 0  # CTAs its kernel held on every GPU of the group

    @property
    def time(self) -> float:
        return self.end - self.start


class Op(simpy.Event):
    """A started operation: fires when it completes. `start`/`end` are simulated seconds (None until known);
    `record` holds a collective's CollectiveRecord; `buffers` a collective's data after it ran."""

    def __init__(self, env, kind: str, ranks: np.ndarray, tags: Mapping):
        super().__init__(env)
        self.kind = kind
        self.ranks = ranks
        self.tags = tags
        self.start: float | None = None
        self.end: float | None = None
        self.record: CollectiveRecord | None = None
        self.buffers: Buffers | None = None
        self.progress = None  # a compute op's: where in time each rank did its work (engine/progress.py)

    def _finish(self, value=None) -> None:
        self.end = self.env.now
        self.succeed(value)

    def __repr__(self) -> str:
        what = ", ".join(f"{k}={v}" for k, v in self.tags.items())
        return f"Op({self.kind}{', ' + what if what else ''}, {'done' if self.processed else 'pending'})"


def as_dtype(dtype) -> tuple[np.dtype, str]:
    """The numpy dtype a collective runs with and the name it is recorded under, for a vocabulary name or alias
    ('bfloat16', 'bf16', 'half', ...; see vocab.canonical_dtype) or a numpy dtype."""
    if isinstance(dtype, str):
        name = canonical_dtype(dtype)
        return np.dtype(numpy_dtype(name)), name
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise SimcommError(f"dtype: expected a dtype name or a numpy dtype, got {dtype!r}") from None
    return np_dtype, np_dtype.name


def _check_amount(name: str, value) -> np.ndarray:
    if isinstance(value, str):
        value = parse_size(value, name)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (OverflowError, TypeError, ValueError):  # 10**400, a word, an object
        raise SimcommError(f"{name} must be a finite non-negative number (or array of them), got {value!r}") \
            from None
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise SimcommError(f"{name} must be finite and non-negative, got {value!r}")
    return arr


class Session:
    """A group-level front end over one Simulation of `cluster` (a Cluster, or a preset name with `nodes`).

    algorithm / protocol force NCCL_ALGO / NCCL_PROTO for every collective (algorithm may be a dict per
    collective kind); numerics is the reduction order with real data, "nccl" (each algorithm's own) or "gloo"
    (gloo's ring, bitwise); detail is "flows" (record every flow) or "steps"; interference: compute and
    communication share each GPU's SMs (None: the cluster's tuning says; docs/model.md).
    """

    def __init__(self, cluster: Cluster | str = "hgx-h100", *, nodes: int | None = None, detail: str = "steps",
                 algorithm=None, protocol: str | None = None, numerics: str = "nccl",
                 simulation: Simulation | None = None, interference: bool | None = None):
        if simulation is None:
            if not isinstance(cluster, Cluster):
                cluster = build_cluster(cluster, nodes=nodes or 1)
            simulation = Simulation(cluster, detail, interference=interference)
        self.sim = simulation
        self.algorithm = algorithm
        self.protocol = protocol
        self.numerics = numerics
        self._p2p_memo: dict = {}  # send pattern -> the SMs its kernels hold (see _p2p_sharing)

    # ---- the clock ---------------------------------------------------------------------------------------
    @property
    def cluster(self) -> Cluster:
        return self.sim.cluster

    @property
    def env(self) -> simpy.Environment:
        return self.sim.env

    @property
    def now(self) -> float:
        return self.sim.now

    def process(self, generator) -> simpy.Process:
        """Run a schedule written as a generator that yields events (Ops among them)."""
        return self.env.process(generator)

    def all_of(self, events) -> simpy.Event:
        return self.env.all_of(list(events))

    def timeout(self, delay: float) -> simpy.Event:
        return self.env.timeout(float(_check_amount("delay", delay)))

    def run(self, until=None) -> float:
        """Advance the simulation until `until` (an event or a time) or until nothing is left; returns now."""
        self.env.run(until)
        return self.now

    def stats(self) -> dict:
        return self.sim.stats()

    # ---- operations --------------------------------------------------------------------------------------
    def _group(self, what: str, ranks, distinct: bool = False) -> np.ndarray:
        """`ranks` as global ranks, each in 0..num_ranks-1 (and distinct if asked); a SimcommError naming `what`
        and the offending rank otherwise."""
        n = self.cluster.num_ranks
        try:
            raw = np.atleast_1d(np.asarray(list(ranks) if isinstance(ranks, Iterable) and not isinstance(
                ranks, np.ndarray) else ranks))
        except ValueError:  # a ragged list
            raw = None
        if raw is None or (raw.size and (raw.ndim != 1 or raw.dtype.kind not in "iu")):
            raise SimcommError(f"{what}: expected global ranks (whole numbers 0..{n - 1}), got {ranks!r}")
        group = raw.astype(np.int64, copy=False)
        if group.size and (group.min() < 0 or group.max() >= n):
            bad = int(group[(group < 0) | (group >= n)][0])
            raise SimcommError(f"{what}: rank {bad} is out of range; {self.cluster.name} has ranks 0..{n - 1}")
        if distinct and len(np.unique(group)) != len(group):
            values, counts = np.unique(group, return_counts=True)
            raise SimcommError(f"{what}: a group's ranks must be distinct, but rank {int(values[counts > 1][0])} "
                               f"appears {int(counts[counts > 1][0])} times in {group.tolist()}")
        return group

    def _start(self, op: Op, after, body) -> Op:
        """Run body(op) now, or once every event in `after` has fired."""
        deps = [e for e in (after or ()) if not e.processed]
        if not deps:
            body(op)
            return op

        def waiter():
            yield self.env.all_of(deps)
            body(op)
        self.env.process(waiter())
        return op

    def collective(self, kind: str, ranks, size=None, *, count: int | None = None, data=None,
                   dtype: str = "float32", op="sum", root: int = 0, splits=None, variant: str = "",
                   algorithm: str | None = None, protocol: str | None = None, numerics: str | None = None,
                   after=(), tags: Mapping | None = None, label: str | None = None, sms: int | None = None,
                   sm_margin: bool = False) -> Op:
        """Run a collective over global `ranks`.

        size: nccl-tests' S (bytes, or a string such as '256MiB'); or count: elements per rank in simcomm's
        Collective convention. data: the group's rows (numpy, one row per group rank; see Collective) or None for
        size-only. root is a group rank. op: 'sum', 'avg', ... or a ReduceOp. sms: SMs its kernel holds on each
        GPU instead of NCCL's channels (e.g. Transformer Engine's userbuffers), sm_margin: compute beside it is
        sized for the SMs left (userbuffers' set_sm_margin).
        """
        kind = canonical_kind(kind)
        group = self._group(f"{kind} ranks", ranks, distinct=True)
        if not group.size:
            raise SimcommError(f"{kind}: ranks is empty; a collective needs at least one rank")
        if isinstance(root, bool) or not isinstance(root, numbers.Integral) or not 0 <= root < len(group):
            raise SimcommError(f"{kind}: root={root!r} is not in the group; expected a group rank 0..{len(group) - 1}")
        np_dtype, dtype_name = as_dtype(dtype)
        if (size is None) == (count is None):
            raise SimcommError(f"{kind}: give exactly one of size (nccl-tests' S) and count")
        if count is None:
            count = per_rank_count(kind, parse_size(size, "size"), np_dtype.itemsize, len(group))
        reduce_op = as_reduce_op(OP_NAMES.get(op, op) if isinstance(op, str) else op)
        coll = Collective(kind, group, int(count), np_dtype, reduce_op, root, splits, variant)
        forced = self.algorithm.get(kind) if isinstance(self.algorithm, dict) else self.algorithm
        op_name = {"PRODUCT": "prod"}.get(reduce_op.name, reduce_op.name.lower())
        all_tags = {"collective": kind, "dtype": dtype_name, "op": op_name, **(tags or {})}
        result = Op(self.env, "collective", group, all_tags)

        def body(o: Op):
            o.start = self.now
            proc, buf, choice = run_collective(self.sim, coll, data, algorithm or forced, protocol or self.protocol,
                                               numerics or self.numerics, label, tags=all_tags, sms=sms,
                                               sm_margin=sm_margin)
            o.buffers = buf
            n = len(group)
            o.record = CollectiveRecord(kind, n, coll.nbytes, coll.count * (n if kind in PER_RANK_SHARD else 1)
                                        if np_dtype.itemsize else 0, dtype_name, op_name, root, choice.algorithm,
                                        choice.protocol, choice.predicted, o.start, math.nan, o.tags,
                                        choice.channels)
            o.tags = o.record.tags = {**all_tags, "algorithm": choice.algorithm, "protocol": choice.protocol}

            def done(_e):
                o.record.end = self.now
                o._finish(o.record)
            proc.callbacks.append(done)
        return self._start(result, after, body)

    def send(self, src, dst, nbytes, *, after=(), tags: Mapping | None = None, label: str = "") -> Op:
        """Point-to-point: src[i] sends nbytes[i] to dst[i] (scalars or arrays of global ranks; nbytes may be a
        string such as '8MiB'); fires when the last byte has arrived. Recorded on each sender as a "p2p" op with
        the receiver as peer. Each send's kernel holds NCCL's p2p channels on both GPUs while it runs, and a copy
        inside a node slows while either GPU computes (docs/model.md)."""
        src, dst = self._group("send src", src), self._group("send dst", dst)
        if src.shape != dst.shape:
            raise SimcommError(f"send: {len(src)} sources but {len(dst)} destinations")
        amount = _check_amount("nbytes", nbytes)
        result = Op(self.env, "p2p", src, {**(tags or {})})

        def body(o: Op):
            o.start = self.now
            release, wire = self._p2p_sharing(src, dst, amount)
            tr = self.sim.network.transfer(src, dst, amount if amount.ndim else float(amount),
                                           label=label or "p2p", tags=o.tags, wire_factor=wire)

            def done(_e):
                if release is not None:
                    release()
                for s, d, b, f in zip(src.tolist(), dst.tolist(), tr.nbytes.tolist(), tr.finish.tolist()):
                    self.sim.recorder.op(s, "p2p", o.start, f, b, label or f"send {s}->{d}", d, o.tags)
                o._finish(tr)
            tr.done.callbacks.append(done)
        return self._start(result, after, body)

    def _p2p_sharing(self, src: np.ndarray, dst: np.ndarray, amount: np.ndarray):
        """(release of the sends' SMs or None, wire factor): NCCL's p2p channels held on both ends, and the copies
        inside a node that compute beside them slows. Remembered per pattern: a schedule repeats its sends."""
        compute = self.sim.compute
        if not compute.sharing or not len(src):
            return None, 1.0
        key = (src.tobytes(), dst.tobytes(), amount.tobytes())
        got = self._p2p_memo.get(key)
        if got is None:
            if len(self._p2p_memo) >= 4096:
                self._p2p_memo.clear()
            rpn = self.cluster.ranks_per_node
            intra = src // rpn == dst // rpn
            channels = p2p_channels(self.cluster, ~intra, np.broadcast_to(amount, src.shape))
            got = self._p2p_memo[key] = (*holding(np.r_[src, dst], np.r_[channels, channels]), intra)
        ranks, held, intra = got
        slow, _ = compute.beside(src, dst, intra)
        return compute.hold(ranks, held), 1.0 if slow is None else slow

    def occupy(self, ranks, sms: int, *, until: simpy.Event) -> None:
        """Hold `sms` SMs on each of `ranks` from now until `until` fires, as a communication kernel does (for
        callers that time a collective themselves, such as a replay of one already simulated)."""
        release = self.sim.compute.occupy(self._group("occupy ranks", ranks), sms)
        if release is not None:
            until.callbacks.append(lambda _e: release())

    p2p = send

    def compute(self, ranks, flops=0.0, seconds=0.0, *, rate: float | None = None, kernels=None, after=(),
                tags: Mapping | None = None, label: str = "compute") -> Op:
        """Occupy each rank's compute queue: `flops` at `rate` flop/s (default: the device's peak), plus `seconds`
        (scalars or one per rank). Work queued on one device runs back to back. The op's `progress` maps offsets
        into the work to when each rank reached them (slowdowns included).

        kernels: what the work is made of, so communication beside it slows it as its kernels would: an
        engine Mix, or (weight, engine Kernel) pairs (the work's time is split in proportion to the weights, e.g.
        each kernel's seconds alone). Default: work spread evenly over the GPU's SMs."""
        group = self._group("compute ranks", ranks)
        flops = _check_amount("flops", flops)
        seconds = _check_amount("seconds", seconds)
        rate = self.sim.compute.rate if rate is None else float(_check_amount("rate", rate))
        if not rate > 0:
            raise SimcommError(f"compute rate must be positive, got {rate!r}")
        mix = _as_mix(kernels)
        result = Op(self.env, "compute", group, {**(tags or {})})

        def body(o: Op):
            o.start = self.now
            o.progress = self.sim.compute.run(group, flops / rate + seconds, o._finish, mix, label, o.tags, flops)
        return self._start(result, after, body)

    def memory_op(self, ranks, nbytes, *, after=(), tags: Mapping | None = None, label: str = "memory") -> Op:
        """Move `nbytes` of HBM traffic (reads plus writes) on each rank at its memory bandwidth."""
        group = self._group("memory_op ranks", ranks)
        amount = _check_amount("nbytes", nbytes)
        result = Op(self.env, "memory", group, {**(tags or {})})

        def body(o: Op):
            o.start = self.now
            ends = self.sim.memory.use(group, amount, self.now, label, tags=o.tags)
            self.env.timeout(max(float(ends.max()) - self.now, 0.0)).callbacks.append(lambda _e: o._finish(ends))
        return self._start(result, after, body)


def _as_mix(kernels) -> Mix:
    if kernels is None:
        return SPREAD_MIX
    if isinstance(kernels, Mix):
        return kernels
    try:
        weights, shapes = zip(*kernels)
        return Mix(weights, shapes)
    except (TypeError, ValueError) as exc:
        raise SimcommError(f"compute kernels: expected an engine Mix or (weight, Kernel) pairs: {exc}") from None


__all__ = ["CollectiveRecord", "Op", "ReduceOp", "Session"]
