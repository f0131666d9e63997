"""Scenario loading: every shipped scenario validates; every kind of mistake names file, line and key path."""
from pathlib import Path

import pytest

from simcomm.scenario import ScenarioError, load_scenario, load_text, with_values
from simcomm.scenario.schema import Scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
BASE = """\
cluster:
  preset: hgx-h100
workload:
  kind: perf
  sizes: {begin: 1KiB, end: 1MiB}
"""


def error(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_text(text, "s.yaml")
    return info.value


def test_scenarios_directory_has_the_promised_files():
    names = {p.stem for p in SCENARIOS}
    assert {"quickstart", "hgx-h100-allreduce", "h100-2node-ndr", "h100-16node-ndr", "dgx-a100", "pcie-box",
            "cpu-host", "contention"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_validates(path):
    loaded = load_scenario(path)
    assert loaded.name == (loaded.scenario.name or path.stem)
    assert loaded.cluster.num_ranks >= 2


def test_defaults_and_units():
    s = load_text(BASE).scenario
    assert s.workload.sizes.begin == 1024 and s.workload.sizes.end == 1 << 20 and s.workload.sizes.factor == 2
    assert s.workload.collectives == ["all_reduce"] and s.workload.dtype == "float32" and s.workload.op == "sum"
    assert s.model.detail == "auto" and s.outputs.report is True and s.outputs.plots == []


def test_aliases_are_normalised():
    s = load_text(BASE.replace("kind: perf", "kind: perf\n  collectives: [allreduce, AllToAll]\n  dtype: half\n"
                               "  op: SUM")).scenario
    assert s.workload.collectives == ["all_reduce", "all_to_all"]
    assert s.workload.dtype == "float16" and s.workload.op == "sum"


def test_unknown_key_gets_did_you_mean_with_line():
    e = error(BASE.replace("  preset: hgx-h100", "  preset: hgx-h100\n  nodez: 2"))
    assert str(e).startswith("s.yaml:3: cluster.nodez: unknown key 'nodez' (did you mean 'nodes'?)")
    assert e.line == 3 and e.path == "cluster.nodez"


def test_unknown_top_level_key():
    e = error(BASE + "outptus: {trace: true}\n")
    assert "s.yaml:6: outptus: unknown key 'outptus' (did you mean 'outputs'?)" in str(e)


def test_missing_key_names_parent_and_key():
    e = error(BASE.replace("{begin: 1KiB, end: 1MiB}", "{begin: 1KiB}"))
    assert str(e) == "s.yaml:5: workload.sizes: missing required key 'end'"


def test_bad_unit_says_expected_and_found():
    e = error(BASE.replace("end: 1MiB", "end: 8Mb"))
    msg = str(e)
    assert msg.startswith("s.yaml:5: workload.sizes.end: expected a size")
    assert "megabits" in msg and "found '8Mb'" in msg


def test_rate_needs_a_unit():
    e = error(BASE.replace("  preset: hgx-h100", "  preset: hgx-h100\n  overrides:\n    nic_bandwidth: 400"))
    assert e.path == "cluster.overrides.nic_bandwidth" and e.line == 4
    assert "a bare number is ambiguous" in str(e) and "found 400" in str(e)


def test_wrong_type_and_range():
    e = error(BASE.replace("  preset: hgx-h100", "  preset: hgx-h100\n  nodes: two"))
    assert e.path == "cluster.nodes" and "expected a valid integer, found 'two'" in str(e)
    e = error(BASE.replace("  preset: hgx-h100", "  preset: hgx-h100\n  nodes: -1"))
    assert "cluster.nodes: expected greater than or equal to 1, found -1" in str(e)
    e = error(BASE.replace("  preset: hgx-h100", "  preset: hgx-h100\n  nodes: 1000000"))
    assert e.path == "cluster.nodes" and "less than or equal to 32768" in str(e)


def test_unknown_preset_and_fabric():
    e = error(BASE.replace("hgx-h100", "hgx-h1000"))
    assert e.path == "cluster.preset" and "did you mean 'hgx-h100'?" in str(e)
    e = error(BASE.replace("  preset: hgx-h100", "  preset: hgx-h100\n  nodes: 2\n  fabric: fat-tee"))
    assert e.path == "cluster.fabric" and "did you mean 'fat-tree'?" in str(e)


def test_unknown_workload_kind_and_missing_kind():
    e = error(BASE.replace("kind: perf", "kind: pref"))
    assert e.path == "workload.kind" and "(did you mean 'perf'?)" in str(e) and e.line == 4
    e = error(BASE.replace("  kind: perf\n", ""))
    assert e.path == "workload" and "missing required key 'kind'" in str(e)


def test_unknown_kind_lists_the_registered_kinds():
    from simcomm.workloads import WORKLOADS
    e = error(BASE.replace("kind: perf", "kind: schedule\n  tensor_model_parallel_size: 2").replace(
        "  sizes: {begin: 1KiB, end: 1MiB}\n", ""))
    assert e.path == "workload.kind" and all(kind in str(e) for kind in WORKLOADS)


def test_bad_yaml_empty_and_not_a_mapping():
    assert "invalid YAML" in str(error("cluster: [1, 2\n")) and error("cluster: [1, 2\n").line is not None
    assert str(error("")) == "s.yaml:1: the file is empty; expected a mapping with keys cluster and workload"
    assert "found a list" in str(error("- 1\n- 2\n"))
    e = error(BASE + "cluster: {preset: dgx-a100}\n")
    assert e.line == 6 and e.path == "cluster" and "duplicate key (first given on line 1)" in str(e)


def test_program_must_exist():
    text = "cluster: {preset: cpu-host}\nworkload:\n  kind: program\n  program: no_such_module_x:run\n"
    e = error(text)
    assert e.path == "workload.program" and e.line == 4 and "cannot find module 'no_such_module_x'" in str(e)
    e = error(text.replace("no_such_module_x:run", "simcomm.workloads.programs:allreduce_chek"))
    assert "did you mean 'allreduce_check'?" in str(e)
    assert "expected 'package.module:function'" in str(error(text.replace("no_such_module_x:run", "nocolon")))


def test_a_program_on_more_ranks_than_spawn_takes_fails_validation():
    """Issue 13: a program scenario on 3,000 nodes passed validate and failed only at run (simcomm.spawn's limit);
    validate applies the same limit."""
    text = "cluster: {preset: hgx-h100, nodes: 3000}\nworkload:\n  kind: program\n  program: " \
           "simcomm.workloads.programs:allreduce_check\n"
    e = error(text)
    assert e.path == "workload" and e.line == 2
    assert "a rank program runs one thread per rank, at most 16,384; the cluster has 24,000 ranks: give " \
           "workload.ranks or use fewer nodes" in str(e)
    assert load_text(text + "  ranks: 8\n").scenario.workload.ranks == 8


@pytest.mark.parametrize("text, path", [
    ("outputs: 5\n", "outputs"), ("model: [1]\n", "model"), ("sweep: x\n", "sweep"),
    ("cluster: {preset: hgx-h100, overrides: 3}\n", "cluster.overrides")])
def test_a_value_that_should_be_a_mapping_is_said_so_in_plain_words(text, path):
    """pydantic's 'a valid dictionary or instance of Outputs' (and 'or object to extract fields from') leaked into
    messages."""
    src = BASE.replace("cluster:\n  preset: hgx-h100\n", "") if text.startswith("cluster") else BASE
    e = error(src + text)
    assert e.path == path and "expected a mapping, found " in str(e)
    assert "valid dictionary" not in str(e) and "instance of" not in str(e)


def test_a_string_too_short_is_said_in_plain_words():
    e = error(BASE + "name: ''\n")
    assert e.path == "name" and "name: expected at least 1 character(s), found ''" in str(e)


def test_ranks_must_fit_the_cluster():
    e = error(BASE + "  ranks: 9\n")
    assert e.path == "workload.ranks" and "expected at most 8 ranks" in str(e) and e.line == 6


def test_algorithms_are_checked_against_registry_and_hardware():
    e = error(BASE + "model: {algorithm: rnig}\n")
    assert e.path == "model.algorithm" and "did you mean 'ring'?" in str(e)
    e = error(BASE.replace("hgx-h100", "pcie-4gpu") + "model: {algorithm: nvls}\n")
    assert e.path == "model.algorithm" and "nvls cannot run all_reduce here" in str(e)
    e = error(BASE + "  algorithms: [auto, nosuch]\n")
    assert e.path == "workload.algorithms[1]"


def test_contention_ranks_and_range_strings():
    text = ("cluster: {preset: pcie-4gpu, nodes: 2}\nworkload:\n  kind: contention\n  groups:\n"
            "    - {ranks: '0-3', size: 1MiB}\n    - {ranks: '0,4', size: 1MiB}\n")
    s = load_text(text).scenario
    assert s.workload.groups[0].ranks == [0, 1, 2, 3] and s.workload.groups[1].ranks == [0, 4]
    e = error(text.replace("'0,4'", "[0, 8]"))
    assert e.path == "workload.groups[1].ranks[1]" and e.line == 6
    assert "expected ranks as a list" in str(error(text.replace("'0,4'", "'a-b'")))


def test_dims_cluster_builds():
    text = ("cluster: {topology: [Switch, Switch], npus_count: [4, 2], bandwidth: [100GB/s, 400Gbps], "
            "latency: [1us, 2us]}\nworkload: {kind: perf, sizes: [1MiB]}\n")
    c = load_text(text).cluster
    assert c.num_ranks == 8 and c.ranks_per_node == 4 and c.num_nodes == 2
    bw, lat, kind = c.intra_node
    assert bw == pytest.approx(100e9) and lat == pytest.approx(1e-6) and kind == "nvlink"
    assert c.inter_node[0] == pytest.approx(50e9)
    ring = load_text(text.replace("[Switch, Switch]", "[Ring, Switch]")).cluster
    assert len(ring.route(0, 2)) == 4  # npu0 -> r0 -> r1 -> r2 -> npu2
    e = error(text.replace("latency: [1us, 2us]", "latency: [1us]"))
    assert e.path == "cluster" and "one entry per dimension" in str(e)


def test_file_errors(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read the scenario"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"cluster: \xff\xfe\n")
    with pytest.raises(ScenarioError, match="expected UTF-8"):
        load_scenario(bad)


def test_with_values_sets_dotted_paths():
    data = {"cluster": {"preset": "x"}, "workload": {"groups": [{"size": 1}]}}
    out = with_values(data, {"cluster.nodes": 2, "workload.groups.0.size": "1GiB", "model.protocol": "LL"})
    assert out["cluster"] == {"preset": "x", "nodes": 2} and out["workload"]["groups"][0]["size"] == "1GiB"
    assert out["model"] == {"protocol": "LL"} and data["cluster"] == {"preset": "x"}
    with pytest.raises(ValueError, match="not a mapping"):
        with_values(data, {"cluster.preset.x": 1})


def test_schema_models_forbid_unknown_keys():
    from simcomm.scenario.schema import SECTIONS
    for _, model in SECTIONS:
        if model.__name__ != "ScheduleWorkload":
            assert model.model_config["extra"] == "forbid", model


def test_overrides_cover_the_hardware_overrides():
    from simcomm.hardware import OVERRIDES
    from simcomm.scenario.schema import Overrides
    assert set(Overrides.model_fields) == set(OVERRIDES)
    assert Scenario.model_fields.keys() >= {"cluster", "workload", "model", "outputs", "sweep"}


def test_a_size_factor_that_does_not_grow_the_size_is_refused_by_validate():
    """Issue 13: `factor: 1.1` passed validate, then `run` looped forever (floor(8 * 1.1) == 8)."""
    with pytest.raises(ScenarioError) as exc:
        load_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: {begin: 8, end: 64, factor: 1.1}}\n",
                  "f.yaml")
    assert "workload.sizes: factor 1.1 does not grow the size 8 B" in str(exc.value)


def test_validate_finds_a_program_without_running_its_code(tmp_path, monkeypatch):
    """A scenario's program is code the user runs: validate reads it (no import, no side effects) unless asked."""
    (tmp_path / "sidefx_prog.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n"
                                             "def main(rank):\n    return rank\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = "cluster: {preset: cpu-host}\nworkload:\n  kind: program\n  program: sidefx_prog:main\n  ranks: 2\n"
    load_text(text, "s.yaml")
    assert not (tmp_path / "ran").exists()
    e = error(text.replace(":main", ":mian"))
    assert e.path == "workload.program" and "does not define 'mian' (did you mean 'main'?)" in str(e)
    from simcomm.workloads import resolve_program
    assert resolve_program("sidefx_prog:main")(3) == 3 and (tmp_path / "ran").exists()


def _bomb(levels: int) -> str:
    inner = "&a0 [1MiB, 2MiB, 4MiB, 8MiB, 16MiB, 32MiB, 64MiB, 128MiB, 256MiB]"
    for i in range(1, levels + 1):  # each level: the previous one (defining its anchor) and 8 aliases of it
        inner = f"&a{i} [{inner}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    return "cluster: {preset: hgx-h100}\nworkload:\n  kind: perf\n  collectives: [all_reduce]\n  sizes: " + inner + "\n"


def test_an_alias_bomb_under_a_key_is_refused_at_once_naming_the_key():
    """600 bytes that expand to 430 million values took 38 s and 2.4 GB, then a MemoryError traceback."""
    e = error(_bomb(8))
    assert e.path == "workload.sizes" and e.line == 5
    assert "expands to 435,848,050 values through YAML aliases and anchors; at most 100,000 are allowed" in str(e)


def test_an_alias_inside_itself_is_refused():
    e = error("cluster: {preset: hgx-h100}\nworkload: &w {kind: perf, collectives: [all_reduce], sizes: [*w]}\n")
    assert e.path == "workload.sizes[0]" and "refers to the value that contains it" in str(e)


def test_shared_anchors_within_bounds_still_load():
    text = ("cluster: {preset: hgx-h100}\nworkload:\n  kind: perf\n  collectives: &c [all_reduce]\n"
            "  sizes: [1MiB]\nmodel: {algorithm: {all_reduce: ring}}\n")
    assert load_text(text, "s.yaml").scenario.workload.collectives == ["all_reduce"]


def test_messages_say_expected_once_and_never_suggest_the_refused_name():
    e = error("cluster: [1]\nworkload: {kind: perf, collectives: [all_reduce], sizes: [1MiB]}\n")
    assert "expected a mapping with 'preset' or 'topology', found a list" in str(e)
    assert "expected expected" not in str(e)
    from simcomm.vocab import did_you_mean
    assert did_you_mean("s", ["s", "x"]) == "" and did_you_mean("S", ["s"]) == " (did you mean 's'?)"


def test_error_messages_print_a_bounded_value():
    from simcomm.scenario.loader import found
    assert len(found("x" * 10**6)) <= 60 and len(found(10**4000)) <= 60


def test_preset_and_topology_together_say_use_one_form():
    e = error("cluster:\n  preset: hgx-h100\n  topology: [Switch]\n  npus_count: [8]\n"
              "workload: {kind: perf, sizes: [1MiB]}\n")
    assert len(e.problems) == 1 and e.path == "cluster" and e.line == 1
    assert "use one form" in str(e) and "'preset'" in str(e) and "'topology'" in str(e)


@pytest.mark.parametrize("text", ["790TFLOPs", "790TFLOPS", "790 TFLOP/s", "790 Tflops", "790 tflop/s", "790T",
                                  "7.9e14", "790000GFLOPs"])
def test_compute_rates_in_the_ways_people_write_them(text):
    s = load_text(f"cluster: {{preset: hgx-h100, overrides: {{compute_rate: '{text}'}}}}\n"
                  "workload: {kind: perf, sizes: [1MiB]}\n")
    assert s.cluster.device.compute_rate == pytest.approx(7.9e14)


@pytest.mark.parametrize("text", ["790 XFLOPs", "fast", "-1TFLOPs", "790 mflops"])
def test_bad_compute_rates_say_what_is_expected(text):
    e = error(f"cluster: {{preset: hgx-h100, overrides: {{compute_rate: '{text}'}}}}\n"
              "workload: {kind: perf, sizes: [1MiB]}\n")
    assert e.path == "cluster.overrides.compute_rate" and "790TFLOPS" in str(e)


def test_rail_optimised_fabric_options_take_effect():
    """Every fabric option changes a rail-optimised fabric and the time of traffic that crosses rails (an
    all_to_all: GPU i of one node to GPU j != i of another goes leaf -> spine -> leaf)."""
    from simcomm.session import Session
    from simcomm.workloads.perf import run_perf

    def run(options: str):
        c = load_text("cluster: {preset: hgx-h100, nodes: 4, fabric: rail-optimised, fabric_options: {"
                      + options + "}}\nworkload: {kind: perf, sizes: [1MiB]}\n").cluster
        (row,) = run_perf(Session(c, detail="steps"), ["all_to_all"], [1 << 10 if "latency" in options else 1 << 28])
        return c.fabric.description, row.time

    # (option, what the description then says, the options it is compared with, how much slower at least); the
    # all_to_all's sends all go at once, so on 4 nodes of 32-port leaves the spines never bind: the
    # oversubscription is compared on 2-port leaves (every cross-rail byte crosses a spine)
    cases = (("leaf_ports: 2", "2 leaf switch(es) of 2 ports", "", 1.15),
             ("leaf_ports: 2, oversubscription: 4", "1 spine(s)", "leaf_ports: 2", 1.5),
             ("link_bandwidth: 1GB/s", "1 GB/s links", "", 1.5), ("latency: 50us", None, "latency: 0.5us", 1.5))
    for option, desc, base, factor in cases:
        changed, slower = run(option)
        base_desc, plain = run(base)
        assert slower > factor * plain, option
        if desc:
            assert desc in changed and desc not in base_desc
    e = error("cluster: {preset: hgx-h100, nodes: 2, fabric: switch, fabric_options: {leaf_ports: 4}}\n"
              "workload: {kind: perf, sizes: [1MiB]}\n")
    assert e.path == "cluster.fabric_options" and "leaf_ports" in str(e)
