"""A decoder-only transformer described with Megatron-LM's argument names, and named presets.

Derived sizes follow Megatron's conventions: ffn_hidden_size defaults to 4 * hidden_size, num_query_groups to
num_attention_heads (multi-head attention; fewer groups is grouped-query attention), kv_channels (the head
dimension) to hidden_size / num_attention_heads.

A mixture of experts: `num_moe_experts` and the other MoE fields (moe/config.py's MoEFields, Megatron-Core's names;
moe_ffn_hidden_size defaults to ffn_hidden_size; `moe_layer_freq` says which layers are MoE). Multi-latent
attention (DeepSeek-V2/V3): `multi_latent_attention` with MLATransformerConfig's `q_lora_rank` (None: queries not
compressed), `kv_lora_rank`, `qk_head_dim`, `qk_pos_emb_head_dim` and `v_head_dim` (Megatron-LM's CLI defaults).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...vocab import did_you_mean
from .errors import ModelConfigError
from .moe.config import MoEFields, check_moe, moe_layer_pattern, normalise_moe


def hash_once(cls):
    """A frozen dataclass whose hash (the dataclass's own: its compared fields) is computed once per object: a
    layout search keys its caches by layer shapes and models, hashing them hundreds of thousands of times. Not
    pickled (another process hashes strings otherwise)."""
    hashed = [f.name for f in dataclasses.fields(cls) if (f.compare if f.hash is None else f.hash)]

    def __hash__(self) -> int:
        got = self.__dict__.get("_hash")
        if got is None:
            got = hash(tuple(getattr(self, name) for name in hashed))
            object.__setattr__(self, "_hash", got)
        return got

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    cls.__hash__, cls.__getstate__ = __hash__, __getstate__
    return cls


@hash_once
@dataclass(frozen=True)
class TransformerConfig(MoEFields):
    """Sizes of a GPT-style decoder (Megatron-LM names), dense or a mixture of experts."""

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
    # multi-latent attention (Megatron-Core's MLATransformerConfig; defaults: Megatron-LM's arguments)
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 32
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
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
        self._check_mla()
        if self.num_moe_experts is not None:
            if self.moe_ffn_hidden_size is None:
                object.__setattr__(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
            normalise_moe(self)
            check_moe(self)
            if self.add_bias_linear:  # Megatron-Core's grouped experts have no biases (GroupedMLP refuses them)
                raise ModelConfigError("a mixture of experts needs add_bias_linear=False (Megatron-Core's grouped "
                                       "experts have no biases)", "add_bias_linear")
            moe_layer_pattern(self.moe_layer_freq, self.num_layers)  # a list must name every layer

    def _check_mla(self) -> None:
        for f in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ModelConfigError(f"{f} must be a whole number >= 1, got {v!r}", f)
        q = self.q_lora_rank
        if q is not None and (isinstance(q, bool) or not isinstance(q, int) or q < 1):
            raise ModelConfigError(f"q_lora_rank must be a whole number >= 1 or none, got {q!r}", "q_lora_rank")
        if not isinstance(self.multi_latent_attention, bool):
            raise ModelConfigError(f"multi_latent_attention must be true or false, got "
                                   f"{self.multi_latent_attention!r}", "multi_latent_attention")

    # ---- mixture of experts ------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_moe_experts is not None

    @property
    def moe_layers(self) -> tuple[bool, ...]:
        """Which layers are MoE (all False for a dense model)."""
        if not self.is_moe:
            return (False,) * self.num_layers
        return moe_layer_pattern(self.moe_layer_freq, self.num_layers)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def head_dim(self) -> int:
        return self.kv_channels

    @property
    def query_projection_size(self) -> int:
        """q = kv_channels * num_attention_heads (Megatron's query_projection_size); with MLA the queries'
        width a (qk_head_dim + qk_pos_emb_head_dim)."""
        if self.multi_latent_attention:
            return self.num_attention_heads * (self.qk_head_dim + self.qk_pos_emb_head_dim)
        return self.kv_channels * self.num_attention_heads

    @property
    def kv_projection_size(self) -> int:
        return self.kv_channels * self.num_query_groups

    @property
    def attention_value_size(self) -> int:
        """Width of attention's output before the output projection: a x head dim (a x v_head_dim with MLA)."""
        if self.multi_latent_attention:
            return self.num_attention_heads * self.v_head_dim
        return self.query_projection_size

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
        if base["moe_ffn_hidden_size"] == self.ffn_hidden_size and "moe_ffn_hidden_size" not in overrides:
            base["moe_ffn_hidden_size"] = None
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
# Mixtures of experts (shared/reference/moe.md section 5): Mixtral from Mistral's model cards and HF configs (Megatron's
# Mixtral recipes train at 4,096 tokens), Qwen3 from its HF config (QK-norm left out: norms are not modelled per
# head), DeepSeek-V3 from its report (arXiv 2412.19437) and config_671B.json; multi-token prediction left out.
_MOE = dict(swiglu=True, untie_embeddings_and_output_weights=True, normalization="RMSNorm",
            position_embedding_type="rope", add_bias_linear=False, attention_dropout=0.0, hidden_dropout=0.0,
            seq_length=4096)
PRESETS.update({
    "mixtral-8x7b": TransformerConfig(32, 4096, 32, padded_vocab_size=32000, ffn_hidden_size=14336,
                                      num_query_groups=8, num_moe_experts=8, moe_router_topk=2,
                                      moe_aux_loss_coeff=1e-2, name="mixtral-8x7b", **_MOE),
    "mixtral-8x22b": TransformerConfig(56, 6144, 48, padded_vocab_size=32768, ffn_hidden_size=16384,
                                       num_query_groups=8, num_moe_experts=8, moe_router_topk=2,
                                       moe_aux_loss_coeff=1e-2, name="mixtral-8x22b", **_MOE),
    "qwen3-30b-a3b": TransformerConfig(48, 2048, 32, padded_vocab_size=151936, ffn_hidden_size=6144,
                                       num_query_groups=4, kv_channels=128, num_moe_experts=128,
                                       moe_ffn_hidden_size=768, moe_router_topk=8, moe_aux_loss_coeff=1e-3,
                                       name="qwen3-30b-a3b", **_MOE),
    "deepseek-v3": TransformerConfig(61, 7168, 128, padded_vocab_size=129280, ffn_hidden_size=18432,
                                     multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                                     qk_pos_emb_head_dim=64, v_head_dim=128, num_moe_experts=256,
                                     moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
                                     moe_router_topk=8, moe_router_score_function="sigmoid",
                                     moe_router_topk_scaling_factor=2.5, moe_router_num_groups=8,
                                     moe_router_group_topk=4, moe_router_enable_expert_bias=True,
                                     moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-4,
                                     moe_layer_freq="([0]*3+[1]*58)", name="deepseek-v3", **_MOE),
})


def model_preset(name: str, **overrides) -> TransformerConfig:
    """A named model, with optional overrides (Megatron names)."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise ModelConfigError(f"unknown model preset {name!r}; expected one of {', '.join(PRESETS)}"
                               f"{did_you_mean(name, PRESETS)}", "model")
    return PRESETS[key].with_overrides(**overrides) if overrides else PRESETS[key]
