"""Paths inside a node: simcomm's Dijkstra gives networkx's paths exactly, ties included (routes must not move)."""
import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.hardware.cluster import _shortest_paths

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
