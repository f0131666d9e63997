"""Load a scenario: safe YAML with line numbers, schema validation, the cluster, and cross-checks.

Every problem becomes a ScenarioError naming the file, the line, the key path, what was expected and what was
found; nothing a user writes in a scenario file may end in a traceback.
"""
from __future__ import annotations

import copy
import re
import reprlib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, Tag, ValidationError

from ..errors import SimcommError
from ..vocab import did_you_mean
from ..workloads import workload
from ..workloads.checks import check_algorithm
from .schema import Scenario

MAX_FILE = 1 << 20


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ScenarioError(SimcommError):
    """A scenario file is malformed; `problems` lists each with file, line and key path."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))

    @property
    def path(self) -> str:
        return self.problems[0].path if self.problems else ""

    @property
    def line(self) -> int | None:
        return self.problems[0].line if self.problems else None


@dataclass
class Source:
    """Where a scenario came from: its name, raw data and the line of every key path."""

    name: str
    data: Any = None
    lines: dict = field(default_factory=dict)
    directory: str | None = None  # of the file it was read from (None for text)

    def line(self, path) -> int | None:
        key = tuple(str(p) for p in path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), 1)

    def error(self, path, message: str) -> ScenarioError:
        return ScenarioError([Problem(self.name, self.line(path), dotted(path), message)])


def dotted(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_SHORT = reprlib.Repr()  # (keyword arguments need Python 3.12)
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 50, 50, 40, 4, 4, 2


def found(value) -> str:
    """A value as an error message shows it: bounded, whatever its size."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = _SHORT.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


MAX_VALUES = 100_000  # values a scenario may hold once its YAML aliases are expanded


def _expanded(node, memo: dict, path: tuple, src: str) -> int:
    """How many values node stands for once aliases are expanded (each shared node counted every time it is
    used); a ScenarioError for an alias that refers to itself."""
    key = id(node)
    if key in memo:
        if memo[key] is None:
            raise ScenarioError([Problem(src, node.start_mark.line + 1, dotted(path),
                                         "a YAML alias refers to the value that contains it (a cycle)")])
        return memo[key]
    memo[key] = None
    total = 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded(k, memo, path, src) + _expanded(v, memo, path + (str(k.value),), src)
    elif isinstance(node, yaml.SequenceNode):
        total += sum(_expanded(v, memo, path + (i,), src) for i, v in enumerate(node.value))
    memo[key] = total
    return total


def _bound_expansion(node, src: str) -> None:
    """Refuse documents whose aliases expand to more than MAX_VALUES values, naming the key that does."""
    memo: dict = {}
    if _expanded(node, memo, (), src) <= MAX_VALUES:
        return
    path, here = (), node
    while isinstance(here, yaml.MappingNode):  # the deepest key whose value alone is too large
        k, v = max(here.value, key=lambda kv: memo[id(kv[1])])
        if memo[id(v)] <= MAX_VALUES:
            break
        path, here = path + (str(k.value),), v
    raise ScenarioError([Problem(src, here.start_mark.line + 1, dotted(path),
                                 f"expands to {memo[id(here)]:,} values through YAML aliases and anchors; at most "
                                 f"{MAX_VALUES:,} are allowed")])


# ---- YAML with line numbers ------------------------------------------------------------------------------------
def _index(node, path: tuple, lines: dict, seen: set, src: str) -> None:
    if id(node) in seen:  # an alias: indexed once (also defuses "billion laughs" documents)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else "?"
            line = k.start_mark.line + 1
            if key in first and key != "<<":
                raise ScenarioError([Problem(src, line, dotted(path + (key,)),
                                             f"duplicate key (first given on line {first[key]})")])
            first[key] = line
            lines[path + (key,)] = line
            _index(v, path + (key,), lines, seen, src)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines[path + (str(i),)] = v.start_mark.line + 1
            _index(v, path + (str(i),), lines, seen, src)


def parse_yaml(text: str, name: str) -> Source:
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # the reader already rejects unprintable characters
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError([Problem(name, 1, "", "the file is empty; expected a mapping with keys cluster "
                                                      "and workload")])
        src = Source(name, None, {(): node.start_mark.line + 1})
        _bound_expansion(node, name)
        _index(node, (), src.lines, set(), name)
        src.data = loader.construct_document(node)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        raise ScenarioError([Problem(name, line, "", f"invalid YAML: unacceptable character #x{code:04x}")]) \
            from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        what = " ".join(str(x) for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x)
        raise ScenarioError([Problem(name, mark.line + 1 if mark else None, "",
                                     f"invalid YAML: {what or exc}")]) from None
    except RecursionError:
        raise ScenarioError([Problem(name, None, "", "invalid YAML: nested too deeply")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(src.data, dict):
        raise ScenarioError([Problem(name, src.line(()), "", "expected a mapping with keys cluster and workload "
                                                               f"at the top level, found {found(src.data)}")])
    return src


def read_source(path) -> Source:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ScenarioError([Problem(str(path), None, "", f"cannot read the scenario: {exc.strerror or exc}")]) \
            from None
    if len(raw) > MAX_FILE:
        raise ScenarioError([Problem(str(path), None, "", f"expected a scenario under 1 MiB, found {len(raw)} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError([Problem(str(path), None, "", f"expected UTF-8 text: {exc.reason} at byte {exc.start}")]) \
            from None
    src = parse_yaml(text, str(path))
    src.directory = str(p.resolve().parent)
    return src


# ---- pydantic errors -> problems ---------------------------------------------------------------------------------
def _unwrap(tp):
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType) and sum(a is not type(None) for a in get_args(tp)) == 1:
            tp = next(a for a in get_args(tp) if a is not type(None))
        else:
            return tp


def _tags(tp) -> dict:
    out = {}
    for a in get_args(tp):
        inner, tag = a, None
        if get_origin(a) is Annotated:
            inner = get_args(a)[0]
            tag = next((m.tag for m in get_args(a)[1:] if isinstance(m, Tag)), None)
        if tag is None and isinstance(inner, type) and issubclass(inner, BaseModel) and "kind" in inner.model_fields:
            tag = get_args(inner.model_fields["kind"].annotation)[0]
        if tag is not None:
            out[tag] = inner
    return out


def walk(loc) -> tuple[tuple, type | None, type | None]:
    """Pydantic's loc without union tags; the model holding the last key; the union at the end, if any."""
    tp, path, parent = Scenario, [], None
    for item in loc:
        tp = _unwrap(tp)
        if get_origin(tp) in (Union, types.UnionType):
            tags = _tags(tp)
            if item in tags:
                tp = tags[item]
                continue
            tp = None
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            parent = tp
            f = tp.model_fields.get(item) if isinstance(item, str) else None
            tp = f.annotation if f else None
        else:
            parent = None
            origin = get_origin(tp)
            tp = get_args(tp)[0] if origin is list else (get_args(tp)[1] if origin is dict else None)
        path.append(item)
    tp = _unwrap(tp)
    return tuple(path), parent, tp if get_origin(tp) in (Union, types.UnionType) else None


# pydantic's wording -> a scenario writer's (a mapping is what YAML calls a dictionary or an object).
_PLAIN = ((re.compile(r"a valid dictionary( or (instance of \w+|object to extract fields from))?"), "a mapping"),
          (re.compile(r"^String should have at least (\d+) characters?"), r"at least \1 character(s)"),
          (re.compile(r"^String should have at most (\d+) characters?"), r"at most \1 character(s)"))


def _expected(msg: str) -> str:
    for pattern, repl in _PLAIN:
        msg = pattern.sub(repl, msg)
    for prefix, repl in (("Input should be ", "expected "), ("Value error, ", ""), ("Assertion failed, ", "")):
        if msg.startswith(prefix):
            return repl + msg[len(prefix):]
    if not msg:
        return "invalid value"
    msg = msg[0].lower() + msg[1:]
    return msg if msg.startswith("expected ") else "expected " + msg  # custom errors may already say it


def problems_from(exc: ValidationError, src: Source) -> list[Problem]:
    out = []
    for err in exc.errors(include_url=False):
        path, parent, union = walk(err["loc"])
        kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
        where = path
        if kind == "missing":
            where, message = path[:-1], f"missing required key {path[-1]!r}"
        elif kind == "extra_forbidden":
            keys = list(parent.model_fields) if parent else []
            message = f"unknown key {path[-1]!r}{did_you_mean(path[-1], keys)}; expected one of: {', '.join(keys)}"
        elif kind == "union_tag_not_found":
            tags = list(_tags(union)) if union else []
            message = f"missing required key 'kind' (one of: {', '.join(tags)})"
        elif kind == "union_tag_invalid":
            tags = list(_tags(union)) if union else []
            where = path + ("kind",)
            message = (f"expected one of: {', '.join(tags)}{did_you_mean(ctx.get('tag'), tags)}, "
                       f"found {found(value.get('kind') if isinstance(value, dict) else value)}")
        elif kind == "literal_error":
            choices = [c.strip("'") for c in str(ctx.get("expected", "")).replace(" or ", ", ").split(", ")]
            message = f"expected one of: {', '.join(choices)}{did_you_mean(value, choices)}, found {found(value)}"
        elif kind == "too_short":
            message = f"expected at least {ctx.get('min_length')} item(s), found {ctx.get('actual_length')}"
        elif kind == "too_long":
            message = f"expected at most {ctx.get('max_length')} items, found {ctx.get('actual_length')}"
        else:
            message = _expected(err["msg"])
            if kind != "value_error" or not isinstance(value, (dict, list)):
                message += f", found {found(value)}"
        out.append(Problem(src.name, src.line(where), dotted(where), message))
    return sorted(out, key=lambda p: (p.line or 0, p.path))


# ---- the loaded scenario ---------------------------------------------------------------------------------------
@dataclass
class LoadedScenario:
    """A validated scenario with its built cluster."""

    scenario: Scenario
    cluster: Any
    source: Source

    @property
    def name(self) -> str:
        return self.scenario.name or Path(self.source.name).stem


def validate_data(src: Source) -> LoadedScenario:
    """Schema, cluster and cross-checks for data already parsed into `src`."""
    try:
        scenario = Scenario.model_validate(src.data)
    except ValidationError as exc:
        raise ScenarioError(problems_from(exc, src)) from None
    scenario._directory = src.directory
    cluster = build(scenario, src)
    check(scenario, cluster, src)
    return LoadedScenario(scenario, cluster, src)


NO_INTERFERENCE = {"model.interference": False}  # the CLI's --no-interference


def load_scenario(path, values: dict[str, Any] | None = None) -> LoadedScenario:
    """Read, check and build a scenario file; `values` sets dotted key paths first (as a sweep point does)."""
    src = read_source(path)
    if values:
        src = Source(src.name, with_values(src.data if isinstance(src.data, dict) else {}, values), src.lines,
                     src.directory)
    return validate_data(src)


def load_text(text: str, name: str = "<scenario>") -> LoadedScenario:
    return validate_data(parse_yaml(text, name))


def build(scenario: Scenario, src: Source):
    from ..hardware import Dimensions, HardwareError, build_astra_cluster, build_cluster
    from .schema import DimsCluster
    c = scenario.cluster
    knobs = scenario.model
    tuning = {k: v for k, v in (("interference", knobs.interference), ("min_channels", knobs.min_channels),
                                ("max_channels", knobs.max_channels)) if v is not None and v is not True}
    try:
        if isinstance(c, DimsCluster):
            return build_astra_cluster(Dimensions(tuple(c.topology), tuple(c.npus_count), tuple(c.bandwidth),
                                                  tuple(c.latency), c.device, c.memory_bandwidth, c.compute_rate),
                                       tuning)
        overrides = {k: v for k, v in (c.overrides.model_dump() if c.overrides else {}).items() if v is not None}
        options = {k: v for k, v in (c.fabric_options.model_dump() if c.fabric_options else {}).items()
                   if v is not None}
        return build_cluster(c.preset, c.nodes, c.fabric, c.ranks_per_node, overrides, options,
                             tuning_changes=tuning)
    except (HardwareError, SimcommError, ValueError) as exc:
        raise src.error(_cluster_key(str(exc), src.data.get("cluster")), str(exc)) from None


def _cluster_key(message: str, given) -> tuple:
    """The cluster key a hardware error is about, when it names one the file gives."""
    hints = {"ranks_per_node": "ranks_per_node", "override": "overrides", "nvlink_latency": "overrides",
             "option": "fabric_options", "fabric": "fabric", "nodes": "nodes"}
    for word, key in hints.items():
        if word in message and isinstance(given, dict) and key in given:
            return ("cluster", key)
    return ("cluster",)


def check(s: Scenario, cluster, src: Source) -> None:
    """Cross-checks that need the cluster: the workload kind's own, then forced algorithm names, which must exist
    even where no collective of that kind runs."""
    workload(s.workload.kind).check(s.workload, s, cluster, src.error)
    for key, name in (s.model.algorithm or {}).items():
        path = ("model", "algorithm") if key == "*" else ("model", "algorithm", key)
        check_algorithm(name, [key] if key != "*" else [], path, src.error)


# ---- dotted-path edits (sweeps) --------------------------------------------------------------------------------
def with_values(data: dict, values: dict[str, Any]) -> dict:
    """A deep copy of `data` with each dotted key path ('cluster.nodes', 'workload.groups.0.size') set."""
    out = copy.deepcopy(data)
    for dotted_key, value in values.items():
        parts = str(dotted_key).split(".")
        here = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(here, list) and part.isdigit() and int(part) < len(here):
                if last:
                    here[int(part)] = value
                else:
                    here = here[int(part)]
            elif isinstance(here, dict):
                if last:
                    here[part] = value
                else:
                    here = here.setdefault(part, {})
            else:
                raise ValueError(f"cannot set {dotted_key!r}: {'.'.join(parts[:i]) or 'the top level'} is not a "
                                 "mapping")
    return out
