"""Plain and rich tables: alignment, and numbers never cut whatever the terminal width (issue 11)."""
import re

import pytest

from simcomm.report.table import render, text_table


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
