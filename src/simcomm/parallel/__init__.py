"""Training parallelism: one configuration (TrainingConfig, Megatron-LM's names) and the layout it implies
(build_layout), executed two ways: numeric training as rank programs (numeric_training.py) and the step cost model
on the Session (step_cost.py), with its layout search."""
from .config import ConfigError, TrainingConfig
from .dims import Axis, LayoutError, ParallelDims
from .layout import Layout, build_layout
from .model import PRESETS, ModelConfigError, TransformerConfig, model_preset
from .pipeline_parallel.actions import Action, Overlap
from .pipeline_parallel.schedules import gpipe, interleaved_1f1b, one_f_one_b, schedule
from .pipeline_parallel.timeline import bubble_fraction, makespan, peak_in_flight, timeline
from .layer_timing import TemplateCache
from .step_cost import StepModel
from .step_result import StepResult

__all__ = ["PRESETS", "Action", "Axis", "ConfigError", "Layout", "LayoutError", "ModelConfigError", "Overlap",
           "ParallelDims", "StepModel",
           "StepResult", "TemplateCache", "TrainingConfig", "TransformerConfig", "bubble_fraction", "build_layout",
           "gpipe", "interleaved_1f1b", "makespan", "model_preset", "one_f_one_b", "peak_in_flight", "schedule",
           "timeline"]
