"""The architecture is enforced: the layers contract (pyproject.toml) holds and no import cycle exists anywhere.

An import that runs back up the layers, or two modules that import each other (even lazily, inside a function),
fails here.
"""
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).parent.parent


def test_layers_contract_holds():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout

