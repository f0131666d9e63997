"""The SM-sharing model (engine/sharing.py) against the measurements it comes from (hardware/overlap_table.py:
shared/reference/h200-overlap-measured.md), and its laws."""
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcomm.engine import sharing
from simcomm.engine.sharing import (IDLE_KERNEL, MEMORY_KERNEL, SPREAD_KERNEL, attention_kernel, gemm_kernel,
                                    slowdown)
from simcomm.hardware import overlap_table as table

SMS, HBM = table.SMS, table.HBM_COPY_RATE


def predicted(row, ctas: int) -> float:
    m, n, k, us = row[:4]
    return slowdown(gemm_kernel(m, n, k, us * 1e-6, HBM), ctas, 0, SMS, HBM)


def off_by(pred: float, copy: int, spin: int) -> float:
    """How far a predicted time (over time alone) is from the measured copy/spin range, relative (0 inside)."""
    lo, hi = 1 + min(copy, spin) / 100, 1 + max(copy, spin) / 100
    return 0.0 if lo <= pred <= hi else pred / hi - 1 if pred > hi else pred / lo - 1


@pytest.mark.parametrize("row", table.GEMM_ROWS, ids=lambda r: f"{r[0]}x{r[1]}x{r[2]}")
def test_a_gemm_beside_k_ctas_slows_as_measured(row):
    """Every cell of the table, 8 to 64 CTAs: the time beside the stand-in within 15% of the measured range (the
    table's own noise: the same GEMM measured 24% slower beside 8 CTAs than beside 16, and copy and spin apart by
    up to 17 points)."""
    for ctas, copy, spin in zip(table.CTAS, row[4], row[5]):
        assert abs(off_by(predicted(row, ctas), copy, spin)) <= 0.15, (row[:3], ctas)


def test_the_table_on_average():
    """Mean |error| 4.5% over the 45 cells; the model is low at 8-16 CTAs (by 6% of the time on average: the
    measured GEMMs lose more there than their waves say) and right on average from 24 CTAs on."""
    errors = {k: [off_by(predicted(row, k), c, s) for row in table.GEMM_ROWS
                  for kk, c, s in zip(table.CTAS, row[4], row[5]) if kk == k] for k in table.CTAS}
    flat = [e for v in errors.values() for e in v]
    assert sum(abs(e) for e in flat) / len(flat) < 0.05
    for k in (8, 16):
        assert -0.08 < sum(errors[k]) / len(errors[k]) < -0.04
    for k in (24, 32, 64):
        assert abs(sum(errors[k]) / len(errors[k])) < 0.02


@pytest.mark.parametrize("row", table.H100_GEMM_ROWS, ids=lambda r: f"{r[0]}x{r[1]}x{r[2]}")
def test_and_on_an_h100(row):
    """The H100 measurement (one run; the same method): within 18% of the time in every cell (the worst:
    2048 x 12288 x 6144 beside 24 CTAs, 33% predicted for 6 -> 8 waves, 13-14% measured)."""
    m, n, k, us = row[:4]
    kernel = gemm_kernel(m, n, k, us * 1e-6, table.H100_HBM_COPY_RATE)
    errors = [off_by(slowdown(kernel, ctas, 0, SMS, table.H100_HBM_COPY_RATE), c, s)
              for ctas, c, s in zip(table.CTAS, row[4], row[5])]
    assert max(abs(e) for e in errors) <= 0.18
    assert sum(abs(e) for e in errors) / len(errors) <= 0.09


def test_thin_gemm_loses_a_round_and_large_ones_a_partial_wave():
    thin, large = table.GEMM_ROWS[4], table.GEMM_ROWS[6]  # 8192 x 1280 x 8192 and 8192^3
    assert gemm_kernel(*thin[:3]).tiles < sharing.PERSISTENT_WAVES * SMS <= gemm_kernel(*large[:3]).tiles
    assert all(1.65 < predicted(thin, k) < 1.8 for k in (8, 16, 24, 32))  # measured 66-87%
    # 8192^3: 2,048 tiles of 128 x 256 in 16 waves on 132 SMs, 17 on 124, 19 on 108, 21 on 100, 31 on 68
    assert [round(predicted(large, k) * 16) for k in table.CTAS] == [17, 18, 19, 21, 31]


@pytest.mark.parametrize("row", table.ATTENTION_ROWS[1:], ids=lambda r: f"b{r[0]}h{r[1]}s{r[3]}")
def test_long_flash_attention_beside_k_ctas(row):
    """The two long-sequence rows (the short one is erratic in the table: +68-167%, not modelled)."""
    b, heads, _, seq = row[:4]
    kernel = attention_kernel(b * heads, seq)
    for ctas, copy, spin in zip(table.ATTENTION_CTAS, row[5], row[6]):
        assert abs(off_by(slowdown(kernel, ctas, 0, SMS, HBM), copy, spin)) <= 0.05


def test_fitted_figures_come_from_the_table():
    assert sharing.fit_tail_round() == pytest.approx(sharing.TAIL_ROUND, abs=5e-5)
    assert 0.14 <= sharing.COMM_BESIDE_COMPUTE <= 0.24  # the table's 14-24%
    assert sharing.COMM_CTA_HBM == pytest.approx(438e9 / 24)


KERNELS = st.one_of(st.just(SPREAD_KERNEL), st.just(MEMORY_KERNEL),
                    st.builds(lambda m, n, k: gemm_kernel(m, n, k, 1e-3, HBM), st.integers(1, 1 << 15),
                              st.integers(1, 1 << 15), st.integers(1, 1 << 15)),
                    st.builds(attention_kernel, st.integers(1, 512), st.integers(1, 1 << 17)))


@given(KERNELS, st.integers(0, SMS - 1), st.integers(0, SMS - 1))
def test_more_sms_held_never_speeds_a_kernel(kernel, a, b):
    lo, hi = sorted((a, b))
    assert slowdown(kernel, 0, 0, SMS, HBM) == 1.0
    assert 1.0 <= slowdown(kernel, lo, 0, SMS, HBM) <= slowdown(kernel, hi, 0, SMS, HBM)
    assert slowdown(IDLE_KERNEL, hi, 0, SMS, HBM) == 1.0


@given(st.integers(1, 1 << 14), st.integers(1, 1 << 14), st.integers(1, 64))
def test_a_kernel_sized_around_the_held_sms_never_waits_a_round(m, n, held):
    """Userbuffers tell cuBLAS the SMs they hold: a grid sized for the SMs left runs on them in its own waves,
    with no CTA waiting for a second round."""
    kernel = gemm_kernel(m, n, 4096)
    told = slowdown(kernel, held, held, SMS, HBM)
    free = SMS - held
    if kernel.tiles < sharing.PERSISTENT_WAVES * free:  # persistent: one CTA per SM left, each a larger share
        assert told == pytest.approx(SMS / free)
    else:
        assert told == math.ceil(kernel.tiles / free) / math.ceil(kernel.tiles / SMS)


def test_memory_bound_work_loses_the_bandwidth_taken():
    assert slowdown(MEMORY_KERNEL, 24, 0, SMS, HBM) == pytest.approx(1 / (1 - 24 * sharing.COMM_CTA_HBM / HBM))
    assert slowdown(SPREAD_KERNEL, 32, 0, SMS, HBM) == pytest.approx(SMS / (SMS - 32))
    assert math.isfinite(slowdown(SPREAD_KERNEL, 10 * SMS, 0, SMS, HBM))


def test_docs_tables_are_what_the_example_prints(capsys):
    """docs/model.md's measured-beside-model tables are examples/engine/interference_vs_measured.py's output."""
    import runpy
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    runpy.run_path(str(root / "examples" / "engine" / "interference_vs_measured.py"), run_name="__main__")
    doc = (root / "docs" / "model.md").read_text()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) > 30 and all(line in doc for line in rows)
