"""Hierarchical (two-level) all-reduce: reduce-scatter inside each node, all-reduce across nodes, all-gather.

With N nodes of L ranks each (local index l = position among the node's ranks):
1. intra-node ring reduce-scatter, every node at once: L-1 steps; local rank l ends with chunk l of its node's sum;
2. inter-node ring all-reduce of chunk l among the N ranks with local index l, one ring per local index, all at
   once (so the traffic rides every NIC rail): 2(N-1) steps of chunk/N;
3. intra-node ring all-gather: L-1 steps.
Total 2(L-1) + 2(N-1) steps. Needs the group to cover whole nodes (every local rank of every node it touches);
its placement says how many ranks a node has. Anything else is an AlgorithmError.
"""
from __future__ import annotations

import numpy as np

from ..arrays import unique
from ..errors import AlgorithmError
from .base import Algorithm, stepwise
from .cost import CostModel
from .plan import Buffers, Collective, step
from .reduce_ops import combine


def node_grid(ranks: np.ndarray, rpn: int | None) -> np.ndarray | None:
    """(nodes, ranks_per_node) array of group ranks, or None when the group does not cover whole nodes."""
    if not rpn:
        return None
    nodes = ranks // rpn
    order = np.lexsort((ranks, nodes))
    uniq, counts = np.unique(nodes, return_counts=True)
    if (counts != rpn).any() or len(unique(ranks)) != len(ranks):
        return None
    return order.reshape(len(uniq), rpn)


def why_not(ranks: np.ndarray, rpn: int | None) -> str | None:
    """Why hierarchical cannot run on this group (None when it can)."""
    if not rpn:
        return "hierarchical needs to know ranks per node (place the collective on a cluster)"
    if node_grid(ranks, rpn) is None:
        nodes, counts = np.unique(ranks // rpn, return_counts=True)
        detail = ", ".join(f"node {a}: {b}" for a, b in list(zip(nodes.tolist(), counts.tolist()))[:6])
        return (f"hierarchical all_reduce needs a group of whole nodes ({rpn} ranks on every node it touches); "
                f"this group has {detail}{', ...' if len(nodes) > 6 else ''}")
    return None


def hierarchical_all_reduce(coll: Collective, buf: Buffers):
    n = coll.n
    rpn = coll.placement.ranks_per_node
    reason = why_not(coll.ranks, rpn)
    if reason:
        raise AlgorithmError(reason)
    if n == 1:
        return
    grid = node_grid(coll.ranks, rpn)  # grid[k, l]: group rank of local index l on node k
    nn, ll = grid.shape
    sub = -(-coll.count // (ll * nn)) if coll.count else 0
    elems = np.clip(coll.count - sub * np.arange(ll * nn), 0, sub).reshape(ll, nn)  # true size of (chunk, part)
    chunk_bytes = elems.sum(axis=1) * coll.itemsize
    part_bytes = elems * coll.itemsize
    work = None
    if buf.live:
        padded = np.zeros((n, ll * nn * sub), dtype=buf.rows.dtype)
        padded[:, :coll.count] = buf.rows
        work = padded.reshape(n, ll, nn, sub)
    loc = np.tile(np.arange(ll), nn)  # local index of each flow's sender, node-major
    src_intra = grid.reshape(-1)
    dst_intra = grid[:, (np.arange(ll) + 1) % ll].reshape(-1)
    pos = np.repeat(np.arange(nn), ll)  # node position of each inter-node flow's sender
    src_inter = grid.reshape(-1)
    dst_inter = grid[(np.arange(nn) + 1) % nn].reshape(-1)
    # Equal chunks make every step of a phase the same flows: one step repeated (the executor times it once).
    even_intra = bool((chunk_bytes == chunk_bytes[0]).all())
    even_inter = bool((part_bytes == part_bytes.flat[0]).all())

    def phase(steps, src, dst, sizes, reduce, name, even, move):
        if not steps:
            return
        for s in range(1 if even else steps):
            nbytes = sizes(0).flat[0] if even else sizes(s)
            yield step(src, dst, nbytes, reduce=reduce, label=name if even else f"{name} {s + 1}",
                       repeat=steps if even else 1)
            if work is not None:
                for s2 in range(steps) if even else (s,):
                    move(s2)

    def intra(s, reduce):
        c = (loc - s - 1) % ll if reduce else (loc - s) % ll
        if reduce:
            work[dst_intra, c] = combine(buf.op, work[dst_intra, c], work[src_intra, c])
        else:
            work[dst_intra, c] = work[src_intra, c]

    def inter(s, reduce):
        q = (pos - s - 1) % nn if reduce else (pos - s) % nn
        if reduce:
            work[dst_inter, loc, q] = combine(buf.op, work[dst_inter, loc, q], work[src_inter, loc, q])
        else:
            work[dst_inter, loc, q] = work[src_inter, loc, q]

    yield from phase(ll - 1, src_intra, dst_intra, lambda s: chunk_bytes[(loc - s - 1) % ll], True,
                     "intra reduce-scatter", even_intra, lambda s: intra(s, True))
    if nn > 1:
        yield from phase(nn - 1, src_inter, dst_inter, lambda s: part_bytes[loc, (pos - s - 1) % nn], True,
                         "inter reduce-scatter", even_inter, lambda s: inter(s, True))
        yield from phase(nn - 1, src_inter, dst_inter, lambda s: part_bytes[loc, (pos - s) % nn], False,
                         "inter all-gather", even_inter, lambda s: inter(s, False))
    yield from phase(ll - 1, src_intra, dst_intra, lambda s: chunk_bytes[(loc - s) % ll], False,
                     "intra all-gather", even_intra, lambda s: intra(s, False))
    if work is not None:
        buf.rows[:] = work.reshape(n, -1)[:, :coll.count]


def _predict(m: CostModel, coll: Collective) -> float:
    """2(L-1) intra-node ring steps of a node's chunk, and 2(N-1) inter-node steps of chunk/N per rail."""
    ll, nn = m.ppn, m.nodes
    chunk = float(coll.nbytes) / ll
    t = 2 * (ll - 1) * m.step(chunk, 0) if ll > 1 else 0.0
    if nn > 1:
        t += 2 * (nn - 1) * (m.inter_lat + float(m.capped(chunk / nn / m.proto_bw(m.rank_net), chunk / nn)))
    return t


def _reduced(m: CostModel, coll: Collective) -> float:
    size = float(coll.nbytes)
    return (m.ppn - 1) / m.ppn * size + (m.nodes - 1) / m.nodes * size / m.ppn


HIERARCHICAL = Algorithm("hierarchical", {"all_reduce": hierarchical_all_reduce}, stepwise(_predict), _reduced,
                         lambda cluster, coll: why_not(np.asarray(coll.ranks), cluster.ranks_per_node))
