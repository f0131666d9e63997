"""scenarios/lecture.py, the lecture's programs: its MLP's hand-written backward and AdamW training equal torch
autograd and torch.optim, and its data, tensor and pipeline parallel examples, completed with backward and AdamW,
train the MLP exactly as one process does (float64, to 1e-13 in every weight after 5 steps)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import simcomm
from simcomm.parallel.optim import AdamW

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scenarios"))
import lecture as examples  # noqa: E402  (a scenario's program, beside the scenario files)

mlp = examples

ARGS = (16, 32, 8, 5, 1e-2)  # batch_size, num_dim, num_layers, num_steps, lr


def serial():
    batch, dim, layers, steps, lr = ARGS
    return mlp.train_serial(examples.example_data(batch, dim), mlp.init_params(dim, layers), AdamW(lr=lr), steps)


def close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-13)


@pytest.mark.parametrize("world", [2, 4])
def test_data_parallelism(world):
    ref, ref_losses = serial()
    res = simcomm.spawn(examples.data_parallelism, args=ARGS + (0, True), nprocs=world).results
    close(res[0]["params"], ref)
    for r in res[1:]:  # every replica bitwise the same
        for a, b in zip(r["params"], res[0]["params"]):
            np.testing.assert_array_equal(a, b)
    # each rank's loss is on its own rows; their mean is the whole batch's loss
    np.testing.assert_allclose(np.mean([r["loss"] for r in res], axis=0), ref_losses, rtol=1e-12)


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallelism(world):
    ref, ref_losses = serial()
    res = simcomm.spawn(examples.tensor_parallelism, args=ARGS + (0, True), nprocs=world).results
    close([np.concatenate([r["params"][i] for r in res], axis=1) for i in range(ARGS[2])], ref)
    for r in res:
        np.testing.assert_allclose(r["loss"], ref_losses, rtol=1e-12)


@pytest.mark.parametrize("world,micro", [(2, 4), (4, 4), (4, 1)])
def test_pipeline_parallelism(world, micro):
    batch, dim, layers, steps, lr = ARGS
    ref, ref_losses = serial()
    res = simcomm.spawn(examples.pipeline_parallelism, args=(batch, dim, layers, micro, steps, lr, 0, True),
                        nprocs=world)
    close([p for r in res.results for p in r["params"]], ref)
    np.testing.assert_allclose(res.results[-1]["loss"], ref_losses, rtol=1e-12)
    assert all(loss is None for r in res.results[:-1] for loss in r["loss"])
    # GPipe: every stage boundary carries every microbatch forward and its gradient back, every step
    sends = [a for a in res.timeline if a.kind == "p2p"]
    assert len(sends) == 2 * (world - 1) * micro * steps
    assert {a.nbytes for a in sends} == {batch // micro * dim * 8}


def test_mlp_training_matches_torch():
    data, params = examples.example_data(8, 6), mlp.init_params(6, 3, seed=2)
    trained, losses = mlp.train_serial(data, params, AdamW(lr=1e-2), 4)
    tparams = [torch.tensor(p, requires_grad=True) for p in params]
    opt = torch.optim.AdamW(tparams, lr=1e-2)
    tlosses = []
    for step in range(4):
        x = torch.tensor(data)
        for p in tparams:
            x = F.gelu(x @ p)
        loss = x.square().mean()
        opt.zero_grad()
        loss.backward()
        if step == 0:  # the first step's gradients, before any update
            out, saved = mlp.forward(data, params)
            _, dout = mlp.mean_square(out)
            grads = [np.zeros_like(p) for p in params]
            mlp.backward(saved, params, dout, grads)
            for g, p in zip(grads, tparams):
                np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-10, atol=1e-15)
        opt.step()
        tlosses.append(loss.item())
    np.testing.assert_allclose(losses, tlosses, rtol=1e-12)
    for a, p in zip(trained, tparams):
        np.testing.assert_allclose(a, p.detach().numpy(), rtol=1e-9, atol=1e-12)
