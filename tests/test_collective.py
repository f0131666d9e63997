"""Group-level collectives: the nccl-tests size series (issue 13: it must always grow or be refused)."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.collective import MAX_SIZES, sizes_between
from simcomm.errors import SimcommError


def test_series_matches_nccl_tests():
    assert sizes_between(8, 8 << 30, 2) == [8 << i for i in range(31)]
    assert sizes_between(1 << 20, 4 << 20, increment=1 << 20) == [1 << 20, 2 << 20, 3 << 20, 4 << 20]
    assert sizes_between(8, 8, 1.1) == [8]  # nothing past end, so nothing to grow
    assert sizes_between(1000, 1500, 1.1) == [1000, 1100, 1210, 1331, 1464]


@pytest.mark.parametrize("factor", [1.1, 1.01])
def test_a_factor_that_rounds_down_to_the_same_size_is_refused_not_looped(factor):
    """Issue 13: `perf -b 8 -e 64 -f 1.1` looped forever (floor(8 * 1.1) == 8)."""
    with pytest.raises(SimcommError, match=r"does not grow the size 8 B .*at least 1\.125"):
        sizes_between(8, 64, factor)


@pytest.mark.parametrize("factor", [math.inf, math.nan, -2.0, 1.0, 0.5, True, "2"])
def test_non_finite_or_non_growing_factors_are_refused(factor):
    """Issue 13: `perf -f inf` raised a raw OverflowError."""
    with pytest.raises(SimcommError, match="factor must be a finite number > 1"):
        sizes_between(8, 64, factor)


def test_a_huge_finite_factor_ends_the_series():
    assert sizes_between(8, 64, 1e308) == [8]


@pytest.mark.parametrize("kwargs,needle", [({"increment": 0}, "increment"), ({"increment": -4}, "increment"),
                                           ({"increment": 1}, "sizes"), ({"factor": 1.0001}, "more than")])
def test_too_long_or_non_growing_increments_are_refused(kwargs, needle):
    with pytest.raises(SimcommError, match=needle):
        sizes_between(1 << 20, 1 << 30, **kwargs)


@settings(max_examples=300, deadline=None)
@given(begin=st.integers(1, 1 << 40), span=st.integers(0, 1 << 40),
       factor=st.floats(allow_nan=True, allow_infinity=True), increment=st.none() | st.integers(-10, 1 << 30))
def test_the_series_always_grows_stays_in_range_and_is_bounded_or_is_refused(begin, span, factor, increment):
    end = begin + span
    try:
        sizes = sizes_between(begin, end, factor, increment)
    except SimcommError:
        return
    assert sizes[0] == begin and sizes[-1] <= end and len(sizes) <= MAX_SIZES
    assert all(b > a for a, b in zip(sizes, sizes[1:]))
