"""The model description's error (its own module: the model config and the MoE settings both raise it)."""
from __future__ import annotations

from ...errors import SettingError


class ModelConfigError(SettingError):
    """A model description whose sizes do not fit together; `field` is the one to change (None: not one)."""


__all__ = ["ModelConfigError"]
