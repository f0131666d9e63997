"""The scenario schema: pydantic models with unknown keys forbidden, units as strings, and a generated reference.

The workload section is the union of the workload kinds' own specs (workloads/registry.py). Types, ranges and units
are checked here; checks that need the built cluster (ranks that fit, algorithms that can run) are the workloads'
and loader.py's. `python -m simcomm.scenario` prints docs/scenario-reference.md.
"""
from __future__ import annotations

import math
import types
import warnings
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from ..fields import (MAX_NODES, MAX_RANKS, PLOTS, PROTOCOL_NAMES, Base, FlopRate, Protocol, Rate, Size, Time,
                      described)
from ..hardware import list_presets
from ..vocab import COLL_ALIASES, COLLECTIVES, MAX_RANKS_PER_NODE, did_you_mean
from ..vocab import choice as _choice
from ..workloads import WORKLOADS


# ---- cluster ---------------------------------------------------------------------------------------------------
class Overrides(Base):
    """Figures that replace the preset's (every key is optional)."""

    nvlink_bandwidth: Rate | None = described(None, "NVLink bandwidth per GPU and direction", "rate")
    nvlink_latency: Time | None = described(None, "NVLink hop latency", "time")
    pcie_bandwidth: Rate | None = described(None, "PCIe link bandwidth per direction", "rate")
    pcie_latency: Time | None = described(None, "PCIe hop latency", "time")
    loopback_bandwidth: Rate | None = described(None, "TCP loopback bandwidth per rank (cpu-host)", "rate")
    loopback_latency: Time | None = described(None, "TCP loopback latency (cpu-host)", "time")
    host_bandwidth: Rate | None = described(None, "copy bandwidth all ranks of a host share (cpu-host with "
                                                   "params.host_bandwidth, e.g. a calibrated profile)", "rate")
    nic_bandwidth: Rate | None = described(None, "NIC bandwidth per direction", "rate")
    nic_latency: Time | None = described(None, "NIC to switch latency", "time")
    memory_bandwidth: Rate | None = described(None, "HBM (or DRAM) bandwidth a copy sees", "rate")
    memory_capacity: Size | None = described(None, "device memory", "size")
    compute_rate: FlopRate | None = described(None, "dense compute rate, e.g. '790TFLOPS'", "flop rate")


class FabricOptions(Base):
    """Options of the fabric between nodes."""

    leaf_ports: int | None = described(None, "NIC ports per leaf switch", ge=1, le=65536)
    oversubscription: float | None = described(None, "leaf down:up bandwidth ratio (1 = non-blocking)", "number",
                                        gt=0, le=64)
    link_bandwidth: Rate | None = described(None, "switch to switch link bandwidth (default: the NIC's)", "rate")
    latency: Time | None = described(None, "switch to switch hop latency", "time")

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class PresetCluster(Base):
    """A named machine (see `simcomm presets`), copied `nodes` times and joined by a fabric."""

    preset: str = described(doc="preset name: " + "|".join(list_presets())
                            + ", or a calibration profile file (.yaml/.json) written by simcomm calibrate")
    nodes: int = described(1, "number of nodes", ge=1, le=MAX_NODES)
    fabric: str | None = described(None, "rail-optimised | fat-tree | switch (default: the preset's)")
    ranks_per_node: int | None = described(None, "processes per node (cpu-host only)", ge=1,
                                           le=MAX_RANKS_PER_NODE)
    overrides: Overrides | None = described(None, "replace the preset's figures", "mapping")
    fabric_options: FabricOptions | None = described(None, "fabric options", "mapping")

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str) -> str:
        from ..hardware import is_profile, list_presets, load_profile
        if is_profile(v.strip()):
            load_profile(v.strip())  # a clear error now if the file is missing or bad
            return v.strip()
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

    topology: list[Literal["Switch", "FullyConnected", "Ring"]] = described(doc="per dimension", min_length=1,
                                                                    max_length=2)
    npus_count: list[Annotated[int, Field(ge=1, le=MAX_NODES)]] = described(doc="NPUs per dimension", min_length=1,
                                                                      max_length=2)
    bandwidth: list[Rate] = described(doc="per dimension, e.g. ['370GB/s', '400Gbps']", type="list of rates",
                               min_length=1, max_length=2)
    latency: list[Time] = described(doc="per dimension, e.g. ['0.7us', '2us']", type="list of times", min_length=1,
                             max_length=2)
    device: str = described("hgx-h100", "preset whose device figures (HBM, compute) the NPUs use")
    memory_bandwidth: Rate | None = described(None, "replace the device's memory bandwidth", "rate")
    compute_rate: FlopRate | None = described(None, "replace the device's compute rate", "flop rate")

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
        # a ring's routes grow with its length, a full mesh has a link per pair
        limit = {"Ring": 128, "FullyConnected": 512}.get(self.topology[0], MAX_RANKS_PER_NODE)
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


def _one_form(v):
    if isinstance(v, dict) and "preset" in v and "topology" in v:
        raise ValueError("use one form: 'preset' (a named machine, copied 'nodes' times) or 'topology' (ASTRA-sim "
                         "style dimensions), not both")
    return v


ClusterSpec = Annotated[Union[Annotated[PresetCluster, Tag("preset")], Annotated[DimsCluster, Tag("dims")]],
                        Discriminator(_cluster_tag, custom_error_type="cluster_type",
                                      custom_error_message="expected a mapping with 'preset' or 'topology'"),
                        BeforeValidator(_one_form)]


# ---- workloads: one spec per kind, from the registry -------------------------------------------------------------
WORKLOAD_SPECS = tuple(w.Spec for w in WORKLOADS.values())
Workload = Annotated[Union[WORKLOAD_SPECS], Field(discriminator="kind")]


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
    """Forced choices (NCCL_ALGO / NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS), whether compute and communication share the
    GPUs, and how much the simulation records."""

    algorithm: Annotated[dict[str, str] | None, BeforeValidator(_algorithm)] = described(
        None, "force an algorithm (NCCL_ALGO): a name, or a mapping such as {all_reduce: ring}",
        "name or mapping")
    protocol: Protocol | None = described(None, "force a protocol (NCCL_PROTO): " + ", ".join(PROTOCOL_NAMES), "protocol")
    detail: Literal["auto", "flows", "steps"] = described("auto", "record every flow, only steps and collectives, or "
                                                   "auto (flows up to 64 ranks)")
    numerics: Literal["nccl", "gloo"] | None = described(None, "reduction order of rank programs (default: by device)")
    interference: bool = described(True, "compute and communication share each GPU's SMs: compute slows beside "
                                          "communication kernels and they slow beside it (docs/model.md); false: "
                                          "each runs as if alone")
    min_channels: int | None = described(None, "NCCL_MIN_NCHANNELS: at least this many channels (CTAs) per "
                                               "communicator", ge=1, le=64)
    max_channels: int | None = described(None, "NCCL_MAX_NCHANNELS: at most this many channels (CTAs) per "
                                               "communicator", ge=1, le=64)


def _file_option(default: str):
    def check(v):
        if v is True:
            return default
        if v is False or v is None:
            return None
        if isinstance(v, str) and v.strip() and not v.startswith("/") and ".." not in v.split("/"):
            return v
        raise ValueError("expected true, false or a name inside the output directory")
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

        dir: str | None = described(None, "output directory (default: simcomm-out/<name>)", min_length=1)
        report: bool = described(True, "print the report")
        json: Annotated[str | None, _file_option("result.json")] = described(None, "true or a file name for the JSON result",
                                                                      "bool or file")
        trace: Annotated[str | None, _file_option("trace.json")] = described(
            None, "true or a file name for the Chrome/Perfetto trace", "bool or file")
        plots: Annotated[list[PlotName], BeforeValidator(_plots)] = described([], "true or a list of: " + ", ".join(PLOTS),
                                                                  "bool or list")
        rank_traces: Annotated[str | None, _file_option("rank_traces")] = described(
            None, "true or a directory name for one PyTorch-profiler-style trace per rank (what Holistic Trace "
            "Analysis loads)", "bool or directory")


class Sweep(Base):
    """A parameter grid for `simcomm sweep`: every combination of the listed values."""

    parameters: dict[str, Annotated[list[Any], Field(min_length=1, max_length=1000)]] = described(
        doc="dotted key path -> values, e.g. {cluster.nodes: [1, 2, 4]}", type="mapping", min_length=1)
    jobs: int | None = described(None, "parallel workers (default: every local core)", ge=1, le=1024)


class Scenario(Base):
    """A scenario file: the cluster, the workload, model knobs, outputs and an optional sweep."""

    name: str | None = described(None, "name in reports (default: the file name)", min_length=1, max_length=200)
    description: str = described("", "free text")
    cluster: ClusterSpec = described(doc="a preset or ASTRA-sim style dimensions", type="mapping")
    workload: Workload = described(doc="what runs: kind " + ", ".join(WORKLOADS), type="mapping")
    model: ModelKnobs = described(default_factory=ModelKnobs, doc="forced choices", type="mapping")
    outputs: Outputs = described(default_factory=Outputs, doc="files to write", type="mapping")
    sweep: Sweep | None = described(None, "parameter grid for `simcomm sweep`", "mapping")
    _directory: str | None = PrivateAttr(default=None)  # the file's directory (None for text)

    @property
    def directory(self) -> str | None:
        """The directory of the scenario file (rank program modules are imported from there first)."""
        return self._directory


# ---- reference -------------------------------------------------------------------------------------------------
SECTIONS = [("", Scenario), ("cluster (preset form)", PresetCluster), ("cluster.overrides", Overrides),
            ("cluster.fabric_options", FabricOptions), ("cluster (dimension form)", DimsCluster),
            *(section for w in WORKLOADS.values() for section in w.reference_sections()), ("model", ModelKnobs),
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
