"""The architecture is enforced: the layers contract (pyproject.toml) holds and no import cycle exists anywhere.

An import that runs back up the layers, or two modules that import each other (even lazily, inside a function),
fails here.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).parent.parent


def test_layers_contract_holds():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout


def _module_graph() -> nx.DiGraph:
    graph = grimp.build_graph("simcomm", cache_dir=None)
    g = nx.DiGraph()
    for module in graph.modules:
        g.add_node(module)
        for imported in graph.find_modules_directly_imported_by(module):
            # A package's __init__ re-exporting its own submodules is how packages are built, not a cycle.
            if not imported.startswith(module + "."):
                g.add_edge(module, imported)
    return g


def test_no_import_cycles():
    g = _module_graph()
    cycles = [c for c in nx.simple_cycles(g) if len(c) > 1]
    shown = "\n".join(" -> ".join(c + [c[0]]) for c in sorted(cycles, key=len)[:15])
    assert not cycles, f"{len(cycles)} import cycles, the shortest:\n{shown}"
