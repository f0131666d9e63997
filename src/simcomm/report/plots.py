"""matplotlib PNGs (Agg backend, no display): busbw against size, a timeline per rank, link utilisation."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .links import binned, link_usage

_COLORS = {"collective": "#4c72b0", "send": "#55a868", "hbm": "#c44e52", "compute": "#8172b2"}
_NAMES = {"collective": "collective (call to completion)", "send": "transfers sent", "hbm": "HBM (reductions)",
          "compute": "compute"}
# Series drawn on one axis each get the next marker and dash pattern, so lines that coincide stay told apart.
_MARKERS = ("o", "s", "^", "D", "v", "x")
_DASHES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)))


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _size_label(x, _pos=None) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= scale:
            return f"{x / scale:g}{unit}"
    return f"{x:g}B"


def plot_busbw(rows, path, title: str = "") -> Path:
    """busbw (GB/s) against size (log2), one line per collective and algorithm."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    series: dict[str, list] = {}
    for r in rows:
        if r.size > 0:
            series.setdefault(f"{r.collective} ({r.requested})", []).append((r.size, r.busbw / 1e9))
    # Series that coincide (two algorithms the tuner treats alike) must stay visible: each gets its own marker
    # and dash pattern, and later ones are drawn thinner on top.
    for i, (name, pts) in enumerate(series.items()):
        marker, dash = _MARKERS[i % len(_MARKERS)], _DASHES[i % len(_DASHES)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, markersize=6 - min(i, 3),
                linestyle=dash, linewidth=2.0 - 0.3 * min(i, 4), fillstyle="none", label=name, zorder=2 + i)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
    ax.set_xlabel("size (nccl-tests S)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title or "bus bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    return _save(fig, plt, path)


def plot_timeline(activities, cluster, path, title: str = "", max_ranks: int = 32) -> Path:
    """One row per rank (up to max_ranks): collectives, transfers and HBM work as bars."""
    plt = _pyplot()
    everyone = sorted({a.rank for a in activities if a.end > a.start and a.kind in _COLORS})
    acts = [a for a in activities if a.rank < max_ranks and a.end > a.start and a.kind in _COLORS]
    ranks = sorted({a.rank for a in acts}) or [0]
    fig, ax = plt.subplots(figsize=(10, 1 + 0.35 * len(ranks)), dpi=100)
    offsets = {"collective": 0.0, "send": 0.3, "hbm": 0.55, "compute": 0.55}
    for kind, color in _COLORS.items():
        bars: dict[int, list] = {}
        for a in acts:
            if a.kind == kind:
                bars.setdefault(a.rank, []).append((a.start * 1e6, (a.end - a.start) * 1e6))
        for rank, spans in bars.items():
            ax.broken_barh(spans, (ranks.index(rank) + offsets[kind], 0.25 if kind != "collective" else 0.28),
                           facecolors=color, label=_NAMES[kind] if rank == min(bars) else None)
    ax.set_yticks([i + 0.4 for i in range(len(ranks))])
    ax.set_yticklabels([f"rank {r}" for r in ranks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    shown = f"ranks {ranks[0]}-{ranks[-1]} of {len(everyone)} shown" if len(ranks) < len(everyone) else \
        f"all {len(everyone)} ranks"
    ax.set_title(f"{title or f'timeline ({cluster.name})'} ({shown})")
    if acts:  # beside the plot, never over the bars
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  title="bars: what each rank\nwas doing", title_fontsize=7)
    return _save(fig, plt, path)


def plot_links(link_loads, cluster, path, title: str = "", top: int = 8, span: tuple[float, float] | None = None):
    """Utilisation over time of the most utilised links, and the average utilisation of the top 24, from the loads
    the flow engine assigned (`Recorder.link_loads`; None when the run kept only steps). `span` is the time axis
    (start, end) in seconds; by default, from the first to the last change of load."""
    plt = _pyplot()
    usage = link_usage(link_loads, cluster)
    if span is None:
        span = (min((float(u.times[0]) for u in usage), default=0.0),
                max((float(u.times[-1]) for u in usage), default=0.0))
    t0, length = span[0], span[1] - span[0]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 7), dpi=100)
    # Links that carried the same load at every moment (the ranks of a ring or a switch's ports, often) are one
    # curve under one label that names how many they are, so that every link drawn is labelled
    curves: dict[bytes, list] = {}
    for u in usage:
        edges, rates = binned(u, t0, t0 + length)
        curves.setdefault(np.round(100 * rates / u.capacity, 9).tobytes(), []).append((u, edges, rates))
    for i, alike in enumerate(list(curves.values())[:top]):  # a dash pattern each keeps equal levels apart
        u, edges, rates = alike[0]
        more = f" and {len(alike) - 1} more link{'s' if len(alike) > 2 else ''} alike" if len(alike) > 1 else ""
        ax1.stairs(100 * rates / u.capacity, edges * 1e6, label=f"{u.name}{more} (peak {100 * u.peak:.1f}%)",
                   linewidth=1.6 - 0.15 * min(i, 6), linestyle=_DASHES[i % len(_DASHES)], zorder=2 + i)
    ax1.set_xlabel("time (us)")
    ax1.set_ylabel("utilisation (%)")
    drawn = sum(len(alike) for alike in list(curves.values())[:top])
    ax1.set_title((title or f"link utilisation ({cluster.name})")
                  + (f" ({drawn} of {len(usage)} links, most utilised first)" if drawn < len(usage) else ""))
    if usage:  # beside the plot, never over the curves
        ax1.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        why = "no link carried data" if link_loads is not None else \
            "link loads are recorded with detail 'flows' (run with --detail flows)"
        ax1.text(0.5, 0.5, why, ha="center", va="center", transform=ax1.transAxes)
    bars = usage[:24]
    ax2.barh([u.name for u in bars], [100 * u.utilisation(length) for u in bars], color="#4c72b0")
    ax2.invert_yaxis()
    ax2.tick_params(axis="y", labelsize=6)
    ax2.set_xlabel("average utilisation over the run (%)")
    shown = "; ".join(f"{u.name} {100 * u.utilisation(length):.1f}%" for u in usage[:top])
    return _save(fig, plt, path, {"Description": f"links, most utilised first: {shown}"})


def _save(fig, plt, path, text: dict | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None, **(text or {})}, bbox_inches="tight")
    plt.close(fig)
    return path
