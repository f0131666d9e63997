"""Golden outputs: the numbers users see must not drift silently (regenerate as tests/conftest.py says).

Covers every shipped scenario's report rows and simulated time (also with compute and communication not sharing
the GPUs: model.interference false), a sweep, and `perf` tables on several clusters, with the tuner's choice and
with every algorithm forced.
"""
from pathlib import Path

import pytest

from simcomm.hardware import build_cluster
from simcomm.session import Session
from simcomm.scenario import NO_INTERFERENCE, load_scenario
from simcomm.workloads import run_scenario
from simcomm.workloads.perf import run_perf
from simcomm.scenario.sweep import run_sweep

SCENARIOS = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))
SIZES = [8, 1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28, 1 << 30]
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv", "gather",
         "scatter"]
PERF_CASES = {  # name: (preset, nodes, ranks, algorithms)
    "hgx-h100": ("hgx-h100", 1, None, ["auto"]),
    "hgx-h100-all-algorithms": ("hgx-h100", 1, None, ["all"]),
    "hgx-h100x2": ("hgx-h100", 2, None, ["auto", "all"]),
    "hgx-h100x16": ("hgx-h100", 16, None, ["auto"]),
    "dgx-a100x4": ("dgx-a100", 4, None, ["auto"]),
    "pcie-4gpux2": ("pcie-4gpu", 2, None, ["auto", "all"]),
    "cpu-host": ("cpu-host", 1, None, ["auto", "all"]),
    "hgx-h100-6-of-8": ("hgx-h100", 1, 6, ["auto", "all"]),
}


def _rows(rows) -> list[dict]:
    return [r if isinstance(r, dict) else r.as_dict() for r in rows]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_report_numbers(path, golden):
    result = run_scenario(load_scenario(path), detail="steps")
    golden("scenarios").check(path.stem, {"kind": result.kind, "elapsed": result.elapsed,
                                          "rows": result.row_dicts(), "notes": result.notes})


# the training step's later mechanisms, each with its switch (issue 20): the NCCL p2p rendezvous, the step's small
# collectives over their real groups
MECHANISMS_OFF = {"workload.p2p_rendezvous": False, "workload.step_collectives": False}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_without_interference_every_number_is_what_it_was(path, golden):
    """model.interference: false (simcomm run --no-interference), with the training step's later mechanisms off,
    gives every scenario's numbers as they were before compute and communication shared the GPUs
    (scenarios-interference-off.json is scenarios.json as it stood then)."""
    training = load_scenario(path).scenario.workload.kind == "training"
    result = run_scenario(load_scenario(path, {**NO_INTERFERENCE, **(MECHANISMS_OFF if training else {})}),
                          detail="steps")
    golden("scenarios-interference-off").check(path.stem, {"kind": result.kind, "elapsed": result.elapsed,
                                                           "rows": result.row_dicts(), "notes": result.notes})


def test_sweep_rows(golden):
    loaded = load_scenario(Path(__file__).parent.parent / "scenarios" / "scaling-sweep.yaml")
    rows = run_sweep(loaded, dict(loaded.scenario.sweep.parameters), jobs=1)
    golden("scenarios").check("scaling-sweep:sweep", rows)


@pytest.mark.parametrize("case", list(PERF_CASES))
def test_perf_tables(case, golden):
    preset, nodes, ranks, algorithms = PERF_CASES[case]
    cluster = build_cluster(preset, nodes=nodes)
    book = golden("perf")
    for kind in KINDS:
        sim = Session(cluster, detail="steps")
        notes: list = []
        rows = run_perf(sim, [kind], SIZES, ranks=ranks, algorithms=algorithms, notes=notes)
        book.check(f"{case}:{kind}", {"rows": _rows(rows), "notes": notes})
