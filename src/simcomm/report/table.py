"""Plain text tables, and rich tables on a terminal (nccl-tests' layout is in nccl_tests.py)."""
from __future__ import annotations

import io
import math


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
        if num:  # numbers never wrap or shrink: the column is as wide as its widest cell
            t.add_column(h, justify="right", no_wrap=True,
                         min_width=max([len(_cell(row[i])) for row in rows] + [max(map(len, h.split()), default=1)]))
        else:
            words = [w for row in rows for w in _cell(row[i]).split()] + h.split()
            t.add_column(h, justify="left", overflow="fold", min_width=min(16, max(map(len, words), default=1)))
    for row in rows:
        t.add_row(*(Text(_cell(v)) for v in row))
    return t


def render(blocks, rich: bool, width: int | None = None) -> str:
    """Blocks are strings (printed as is) or (title, headers, rows) tables.

    A rich table never cuts a number: text columns wrap to fit `width`; when the numbers alone are wider, the
    output is as wide as they need (the terminal wraps long lines) rather than ending numbers in an ellipsis.
    """
    if not rich:
        return "\n".join(b if isinstance(b, str) else text_table(b[1], b[2], b[0]) for b in blocks)
    from rich.console import Console
    width = width or 120
    tables = [b if isinstance(b, str) else rich_table(b[1], b[2], b[0]) for b in blocks]
    probe = Console(file=io.StringIO(), width=1 << 16)
    needed = max([probe.measure(t).minimum for t in tables if not isinstance(t, str)], default=0)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=max(width, needed), highlight=False)
    for t in tables:
        if isinstance(t, str):
            console.print(t, markup=False, overflow="ignore", crop=False)
        else:
            console.print(t)
    return buf.getvalue()
