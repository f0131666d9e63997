"""The progress bar every long subcommand shows on a terminal (run, sweep, plan, compare, calibrate)."""
from __future__ import annotations

import sys


def progress(label: str):
    """(a rich progress bar on a terminal's stderr, its update(done, total)); (None, None) when stderr is piped."""
    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    task = bar.add_task(label, total=None)
    return bar, (lambda done, total: bar.update(task, completed=done, total=total))


def with_progress(label: str, work):
    """work(update) under a progress bar on a terminal (work(None) otherwise)."""
    bar, update = progress(label)
    if bar is None:
        return work(None)
    with bar:
        return work(update)
