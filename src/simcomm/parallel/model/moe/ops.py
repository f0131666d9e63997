"""An MoE layer's MLP in the layer's one description (model/layer.py): what replaces FC1, the activation and FC2 on
one GPU for one micro-batch, with Megatron-Core's alltoall token dispatcher (moe.md section 3).

Forward, Ts tokens on this GPU (b s / (cp tp) under sequence parallelism): the router GEMM [Ts, h] x [h, E] and its
top-k; the permutation of the Ts k routed rows by expert; the dispatch: the per-expert counts all-gathered over EP,
then an all-to-all over EP (rows for EP rank j's experts to j), then, with ETP > 1, an all-gather over ETP; the
experts' FC1, activation (weighted by the routing probability) and FC2 as grouped GEMMs over the rows each local
expert received; the combine in reverse (ETP reduce-scatter, all-to-all back); the unpermutation; the shared
expert, a dense MLP under TP. With the flex dispatcher (moe_token_dispatcher_type flex) the exchanges are DeepEP's
(deepep.py: node-limited, IB then NVLink) and the permutation puts the rows in local-expert order at once (no sort).

The routing is an input (LayerShape.routing: each expert's share of the routed rows; empty: perfectly balanced).
Every GPU of an EP group routes its tokens alike, so the busiest EP rank -- the one whose experts have the largest
share -- receives the most rows, and its GEMMs and its all-to-alls set the pace (each GPU's program is its own; the
step model times the busiest, as every other one waits for it at the next all-to-all).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .balance import routed_counts, routing_shares
from .deepep import DeepEPExchange, row_bytes
from .dispatch import splits_by_rank
from .router import expert_rows


@dataclass(frozen=True)
class GroupedLinear:
    """Each local expert's rows [counts[i], k] times its own [k, n] weight: one grouped GEMM (moe_grouped_gemm) or one
    GEMM per expert."""

    name: str
    counts: tuple[int, ...]
    n: int
    k: int
    grouped: bool
    group: str = "experts"
    saves: tuple[tuple[str, float], ...] = ()

    @property
    def flops(self) -> float:
        return 2.0 * sum(self.counts) * self.n * self.k


@dataclass(frozen=True)
class TokenExchange:
    """Routed rows crossing GPUs: an all-to-all over EP (per_peer[j]: bytes every EP rank sends EP rank j in the
    dispatch direction; `back`: the combine direction, the transposed exchange), or over ETP an all-gather or
    reduce-scatter of the rows the ETP group received (nbytes: nccl-tests' S)."""

    name: str
    axis: str  # ep | etp
    collective: str  # all_to_all | all_gather | reduce_scatter
    nbytes: float
    per_peer: tuple[float, ...] = ()
    back: bool = False
    saves: tuple[tuple[str, float], ...] = ()
    deepep: DeepEPExchange | None = None  # the flex dispatcher's exchange (collective "deepep"; per_peer: rows)


@dataclass(frozen=True)
class ExpertRouting:
    """One MoE layer's routing on one GPU: rows it routes to each expert, rows it sends each EP rank, and the rows
    each local expert of the busiest EP rank computes (what its GEMMs are sized by)."""

    routed: tuple[int, ...]
    to_rank: tuple[int, ...]
    busiest: int
    local_counts: tuple[int, ...]

    @property
    def received(self) -> int:
        """Rows the busiest rank's experts compute (after the ETP all-gather)."""
        return int(sum(self.local_counts))


@lru_cache(maxsize=1024)
def expert_routing(tokens: int, model, ep: int, etp: int, shares: tuple = ()) -> ExpertRouting:
    """The routing of `tokens` tokens on every GPU of an EP group (see the module docstring); with
    moe_expert_capacity_factor each expert keeps at most its capacity (or is padded to it), as the router does."""
    num_experts = model.num_moe_experts
    weights = np.asarray(shares, np.float64) if shares else routing_shares(num_experts)
    routed = expert_rows(routed_counts(tokens, model.moe_router_topk, weights), tokens, model)[0]
    to_rank = splits_by_rank(routed, ep)
    busiest = int(np.argmax(to_rank))
    local = num_experts // ep
    counts = routed[busiest * local:(busiest + 1) * local] * ep * etp
    return ExpertRouting(tuple(int(x) for x in routed), tuple(int(x) for x in to_rank), busiest,
                         tuple(int(x) for x in counts))


def moe_mlp(shape, Linear, Pointwise) -> list:
    """The MoE layer's operations between the pre-MLP norm and the residual add (forward order). Linear and
    Pointwise are layer.py's operations (passed in: layer.py imports this module)."""
    c = shape.model
    t, ep, etp, e, h = shape.tp, shape.ep, shape.etp, shape.elem, c.hidden_size
    Ts, T, E, k = shape.sp_tokens, shape.tokens, c.num_moe_experts, c.moe_router_topk
    f = c.moe_ffn_hidden_size // etp
    up = 2 * f if c.swiglu else f
    r = expert_routing(Ts, c, ep, etp, shape.routing)
    rows, R = Ts * k, r.received
    sent = tuple(float(n * h * e) for n in r.to_rank)
    ops = [Linear("router", Ts, E, h, "none", "router", (("router_input", Ts * h * e),)),
           Pointwise("router.topk", Ts * E * 4 * 3, Ts * E * 4 * 3, "softmax", (("router_probs", Ts * E * 4),)),
           Pointwise("moe.permute", (Ts + rows) * h * e, (Ts + rows) * h * e)]
    flex = None
    if shape.dispatcher == "flex":
        flex = DeepEPExchange(Ts, row_bytes(h, e, shape.dispatch_fp8), row_bytes(h, e, False), E, k,
                              c.moe_router_num_groups, c.moe_router_group_topk, shape.deepep_sms)
    if ep > 1 and flex is not None:
        ops.append(TokenExchange("moe.dispatch", "ep", "deepep", sum(sent), tuple(map(float, r.to_rank)),
                                 deepep=flex))
    elif ep > 1:
        ops.append(TokenExchange("moe.dispatch", "ep", "all_to_all", sum(sent), sent))
    if etp > 1:
        ops.append(TokenExchange("moe.dispatch.etp", "etp", "all_gather", float(R * h * e)))
    # rows arrive by source rank: sorted by local expert (and back); the flex dispatcher permutes the tokens
    # DeepEP delivered into local-expert order once (Megatron-Core's flex dispatcher), so nothing is sorted
    sorts = E // ep > 1 and ep * etp > 1 and flex is None
    if sorts:
        ops.append(Pointwise("moe.sort", 2 * R * h * e, 2 * R * h * e))
    act = "swiglu" if c.swiglu else "gelu"
    ops += [GroupedLinear("moe.fc1", r.local_counts, up, h, shape.grouped_gemm, saves=(("moe_fc1_input", R * h * e),)),
            Pointwise(f"moe.{act}", R * (up + f) * e, R * (2 * up + f) * e, saves=(("moe_activation_input",
                                                                                   R * up * e),)),
            GroupedLinear("moe.fc2", r.local_counts, h, f, shape.grouped_gemm, saves=(("moe_fc2_input", R * f * e),))]
    if sorts:
        ops.append(Pointwise("moe.unsort", 2 * R * h * e, 2 * R * h * e))
    if etp > 1:
        ops.append(TokenExchange("moe.combine.etp", "etp", "reduce_scatter", float(R * h * e)))
    if ep > 1 and flex is not None:
        ops.append(TokenExchange("moe.combine", "ep", "deepep", float(ep * r.to_rank[r.busiest] * h * e),
                                 tuple(map(float, r.to_rank)), back=True, deepep=flex))
    elif ep > 1:
        ops.append(TokenExchange("moe.combine", "ep", "all_to_all", float(ep * r.to_rank[r.busiest] * h * e), sent,
                                 back=True))
    ops.append(Pointwise("moe.unpermute", (rows + Ts) * h * e, (rows + Ts) * h * e,
                         saves=(("moe_unpermute_input", rows * h * e),)))
    if c.moe_shared_expert_intermediate_size is not None:
        fs = c.moe_shared_expert_intermediate_size // t
        ups = 2 * fs if c.swiglu else fs
        ops += [Linear("shared_expert.fc1", T, ups, h, "column", "shared_experts", (("shared_fc1_input", Ts * h * e),)),
                Pointwise(f"shared_expert.{act}", T * (ups + fs) * e, T * (2 * ups + fs) * e,
                          saves=(("shared_activation_input", T * ups * e),)),
                Linear("shared_expert.fc2", T, h, fs, "row", "shared_experts", (("shared_fc2_input", T * fs * e),))]
        if c.moe_shared_expert_gate:
            ops.append(Linear("shared_expert.gate", Ts, 1, h, "none", "shared_experts"))
    return ops


__all__ = ["ExpertRouting", "GroupedLinear", "TokenExchange", "expert_routing", "moe_mlp"]
