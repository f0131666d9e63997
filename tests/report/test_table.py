"""Plain and rich tables: alignment, and nothing cut or dropped whatever the terminal width (issue 11)."""
import re
from pathlib import Path

import pytest

from simcomm.report.table import render, text_table
from simcomm.scenario import load_scenario
from simcomm.workloads import report_blocks, run_scenario

SCENARIOS = Path(__file__).parents[2] / "scenarios"


def test_text_table_aligns_and_rich_renders():
    text = text_table(["name", "value"], [("a", 1.5), ("bb", 10.25)], "title")
    assert text.splitlines() == ["title", "name  value", "----  -----", "a      1.50", "bb    10.25"]
    out = render([("t", ["x", "y"], [("[0x00]", 1)])], rich=True, width=60)
    assert "[0x00]" in out and "\x1b[" in out  # markup is not interpreted; colours are on
    assert render(["plain", ("t", ["x"], [(1,)])], rich=False).startswith("plain\nt\nx")


@pytest.mark.parametrize("width", [40, 80, 100, 120])
def test_rich_tables_never_cut_numbers(width):
    """Issue 11: rich tables truncated busbw and count with an ellipsis at 80-100 columns."""
    rows = [(f"{1 << 30}", 268435456, "float", 123456.789, 98765.4321, 543.21, "nvls/Simple",
             "a long note that may wrap as it likes")] * 3
    heads = ["size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "choice", "note"]
    out = re.sub(r"\x1b\[[0-9;]*m", "", render([("t", heads, rows)], rich=True, width=width))
    for text in ("268435456", "123456.79", "98765.43", "543.21"):
        assert out.count(text) == 3, (width, out)
    assert "\u2026" not in out  # no ellipsis anywhere


def _shown(v) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _read_back(out: str):
    """The headers and rows a rendered table shows, each cell's lines joined by spaces: a rich table's cells are
    split on its rules (a row starts where the first column has text), a plain table's on its dashed line."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines()
    if any("\u2503" in ln for ln in lines):
        head = [ln.split("\u2503")[1:-1] for ln in lines if ln.startswith("\u2503")]
        rows: list = []
        for ln in (ln for ln in lines if ln.startswith("\u2502")):
            parts = ln.split("\u2502")[1:-1]
            if parts[0].strip():
                rows.append([[] for _ in parts])
            for cell, part in zip(rows[-1], parts):
                cell.append(part)
        join = lambda parts: " ".join(" ".join(parts).split())  # noqa: E731
        return [join(col) for col in zip(*head)], [[join(c) for c in row] for row in rows]
    rule = next(i for i, ln in enumerate(lines) if ln and set(ln) <= {"-", " "})
    spans = [(m.start(), m.end()) for m in re.finditer("-+", lines[rule])]
    spans[-1] = (spans[-1][0], None)
    cut = lambda ln: [ln[a:b].strip() for a, b in spans]  # noqa: E731
    return cut(lines[rule - 1]), [cut(ln) for ln in lines[rule + 1:] if ln.strip()]


@pytest.fixture(scope="module")
def report_tables():
    """The quickstart's tuner table (10 columns of labels and numbers) and a program run's ranks table (long text)."""
    tuner = next(b for b in report_blocks(run_scenario(load_scenario(SCENARIOS / "quickstart.yaml")))
                 if not isinstance(b, str) and "chosen" in b[1])
    ranks = next(b for b in report_blocks(run_scenario(load_scenario(SCENARIOS / "train-dp.yaml")))
                 if not isinstance(b, str) and b[0] == "ranks")
    return {"tuner": tuner, "ranks": ranks}


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("which", ["tuner", "ranks"])
def test_every_header_and_cell_is_shown_whole(report_tables, which, width):
    """Issue 11: at 80 columns the tuner table lost its size, chosen and runner-up columns and cut a header to
    'tree/Simple (u...'; the ranks table lost its result column. Each header and cell must read back whole."""
    title, heads, rows = report_tables[which]
    out = render([(title, heads, rows)], rich=True, width=width)
    assert "\u2026" not in out
    got_heads, got_rows = _read_back(out)
    assert got_heads == heads
    assert got_rows == [[_shown(v) for v in row] for row in rows]
    if "\u2503" in out:  # a rich table fits the width; one that cannot is the plain table, never a cropped one
        assert max(len(ln) for ln in re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines()) <= width


def test_rich_when_the_words_fit_plain_when_not(report_tables):
    _, heads, rows = report_tables["ranks"]
    wide = render([("ranks", heads, rows)], rich=True, width=120)
    assert "\u2503" in wide and "\x1b[" in wide  # wraps long text between words to fit 120 columns
    # at 80 columns its words cannot fit even wrapped: the plain table, whole
    assert render([("ranks", heads, rows)], rich=True, width=80) == text_table(heads, rows, "ranks")
