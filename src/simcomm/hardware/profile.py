"""Calibration profiles: a preset plus measured figures, in a YAML (or JSON) file that `--cluster`, scenarios and
`build_cluster` accept wherever a preset name goes. `simcomm calibrate` writes them:

    preset: cpu-host
    params: {host_bandwidth: 3.1e9}             # the preset builder's parameters
    overrides: {loopback_bandwidth: 2.4e9, loopback_latency: 1.1e-05, memory_bandwidth: 6.0e9}
    tuning: {launch_overhead: 2.5e-05, step_overhead: 1.0e-05, efficiency: {ring: 1.0}}
    fit: {...}                                  # how the figures were obtained (free-form, kept for the record)

Numbers are SI (bytes/s, seconds); unit strings ("2.4GB/s", "11us") are accepted too.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HardwareError
from ..units import parse_rate, parse_size, parse_time
from .model import Tuning

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Profile:
    name: str
    preset: str
    params: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    tuning: Tuning = Tuning()
    fit: dict = field(default_factory=dict)


def is_profile(value) -> bool:
    return isinstance(value, (str, Path)) and str(value).lower().endswith(SUFFIXES)


def _number(path: str, key: str, value, kind: str) -> float:
    if isinstance(value, str):
        try:
            value = parse_time(value, key) if kind == "time" else parse_rate(value, key) if kind == "rate" \
                else parse_size(value, key) if kind == "bytes" else float(value)
        except ValueError as exc:  # UnitError included
            raise HardwareError(f"{path}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HardwareError(f"{path}: {key}: expected a finite number, got {value!r}")
    return float(value)


def _kind(key: str) -> str:
    return "time" if key.endswith(("latency", "overhead")) else "rate" if key.endswith("bandwidth") else "number"


def load_profile(path) -> Profile:
    """Read and check a profile file; errors name the file and the key."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise HardwareError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json":
            doc = json.loads(text)
        else:
            import yaml
            doc = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - YAML and JSON errors alike
        raise HardwareError(f"{path}: not a valid profile file: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("preset"), str):
        raise HardwareError(f"{path}: a profile needs 'preset: <name>' at the top level")
    known = {"preset", "params", "overrides", "tuning", "fit"}
    extra = sorted(set(doc) - known)
    if extra:
        raise HardwareError(f"{path}: unknown key(s) {', '.join(extra)}; expected {', '.join(sorted(known))}")
    sections = {}
    for name in ("params", "overrides", "tuning", "fit"):
        value = doc.get(name) or {}
        if not isinstance(value, dict):
            raise HardwareError(f"{path}: {name}: expected a mapping, got {type(value).__name__}")
        sections[name] = value
    params = {k: (v if k == "ranks_per_node" or v is None else _number(str(path), f"params.{k}", v, _kind(k)))
              for k, v in sections["params"].items()}
    overrides = {k: _number(str(path), f"overrides.{k}", v, _kind(k)) for k, v in sections["overrides"].items()}
    t = sections["tuning"]
    unknown = sorted(set(t) - {"launch_overhead", "step_overhead", "chunk_overhead", "first_touch_rate",
                               "efficiency", "sources", "cores", "interference", "min_channels", "max_channels"})
    if unknown:
        raise HardwareError(f"{path}: tuning: unknown key(s) {', '.join(unknown)}; expected launch_overhead, "
                            f"step_overhead, chunk_overhead, first_touch_rate, efficiency, cores, interference, "
                            f"min_channels, max_channels, sources")
    cores = t.get("cores", 0)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 0:
        raise HardwareError(f"{path}: tuning.cores: expected a whole number >= 0, got {cores!r}")
    interference = t.get("interference", True)
    if not isinstance(interference, bool):
        raise HardwareError(f"{path}: tuning.interference: expected true or false, got {interference!r}")
    channels = {k: t.get(k, 0) for k in ("min_channels", "max_channels")}
    for k, v in channels.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 64:
            raise HardwareError(f"{path}: tuning.{k}: expected a whole number from 0 (NCCL's default) to 64, "
                                f"got {v!r}")
    eff = t.get("efficiency") or {}
    if not isinstance(eff, dict):
        raise HardwareError(f"{path}: tuning.efficiency: expected a mapping of family or protocol to a factor")
    tuning = Tuning(_number(str(path), "tuning.launch_overhead", t.get("launch_overhead", 0.0), "time"),
                    _number(str(path), "tuning.step_overhead", t.get("step_overhead", 0.0), "time"),
                    tuple((str(k), _number(str(path), f"tuning.efficiency.{k}", v, "number"))
                          for k, v in sorted(eff.items())),
                    tuple(t.get("sources") or ()) + (f"profile {p.name}",), cores,
                    _number(str(path), "tuning.chunk_overhead", t.get("chunk_overhead", 0.0), "bytes"),
                    _number(str(path), "tuning.first_touch_rate", t.get("first_touch_rate", 0.0), "rate"),
                    interference, **channels)
    return Profile(p.stem, doc["preset"], params, overrides, tuning, sections["fit"])


def write_profile(path, preset: str, *, params=None, overrides=None, tuning: Tuning | None = None,
                  fit=None) -> str:
    """Write a profile file (YAML, or JSON for a .json path); returns the path."""
    t = tuning or Tuning()
    doc = {"preset": preset, "params": dict(params or {}), "overrides": dict(overrides or {}),
           "tuning": {"launch_overhead": t.launch_overhead, "step_overhead": t.step_overhead,
                      **({"chunk_overhead": t.chunk_overhead} if t.chunk_overhead else {}),
                      **({"first_touch_rate": t.first_touch_rate} if t.first_touch_rate else {}),
                      **({"interference": False} if not t.interference else {}),
                      **{k: getattr(t, k) for k in ("min_channels", "max_channels") if getattr(t, k)},
                      "efficiency": dict(t.efficiency), "cores": t.cores, "sources": list(t.sources)},
           "fit": fit or {}}
    p = Path(path)
    if p.suffix.lower() == ".json":
        p.write_text(json.dumps(doc, indent=2) + "\n")
    else:
        import yaml
        p.write_text("# simcomm calibration profile: use it as --cluster " + p.name + "\n"
                     + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=110))
    return str(p)
