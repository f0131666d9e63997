"""Training parallelism: the layout of a job (ParallelDims), pipeline schedules as plain functions, and (as they
land) models, numeric parallel training as rank programs, and the step cost model on the Session."""
from .dims import Axis, LayoutError, ParallelDims
from .pipeline_parallel.schedules import (Action, bubble_fraction, gpipe, interleaved_1f1b, makespan, one_f_one_b,
                                          peak_in_flight, schedule, timeline)

__all__ = ["Action", "Axis", "LayoutError", "ParallelDims", "bubble_fraction", "gpipe", "interleaved_1f1b",
           "makespan", "one_f_one_b", "peak_in_flight", "schedule", "timeline"]
