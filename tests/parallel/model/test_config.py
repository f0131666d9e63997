"""TransformerConfig: Megatron's names and defaults, presets, overrides, and clear errors."""
import pickle
from dataclasses import fields, replace

import pytest

from simcomm.parallel.model import ModelConfigError, TransformerConfig, model_preset
from simcomm.parallel.model.layer import LayerShape


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


def test_moe_presets():
    """Mixture-of-experts presets with Megatron-Core's names; active parameters from their published sizes."""
    mixtral = model_preset("mixtral-8x7b")
    assert mixtral.is_moe and (mixtral.num_moe_experts, mixtral.moe_router_topk) == (8, 2)
    assert mixtral.moe_ffn_hidden_size == mixtral.ffn_hidden_size == 14336 and mixtral.num_moe_layers == 32
    v3 = model_preset("deepseek-v3")
    assert v3.moe_layers == (False,) * 3 + (True,) * 58 and v3.multi_latent_attention
    assert v3.query_projection_size == 128 * (128 + 64) and v3.attention_value_size == 128 * 128
    assert model_preset("qwen3-30b-a3b").moe_ffn_hidden_size == 768
    assert not model_preset("llama3-8b").is_moe and model_preset("llama3-8b").num_moe_layers == 0
    # an override of ffn_hidden_size carries a defaulted expert width along
    assert model_preset("mixtral-8x7b", ffn_hidden_size=8192).moe_ffn_hidden_size == 8192


@pytest.mark.parametrize("kwargs,field,message", [
    (dict(moe_router_topk=9), "moe_router_topk", "more than num_moe_experts"),
    (dict(add_bias_linear=True), "add_bias_linear", "add_bias_linear=False"),
    (dict(moe_layer_freq=[1, 0]), "moe_layer_freq", "lists 2 layers but the model has num_layers 32"),
    (dict(kv_lora_rank=0), "kv_lora_rank", "kv_lora_rank must be a whole number"),
])
def test_bad_moe_fields_name_the_field(kwargs, field, message):
    with pytest.raises(ModelConfigError, match=message) as e:
        model_preset("mixtral-8x7b", **kwargs)
    assert e.value.field == field


def test_hash_once_is_the_dataclass_hash_and_stays_in_its_process():
    m = model_preset("llama3-70b")
    shape = LayerShape(m, 4, 2, True, 1)
    for obj in (m, shape):
        own = hash(tuple(getattr(obj, f.name) for f in fields(obj)))  # what @dataclass(frozen=True) hashes
        assert hash(obj) == own and hash(obj) == own  # the second from the cached value
        back = pickle.loads(pickle.dumps(obj))
        assert back == obj and "_hash" not in back.__dict__ and hash(back) == own
    wider = replace(shape, tp=8)
    assert hash(wider) == hash(tuple(getattr(wider, f.name) for f in fields(wider))) != hash(shape)
