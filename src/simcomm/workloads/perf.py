"""The perf sweep: collectives x algorithms x sizes, one after another on one simulation, as nccl-tests runs them.

Sizes follow nccl-tests: S is count*typesize for all_reduce, broadcast, reduce and sendrecv, and the whole buffer
(count*typesize*nranks) for all_gather, reduce_scatter and all_to_all; algbw = S / time; busbw = algbw * factor.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..algorithms import ALGORITHMS, choose, run_collective
from ..collective import BUSBW_FACTOR, make_collective
from ..errors import AlgorithmError
from .names import DTYPES

OP_NAMES = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce", "gather", "scatter")


@dataclass
class PerfRow:
    """One size of one collective: nccl-tests' columns plus what the tuner chose."""

    collective: str
    requested: str  # "auto" (the tuner) or a forced algorithm
    size: int  # nccl-tests' S, bytes
    count: int  # S / typesize, as nccl-tests prints it
    dtype: str
    op: str
    root: int
    ranks: int
    time: float  # seconds
    algorithm: str
    protocol: str
    predicted: float | None = None

    @property
    def algbw(self) -> float:
        return self.size / self.time if self.time > 0 else 0.0

    @property
    def busbw(self) -> float:
        return self.algbw * BUSBW_FACTOR[self.collective](self.ranks)

    @property
    def redop(self) -> str:
        """nccl-tests' redop column: the op for reductions (and sendrecv), 'none' otherwise."""
        return self.op if self.collective in REDUCING + ("sendrecv",) else "none"

    @property
    def root_column(self) -> int:
        return self.root if self.collective in ROOTED else -1

    def as_dict(self) -> dict:
        return asdict(self) | {"algbw": self.algbw, "busbw": self.busbw}


def expand_algorithms(requested, kind: str, explicit: set | None = None) -> list[str | None]:
    """'auto' -> None (the tuner); 'all' -> every registered algorithm; names not registered for kind are skipped.

    `explicit`, when given, receives the names asked for by name (an error if they cannot run), as opposed to
    those 'all' brought in (skipped if they cannot run here).
    """
    available = sorted(ALGORITHMS.get(kind, {}))
    out: list[str | None] = []
    for name in requested or ["auto"]:
        for a in ([None] if name == "auto" else available if name == "all" else [name]):
            if (a is None or a in available) and a not in out:
                out.append(a)
            if explicit is not None and name not in ("auto", "all"):
                explicit.add(name)
    return out


def run_perf(sim, collectives, sizes, *, ranks: int | None = None, dtype: str = "float32", op: str = "sum",
             root: int = 0, algorithms=None, protocol: str | None = None, progress=None,
             notes: list | None = None) -> list[PerfRow]:
    """Run every collective x algorithm x size on `sim`, back to back; `progress()` is called after each run.

    Algorithms that 'all' brought in but that cannot run here (nvls without NVLink SHARP, ...) are skipped, with
    the reason appended to `notes`.
    """
    n = ranks or sim.cluster.num_ranks
    np_dtype, _ = DTYPES.get(dtype, (dtype, dtype))
    group = np.arange(n)
    rows = []
    for kind in collectives:
        explicit: set = set()
        for algo in expand_algorithms(algorithms, kind, explicit):
            for size in sizes:
                coll = make_collective(kind, group, int(size), np_dtype, OP_NAMES.get(op, op), root)
                try:
                    choice = choose(sim.cluster, coll, algo, protocol)
                except AlgorithmError as exc:
                    if algo is None or algo in explicit:
                        raise
                    note = f"{kind}: skipped {algo}: {exc}"
                    if notes is not None and note not in notes:
                        notes.append(note)
                    continue
                if choice is None:
                    raise AlgorithmError(f"no algorithm can run {kind} on {sim.cluster.name}")
                label = f"{kind}:{choice.algorithm}:{choice.protocol}:{dtype}:{op}"
                start = sim.now
                if coll.count > 0:  # NCCL returns at once for a count of 0, launching nothing
                    proc, _, _ = run_collective(sim, coll, None, choice.algorithm, choice.protocol, label=label)
                    sim.env.run(proc)
                rows.append(PerfRow(kind, algo or "auto", coll.nbytes, coll.nbytes // coll.itemsize, dtype, op,
                                    root, n, sim.now - start, choice.algorithm, choice.protocol, choice.predicted))
                if progress:
                    progress()
    return rows
