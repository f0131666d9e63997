"""JSON results: plain types only, SI units, no wall-clock times (same scenario, same bytes)."""
from __future__ import annotations

import json
import math

UNITS = {"size": "bytes", "time": "seconds", "algbw": "bytes/s", "busbw": "bytes/s", "bandwidth": "bytes/s",
         "latency": "seconds"}


def plain(obj):
    """obj with numpy scalars, tuples and non-finite floats made JSON-safe; unknown objects become repr()."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:  # numpy scalar
        return plain(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "tolist"):
        return plain(obj.tolist())
    return repr(obj)


def result_json(result, outputs: dict | None = None) -> dict:
    """A RunResult as a JSON-ready dict."""
    from .. import __version__
    sim = result.simulation
    return plain({"simcomm": __version__, "scenario": result.name, "workload": result.kind,
                  "cluster": result.cluster.describe(), "units": UNITS, "elapsed": result.elapsed,
                  "rows": result.row_dicts(), "stats": sim.stats() if sim is not None else {},
                  "notes": list(result.notes), **getattr(result, "details", {}), "outputs": outputs or {}})


def dumps(obj) -> str:
    return json.dumps(plain(obj), indent=2, allow_nan=False) + "\n"
