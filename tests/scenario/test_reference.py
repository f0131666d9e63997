"""docs/scenario-reference.md is generated from the schema and must be current."""
from pathlib import Path

from simcomm.scenario.schema import SECTIONS, reference_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-reference.md"


def test_reference_is_up_to_date():
    assert DOC.read_text() == reference_markdown(), \
        "regenerate with: python -m simcomm.scenario > docs/scenario-reference.md"


def test_reference_covers_every_key():
    text = DOC.read_text()
    for title, model in SECTIONS:
        assert f"## {title or 'top level'}" in text
        for key in model.model_fields:
            assert f"| `{key}` |" in text, (title, key)
