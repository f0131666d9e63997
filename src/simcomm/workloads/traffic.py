"""What each rank of a rank program sent and what it reported, read from the recorded operations.

Bytes sent are the payloads of the flows each rank was the source of (recorded with model.detail 'flows', the
default up to 64 ranks), split into those that carried collectives and point-to-point sends; with 'steps' detail
no flows are kept and the bytes are not known. A program that tags its operations with an `axis`
(simcomm.clock.tagged(axis=...), as the parallel training programs do: tp, cp, dp, pp, embedding) also has its
bytes split by axis. A program that returns a mapping with a "loss" (a number, or one per step) has its first and
last loss reported.
"""
from __future__ import annotations

from collections.abc import Mapping

AXES = ("tp", "cp", "dp", "pp", "ep", "embedding")  # the order the split is shown in; other axes follow by name
UNTAGGED = "other"  # bytes of flows without an axis, when other flows of the run have one


def bytes_sent(simulation, ranks: int) -> list[dict] | None:
    """Per rank: {"collective": bytes, "p2p": bytes, "p2p_messages": count}, plus "by_axis": {axis: bytes} when
    any flow carries an axis tag; None without recorded flows."""
    if simulation.recorder.detail != "flows":
        return None
    out = [{"collective": 0.0, "p2p": 0.0, "p2p_messages": 0} for _ in range(ranks)]
    by_axis = [{} for _ in range(ranks)]
    for a in simulation.recorder.activities():
        if 0 <= a.rank < ranks:
            if a.kind == "send":
                out[a.rank]["collective" if "collective" in a.tags else "p2p"] += a.nbytes
                axis = str(a.tags.get("axis", UNTAGGED))
                by_axis[a.rank][axis] = by_axis[a.rank].get(axis, 0.0) + a.nbytes
            elif a.kind == "p2p":
                out[a.rank]["p2p_messages"] += 1
    if any(set(split) - {UNTAGGED} for split in by_axis):
        for row, split in zip(out, by_axis):
            row["by_axis"] = {k: split[k] for k in sorted(split, key=_axis_order)}
    return out


def _axis_order(axis: str) -> tuple:
    return (axis == UNTAGGED, AXES.index(axis) if axis in AXES else len(AXES), axis)


def losses(result) -> tuple[float | None, float | None, int]:
    """(first, last, steps) of the loss a program returned in {"loss": ...}; Nones if it returned none."""
    if not isinstance(result, Mapping) or "loss" not in result:
        return None, None, 0
    value = result["loss"]
    series = list(value) if isinstance(value, (list, tuple)) else [value]
    known = [float(v) for v in series if v is not None]
    if not known:
        return None, None, len(series)
    return known[0], known[-1], len(series)
