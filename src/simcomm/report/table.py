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


def _numeric(rows, i) -> bool:
    return all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)


def text_table(headers, rows, title: str | None = None) -> str:
    """Columns padded to width; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [_numeric(rows, i) for i in range(len(headers))]

    def fmt(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()
    out = ([title] if title else []) + [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in cells]
    return "\n".join(out) + "\n"


# a text column whose cells are all this short keeps each cell on one line; longer text wraps between words
SHORT_LABEL = 24


def _widths(headers, cells, rows, width: int) -> list[int] | None:
    """Column widths (without padding) for a boxed rich table at most `width` wide, or None when it cannot fit.

    No column is ever narrower than its longest word, header words included, so nothing is cut: numbers and short
    labels keep their cells whole; headers and long text may wrap between words. Spare width goes to the columns
    that wrap: first whole columns onto one line each (the cheapest first), then to the most wrapped.
    """
    lo, hi = [], []
    for i, h in enumerate(headers):
        col = [r[i] for r in cells]
        whole = max(map(len, col), default=0)
        words = max([len(w) for c in col for w in c.split()] + [len(w) for w in h.split()] + [1])
        lo.append(max(words, whole) if _numeric(rows, i) or whole <= SHORT_LABEL else words)
        hi.append(max(lo[-1], whole, len(h)))
    spare = width - (sum(lo) + 3 * len(headers) + 1)  # per column: 2 of padding and 1 rule; 1 closing rule
    if spare < 0:
        return None
    out = list(lo)
    for i in sorted(range(len(out)), key=lambda j: hi[j] - lo[j]):
        if hi[i] - out[i] <= spare:
            spare -= hi[i] - out[i]
            out[i] = hi[i]
    while spare > 0 and any(w < m for w, m in zip(out, hi)):
        i = max(range(len(out)), key=lambda j: hi[j] - out[j])
        out[i] += 1
        spare -= 1
    return out


def rich_table(headers, rows, title: str | None = None, width: int = 120):
    """A boxed rich table that fits `width` with nothing cut, or None when its words cannot fit."""
    from rich.table import Table
    from rich.text import Text
    cells = [[_cell(v) for v in row] for row in rows]
    widths = _widths(headers, cells, rows, width)
    if widths is None:
        return None
    t = Table(title=title, title_justify="left", header_style="bold")
    for i, (h, w) in enumerate(zip(headers, widths)):
        t.add_column(Text(h), justify="right" if _numeric(rows, i) else "left", width=w, overflow="fold")
    for row in cells:
        t.add_row(*(Text(c) for c in row))
    return t


def render(blocks, rich: bool, width: int | None = None) -> str:
    """Blocks are strings (printed as is) or (title, headers, rows) tables.

    Nothing is ever cut or dropped: a rich table gets columns no narrower than their longest word (numbers and
    short labels whole); a table whose words cannot fit `width` (the terminal's, by default) is printed as the plain
    text table instead, as wide as it needs (the terminal wraps its long lines).
    """
    if not rich:
        return "\n".join(b if isinstance(b, str) else text_table(b[1], b[2], b[0]) for b in blocks)
    import shutil

    from rich.console import Console
    width = width or shutil.get_terminal_size((120, 24)).columns
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=width, highlight=False)
    for b in blocks:
        table = None if isinstance(b, str) else rich_table(b[1], b[2], b[0], width)
        if table is not None:
            console.print(table)
        else:
            console.file.write((b if isinstance(b, str) else text_table(b[1], b[2], b[0])).rstrip("\n") + "\n")
    return buf.getvalue()
