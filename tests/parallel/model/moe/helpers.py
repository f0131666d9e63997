"""MoE settings for the layer tests: a one-layer (or moe_layer_freq's length) TransformerConfig that carries them, as
an MoE layer reads them from the model config (Megatron-Core's TransformerConfig)."""
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.model.moe import parse_moe_layer_freq


def moe_config(**kw) -> TransformerConfig:
    freq = parse_moe_layer_freq(kw.get("moe_layer_freq", 1))
    layers = 1 if isinstance(freq, int) else len(freq)
    return TransformerConfig(num_layers=layers, hidden_size=8, num_attention_heads=1, seq_length=8,
                             padded_vocab_size=8, add_bias_linear=False, **kw)
