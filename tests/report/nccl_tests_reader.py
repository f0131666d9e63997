"""A reader of nccl-tests output written the way tooling around nccl-tests reads it, from nccl-tests' formats
(src/util.cu, 2.19.6) and not from simcomm's code: the version line's regex, the parameter and device lines,
columns found by the header's names, `int()` on #wrong, `float()` on the figures, and the -J document's keys and
shapes. Strict: anything it does not expect raises ValueError, so a test reading simcomm's output through it fails
on any difference a script would trip on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

VERSION = re.compile(r"^# nccl-tests version (\d+)\.(\d+)\.(\d+) nccl-headers=(\d+) nccl-library=(\d+)$")
START = re.compile(r"^# Collective test starting: (\w+)$")
PARAMS = re.compile(r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+(?:\.\d+)?)\((factor|bytes)\) "
                    r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)$")
DEVICE = re.compile(r"^#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) \[([0-9a-f]{4}:[0-9a-f]{2}:"
                    r"[0-9a-f]{2})\] (.+)$")
OUT_OF_BOUNDS = re.compile(r"^# Out of bounds values : (\d+) (OK|FAILED)$")
AVG_BUSBW = re.compile(r"^# Avg bus bandwidth    : (\S+) ?(OK|FAILED)?$")
CONCLUDED = re.compile(r"^# Collective test concluded: (\w+)$")
FIGURE_WIDTH = {"time": 7, "algbw": 6, "busbw": 6}  # nccl-tests' columns
ROUNDING_SINCE = (2, 17, 3)  # 2 decimals where they fit the column, else 1, else 0


@dataclass
class Log:
    version: tuple | None = None
    nccl: tuple | None = None  # (headers, library) version codes
    test: str | None = None
    params: dict = field(default_factory=dict)
    devices: list = field(default_factory=list)  # dicts per device line
    rows: list = field(default_factory=list)  # dicts: size, count, type, redop, root, and per block its figures
    footer: dict = field(default_factory=dict)
    comments: list = field(default_factory=list)  # comment lines this reader does not know


def _blocks(columns: list[str]) -> list[tuple[str, list[str]]]:
    """(block name, its column names) in order: the columns before the first `time`, then one block per time."""
    blocks, current = [("head", [])], None
    for name in columns:
        if name in ("time", "cputime"):
            current = ("out_of_place" if len(blocks) == 1 else "in_place", [])
            blocks.append(current)
        blocks[-1][1].append(name)
    return blocks


def check_rounding(token: str, width: int) -> None:
    """A figure printed by nccl-tests >= 2.17.3: at most `width` wide, with 2 decimals unless they would not fit."""
    if len(token) > width:
        raise ValueError(f"{token!r} is wider than its {width}-character column")
    decimals = len(token.split(".")[1]) if "." in token else 0
    if decimals < 2 and len(f"{float(token):.{decimals + 1}f}") <= width:
        raise ValueError(f"{token!r}: {decimals + 1} decimals would fit {width} characters (nccl-tests >= 2.17.3)")


def _row(tokens: list[str], columns: list[str], log: Log) -> dict:
    if len(tokens) != len(columns):
        raise ValueError(f"{len(tokens)} fields for {len(columns)} columns: {tokens}")
    values = dict(zip(columns, tokens))  # the head's names are unique
    row = {"size": int(values["size"])}
    for name in ("count", "root"):
        if name in values:
            row[name] = int(values[name])
    row.update({k: values[k] for k in ("type", "redop") if k in values})
    i = 0
    strict = log.version is not None and log.version >= ROUNDING_SINCE
    for block, names in _blocks(columns):
        fields = tokens[i:i + len(names)]
        i += len(names)
        if block == "head":
            continue
        figures = {}
        for name, tok in zip(names, fields):
            if name in FIGURE_WIDTH:
                if strict:
                    check_rounding(tok, FIGURE_WIDTH[name])
                figures[name] = float(tok)
            elif name == "#wrong":
                if tok == "N/A":  # nccl-tests prints N/A only when it does not check (-c 0)
                    if log.params.get("validation", 0) != 0:
                        raise ValueError("#wrong is N/A while the parameter line says validation is on")
                    figures["wrong"] = None
                else:
                    figures["wrong"] = int(tok)
            elif name == "error":  # nccl-tests before 2.13: the largest error, a float
                figures["error"] = float(tok)
            else:
                raise ValueError(f"unknown column {name!r}")
        row[block] = figures
    return row


def read_text(text: str) -> list[Log]:
    """Every run in the text (one per 'Collective test starting', or one for a bare table)."""
    logs, log, columns = [], None, None
    for line in text.splitlines():
        line = line.rstrip()
        if not line:
            continue
        if log is None or (START.match(line) and log.test) or (VERSION.match(line) and log.rows):
            log, columns = Log(), None
            logs.append(log)
        if m := VERSION.match(line):
            log.version = tuple(int(x) for x in m.groups()[:3])
            log.nccl = (int(m.group(4)), int(m.group(5)))
        elif m := START.match(line):
            log.test = m.group(1)
        elif m := PARAMS.match(line):
            keys = ("nthreads", "ngpus", "minbytes", "maxbytes", "step", "step_kind", "warmup", "iters", "agg_iters",
                    "validation", "graph")
            log.params = {k: (v if k == "step_kind" else float(v) if k == "step" else int(v))
                          for k, v in zip(keys, m.groups())}
        elif m := DEVICE.match(line):
            rank, group, pid, host, device, bus, name = m.groups()
            log.devices.append({"rank": int(rank), "group": int(group), "pid": int(pid), "hostname": host,
                                "device": int(device), "bus_id": bus, "name": name})
        elif m := OUT_OF_BOUNDS.match(line):
            log.footer["out_of_bounds"] = (int(m.group(1)), m.group(2))
        elif m := AVG_BUSBW.match(line):
            log.footer["avg_busbw"] = float(m.group(1))
        elif CONCLUDED.match(line):
            log.footer["concluded"] = CONCLUDED.match(line).group(1)
        elif line.startswith("#"):
            names = line.lstrip("#").split()
            if names[:1] == ["size"]:
                columns = names
            elif names and names[0] not in ("(B)", "out-of-place", "Using"):
                log.comments.append(line)
        else:
            if columns is None:
                raise ValueError(f"a row before any column header: {line!r}")
            log.rows.append(_row(line.split(), columns, log))
    return [x for x in logs if x.rows]


# ---- -J ------------------------------------------------------------------------------------------------------------
CONFIG_KEYS = ("nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "warmup_iters", "iterations",
               "aggregated_iterations", "validation", "graph")


def _require(obj, key: str, kind, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"{where}: no {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ValueError(f"{where}.{key}: expected {kind}, got {value!r}")
    return value


def read_json(doc: dict) -> dict:
    """The -J document's fields, by nccl-tests' keys and shapes."""
    out = {"version": _require(doc, "version", str, "doc"), "start_time": _require(doc, "start_time", str, "doc"),
           "args": _require(doc, "args", list, "doc"), "env": doc.get("env")}
    if "env" not in doc:
        raise ValueError("doc: no 'env'")
    config = _require(doc, "config", dict, "doc")
    out["config"] = {k: _require(config, k, int, "config") for k in CONFIG_KEYS}
    devices = _require(doc, "devices", list, "doc")
    out["devices"] = [{k: _require(d, k, int, "device") for k in ("rank", "pid", "device")} for d in devices]
    results = []
    for i, res in enumerate(_require(doc, "results", list, "doc")):
        where = f"results[{i}]"
        row = {"size": _require(res, "size", int, where), "count": _require(res, "count", int, where),
               "type": _require(res, "type", str, where), "redop": _require(res, "redop", str, where),
               "root": int(_require(res, "root", str, where))}
        for block in ("out_of_place", "in_place"):
            b = _require(res, block, dict, where)
            nwrong = b.get("nwrong", "missing")
            if nwrong == "missing" or not (nwrong is None or isinstance(nwrong, (int, float))):
                raise ValueError(f"{where}.{block}.nwrong: expected a number or null, got {nwrong!r}")
            row[block] = {"time": _require(b, "time", (int, float), where),
                          "algbw": _require(b, "alg_bw", (int, float), where),
                          "busbw": _require(b, "bus_bw", (int, float), where), "wrong": nwrong}
        results.append(row)
    out["results"] = results
    oob = _require(doc, "out_of_bounds", dict, "doc")
    out["out_of_bounds"] = (_require(oob, "count", int, "out_of_bounds"), _require(oob, "okay", bool, "out_of_bounds"))
    avg = _require(doc, "average_bus_bandwidth", dict, "doc")
    out["avg_busbw"] = _require(avg, "bandwidth", (int, float), "average_bus_bandwidth")
    if "okay" not in avg:
        raise ValueError("average_bus_bandwidth: no 'okay'")
    return out
