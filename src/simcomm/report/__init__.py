"""Reports: the text/rich report of a run, JSON, a Chrome/Perfetto trace and matplotlib PNGs."""
from __future__ import annotations

import json
from pathlib import Path

from ..units import format_size
from .json_out import dumps, result_json
from .nccl_tests import nccl_table, tuner_summary
from .table import render, text_table

PLOT_FILES = {"busbw": "busbw.png", "timeline": "timeline.png", "links": "links.png"}


def _us(t) -> float | None:
    return None if t is None else t * 1e6


def report_blocks(result) -> list:
    """The report as blocks for table.render: header lines, then tables."""
    d = result.cluster.describe()
    intra = d["intra_node"]
    head = [f"scenario {result.name}: {result.kind} on {d['name']} ({d['ranks']} ranks of {d['device']}; "
            f"{intra['kind']} {intra['bandwidth'] / 1e9:g} GB/s inside a node"
            + (f", {d['inter_node']['bandwidth'] / 1e9:g} GB/s NICs over {d['inter_node']['fabric']}"
               if d["nodes"] > 1 else "") + ")"]
    blocks: list = ["\n".join(head)]
    if result.kind == "perf":
        by: dict = {}
        for r in result.rows:
            by.setdefault((r.collective, r.requested), []).append(r)
        for (kind, requested), rows in by.items():
            table = [(format_size(r.size), r.count, r.dtype, r.redop, r.root_column, r.time * 1e6, r.algbw / 1e9,
                      r.busbw / 1e9, r.algorithm, r.protocol) for r in rows]
            peak = max(rows, key=lambda r: r.busbw)
            blocks.append((f"{kind} over {rows[0].ranks} ranks, algorithm {requested}: peak busbw "
                           f"{peak.busbw / 1e9:.2f} GB/s at {format_size(peak.size)}",
                           ["size", "count", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                            "algorithm", "protocol"], table))
    elif result.kind == "contention":
        table = [(g.name, g.collective, g.ranks, format_size(g.size), g.start * 1e6, g.time * 1e6, _us(g.alone),
                  g.slowdown, g.busbw / 1e9, f"{g.algorithm}/{g.protocol}") for g in result.rows]
        blocks.append(("groups running together", ["group", "collective", "ranks", "size", "start (us)",
                                                   "time (us)", "alone (us)", "slowdown", "busbw (GB/s)",
                                                   "choice"], table))
    else:
        table = [(r["rank"], r["device"], r["finish"] * 1e6, r["collective_time"] * 1e6,
                  _short(r["result"])) for r in result.rows]
        blocks.append(("ranks", ["rank", "device", "finish (us)", "in collectives (us)", "result"], table))
    stats = result.simulation.stats() if result.simulation is not None else {}
    blocks.append(f"simulated {result.elapsed * 1e6:.2f} us in {result.wall:.2f} s wall "
                  f"({stats.get('events', 0)} events)" + "".join(f"\nnote: {n}" for n in result.notes))
    return blocks


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def write_outputs(result, out_dir, json_file=None, trace_file=None, plots=()) -> dict:
    """Write what was asked into out_dir; returns {what: path}."""
    out = Path(out_dir)
    written: dict[str, str] = {}
    if trace_file or plots:
        out.mkdir(parents=True, exist_ok=True)
    timeline = result.timeline if (trace_file or set(plots) & {"timeline", "links"}) else []
    if trace_file:
        from .perfetto import chrome_trace
        path = out / trace_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(chrome_trace(timeline, result.cluster, title=result.name), separators=(",", ":")))
        written["trace"] = str(path)
    if plots:
        from . import plots as p
        for name in plots:
            path = out / PLOT_FILES[name]
            if name == "busbw":
                if result.kind != "perf":
                    continue
                p.plot_busbw(result.rows, path, f"{result.name}: busbw ({result.cluster.name})")
            elif name == "timeline":
                p.plot_timeline(timeline, result.cluster, path, f"{result.name}: timeline")
            else:
                p.plot_links(timeline, result.cluster, path, f"{result.name}: link utilisation")
            written[name] = str(path)
    if json_file:
        path = out / json_file
        path.parent.mkdir(parents=True, exist_ok=True)
        written["json"] = str(path)
        path.write_text(dumps(result_json(result, written)))
    return written


__all__ = ["PLOT_FILES", "dumps", "nccl_table", "render", "report_blocks", "result_json", "text_table",
           "tuner_summary", "write_outputs"]
