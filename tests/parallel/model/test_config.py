"""TransformerConfig: Megatron's names and defaults, presets, overrides, and clear errors."""
import pytest

from simcomm.parallel.model import ModelConfigError, TransformerConfig, model_preset


def test_megatron_defaults():
    c = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=16, padded_vocab_size=128)
    assert (c.ffn_hidden_size, c.num_query_groups, c.kv_channels) == (256, 4, 16)
    assert c.query_projection_size == 64 and c.kv_projection_size == 64


def test_presets_and_overrides():
    llama = model_preset("llama3-70b")
    assert (llama.num_layers, llama.hidden_size, llama.num_query_groups, llama.ffn_hidden_size) == (80, 8192, 8, 28672)
    assert llama.kv_channels == 128 and llama.swiglu and llama.untie_embeddings_and_output_weights
    short = model_preset("gpt3-175b", seq_length=4096, num_layers=48)
    assert (short.seq_length, short.num_layers, short.ffn_hidden_size) == (4096, 48, 4 * 12288)
    wider = model_preset("gpt3-1.3b", hidden_size=4096)
    assert wider.ffn_hidden_size == 4 * 4096 and wider.kv_channels == 4096 // 16  # derived sizes follow


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_layers=0), "num_layers must be"),
    (dict(hidden_size=100, num_attention_heads=3), "not divisible by num_attention_heads"),
    (dict(num_query_groups=3), "not divisible by num_query_groups"),
    (dict(normalization="BatchNorm"), "LayerNorm or RMSNorm"),
])
def test_bad_sizes_are_explained(kwargs, message):
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=16, padded_vocab_size=128)
    with pytest.raises(ModelConfigError, match=message):
        TransformerConfig(**{**base, **kwargs})


def test_unknown_names():
    with pytest.raises(ModelConfigError, match="did you mean 'llama3-70b'"):
        model_preset("llama3-7b")
    with pytest.raises(ModelConfigError, match="unknown model field"):
        model_preset("llama3-8b", hidden=5)
