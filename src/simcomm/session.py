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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy

from .arrays import unique
from .algorithms import ALGORITHMS, PROTOCOLS, Buffers, Collective, ReduceOp, run_collective
from .algorithms.channels import p2p_channels
from .algorithms.reduce_ops import as_reduce_op, check_op
from .algorithms.run import choice_for
from .engine import NO_TAGS, SPREAD_MIX, Mix, Simulation, when_all
from .engine.compute import holding
from .errors import SimcommError
from .errors import shown as _shown
from .hardware import Cluster, build_cluster
from .units import parse_size
from .vocab import (MAX_SIZE, OP_NAMES, PER_RANK_SHARD, REDUCING, Bandwidth, canonical_dtype, canonical_kind,
                    numpy_dtype, per_rank_count)


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
        self.on_start = None  # called once it has started, if set before (a caller's bookkeeping, not an event)

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


def _check_amount(name: str, value, ranks: int | None = None, limit: float = math.inf) -> np.ndarray:
    """`value` (a number, a size string, or one per rank of a group of `ranks`; ranks=0: a number only) as floats,
    each finite, >= 0 and <= limit; a SimcommError naming `name` otherwise."""
    if (type(value) is float and math.isfinite(value) or type(value) is int and value < 1 << 53) \
            and 0 <= value <= limit:  # the common case, checked without numpy (the same outcome)
        return np.asarray(value, dtype=np.float64)
    if isinstance(value, str):
        value = parse_size(value, name)
    try:
        if np.asarray(value).dtype.kind == "b":  # True is not an amount
            raise TypeError
        arr = np.asarray(value, dtype=np.float64)
    except (OverflowError, TypeError, ValueError):  # 10**400, a word, an object, a ragged list, a bool
        raise SimcommError(f"{name} must be a finite non-negative number (or array of them), got {_shown(value)}") \
            from None
    if arr.ndim > 1 or (arr.ndim == 1 and ranks is not None and (ranks == 0 or len(arr) != ranks)):
        expected = "a number" + (f" or one per rank ({ranks})" if ranks else "")
        raise SimcommError(f"{name}: expected {expected}, got an array of shape {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any() or (arr > limit).any():
        bound = "" if limit == math.inf else f" and at most {limit:.0f}"
        raise SimcommError(f"{name} must be finite and non-negative{bound}, got {_shown(value)}")
    return arr


def _within(group: np.ndarray, n: int) -> bool:
    """Whether every rank of a (non-empty) group is in 0..n-1: a short group's bounds from a list (two numpy
    reductions cost more)."""
    if len(group) <= 64:
        ranks = group.tolist()
        return min(ranks) >= 0 and max(ranks) < n
    return bool(group.min() >= 0 and group.max() < n)


def _tags(what: str, tags) -> Mapping:
    if tags is None:
        return NO_TAGS
    if type(tags) is not dict and not isinstance(tags, Mapping):  # a dict, the common case, skips the ABC check
        raise SimcommError(f"{what}: tags must be a mapping (name -> value), got {_shown(tags)}")
    return tags


def _check_choices(coll: Collective, algorithm, protocol, numerics) -> None:
    """What run_collective would refuse when the collective starts (perhaps later, after its `after`), refused now:
    an unknown algorithm, protocol or numerics, an op the dtype cannot take."""
    if numerics not in ("nccl", "gloo"):
        raise SimcommError(f"{coll.kind}: numerics must be 'nccl' or 'gloo', got {_shown(numerics)}")
    if algorithm is not None and algorithm not in ALGORITHMS[coll.kind]:
        raise SimcommError(f"{coll.kind}: unknown algorithm {_shown(algorithm)}; expected one of "
                           f"{', '.join(sorted(ALGORITHMS[coll.kind]))}")
    if protocol is not None and protocol not in PROTOCOLS:
        raise SimcommError(f"{coll.kind}: unknown protocol {_shown(protocol)}; expected one of {', '.join(PROTOCOLS)}")
    if coll.kind in REDUCING:
        check_op(coll.op, coll.dtype, numerics)


def _count(kind: str, count, itemsize: int, n: int) -> int:
    """A collective's count (elements per rank, simcomm's convention): a whole number >= 0 whose buffer fits
    MAX_SIZE."""
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
        raise SimcommError(f"{kind}: count={_shown(count)}: expected a whole number of elements >= 0")
    nbytes = int(count) * itemsize * (n if kind in PER_RANK_SHARD else 1)
    if nbytes > MAX_SIZE:
        size = f"{nbytes:.3g} bytes" if nbytes.bit_length() < 1000 else f"a {nbytes.bit_length()}-bit number of bytes"
        raise SimcommError(f"{kind}: count={_shown(count)} makes a buffer of {size}; at most 1 PiB")
    return int(count)


def _splits(kind: str, splits, n: int, itemsize: int):
    """all_to_all's splits[i][j] (elements from group rank i to j) as an (n, n) int64 array, or None."""
    if splits is None:
        return None
    if kind != "all_to_all":
        raise SimcommError(f"{kind}: splits apply to all_to_all only")
    try:
        arr = np.asarray(splits)
    except ValueError:  # ragged
        arr = np.asarray([0.5])
    if arr.shape != (n, n) or arr.dtype.kind not in "iu" or (arr < 0).any():
        raise SimcommError(f"all_to_all: splits must be an {n} x {n} array of whole numbers >= 0 (splits[i][j]: "
                           f"elements group rank i sends to j), got {_shown(splits)}")
    if int(arr.sum(axis=1, dtype=object).max()) * itemsize > MAX_SIZE:
        raise SimcommError("all_to_all: splits make a buffer of more than 1 PiB")
    return arr.astype(np.int64)


def _data(kind: str, data, n: int, count: int, dtype: np.dtype, splits):
    """A collective's data checked against its layout: (data for run_collective, the array its results end in).
    Rows are one per group rank: count elements (all_reduce, broadcast, reduce, sendrecv), or n blocks of count
    (all_gather, reduce_scatter, gather, scatter, all_to_all: block j of row i goes to group rank j)."""
    if data is None or isinstance(data, Buffers):  # size-only, or simcomm.distributed's own buffers
        return data, None
    width = n * count if kind in PER_RANK_SHARD else count
    if kind == "barrier" or splits is not None:
        raise SimcommError(f"{kind}: data is not taken {'with uneven splits' if splits is not None else 'here'}; "
                           "pass data=None for a size-only run")
    if not isinstance(data, np.ndarray):
        raise SimcommError(f"{kind}: data must be a numpy array of shape ({n}, {width}) (one row per group rank), "
                           f"got {type(data).__name__}")
    if data.shape != (n, width) or data.dtype != dtype:
        raise SimcommError(f"{kind}: data must be a {dtype.name} array of shape ({n}, {width}) (one row per group "
                           f"rank), got a {data.dtype.name} array of shape {data.shape}")
    if kind != "all_to_all":
        return data, None
    out = np.zeros_like(data)
    blocks_in = [[data[i, j * count:(j + 1) * count] for j in range(n)] for i in range(n)]
    blocks_out = [[out[j, i * count:(i + 1) * count] for i in range(n)] for j in range(n)]  # [j][i]: j's from i
    return Buffers((blocks_in, blocks_out), ReduceOp.SUM), out


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
        self._checked: dict = {}  # (id, distinct) -> a read-only rank array _group has checked (see there)

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
        return self.env.all_of(self._after("all_of", events))

    def timeout(self, delay: float) -> simpy.Event:
        return self.env.timeout(float(_check_amount("delay", delay, ranks=0)))

    def run(self, until=None) -> float:
        """Advance the simulation until `until` (an event or a time) or until nothing is left; returns now."""
        if isinstance(until, simpy.Event):
            self._after("run", [until])
        elif until is not None:
            t = float(_check_amount("run until", until, ranks=0))
            if t < self.now:
                raise SimcommError(f"run: until={t!r} is before now ({self.now!r})")
            if t == self.now:
                return self.now
            until = t
        self.env.run(until)
        return self.now

    def stats(self) -> dict:
        return self.sim.stats()

    # ---- operations --------------------------------------------------------------------------------------
    def _group(self, what: str, ranks, distinct: bool = False) -> np.ndarray:
        """`ranks` as global ranks, each in 0..num_ranks-1 (and distinct if asked); a SimcommError naming `what`
        and the offending rank otherwise."""
        n = self.cluster.num_ranks
        if type(ranks) is np.ndarray and ranks.dtype == np.int64 and ranks.ndim == 1:  # as schedules pass them
            if not ranks.flags.writeable and self._checked.get((id(ranks), distinct)) is ranks:
                return ranks  # checked before and read-only since: a step model passes its stages' thousands of times
            group = ranks
        else:
            try:
                raw = np.atleast_1d(np.asarray(list(ranks) if not isinstance(ranks, np.ndarray) and isinstance(
                    ranks, Iterable) else ranks))
            except ValueError:  # a ragged list
                raw = None
            if raw is None or (raw.size and (raw.ndim != 1 or raw.dtype.kind not in "iu")):
                raise SimcommError(f"{what}: expected global ranks (whole numbers 0..{n - 1}), got {ranks!r}")
            group = raw.astype(np.int64, copy=False)
        if group.size and not _within(group, n):
            bad = int(group[(group < 0) | (group >= n)][0])
            raise SimcommError(f"{what}: rank {bad} is out of range; {self.cluster.name} has ranks 0..{n - 1}")
        if distinct and len(unique(group)) != len(group):
            values, counts = np.unique(group, return_counts=True)
            raise SimcommError(f"{what}: a group's ranks must be distinct, but rank {int(values[counts > 1][0])} "
                               f"appears {int(counts[counts > 1][0])} times in {group.tolist()}")
        if group is ranks and not group.flags.writeable:
            if len(self._checked) >= 1024:
                self._checked.clear()
            self._checked[id(group), distinct] = group  # holds it: the id stays its own
        return group

    def _after(self, what: str, after) -> list:
        """`after` as a list of this Session's events (Ops, all_of, timeouts); a SimcommError naming the call
        otherwise."""
        if after is None or (type(after) is tuple and not after):
            return []
        if type(after) is not list and (isinstance(after, simpy.Event) or not isinstance(after, Iterable) or
                                        isinstance(after, (str, bytes))):  # a list, the common case, is iterable
            raise SimcommError(f"{what}: after must be a list of operations (events of this Session), got "
                               f"{_shown(after)}")
        deps = list(after)
        for e in deps:
            if not isinstance(e, simpy.Event):
                raise SimcommError(f"{what}: after holds {_shown(e)}, which is not an operation (an event of this "
                                   f"Session)")
            if e.env is not self.env:
                shown = repr(e) if isinstance(e, Op) else f"a {type(e).__name__} event"
                raise SimcommError(f"{what}: after holds {shown}, an operation of another Session")
        return deps

    def _sms(self, what: str, sms) -> int:
        """SMs a kernel holds on each GPU: a whole number from 0 to the device's SMs."""
        most = self.cluster.device.sms or None
        if isinstance(sms, bool) or not isinstance(sms, numbers.Integral) or sms < 0 or (most and sms > most):
            raise SimcommError(f"{what}: sms={_shown(sms)}: expected a whole number of SMs from 0"
                               + (f" to {most} ({self.cluster.device.name}'s)" if most else ""))
        return int(sms)

    def _nonempty(self, what: str, ranks) -> np.ndarray:
        group = self._group(f"{what} ranks", ranks)
        if not group.size:
            raise SimcommError(f"{what}: ranks is empty; give at least one rank")
        return group

    def _start(self, op: Op, after: list, body) -> Op:
        """Run body(op) now, or once every event in `after` (checked by _after) has fired."""
        deps = [e for e in after if not e.processed]
        if not deps:
            body(op)
            return op

        def start():
            body(op)
            if op.on_start is not None:
                op.on_start()
        when_all(self.env, deps, start)
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
        after = self._after(kind, after)
        group = self._group(f"{kind} ranks", ranks, distinct=True)
        if not group.size:
            raise SimcommError(f"{kind}: ranks is empty; a collective needs at least one rank")
        if isinstance(root, bool) or not isinstance(root, numbers.Integral) or not 0 <= root < len(group):
            raise SimcommError(f"{kind}: root={root!r} is not in the group; expected a group rank 0..{len(group) - 1}")
        np_dtype, dtype_name = as_dtype(dtype)
        n = len(group)
        if (size is None) == (count is None):
            raise SimcommError(f"{kind}: give exactly one of size (nccl-tests' S) and count")
        if count is None:
            nbytes = parse_size(size, "size")
            if nbytes > MAX_SIZE:
                raise SimcommError(f"{kind}: size={_shown(size)} is more than 1 PiB")
            count = per_rank_count(kind, nbytes, np_dtype.itemsize, n) if np_dtype.itemsize else 0
        count = _count(kind, count, np_dtype.itemsize, n)
        splits = _splits(kind, splits, n, np_dtype.itemsize)
        data, out = _data(kind, data, n, count, np_dtype, splits)
        if variant not in ("", "list") or (variant and kind != "reduce_scatter"):
            raise SimcommError(f"{kind}: variant={variant!r}: expected '' (or 'list' for reduce_scatter)")
        tags = _tags(kind, tags)
        sms = None if sms is None else self._sms(kind, sms)
        if not isinstance(sm_margin, bool):
            raise SimcommError(f"{kind}: sm_margin must be True or False, got {_shown(sm_margin)}")
        reduce_op = as_reduce_op(OP_NAMES.get(op, op) if isinstance(op, str) else op)
        coll = Collective(kind, group, count, np_dtype, reduce_op, root, splits, variant)
        forced = self.algorithm.get(kind) if isinstance(self.algorithm, dict) else self.algorithm
        _check_choices(coll, algorithm or forced, protocol or self.protocol, numerics or self.numerics)
        if algorithm or forced or protocol or self.protocol:  # one that cannot run this collective: refused now
            choice_for(self.sim, coll.placed(self.cluster), algorithm or forced, protocol or self.protocol)
        op_name = {"PRODUCT": "prod"}.get(reduce_op.name, reduce_op.name.lower())
        all_tags = {"collective": kind, "dtype": dtype_name, "op": op_name, **tags}
        result = Op(self.env, "collective", group, all_tags)

        def body(o: Op):
            o.start = self.now
            proc, buf, choice = run_collective(self.sim, coll, data, algorithm or forced, protocol or self.protocol,
                                               numerics or self.numerics, label, tags=all_tags, sms=sms,
                                               sm_margin=sm_margin)
            o.buffers = buf if out is None else Buffers(out, reduce_op)
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
        after = self._after("send", after)
        src, dst = self._group("send src", src), self._group("send dst", dst)
        if src.shape != dst.shape:
            raise SimcommError(f"send: {len(src)} sources but {len(dst)} destinations")
        if not src.size:
            raise SimcommError("send: src is empty; a send needs at least one sender")
        amount = _check_amount("send nbytes", nbytes, len(src), MAX_SIZE)
        result = Op(self.env, "p2p", src, {**_tags("send", tags)})

        def body(o: Op):
            o.start = self.now
            release, wire = self._p2p_sharing(src, dst, amount)
            tr = self.sim.network.transfer(src, dst, amount if amount.ndim else float(amount),
                                           label=label or "p2p", tags=o.tags, wire_factor=wire)

            def done(_e):
                if release is not None:
                    release()
                self.sim.recorder.sends(src.copy(), dst.copy(), o.start, tr.finish.copy(), tr.nbytes, label, o.tags)
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
            got = self._p2p_memo[key] = (*holding(np.r_[src, dst], np.r_[channels, channels]), intra,
                                         bool(intra.any()))
        ranks, held, intra, copies = got
        slow = compute.beside(src, dst, intra)[0] if copies else None  # no copy inside a node: none to slow
        return compute.hold(ranks, held), 1.0 if slow is None else slow

    def occupy(self, ranks, sms: int, *, until: simpy.Event) -> None:
        """Hold `sms` SMs on each of `ranks` from now until `until` fires, as a communication kernel does (for
        callers that time a collective themselves, such as a replay of one already simulated)."""
        self._after("occupy", [until])
        release = self.sim.compute.occupy(self._group("occupy ranks", ranks), self._sms("occupy", sms))
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
        after = self._after("compute", after)
        group = self._nonempty("compute", ranks)
        flops = _check_amount("compute flops", flops, len(group))
        seconds = _check_amount("compute seconds", seconds, len(group))
        rate = self.sim.compute.rate if rate is None else float(_check_amount("compute rate", rate, ranks=0))
        if not rate > 0:
            raise SimcommError(f"compute rate must be positive, got {rate!r}")
        if flops.ndim == seconds.ndim == 0:  # scalars: Python floats overflow to inf without a warning
            finite = math.isfinite(float(flops) / rate + float(seconds) + self.now)
        else:
            with np.errstate(over="ignore"):
                finite = np.isfinite(flops / rate + seconds + self.now).all()
        if not finite:
            raise SimcommError(f"compute: flops={_shown(flops.tolist())} at {rate:g} flop/s plus "
                               f"seconds={_shown(seconds.tolist())} would end at a time that is not finite")
        mix = _as_mix(kernels)
        result = Op(self.env, "compute", group, {**_tags("compute", tags)})

        def body(o: Op):
            o.start = self.now
            o.progress = self.sim.compute.run(group, flops / rate + seconds, o._finish, mix, label, o.tags, flops)
        return self._start(result, after, body)

    def memory_op(self, ranks, nbytes, *, after=(), tags: Mapping | None = None, label: str = "memory") -> Op:
        """Move `nbytes` of HBM traffic (reads plus writes) on each rank at its memory bandwidth."""
        after = self._after("memory_op", after)
        group = self._nonempty("memory_op", ranks)
        amount = _check_amount("memory_op nbytes", nbytes, len(group), MAX_SIZE)
        result = Op(self.env, "memory", group, {**_tags("memory_op", tags)})

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
