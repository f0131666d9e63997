"""Command-line option types shared by the subcommands (the range checks themselves are units.whole/positive/...)."""
from __future__ import annotations

import os

from ..units import whole
from ..vocab import MAX_NODES, MAX_RANKS


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


# Worker processes: from 1 to this host's usable cores. More cannot run at once, and each holds its own copy of the
# cluster and model, so more would only cost memory (1,000 asked for 1,000 processes).
JOBS = whole(1, usable_cores, "at most this host's usable cores: more workers only cost memory")
NODES = whole(1, MAX_NODES)
RANKS = whole(1, MAX_RANKS)
