"""A decoder-only transformer described with Megatron-LM's argument names, and named presets.

Derived sizes follow Megatron's conventions: ffn_hidden_size defaults to 4 * hidden_size, num_query_groups to
num_attention_heads (multi-head attention; fewer groups is grouped-query attention), kv_channels (the head
dimension) to hidden_size / num_attention_heads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...errors import SettingError
from ...vocab import did_you_mean


class ModelConfigError(SettingError):
    """A model description whose sizes do not fit together; `field` is the one to change (None: not one)."""


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of a GPT-style decoder (Megatron-LM names)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    padded_vocab_size: int
    ffn_hidden_size: int = 0  # 0: 4 * hidden_size
    num_query_groups: int = 0  # 0: num_attention_heads
    kv_channels: int = 0  # 0: hidden_size // num_attention_heads
    swiglu: bool = False
    untie_embeddings_and_output_weights: bool = False
    normalization: str = "LayerNorm"  # or "RMSNorm"
    position_embedding_type: str = "learned_absolute"  # or "rope"
    add_bias_linear: bool = True
    attention_dropout: float = 0.1  # Megatron-LM's defaults; dropout masks cost activation memory
    hidden_dropout: float = 0.1
    name: str = ""

    def __post_init__(self):
        for f in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "padded_vocab_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ModelConfigError(f"{f} must be a whole number >= 1, got {v!r}", f)
        for f in ("ffn_hidden_size", "num_query_groups", "kv_channels"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ModelConfigError(f"{f} must be a whole number >= 0 (0 for the default), got {v!r}", f)
        h, a = self.hidden_size, self.num_attention_heads
        if not self.kv_channels and h % a:
            raise ModelConfigError(f"hidden_size {h} is not divisible by num_attention_heads {a}; give kv_channels",
                                   "num_attention_heads")
        object.__setattr__(self, "ffn_hidden_size", self.ffn_hidden_size or 4 * h)
        object.__setattr__(self, "num_query_groups", self.num_query_groups or a)
        object.__setattr__(self, "kv_channels", self.kv_channels or h // a)
        if a % self.num_query_groups:
            raise ModelConfigError(f"num_attention_heads {a} is not divisible by num_query_groups "
                                   f"{self.num_query_groups}", "num_query_groups")
        for f in ("attention_dropout", "hidden_dropout"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ModelConfigError(f"{f} must be a probability in [0, 1), got {v!r}", f)
        if self.normalization not in ("LayerNorm", "RMSNorm"):
            raise ModelConfigError(f"normalization must be LayerNorm or RMSNorm, got {self.normalization!r}",
                                   "normalization")
        if self.position_embedding_type not in ("learned_absolute", "rope"):
            raise ModelConfigError("position_embedding_type must be learned_absolute or rope, got "
                                   f"{self.position_embedding_type!r}", "position_embedding_type")

    @property
    def head_dim(self) -> int:
        return self.kv_channels

    @property
    def query_projection_size(self) -> int:
        """q = kv_channels * num_attention_heads (Megatron's query_projection_size)."""
        return self.kv_channels * self.num_attention_heads

    @property
    def kv_projection_size(self) -> int:
        return self.kv_channels * self.num_query_groups

    def with_overrides(self, **overrides) -> "TransformerConfig":
        """A copy with some fields replaced (derived defaults are recomputed unless given)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ModelConfigError(f"unknown model field(s) {', '.join(unknown)}; expected some of "
                                   f"{', '.join(sorted(known))}")
        base = dataclasses.asdict(self)
        for derived, default in (("ffn_hidden_size", 4 * self.hidden_size),
                                 ("num_query_groups", self.num_attention_heads),
                                 ("kv_channels", self.hidden_size // self.num_attention_heads)):
            if base[derived] == default and derived not in overrides:
                base[derived] = 0  # recompute from the new sizes
        return TransformerConfig(**{**base, **overrides})


_LLAMA = dict(swiglu=True, untie_embeddings_and_output_weights=True, normalization="RMSNorm",
              position_embedding_type="rope", add_bias_linear=False, padded_vocab_size=128256, seq_length=8192,
              num_query_groups=8, attention_dropout=0.0, hidden_dropout=0.0)
# Sources: GPT-3: Brown et al. 2020 Table 2.1 (as trained in Narayanan et al. 2021: V = 51200, s = 2048);
# Llama 3: Meta's model cards and "The Llama 3 Herd of Models" Table 3.
PRESETS: dict[str, TransformerConfig] = {
    "gpt3-175b": TransformerConfig(96, 12288, 96, 2048, 51200, name="gpt3-175b"),
    "gpt3-13b": TransformerConfig(40, 5120, 40, 2048, 51200, name="gpt3-13b"),
    "gpt3-1.3b": TransformerConfig(24, 2048, 16, 2048, 51200, name="gpt3-1.3b"),
    "gpt2-small": TransformerConfig(12, 768, 12, 1024, 50304, name="gpt2-small"),
    "llama3-8b": TransformerConfig(32, 4096, 32, ffn_hidden_size=14336, name="llama3-8b", **_LLAMA),
    "llama3-70b": TransformerConfig(80, 8192, 64, ffn_hidden_size=28672, name="llama3-70b", **_LLAMA),
    "llama3-405b": TransformerConfig(126, 16384, 128, ffn_hidden_size=53248, name="llama3-405b", **_LLAMA),
}


def model_preset(name: str, **overrides) -> TransformerConfig:
    """A named model, with optional overrides (Megatron names)."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise ModelConfigError(f"unknown model preset {name!r}; expected one of {', '.join(PRESETS)}"
                               f"{did_you_mean(name, PRESETS)}", "model")
    return PRESETS[key].with_overrides(**overrides) if overrides else PRESETS[key]
