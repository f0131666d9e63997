"""Reading a parallel run's per-rank results back as one model: full parameters and the global loss curve."""
from __future__ import annotations

import math

import numpy as np

from .model.gpt import WORD, param_specs, unshard


def global_losses(results: list[dict], layout) -> list[float]:
    """The loss of each step over the whole batch (the shares of the ranks that hold the last stage, one TP rank,
    summed over dp x cp and, in DualPipe, over the two ranks that hold it)."""
    last = {r for r in range(layout.dims.pp) for c in range(layout.chunks) if layout.has_output(r, c)}
    shares = [r["loss_share"] for r in results if r["coords"]["pp"] in last and r["coords"]["tp"] == 0]
    return [float(sum(s[i] for s in shares)) for i in range(layout.config.train_iters)]


def _from_shards(results: list[dict], name: str) -> np.ndarray | None:
    """A parameter rebuilt from ZeRO-3 shards (the ranks given hold one bucket layout between them)."""
    pieces: dict[tuple, dict] = {}
    for r in results:
        for b in r["shards"] or ():
            if name in b["names"]:
                pieces.setdefault(tuple(b["names"]), {})[b["shard"]] = (b, b["data"])
    for parts in pieces.values():
        b = next(iter(parts.values()))[0]
        flat = np.concatenate([d for _, (_, d) in sorted(parts.items())])
        i = b["names"].index(name)
        n = math.prod(b["shapes"][i])
        return flat[b["offsets"][i]:b["offsets"][i] + n].reshape(b["shapes"][i])
    return None


def full_params(results: list[dict], layout) -> dict:
    """Every parameter, whole, from the ranks that hold it (TP parts concatenated; ZeRO-3 shards joined). The
    tied word embedding is taken from the first stage."""
    specs = param_specs(layout.model)
    out = {}
    for name, spec in specs.items():
        if spec.expert:
            out[name] = _full_experts(results, layout, name, spec)
            continue
        parts = []
        for t in range(layout.dims.tp):
            holders = [r for r in results if r["coords"]["tp"] == t and _holds(r, name)]
            if name == WORD:
                holders.sort(key=lambda r: r["coords"]["pp"])
            first = holders[0]
            same = [r for r in holders if r["coords"]["pp"] == first["coords"]["pp"]]
            if first["params"] and name in first["params"]:
                parts.append(first["params"][name])
            else:
                parts.append(_from_shards([r for r in same if r["coords"]["dp"] >= 0], name))
        out[name] = unshard(parts, spec)
    return out


def _full_experts(results: list[dict], layout, name: str, spec) -> np.ndarray:
    """An MoE layer's experts, whole: each EP rank's experts, their ETP parts joined."""
    dims = layout.dims
    parts = []
    for e in range(dims.ep):
        for t in range(dims.etp):
            holder = next(r for r in results if r["expert_coords"]["ep"] == e and r["expert_coords"]["etp"] == t
                          and _holds(r, name))
            parts.append(holder["params"][name])
    return unshard(parts, spec, dims.ep)


def held_params(results: list[dict]) -> dict[int, dict]:
    """rank -> the TP-local parameters of the model chunks it holds, whole: its own copy, or under ZeRO-3 the copy
    its data-parallel group holds between them (rebuilt from the shards of the ranks with its pp and tp
    coordinates). For checking that every copy of a parameter is the same."""
    out = {}
    for r in results:
        if r["params"]:
            out[r["rank"]] = r["params"]
            continue
        c = r["coords"]
        group = [x for x in results if x["coords"]["pp"] == c["pp"] and x["coords"]["tp"] == c["tp"]]
        out[r["rank"]] = {n: _from_shards(group, n) for b in r["shards"] or () for n in b["names"]}
    return out


def _holds(result: dict, name: str) -> bool:
    if result["params"] and name in result["params"]:
        return True
    return any(name in b["names"] for b in result["shards"] or ())
