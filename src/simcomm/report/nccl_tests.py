"""nccl-tests' output, as its 2.19.6 release prints it (src/util.cu): version and test start lines, the parameter
line, the devices, the column header, one row per size, the footer and the closing line; and the -J JSON file
with the same content in nccl-tests' own schema.

Rows: sizes and counts as %12li, type %8s, redop and root %6s, then out-of-place and in-place blocks of time,
algbw, busbw and #wrong. Since nccl-tests 2.17.3 a figure is printed with 2 decimals where that fits its column
(7 characters for the time, 6 for algbw and busbw), else 1, else none (`110.07`, `15943.8`). #wrong is an integer
(`%6g`): the simulation moves no data in perf, so nothing can be wrong and it is 0; with `-c 0` (no validation)
nccl-tests prints `N/A`, and so does simcomm. Out-of-place and in-place are the same simulated figures.

simcomm's own notes are `# simcomm:` comment lines (after the device list and before each table); `quiet` leaves
them out, so the output is nccl-tests' lines alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NCCL_TESTS_VERSION = "2.19.6"  # the release whose output this follows
# The NCCL release whose tuner and protocol figures simcomm models (algorithms/protocols.py), as nccl-tests prints
# NCCL's version code: major x 10000 + minor x 100 + patch.
NCCL_VERSION_CODE = 23000
SIM_PID_BASE = 10000  # nccl-tests prints each process's getpid(); simulated process p is SIM_PID_BASE + p


@dataclass
class Header:
    """What nccl-tests' parameter line and device list say: counts per process, the size series and the
    measurement options (nccl-tests' defaults: 5 warm-up and 20 timed iterations, validation on)."""

    test: str  # the binary's name, e.g. "all_reduce_perf"
    threads: int = 1
    gpus: int = 1  # per thread
    minbytes: int = 0
    maxbytes: int = 0
    factor: float | None = 2.0  # None: fixed increments of stepbytes
    stepbytes: int = 0
    iters: int = 20
    warmup: int = 5
    agg_iters: int = 1
    validation: int = 1  # -c: 0 prints #wrong as N/A
    graph: int = 0
    comments: list = field(default_factory=list)  # '# simcomm: ...' lines after the device list
    quiet: bool = False  # leave simcomm's own lines (and JSON fields) out
    args: list = field(default_factory=list)  # the command line, for -J
    env: dict = field(default_factory=dict)  # the NCCL_* variables, for -J


# ---- text --------------------------------------------------------------------------------------------------------
def nccl_figure(value: float, width: int) -> str:
    """A figure as nccl-tests >= 2.17.3 prints it in a column `width` wide: 2 decimals if they fit, else 1, else 0."""
    for decimals in (2, 1):
        text = f"{value:{width}.{decimals}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.0f}"


def nccl_time(us: float) -> str:
    """nccl-tests' time column (7 wide)."""
    return nccl_figure(us, 7)


def nccl_column_header() -> list[str]:
    pre = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}"
    block = "  {:>7}  {:>6}  {:>6} {:>6}"
    return [pre.format("", "", "", "", "") + "           out-of-place                       in-place          ",
            pre.format("size", "count", "type", "redop", "root") + block.format("time", "algbw", "busbw", "#wrong")
            + block.format("time", "algbw", "busbw", "#wrong"),
            pre.format("(B)", "(elements)", "", "", "") + block.format("(us)", "(GB/s)", "(GB/s)", "")
            + block.format("(us)", "(GB/s)", "(GB/s)", "")]


# nccl-tests' type names (its -d values) for simcomm's dtype names.
NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
                   "int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64",
                   "uint64": "uint64", "fp8_e4m3": "f8e4m3", "fp8_e5m2": "f8e5m2"}


def type_name(dtype: str) -> str:
    return NCCL_TYPE_NAMES.get(dtype, dtype)


def nccl_row(row, type_label: str | None = None, validation: int = 1) -> str:
    """One size: out-of-place then in-place (the same simulated figures); #wrong 0 (N/A under -c 0)."""
    label = type_label or type_name(row.dtype)
    head = f"{row.size:12d}  {row.count:12d}  {label:>8}  {row.redop:>6}  {row.root_column:6d}"
    wrong = f"  {0:6g}" if validation else f"  {'N/A':>5}"  # nccl-tests' "  %6g" and "  %5s"
    block = (f"  {nccl_time(row.time * 1e6)}  {nccl_figure(row.algbw / 1e9, 6)}  {nccl_figure(row.busbw / 1e9, 6)}"
             + wrong)
    return head + block + block


def _bus_id(cluster, rank: int) -> str:
    return f"0000:{cluster.local_rank(rank) + 1:02x}:00"


def _step(h: Header) -> str:
    return f"{h.factor:g}(factor)" if h.factor is not None else f"{h.stepbytes}(bytes)"


def _pid(rank: int, h: Header) -> int:
    return SIM_PID_BASE + rank // (h.threads * h.gpus)


def _simcomm_lines(h: Header, comments) -> list[str]:
    return [] if h.quiet else [f"# simcomm: {c}" for c in comments]


def nccl_preamble(cluster, ranks: int, h: Header) -> list[str]:
    """Version, test start, parameters and devices (then simcomm's notes unless quiet)."""
    from .. import __version__
    lines = [f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={NCCL_VERSION_CODE} "
             f"nccl-library={NCCL_VERSION_CODE}",
             f"# Collective test starting: {h.test}",
             f"# nThread {h.threads} nGpus {h.gpus} minBytes {h.minbytes} maxBytes {h.maxbytes} step: {_step(h)} "
             f"warmup iters: {h.warmup} iters: {h.iters} agg iters: {h.agg_iters} validation: {h.validation} "
             f"graph: {h.graph}",
             "#", "# Using devices"]
    for r in range(ranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {_pid(r, h):6d} on {'n' + str(cluster.node_of(r)):>10} "
                     f"device {cluster.local_rank(r):2d} [{_bus_id(cluster, r)}] {cluster.device.name}")
    notes = [f"simulated by simcomm {__version__}: nccl-tests {NCCL_TESTS_VERSION}'s output; NCCL "
             f"{NCCL_VERSION_CODE // 10000}.{NCCL_VERSION_CODE // 100 % 100}'s tuner and protocols"] + list(h.comments)
    return lines + ["#"] + _simcomm_lines(h, notes)


def average_busbw(rows) -> float:
    """GB/s: nccl-tests averages the busbw of every row (out-of-place and in-place alike)."""
    return sum(r.busbw for r in rows) / len(rows) / 1e9 if rows else 0.0


def nccl_block(rows, comments=(), h: Header | None = None) -> list[str]:
    """One table: simcomm's comment lines (unless quiet), the column header, the rows and the footer."""
    h = h or Header("")
    lines = _simcomm_lines(h, comments) + nccl_column_header() + [nccl_row(r, validation=h.validation)
                                                                   for r in rows]
    return lines + ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {average_busbw(rows):g} ", "#"]


def nccl_output(tables, cluster, ranks: int, h: Header) -> str:
    """The whole output: preamble, each (comments, rows) table, and the closing line."""
    lines = nccl_preamble(cluster, ranks, h)
    for comments, rows in tables:
        lines += nccl_block(rows, comments, h)
    lines.append(f"# Collective test concluded: {h.test}")
    return "\n".join(lines) + "\n"


def size_step(sizes) -> tuple[float | None, int]:
    """(factor, step bytes) of a size series as nccl-tests' parameter line states it: a constant factor (-f), else
    a constant increment (-i, factor None); a single size or an irregular list reads as factor 1."""
    sizes = list(dict.fromkeys(int(x) for x in sizes))
    if len(sizes) < 2:
        return 1.0, 0
    steps = {b - a for a, b in zip(sizes, sizes[1:])}
    if len(steps) == 1 and steps.pop() > 0 and len(sizes) > 2:
        return None, sizes[1] - sizes[0]
    ratios = {b / a for a, b in zip(sizes, sizes[1:]) if a > 0}
    if len(ratios) == 1 and min(sizes) > 0:
        return float(ratios.pop()), 0
    return 1.0, 0


def nccl_table(rows, cluster, type_label: str = "", *, minbytes=None, maxbytes=None, factor: float | None = None,
               stepbytes: int | None = None, preamble: bool = True, comments=()) -> str:
    """One collective's rows as nccl-tests prints them, with a preamble for one process of every rank. The
    parameter line's step is `factor` or `stepbytes` when given, else what the rows' sizes show (size_step)."""
    ranks = rows[0].ranks if rows else cluster.num_ranks
    if factor is None and stepbytes is None:
        factor, stepbytes = size_step(r.size for r in rows)
    h = Header(f"{rows[0].collective if rows else 'all_reduce'}_perf", gpus=ranks,
               minbytes=minbytes if minbytes is not None else (rows[0].size if rows else 0),
               maxbytes=maxbytes if maxbytes is not None else (rows[-1].size if rows else 0), factor=factor,
               stepbytes=stepbytes or 0)
    if not preamble:
        return "\n".join(nccl_block(rows, comments)) + "\n"
    return nccl_output([(comments, rows)], cluster, ranks, h)


def tuner_summary(rows) -> str:
    """'8 B..64 KiB ring/LL, 128 KiB..8 GiB ring/Simple': the tuner's choices as size ranges."""
    from ..units import format_size
    spans: list[list] = []
    for r in rows:
        pick = f"{r.algorithm}/{r.protocol}"
        if spans and spans[-1][2] == pick:
            spans[-1][1] = r.size
        else:
            spans.append([r.size, r.size, pick])
    return ", ".join(f"{format_size(a)}..{format_size(b)} {p}" if a != b else f"{format_size(a)} {p}"
                     for a, b, p in spans)


def tuner_predictions(rows) -> tuple[list[str], list[list]]:
    """Why the tuner chose what it did: per size, the predicted time (us) of every (algorithm, protocol) it
    weighed, the choice, and the runner-up with how much slower the tuner predicted it. Rows the tuner did not
    choose (a forced algorithm) are left out. Returns (headers, table rows)."""
    from ..units import format_size
    rows = [r for r in rows if getattr(r, "weighed", ())]
    pairs: list[str] = []
    for r in rows:
        for a, p, _ in sorted(r.weighed):
            if f"{a}/{p}" not in pairs:
                pairs.append(f"{a}/{p}")
    table = []
    for r in rows:
        times = {f"{a}/{p}": t for a, p, t in r.weighed}
        best = r.weighed[0]
        second = r.weighed[1] if len(r.weighed) > 1 else None
        runner = f"{second[0]}/{second[1]} +{100 * (second[2] / best[2] - 1):.1f}%" if second and best[2] > 0 \
            else "-"
        table.append([format_size(r.size)] + [times[k] * 1e6 if k in times else None for k in pairs]
                     + [f"{best[0]}/{best[1]}", runner])
    return ["size"] + [f"{k} (us)" for k in pairs] + ["chosen", "runner-up"], table


def tuner_comments(rows) -> list[str]:
    """tuner_predictions as fixed-width comment lines for nccl-tests' output (empty when nothing was tuned)."""
    headers, table = tuner_predictions(rows)
    if not table:
        return []
    cells = [[("-" if v is None else f"{v:.2f}") if not isinstance(v, str) else v for v in row] for row in table]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    fmt = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    return ["the tuner's predicted times (why it chose what it did; the simulated times are in the table):",
            fmt(headers)] + [fmt(c) for c in cells]


# ---- -J JSON -----------------------------------------------------------------------------------------------------
# A simulated run has no wall-clock start: the start time is the simulation's epoch, so the file is deterministic.
SIM_START_TIME = "1970-01-01T00:00:00Z"


def _figures(r, validation: int) -> dict:
    return {"time": r.time * 1e6, "alg_bw": r.algbw / 1e9, "bus_bw": r.busbw / 1e9,
            "nwrong": 0 if validation else None}


def _weighed(r) -> dict:
    """What the tuner predicted (us) for each (algorithm, protocol) it weighed, fastest first."""
    weighed = getattr(r, "weighed", ())
    return {"tuner_predicted_us": {f"{a}/{p}": t * 1e6 for a, p, t in weighed}} if weighed else {}


def _step_config(h: Header) -> dict:
    if h.factor is None:
        return {"step_bytes": h.stepbytes}
    return {"step_factor": int(h.factor) if float(h.factor).is_integer() else h.factor}


def nccl_json(tables, cluster, ranks: int, h: Header) -> dict:
    """The -J document in nccl-tests' schema: version, start time, command line, NCCL environment, the parameter
    line's values (config), the devices, one result per row (out-of-place and in-place: time in us, alg_bw and
    bus_bw in GB/s, unrounded, nwrong), and the footer's values (out_of_bounds, average_bus_bandwidth). Unless
    quiet, simcomm's own fields (the algorithm and protocol simulated, the tuner's predictions, the notes) are
    under 'simcomm' keys."""
    from .. import __version__
    results, everything = [], []
    for comments, rows in tables:
        everything += rows
        for r in rows:
            result = {"name": h.test, "size": r.size, "count": r.count, "type": type_name(r.dtype),
                      "redop": r.redop, "root": str(r.root_column), "out_of_place": _figures(r, h.validation),
                      "in_place": _figures(r, h.validation)}
            if not h.quiet:
                result["simcomm"] = {"requested": r.requested, "algorithm": r.algorithm, "protocol": r.protocol,
                                     **_weighed(r)}
            results.append(result)
    doc = {"version": NCCL_TESTS_VERSION, "nccl_headers": NCCL_VERSION_CODE, "nccl_library": NCCL_VERSION_CODE,
           "start_time": SIM_START_TIME, "args": list(h.args) or [h.test], "env": dict(h.env),
           "config": {"nthreads": h.threads, "ngpus": h.gpus, "minimum_bytes": h.minbytes,
                      "maximum_bytes": h.maxbytes, **_step_config(h), "warmup_iters": h.warmup,
                      "iterations": h.iters, "aggregated_iterations": h.agg_iters, "validation": h.validation,
                      "graph": h.graph},
           "devices": [{"rank": r, "group": 0, "pid": _pid(r, h), "hostname": f"n{cluster.node_of(r)}",
                        "device": cluster.local_rank(r), "bus_id": _bus_id(cluster, r), "name": cluster.device.name}
                       for r in range(ranks)],
           "results": results,
           "out_of_bounds": {"count": 0, "okay": True},
           "average_bus_bandwidth": {"bandwidth": average_busbw(everything), "okay": True}}
    if not h.quiet:
        doc["simcomm"] = {"generator": f"simcomm {__version__}", "ranks": ranks,
                          "comments": list(h.comments) + [c for comments, _ in tables for c in comments]}
    return doc
