"""The lecture's data, tensor and pipeline parallel examples, completed: forward, backward and optimizer step.

The lecture (the seeds' "Parallelism 2") trains an MLP of square GELU layers on a mean-square loss and leaves the
backward passes of its tensor- and pipeline-parallel versions as homework. Here are all three, with AdamW as in
its data-parallel version, written against torch.distributed's API. They run on simcomm as they are
(`simcomm.spawn(data_parallelism, nprocs=4)`, or a scenario: `simcomm run scenarios/train-dp.yaml`) and on real
torch.distributed (`dist=torch.distributed`; the arrays are shared with CPU torch tensors). Each returns, per rank,
the loss of every step (as that rank sees it; None where it has none), the norm of the weights it holds, and with
return_params=True the weights themselves.

- data_parallelism: each rank takes batch / world rows; after backward, all_reduce(AVG) of every gradient.
- tensor_parallelism: each rank holds num_dim / world columns of every layer; forward all-gathers the activation
  columns; backward takes its columns of the output gradient and all-reduces the input gradient (each rank's
  columns contribute a partial sum).
- pipeline_parallelism: each rank holds num_layers / world consecutive layers; microbatches flow forward with
  send/recv and their gradients flow back, in GPipe's order (schedules.gpipe: every forward, then every backward).

"""
from __future__ import annotations

import numpy as np

from .. import distributed as simdist
from ..distributed import clock
from .model import mlp
from .model.layers import Flops
from .optim import AdamW
from .pipeline_parallel.schedules import FORWARD, gpipe


# ---- helpers: the same code on simcomm and on torch.distributed ----------------------------------------------
def _tensor(x, dist):
    """What dist's calls take: the numpy array itself on simcomm, a CPU torch tensor sharing it otherwise."""
    if dist is simdist:
        return x
    import torch
    return torch.from_numpy(x)


def _charge(fl: Flops, dist) -> None:
    """The FLOPs counted so far as simulated compute (on simcomm; real runs take real time)."""
    flops = fl.take()
    if dist is simdist and flops:
        clock.compute(flops=flops, wait=False)


def _result(losses, params, return_params: bool) -> dict:
    """Per rank: the loss of every step, the norm of the weights it holds, and (if asked) the weights."""
    out = {"loss": losses, "weight_norm": float(np.sqrt(sum((p * p).sum() for p in params)))}
    if return_params:
        out["params"] = params
    return out


def example_data(batch_size: int, num_dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, 1]).standard_normal((batch_size, num_dim))


# ---- data parallelism -------------------------------------------------------------------------------------
def data_parallelism(rank: int, batch_size: int = 16, num_dim: int = 32, num_layers: int = 4, num_steps: int = 5,
                     lr: float = 1e-3, seed: int = 0, return_params: bool = False,
                     dist=None) -> dict:
    dist = dist or simdist
    world_size = dist.get_world_size()
    data = example_data(batch_size, num_dim, seed)
    local = batch_size // world_size
    data = data[rank * local:(rank + 1) * local]  # this rank's rows
    params = mlp.init_params(num_dim, num_layers, seed)  # every rank: the whole model
    optimizer = AdamW(lr=lr)
    states = [optimizer.state(p) for p in params]
    fl, losses = Flops(), []
    for _ in range(num_steps):
        out, saved = mlp.forward(data, params, fl)
        loss, dout = mlp.mean_square(out)
        grads = [np.zeros_like(p) for p in params]
        mlp.backward(saved, params, dout, grads, fl=fl)
        _charge(fl, dist)
        for g in grads:  # the only difference from single-process training
            dist.all_reduce(_tensor(g, dist), op=dist.ReduceOp.AVG)
        for p, g, s in zip(params, grads, states):
            optimizer.step(p, g, s)
        losses.append(loss)
    return _result(losses, params, return_params)


# ---- tensor parallelism -----------------------------------------------------------------------------------
def tensor_parallelism(rank: int, batch_size: int = 16, num_dim: int = 32, num_layers: int = 4,
                       num_steps: int = 5, lr: float = 1e-3, seed: int = 0, return_params: bool = False,
                     dist=None) -> dict:
    dist = dist or simdist
    world_size = dist.get_world_size()
    data = example_data(batch_size, num_dim, seed)  # every rank: all the data
    cols = num_dim // world_size
    mine = slice(rank * cols, (rank + 1) * cols)
    params = [np.ascontiguousarray(w[:, mine]) for w in mlp.init_params(num_dim, num_layers, seed)]
    optimizer = AdamW(lr=lr)
    states = [optimizer.state(p) for p in params]
    fl, losses = Flops(), []
    for _ in range(num_steps):
        x, inputs, saved = data, [], []
        for w in params:
            inputs.append(x)
            a, s = mlp.layer_forward(x, w, fl)  # batch x cols: this rank's columns of the layer's output
            saved.append(s)
            _charge(fl, dist)
            parts = [np.empty_like(a) for _ in range(world_size)]
            dist.all_gather([_tensor(p, dist) for p in parts], _tensor(np.ascontiguousarray(a), dist))
            x = np.concatenate(parts, axis=1)  # batch x num_dim
        loss, dx = mlp.mean_square(x)  # the same on every rank
        grads = [np.zeros_like(p) for p in params]
        for i in reversed(range(num_layers)):
            # all_gather's backward: this rank's columns of the gradient; the layer's input gradient is a sum
            # of every rank's partial product, so all-reduce it (not needed for the data)
            partial = mlp.layer_backward(saved[i], params[i], np.ascontiguousarray(dx[:, mine]), grads[i],
                                         need_dx=i > 0, fl=fl)
            _charge(fl, dist)
            if i > 0:
                dist.all_reduce(_tensor(partial, dist))
                dx = partial
        for p, g, s in zip(params, grads, states):
            optimizer.step(p, g, s)
        losses.append(loss)
    return _result(losses, params, return_params)


# ---- pipeline parallelism ---------------------------------------------------------------------------------
def pipeline_parallelism(rank: int, batch_size: int = 16, num_dim: int = 32, num_layers: int = 4,
                         num_micro_batches: int = 4, num_steps: int = 5, lr: float = 1e-3, seed: int = 0,
                         return_params: bool = False, dist=None) -> dict:
    dist = dist or simdist
    world_size = dist.get_world_size()
    data = example_data(batch_size, num_dim, seed)
    per_rank = num_layers // world_size
    params = mlp.init_params(num_dim, num_layers, seed)[rank * per_rank:(rank + 1) * per_rank]
    micro = batch_size // num_micro_batches
    optimizer = AdamW(lr=lr)
    states = [optimizer.state(p) for p in params]
    fl, losses = Flops(), []
    first, last = rank == 0, rank == world_size - 1
    for _ in range(num_steps):
        grads = [np.zeros_like(p) for p in params]
        saved, loss = {}, 0.0
        for action in gpipe(world_size, num_micro_batches)[rank]:
            m = action.microbatch
            if action.phase == FORWARD:
                x = data[m * micro:(m + 1) * micro] if first else np.empty((micro, num_dim))
                if not first:
                    dist.recv(_tensor(x, dist), src=rank - 1)  # activations from the previous stage
                x, saved[m] = mlp.forward(x, params, fl)
                _charge(fl, dist)
                if not last:
                    dist.send(_tensor(x, dist), dst=rank + 1)
                else:
                    part, _ = mlp.mean_square(x, batch_size * num_dim)  # this microbatch's share of the loss
                    loss += part
                    saved[m] = (saved[m], x)
            else:
                if last:
                    s, out = saved.pop(m)
                    dout = 2.0 * out / (batch_size * num_dim)
                else:
                    s, dout = saved.pop(m), np.empty((micro, num_dim))
                    dist.recv(_tensor(dout, dist), src=rank + 1)  # the output gradient from the next stage
                dx = mlp.backward(s, params, dout, grads, need_dx=not first, fl=fl)
                _charge(fl, dist)
                if not first:
                    dist.send(_tensor(dx, dist), dst=rank - 1)
        for p, g, st in zip(params, grads, states):
            optimizer.step(p, g, st)
        losses.append(loss if last else None)
    return _result(losses, params, return_params)


EXAMPLES = {"data_parallelism": data_parallelism, "tensor_parallelism": tensor_parallelism,
            "pipeline_parallelism": pipeline_parallelism}


def run_example(rank: int, dist, name: str, *args) -> dict:
    """EXAMPLES[name](rank, *args) with `dist` (for backends.torch_runner.compare, which passes dist)."""
    return EXAMPLES[name](rank, *args, return_params=True, dist=dist)
