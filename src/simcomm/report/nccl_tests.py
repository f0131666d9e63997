"""nccl-tests' output, as its 2.17 releases print it: version and test start lines, the parameter line, the devices,
the column header, one row per size (field widths and the %7.2f/%7.1f/%7.0f time), the footer and the closing
line; and the -J JSON file with the same content.

The simulation checks no data, so #wrong is N/A (as nccl-tests prints with -c 0), and out-of-place and in-place
are the same simulated figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NCCL_TESTS_VERSION = "2.17.9"  # the release whose output layout this follows


@dataclass
class Header:
    """What nccl-tests' parameter line and device list say: counts per process and the size series."""

    test: str  # the binary's name, e.g. "all_reduce_perf"
    threads: int = 1
    gpus: int = 1  # per thread
    minbytes: int = 0
    maxbytes: int = 0
    factor: float | None = 2.0  # None: fixed increments of stepbytes
    stepbytes: int = 0
    iters: int = 1
    warmup: int = 0
    agg_iters: int = 1
    comments: list = field(default_factory=list)  # '# simcomm: ...' lines after the device list


# ---- text --------------------------------------------------------------------------------------------------------
def nccl_time(us: float) -> str:
    """nccl-tests' time column: %7.2f, then %7.1f from 100 us, then %7.0f from 10 ms."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


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


def nccl_row(row, type_label: str | None = None) -> str:
    """One size: out-of-place then in-place (the same simulated figures); #wrong is N/A (no data is checked)."""
    label = type_label or type_name(row.dtype)
    head = f"{row.size:12d}  {row.count:12d}  {label:>8}  {row.redop:>6}  {row.root_column:6d}"
    block = f"  {nccl_time(row.time * 1e6)}  {row.algbw / 1e9:6.2f}  {row.busbw / 1e9:6.2f}  {'N/A':>5}"
    return head + block + block


def _bus_id(cluster, rank: int) -> str:
    return f"0000:{cluster.local_rank(rank) + 1:02x}:00"


def _step(h: Header) -> str:
    return f"{h.factor:g}(factor)" if h.factor is not None else f"{h.stepbytes}(bytes)"


def nccl_preamble(cluster, ranks: int, h: Header) -> list[str]:
    """Version, test start, parameters (per-process counts, one simulated iteration, no warm-up) and devices."""
    from .. import __version__
    lines = [f"# nccl-tests version {NCCL_TESTS_VERSION} output format; simulated by simcomm {__version__}",
             f"# Collective test starting: {h.test}",
             f"# nThread {h.threads} nGpus {h.gpus} minBytes {h.minbytes} maxBytes {h.maxbytes} step: {_step(h)} "
             f"warmup iters: {h.warmup} iters: {h.iters} agg iters: {h.agg_iters} validation: 0 graph: 0",
             "#", "# Using devices"]
    per_process = h.threads * h.gpus
    for r in range(ranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {r // per_process:6d} on {'n' + str(cluster.node_of(r)):>10} "
                     f"device {cluster.local_rank(r):2d} [{_bus_id(cluster, r)}] {cluster.device.name}")
    return lines + ["#"] + [f"# simcomm: {c}" for c in h.comments]


def average_busbw(rows) -> float:
    """GB/s: nccl-tests averages the busbw of every row (out-of-place and in-place alike)."""
    return sum(r.busbw for r in rows) / len(rows) / 1e9 if rows else 0.0


def nccl_block(rows, comments=()) -> list[str]:
    """One table: comment lines, the column header, the rows and the footer."""
    lines = [f"# simcomm: {c}" for c in comments] + nccl_column_header() + [nccl_row(r) for r in rows]
    return lines + ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {average_busbw(rows):g} ", "#"]


def nccl_output(tables, cluster, ranks: int, h: Header) -> str:
    """The whole output: preamble, each (comments, rows) table, and the closing line."""
    lines = nccl_preamble(cluster, ranks, h)
    for comments, rows in tables:
        lines += nccl_block(rows, comments)
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
def _figures(r) -> dict:
    return {"time": r.time * 1e6, "algbw": r.algbw / 1e9, "busbw": r.busbw / 1e9, "wrong": "N/A"}


def _weighed(r) -> dict:
    """What the tuner predicted (us) for each (algorithm, protocol) it weighed, fastest first."""
    weighed = getattr(r, "weighed", ())
    return {"tuner_predicted_us": {f"{a}/{p}": t * 1e6 for a, p, t in weighed}} if weighed else {}


def nccl_json(tables, cluster, ranks: int, h: Header) -> dict:
    """The -J document: the parameter line's values, the devices, one result per row with out-of-place and
    in-place figures (us and GB/s, unrounded), and the footer's values. simcomm's own fields (the algorithm and
    protocol simulated) are added to each result under 'simcomm'."""
    from .. import __version__
    per_process = h.threads * h.gpus
    results, everything = [], []
    for comments, rows in tables:
        everything += rows
        for r in rows:
            results.append({"name": h.test, "size": r.size, "count": r.count, "type": type_name(r.dtype),
                            "redop": r.redop, "root": r.root_column, "out_of_place": _figures(r),
                            "in_place": _figures(r),
                            "simcomm": {"requested": r.requested, "algorithm": r.algorithm,
                                        "protocol": r.protocol, **_weighed(r)}})
    return {"nccl_tests_version": NCCL_TESTS_VERSION, "generator": f"simcomm {__version__}", "test": h.test,
            "config": {"nThread": h.threads, "nGpus": h.gpus, "nProcs": ranks // per_process, "nRanks": ranks,
                       "minBytes": h.minbytes, "maxBytes": h.maxbytes,
                       "stepFactor": int(h.factor) if h.factor is not None and h.factor.is_integer() else h.factor, "stepBytes": None if h.factor is not None else h.stepbytes,
                       "warmupIters": h.warmup, "iters": h.iters, "aggIters": h.agg_iters, "validation": 0,
                       "graph": 0},
            "devices": [{"rank": r, "group": 0, "pid": r // per_process, "hostname": f"n{cluster.node_of(r)}",
                         "device": cluster.local_rank(r), "busId": _bus_id(cluster, r), "name": cluster.device.name}
                        for r in range(ranks)],
            "comments": list(h.comments) + [c for comments, _ in tables for c in comments],
            "results": results, "out_of_bounds": 0, "avg_bus_bandwidth": average_busbw(everything)}
