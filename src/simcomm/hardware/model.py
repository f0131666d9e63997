"""Plain data that describes hardware: devices, links, one node's layout, and the fabric between nodes.

Units inside are SI: bytes, bytes/second, seconds, flop/second. Presets build these; `Cluster` replicates a
`NodeTemplate` over N nodes, joins them with a `Fabric`, and routes between ranks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from ..errors import HardwareError

# The range every hardware figure must lie in (SI units). With sizes below 2**63 bytes, these keep every time the
# engine computes finite: a rate of 1e-308 B/s (finite, positive) would make a transfer last inf seconds.
FIGURE_RANGES: dict[str, tuple[float, float, str]] = {
    "bandwidth": (1.0, 1e16, "B/s"), "latency": (0.0, 1e4, "s"), "compute_rate": (1.0, 1e21, "flop/s"),
    "memory_capacity": (1.0, 2.0 ** 64, "B"), "oversubscription": (1 / 64, 64.0, "")}


def check_figure(where: str, key: str, value, kind: str) -> None:
    """A HardwareError naming `key` unless value is a real number within FIGURE_RANGES[kind]."""
    low, high, unit = FIGURE_RANGES[kind]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high
    if not ok:
        raise HardwareError(f"{where}: {key} must be a number from {low:g} to {high:g}{' ' + unit if unit else ''}, "
                            f"got {value!r}")


# Vertex kinds. Endpoints (ranks) are "gpu" or "cpu"; everything else may be crossed by a route.
ENDPOINT_KINDS = ("gpu", "cpu")
VERTEX_KINDS = ENDPOINT_KINDS + ("nvswitch", "pcie_switch", "host_bridge", "nic", "switch", "loopback")
LINK_KINDS = ("nvlink", "pcie", "net", "loopback", "inter_socket", "host")


@dataclass(frozen=True)
class DeviceSpec:
    """One rank's device: a GPU, or a CPU process on a host (gloo-style)."""

    name: str
    kind: str  # "gpu" or "cpu"
    memory_bandwidth: float  # HBM (or DRAM) bytes/s, as a device-to-device copy would see it
    memory_capacity: int  # bytes
    compute_rate: float  # flop/s (dense bf16 for GPUs)
    # NCCL fuses the reduction into the transfer kernel, so reduction time overlaps the transfer; gloo on a CPU
    # receives first and reduces after.
    fused_reduction: bool = True
    # Streaming multiprocessors: communication kernels hold some of them beside compute (engine/sharing.py); 0 for
    # a device whose compute and communication do not share anything modelled (a CPU process).
    sms: int = 0

    def __post_init__(self) -> None:
        for key, kind in (("memory_bandwidth", "bandwidth"), ("memory_capacity", "memory_capacity"),
                          ("compute_rate", "compute_rate")):
            check_figure(f"device {self.name}", key, getattr(self, key), kind)
        if isinstance(self.sms, bool) or not isinstance(self.sms, int) or not 0 <= self.sms <= 100_000:
            raise HardwareError(f"device {self.name}: sms must be a whole number from 0 to 100000, got {self.sms!r}")


@dataclass(frozen=True)
class LinkSpec:
    """A directed link between two vertices of one node (or of the fabric)."""

    src: str
    dst: str
    bandwidth: float  # bytes/s
    latency: float  # seconds
    kind: str  # one of LINK_KINDS

    def __post_init__(self) -> None:
        figures = (self.kind, type(self.bandwidth), self.bandwidth, type(self.latency), self.latency)
        if figures in _CHECKED_LINKS:  # a fabric has 10^5 links of one kind: check its figures once
            return
        check_figure(f"{self.kind} link {self.src}->{self.dst}", f"{self.kind}_bandwidth" if self.kind != "net"
                     else "link_bandwidth", self.bandwidth, "bandwidth")
        check_figure(f"{self.kind} link {self.src}->{self.dst}", f"{self.kind}_latency" if self.kind != "net"
                     else "latency", self.latency, "latency")
        _CHECKED_LINKS.add(figures)


_CHECKED_LINKS: set[tuple] = set()  # (kind, figures and their types) of links found valid


def duplex(a: str, b: str, bandwidth: float, latency: float, kind: str) -> list[LinkSpec]:
    """Both directions of a full-duplex link, each with the full per-direction bandwidth."""
    return [LinkSpec(a, b, bandwidth, latency, kind), LinkSpec(b, a, bandwidth, latency, kind)]


@dataclass(frozen=True)
class Tuning:
    """Software figures on top of the links, read by the algorithms' predictions and the executor's timing.

    launch_overhead: seconds added once per collective (kernel launch, the library's setup), on top of the
        protocol's base latency. step_overhead: seconds added to every step's hop latency.
    efficiency: multipliers of the bandwidth a collective gets, by algorithm family ("ring", "tree", "nvls"),
        protocol ("LL", "LL128", "Simple"), collective ("all_gather", ...) or "net" (groups that span nodes:
        what the network transport achieves; "net.KIND" replaces it for one collective); they multiply; 1.0 where
        absent.
    sources: where the figures come from (a fit, a table, a profile file).
    cores: for CPU ranks (gloo), the host's cores; a step's overhead grows as ranks / cores beyond them.
    chunk_overhead: bytes. NVLS and NVLS-Tree move their data in chunks of NCCL's size (protocols.nvls_chunk), and
        each chunk costs what this many more bytes would: a chunk of c bytes runs at c / (c + chunk_overhead) of
        the bandwidth (0: no cost, NCCL's tuner's view).
    first_touch_rate: for CPU ranks, bytes/s at which a core faults in freshly mapped memory (0: free). gloo's
        all_gather allocates its whole output anew on every call, which at 32 MiB and more is mapped fresh
        (protocols.fresh_output_time).
    interference: compute and communication share each GPU's SMs (engine/sharing.py): compute slows while
        communication kernels are resident, and their copies slow beside compute. False: each runs as if alone.
    min_channels, max_channels: NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, bounds on the channels (one CTA each) a
        communicator uses (algorithms/channels.py); 0: NCCL's defaults.
    """

    launch_overhead: float = 0.0
    step_overhead: float = 0.0
    efficiency: tuple[tuple[str, float], ...] = ()
    sources: tuple[str, ...] = ()
    cores: int = 0  # CPU ranks: cores they share; with more ranks than cores a step waits its turn (0: no limit)
    chunk_overhead: float = 0.0
    first_touch_rate: float = 0.0
    interference: bool = True
    min_channels: int = 0
    max_channels: int = 0

    def sharing(self, ranks: int) -> float:
        """How many ranks share each core: ranks / cores when CPU ranks outnumber their cores, else 1."""
        return ranks / self.cores if self.cores and ranks > self.cores else 1.0

    def step_overhead_for(self, ranks: int) -> float:
        """step_overhead, scaled by ranks / cores when CPU ranks outnumber the cores they share."""
        return self.step_overhead * self.sharing(ranks)

    def __post_init__(self) -> None:
        if not (self.launch_overhead >= 0 and self.step_overhead >= 0):
            raise HardwareError("tuning overheads must be >= 0 seconds")
        if not self.chunk_overhead >= 0:
            raise HardwareError("tuning chunk_overhead must be >= 0 bytes")
        if not self.first_touch_rate >= 0:
            raise HardwareError("tuning first_touch_rate must be >= 0 bytes/s")
        for key, value in self.efficiency:
            if not 0 < value <= 4:
                raise HardwareError(f"tuning efficiency {key} must be in (0, 4], got {value!r}")
        if not isinstance(self.interference, bool):
            raise HardwareError(f"tuning interference must be true or false, got {self.interference!r}")
        for key in ("min_channels", "max_channels"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 64:
                raise HardwareError(f"tuning {key} must be a whole number from 0 (NCCL's default) to 64, got "
                                    f"{value!r}")

    @cached_property
    def _table(self) -> dict[str, float]:
        return dict(self.efficiency)  # looked up for every protocol the tuner weighs: built once per Tuning

    def efficiency_of(self, key: str, default: float = 1.0) -> float:
        """The efficiency named `key`, `default` when not set."""
        return self._table.get(key, default)

    def factor(self, *keys: str) -> float:
        """The product of the efficiencies named by keys (family, protocol), 1.0 for those not set."""
        out = 1.0
        for k in keys:
            out *= self._table.get(k, 1.0)
        return out


@dataclass(frozen=True)
class NodeTemplate:
    """One node's layout; every node of a cluster is a copy of it.

    `endpoints` are the rank vertices in local-rank order; `nics` are the NIC vertices in rail order;
    `endpoint_nic[i]` is the NIC that local rank i uses to leave the node (its rail).
    """

    name: str
    description: str
    device: DeviceSpec
    vertices: dict[str, str]  # vertex name -> kind
    endpoints: tuple[str, ...]
    links: tuple[LinkSpec, ...]
    nics: tuple[str, ...] = ()
    endpoint_nic: tuple[int, ...] = ()
    nic_bandwidth: float = 0.0  # NIC <-> fabric port, bytes/s per direction
    nic_latency: float = 0.0
    nvls: bool = False  # NVSwitch can reduce in the switch (NVLink SHARP)
    sources: tuple[str, ...] = ()  # where the figures come from
    tuning: Tuning = Tuning()  # software overheads and efficiencies (NCCL's tuner figures when empty)
    # Channels NCCL's topology search gives a communicator (one CTA each on every GPU): inside one node, and
    # across nodes; (0, 0) for devices NCCL does not run on (algorithms/channels.py)
    nccl_channels: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        for v, kind in self.vertices.items():
            if kind not in VERTEX_KINDS:
                raise HardwareError(f"{self.name}: vertex {v!r} has unknown kind {kind!r}; expected {VERTEX_KINDS}")
        for e in self.endpoints:
            if self.vertices.get(e) not in ENDPOINT_KINDS:
                raise HardwareError(f"{self.name}: endpoint {e!r} must be a gpu or cpu vertex")
        for link in self.links:
            for v in (link.src, link.dst):
                if v not in self.vertices:
                    raise HardwareError(f"{self.name}: link {link.src}->{link.dst} names unknown vertex {v!r}")
            if link.kind not in LINK_KINDS:
                raise HardwareError(f"{self.name}: link {link.src}->{link.dst} has unknown kind {link.kind!r}")
        for n in self.nics:
            if self.vertices.get(n) != "nic":
                raise HardwareError(f"{self.name}: {n!r} listed as a NIC but is not a nic vertex")
        if self.nics and len(self.endpoint_nic) != len(self.endpoints):
            raise HardwareError(f"{self.name}: endpoint_nic needs one NIC index per endpoint")
        if any(not 0 <= i < len(self.nics) for i in self.endpoint_nic):
            raise HardwareError(f"{self.name}: endpoint_nic refers to a NIC that does not exist")
        if self.nics:
            check_figure(self.name, "nic_bandwidth", self.nic_bandwidth, "bandwidth")
            check_figure(self.name, "nic_latency", self.nic_latency, "latency")


@dataclass(frozen=True)
class Fabric:
    """Switches joining the nodes' NICs.

    `attach(node, nic)` names the switch that NIC `nic` of node `node` plugs into. `links` join switches.
    """

    kind: str  # "none", "fat-tree", "rail-optimised", "switch"
    description: str
    switches: tuple[str, ...]
    links: tuple[LinkSpec, ...]
    attach: Callable[[int, int], str] = field(compare=False)
