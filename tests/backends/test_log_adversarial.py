"""Adversarial nccl-tests logs for `simcomm compare` and `simcomm calibrate --from-log` (issue 21): hypothesis writes
logs in the forms nccl-tests prints (text with its headers, device lines, launcher prefixes, trimmed tables; -J
JSON) and spoils them: sizes of zero, with separators or beyond any float; times that are negative, zero, NaN,
infinite or words; unknown types and ops; roots that are not numbers; rank counts the log gives or implies; junk
lines; the options a user may add (--ranks, --nodes, --collective, --algo, --in-place).

Laws (tests/adversarial.py): every run ends within a watchdog's time with exit 0 or a clean usage error (exit 2,
one message, no traceback); compare's JSON holds only finite figures, none negative but the signed error, and
says which rows it left out; calibrate prints no NaN or infinite figure; the same log gives the same bytes.

CI runs 40 logs through compare and 4 through calibrate, the same ones every run; `pytest -m fuzz
tests/backends/test_log_adversarial.py` runs 1,000 and 100 new ones.
"""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial import clean, cli, figures

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"]
TIMES = ["20.50", "131.2", "5206.00", "0.81"]
BAD_TIMES = ["-20.00", "0.00", "nan", "inf", "-inf", "1e400", "fast", "N/A"]
SIZES = [8, 1024, 65536, 1048576, 33554432]
BAD_SIZES = ["0", "1,048,576", "1_024", "9" * 25, "100000000000000000000"]
OUTCOMES: Counter = Counter()


def token(draw, good, bad, one_in=8):
    return draw(st.sampled_from(bad)) if draw(st.sampled_from(range(one_in))) == 0 else draw(good)


@st.composite
def rows(draw):
    size = token(draw, st.sampled_from(SIZES).map(str), BAD_SIZES)
    time_ = token(draw, st.sampled_from(TIMES), BAD_TIMES, 5)
    algbw, busbw = draw(st.sampled_from([("0.05", "0.08"), ("10.08", "15.12"), ("130.88", "229.04"),
                                         ("76.26", "71.49"), ("fast", "1e999")]))
    return {"size": size, "count": token(draw, st.just(str(max(1, int(size) // 4) if size.isdigit() and len(size) < 20
                                                                  else 1)), ["x", "-3"]),
            "type": token(draw, st.sampled_from(["float", "half", "bfloat16", "int8", "double"]), ["floot", "fp128"]),
            "redop": token(draw, st.sampled_from(["sum", "max", "none"]), ["xor?"]),
            "root": token(draw, st.sampled_from(["-1", "0"]), ["x", "99"]), "time": time_, "algbw": algbw,
            "busbw": busbw, "in_time": token(draw, st.sampled_from(TIMES), BAD_TIMES, 5)}


@st.composite
def logs(draw):
    collective = draw(st.sampled_from(COLLECTIVES + [None]))
    devices = draw(st.sampled_from([0, 2, 4, 8, 16]))
    body = draw(st.lists(rows(), min_size=1, max_size=6))
    form = draw(st.sampled_from(["text", "text", "trimmed", "json"]))
    prefix = draw(st.sampled_from(["", "", "[1,0]<stdout>: ", " 0: "]))
    junk = draw(st.lists(st.sampled_from(["# Avg bus bandwidth    : nan", "#", "garbage line", "# all_reduce, forced",
                                          "  1 2 3", "# Out of bounds values : 0 OK"]), max_size=2))
    options = draw(st.fixed_dictionaries({}, optional={
        "--ranks": st.sampled_from(["2", "4", "8", "16", "12"]), "--nodes": st.sampled_from(["1", "2", "3"]),
        "--collective": st.sampled_from(["all_reduce", "allgather", "broadcast", "zzz"]),
        "--algo": st.sampled_from(["ring", "tree", "zzz"]), "--in-place": st.just(None)}))
    return {"collective": collective, "devices": devices, "rows": body, "form": form, "prefix": prefix,
            "junk": junk, "options": options}


def render(log: dict) -> str:
    if log["form"] == "json":
        doc = {"devices": [{"rank": r} for r in range(log["devices"])], "results": [
            {"name": log["collective"] or "", "size": _json(r["size"]), "count": _json(r["count"]), "type": r["type"],
             "redop": r["redop"], "root": _json(r["root"]),
             "out_of_place": {"time": _json(r["time"]), "algbw": _json(r["algbw"]), "busbw": _json(r["busbw"])},
             "in_place": {"time": _json(r["in_time"])}} for r in log["rows"]]}
        return json.dumps(doc)
    lines = ["# nccl-tests version 2.17.9 nccl-headers=22602 nccl-library=22602"]
    if log["collective"]:
        lines.append(f"# Collective test starting: {log['collective']}_perf")
    lines += [f"#  Rank {i:2d} Group  0 Pid {1000 + i} on node device {i % 8} [0000:18:00] NVIDIA H100 80GB HBM3"
              for i in range(log["devices"])]
    if log["form"] == "trimmed":
        lines += ["#       size      time   algbw   busbw", "#        (B)      (us)  (GB/s)  (GB/s)"]
        lines += [f"{r['size']:>12} {r['time']:>9} {r['algbw']:>7} {r['busbw']:>7}" for r in log["rows"]]
    else:
        lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
                  "algbw   busbw #wrong", "#        (B)    (elements)                               (us)  (GB/s)  "
                  "(GB/s)            (us)  (GB/s)  (GB/s)"]
        lines += [f"{r['size']:>12} {r['count']:>13} {r['type']:>9} {r['redop']:>7} {r['root']:>7} {r['time']:>8} "
                  f"{r['algbw']:>7} {r['busbw']:>7}      0 {r['in_time']:>8} {r['algbw']:>7} {r['busbw']:>7}      0"
                  for r in log["rows"]]
    lines[3:3] = log["junk"]
    return "\n".join(log["prefix"] + line for line in lines) + "\n"


def _json(text: str):
    """A token as a JSON log would carry it: a number where it reads as one, else the text itself."""
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and abs(value) < 1e18 and re.fullmatch(r"-?\d+", text) else \
        value if abs(value) < 1e300 else text


def argv(log: dict, path) -> list[str]:
    out = []
    for k, v in log["options"].items():
        out += [k] if v is None else [k, v]
    return out


def run_compare(log: dict, path) -> str:
    path.write_text(render(log))
    args = ["compare", str(path), "--cluster", "hgx-h100", "--json", *argv(log, path)]
    code, out, err = cli(args, 120)
    clean(code, err, render(log), codes=(0, 2))
    assert cli(args, 120) == (code, out, err), "the same log gave other output"
    if code == 0:
        doc = json.loads(out)
        figures(doc, "compare", signed=("error",))
        assert any(c["points"] for c in doc)
        for c in doc:
            if c["dropped"]:
                assert f"note: {c['source']}: {sum(c['dropped'].values())} row" in err, err
    return "ok" if code == 0 else "refused"


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=40, derandomize=True, **COMMON)
@given(logs())
def test_compare_reads_any_log_cleanly(tmp_path_factory, log):
    OUTCOMES[run_compare(log, tmp_path_factory.mktemp("log") / "log.txt")] += 1


def test_the_sample_compares_and_refuses(tmp_path_factory):
    """The laws hold vacuously if every log is refused: the CI sample must compare many and refuse some."""
    if sum(OUTCOMES.values()) < 40:  # run alone (-k)
        test_compare_reads_any_log_cleanly(tmp_path_factory)
    print(f"\ncompare outcomes: {dict(OUTCOMES)}")
    assert OUTCOMES["ok"] >= 10 and OUTCOMES["refused"] >= 5


def run_calibrate(log: dict, path) -> str:
    path.write_text(render(log))
    args = ["calibrate", "--from-log", str(path), "--cluster", "hgx-h100",
            *[a for k, v in log["options"].items() if k != "--in-place" for a in (k, v)]]
    code, out, err = cli(args, 300)
    clean(code, err, render(log), codes=(0, 2))
    assert cli(args, 300) == (code, out, err), "the same log gave another fit"
    if code == 0:
        numbers = re.findall(r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)", out.split("fitted:", 1)[1], re.I)
        figures([float(x) for x in numbers], "calibrate")
    return "ok" if code == 0 else "refused"


@settings(max_examples=4, derandomize=True, **COMMON)
@given(logs().filter(lambda g: len(g["rows"]) >= 3))
def test_calibrate_reads_any_log_cleanly(tmp_path_factory, log):
    run_calibrate(log, tmp_path_factory.mktemp("log") / "log.txt")


FUZZ: Counter = Counter()


@settings(max_examples=1_000, derandomize=False, database=None, **COMMON)
@given(logs())
def _fuzz_compare(tmp_path_factory, log):
    FUZZ[run_compare(log, tmp_path_factory.mktemp("log") / "log.txt")] += 1


@settings(max_examples=100, derandomize=False, database=None, **COMMON)
@given(logs().filter(lambda g: len(g["rows"]) >= 3))
def _fuzz_calibrate(tmp_path_factory, log):
    FUZZ["calibrate " + run_calibrate(log, tmp_path_factory.mktemp("log") / "log.txt")] += 1


@pytest.mark.fuzz
def test_fuzz_logs(tmp_path_factory):
    """1,000 logs through compare and 100 through calibrate, new ones each run; run with `pytest -m fuzz`."""
    _fuzz_compare(tmp_path_factory)
    _fuzz_calibrate(tmp_path_factory)
    print(f"\nlogs: {dict(FUZZ)}")
    assert FUZZ["ok"] + FUZZ["refused"] >= 1_000
