"""The tree shapes are NCCL's: ncclGetBtree's parent rule, its mirror or shift, and one chain per node and channel."""
import numpy as np
import pytest

from simcomm.algorithms.plan import Collective
from simcomm.algorithms.tree_shape import btree_parents, double_tree_parents, dtree_parents
from simcomm.hardware import build_cluster


def nccl_btree_parent(nranks: int, rank: int) -> int:
    """NCCL src/graph/trees.cc ncclGetBtree, the parent only."""
    if rank == 0:
        return -1
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= nranks else up


@pytest.mark.parametrize("nranks", [*range(1, 70), 255, 256, 1000, 4097])
def test_btree_is_nccls(nranks):
    assert btree_parents(nranks).tolist() == [nccl_btree_parent(nranks, r) for r in range(nranks)]


@pytest.mark.parametrize("nranks", [2, 3, 8, 9, 33])
def test_the_second_tree_mirrors_or_shifts_the_first(nranks):
    p0, p1 = dtree_parents(nranks)
    for r in range(nranks):
        if nranks % 2 == 0:
            q = nccl_btree_parent(nranks, nranks - 1 - r)
            assert p1[r] == (-1 if q < 0 else nranks - 1 - q)
        else:
            q = nccl_btree_parent(nranks, (r - 1) % nranks)
            assert p1[r] == (-1 if q < 0 else (q + 1) % nranks)
    assert (p0 < 0).sum() == (p1 < 0).sum() == 1


def test_double_tree_chains_start_at_each_channels_head():
    """On nodes alike, each node's chain starts at the channel's head (local c x stride) and the heads join along the
    node trees; uneven nodes take the same rule node by node."""
    c = build_cluster("aws-p4de", 5)  # 8 GPUs, 4 NICs: channel c's head is local rank 2c
    coll = Collective("all_reduce", np.arange(c.num_ranks), 1 << 24).placed(c)
    parents = double_tree_parents(coll)
    assert len(parents) == 2 * 4
    node_trees = dtree_parents(5)
    for i, parent in enumerate(parents):
        tree, ch = divmod(i, 4)
        head = 2 * ch
        for k in range(5):
            chain = [k * 8 + (head + j) % 8 for j in range(8)]
            assert all(parent[b] == a for a, b in zip(chain, chain[1:]))
            up = node_trees[tree][k]
            assert parent[chain[0]] == (-1 if up < 0 else up * 8 + head)
    uneven = Collective("all_reduce", np.r_[np.arange(8), np.arange(8, 13)], 1 << 24).placed(c)
    for parent in double_tree_parents(uneven):
        assert (parent < 0).sum() == 1
