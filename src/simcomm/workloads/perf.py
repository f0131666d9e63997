"""The perf sweep: collectives x algorithms x sizes, one after another on one simulation, as nccl-tests runs them.

Sizes follow nccl-tests: S is count*typesize for all_reduce, broadcast, reduce and sendrecv, and the whole buffer
(count*typesize*nranks) for all_gather, reduce_scatter and all_to_all; algbw = S / time; busbw = algbw * factor.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from ..algorithms import ALGORITHMS, choose
from ..collective import make_collective, sizes_between
from ..errors import AlgorithmError, SimcommError
from ..fields import MAX_RANKS, Base, CollectiveName, DType, Op, Size, described
from ..session import CollectiveRecord, Session
from ..report.nccl_tests import tuner_predictions
from ..units import format_size
from ..vocab import COLLECTIVES, DTYPES, OPS, REDUCING, ROOTED, numpy_dtype
from .base import RunResult, Workload, forced_algorithm
from ..engine import resolve_detail
from .checks import available, check_algorithm, check_ranks, check_runs


# ---- the spec ----------------------------------------------------------------------------------------------
class SizeRange(Base):
    """nccl-tests' -b/-e/-f: begin, begin*factor, ... up to end."""

    begin: Size = described(doc="smallest size (nccl-tests' S)", type="size")
    end: Size = described(doc="largest size", type="size")
    factor: float = described(2.0, "multiply by this each step (-f)", "number", gt=1, le=1024)

    @field_validator("factor", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _order(self):
        if not 0 < self.begin <= self.end:
            raise ValueError(f"expected 0 < begin <= end, got begin={self.begin} and end={self.end}")
        try:  # the series the run will use: it must grow at every step and stay within 4096 sizes
            sizes_between(self.begin, self.end, self.factor)
        except SimcommError as exc:
            raise ValueError(str(exc)) from None
        return self


def _sizes_tag(v):
    return "range" if isinstance(v, (dict, SizeRange)) else ("list" if isinstance(v, list) else None)


SizeSpec = Annotated[Union[Annotated[SizeRange, Tag("range")],
                           Annotated[list[Size], Field(min_length=1, max_length=4096), Tag("list")]],
                     Discriminator(_sizes_tag, custom_error_type="sizes_type",
                                   custom_error_message="expected a mapping {begin, end, factor} or a list of sizes")]


class PerfSpec(Base):
    """A collective sweep, as nccl-tests runs it: every collective x algorithm x size, one after another."""

    kind: Literal["perf"] = described(doc="perf")
    collectives: list[CollectiveName] = described(["all_reduce"], "collectives to sweep: " + ", ".join(COLLECTIVES),
                                                  "list of collectives", min_length=1, max_length=len(COLLECTIVES))
    sizes: SizeSpec = described(doc="{begin, end, factor} or a list of sizes", type="mapping or list of sizes")
    ranks: int | None = described(None, "ranks taking part (default: every rank of the cluster)", ge=1, le=MAX_RANKS)
    dtype: DType = described("float32", "element type: " + ", ".join(DTYPES), "dtype")
    op: Op = described("sum", "reduce op: " + ", ".join(OPS), "op")
    root: int = described(0, "root rank of broadcast and reduce", ge=0, le=MAX_RANKS)
    algorithms: list[str] | None = described(None, "compare these: 'auto' (the tuner), 'all' (every registered one) "
                                             "or names such as ring, tree (default: model.algorithm, else auto)",
                                             min_length=1, max_length=32)


def sizes_of(spec) -> list[int]:
    return list(spec) if isinstance(spec, list) else sizes_between(spec.begin, spec.end, spec.factor)


# ---- running -----------------------------------------------------------------------------------------------
@dataclass
class PerfRow(CollectiveRecord):
    """One size of one collective: the record of what ran (nccl-tests' S and count, dtype, op, root, the algorithm
    and protocol, when), what was requested ("auto", the tuner, or a forced algorithm) and what the tuner weighed
    ((algorithm, protocol, predicted seconds) fastest first; () for a forced algorithm)."""

    requested: str = "auto"
    weighed: tuple = field(default=(), repr=False)

    @classmethod
    def from_record(cls, record: CollectiveRecord, requested: str, weighed: tuple = ()) -> "PerfRow":
        return cls(**{f.name: getattr(record, f.name) for f in fields(CollectiveRecord)}, requested=requested,
                   weighed=weighed)

    @property
    def redop(self) -> str:
        """nccl-tests' redop column: the op for reductions (and sendrecv), 'none' otherwise."""
        return self.op if self.collective in REDUCING + ("sendrecv",) else "none"

    @property
    def root_column(self) -> int:
        return self.root if self.collective in ROOTED else -1

    def as_dict(self) -> dict:
        """nccl-tests' figures and the choice (what the tuner weighed is in tuner_json)."""
        return {"collective": self.collective, "requested": self.requested, "size": self.size, "count": self.count,
                "dtype": self.dtype, "op": self.op, "root": self.root, "ranks": self.ranks, "time": self.time,
                "algorithm": self.algorithm, "protocol": self.protocol, "predicted": self.predicted,
                "algbw": self.algbw, "busbw": self.busbw}


def tuner_json(rows) -> list[dict]:
    """Per tuned row: the collective, size, choice and every (algorithm, protocol) the tuner weighed with its
    predicted seconds, fastest first."""
    return [{"collective": r.collective, "size": r.size, "algorithm": r.algorithm, "protocol": r.protocol,
             "weighed": [{"algorithm": a, "protocol": p, "predicted": t} for a, p, t in r.weighed]}
            for r in rows if r.weighed]


def expand_algorithms(requested, kind: str, explicit: set | None = None) -> list[str | None]:
    """'auto' -> None (the tuner); 'all' -> every registered algorithm; names not registered for kind are skipped.

    `explicit`, when given, receives the names asked for by name (an error if they cannot run), as opposed to
    those 'all' brought in (skipped if they cannot run here).
    """
    names = sorted(ALGORITHMS.get(kind, {}))
    out: list[str | None] = []
    for name in requested or ["auto"]:
        for a in ([None] if name == "auto" else names if name == "all" else [name]):
            if (a is None or a in names) and a not in out:
                out.append(a)
            if explicit is not None and name not in ("auto", "all"):
                explicit.add(name)
    return out


def run_perf(session: Session, collectives, sizes, *, ranks: int | None = None, dtype: str = "float32",
             op: str = "sum", root: int = 0, algorithms=None, protocol: str | None = None, progress=None,
             notes: list | None = None) -> list[PerfRow]:
    """Run every collective x algorithm x size on `session`, back to back; `progress()` is called after each run.

    Algorithms that 'all' brought in but that cannot run here (nvls without NVLink SHARP, ...) are skipped, with
    the reason appended to `notes`.
    """
    cluster = session.cluster
    n = ranks or cluster.num_ranks
    group = range(n)
    rows = []
    for kind in collectives:
        explicit: set = set()
        for algo in expand_algorithms(algorithms, kind, explicit):
            for size in sizes:
                coll = make_collective(kind, group, int(size), numpy_dtype(dtype), op, root)
                try:
                    choice = choose(cluster, coll, algo, protocol)
                except AlgorithmError as exc:
                    if algo is None or algo in explicit:
                        raise
                    note = f"{kind}: skipped {algo}: {exc}"
                    if notes is not None and note not in notes:
                        notes.append(note)
                    continue
                if coll.count > 0:  # NCCL returns at once for a count of 0, launching nothing
                    ran = session.collective(kind, group, count=coll.count, dtype=dtype, op=op, root=root,
                                             algorithm=choice.algorithm, protocol=choice.protocol)
                    session.run(ran)
                    record = ran.record
                else:
                    record = CollectiveRecord(kind, n, coll.nbytes, coll.nbytes // coll.itemsize, dtype, op, root,
                                              choice.algorithm, choice.protocol, choice.predicted, session.now,
                                              session.now)
                rows.append(PerfRow.from_record(record, algo or "auto", choice.weighed if algo is None else ()))
                if progress:
                    progress()
    return rows


# ---- the workload kind -------------------------------------------------------------------------------------
class PerfWorkload(Workload):
    kind = "perf"
    Spec = PerfSpec
    plots = ("busbw", "timeline", "links")

    def reference_sections(self) -> list[tuple[str, type]]:
        return super().reference_sections() + [("workload.sizes (range form)", SizeRange)]

    def _per_kind(self, spec: PerfSpec, model) -> dict:
        forced = model.algorithm or {}
        algos = spec.algorithms or ([forced["*"]] if "*" in forced else None)
        return {k: (algos or [forced.get(k, "auto")]) for k in spec.collectives}

    def check(self, spec: PerfSpec, scenario, cluster, error) -> None:
        n = spec.ranks or cluster.num_ranks
        check_ranks(n, cluster, ("workload", "ranks"), error)
        if spec.root >= n:
            raise error(("workload", "root"), f"expected a root below {n} (the number of ranks), found {spec.root}")
        forced = scenario.model.algorithm or {}
        if spec.algorithms and forced:
            raise error(("workload", "algorithms"), "expected either workload.algorithms or model.algorithm, "
                                                    "found both")
        for i, name in enumerate(spec.algorithms or []):
            if name != "all" and not any(name in available(k) for k in spec.collectives):
                check_algorithm(name, spec.collectives, ("workload", "algorithms", i), error)
            for k in spec.collectives:
                check_runs(name, k, range(n), spec.root, cluster, ("workload", "algorithms", i), error)
        for k in spec.collectives:
            name = forced_algorithm(scenario.model, k)
            if name:
                path = ("model", "algorithm") + (() if k not in forced else (k,))
                check_algorithm(name, [k], path, error)
                check_runs(name, k, range(n), spec.root, cluster, path, error)

    def run(self, spec: PerfSpec, scenario, cluster, name: str, detail: str | None, progress=None) -> RunResult:
        n = spec.ranks or cluster.num_ranks
        session = Session(cluster, detail=resolve_detail(detail or scenario.model.detail, n))
        result = RunResult(name, self.kind, cluster, simulation=session.sim)
        sizes = sizes_of(spec.sizes)
        per_kind = self._per_kind(spec, scenario.model)
        total = sum(len(expand_algorithms(per_kind[k], k)) for k in spec.collectives) * len(sizes)
        done = [0]

        def tick():
            done[0] += 1
            if progress:
                progress(done[0], total)
        for kind in spec.collectives:
            if not expand_algorithms(per_kind[kind], kind):
                result.notes.append(f"{kind}: none of {', '.join(per_kind[kind])} is available; skipped")
            result.rows += run_perf(session, [kind], sizes, ranks=n, dtype=spec.dtype, op=spec.op, root=spec.root,
                                    algorithms=per_kind[kind], protocol=scenario.model.protocol, progress=tick,
                                    notes=result.notes)
        if any(r.weighed for r in result.rows):
            result.details["tuner"] = tuner_json(result.rows)
        return result

    def _by_series(self, rows) -> dict:
        by: dict = {}
        for r in rows:
            by.setdefault((r.collective, r.requested), []).append(r)
        return by

    def summary(self, result: RunResult) -> list[dict]:
        out = []
        for (kind, requested), rows in self._by_series(result.rows).items():
            last = rows[-1]
            # what ran at the largest size: the tuner's choice where the series asked for auto
            out.append({"collective": kind, "requested": requested, "algorithm": last.algorithm,
                        "protocol": last.protocol, "size": last.size, "time": last.time, "busbw": last.busbw,
                        "peak_busbw": max(r.busbw for r in rows)})
        return out

    def report(self, result: RunResult) -> list:
        blocks = []
        for (kind, requested), rows in self._by_series(result.rows).items():
            table = [(format_size(r.size), r.count, r.dtype, r.redop, r.root_column, r.time * 1e6, r.algbw / 1e9,
                      r.busbw / 1e9, r.algorithm, r.protocol) for r in rows]
            peak = max(rows, key=lambda r: r.busbw)
            blocks.append((f"{kind} over {rows[0].ranks} ranks, algorithm {requested}: peak busbw "
                           f"{peak.busbw / 1e9:.2f} GB/s at {format_size(peak.size)}",
                           ["size", "count", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                            "algorithm", "protocol"], table))
            headers, why = tuner_predictions(rows)
            if why:
                blocks.append((f"why the tuner chose it: {kind}'s predicted times (the simulated times are above)",
                               headers, why))
        return blocks


WORKLOAD = PerfWorkload()
