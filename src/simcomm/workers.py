"""Independent work spread over a Ray cluster (`pip install 'simcomm[ray]'`; ray is imported only then).

`RayPool` has a process pool's `map` (results in the order of the items) and its per-process set-up: every Ray
worker process that runs a chunk first runs `initializer(*initargs)` once, as a local ProcessPoolExecutor does,
so a search that keeps state per worker (its layer templates, the cluster) gives the same results on Ray as on
local processes. `simcomm sweep --ray` and `simcomm plan --ray` use it.
"""
from __future__ import annotations

import itertools

from .errors import SimcommError

_READY: set = set()  # set-ups this process has run (by token)
_TOKENS = itertools.count()


def ray_module(what: str):
    """The ray module, or a SimcommError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SimcommError(f"running {what} on Ray needs the ray extra: pip install 'simcomm[ray]'") from None
    return ray


def _run_chunk(fn, chunk: list, setup) -> list:
    """In a Ray worker: the process's set-up (once per token), then fn over the chunk."""
    if setup is not None:
        token, initializer, initargs = setup
        if token not in _READY:
            initializer(*initargs)
            _READY.add(token)
    return [fn(x) for x in chunk]


class RayPool:
    """A process pool's `map` and `shutdown` on a Ray cluster (ADDRESS, or a local one when empty)."""

    def __init__(self, address: str | None, what: str, initializer=None, initargs: tuple = ()):
        ray = ray_module(what)
        ray.init(address=address or None, ignore_reinit_error=True, log_to_driver=False)
        self._ray = ray
        self._remote = ray.remote(_run_chunk)
        # each pool gets a token of its own: a worker process that served another pool sets up again; the set-up
        # (a cluster, say) goes to the object store once, not with every chunk
        setup = None if initializer is None else (f"{id(self)}-{next(_TOKENS)}", initializer, initargs)
        self._setup = None if setup is None else ray.put(setup)
        cpus = getattr(ray, "cluster_resources", lambda: {})().get("CPU", 1)
        self._max_workers = max(1, int(cpus))

    def map(self, fn, items, chunksize: int = 1):
        """fn(x) for every x of items, yielded in their order as their chunks finish."""
        items = list(items)
        size = max(1, int(chunksize))
        refs = [self._remote.remote(fn, items[i:i + size], self._setup) for i in range(0, len(items), size)]
        for ref in refs:
            yield from self._ray.get(ref)

    def shutdown(self) -> None:
        """Nothing to stop: the Ray cluster outlives the pool (as `ray.init` left it)."""
