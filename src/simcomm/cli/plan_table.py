"""What `simcomm plan` prints: the ranked layouts (every column labelled), the scenario's own layout among them,
how much each row's rank rests on overlap, and the arguments that ask a framework for each printed row."""
from __future__ import annotations

from dataclasses import replace

from ..parallel.frameworks import FRAMEWORKS, NAMES, arguments, layout_refusal, runners
from ..parallel.layout import build_layout
from ..parallel.pipeline_parallel.schedules import SCHEDULES
from ..parallel.search import Candidate
from ..units import format_size

HEADERS = ["#", "tp", "pp", "cp", "dp", "mbs", "m (micro-batches)", "schedule", "v (virtual stages)", "ZeRO",
           "recompute", "step (s)", "vs best", "TFLOP/s/GPU", "MFU", "peak memory", "bubble", "exposed comm",
           "interference", "step w/o interference (rank)", "how"]
LEGEND = ("columns: tp, pp, cp, dp: tensor-, pipeline-, context-, data-parallel sizes; m: micro-batches per step "
          "and pipeline; v: model chunks per pipeline rank (virtual stages, interleaved 1F1B); ZeRO: 0 DDP, 1 "
          "distributed optimizer, 2 + gradients, 3 + parameters (FSDP); recompute: activation recomputation (none, "
          "selective: core attention, full: every layer); step: simulated step time, or '>=' a lower bound when not "
          "simulated; exposed comm: the share of the step spent in communication no compute hides (tp, cp, pp, dp); "
          "interference: the share lost to compute slowed by the communication beside it; step w/o interference: "
          "the same layout simulated with compute and communication not sharing the GPUs, and its rank among the "
          "rows so compared (a rank that moves rests on how well communication overlaps)")


def _candidate(row: dict) -> Candidate:
    return Candidate(row["tp"], row["pp"], row["cp"], row["mbs"], row["schedule"], row["v"], row["zero"],
                     None if row["recompute"] == "none" else row["recompute"])


def _layout(row: dict, model, base, cluster, framework: str | None):
    if row.get("own") or row.get("candidate") is False:
        return build_layout(model, base, cluster.num_ranks)
    cfg = _candidate(row).config(replace(base, framework=framework) if framework else base)
    return build_layout(model, cfg, cluster.num_ranks)


def how_to_run(row: dict, framework: str | None, model, base, cluster) -> str:
    """One line: the framework's arguments for the row's layout (with --framework any, the first framework that runs
    it), or why none runs it."""
    layout = _layout(row, model, base, cluster, framework)
    if framework is None:
        able = runners(layout)
        if not able:
            return "no framework runs it: " + "; ".join(f"{NAMES[f]}: {layout_refusal(f, layout)}"
                                                        for f in FRAMEWORKS)
        framework = able[0]
    else:
        why = layout_refusal(framework, layout)
        if why:
            return f"{NAMES[framework]} cannot run it: {why}"
    return f"{NAMES[framework]}: " + " ".join(_joined(arguments(framework, layout)))


def _joined(lines: list[str]) -> list[str]:
    """toml lines as one line: sections kept, keys separated by '; '."""
    out = []
    for line in lines:
        if out and not line.startswith(("[", "--", "ds_config")) and not out[-1].startswith(("[", "--")):
            out[-1] += ";"
        out.append(line)
    return out


def _cells(rank, r: dict, best: float, ranks_alone: dict) -> tuple:
    simulated = "step_time" in r
    t = r["step_time"] if simulated else r["bound"]
    alone = ""
    if "step_time_alone" in r:
        alone = f"{r['step_time_alone']:.4g} (#{ranks_alone[id(r)]})"
    pct = (lambda x: f"{x:.0%}") if simulated else (lambda x: "")
    return (rank, r["tp"], r["pp"], r["cp"], r["dp"], r["mbs"], r["microbatches"],
            SCHEDULES[r["schedule"]].label, r["v"],
            r["zero"], r["recompute"], f"{t:.4g}" if simulated else f">= {t:.4g}",
            f"+{t / best - 1:.1%}" if simulated and best else "", f"{r['tflops_per_gpu']:.0f}" if simulated else "",
            f"{r['mfu']:.1%}" if simulated else "", format_size(r["peak_memory"]),
            pct(r.get("bubble_share", 0.0)), pct(r.get("exposed_comm_share", 0.0)),
            pct(r.get("interference_share", 0.0)), alone, "simulated" if simulated else f"{r['bound_kind']} bound")


def own_line(own: dict, fits: list[dict], label: str) -> str:
    """Where the scenario's own layout ranks, and how far it is from the best."""
    if "step_time" not in own:
        why = own.get("error") or (f"needs {format_size(own['peak_memory'])} of {format_size(own['capacity'])} per GPU"
                                   if "peak_memory" in own else "not simulated")
        return f"the scenario's own layout ({label}) is not ranked: {why}"
    t = own["step_time"]
    faster = sum(1 for r in fits if "step_time" in r and r["step_time"] < t and not r.get("own"))
    maybe = sum(1 for r in fits if "step_time" not in r and r["bound"] < t)
    best = min([r["step_time"] for r in fits if "step_time" in r] + [t])
    where = (f"ranks #{faster + 1} of the simulated layouts" +
             (f" ({maybe} more, not simulated, might beat it too)" if maybe else ""))
    gap = "it is the best" if t <= best else f"{t / best - 1:.1%} slower than the best ({best:.4g} s)"
    inside = "" if own.get("candidate") else "; it is not in the search space as given, so it was simulated on its own"
    return f"the scenario's own layout ({label}): step {t:.4g} s, {where}; {gap}{inside}"


def plan_blocks(result, top: int, framework: str | None, model, base, cluster) -> list:
    """The blocks `simcomm plan` prints after its headline."""
    fits = result.feasible
    own = result.own
    shown = fits[:top]
    rows = list(shown)
    if own is not None and "step_time" in own and not own.get("candidate"):
        own = {**own, "own": True}
        at = next((i for i, r in enumerate(rows) if "step_time" not in r or r["step_time"] > own["step_time"]),
                  len(rows))
        rows.insert(at, own)
    best = min((r["step_time"] for r in rows if "step_time" in r), default=0.0)
    compared = sorted((r for r in rows if "step_time_alone" in r), key=lambda r: r["step_time_alone"])
    ranks_alone = {id(r): k + 1 for k, r in enumerate(compared)}
    table, runs = [], []
    n = 0
    for r in rows:
        mine = r.get("own") or (own is not None and own.get("candidate") and r["layout"] == own["layout"])
        if not r.get("own"):
            n += 1
        mark = "own" if r.get("own") else f"{n} (own)" if mine else n
        table.append(_cells(mark, r, best, ranks_alone))
        runs.append(f"#{mark}: {how_to_run(r, framework, model, base, cluster)}")
    what = "any framework" if framework is None else NAMES[framework]
    blocks = [(f"best {len(shown)} of {len(fits)} layouts that fit ({what}): the simulated ones by step time, then "
               "the others by lower bound", HEADERS, table), LEGEND]
    if own is not None:
        label = own.get("layout", "as given")
        blocks.append(own_line(own, fits, label))
    blocks.append("how to run each row:\n" + "\n".join(runs))
    return blocks


__all__ = ["how_to_run", "own_line", "plan_blocks"]
