"""DeepEP's dispatch and combine (Megatron-Core's flex token dispatcher, moe_flex_dispatcher_backend deepep): what
crosses the network for one MoE layer and micro-batch (moe.md sections 3 and 6; DeepSeek-V3 report section 3.2.2;
deepseek-ai/DeepEP's normal kernels).

A token crosses InfiniBand at most once per destination node, to the GPU of the same local index there (its
rail), which forwards it over NVLink to the GPUs holding its experts on that node; the combine runs the other way,
each node's expert outputs for a token reduced there before the one row goes back over IB. The two hops are
pipelined through DeepEP's buffers, so the exchange takes as long as the slower of them.

- nodes per token (`DeepEPExchange.nodes_per_token`): with node-limited routing (moe_router_num_groups equal to
  the EP group's nodes, DeepSeek-V3's 8 groups of EP 64 over 8 nodes) a token reaches at most
  moe_router_group_topk nodes, the bound taken here (each chosen group is chosen for its best experts); otherwise
  the expected number of distinct nodes among its k experts chosen uniformly.
- RDMA: each GPU sends each other node's same-index GPU the tokens bound there, T min(1, M share_n) rows (share_n:
  node n's share of the routed rows; T M / N balanced); its own node's tokens stay on NVLink.
- NVLink: each GPU forwards every other GPU of its node the rows for that GPU's experts among the tokens it
  received (from every node of the EP group, its own tokens included): EP x rows_to[j] / G rows for local GPU j
  (T k / G balanced), where rows_to[j] is what each EP rank routes to EP rank j.
- Row bytes: hidden_size elements, BF16; the dispatch-shaped exchanges (the dispatch, the combine's backward) in
  FP8 with one fp32 scale per 1x128 tile where moe_dispatch_fp8 (DeepSeek-V3: FP8 dispatch, BF16 combine).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

FP8_ROW_BYTES_PER_ELEMENT = 1 + 4 / 128  # e4m3 and a float32 scale per 1x128 tile


@dataclass(frozen=True)
class DeepEPExchange:
    """What DeepEP's exchange of one MoE layer needs besides the routing: tokens per GPU, bytes of a row in the
    dispatch-shaped and the combine-shaped direction, and the router's shape (experts, top-k, groups)."""

    tokens: int
    dispatch_row: float
    combine_row: float
    experts: int
    topk: int
    groups: int | None = None
    group_topk: int | None = None
    sms: int = 20  # SMs DeepEP's kernels hold (moe_deepep_num_sms), shared by the IB and NVLink hops

    def nodes_per_token(self, nodes: int) -> float:
        """Distinct nodes of a token's k experts on an EP group over `nodes` nodes (see the module docstring)."""
        E, k = self.experts, self.topk
        if nodes <= 1:
            return 1.0
        if self.groups == nodes and self.group_topk:
            return float(min(self.group_topk, k, nodes))
        per_node = E // nodes
        return nodes * (1.0 - comb(E - per_node, k) / comb(E, k))


def deepep_rows(tokens: int, limit: float, rows_to, gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """(rdma [N]: tokens each GPU sends node n's same-index GPU, nvlink [N, G]: rows each GPU of node n forwards
    each GPU of its node) for `tokens` tokens per GPU reaching `limit` nodes each, rows_to[j] the rows every EP
    rank routes to EP rank j (EP ranks node-major, G per node)."""
    rows_to = np.asarray(rows_to, dtype=np.float64)
    ep, G = len(rows_to), gpus_per_node
    per_node = rows_to.reshape(ep // G, G)
    share = per_node.sum(axis=1) / rows_to.sum()
    rdma = tokens * np.minimum(1.0, limit * share)
    return rdma, ep * per_node / G


def row_bytes(hidden: int, elem: int, fp8: bool) -> float:
    return hidden * (FP8_ROW_BYTES_PER_ELEMENT if fp8 else elem)


__all__ = ["FP8_ROW_BYTES_PER_ELEMENT", "DeepEPExchange", "deepep_rows", "row_bytes"]
