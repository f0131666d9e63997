"""Calibration: measure a real backend (gloo here) or read nccl-tests logs, fit the cluster description's figures,
write a profile file that --cluster and scenarios accept, and report errors before and after on held-back
points."""
from .fit import Free, Observation, Space, fit, predict
from .gloo import GlooCalibration, calibrate_gloo
from .logs import LogCalibration, calibrate_logs
from .measure import Measurement, measure_gloo

__all__ = ["Free", "GlooCalibration", "LogCalibration", "Measurement", "Observation", "Space", "calibrate_gloo",
           "calibrate_logs", "fit", "measure_gloo", "predict"]
