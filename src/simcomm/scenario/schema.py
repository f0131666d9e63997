"""The scenario schema: pydantic models with unknown keys forbidden, units as strings, and a generated reference.

Types, ranges and units are checked here; checks that need the built cluster or the algorithm registry (ranks that
fit, algorithms that exist) are in loader.py. `python -m simcomm.scenario` prints docs/scenario-reference.md.
"""
from __future__ import annotations

import math
import re
import types
import warnings
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator,
                      model_validator)

from ..collective import sizes_between
from ..errors import SimcommError
from ..units import UnitError, parse_rate, parse_size, parse_time
from ..workloads.names import COLL_ALIASES, COLLECTIVES, DTYPE_ALIASES, DTYPES, OP_ALIASES, OPS, did_you_mean
from ..workloads.names import choice as _choice

MAX_SIZE = 1 << 50  # 1 PiB: anything larger is a typo
MAX_NODES, MAX_RANKS = 8192, 65536
PROTOCOL_NAMES = ("LL", "LL128", "Simple")
PLOTS = ("busbw", "timeline", "links")


def _reason(exc: UnitError) -> str:
    return re.sub(r"^cannot parse \w+ .*?: ", "", str(exc), count=1)


def _size(v) -> int:
    try:
        n = parse_size(v)
    except UnitError as exc:
        raise ValueError(f"expected a size such as '64MiB', '1GB' or a whole number of bytes: {_reason(exc)}") from None
    if n > MAX_SIZE:
        raise ValueError("expected a size of at most 1PiB")
    return n


def _rate(v) -> float:
    if not isinstance(v, str):
        raise ValueError("expected a rate with its unit, such as '400Gbps' or '50GB/s' (a bare number is ambiguous)")
    try:
        return parse_rate(v)
    except UnitError as exc:
        raise ValueError(f"expected a rate such as '400Gbps' or '50GB/s': {_reason(exc)}") from None


def _time(v) -> float:
    if not isinstance(v, str) and v != 0:
        raise ValueError("expected a time with its unit, such as '1.5us' or '500ns' (a bare number is ambiguous)")
    try:
        t = parse_time(v)
    except UnitError as exc:
        raise ValueError(f"expected a time such as '1.5us' or '2ms': {_reason(exc)}") from None
    if t > 3600:
        raise ValueError("expected a time of at most one hour")
    return t


_FLOPS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def _flops(v) -> float:
    """'790TFLOPS', '790 TFLOP/s' or a number of flop/s."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([kKMGTP]?)(FLOPS|FLOP/s|flops|flop/s)?\s*", str(v)) \
            if isinstance(v, str) else None
        try:
            x = float(m.group(1)) * _FLOPS[m.group(2)] if m else math.nan
        except ValueError:
            x = math.nan
    if not math.isfinite(x) or x <= 0:
        raise ValueError("expected a positive compute rate such as '790TFLOPS' or 7.9e14")
    return x


Size = Annotated[int, BeforeValidator(_size)]
Rate = Annotated[float, BeforeValidator(_rate)]
Time = Annotated[float, BeforeValidator(_time)]
FlopRate = Annotated[float, BeforeValidator(_flops)]
CollectiveName = Annotated[str, BeforeValidator(lambda v: _choice(v, COLLECTIVES, COLL_ALIASES, "a collective"))]
DType = Annotated[str, BeforeValidator(lambda v: _choice(v, tuple(DTYPES), DTYPE_ALIASES, "a dtype"))]
Op = Annotated[str, BeforeValidator(lambda v: _choice(v, OPS, OP_ALIASES, "a reduce op"))]
Protocol = Annotated[str, BeforeValidator(lambda v: _choice_exact(v, PROTOCOL_NAMES, "a protocol"))]


def _choice_exact(v, choices, what) -> str:
    if isinstance(v, str):
        for c in choices:
            if v.strip().lower() == c.lower():
                return c
    raise ValueError(f"expected {what}, one of {', '.join(choices)}{did_you_mean(v, choices)}")


def _f(default: Any = ..., doc: str = "", type: str | None = None, **kw) -> Any:
    """A Field with a description and the type as the reference shows it."""
    extra = {"doc_type": type} if type else None
    return Field(default, description=doc, json_schema_extra=extra, **kw)


class Base(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ---- cluster ---------------------------------------------------------------------------------------------------
class Overrides(Base):
    """Figures that replace the preset's (every key is optional)."""

    nvlink_bandwidth: Rate | None = _f(None, "NVLink bandwidth per GPU and direction", "rate")
    nvlink_latency: Time | None = _f(None, "NVLink hop latency", "time")
    pcie_bandwidth: Rate | None = _f(None, "PCIe link bandwidth per direction", "rate")
    pcie_latency: Time | None = _f(None, "PCIe hop latency", "time")
    loopback_bandwidth: Rate | None = _f(None, "TCP loopback bandwidth per rank (cpu-host)", "rate")
    loopback_latency: Time | None = _f(None, "TCP loopback latency (cpu-host)", "time")
    nic_bandwidth: Rate | None = _f(None, "NIC bandwidth per direction", "rate")
    nic_latency: Time | None = _f(None, "NIC to switch latency", "time")
    memory_bandwidth: Rate | None = _f(None, "HBM (or DRAM) bandwidth a copy sees", "rate")
    memory_capacity: Size | None = _f(None, "device memory", "size")
    compute_rate: FlopRate | None = _f(None, "dense compute rate, e.g. '790TFLOPS'", "flop rate")


class FabricOptions(Base):
    """Options of the fabric between nodes."""

    leaf_ports: int | None = _f(None, "NIC ports per leaf switch", ge=1, le=65536)
    oversubscription: float | None = _f(None, "leaf down:up bandwidth ratio (1 = non-blocking)", "number",
                                        gt=0, le=64)
    link_bandwidth: Rate | None = _f(None, "switch to switch link bandwidth (default: the NIC's)", "rate")
    latency: Time | None = _f(None, "switch to switch hop latency", "time")

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class PresetCluster(Base):
    """A named machine (see `simcomm presets`), copied `nodes` times and joined by a fabric."""

    preset: str = _f(doc="preset name: " + "|".join(("dgx-a100", "hgx-h100", "hgx-h200", "pcie-4gpu", "cpu-host")))
    nodes: int = _f(1, "number of nodes", ge=1, le=MAX_NODES)
    fabric: str | None = _f(None, "rail-optimised | fat-tree | switch (default: the preset's)")
    ranks_per_node: int | None = _f(None, "processes per node (cpu-host only)", ge=1, le=512)
    overrides: Overrides | None = _f(None, "replace the preset's figures", "mapping")
    fabric_options: FabricOptions | None = _f(None, "fabric options", "mapping")

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str) -> str:
        from ..hardware import list_presets
        key = v.strip().lower().replace("_", "-")
        if key not in list_presets():
            names = list_presets()
            raise ValueError(f"expected a preset, one of {', '.join(names)}{did_you_mean(key, names)}")
        return key

    @field_validator("fabric")
    @classmethod
    def _fabric(cls, v):
        from ..hardware import FABRIC_KINDS
        from ..hardware.fabrics import fabric_kind
        try:
            return fabric_kind(v) if v is not None else None
        except ValueError:
            raise ValueError(f"expected a fabric, one of {', '.join(FABRIC_KINDS)}"
                             f"{did_you_mean(v, FABRIC_KINDS)}") from None


class DimsCluster(Base):
    """ASTRA-sim style: one entry per dimension, inside a node first, then across nodes.

    Dimension 1 is `Switch` (an NVSwitch-like crossbar), `FullyConnected` (a direct link between every pair) or
    `Ring`; dimension 2, if given, is `Switch` (one NIC per NPU into one switch). Bandwidth is per NPU and
    direction; latency is one way between two NPUs of that dimension.
    """

    topology: list[Literal["Switch", "FullyConnected", "Ring"]] = _f(doc="per dimension", min_length=1,
                                                                    max_length=2)
    npus_count: list[Annotated[int, Field(ge=1, le=MAX_NODES)]] = _f(doc="NPUs per dimension", min_length=1,
                                                                      max_length=2)
    bandwidth: list[Rate] = _f(doc="per dimension, e.g. ['370GB/s', '400Gbps']", type="list of rates",
                               min_length=1, max_length=2)
    latency: list[Time] = _f(doc="per dimension, e.g. ['0.7us', '2us']", type="list of times", min_length=1,
                             max_length=2)
    device: str = _f("hgx-h100", "preset whose device figures (HBM, compute) the NPUs use")
    memory_bandwidth: Rate | None = _f(None, "replace the device's memory bandwidth", "rate")
    compute_rate: FlopRate | None = _f(None, "replace the device's compute rate", "flop rate")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return PresetCluster._preset(v)

    @model_validator(mode="after")
    def _same_length(self):
        lens = [len(self.topology), len(self.npus_count), len(self.bandwidth), len(self.latency)]
        if len(set(lens)) != 1:
            raise ValueError("expected topology, npus_count, bandwidth and latency to have one entry per dimension, "
                             f"got {lens[0]}, {lens[1]}, {lens[2]} and {lens[3]}")
        if len(self.topology) == 2 and self.topology[1] != "Switch":
            raise ValueError("expected Switch as the second (across nodes) dimension")
        if math.prod(self.npus_count) > MAX_RANKS:
            raise ValueError(f"expected at most {MAX_RANKS} NPUs in all, got {math.prod(self.npus_count)}")
        limit = 128 if self.topology[0] == "Ring" else 512  # routes inside a node are computed for every pair
        if self.npus_count[0] > limit:
            raise ValueError(f"expected at most {limit} NPUs in the first dimension of a {self.topology[0]}, "
                             f"got {self.npus_count[0]}")
        return self


def _cluster_tag(v):
    if isinstance(v, BaseModel):
        return "dims" if isinstance(v, DimsCluster) else "preset"
    if isinstance(v, dict):
        return "preset" if "preset" in v or "topology" not in v else "dims"
    return None


ClusterSpec = Annotated[Union[Annotated[PresetCluster, Tag("preset")], Annotated[DimsCluster, Tag("dims")]],
                        Discriminator(_cluster_tag, custom_error_type="cluster_type",
                                      custom_error_message="expected a mapping with 'preset' or 'topology'")]


# ---- workloads -------------------------------------------------------------------------------------------------
class SizeRange(Base):
    """nccl-tests' -b/-e/-f: begin, begin*factor, ... up to end."""

    begin: Size = _f(doc="smallest size (nccl-tests' S)", type="size")
    end: Size = _f(doc="largest size", type="size")
    factor: float = _f(2.0, "multiply by this each step (-f)", "number", gt=1, le=1024)

    @field_validator("factor", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _order(self):
        if not 0 < self.begin <= self.end:
            raise ValueError(f"expected 0 < begin <= end, got begin={self.begin} and end={self.end}")
        try:  # the series the run will use: it must grow at every step and stay within 4096 sizes
            sizes_between(self.begin, self.end, self.factor)
        except SimcommError as exc:
            raise ValueError(str(exc)) from None
        return self


def _sizes_tag(v):
    return "range" if isinstance(v, (dict, SizeRange)) else ("list" if isinstance(v, list) else None)


SizeSpec = Annotated[Union[Annotated[SizeRange, Tag("range")],
                           Annotated[list[Size], Field(min_length=1, max_length=4096), Tag("list")]],
                     Discriminator(_sizes_tag, custom_error_type="sizes_type",
                                   custom_error_message="expected a mapping {begin, end, factor} or a list of sizes")]


class PerfWorkload(Base):
    """A collective sweep, as nccl-tests runs it: every collective x algorithm x size, one after another."""

    kind: Literal["perf"] = _f(doc="perf")
    collectives: list[CollectiveName] = _f(["all_reduce"], "collectives to sweep: " + ", ".join(COLLECTIVES),
                                           "list of collectives", min_length=1, max_length=len(COLLECTIVES))
    sizes: SizeSpec = _f(doc="{begin, end, factor} or a list of sizes", type="mapping or list of sizes")
    ranks: int | None = _f(None, "ranks taking part (default: every rank of the cluster)", ge=1, le=MAX_RANKS)
    dtype: DType = _f("float32", "element type: " + ", ".join(DTYPES), "dtype")
    op: Op = _f("sum", "reduce op: " + ", ".join(OPS), "op")
    root: int = _f(0, "root rank of broadcast and reduce", ge=0, le=MAX_RANKS)
    algorithms: list[str] | None = _f(None, "compare these: 'auto' (the tuner), 'all' (every registered one) or "
                                      "names such as ring, tree (default: model.algorithm, else auto)",
                                      min_length=1, max_length=32)


class ProgramWorkload(Base):
    """A rank program in the style of torch.distributed, run on every rank (simcomm.spawn)."""

    kind: Literal["program"] = _f(doc="program")
    program: str = _f(doc="'package.module:function', called as function(rank, *args)")
    ranks: int | None = _f(None, "number of ranks (default: every rank of the cluster)", ge=1, le=4096)
    args: list[Any] = _f([], "extra positional arguments", "list")

    @field_validator("program")
    @classmethod
    def _program(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", v.strip()):
            raise ValueError("expected 'package.module:function'")
        return v.strip()


class Group(Base):
    """One group's collective."""

    name: str | None = _f(None, "label in reports (default: group0, group1, ...)")
    ranks: list[Annotated[int, Field(ge=0, le=MAX_RANKS)]] = _f(
        doc="global ranks, as a list or a string such as '0-7' or '0,8'", type="ranks", min_length=1)
    collective: CollectiveName = _f("all_reduce", "the collective", "collective")
    size: Size = _f(doc="nccl-tests' S", type="size")
    dtype: DType = _f("float32", "element type", "dtype")
    op: Op = _f("sum", "reduce op", "op")
    root: int = _f(0, "root, as an index into ranks", ge=0, le=MAX_RANKS)
    start: Time = _f(0.0, "when it starts", "time")
    algorithm: str | None = _f(None, "force an algorithm (default: model.algorithm, else the tuner)")
    protocol: Protocol | None = _f(None, "force a protocol", "protocol")

    @field_validator("ranks", mode="before")
    @classmethod
    def _ranks(cls, v):
        if isinstance(v, str):
            out = []
            try:
                for part in v.replace(" ", "").split(","):
                    a, _, b = part.partition("-")
                    lo, hi = int(a), int(b or a)
                    if hi < lo or hi - lo > MAX_RANKS or len(out) > MAX_RANKS:
                        raise ValueError
                    out.extend(range(lo, hi + 1))
            except ValueError:
                raise ValueError("expected ranks as a list or a string such as '0-7' or '0,8,16'") from None
            return out
        return v

    @field_validator("ranks")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):
            raise ValueError("expected distinct ranks")
        return v


class ContentionWorkload(Base):
    """Several groups' collectives at once on one cluster, so they share links and NICs."""

    kind: Literal["contention"] = _f(doc="contention")
    groups: list[Group] = _f(doc="the groups", type="list of groups", min_length=1, max_length=64)
    baseline: bool = _f(True, "also run each group alone, to report the slowdown")


class ScheduleWorkload(BaseModel):
    """Training schedules (DP/TP/PP): not yet."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["schedule"] = _f(doc="schedule")

    @model_validator(mode="after")
    def _not_yet(self):
        raise ValueError("expected kind perf, program or contention: training schedules (DP/TP/PP) are not "
                         "supported yet")


Workload = Annotated[Union[PerfWorkload, ProgramWorkload, ContentionWorkload, ScheduleWorkload],
                     Field(discriminator="kind")]


# ---- model knobs, outputs, sweep -------------------------------------------------------------------------------
def _algorithm(v):
    """A name for every collective, or a mapping collective -> name; normalised to a dict ('*' = every)."""
    if v is None:
        return None
    if isinstance(v, str) and v.strip():
        return {"*": v.strip()}
    if isinstance(v, dict) and v:
        out = {}
        for k, name in v.items():
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"expected an algorithm name for {k!r}")
            out[_choice(k, COLLECTIVES, COLL_ALIASES, "a collective as the key")] = name.strip()
        return out
    raise ValueError("expected an algorithm name, or a mapping from collective to algorithm name")


class ModelKnobs(Base):
    """Forced choices (NCCL_ALGO / NCCL_PROTO) and how much the simulation records."""

    algorithm: Annotated[dict[str, str] | None, BeforeValidator(_algorithm)] = _f(
        None, "force an algorithm (NCCL_ALGO): a name, or a mapping such as {all_reduce: ring}",
        "name or mapping")
    protocol: Protocol | None = _f(None, "force a protocol (NCCL_PROTO): " + ", ".join(PROTOCOL_NAMES), "protocol")
    detail: Literal["auto", "flows", "steps"] = _f("auto", "record every flow, only steps and collectives, or "
                                                   "auto (flows up to 64 ranks)")
    numerics: Literal["nccl", "gloo"] | None = _f(None, "reduction order of rank programs (default: by device)")


def _file_option(default: str):
    def check(v):
        if v is True:
            return default
        if v is False or v is None:
            return None
        if isinstance(v, str) and v.strip() and not v.startswith("/") and ".." not in v.split("/"):
            return v
        raise ValueError("expected true, false or a file name inside the output directory")
    return BeforeValidator(check)


def _plots(v):
    if v is True:
        return list(PLOTS)
    if v is False or v is None:
        return []
    if isinstance(v, list):
        return v
    raise ValueError(f"expected true, false or a list of plots ({', '.join(PLOTS)})")


PlotName = Annotated[str, BeforeValidator(lambda v: _choice(v, PLOTS, {}, "a plot"))]


with warnings.catch_warnings():  # a key named `json` shadows the deprecated BaseModel.json: harmless
    warnings.simplefilter("ignore", UserWarning)

    class Outputs(Base):
        """What `simcomm run` writes (the report always goes to standard output)."""

        dir: str | None = _f(None, "output directory (default: simcomm-out/<name>)", min_length=1)
        report: bool = _f(True, "print the report")
        json: Annotated[str | None, _file_option("result.json")] = _f(None, "true or a file name for the JSON result",
                                                                      "bool or file")
        trace: Annotated[str | None, _file_option("trace.json")] = _f(
            None, "true or a file name for the Chrome/Perfetto trace", "bool or file")
        plots: Annotated[list[PlotName], BeforeValidator(_plots)] = _f([], "true or a list of: " + ", ".join(PLOTS),
                                                                  "bool or list")


class Sweep(Base):
    """A parameter grid for `simcomm sweep`: every combination of the listed values."""

    parameters: dict[str, Annotated[list[Any], Field(min_length=1, max_length=1000)]] = _f(
        doc="dotted key path -> values, e.g. {cluster.nodes: [1, 2, 4]}", type="mapping", min_length=1)
    jobs: int | None = _f(None, "parallel workers (default: every local core)", ge=1, le=1024)


class Scenario(Base):
    """A scenario file: the cluster, the workload, model knobs, outputs and an optional sweep."""

    name: str | None = _f(None, "name in reports (default: the file name)", min_length=1, max_length=200)
    description: str = _f("", "free text")
    cluster: ClusterSpec = _f(doc="a preset or ASTRA-sim style dimensions", type="mapping")
    workload: Workload = _f(doc="what runs: kind perf, program or contention", type="mapping")
    model: ModelKnobs = _f(default_factory=ModelKnobs, doc="forced choices", type="mapping")
    outputs: Outputs = _f(default_factory=Outputs, doc="files to write", type="mapping")
    sweep: Sweep | None = _f(None, "parameter grid for `simcomm sweep`", "mapping")


# ---- reference -------------------------------------------------------------------------------------------------
SECTIONS = [("", Scenario), ("cluster (preset form)", PresetCluster), ("cluster.overrides", Overrides),
            ("cluster.fabric_options", FabricOptions), ("cluster (dimension form)", DimsCluster),
            ("workload (kind: perf)", PerfWorkload), ("workload.sizes (range form)", SizeRange),
            ("workload (kind: program)", ProgramWorkload), ("workload (kind: contention)", ContentionWorkload),
            ("workload.groups[i]", Group), ("workload (kind: schedule)", ScheduleWorkload), ("model", ModelKnobs),
            ("outputs", Outputs), ("sweep", Sweep)]


def _fmt(tp) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _fmt(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_fmt(a) for a in args if a is not type(None))
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_fmt(args[0])}"
    if origin is dict or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return "mapping"
    return {int: "integer", str: "string", bool: "bool", float: "number"}.get(tp, "any")


def _type_name(field) -> str:
    extra = field.json_schema_extra or {}
    return extra.get("doc_type") or _fmt(field.annotation)


def reference_markdown() -> str:
    """docs/scenario-reference.md, generated from the models above (a test checks the file is current)."""
    out = ["# Scenario reference", "",
           "Generated from `src/simcomm/scenario/schema.py` by `python -m simcomm.scenario > docs/scenario-reference.md`; "
           "do not edit by hand (a test checks it is current).",
           "", "Units are strings: sizes `'64MiB'`, `'1GB'` (or whole bytes); rates `'400Gbps'`, `'50GB/s'`; times "
           "`'1.5us'`, `'500ns'`. Unknown keys are errors.", ""]
    for title, model in SECTIONS:
        out += [f"## {title or 'top level'}", "", (model.__doc__ or "").strip().replace("\n    ", "\n"), "",
                "| key | type | default | description |", "| --- | --- | --- | --- |"]
        for key, field in model.model_fields.items():
            if field.is_required():
                default = "required"
            elif field.default_factory is not None:
                default = "{}"
            else:
                default = "" if field.default is None else f"`{field.default!r}`"
            text = (field.description or "").replace("|", "\\|")
            out.append(f"| `{key}` | {_type_name(field)} | {default} | {text} |")
        out.append("")
    return "\n".join(out)
