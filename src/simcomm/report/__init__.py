"""Reports: the text/rich report of a run, JSON, a Chrome/Perfetto trace and matplotlib PNGs."""
from __future__ import annotations

import json
from pathlib import Path

from .json_out import dumps, result_json
from .nccl_tests import nccl_table, tuner_summary
from .table import render, text_table

PLOT_FILES = {"busbw": "busbw.png", "timeline": "timeline.png", "links": "links.png", "schedule": "schedule.png",
              "breakdown": "breakdown.png"}


def write_outputs(result, out_dir, json_file=None, trace_file=None, plots=(), rank_traces=None) -> dict:
    """Write what was asked into out_dir; returns {what: path}. `plots` should hold only plots that apply to the
    result's workload (workloads.plots_for); a plot that needs more than the timeline and the rows finds its input in
    result.plot_data (the workload puts it there). `rank_traces` names a directory for one Kineto-style trace per
    rank (what Holistic Trace Analysis loads)."""
    out = Path(out_dir)
    written: dict[str, str] = {}
    if trace_file or plots:
        out.mkdir(parents=True, exist_ok=True)
    timeline = result.timeline if (trace_file or set(plots) & {"timeline", "links", "schedule"}) \
        else []
    loads = result.simulation.recorder.link_loads if result.simulation is not None else None
    if rank_traces:
        from .kineto import write_rank_traces
        acts = result.activities(kernels=True)
        write_rank_traces(acts, result.cluster, out / rank_traces, result.copies, result.about_ranks(acts))
        written["rank_traces"] = str(out / rank_traces)
    if trace_file:
        from .perfetto import chrome_trace
        path = out / trace_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(chrome_trace(timeline, result.cluster, title=result.name,
                                               link_loads=loads), separators=(",", ":")))
        written["trace"] = str(path)
    if plots:
        from . import plots as p
        for name in plots:
            path = out / PLOT_FILES[name]
            if name == "busbw":
                p.plot_busbw(result.rows, path, f"{result.name}: busbw ({result.cluster.name})")
            elif name == "timeline":
                p.plot_timeline(timeline, result.cluster, path, f"{result.name}: timeline")
            elif name == "schedule":
                from .training_plots import plot_schedule
                plot_schedule(timeline, path, f"{result.name}: pipeline schedule")
            elif name == "breakdown":
                from .training_plots import plot_breakdown
                plot_breakdown(result.plot_data["breakdown"], path, f"{result.name}: where the step's time goes")
            else:
                span = (min((a.start for a in timeline), default=0.0), max((a.end for a in timeline), default=0.0))
                p.plot_links(loads, result.cluster, path, f"{result.name}: link utilisation", span=span)
            written[name] = str(path)
    if json_file:
        path = out / json_file
        path.parent.mkdir(parents=True, exist_ok=True)
        written["json"] = str(path)
        path.write_text(dumps(result_json(result, written)))
    return written


__all__ = ["PLOT_FILES", "dumps", "nccl_table", "render", "result_json", "text_table",
           "tuner_summary", "write_outputs"]
