"""PREMUL_SUM's factor: accepted and refused exactly as torch 2.13's _make_nccl_premul_sum does."""
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.distributed as torch_dist

from simcomm.algorithms.reduce_ops import ReduceOp, make_premul_sum
from simcomm.errors import AlgorithmError

FACTORS = {
    "float": 0.5, "float64": np.float64(0.5), "tensor-0d": torch.tensor(0.5), "tensor-1": torch.tensor([0.5]),
    "int-tensor": torch.tensor(2), "int": 2, "bool": True, "float32": np.float32(0.5), "int64": np.int64(2),
    "fraction": Fraction(1, 2), "str": "0.5",
}


def _torch_accepts(factor) -> bool:
    try:
        torch_dist._make_nccl_premul_sum(factor)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(FACTORS))
def test_the_factor_is_accepted_as_torch_accepts_it(name):
    factor = FACTORS[name]
    if _torch_accepts(factor):
        op = make_premul_sum(factor)
        assert op == ReduceOp("PREMUL_SUM", float(np.asarray(factor).reshape(-1)[0]))
    else:
        with pytest.raises(AlgorithmError, match="factor must be a float or a one-element tensor"):
            make_premul_sum(factor)


def test_numpy_arrays_are_simcomms_tensors():
    assert make_premul_sum(np.array([0.25])).factor == 0.25
    assert make_premul_sum(np.array(3.0)).factor == 3.0
    with pytest.raises(AlgorithmError, match=r"one element, got shape \(2,\)"):
        make_premul_sum(np.array([1.0, 2.0]))


def test_an_int_factor_says_what_to_write():
    with pytest.raises(AlgorithmError, match=r"got int 2 \(write 2\.0\)"):
        make_premul_sum(2)
