"""ParallelDims: Megatron's rank order (tp fastest, then cp, dp, pp), groups by reshape, and clear layout errors."""
import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import Axis, LayoutError, ParallelDims


def test_megatron_docstring_example():
    # parallel_state.py: 8 GPUs, TP 4, CP 2 -> TP groups [0-3], [4-7]; CP groups [0,4], [1,5], [2,6], [3,7]
    d = ParallelDims(tp=4, cp=2, world_size=8)
    assert d.dp == 1 and d.pp == 1
    assert d.groups(Axis.TP).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert d.groups("cp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_grid_order_and_groups():
    d = ParallelDims.from_megatron(64, tensor_model_parallel_size=4, pipeline_model_parallel_size=2,
                                   context_parallel_size=2)
    assert (d.tp, d.cp, d.dp, d.pp) == (4, 2, 4, 2)
    assert d.coords(0) == {Axis.PP: 0, Axis.DP: 0, Axis.CP: 0, Axis.TP: 0}
    assert d.coords(13) == {Axis.PP: 0, Axis.DP: 1, Axis.CP: 1, Axis.TP: 1}
    assert d.group_of(13, Axis.DP).tolist() == [1 + 4, 13, 21, 29]  # stride tp*cp = 8
    assert d.group_of(13, Axis.PP).tolist() == [13, 45]  # stride tp*cp*dp = 32
    for axis in Axis:
        groups = d.groups(axis)
        assert groups.shape == (64 // d.size(axis), d.size(axis))
        assert sorted(groups.ravel().tolist()) == list(range(64))  # a partition of the ranks
    assert d.stage_ranks(1).tolist() == list(range(32, 64))


@pytest.mark.parametrize("kwargs,message", [
    ({"tp": 3, "world_size": 8}, "not divisible by tp x pp x cp"),
    ({"tp": 2, "dp": 3, "world_size": 8}, "but world size is 8"),
    ({"tp": 0}, "tp must be at least 1"),
    ({"pp": 2.0}, "pp must be a whole number"),
])
def test_bad_layouts_say_what_is_wrong(kwargs, message):
    with pytest.raises(LayoutError, match=message):
        ParallelDims(**kwargs)


def test_placement_notes_when_tp_leaves_the_node():
    two = build_cluster("hgx-h100", nodes=2)
    assert ParallelDims(tp=8, world_size=16).placement_notes(two) == []
    notes = ParallelDims(tp=16, world_size=16).placement_notes(two)
    assert len(notes) == 1 and notes[0].startswith("tp groups of 16 span nodes")
    with pytest.raises(LayoutError, match="needs 32 ranks"):
        ParallelDims(tp=8, world_size=32).placement_notes(two)


def test_grid_is_read_only():
    d = ParallelDims(tp=2, world_size=4)
    with pytest.raises(ValueError):
        d.grid[0, 0, 0, 0] = 5
    assert np.array_equal(d.grid.ravel(), np.arange(4))


def test_the_grid_is_indexed_by_axis_name():
    d = ParallelDims(tp=2, cp=2, pp=2, world_size=16)  # dp = 2
    assert d.ranks(pp=1, dp=0).tolist() == [[8, 9], [10, 11]]  # one replica of stage 1: (cp, tp)
    assert d.ranks(pp=0, tp=1).tolist() == [[1, 3], [5, 7]]  # the dp x cp ranks holding TP rank 1's weights
    assert int(d.ranks(pp=1, dp=1, cp=0, tp=1)) == 13
    # several axes at once: each row one group, dp outer and cp inner (Megatron's data-parallel group with CP)
    assert d.groups(Axis.DP, Axis.CP).tolist()[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert d.groups("cp", "dp").tolist() == d.groups("dp", "cp").tolist()


def test_expert_grid_folds_onto_the_same_ranks():
    """Megatron-Core's MoE parallel folding: the expert grid etp-ep-edp-pp over the ranks of the attention grid
    tp-cp-dp-pp; attention TP 2 x DP 4 with experts ETP 1 x EP 8 (one EP group spans a stage's TP and DP ranks)."""
    d = ParallelDims(tp=2, pp=2, world_size=16, ep=8, etp=1)
    assert (d.dp, d.ep, d.etp, d.edp) == (4, 8, 1, 1)
    assert d.groups(Axis.EP).tolist() == [list(range(8)), list(range(8, 16))]
    assert d.groups("etp").tolist() == [[r] for r in range(16)]
    assert d.expert_coords(13) == {Axis.PP: 1, Axis.EDP: 0, Axis.EP: 5, Axis.ETP: 0}
    assert d.group_of(13, Axis.PP).tolist() == [5, 13]  # the same pipeline groups on both grids
    folded = ParallelDims(tp=2, world_size=16, ep=2)  # etp defaults to tp
    assert (folded.etp, folded.edp) == (2, 4)
    assert folded.groups(Axis.EP)[0].tolist() == [0, 2] and folded.group_of(0, Axis.EDP).tolist() == [0, 4, 8, 12]
    for axis in (Axis.EP, Axis.ETP, Axis.EDP):
        assert sorted(folded.groups(axis).ravel().tolist()) == list(range(16))
    with pytest.raises(LayoutError, match="mix the attention grid"):
        folded.groups(Axis.TP, Axis.EP)
    with pytest.raises(LayoutError, match="not divisible by etp x ep x pp"):
        ParallelDims(tp=2, world_size=12, ep=4)
    assert "ep=8 etp=1 edp=1" in d.describe()
