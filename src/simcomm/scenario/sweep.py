"""Parameter grids: every combination of values for dotted key paths of a scenario, run in parallel.

Points run in a local process pool (concurrent.futures) or, on request, as Ray tasks (workers.RayPool; `pip install
simcomm[ray]`; ray is imported only then). Each point is validated like a scenario file, so a bad value names its key.
"""
from __future__ import annotations

import itertools
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from ..errors import SimcommError
from ..workers import RayPool


def grid_points(parameters: dict[str, list]) -> list[dict]:
    """Every combination, the first key varying slowest."""
    keys = list(parameters)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(parameters[k] for k in keys))]


def run_point(task: tuple) -> list[dict]:
    """Run one grid point: (source name, raw data, line index, values[, file directory]) -> summary rows (or one
    error row)."""
    from ..workloads import run_scenario, summarize
    from .loader import Source, validate_data, with_values
    name, data, lines, values, *rest = task
    directory = rest[0] if rest else None
    label = ", ".join(f"{k}={v}" for k, v in values.items())
    try:
        try:
            point = with_values(data, values)
        except ValueError as exc:
            raise SimcommError(str(exc)) from None
        point.pop("sweep", None)
        loaded = validate_data(Source(f"{name} [{label}]", point, lines, directory))
        rows = summarize(run_scenario(loaded, detail="steps"))
    except (SimcommError, ValueError) as exc:  # HardwareError, UnitError and AlgorithmError are ValueErrors
        return [{**values, "error": str(exc)}]
    return [{**values, **r} for r in rows]


def run_sweep(loaded, parameters: dict[str, list], jobs: int | None = None, ray: bool = False,
              ray_address: str | None = None, progress=None) -> list[dict]:
    """Run every grid point of `parameters` over `loaded`; `progress(done, total)` after each point."""
    points = grid_points(parameters)
    src = loaded.source
    tasks = [(src.name, src.data, src.lines, values, src.directory) for values in points]
    count = [0]

    def on_done():
        count[0] += 1
        if progress:
            progress(count[0], len(tasks))
    if ray:
        results = []
        for rows in RayPool(ray_address, "a sweep").map(run_point, tasks):
            results.append(rows)
            on_done()
    else:
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
        if jobs == 1:
            results = []
            for t in tasks:
                results.append(run_point(t))
                on_done()
        else:
            results = [None] * len(tasks)
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(run_point, t): i for i, t in enumerate(tasks)}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    on_done()
    return [row for rows in results for row in rows]
