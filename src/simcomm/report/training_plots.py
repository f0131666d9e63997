"""PNGs of a training step: the pipeline schedule as the papers draw it, where the time goes as stacked bars, and
a layout search's candidates. They read record tags (stage, microbatch, chunk, phase) and plain dicts, nothing
of the step model itself."""
from __future__ import annotations

from pathlib import Path

from .plots import _pyplot, _save

PHASE_COLORS = {"forward": "#4c72b0", "backward": "#55a868", "backward_input": "#64b5cd",
                "backward_weight": "#ccb974", "optimizer": "#c44e52"}
PHASE_LABELS = {"forward": "forward", "backward": "backward", "backward_input": "input gradient (I)",
                "backward_weight": "weight gradient (W)", "optimizer": "optimizer"}
SPLIT = ("backward_input", "backward_weight")  # the zero-bubble split: in the legend only where it runs
CATEGORY_COLORS = {"forward": "#4c72b0", "backward": "#55a868", "recompute": "#8fbbd9", "tp": "#dd8452",
                   "cp": "#937860", "pp": "#da8bc3", "dp": "#c44e52", "optimizer": "#8172b2", "bubble": "#cccccc",
                   "interference": "#ccb974"}
CATEGORY_LABELS = {"forward": "forward", "backward": "backward", "recompute": "recompute", "tp": "exposed TP",
                   "cp": "exposed CP", "pp": "exposed PP", "dp": "exposed DP", "optimizer": "optimizer",
                   "bubble": "bubble / idle", "interference": "interference"}


def _shade(color: str, chunk: int, chunks: int) -> str:
    """Later model chunks drawn lighter, as interleaved schedules are drawn in Narayanan et al. 2021."""
    if chunks <= 1:
        return color
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    f = 0.55 * chunk / (chunks - 1)
    return "#" + "".join(f"{int(c + (255 - c) * f):02x}" for c in (r, g, b))


def plot_schedule(activities, path, title: str = "", max_stages: int = 32, max_passes: int = 64) -> Path:
    """One row per pipeline stage (its first GPU): forward and backward passes as boxes labelled with their
    micro-batch (a backward split in two, zero-bubble's I and W, in two colours of their own), model chunks
    shaded, the optimizer at the end; white is idle. When the first stage runs more than
    `max_passes` passes, only the time up to the end of its max_passes-th is drawn (thousands of passes would be
    a blur of one-pixel boxes), and the title and the PNG's Description say which part is shown."""
    plt = _pyplot()
    passes: dict[int, list] = {}
    first_gpu: dict[int, int] = {}
    for a in activities:
        stage, phase = a.tags.get("stage"), a.tags.get("phase")
        if a.kind != "compute" or stage is None or phase not in PHASE_COLORS or "layer" in a.tags:
            continue
        if first_gpu.setdefault(stage, a.rank) != a.rank:
            continue
        passes.setdefault(stage, []).append(a)
    stages = sorted(passes)[:max_stages]
    chunks = 1 + max((a.tags.get("chunk", 0) for s in stages for a in passes[s]), default=0)
    fig, ax = plt.subplots(figsize=(12, 0.9 + 0.42 * max(len(stages), 1)), dpi=110)
    span = max((a.end for s in stages for a in passes[s]), default=1.0)
    window, note = _window([a for a in passes[stages[0]] if a.tags["phase"] != "optimizer"] if stages else [],
                           span, max_passes)
    for row, stage in enumerate(stages):
        bars: dict[str, list] = {}  # one broken_barh per colour: thousands of passes draw in one call each
        for a in passes[stage]:
            if a.start >= window:
                continue
            phase, end = a.tags["phase"], min(a.end, window)
            bars.setdefault(_shade(PHASE_COLORS[phase], a.tags.get("chunk", 0), chunks), []).append(
                (a.start, end - a.start))
            if phase != "optimizer" and (end - a.start) / window > 0.012:
                ax.text((a.start + end) / 2, row + 0.5, str(a.tags.get("microbatch", "")), ha="center",
                        va="center", fontsize=6, color="white")
        for color, spans in bars.items():
            ax.broken_barh(spans, (row + 0.08, 0.84), facecolors=color, edgecolor="white",
                           linewidth=0.4 if len(spans) < 400 else 0.0)
    ax.set_yticks([i + 0.5 for i in range(len(stages))])
    ax.set_yticklabels([f"stage {s} (GPU {first_gpu[s]})" for s in stages], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, window * 1.005)
    ax.set_xlabel("time (s)")
    ran = {a.tags["phase"] for s in stages for a in passes[s]}
    shown = [p for p in PHASE_COLORS if p not in SPLIT or p in ran]
    handles = [plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS[p]) for p in shown]
    ax.legend(handles, [PHASE_LABELS[p] for p in shown], fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    more = f" (first {max_stages} stages)" if len(passes) > max_stages else ""
    ax.set_title((title or "pipeline schedule") + more + "; numbers are micro-batches" +
                 ("; lighter = later model chunk" if chunks > 1 else "") + (f"\n{note}" if note else ""), fontsize=9)
    return _save(fig, plt, path, {"Description": note or "the whole step"})


def _window(first_stage: list, span: float, max_passes: int) -> tuple[float, str]:
    """(end of the drawn time, a note saying what is left out): the whole step, or up to the end of the first
    stage's max_passes-th pass."""
    ends: dict[tuple, float] = {}  # a pass waiting for its parameters is recorded in pieces
    for a in first_stage:
        key = (a.tags.get("microbatch"), a.tags.get("chunk", 0), a.tags["phase"])
        ends[key] = max(ends.get(key, 0.0), a.end)
    if len(ends) <= max_passes:
        return span, ""
    end = sorted(ends.values())[max_passes - 1]
    return end, (f"showing the first {end:.3g} s of the {span:.3g} s step: the first {max_passes} of the "
                 f"{len(ends)} passes of the first stage (the rest repeats the steady state; the trace has every "
                 "pass)")


def plot_breakdown(step: dict, path, title: str = "") -> Path:
    """Stacked bars: where each pipeline stage's step time goes, and the mean over stages."""
    plt = _pyplot()
    stages = step["breakdown_per_stage"]
    bars = [("mean", step["breakdown"])] + [(f"stage {i}", s) for i, s in enumerate(stages)]
    if len(bars) > 33:
        bars = bars[:33]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(bars) + 3), 4.5), dpi=110)
    bottoms = [0.0] * len(bars)
    for cat, color in CATEGORY_COLORS.items():
        values = [b[1].get(cat, 0.0) for b in bars]
        if not any(values):
            continue
        ax.bar(range(len(bars)), values, bottom=bottoms, color=color, label=CATEGORY_LABELS[cat], width=0.7)
        bottoms = [x + v for x, v in zip(bottoms, values)]
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars], rotation=60 if len(bars) > 8 else 0, fontsize=7)
    ax.set_ylabel("seconds of the step")
    ax.set_title(title or f"step {step['step_time']:.4g} s: where the time goes", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _save(fig, plt, path)


def plot_plan(rows: list[dict], path, title: str = "") -> Path:
    """Every layout that fits: predicted step time (filled: simulated; hollow: lower bound) against peak memory
    per GPU, coloured by pipeline size, the best one named."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    ok = [r for r in rows if r.get("fits") and ("step_time" in r or "bound" in r)]
    pps = sorted({r["pp"] for r in ok})
    cmap = plt.get_cmap("viridis", max(len(pps), 2))
    for i, pp in enumerate(pps):
        for simulated in (False, True):
            pts = [r for r in ok if r["pp"] == pp and ("step_time" in r) == simulated]
            if pts:
                ax.scatter([r["peak_memory"] / 2**30 for r in pts],
                           [r["step_time"] if simulated else r["bound"] for r in pts], s=16 if simulated else 12,
                           color=cmap(i), facecolors=cmap(i) if simulated else "none", linewidths=0.8,
                           label=f"pp {pp}" if not simulated or not any("step_time" not in r and r["pp"] == pp
                                                                        for r in ok) else None)
    sim = [r for r in ok if "step_time" in r]
    if sim:
        best = min(sim, key=lambda r: r["step_time"])
        ax.annotate(f"best: {best['layout']}", (best["peak_memory"] / 2**30, best["step_time"]), fontsize=7,
                    xytext=(-160, 40), textcoords="offset points", arrowprops={"arrowstyle": "->", "lw": 0.8})
        ax.axvline(best["capacity"] / 2**30, color="#c44e52", linestyle="--", linewidth=1, label="HBM capacity")
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("step time (s): filled simulated, hollow lower bound")
    ax.set_title(title or "layouts", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, plt, path)
