"""Measured systems against the simulator: a systems file (calibration/systems.yaml) names, per measured machine,
its preset, nodes and sweeps (an nccl-tests log each, with its collective, ranks and any forced algorithm);
every sweep is compared on the system's preset (compare_log.compare_table) and the geometric-mean |error| per
size band is pooled over the system's sweeps. Sweeps with a `known_gap` (a mechanism simcomm lacks) are pooled
apart, so a system's figure says how well what simcomm models is modelled, and the gaps stay in sight.

The file's top-level `logs` is the directory of the logs, relative to the file (default: next to it); a sweep's
`log` is a file name there, `.log` added when it has no suffix.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import SimcommError
from .compare_log import Comparison, band_errors, bands_text, compare_table
from .nccl_log import read_log


@dataclass
class SystemComparison:
    name: str
    preset: str
    nodes: int
    source: str = ""
    known_gap: str = ""  # why the system as a whole misses the targets, when it does
    sweeps: list[Comparison] = field(default_factory=list)  # modelled sweeps
    gaps: list[tuple[Comparison, str]] = field(default_factory=list)  # sweeps with a known gap, and the gap

    def bands(self, gaps: bool = False) -> list[tuple[str, float, int]]:
        """(band, geometric-mean |error|, sizes) pooled over the modelled sweeps (gaps=True: the known-gap ones)."""
        comps = [c for c, _ in self.gaps] if gaps else self.sweeps
        return band_errors([p for c in comps for p in c.points])


def load_systems(path) -> tuple[dict, Path]:
    """(name -> system, logs directory) of a systems file; a SimcommError naming the file and key if malformed."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SimcommError(f"cannot read systems file {path}: {exc}") from None
    systems = doc.get("systems") if isinstance(doc, dict) else None
    if not isinstance(systems, dict) or not systems:
        raise SimcommError(f"{path}: expected a mapping 'systems' of name -> {{preset, sweeps, ...}}")
    for name, s in systems.items():
        if not isinstance(s, dict) or "preset" not in s or not isinstance(s.get("sweeps"), list):
            raise SimcommError(f"{path}: systems.{name}: expected 'preset' and a list 'sweeps'")
        for i, sw in enumerate(s["sweeps"]):
            missing = [k for k in ("log", "collective", "ranks") if not isinstance(sw, dict) or k not in sw]
            if missing:
                raise SimcommError(f"{path}: systems.{name}.sweeps[{i}]: missing {', '.join(missing)}")
    return systems, p.parent / str(doc.get("logs", "."))


def sweep_log(logs: Path, sweep: dict) -> Path:
    """The nccl-tests log a sweep names, in the systems file's logs directory (".log" when it gives no suffix)."""
    log = logs / sweep["log"]
    return log if log.suffix else log.with_suffix(".log")


def compare_system(name: str, system: dict, logs: Path) -> SystemComparison:
    nodes = system.get("nodes", 1)
    out = SystemComparison(name, system["preset"], nodes, system.get("source", ""), system.get("known_gap", ""))
    for sw in system["sweeps"]:
        for table in read_log(sweep_log(logs, sw)):
            cmp = compare_table(table, system["preset"], nodes=sw.get("nodes", nodes), collective=sw["collective"],
                                ranks=sw["ranks"], algorithm=sw.get("algo"))
            if "known_gap" in sw:
                out.gaps.append((cmp, sw["known_gap"]))
            else:
                out.sweeps.append(cmp)
    return out


def compare_systems(path, names=None) -> list[SystemComparison]:
    """Every system of the file (or those named), compared sweep by sweep on its preset."""
    systems, logs = load_systems(path)
    unknown = [n for n in names or () if n not in systems]
    if unknown:
        raise SimcommError(f"{path}: no system {', '.join(map(repr, unknown))}; it has {', '.join(systems)}")
    return [compare_system(n, systems[n], logs) for n in (names or systems)]


def _log(c: Comparison) -> str:
    """The sweep's log file name (its source without directory and line)."""
    return Path(c.source.rsplit(":", 1)[0]).name if c.source else "log"


def render_system(sc: SystemComparison) -> str:
    """One line per sweep, then the system's pooled geometric-mean |error| (and its known gaps')."""
    lines = [f"{sc.name}: {sc.preset}, {sc.nodes} node(s)" + (f"  ({sc.source})" if sc.source else "")]
    for c in sc.sweeps:
        lines.append(f"  {_log(c)}: {c.collective}, {c.ranks} ranks: {bands_text(c.bands())}")
    for c, _ in sc.gaps:
        lines.append(f"  {_log(c)}: {c.collective}, {c.ranks} ranks (known gap): {bands_text(c.bands())}")
    lines.append(f"  pooled over {len(sc.sweeps)} sweep(s): geometric-mean |error|: {bands_text(sc.bands())}")
    if sc.gaps:
        lines.append(f"  known gaps, pooled over {len(sc.gaps)} sweep(s): {bands_text(sc.bands(gaps=True))}; "
                     + "; ".join(sorted({g for _, g in sc.gaps})))
    if sc.known_gap:
        lines.append(f"  known gap: {sc.known_gap}")
    return "\n".join(lines)
