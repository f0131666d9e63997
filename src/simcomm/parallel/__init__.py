"""Training parallelism: the layout of a job (ParallelDims), pipeline schedules as plain functions, models, numeric
parallel training as rank programs, and the step cost model on the Session (step.py) with its layout search."""
from .dims import Axis, LayoutError, ParallelDims
from .model import PRESETS, ModelConfigError, TransformerConfig, model_preset
from .pipeline_parallel.schedules import (Action, bubble_fraction, gpipe, interleaved_1f1b, makespan, one_f_one_b,
                                          peak_in_flight, schedule, timeline)
from .step import StepModel, TemplateCache
from .step_config import Layout, TrainingConfig, build_layout
from .step_result import StepResult

__all__ = ["PRESETS", "Action", "Axis", "Layout", "LayoutError", "ModelConfigError", "ParallelDims", "StepModel",
           "StepResult", "TemplateCache", "TrainingConfig", "TransformerConfig", "bubble_fraction", "build_layout",
           "gpipe", "interleaved_1f1b", "makespan", "model_preset", "one_f_one_b", "peak_in_flight", "schedule",
           "timeline"]
