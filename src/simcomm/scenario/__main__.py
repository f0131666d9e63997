"""`python -m simcomm.scenario` prints the scenario reference (docs/scenario-reference.md)."""
from .schema import reference_markdown

print(reference_markdown(), end="")
