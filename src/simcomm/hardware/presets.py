"""Node templates for common machines, the preset registry, and `build_cluster`.

Link bandwidths are the EFFECTIVE per-direction rates NCCL's cost model uses (src/graph/tuning.cc), so simulated
busbw lines up with nccl-tests; line rates are quoted in the descriptions. Latencies are hardware-only estimates:
protocol software overheads are added by the backends. Source for every figure unless noted: NCCL's tuning
model and published nccl-tests results, as summarised in docs/model.md ("Effective link figures").
"""
from __future__ import annotations

import dataclasses
import difflib
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from .cluster import Cluster
from .fabrics import build_fabric
from .model import FIGURE_RANGES, DeviceSpec, HardwareError, LinkSpec, NodeTemplate, Tuning, check_figure, duplex

GIB = 1 << 30
# NCCL tuning.cc per-link NVLink bandwidth: 20.0 GB/s on SM80 (A100), 20.6 GB/s on SM90 (H100/H200).
NVLINK_LINK_SM80, NVLINK_LINK_SM90 = 20.0e9, 20.6e9
# NCCL PCIe model width*rate/80: Gen4 x16 -> 24 GB/s, Gen5 x16 -> 48 GB/s (raw ~32 / ~63 GB/s per direction).
PCIE_GEN4, PCIE_GEN5 = 24e9, 48e9
# HDR 200 Gb/s: NCCL's Mbps/8000 gives 25 GB/s, ~24 achieved.
# NDR 400 Gb/s: 50 GB/s line, 46-48 achieved (NCCL maintainers).
HDR_NIC, NDR_NIC = 24e9, 48e9
NIC_100G = 12.2e9  # 100 Gb/s NIC, ~12.2 GB/s achieved (NCCL maintainers)
# AWS EFA: p5.48xlarge has 32 EFA devices of 100 Gb/s (4 per GPU: one 400 Gb/s rail per GPU), p4de.24xlarge 4 (one
# per PCIe switch, shared by its 2 GPUs). Bandwidth as a 100 Gb/s NIC's; EFA's latency is the fabric's own and is
# fitted (calibration/fit_presets.py), not this per-hop estimate.
EFA_P5_RAIL, EFA_P4DE_NIC = 4 * NIC_100G, NIC_100G
# Inter-socket fabric (AMD xGMI / Intel UPI): rough estimate, only crossed by traffic that cannot avoid it.
INTER_SOCKET_BW = 38.4e9
# Channels of an NCCL communicator (one CTA each on every GPU it spans): NCCL's topology search gives 2 per NVLink
# on an NVSwitch node, at most MAXCHANNELS = 32 (DGX A100: 12 links, 24 channels; H100/H200: 18 links, 32), 2 per
# PCIe ring, and 2 per NIC rail across nodes (8 rails: 16), as NCCL's init logs show ("Channel 00/24", "16 coll
# channels"). NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS (Tuning.min_channels / max_channels) bound them.
NCCL_MAX_CHANNELS = 32
# Hardware latencies per hop: estimates, not measurements.
NVLINK_LAT = 0.35e-6  # GPU -> NVSwitch -> GPU = 0.7 us
PCIE_LAT = 0.5e-6
HOST_BRIDGE_LAT = 0.5e-6  # PCIe switch <-> root complex, and socket <-> socket
NIC_LAT = 1.0e-6  # NIC <-> leaf switch port
# gloo over loopback TCP on one host, per rank and direction (estimates).
LOOPBACK_BW, LOOPBACK_LAT = 5e9, 15e-6

# memory_bandwidth is what a device-to-device copy sees; compute is dense bf16. SMs: NVIDIA's architecture
# whitepapers (A100: 108 of GA100's 128; H100 SXM5: 132 of GH100's 144; H200 is the same GH100 configuration).
A100_SXM = DeviceSpec("A100-SXM4-80GB", "gpu", 2.0e12, 80 * GIB, 312e12, sms=108)  # both nominal: none measured
H100_SXM = DeviceSpec("H100-SXM5-80GB", "gpu", 3.0e12, 80 * GIB, 790e12, sms=132)  # measured (3.35 TB/s, 989 TF)
H200_SXM = DeviceSpec("H200-SXM-141GB", "gpu", 4.3e12, 141 * 10**9, 790e12, sms=132)  # measured (4.8 TB/s)
A100_PCIE = DeviceSpec("A100-PCIe-40GB", "gpu", 1.5e12, 40 * GIB, 312e12, sms=108)  # nominal
CPU_PROC = DeviceSpec("CPU process", "cpu", 10e9, 16 * GIB, 50e9, fused_reduction=False)  # estimates

_REF = "docs/model.md: effective link figures (NCCL's tuning model, published nccl-tests results)"
_NCCL = "NCCL src/graph/tuning.cc: NVLink 20.0 (SM80) / 20.6 (SM90) GB/s per link, PCIe width*rate/80"


# Software figures fitted to public nccl-tests tables: calibration/fit_presets.py fits launch and per-step overheads
# and bandwidth efficiencies (by algorithm family and protocol, "net" across nodes) and, for EFA, the NICs' latency
# to calibration/systems.yaml's measured sweeps, writes calibration/fitted.yaml and (--write-presets) this block;
# tests/test_calibration.py keeps the two equal.
# See docs/validation.md.
_FITTED_BY = "calibration/fit_presets.py (public nccl-tests tables, calibration/systems.yaml)"
FITTED_TUNING = {
    "aws-p4de": Tuning(1.9579e-05, 4.2e-09, (("LL", 0.3521), ("LL128", 0.9706), ("net", 1.1187), ("ring", 0.9579), ("tree", 0.7278),), (_FITTED_BY,)),
    "aws-p5": Tuning(1.1501e-05, 5.2e-09, (("LL", 0.6896), ("LL128", 1.0768), ("net", 0.9037), ("nvls", 0.8709), ("ring", 0.9579), ("tree", 0.6541),), (_FITTED_BY,), chunk_overhead=8279),
    "dgx-a100": Tuning(1.9579e-05, 4.2e-09, (("LL", 0.3521), ("LL128", 0.9706), ("net", 1.0076), ("net.all_to_all", 0.8709), ("ring", 0.9579), ("tree", 0.7278),), (_FITTED_BY,)),
    "hgx-h100": Tuning(1.1501e-05, 5.2e-09, (("LL", 0.6896), ("LL128", 1.0768), ("net", 0.8915), ("net.all_to_all", 0.9987), ("nvls", 0.8709), ("ring", 0.9579), ("tree", 0.6541),), (_FITTED_BY,), chunk_overhead=8279),
    "hgx-h200": Tuning(4.441e-06, 4.552e-07, (("LL", 1.0), ("LL128", 1.0), ("net", 1.0), ("nvls", 0.8709), ("ring", 0.9759), ("tree", 1.0),), (_FITTED_BY,), chunk_overhead=9066),
}
FITTED_NIC_LATENCY = {
    "aws-p4de": 7.139e-05,
    "aws-p5": 1.287e-05,
}


def _sxm_node(name: str, gpu: DeviceSpec, links_per_gpu: int, per_link: float, pcie: float, nic: float,
              nvls: bool, text: str, nic_text: str, nics_per_switch: int = 2) -> NodeTemplate:
    """8 SXM GPUs on one NVSwitch crossbar; 4 PCIe switches with 2 GPUs + `nics_per_switch` NICs each (one NIC
    per GPU, or one shared by the switch's two GPUs); two sockets."""
    gpus, nics = [f"gpu{i}" for i in range(8)], [f"nic{i}" for i in range(4 * nics_per_switch)]
    vertices = {g: "gpu" for g in gpus} | {"nvswitch": "nvswitch"}
    vertices |= {f"pcie{k}": "pcie_switch" for k in range(4)}
    vertices |= {"cpu_root0": "host_bridge", "cpu_root1": "host_bridge"}
    vertices |= {n: "nic" for n in nics}
    # NCCL stripes over every NVSwitch chip, so the chips act as one crossbar and each GPU has one aggregate link.
    links = [s for g in gpus for s in duplex(g, "nvswitch", links_per_gpu * per_link, NVLINK_LAT, "nvlink")]
    for k in range(4):
        for i in (2 * k, 2 * k + 1):
            links += duplex(gpus[i], f"pcie{k}", pcie, PCIE_LAT, "pcie")
        for i in range(nics_per_switch * k, nics_per_switch * (k + 1)):
            links += duplex(nics[i], f"pcie{k}", pcie, PCIE_LAT, "pcie")
        links += duplex(f"pcie{k}", f"cpu_root{k // 2}", pcie, HOST_BRIDGE_LAT, "pcie")
    links += duplex("cpu_root0", "cpu_root1", INTER_SOCKET_BW, HOST_BRIDGE_LAT, "inter_socket")
    description = (f"{text}; the NVSwitch chips are modelled as one non-blocking crossbar \"nvswitch\" with one "
                   f"aggregate {links_per_gpu} x {per_link / 1e9:g} GB/s link per GPU and direction (NCCL stripes "
                   f"over all chips); {nic_text}; 4 PCIe switches with 2 GPUs + {nics_per_switch} NIC"
                   f"{'s' if nics_per_switch > 1 else ''} each")
    endpoint_nic = tuple(i * nics_per_switch // 2 for i in range(8))
    channels = (min(NCCL_MAX_CHANNELS, 2 * links_per_gpu), min(NCCL_MAX_CHANNELS, 2 * len(nics)))
    return NodeTemplate(name, description, gpu, vertices, tuple(gpus), tuple(links), tuple(nics), endpoint_nic,
                        nic, FITTED_NIC_LATENCY.get(name, NIC_LAT), nvls, (_NCCL, _REF, "latencies: estimates"),
                        FITTED_TUNING.get(name, Tuning()), channels)


def dgx_a100() -> NodeTemplate:
    return _sxm_node("dgx-a100", A100_SXM, 12, NVLINK_LINK_SM80, PCIE_GEN4, HDR_NIC, False,
                     "DGX A100: 8x A100 SXM4 80GB, NVLink3 12 links/GPU (600 GB/s bidirectional line rate), "
                     "6 NVSwitches, no NVLink SHARP, PCIe Gen4",
                     "8x HDR 200 Gb/s NICs (25 GB/s line, 24 effective), one per GPU (rail i)")


def hgx_h100(gpu: DeviceSpec = H100_SXM, label: str = "hgx-h100") -> NodeTemplate:
    return _sxm_node(label, gpu, 18, NVLINK_LINK_SM90, PCIE_GEN5, NDR_NIC, True,
                     f"HGX {gpu.name.split('-')[0]}: 8x {gpu.name}, NVLink4 18 links/GPU (900 GB/s bidirectional, "
                     "450 per direction line rate), 4 NVSwitches with NVLink SHARP, PCIe Gen5",
                     "8x NDR 400 Gb/s NICs (50 GB/s line, 48 effective), one per GPU (rail i)")


def hgx_h200() -> NodeTemplate:
    return hgx_h100(H200_SXM, "hgx-h200")


# The H800: the H100 SXM5 sold in China with its NVLink cut to 8 links (400 GB/s bidirectional, 200 per direction;
# NVIDIA's H800 datasheet), the same GH100 compute and HBM3. DeepSeek-V3's cluster (arXiv 2412.19437 section 3.1):
# 8 GPUs per node on NVLink/NVSwitch, 8 IB NICs of 400 Gb/s per node.
H800_SXM = dataclasses.replace(H100_SXM, name="H800-SXM5-80GB")


def hgx_h800() -> NodeTemplate:
    node = _sxm_node("hgx-h800", H800_SXM, 8, NVLINK_LINK_SM90, PCIE_GEN5, NDR_NIC, True,
                     "HGX H800: 8x H800-SXM5-80GB (an H100 SXM5 with 8 NVLink4 links: 400 GB/s bidirectional, 200 "
                     "per direction line rate), NVSwitch with NVLink SHARP, PCIe Gen5",
                     "8x NDR 400 Gb/s InfiniBand NICs (50 GB/s line, 48 effective), one per GPU (rail i)")
    # NCCL's software figures: the HGX H100's (same GPU and switches; nothing measured on an H800 here)
    return dataclasses.replace(node, tuning=FITTED_TUNING["hgx-h100"])


def aws_p5() -> NodeTemplate:
    return _sxm_node("aws-p5", H100_SXM, 18, NVLINK_LINK_SM90, PCIE_GEN5, EFA_P5_RAIL, True,
                     "AWS p5.48xlarge: 8x H100-SXM5-80GB, NVLink4 18 links/GPU (450 GB/s per direction line rate), "
                     "4 NVSwitches with NVLink SHARP, PCIe Gen5",
                     "32x EFA 100 Gb/s (3200 Gb/s per node), 4 per GPU, modelled as one 4 x 12.2 GB/s NIC per "
                     "GPU (rail i)")


def aws_p4de() -> NodeTemplate:
    return _sxm_node("aws-p4de", A100_SXM, 12, NVLINK_LINK_SM80, PCIE_GEN4, EFA_P4DE_NIC, False,
                     "AWS p4de.24xlarge: 8x A100-SXM4-80GB, NVLink3 12 links/GPU (300 GB/s per direction line "
                     "rate), 6 NVSwitches, no NVLink SHARP, PCIe Gen4",
                     "4x EFA 100 Gb/s (12.5 GB/s line, 12.2 effective), one per PCIe switch, shared by its 2 GPUs",
                     nics_per_switch=1)


def pcie_4gpu() -> NodeTemplate:
    gpus, nics = [f"gpu{i}" for i in range(4)], ["nic0", "nic1"]
    vertices = {g: "gpu" for g in gpus} | {"pcie0": "pcie_switch", "pcie1": "pcie_switch", "cpu_root0": "host_bridge"}
    vertices |= {n: "nic" for n in nics}
    links: list[LinkSpec] = []
    for k in range(2):
        for g in gpus[2 * k:2 * k + 2]:
            links += duplex(g, f"pcie{k}", PCIE_GEN4, PCIE_LAT, "pcie")
        links += duplex(nics[k], f"pcie{k}", PCIE_GEN4, PCIE_LAT, "pcie")
        links += duplex(f"pcie{k}", "cpu_root0", PCIE_GEN4, HOST_BRIDGE_LAT, "pcie")
    description = ("4x GPU on PCIe Gen4, no NVLink (A100 PCIe 40GB figures): two PCIe switches with 2 GPUs + 1 NIC "
                   "each under one host bridge; 2x 200 Gb/s NICs (25 GB/s line, 24 effective)")
    return NodeTemplate("pcie-4gpu", description, A100_PCIE, vertices, tuple(gpus), tuple(links), tuple(nics),
                        (0, 0, 1, 1), HDR_NIC, NIC_LAT, False, (_NCCL, _REF, "latencies: estimates"),
                        nccl_channels=(2, 2 * len(nics)))


def cpu_host(ranks_per_node: int = 4, host_bandwidth: float | None = None) -> NodeTemplate:
    """host_bandwidth: what the host's cores can copy for all ranks at once (bytes/s); every loopback transfer
    then also crosses one shared "host" link of that capacity (a calibrated profile sets it; None: no limit)."""
    cpus = [f"cpu{i}" for i in range(ranks_per_node)]
    vertices = {c: "cpu" for c in cpus} | {"loopback": "loopback", "nic0": "nic"}
    if host_bandwidth is None:
        links = [s for c in cpus for s in duplex(c, "loopback", LOOPBACK_BW, LOOPBACK_LAT, "loopback")]
        links += duplex("nic0", "loopback", PCIE_GEN4, PCIE_LAT, "pcie")  # the NIC hangs off the network stack
    else:
        vertices |= {"host": "loopback"}  # sends enter "loopback", cross the shared host link, leave from "host"
        links = [LinkSpec(c, "loopback", LOOPBACK_BW, LOOPBACK_LAT, "loopback") for c in cpus]
        links += [LinkSpec("host", c, LOOPBACK_BW, LOOPBACK_LAT, "loopback") for c in cpus]
        links += [LinkSpec("loopback", "host", float(host_bandwidth), 0.0, "host"),
                  LinkSpec("host", "nic0", PCIE_GEN4, PCIE_LAT, "pcie"),  # the NIC, too, is fed by the host
                  LinkSpec("nic0", "loopback", PCIE_GEN4, PCIE_LAT, "pcie")]
    description = (f"{ranks_per_node} CPU processes on one host talking over TCP loopback (gloo-style); "
                   "one 100 Gb/s NIC (12.5 GB/s line, ~12.2 effective) for multi-host runs"
                   + (f"; the host copies {host_bandwidth / 1e9:g} GB/s for all ranks together"
                      if host_bandwidth is not None else ""))
    return NodeTemplate("cpu-host", description, CPU_PROC, vertices, tuple(cpus), tuple(links), ("nic0",),
                        (0,) * ranks_per_node, NIC_100G, NIC_LAT, False,
                        (_REF, "loopback TCP and CPU figures: estimates"))


@dataclass(frozen=True)
class Preset:
    """A named machine: `builder(**params)` makes its node template; `params` lists what it takes, with defaults."""

    name: str
    summary: str
    builder: Callable[..., NodeTemplate]
    default_fabric: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def defaults(self) -> dict[str, Any]:
        return dict(self.params)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("dgx-a100", "8x A100 SXM4 80GB, NVSwitch, 8x HDR 200G", dgx_a100, "rail-optimised"),
    Preset("hgx-h100", "8x H100 SXM5 80GB, NVSwitch + NVLS, 8x NDR 400G", hgx_h100, "rail-optimised"),
    Preset("hgx-h200", "8x H200 SXM 141GB, NVSwitch + NVLS, 8x NDR 400G", hgx_h200, "rail-optimised"),
    Preset("hgx-h800", "8x H800 SXM5 80GB (H100, 400 GB/s NVLink), NVSwitch + NVLS, 8x NDR 400G", hgx_h800,
           "rail-optimised"),
    Preset("aws-p5", "AWS p5.48xlarge: 8x H100 SXM5, NVSwitch + NVLS, 32x EFA 100G", aws_p5, "rail-optimised"),
    Preset("aws-p4de", "AWS p4de.24xlarge: 8x A100 SXM4 80GB, NVSwitch, 4x EFA 100G", aws_p4de, "rail-optimised"),
    Preset("pcie-4gpu", "4x GPU on PCIe Gen4, no NVLink, 2x 200G", pcie_4gpu, "fat-tree"),
    Preset("cpu-host", "CPU processes over TCP loopback (gloo), 1x 100G", cpu_host, "fat-tree",
           (("ranks_per_node", 4), ("host_bandwidth", None))),
)}

# Override key -> (what it sets, link kind or None). Values are numbers in SI units.
OVERRIDES: dict[str, tuple[str, str | None]] = {
    "nvlink_bandwidth": ("bandwidth", "nvlink"), "nvlink_latency": ("latency", "nvlink"),
    "pcie_bandwidth": ("bandwidth", "pcie"), "pcie_latency": ("latency", "pcie"),
    "loopback_bandwidth": ("bandwidth", "loopback"), "loopback_latency": ("latency", "loopback"),
    "nic_bandwidth": ("nic_bandwidth", None), "nic_latency": ("nic_latency", None),
    "host_bandwidth": ("bandwidth", "host"),
    "memory_bandwidth": ("memory_bandwidth", None), "memory_capacity": ("memory_capacity", None),
    "compute_rate": ("compute_rate", None),
}


def list_presets() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> Preset:
    """The preset called `name`, or the preset a calibration profile file builds on."""
    from .profile import is_profile, load_profile
    if is_profile(name):
        return get_preset(load_profile(name).preset)
    key = str(name).strip().lower().replace("_", "-")
    if key in PRESETS:
        return PRESETS[key]
    close = difflib.get_close_matches(key, PRESETS, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise HardwareError(f"unknown preset {name!r}{hint}; valid presets: {', '.join(PRESETS)}")


def apply_overrides(t: NodeTemplate, overrides: dict[str, float]) -> NodeTemplate:
    """A copy of template `t` with figures replaced; see OVERRIDES for the keys."""
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise HardwareError(f"unknown override(s) {', '.join(map(repr, unknown))}; valid overrides: "
                            f"{', '.join(OVERRIDES)}")
    links, device, fields = list(t.links), t.device, {}
    for key, value in overrides.items():
        figure = "latency" if key.endswith("latency") else key if key in FIGURE_RANGES else "bandwidth"
        check_figure(f"{t.name}: override", key, value, figure)
        attr, kind = OVERRIDES[key]
        if kind is not None:
            if not any(link.kind == kind for link in links):
                raise HardwareError(f"override {key} does not apply to {t.name}: it has no {kind} links")
            links = [dataclasses.replace(link, **{attr: float(value)}) if link.kind == kind else link
                     for link in links]
        elif attr.startswith("nic_"):
            if not t.nics:
                raise HardwareError(f"override {key} does not apply to {t.name}: it has no NICs")
            fields[attr] = float(value)
        else:
            device = dataclasses.replace(device, **{attr: int(value) if attr == "memory_capacity" else float(value)})
    if not overrides:
        return t
    note = ", ".join(f"{k}={v:g}" for k, v in overrides.items())
    return dataclasses.replace(t, links=tuple(links), device=device, sources=t.sources + (f"overrides: {note}",),
                               description=f"{t.description} [overrides: {note}]", **fields)


def build_cluster(preset: str = "hgx-h100", nodes: int = 1, fabric: str | None = None,
                  ranks_per_node: int | None = None, overrides: dict[str, float] | None = None,
                  fabric_options: dict[str, Any] | None = None, *, params: dict[str, Any] | None = None,
                  tuning: Tuning | None = None, tuning_changes: dict[str, Any] | None = None) -> Cluster:
    """`nodes` copies of a preset joined by `fabric` (the preset's default when None).

    `preset` may also be a calibration profile file (.yaml/.yml/.json, written by `simcomm calibrate`): its
    preset, builder params, overrides and tuning apply first; explicit arguments here win. `params` are the
    preset builder's parameters (see Preset.params); `tuning` replaces the template's software figures;
    `tuning_changes` then sets some of its fields (e.g. {"interference": False})."""
    from .profile import is_profile, load_profile
    builder_params: dict = dict(params or {})
    label = "tuned" if tuning is not None or params else None
    if is_profile(preset):
        prof = load_profile(preset)
        preset, label = prof.preset, prof.name
        tuning = tuning if tuning is not None else prof.tuning
        builder_params = {**prof.params, **builder_params}
        overrides = {**prof.overrides, **dict(overrides or {})}
        if ranks_per_node is None and "ranks_per_node" in builder_params:
            ranks_per_node = builder_params["ranks_per_node"]
        builder_params.pop("ranks_per_node", None)
    p = get_preset(preset)
    if isinstance(nodes, bool) or not isinstance(nodes, numbers.Integral) or nodes < 1:
        raise HardwareError(f"nodes must be an integer >= 1, got {nodes!r}")
    nodes, params = int(nodes), {}
    if ranks_per_node is not None:
        if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, numbers.Integral) or ranks_per_node < 1:
            raise HardwareError(f"ranks_per_node must be an integer >= 1, got {ranks_per_node!r}")
        if "ranks_per_node" in p.defaults:
            params["ranks_per_node"] = int(ranks_per_node)
    unknown = sorted(set(builder_params) - set(p.defaults))
    if unknown:
        raise HardwareError(f"preset {p.name} takes no parameter(s) {', '.join(unknown)}; it takes "
                            f"{', '.join(p.defaults) or 'none'}")
    template = p.builder(**params, **builder_params)
    if tuning is not None:
        template = dataclasses.replace(template, tuning=tuning)
    if tuning_changes:
        template = dataclasses.replace(template, tuning=dataclasses.replace(template.tuning, **tuning_changes))
    if ranks_per_node is not None and len(template.endpoints) != ranks_per_node:
        raise HardwareError(f"preset {p.name} has a fixed {len(template.endpoints)} ranks per node; "
                            f"ranks_per_node={ranks_per_node} is not allowed")
    template = apply_overrides(template, dict(overrides or {}))
    # Build the fabric even for one node so a bad fabric name or option is reported at once.
    fab = build_fabric(fabric or p.default_fabric, nodes, template, **dict(fabric_options or {}))
    base = p.name if label is None else f"{p.name} [{label}]"
    name = base if nodes == 1 else f"{nodes}x {base} ({fab.kind})"
    return Cluster(name, template, nodes, fab if nodes > 1 else None)


def describe_preset(name: str, nodes: int = 1) -> dict:
    """Cluster.describe() of the preset with `nodes` nodes, plus the registry's summary and parameters."""
    p = get_preset(name)
    d = build_cluster(p.name, nodes).describe()
    d.update(preset=p.name, summary=p.summary, default_fabric=p.default_fabric, params=p.defaults,
             overrides=list(OVERRIDES))
    return d
