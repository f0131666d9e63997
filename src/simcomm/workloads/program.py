"""Rank programs: ordinary torch.distributed-style code run on every rank (simcomm.spawn), named in a scenario as
'package.module:function'. A scenario with a program is code you run: only `simcomm run` imports and calls it."""
from __future__ import annotations

import importlib
import re
from typing import Any, Literal

from pydantic import field_validator

from ..distributed.spawn import spawn
from ..fields import Base, described
from ..vocab import did_you_mean
from .base import RunResult, Workload, resolve_detail
from .checks import check_ranks


# ---- the spec ----------------------------------------------------------------------------------------------
class ProgramSpec(Base):
    """A rank program in the style of torch.distributed, run on every rank (simcomm.spawn)."""

    kind: Literal["program"] = described(doc="program")
    program: str = described(doc="'package.module:function', called as function(rank, *args)")
    ranks: int | None = described(None, "number of ranks (default: every rank of the cluster)", ge=1, le=4096)
    args: list[Any] = described([], "extra positional arguments", "list")

    @field_validator("program")
    @classmethod
    def _program(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", v.strip()):
            raise ValueError("expected 'package.module:function'")
        return v.strip()



def resolve_program(spec: str):
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- the workload kind -------------------------------------------------------------------------------------
class ProgramWorkload(Workload):
    kind = "program"
    Spec = ProgramSpec

    def check(self, spec: ProgramSpec, scenario, cluster, error) -> None:
        check_ranks(spec.ranks or cluster.num_ranks, cluster, ("workload", "ranks"), error)
        module, _, func = spec.program.partition(":")
        try:
            mod = importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure to import is the user's to fix
            raise error(("workload", "program"), f"cannot import module {module!r}: {type(exc).__name__}: {exc}") \
                from None
        fn = getattr(mod, func, None)
        if not callable(fn):
            names = [n for n in dir(mod) if not n.startswith("_")]
            raise error(("workload", "program"), f"module {module!r} has no function {func!r}"
                                                 f"{did_you_mean(func, names)}")

    def run(self, spec: ProgramSpec, scenario, cluster, name: str, detail: str | None,
            progress=None) -> RunResult:
        model = scenario.model
        n = spec.ranks or cluster.num_ranks
        forced = model.algorithm or {}
        res = spawn(resolve_program(spec.program), tuple(spec.args), n, cluster, algorithm=forced.get("*", forced or None),
                    protocol=model.protocol, numerics=model.numerics, detail=resolve_detail(detail or model.detail, n))
        comm = {r: 0.0 for r in range(n)}
        for a in res.timeline:
            if a.kind == "collective" and a.rank in comm:
                comm[a.rank] += a.end - a.start
        rows = [{"rank": r, "device": cluster.rank_name(r), "finish": res.finish_times[r],
                 "collective_time": comm[r], "result": res.results[r]} for r in range(n)]
        return RunResult(name, self.kind, cluster, rows, res.simulation)

    def summary(self, result: RunResult) -> list[dict]:
        return [{"ranks": len(result.rows), "elapsed": result.elapsed,
                 "collective_time": max((r["collective_time"] for r in result.rows), default=0.0)}]

    def report(self, result: RunResult) -> list:
        table = [(r["rank"], r["device"], r["finish"] * 1e6, r["collective_time"] * 1e6, _short(r["result"]))
                 for r in result.rows]
        return [("ranks", ["rank", "device", "finish (us)", "in collectives (us)", "result"], table)]


WORKLOAD = ProgramWorkload()
