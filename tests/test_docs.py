"""The docs' examples say what simcomm prints."""
import re
from pathlib import Path

from simcomm.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_getting_started_shows_the_error_validate_prints(tmp_path, capsys, monkeypatch):
    """Issue 25: the page showed `my-run.yaml:5` where the run prints `:4`."""
    text = (DOCS / "getting-started.md").read_text()
    yaml = re.search(r"```yaml\n(name: my-run\n.*?)```", text, re.S).group(1)
    shown = re.search(r"```\n(my-run\.yaml:\d+: cluster\.nodez: .*?)\.\.\.\n```", text).group(1)
    (tmp_path / "my-run.yaml").write_text(yaml.replace("  nodes: 2", "  nodez: 2"))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "my-run.yaml"]) != 0
    assert capsys.readouterr().err.splitlines()[0].startswith(shown)
