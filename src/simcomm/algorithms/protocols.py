"""NCCL's protocols as latency and bandwidth efficiencies (figures from NCCL 2.30's src/graph/tuning.cc).

A protocol adds a software latency per step that depends on what the step crosses (NVLink, PCIe, network) and
divides the bandwidth by its efficiency (LL sends a flag with every 4 bytes; LL128 one per 120 of 128 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import AlgorithmError

PROTOCOLS = ("LL", "LL128", "Simple")


@dataclass(frozen=True)
class Protocol:
    name: str
    efficiency: float  # payload bytes / wire bytes
    hop_latency: dict  # seconds per step, by what the step crosses: "nvlink", "pcie", "net", "loopback"
    base_latency: float  # seconds once per collective (launch and setup)

    @property
    def wire_factor(self) -> float:
        return 1.0 / self.efficiency

    def hop(self, link_class: str) -> float:
        return self.hop_latency.get(link_class, self.hop_latency.get("pcie", 0.0))


_US = 1e-6
# Ring per-hop latency {LL, LL128, Simple}: NVLink 0.6/1.9/3.4; PCI 1.0/2.5/5.7; NET 2.7/4.0/14.0 (us).
# Tree: NVLink 0.6/1.25/4.0; PCI 1.0/1.9/4.0; NET 5.0/8.5/14. Base: Ring 6.6/14.0/8.4, Tree 6.8/14.0/8.4.
_HOP = {
    "ring": {"LL": (0.6, 1.0, 2.7), "LL128": (1.9, 2.5, 4.0), "Simple": (3.4, 5.7, 14.0)},
    "tree": {"LL": (0.6, 1.0, 5.0), "LL128": (1.25, 1.9, 8.5), "Simple": (4.0, 4.0, 14.0)},
}
_BASE = {"ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}, "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}}
# LL: half the bytes are flags. LL128: NCCL models 0.92 of Simple's bandwidth.
_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


def protocol(name: str, family: str = "ring", device_kind: str = "gpu", tuning=None, kind: str = "",
             ranks: int = 0) -> Protocol:
    """The protocol `name` as used by an algorithm of `family` ("ring" or "tree" latencies).

    CPU ranks (gloo over TCP) have no NCCL protocols: they get a plain protocol with no added latency.
    `tuning` (the cluster's hardware.Tuning) adds its launch and per-step overheads and scales the bandwidth by its
    efficiency for the family, the protocol and the collective `kind`; without it NCCL's tuner figures stand.
    """
    launch = tuning.launch_overhead if tuning is not None else 0.0
    step = tuning.step_overhead_for(ranks) if tuning is not None else 0.0
    if device_kind == "cpu":
        factor = tuning.factor(family, kind) if tuning is not None else 1.0
        hops = {k: step for k in ("nvlink", "pcie", "net", "loopback")} if step else {}
        return Protocol("TCP", factor, hops, launch)
    if name not in PROTOCOLS:
        raise AlgorithmError(f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOLS)}")
    nv, pci, net = _HOP["tree" if family == "tree" else "ring"][name]
    base = _BASE["tree" if family == "tree" else "ring"][name]
    if family == "nvls":
        nv, pci, net, base = 25.0, 25.0, 18.0, 0.0  # NVLS Simple: NVLink 25, NET 18; base 0
    factor = tuning.factor(family, name, kind) if tuning is not None else 1.0
    return Protocol(name, _EFFICIENCY[name] * factor,
                    {"nvlink": nv * _US + step, "pcie": pci * _US + step, "net": net * _US + step,
                     "loopback": pci * _US + step}, base * _US + launch)
