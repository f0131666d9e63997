"""nccl-tests output, read back: every form the tools print.

Text logs: the current 2.x layout (version, "Collective test starting", parameter and device lines, two column
header lines, rows, "# Out of bounds values", "# Avg bus bandwidth", "Collective test concluded"), older layouts
with no root column and an `error` column instead of `#wrong`, `#wrong` as N/A (-c 0), trimmed tables (size,
time, algbw, busbw), sizes with digit separators, and lines prefixed by MPI launchers (`[1,0]<stdout>:` from
Open MPI's --tag-output, ` 0: ` from srun --label). Several tables may follow each other; a comment line before
a header (e.g. "# all_reduce, forced Ring") titles the next table. JSON: the -J document (see
report/nccl_tests.py), read by nccl-tests' field names.

Which collective a table measured comes from the log when it says ("Collective test starting: all_gather_perf",
a command line, a title naming one); otherwise the caller says. The rank count comes from the device lines, the
JSON config, or, failing those, from busbw/algbw (nccl-tests' busbw factor).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SimcommError
from ..vocab import COLL_ALIASES, KINDS, busbw_factor

_PREFIXES = (re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?"), re.compile(r"^\s*\d+:\s"))
_NAMES = sorted(set(KINDS) | set(COLL_ALIASES) | {"alltoall", "sendrecv"}, key=len, reverse=True)
_NAME_RE = re.compile(r"\b(" + "|".join(_NAMES) + r")(?:_perf)?\b")
_VERSION_RE = re.compile(r"nccl-tests version (\S+)")
_NCCL_RE = re.compile(r"(?:NCCL version|nccl-library=)\s*(\S+)")
_INT_RE = re.compile(r"^\d[\d_,]*$")


class LogError(SimcommError):
    """A log that cannot be read as nccl-tests output; says which file and line."""


@dataclass
class Figures:
    time_us: float
    algbw: float  # GB/s (1e9 bytes/s)
    busbw: float
    wrong: str = ""  # "0", "N/A", or the old error column's value


@dataclass
class Row:
    size: int  # nccl-tests' S, bytes
    count: int | None
    dtype: str | None
    redop: str | None
    root: int | None
    out_of_place: Figures
    in_place: Figures | None = None

    def figures(self, in_place: bool = False) -> Figures:
        return self.in_place if in_place and self.in_place is not None else self.out_of_place


@dataclass
class Table:
    """One sweep: the rows under one column header, and what the log says about them."""

    rows: list[Row] = field(default_factory=list)
    collective: str | None = None
    title: str = ""
    ranks: int | None = None  # from the device lines or the JSON config
    meta: dict = field(default_factory=dict)  # versions, parameter line, footer values, source line

    @property
    def dtype(self) -> str | None:
        return self.rows[0].dtype if self.rows else None

    def inferred_ranks(self, collective: str | None = None) -> int | None:
        """Ranks from busbw / algbw (nccl-tests' factor inverted), when the log has no count: the one whole number
        that every row's ratio allows, given that nccl-tests prints both to 0.01 GB/s (None when the rows allow
        none or several: a ratio near its limit says little, 1.99 could be any of 150-250 ranks)."""
        kind = collective or self.collective
        if kind is None or busbw_factor(kind, 2) == busbw_factor(kind, 3):
            return None
        limit = 2.0 if kind == "all_reduce" else 1.0  # busbw / algbw = limit * (n - 1) / n

        def ranks(ratio: float) -> float:
            return limit / (limit - ratio) if ratio < limit else math.inf
        low, high = 2.0, math.inf
        for r in self.rows:
            algbw, busbw = r.out_of_place.algbw, r.out_of_place.busbw
            if not (algbw > _PRINTED and math.isfinite(algbw) and math.isfinite(busbw)):
                continue
            low = max(low, ranks((busbw - _PRINTED) / (algbw + _PRINTED)))
            high = min(high, ranks((busbw + _PRINTED) / (algbw - _PRINTED)))
        if not low <= high < math.inf or math.floor(high) != math.ceil(low):
            return None
        return math.ceil(low)


_PRINTED = 0.005  # GB/s: nccl-tests prints algbw and busbw with two decimals


def canonical_collective(name: str | None) -> str | None:
    if not name:
        return None
    key = name.strip().lower().removesuffix("_perf")
    key = COLL_ALIASES.get(key, key)
    return key if key in KINDS else None


def _strip(line: str) -> str:
    for rx in _PREFIXES:
        line = rx.sub("", line, count=1)
    return line.rstrip("\n")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _header(tokens: list[str]) -> list[str] | None:
    """Column names if this comment line is nccl-tests' column header (`size count type ...` or `size time ...`)."""
    names = [t.lower() for t in tokens]
    if not names or names[0] != "size" or "time" not in names:
        return None
    return names


def _row(tokens: list[str], columns: list[str]) -> Row | None:
    if len(tokens) != len(columns) or not _INT_RE.match(tokens[0]):
        return None
    size = int(tokens[0].replace("_", "").replace(",", ""))
    values: dict[str, str] = {}
    blocks: list[dict[str, str]] = []
    for name, tok in zip(columns, tokens):
        if name in ("time", "algbw", "busbw", "#wrong", "error", "wrong"):
            if name == "time":
                blocks.append({})
            blocks[-1][name] = tok
        else:
            values[name] = tok
    if not blocks:
        return None

    def figures(b):
        wrong = b.get("#wrong", b.get("error", b.get("wrong", "")))
        return Figures(_number(b["time"]), _number(b.get("algbw", "nan")), _number(b.get("busbw", "nan")), wrong)

    root = values.get("root")
    count = values.get("count")
    return Row(size, int(count.replace("_", "").replace(",", "")) if count and _INT_RE.match(count) else None,
               values.get("type"), values.get("redop"), int(root) if root and re.fullmatch(r"-?\d+", root) else None,
               figures(blocks[0]), figures(blocks[1]) if len(blocks) > 1 else None)


def parse_text(text: str, source: str = "log") -> list[Table]:
    """Every table in an nccl-tests text log (raises LogError if there is none)."""
    reader = _LogReader(source)
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = _strip(raw).strip()
        if stripped.startswith("#"):
            reader.comment(stripped.lstrip("#").strip(), number)
        elif stripped:
            reader.data(stripped)
    tables = [t for t in reader.tables if t.rows]
    if not tables:
        raise LogError(f"{source}: no nccl-tests table found (expected a '#  size  count  type ...' header "
                       f"followed by rows)")
    return tables


class _LogReader:
    """The state of reading one log line by line: the tables so far, the one rows go to, and what the comment
    lines said of the next (collective, title, device count, versions)."""

    def __init__(self, source: str):
        self.source = source
        self.tables: list[Table] = []
        self.meta: dict = {}
        self.collective: str | None = None
        self.title = ""
        self.devices = 0
        self.columns: list[str] | None = None
        self.current: Table | None = None

    def _new_table(self, number: int, ranks: int | None) -> None:
        self.current = Table(collective=self.collective, title=self.title, ranks=ranks,
                             meta=dict(self.meta, source=f"{self.source}:{number}"))
        self.tables.append(self.current)
        self.title = ""

    def comment(self, body: str, number: int) -> None:
        """A '#' line: a column header, a run's metadata, a title, or a summary of the table above."""
        tokens = body.split()
        names = _header(tokens)
        if names is not None:
            self.columns = names
            self._new_table(number, self.devices or None)
            return
        if tokens[:1] == ["(B)"] or body.startswith("out-of-place") or not body:
            return
        self._versions(body)
        if not self._setting(body):
            self._title(body, number)

    def _versions(self, body: str) -> None:
        for key, pattern in (("nccl_tests_version", _VERSION_RE), ("nccl_version", _NCCL_RE)):
            m = pattern.search(body)
            if m:
                self.meta[key] = m.group(1)

    def _setting(self, body: str) -> bool:
        """Read a line of the run's settings or the table's summary; False if the line is none of those."""
        if body.startswith("Collective test starting:"):
            self.collective = canonical_collective(body.split(":", 1)[1]) or self.collective
            self.devices = 0
        elif body.startswith("nThread"):
            self.meta["parameters"] = body
        elif re.match(r"Rank\s+\d+\s+Group", body):
            self.devices += 1
        elif body.startswith("Out of bounds values"):
            if self.current is not None:
                self.current.meta["out_of_bounds"] = body.split(":", 1)[1].strip()
        elif body.startswith("Avg bus bandwidth"):
            if self.current is not None:
                self.current.meta["avg_busbw"] = _number(body.split(":", 1)[1].split()[0])
        else:
            return body.startswith("Collective test concluded")
        return True

    def _title(self, body: str, number: int) -> None:
        """A title ("# all_reduce, forced Ring") names the table it precedes; after rows, it starts a new table
        under the same column header."""
        m = _NAME_RE.search(body.lower())
        if not m or body.startswith("Using"):
            return
        self.title = body
        self.collective = canonical_collective(m.group(1)) or self.collective
        if self.current is None or self.columns is None:
            return
        if self.current.rows:
            self._new_table(number, self.current.ranks)
        else:
            self.current.collective, self.current.title = self.collective, self.title
            self.title = ""

    def data(self, stripped: str) -> None:
        """A line without '#': an echoed command line (all_gather_perf -b 8 ...) or a row of the table."""
        m = _NAME_RE.search(stripped.lower())
        if m and "_perf" in stripped and self.columns is None:
            self.collective = canonical_collective(m.group(1))
            return
        if self.columns is None or self.current is None:
            return
        row = _row(stripped.split(), self.columns)
        if row is not None:
            self.current.rows.append(row)


def _float(value) -> float:
    """A JSON value as a float; NaN for anything that is not a number (the row is then dropped with a note)."""
    if isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _whole(value, what: str, source: str, i: int) -> int:
    """A JSON field that holds a whole number (nccl-tests writes some as strings, such as a root of "-1")."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())
                                       or (isinstance(value, str) and _INT_RE.match(value.removeprefix("-")))):
        raise LogError(f"{source}: results[{i}]: {what} must be a whole number, got {value!r}"[:300])
    return int(value.replace("_", "").replace(",", "")) if isinstance(value, str) else int(value)


def _figures_from(obj) -> Figures | None:
    if not isinstance(obj, dict):
        return None
    time_us = obj.get("time", obj.get("time_us", obj.get("time(us)")))
    if time_us is None:
        return None
    wrong = obj.get("nwrong", obj.get("wrong", obj.get("#wrong", "")))
    return Figures(_float(time_us), _float(obj.get("alg_bw", obj.get("algbw", math.nan))),
                   _float(obj.get("bus_bw", obj.get("busbw", math.nan))),
                   "N/A" if wrong is None else str(int(wrong))
                   if isinstance(wrong, (int, float)) and math.isfinite(wrong) else str(wrong))


def parse_json(doc, source: str = "json") -> list[Table]:
    """Tables from an nccl-tests -J document (results grouped by test name)."""
    if isinstance(doc, list):
        doc = {"results": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise LogError(f"{source}: not an nccl-tests JSON document (expected an object with a 'results' list)")
    ranks = len(doc["devices"]) if isinstance(doc.get("devices"), list) and doc["devices"] else None
    by_name: dict[str, Table] = {}
    for i, res in enumerate(doc["results"]):
        if not isinstance(res, dict) or "size" not in res:
            raise LogError(f"{source}: results[{i}] has no 'size'")
        oop = _figures_from(res.get("out_of_place", res.get("outOfPlace", res.get("oop"))))
        ip = _figures_from(res.get("in_place", res.get("inPlace", res.get("ip"))))
        if oop is None:
            oop = _figures_from(res)
        if oop is None:
            raise LogError(f"{source}: results[{i}] has no out-of-place time")
        name = str(res.get("name") or doc.get("test") or "")
        average = doc.get("average_bus_bandwidth")
        table = by_name.setdefault(name, Table(collective=canonical_collective(name), ranks=ranks, meta={
            "source": source, "nccl_tests_version": doc.get("version"),
            "avg_busbw": average.get("bandwidth") if isinstance(average, dict) else None}))
        root, count, dtype = res.get("root"), res.get("count"), res.get("type")
        table.rows.append(Row(_whole(res["size"], "size", source, i),
                              None if count is None else _whole(count, "count", source, i),
                              None if dtype is None else str(dtype), res.get("redop"),
                              None if root is None else _whole(root, "root", source, i), oop, ip))
    if not by_name:
        raise LogError(f"{source}: the JSON document has no results")
    return list(by_name.values())


def parse_log(text: str, source: str = "log") -> list[Table]:
    """Text or JSON, whichever the content is."""
    head = text.lstrip()
    if head[:1] == "{" or (head[:1] == "[" and not _PREFIXES[0].match(head)):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LogError(f"{source}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        return parse_json(doc, source)
    return parse_text(text, source)


def read_log(path) -> list[Table]:
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise LogError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_log(text, str(path))
