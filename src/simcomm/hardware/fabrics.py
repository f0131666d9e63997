"""Fabric builders: the switches that join the nodes' NICs.

Every builder returns a `Fabric` whose `attach(node, nic)` names the switch a NIC plugs into; the NIC <-> switch
port itself belongs to the node template (`nic_bandwidth`, `nic_latency`). Switch <-> switch links are duplex,
kind "net". Attach functions are `functools.partial`s of module functions so fabrics stay picklable.
"""
from __future__ import annotations

import inspect
from functools import partial

from .model import Fabric, HardwareError, LinkSpec, NodeTemplate, check_figure, duplex

# Switch-to-switch hop: cut-through latency of a modern IB/Ethernet switch plus cable (estimate).
SWITCH_LATENCY = 0.5e-6

FABRIC_KINDS = ("rail-optimised", "fat-tree", "switch")
_ALIASES = {"rail-optimized": "rail-optimised", "rail": "rail-optimised", "fattree": "fat-tree",
            "leaf-spine": "fat-tree", "single-switch": "switch"}


def _check(num_nodes: int, nics_per_node: int, link_bandwidth: float, leaf_ports: int = 1,
           oversubscription: float = 1.0, latency: float = 0.0) -> None:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise HardwareError(f"a fabric needs num_nodes >= 1, got {num_nodes!r}")
    if isinstance(nics_per_node, bool) or not isinstance(nics_per_node, int) or nics_per_node < 1:
        raise HardwareError(f"a fabric needs nics_per_node >= 1, got {nics_per_node!r}")
    if isinstance(leaf_ports, bool) or not isinstance(leaf_ports, int) or leaf_ports < 1:
        raise HardwareError(f"leaf_ports must be an integer >= 1, got {leaf_ports!r}")
    for what, value, kind in (("link_bandwidth", link_bandwidth, "bandwidth"),
                              ("oversubscription", oversubscription, "oversubscription"), ("latency", latency, "latency")):
        check_figure("fabric", what, value, kind)


def _spines(leaves: list[str], leaf_ports: int, oversubscription: float, bandwidth: float,
            latency: float) -> tuple[list[str], list[LinkSpec]]:
    """Spine tier joining every leaf to every spine; none when there is a single leaf."""
    if len(leaves) <= 1:
        return [], []
    # A leaf with `leaf_ports` downlinks gets leaf_ports/oversubscription uplinks, one to each spine.
    spines = [f"spine{s}" for s in range(max(1, round(leaf_ports / oversubscription)))]
    links = [spec for leaf in leaves for spine in spines for spec in duplex(leaf, spine, bandwidth, latency, "net")]
    return spines, links


def _gb(x: float) -> str:
    return f"{x / 1e9:g} GB/s"


def _rail_attach(leaf_ports: int, node: int, nic: int) -> str:
    return f"rail{nic}.leaf{node // leaf_ports}"


def rail_optimised(num_nodes: int, nics_per_node: int, link_bandwidth: float, leaf_ports: int = 32,
                   oversubscription: float = 1.0, latency: float = SWITCH_LATENCY) -> Fabric:
    """NIC r of every node goes to rail r's leaves (`rail{r}.leaf{node // leaf_ports}`); spines join all leaves.

    The layout of DGX/HGX SuperPODs: same-rail traffic between nodes stays on one leaf switch.
    """
    _check(num_nodes, nics_per_node, link_bandwidth, leaf_ports, oversubscription, latency)
    per_rail = -(-num_nodes // leaf_ports)
    leaves = [f"rail{r}.leaf{j}" for r in range(nics_per_node) for j in range(per_rail)]
    spines, links = _spines(leaves, leaf_ports, oversubscription, link_bandwidth, latency)
    desc = (f"rail-optimised: {nics_per_node} rail(s) x {per_rail} leaf switch(es) of {leaf_ports} ports, "
            f"{len(spines)} spine(s), {_gb(link_bandwidth)} links, oversubscription {oversubscription:g}:1")
    return Fabric("rail-optimised", desc, tuple(leaves + spines), tuple(links), partial(_rail_attach, leaf_ports))


def _tree_attach(leaf_ports: int, nics_per_node: int, node: int, nic: int) -> str:
    return f"leaf{(node * nics_per_node + nic) // leaf_ports}"


def fat_tree(num_nodes: int, nics_per_node: int, link_bandwidth: float, leaf_ports: int = 32,
             oversubscription: float = 1.0, latency: float = SWITCH_LATENCY) -> Fabric:
    """Two-tier leaf-spine: NIC port p = node * nics_per_node + nic plugs into `leaf{p // leaf_ports}`."""
    _check(num_nodes, nics_per_node, link_bandwidth, leaf_ports, oversubscription, latency)
    num_leaves = -(-num_nodes * nics_per_node // leaf_ports)
    leaves = [f"leaf{j}" for j in range(num_leaves)]
    spines, links = _spines(leaves, leaf_ports, oversubscription, link_bandwidth, latency)
    desc = (f"fat-tree: {num_leaves} leaf switch(es) of {leaf_ports} ports, {len(spines)} spine(s), "
            f"{_gb(link_bandwidth)} links, oversubscription {oversubscription:g}:1")
    return Fabric("fat-tree", desc, tuple(leaves + spines), tuple(links),
                  partial(_tree_attach, leaf_ports, nics_per_node))


def _switch_attach(node: int, nic: int) -> str:
    return "switch0"


def single_switch(num_nodes: int, nics_per_node: int, link_bandwidth: float) -> Fabric:
    """Every NIC on one non-blocking switch "switch0"."""
    _check(num_nodes, nics_per_node, link_bandwidth)
    desc = f"single switch: {num_nodes * nics_per_node} ports of {_gb(link_bandwidth)}"
    return Fabric("switch", desc, ("switch0",), (), _switch_attach)


_BUILDERS = {"rail-optimised": rail_optimised, "fat-tree": fat_tree, "switch": single_switch}


def fabric_kind(kind: str) -> str:
    """Canonical fabric kind name, or HardwareError naming the valid ones."""
    key = str(kind).strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in _BUILDERS:
        raise HardwareError(f"unknown fabric {kind!r}; valid fabrics: {', '.join(FABRIC_KINDS)}")
    return key


def build_fabric(kind: str, num_nodes: int, template: NodeTemplate, **options) -> Fabric:
    """Build fabric `kind` for `num_nodes` copies of `template`; link_bandwidth defaults to its NIC bandwidth."""
    name = fabric_kind(kind)
    builder = _BUILDERS[name]
    if not template.nics:
        raise HardwareError(f"{template.name} has no NICs, so its nodes cannot join a fabric")
    accepted = [p for p in inspect.signature(builder).parameters if p not in ("num_nodes", "nics_per_node")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise HardwareError(f"fabric {name} does not take option(s) "
                            f"{', '.join(unknown)}; it takes {', '.join(accepted)}")
    options.setdefault("link_bandwidth", template.nic_bandwidth)
    return builder(num_nodes, len(template.nics), **options)
