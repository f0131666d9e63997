"""Paths inside a node: simcomm's Dijkstra gives networkx's paths exactly, ties included (routes must not move)."""
import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.hardware.paths import shortest_paths as _shortest_paths

EDGES = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.sampled_from([0.5, 1.0, 1.0, 2.0])),
                 min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(edges=EDGES, source=st.integers(0, 7))
def test_same_paths_as_networkx(edges, source):
    g, ours = nx.DiGraph(), {}
    for j, (u, v, w) in enumerate(edges):
        if u == v:
            continue
        g.add_edge(u, v, index=j, weight=w)
        ours.setdefault(u, {})[v] = (j, w)
        ours.setdefault(v, {})
    if source not in g:
        return
    assert _shortest_paths(ours, source) == nx.single_source_dijkstra_path(g, source, weight="weight")


def _one_search_per_pair(t):
    """Every endpoint pair's path by a search from each source (what TemplatePaths shares between alike sources)."""
    from simcomm.hardware.paths import TemplatePaths
    paths = TemplatePaths(t)
    out = {}
    for i, a in enumerate(t.endpoints):
        reach = paths._search(paths._out[a])
        for j, b in enumerate(t.endpoints):
            if i != j:
                out[i, j] = paths._path(reach, paths._out[a], paths._sink[b], a, b)
    return paths, out


def test_alike_endpoints_share_one_search():
    """Endpoints with alike out-links (a host's CPU processes, GPUs under one PCIe switch) get their paths from one
    search per class, and those are the paths a search from each would give."""
    import numpy as np
    from simcomm.hardware.presets import cpu_host, dgx_a100, hgx_h100, pcie_4gpu
    for t in (cpu_host(6), cpu_host(5, host_bandwidth=20e9), hgx_h100(), dgx_a100(), pcie_4gpu()):
        paths, want = _one_search_per_pair(t)
        assert len(paths.reps) < len(t.endpoints)
        i, j = (np.array(x) for x in zip(*want))
        lengths, links = paths.local(i, j)
        got = np.split(links, np.cumsum(lengths)[:-1])
        assert [tuple(x.tolist()) for x in got] == [want[k] for k in zip(i.tolist(), j.tolist())]


def test_a_large_host_costs_one_search():
    from simcomm.hardware.presets import cpu_host
    from simcomm.hardware.paths import TemplatePaths
    paths = TemplatePaths(cpu_host(4000))
    assert len(paths.reps) == 1
