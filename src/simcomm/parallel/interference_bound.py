"""A lower bound of a layout's step time that counts the compute the data-parallel communication slows (the layout
search's schedule bound, search.py; the model of the slowdown: engine/sharing.py).

Take one GPU of pipeline rank r: the first of its stage, which every data-parallel collective of the stage runs on
(data_parallel/timing.py; its group is the first representative's). Until every stage is ready for the optimizer
(X = the step - the longest optimizer), that GPU

- computes its passes: P seconds alone (their templates' durations), longer by E where communication slows them;
- is idle I >= I0 seconds outside its passes: before its first pass, the forwards of the ranks that feed it; after
  its last backward, the backwards of the ranks it feeds (with the transfers between them, each at least the
  quickest pipeline send alone); on the last stage, each micro-batch's loss all-reduce;
- runs the data-parallel stream's collectives one after another, U seconds at least (each at least as long as
  alone on the cluster: contention and compute beside it only slow it), each holding its NCCL channels' SMs.

So X = P + E + I, and at least U - I of the stream runs beside the pass's kernels (idle waits inside a pass, the
exposed TP and CP communication of its templates, are kernels that do not slow). A kernel slowed by s >= s_k for
a wall time w adds w (1 - 1/s) >= w (1 - 1/s_k), and at least w - t_k when its time alone is t_k; the least E that
covers an overlap O is the cheapest such fill (`_extra`), and X >= P + I0 + _extra(U - I0) (the bound grows with I,
each second idle saving less than a second of slowdown). s_k is the kernel's least slowdown beside at least h SMs
held, h the fewest channels of the collectives counted (every h tried: the collectives holding at least h).

The stream's collectives are the layout's data-parallel policy's own, in a dry run of its hooks in the order the
stages call them (dp_stream.py), before the optimizer. A test checks that the bound never exceeds
the simulated step.
"""
from __future__ import annotations

import numpy as np

from ..engine import IDLE_KERNEL
from ..engine.sharing import slowdown
from .dp_stream import SLACK, collective_alone, dry_run
from .pipeline_parallel.actions import BACKWARD, FORWARD, computations


def interference_bound(layout, passes: dict, cluster, alone: dict, comm: float = 0.0) -> float:
    """max over the first and last pipeline rank of P + I0 + _extra(U - I0) (module docstring), without the
    optimizer; 0 when compute and communication do not share the GPUs, or communication costs nothing. `alone`: a
    cache of collectives' (time, channels) alone on `cluster`, kept by the caller across layouts; `comm`: the least
    seconds an activation or gradient takes between two pipeline ranks."""
    dev, cfg = cluster.device, layout.config
    if not (cluster.template.tuning.interference and dev.sms > 0) or cfg.ideal_network:
        return 0.0
    # any ranks give a bound; these two most often the highest (the first waits for nothing; the last runs the
    # loss), and timing each rank's collectives alone costs most at scale (pp groups of up to thousands of GPUs)
    ranks = sorted({0, layout.dims.pp - 1})
    run, ran, _waited = dry_run(layout, passes, ranks)
    issued = run.issued
    out = 0.0
    for r in ranks:
        stream = [(t * n, ch) for (kind, group, size, dtype), n in issued[r].items()
                  for t, ch in [collective_alone(cluster, alone, kind, run.groups[group], size, dtype)]]
        if not stream:
            continue
        busy = sum(p.duration * n for p, n in ran[r].values())
        idle = _edges(layout, passes, r, comm) + _losses(layout, cluster, alone, r)
        kernels, cut = _inventory(ran[r])
        for h in sorted({ch for _t, ch in stream}):
            held = sum(t for t, ch in stream if ch >= h) * (1 - SLACK)
            shapes = kernels.keys() | set().union(*(ks for ks, _t in cut))
            least = {k: _least(k, h, dev.sms, dev.memory_bandwidth) for k in shapes}
            items = [(t, least[k]) for k, t in kernels.items()] + [(t, min(least[k] for k in ks)) for ks, t in cut]
            out = max(out, busy + idle + _extra(max(0.0, held - idle), items))
    return out


def _inventory(ran: dict) -> tuple[dict, list]:
    """What the passes in `ran` are made of: {kernel: seconds alone} (an idle wait, exposed communication, as the
    idle kernel), and for each pass cut inside a part, whose jobs mix its parts' kernels in other shares, (its
    kernels, its seconds)."""
    kernels: dict = {}
    cut: list = []
    for (_id, inside), (p, n) in ran.items():
        mine: dict = {}
        for part in p.parts:
            tpl = part.template
            pairs = [(tpl.duration, IDLE_KERNEL)] if tpl.mix is None else \
                zip((tpl.mix.weights * tpl.duration).tolist(), tpl.mix.kernels)
            for t, k in pairs:
                mine[k] = mine.get(k, 0.0) + t * n
        if inside:
            cut.append((frozenset(mine), sum(mine.values())))
        else:
            for k, t in mine.items():
                kernels[k] = kernels.get(k, 0.0) + t
    return kernels, cut


def _extra(overlap: float, items: list[tuple[float, float]]) -> float:
    """The least time the kernels `items` ((seconds alone, least slowdown)) can have added while communication ran
    beside them for `overlap` seconds: w seconds beside kernel k add at least max(w (1 - 1/s_k), w - t_k), filled
    cheapest first."""
    extra = 0.0
    for rate, room in sorted((1.0 - 1.0 / s, t * s) for t, s in items):
        if overlap <= 0:
            return extra
        w = min(room, overlap)
        extra += w * rate
        overlap -= w
    return extra + max(overlap, 0.0)


def _least(kernel, held: int, sms: int, hbm: float) -> float:
    """The kernel's least slowdown beside `held` or more of the GPU's SMs (engine/sharing.py)."""
    key = (kernel, held, sms, hbm)
    got = _LEAST.get(key)
    if got is None:
        got = _LEAST[key] = min((slowdown(kernel, h, 0, sms, hbm) for h in range(held, sms + 1)), default=1.0)
    return got


_LEAST: dict = {}


def _edges(layout, passes: dict, r: int, comm: float) -> float:
    """Seconds pipeline rank r waits outside its passes at least: before its first pass, the forwards that feed
    it; after its last, when that is a full backward, the backwards it feeds (other ranks' passes, alone), and
    `comm` for each hop between two ranks on the way."""
    actions = list(computations(layout.schedule[r]))
    placement, out = layout.placement, 0.0
    for a, phase in ((actions[0], FORWARD), (actions[-1], BACKWARD)):
        if a.phase != phase:
            continue
        here, at = r, placement.prev(r, a.chunk)
        while at is not None and at[0] != r:
            out += passes[(at[0], at[1], phase)].duration + (comm if at[0] != here else 0.0)
            here, at = at[0], placement.prev(*at)
    return out


def _losses(layout, cluster, alone: dict, r: int) -> float:
    """Seconds rank r's compute waits for the loss all-reduce after each forward of the model's last stage."""
    n = sum(a.phase == FORWARD and layout.placement.next(r, a.chunk) is None
            for a in computations(layout.schedule[r]))
    return n * loss_all_reduce(layout, cluster, alone, r) if n else 0.0


def loss_all_reduce(layout, cluster, alone: dict, r: int) -> float:
    """The least seconds rank r waits for the loss all-reduce after a forward of the model's last stage
    (pipeline_parallel/timing.py, Megatron's loss_func): alone on the cluster; 0 where the step runs none."""
    dims, cfg = layout.dims, layout.config
    if not cfg.step_collectives or dims.dp * dims.cp < 2:
        return 0.0
    group = np.asarray(dims.ranks(pp=r, tp=0), dtype=np.int64).reshape(-1)
    return collective_alone(cluster, alone, "all_reduce", group, 4, "float32")[0]


__all__ = ["interference_bound", "loss_all_reduce"]
