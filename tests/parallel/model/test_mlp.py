"""The lecture's MLP: its hand-written backward and AdamW training against torch autograd and torch.optim."""
import numpy as np
import torch
import torch.nn.functional as F

from simcomm.parallel.examples import example_data
from simcomm.parallel.model import mlp
from simcomm.parallel.optim import AdamW


def test_mlp_training_matches_torch():
    data, params = example_data(8, 6), mlp.init_params(6, 3, seed=2)
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
