"""Models: the transformer described with Megatron-LM's names (config.py), with presets."""
from .config import PRESETS, ModelConfigError, TransformerConfig, model_preset

__all__ = ["PRESETS", "ModelConfigError", "TransformerConfig", "model_preset"]
