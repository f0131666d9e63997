"""Rank programs: ordinary torch.distributed-style code run on every rank (simcomm.spawn), named in a scenario as
'package.module:function'. A scenario with a program is code you run: only `simcomm run` imports and calls it."""
from __future__ import annotations

import ast
import importlib
import importlib.machinery
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from ..distributed.spawn import spawn
from ..errors import SimcommError
from ..fields import Base, described
from ..vocab import did_you_mean
from .base import RunResult, Workload, resolve_detail
from .checks import check_ranks
from .traffic import bytes_sent, losses
from ..units import format_size


# ---- the spec ----------------------------------------------------------------------------------------------
class ProgramSpec(Base):
    """A rank program in the style of torch.distributed, run on every rank (simcomm.spawn). A scenario with a
    program is code you run: `simcomm run` imports and calls it; `simcomm validate` finds the module and the
    function without importing anything (`simcomm validate --import` imports it too)."""

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



def resolve_program(spec: str, where=("workload", "program"), error=None):
    """Import the program's module and return its function (this runs the module's code)."""
    module, _, func = spec.partition(":")
    try:
        mod = importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure to import is the user's to fix
        message = f"cannot import module {module!r}: {type(exc).__name__}: {exc}"
        raise (error(where, message) if error else SimcommError(f"{'.'.join(where)}: {message}")) from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        names = [n for n in dir(mod) if not n.startswith("_")]
        message = f"module {module!r} has no function {func!r}{did_you_mean(func, names)}"
        raise error(where, message) if error else SimcommError(f"{'.'.join(where)}: {message}")
    return fn


def _module_spec(module: str):
    """The module's import spec, found without running any code (not even its packages' __init__)."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__spec__", None) or True
    spec, path = None, None
    for i, part in enumerate(module.split(".")):
        name = ".".join(module.split(".")[:i + 1])
        spec = sys.modules[name].__spec__ if name in sys.modules else \
            importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        path = spec.submodule_search_locations
        if path is None and i < module.count("."):
            return None
    return spec


def _top_level_names(spec) -> set[str] | None:
    """The names the module's source defines or imports at top level; None when they cannot be known without
    running it (no Python source, a star import, a module __getattr__)."""
    if spec is True or not getattr(spec, "origin", None) or not str(spec.origin).endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return None if "*" in names or "__getattr__" in names else names


def check_program(spec: str, error, where=("workload", "program")) -> None:
    """Find module and function without importing (a scenario's program is code the user runs with `run`)."""
    module, _, func = spec.partition(":")
    found = _module_spec(module)
    if found is None:
        raise error(where, f"cannot find module {module!r} (on sys.path: {', '.join(sys.path[:4])}...)")
    names = _top_level_names(found)
    if names is not None and func not in names:
        raise error(where, f"module {module!r} does not define {func!r}"
                           f"{did_you_mean(func, [n for n in names if not n.startswith('_')])}")


def _without_loss(result):
    """A returned mapping without the loss the report shows in its own column."""
    return {k: v for k, v in result.items() if k != "loss"} if isinstance(result, dict) else result


def _brief(v):
    """Arrays (and lists of them) as their shapes, so a result of weights reads as what it holds."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"<{v.dtype} {'x'.join(map(str, v.shape)) or 'scalar'}>"
    if isinstance(v, (list, tuple)) and v and all(hasattr(x, "shape") for x in v):
        return f"<{len(v)} arrays>"
    if isinstance(v, dict):
        return {k: _brief(x) for k, x in v.items()}
    return v


def _short(v) -> str:
    text = repr(_brief(v)).replace("'<", "<").replace(">'", ">")
    return text if len(text) <= 40 else text[:37] + "..."


# ---- the workload kind -------------------------------------------------------------------------------------
class ProgramWorkload(Workload):
    kind = "program"
    Spec = ProgramSpec

    def check(self, spec: ProgramSpec, scenario, cluster, error) -> None:
        check_ranks(spec.ranks or cluster.num_ranks, cluster, ("workload", "ranks"), error)
        check_program(spec.program, error)

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
        out = RunResult(name, self.kind, cluster, rows, res.simulation)
        sent = bytes_sent(res.simulation, n)
        ranks = []
        for r in range(n):
            first, last, steps = losses(res.results[r])
            ranks.append({"rank": r, **(sent[r] if sent else {}), "loss_first": first, "loss_last": last,
                          "steps": steps})
        out.details["ranks"] = ranks
        return out

    def summary(self, result: RunResult) -> list[dict]:
        return [{"ranks": len(result.rows), "elapsed": result.elapsed,
                 "collective_time": max((r["collective_time"] for r in result.rows), default=0.0)}]

    def report(self, result: RunResult) -> list:
        extra = result.details.get("ranks") or [{} for _ in result.rows]
        has_sent = any("collective" in e for e in extra)
        has_loss = any(e.get("steps") for e in extra)
        headers = ["rank", "device", "finish (us)", "in collectives (us)"]
        headers += ["sent by collectives", "sent point-to-point"] if has_sent else []
        headers += ["loss (first -> last)"] if has_loss else []
        table = []
        for r, e in zip(result.rows, extra):
            row = [r["rank"], r["device"], r["finish"] * 1e6, r["collective_time"] * 1e6]
            if has_sent:
                row += [format_size(e["collective"]),
                        f"{format_size(e['p2p'])} in {e['p2p_messages']} message{'s' * (e['p2p_messages'] != 1)}"]
            if has_loss:
                row.append("-" if e.get("loss_last") is None else
                           f"{e['loss_first']:.6g} -> {e['loss_last']:.6g} ({e['steps']} steps)")
            table.append(row + [_short(_without_loss(r["result"]) if has_loss else r["result"])])
        blocks = [("ranks", headers + ["result"], table)]
        if not has_sent:
            blocks.append("bytes sent per rank are counted from recorded flows: run with model.detail 'flows' "
                          "(the default up to 64 ranks) to see them")
        return blocks


WORKLOAD = ProgramWorkload()
