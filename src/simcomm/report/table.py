"""Tables: nccl-tests' text layout (byte for byte its formats), plain text tables, and rich tables on a terminal."""
from __future__ import annotations

import io
import math


# ---- nccl-tests ------------------------------------------------------------------------------------------------
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


def nccl_row(row, type_name: str) -> str:
    """One size: out-of-place then in-place (the same simulated figures); #wrong is N/A (no data is checked)."""
    head = f"{row.size:12d}  {row.count:12d}  {type_name:>8}  {row.redop:>6}  {row.root_column:6d}"
    block = f"  {nccl_time(row.time * 1e6)}  {row.algbw / 1e9:6.2f}  {row.busbw / 1e9:6.2f}  {'N/A':>5}"
    return head + block + block


def nccl_preamble(cluster, ranks: int, minbytes: int, maxbytes: int, factor: float, iters: int = 1,
                  warmup: int = 0) -> list[str]:
    """nccl-tests' header. A simulation is deterministic: one iteration, no warm-up, and that is what it says."""
    step = f"{factor:g}(factor)"
    lines = [f"# nThread 1 nGpus {ranks} minBytes {minbytes} maxBytes {maxbytes} step: {step} warmup iters: "
             f"{warmup} iters: {iters} agg iters: 1 validation: 0 graph: 0", "#", "# Using devices"]
    for r in range(ranks):
        node, local = cluster.node_of(r), cluster.local_rank(r)
        lines.append(f"#  Rank {r:2d} Group  0 Pid {0:6d} on {'n' + str(node):>10} device {local:2d} "
                     f"[0x{local:02x}] {cluster.device.name}")
    return lines


def nccl_table(rows, cluster, type_name: str, *, minbytes=None, maxbytes=None, factor: float = 2.0,
               preamble: bool = True, comments=()) -> str:
    """The whole nccl-tests output for `rows` (PerfRow), with its footer."""
    ranks = rows[0].ranks if rows else cluster.num_ranks
    lines = []
    if preamble:
        lines += nccl_preamble(cluster, ranks, minbytes if minbytes is not None else (rows[0].size if rows else 0),
                               maxbytes if maxbytes is not None else (rows[-1].size if rows else 0), factor)
    lines += [f"# {c}" for c in comments]
    lines += ["#"] + nccl_column_header()
    lines += [nccl_row(r, type_name) for r in rows]
    avg = sum(r.busbw for r in rows) / len(rows) / 1e9 if rows else 0.0
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g} ", "#"]
    return "\n".join(lines) + "\n"


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


# ---- plain and rich tables -------------------------------------------------------------------------------------
def _cell(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.3g}"
    return "-" if v is None else str(v)


def text_table(headers, rows, title: str | None = None) -> str:
    """Columns padded to width; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(headers))]

    def fmt(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()
    out = ([title] if title else []) + [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in cells]
    return "\n".join(out) + "\n"


def rich_table(headers, rows, title: str | None = None):
    from rich.table import Table
    from rich.text import Text
    t = Table(title=title, title_justify="left", header_style="bold")
    for i, h in enumerate(headers):
        num = all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)
        t.add_column(h, justify="right" if num else "left")
    for row in rows:
        t.add_row(*(Text(_cell(v)) for v in row))
    return t


def render(blocks, rich: bool, width: int | None = None) -> str:
    """Blocks are strings (printed as is) or (title, headers, rows) tables."""
    if not rich:
        return "\n".join(b if isinstance(b, str) else text_table(b[1], b[2], b[0]) for b in blocks)
    from rich.console import Console
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=width or 120, highlight=False)
    for b in blocks:
        if isinstance(b, str):
            console.print(b, markup=False)
        else:
            console.print(rich_table(b[1], b[2], b[0]))
    return buf.getvalue()
