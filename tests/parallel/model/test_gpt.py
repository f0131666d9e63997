"""The numeric GPT's hand-written backward against finite differences and against torch autograd; its optimizers
against torch.optim; the same code on size-only tensors."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from simcomm.parallel import data
from simcomm.parallel.model.config import ModelConfigError, TransformerConfig
from simcomm.parallel.model.gpt import WORD, init_params, param_specs
from simcomm.parallel.optim import SGD, AdamW, make_optimizer
from simcomm.parallel.serial import forward_backward, train_serial

TINY = dict(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32)
CONFIGS = {
    "mha": TransformerConfig(**TINY),
    "gqa": TransformerConfig(**TINY, num_query_groups=2),
    "mqa-untied-nobias": TransformerConfig(**TINY, num_query_groups=1, untie_embeddings_and_output_weights=True,
                                           add_bias_linear=False, ffn_hidden_size=24),
}


def _perturbed(params, direction, eps):
    return {n: p + eps * direction[n] for n, p in params.items()}


def _derivative(cfg, params, direction, ids, targets, eps=1e-4):
    """Central differences with one Richardson step: error O(eps^4)."""
    def central(e):
        plus, _ = forward_backward(cfg, _perturbed(params, direction, e), ids, targets)
        minus, _ = forward_backward(cfg, _perturbed(params, direction, -e), ids, targets)
        return (plus - minus) / (2 * e)
    return (4 * central(eps / 2) - central(eps)) / 3


@pytest.mark.parametrize("name", list(CONFIGS))
def test_backward_matches_finite_differences(name):
    """The directional derivative along a random direction, by central differences, equals <grad, direction>."""
    cfg = CONFIGS[name]
    params = init_params(cfg, seed=1, std=0.3)  # large weights: attention and GELU far from linear
    ids, targets = data.batch(cfg, 3, 0)
    _, grads = forward_backward(cfg, params, ids, targets)
    rng = np.random.default_rng(2)
    for _ in range(2):
        direction = {n: rng.standard_normal(p.shape) for n, p in params.items()}
        numeric = _derivative(cfg, params, direction, ids, targets)
        analytic = sum(float((grads[n] * direction[n]).sum()) for n in params)
        assert analytic == pytest.approx(numeric, rel=1e-8)
    # and per parameter: each gradient on its own (a wrong one cannot hide behind the others)
    for n, p in params.items():
        direction = {k: np.zeros_like(v) for k, v in params.items()}
        direction[n] = rng.standard_normal(p.shape)
        numeric = _derivative(cfg, params, direction, ids, targets)
        assert float((grads[n] * direction[n]).sum()) == pytest.approx(numeric, rel=1e-7, abs=1e-10), n


def torch_loss(cfg: TransformerConfig, params: dict, ids, targets):
    """The same model written with torch ops (autograd does the backward)."""
    h, a, g, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_query_groups, cfg.kv_channels
    r = a // g
    P = lambda n: params.get(n)  # noqa: E731
    ids_t, tg = torch.as_tensor(ids), torch.as_tensor(targets)
    s, b = ids_t.shape
    x = P(WORD)[ids_t] + P("embedding.position_embeddings.weight")[:s, None, :]
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    for i in range(cfg.num_layers):
        p = f"decoder.layers.{i}."
        ln = F.layer_norm(x, (h,), P(p + "input_layernorm.weight"), P(p + "input_layernorm.bias"), 1e-5)
        qkv = ln @ P(p + "self_attention.linear_qkv.weight")
        if P(p + "self_attention.linear_qkv.bias") is not None:
            qkv = qkv + P(p + "self_attention.linear_qkv.bias")
        qkv = qkv.reshape(s, b, g, r + 2, d)
        q = qkv[:, :, :, :r].reshape(s, b, a, d).permute(1, 2, 0, 3)  # b, heads, s, d
        k = qkv[:, :, :, r].permute(1, 2, 0, 3).repeat_interleave(r, dim=1)
        v = qkv[:, :, :, r + 1].permute(1, 2, 0, 3).repeat_interleave(r, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).permute(2, 0, 1, 3).reshape(s, b, a * d)
        y = o @ P(p + "self_attention.linear_proj.weight")
        if P(p + "self_attention.linear_proj.bias") is not None:
            y = y + P(p + "self_attention.linear_proj.bias")
        x = x + y
        ln = F.layer_norm(x, (h,), P(p + "pre_mlp_layernorm.weight"), P(p + "pre_mlp_layernorm.bias"), 1e-5)
        h1 = ln @ P(p + "mlp.linear_fc1.weight")
        if P(p + "mlp.linear_fc1.bias") is not None:
            h1 = h1 + P(p + "mlp.linear_fc1.bias")
        y = F.gelu(h1, approximate="tanh") @ P(p + "mlp.linear_fc2.weight")
        if P(p + "mlp.linear_fc2.bias") is not None:
            y = y + P(p + "mlp.linear_fc2.bias")
        x = x + y
    x = F.layer_norm(x, (h,), P("decoder.final_layernorm.weight"), P("decoder.final_layernorm.bias"), 1e-5)
    out_w = P("output_layer.weight") if cfg.untie_embeddings_and_output_weights else P(WORD)
    logits = x @ out_w.T
    return F.cross_entropy(logits.reshape(-1, cfg.padded_vocab_size), tg.reshape(-1))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_backward_matches_torch_autograd(name):
    cfg = CONFIGS[name]
    params = init_params(cfg, seed=3, std=0.2)
    ids, targets = data.batch(cfg, 4, 1)
    loss, grads = forward_backward(cfg, params, ids, targets)
    tparams = {n: torch.tensor(p, requires_grad=True) for n, p in params.items()}
    tloss = torch_loss(cfg, tparams, ids, targets)
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-12)
    for n in params:
        np.testing.assert_allclose(grads[n], tparams[n].grad.numpy(), rtol=1e-9, atol=1e-13, err_msg=n)


@pytest.mark.parametrize("opt", ["adamw", "sgd"])
def test_training_matches_torch_optim(opt):
    """Three steps of serial training with our optimizers equal torch autograd plus torch.optim."""
    cfg = CONFIGS["gqa"]
    params = init_params(cfg, seed=4)
    specs = param_specs(cfg)
    ours = AdamW(lr=1e-2, weight_decay=0.1) if opt == "adamw" else SGD(lr=0.5, momentum=0.9, weight_decay=0.1)
    trained, losses = train_serial(cfg, ours, 3, 4, params=params)
    tparams = {n: torch.tensor(p, requires_grad=True) for n, p in params.items()}
    decay = [tparams[n] for n in params if specs[n].decay]
    plain = [tparams[n] for n in params if not specs[n].decay]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}]
    topt = torch.optim.AdamW(groups, lr=1e-2) if opt == "adamw" else torch.optim.SGD(groups, lr=0.5, momentum=0.9)
    tlosses = []
    for step in range(3):
        ids, targets = data.batch(cfg, 4, step)
        topt.zero_grad()
        loss = torch_loss(cfg, tparams, ids, targets)
        loss.backward()
        topt.step()
        tlosses.append(loss.item())
    np.testing.assert_allclose(losses, tlosses, rtol=1e-12)
    for n in params:
        np.testing.assert_allclose(trained[n], tparams[n].detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
    assert not np.allclose(trained[WORD], params[WORD])


def test_training_lowers_the_loss():
    _, losses = train_serial(CONFIGS["mha"], AdamW(lr=2e-2), 12, 8)
    assert losses[-1] < losses[0] - 0.3


def test_unsupported_features_are_named():
    with pytest.raises(ModelConfigError, match="swiglu"):
        param_specs(TransformerConfig(**TINY, swiglu=True))
    with pytest.raises(ModelConfigError, match="RMSNorm"):
        param_specs(TransformerConfig(**TINY, normalization="RMSNorm"))


def test_make_optimizer():
    assert make_optimizer("AdamW", lr=0.1, betas=[0.8, 0.9]) == AdamW(lr=0.1, betas=(0.8, 0.9))
    with pytest.raises(Exception, match="expected one of sgd, adamw"):
        make_optimizer("lamb")
    with pytest.raises(Exception, match="momentom"):
        make_optimizer("sgd", momentom=0.9)
