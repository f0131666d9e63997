"""Ring attention: causal attention over a sequence split across context-parallel ranks.

Each rank keeps its queries; the key/value blocks travel around the ring (rank i sends to i + 1 and receives from
i - 1), each rank combining its queries' attention to every block with the online softmax (attention_block and
merge_attention). Backward sends the blocks around again with their accumulating key/value gradients, which come
home after a full turn. Only K and V move, so grouped-query attention shrinks the traffic by groups / heads.
The next block's transfer is started before the current block is computed, so communication overlaps compute.
"""
from __future__ import annotations

from ..model import layers as L
from ..model.tensor import is_meta, zeros_like
from .ring import Ring
from .split import load_balanced_positions


class RingAttention:
    """Attention for one CP rank: forward(q, k, v, scale) / backward(cache, do), as LocalAttention."""

    def __init__(self, comm, ranks, rank: int, seq_length: int, fl: L.Flops, charge=None):
        self.ring = Ring(comm, ranks, rank)
        self.charge = charge or (lambda name, share=1.0: None)  # each block is 1/cp of the attention kernels
        self.cp, self.rank = len(ranks), rank
        self.positions = load_balanced_positions(seq_length, self.cp, rank)
        self.block_positions = [load_balanced_positions(seq_length, self.cp, r) for r in range(self.cp)]
        self.fl = fl

    def _owner(self, step: int) -> int:
        """Whose key/value block this rank holds at ring step `step`."""
        return (self.rank - step) % self.cp

    def forward(self, q, k, v, scale):
        o = lse = None
        block = (k, v)
        for step in range(self.cp):
            incoming = self.ring.shift(block) if step < self.cp - 1 else None
            kb, vb = block
            ob, lb = L.attention_block(q, kb, vb, self.positions, self.block_positions[self._owner(step)], scale,
                                       self.fl)
            self.charge("attention", 1 / self.cp)
            o, lse = (ob, lb) if o is None else L.merge_attention(o, lse, ob, lb)
            if incoming is not None:
                block = incoming.wait()
        return o, (q, k, v, o, lse, scale)

    def backward(self, cache, do):
        q, k, v, o, lse, scale = cache
        delta = L.attention_delta(do, o)
        dq = zeros_like(q)
        kb, vb, dkb, dvb = k, v, zeros_like(k), zeros_like(v)
        for step in range(self.cp):
            # the accumulated gradients must move on with their block, so the shift waits for this step's compute
            dq_s, dk_s, dv_s = L.attention_block_backward(q, kb, vb, self.positions,
                                                          self.block_positions[self._owner(step)], scale, lse, do,
                                                          delta, self.fl)
            self.charge("attention.backward", 1 / self.cp)
            if not is_meta(dq):
                dq += dq_s
                dkb, dvb = dkb + dk_s, dvb + dv_s
            if step < self.cp - 1:
                kb, vb, dkb, dvb = self.ring.shift((kb, vb, dkb, dvb)).wait()
        if self.cp > 1:  # the last block's gradients go home: one more hop
            dkb, dvb = self.ring.shift((dkb, dvb)).wait()
        return dq, dkb, dvb
