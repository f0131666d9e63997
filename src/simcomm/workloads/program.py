"""Rank programs: ordinary torch.distributed-style code run on every rank (simcomm.spawn), named in a scenario as
'package.module:function'. A scenario with a program is code you run: only `simcomm run` imports and calls it.

The module is found in the scenario file's directory first, then the working directory, then the installed
packages (as `python script.py` finds modules next to the script). Strings with units in `args` reach the program
as numbers: sizes ('64MiB') as bytes, times ('2ms') as seconds, rates ('50GB/s') as bytes/s.
"""
from __future__ import annotations

import ast
import importlib
import importlib.machinery
import inspect
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from ..distributed.spawn import MAX_RANKS, spawn
from ..errors import SimcommError
from ..fields import Base, described
from ..vocab import did_you_mean
from ..engine import resolve_detail
from .base import RunResult, Workload
from .checks import check_ranks
from .traffic import bytes_sent, losses
from ..units import UnitError, format_size, parse_rate, parse_size, parse_time


# ---- the spec ----------------------------------------------------------------------------------------------
class ProgramSpec(Base):
    """A rank program in the style of torch.distributed, run on every rank (simcomm.spawn). A scenario with a
    program is code you run: `simcomm run` imports and calls it; `simcomm validate` finds the module and the
    function without importing anything (`simcomm validate --import` imports it too)."""

    kind: Literal["program"] = described(doc="program")
    program: str = described(doc="'package.module:function', called as function(rank, *args)")
    ranks: int | None = described(None, "number of ranks (default: every rank of the cluster)", ge=1, le=4096)
    args: list[Any] = described([], "extra positional arguments; strings with units become numbers: sizes "
                                "('64MiB') bytes, times ('2ms') seconds, rates ('50GB/s') bytes/s", "list")

    @field_validator("program")
    @classmethod
    def _program(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", v.strip()):
            raise ValueError("expected 'package.module:function'")
        return v.strip()



_WITH_UNIT = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*[^\d\s.+-]\S*\s*")


def with_units(value):
    """`value` with every string that is a number and a unit ('64MiB', '2 ms', '50GB/s') turned into that number in
    SI units: a size in bytes (int), a time in seconds, a rate in bytes/s; anything else as it was."""
    if isinstance(value, list):
        return [with_units(v) for v in value]
    if isinstance(value, dict):
        return {k: with_units(v) for k, v in value.items()}
    if isinstance(value, str) and _WITH_UNIT.fullmatch(value):
        for parse in (parse_size, parse_time, parse_rate):
            try:
                return parse(value)
            except UnitError:
                pass
    return value


@contextmanager
def importable_from(directory: str | None):
    """Modules are found in `directory` (the scenario file's), then the working directory, then as usual; a
    module imported earlier from elsewhere under the name of one in `directory` is forgotten first."""
    first = [d for d in (directory, os.getcwd()) if d]
    saved = list(sys.path)
    sys.path[:0] = first
    try:
        yield
    finally:
        sys.path[:] = saved


def _forget_shadowed(module: str, directory: str | None) -> None:
    top = module.split(".")[0]
    old = sys.modules.get(top)
    here = Path(directory or os.getcwd())
    if old is None or not ((here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()):
        return
    where = getattr(old, "__file__", None)
    if where is None or Path(where).resolve().is_relative_to(here.resolve()):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def _looked_in(directory: str | None) -> str:
    return (f"{directory}, " if directory else "") + "the working directory and the installed packages"


def resolve_program(spec: str, where=("workload", "program"), error=None, directory: str | None = None):
    """Import the program's module (from `directory` first, see importable_from) and return its function (this
    runs the module's code)."""
    module, _, func = spec.partition(":")
    try:
        with importable_from(directory):
            _forget_shadowed(module, directory)
            mod = importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure to import is the user's to fix
        message = f"cannot import module {module!r} (looked in {_looked_in(directory)}): {type(exc).__name__}: {exc}"
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


def check_program(spec: str, error, where=("workload", "program"), directory: str | None = None) -> None:
    """Find module and function without importing (a scenario's program is code the user runs with `run`)."""
    module, _, func = spec.partition(":")
    with importable_from(directory):
        _forget_shadowed(module, directory)
        found = _module_spec(module)
    if found is None:
        raise error(where, f"cannot find module {module!r} (looked in {_looked_in(directory)})")
    names = _top_level_names(found)
    if names is not None and func not in names:
        raise error(where, f"module {module!r} does not define {func!r}"
                           f"{did_you_mean(func, [n for n in names if not n.startswith('_')])}")


def _check_arguments(fn, args: tuple, spec: str) -> None:
    """function(rank, *args) must be a call the function takes (else every rank failed with a TypeError)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: the call itself will tell
        return
    try:
        signature.bind(0, *args)
    except TypeError as exc:
        empty = inspect.Parameter.empty
        bare = signature.replace(parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
                                 return_annotation=empty)
        raise SimcommError(f"workload.args: {spec}{bare} is called as function(rank, *args) with "
                           f"{len(args)} argument{'s' * (len(args) != 1)} after the rank: {exc}") from None


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
        if spec.ranks is None and cluster.num_ranks > MAX_RANKS:  # the limit `run` (simcomm.spawn) applies
            raise error(("workload",), f"a rank program runs one thread per rank, at most {MAX_RANKS:,}; the "
                                       f"cluster has {cluster.num_ranks:,} ranks: give workload.ranks or use fewer "
                                       "nodes")
        check_program(spec.program, error, directory=scenario.directory)

    def run(self, spec: ProgramSpec, scenario, cluster, name: str, detail: str | None,
            progress=None) -> RunResult:
        model = scenario.model
        n = spec.ranks or cluster.num_ranks
        forced = model.algorithm or {}
        fn = resolve_program(spec.program, directory=scenario.directory)
        args = tuple(with_units(spec.args))
        _check_arguments(fn, args, spec.program)
        with importable_from(scenario.directory):  # the program may import its neighbours as it runs
            res = spawn(fn, args, n, cluster, algorithm=forced.get("*", forced or None),
                        protocol=model.protocol, numerics=model.numerics,
                        detail=resolve_detail(detail or model.detail, n))
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

    def ranks_used(self, result: RunResult) -> int:
        return len(result.rows)

    def summary(self, result: RunResult) -> list[dict]:
        return [{"ranks": len(result.rows), "elapsed": result.elapsed,
                 "collective_time": max((r["collective_time"] for r in result.rows), default=0.0)}]

    def report(self, result: RunResult) -> list:
        extra = result.details.get("ranks") or [{} for _ in result.rows]
        has_sent = any("collective" in e for e in extra)
        has_axes = any("by_axis" in e for e in extra)
        has_loss = any(e.get("steps") for e in extra)
        headers = ["rank", "device", "finish (us)", "in collectives (us)"]
        headers += ["sent by collectives", "sent point-to-point"] if has_sent else []
        headers += ["sent by axis"] if has_axes else []
        headers += ["loss (first -> last)"] if has_loss else []
        table = []
        for r, e in zip(result.rows, extra):
            row = [r["rank"], r["device"], r["finish"] * 1e6, r["collective_time"] * 1e6]
            if has_sent:
                row += [format_size(e["collective"]),
                        f"{format_size(e['p2p'])} in {e['p2p_messages']} message{'s' * (e['p2p_messages'] != 1)}"]
            if has_axes:
                row.append(", ".join(f"{axis} {format_size(n)}" for axis, n in e.get("by_axis", {}).items()) or "-")
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
