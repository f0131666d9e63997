"""Scenario files: the schema, a line-tracking safe loader, and errors that name file, line and key path."""
from .loader import (NO_INTERFERENCE, LoadedScenario, Problem, ScenarioError, Source, load_scenario, load_text,
                     parse_yaml, read_source, validate_data, with_values)
from .schema import Scenario, reference_markdown

__all__ = ["NO_INTERFERENCE", "LoadedScenario", "Problem", "Scenario", "ScenarioError", "Source", "load_scenario", "load_text",
           "parse_yaml", "read_source", "reference_markdown", "validate_data", "with_values"]
