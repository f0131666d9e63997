"""The lecture's data, tensor and pipeline parallel examples (the seeds' "Parallelism 2"), completed: forward,
backward and optimizer step. A user's program, not part of simcomm: the scenarios train-dp, train-tp and train-pp
run it from here (a scenario's program is found in the scenario's directory first), and
examples/training/lecture.py runs it from the command line.

The lecture trains an MLP of square GELU layers on a mean-square loss and leaves the backward passes of its tensor-
and pipeline-parallel versions as homework. Here are all three, with AdamW as in its data-parallel version, written
against torch.distributed's API. They run on simcomm as they are (`simcomm.spawn(data_parallelism, nprocs=4)`, or
`simcomm run scenarios/train-dp.yaml`) and on real torch.distributed (`dist=torch.distributed`; the arrays are
shared with CPU torch tensors). Each returns, per rank, the loss of every step (as that rank sees it; None where it
has none), the norm of the weights it holds, and with return_params=True the weights themselves.

- data_parallelism: each rank takes batch / world rows; after backward, all_reduce(AVG) of every gradient.
- tensor_parallelism: each rank holds num_dim / world columns of every layer; forward all-gathers the activation
  columns; backward takes its columns of the output gradient and all-reduces the input gradient (each rank's
  columns contribute a partial sum).
- pipeline_parallelism: each rank holds num_layers / world consecutive layers; microbatches flow forward with
  send/recv and their gradients flow back, in GPipe's order (schedules.gpipe: every forward, then every backward).

The MLP: `num_layers` square layers x -> gelu(x @ W), no biases, trained to shrink the mean square of its output;
numpy, exact-erf GELU (torch's default), hand-written backward. Each function takes the weights a rank holds (all
of them, a column slice for tensor parallelism, a run of layers for pipeline parallelism). Compute is charged at
the device's rate from the FLOPs the products count.
"""
import math

import numpy as np

import simcomm.distributed as simdist
from simcomm.distributed import clock
from simcomm.parallel.model.layers import Flops, linear, linear_backward
from simcomm.parallel.model.tensor import as_meta, is_meta
from simcomm.parallel.optim import AdamW
from simcomm.parallel.pipeline_parallel.schedules import FORWARD, gpipe


# ---- the MLP ----------------------------------------------------------------------------------------------
# GELU with the exact erf (torch's F.gelu default)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_exact(x):
    """0.5 x (1 + erf(x / sqrt 2)); returns (y, cache)."""
    if is_meta(x):
        return as_meta(x), None
    cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0))).astype(x.dtype)
    return x * cdf, (x, cdf)


def gelu_exact_backward(dy, cache):
    if cache is None:
        return as_meta(dy)
    x, cdf = cache
    return dy * (cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))


def init_params(num_dim: int, num_layers: int, seed: int = 0, dtype="float64") -> list[np.ndarray]:
    """num_layers weights of num_dim x num_dim, normal / sqrt(num_dim), the same for any layout."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((num_dim, num_dim)) / math.sqrt(num_dim)).astype(dtype)
            for _ in range(num_layers)]


def layer_forward(x, w, fl: Flops | None = None):
    """gelu(x @ w); returns (output, what backward needs)."""
    z = linear(x, w, fl=fl)
    a, cache = gelu_exact(z)
    return a, (x, cache)


def layer_backward(saved, w, da, dw, need_dx: bool = True, fl: Flops | None = None):
    """Adds the weight gradient to dw; returns the input gradient (or None)."""
    x, cache = saved
    return linear_backward(x, w, gelu_exact_backward(da, cache), dw, need_dx=need_dx, fl=fl)


def forward(x, params, fl: Flops | None = None):
    saved = []
    for w in params:
        x, s = layer_forward(x, w, fl)
        saved.append(s)
    return x, saved


def backward(saved, params, dout, grads, need_dx: bool = False, fl: Flops | None = None):
    d = dout
    for i in reversed(range(len(params))):
        d = layer_backward(saved[i], params[i], d, grads[i], need_dx=need_dx or i > 0, fl=fl)
    return d


def mean_square(out, count: int | None = None):
    """Loss sum(out^2) / count (count: the elements of the whole batch; default out's own) and its gradient."""
    count = out.size if count is None else count
    return float((out * out).sum() / count), 2.0 * out / count


def train_serial(data, params, optimizer, num_steps: int):
    """The whole batch on one process: the reference for the parallel examples. Returns (params, losses)."""
    params = [p.copy() for p in params]
    states = [optimizer.state(p) for p in params]
    losses = []
    for _ in range(num_steps):
        out, saved = forward(data, params)
        loss, dout = mean_square(out)
        grads = [np.zeros_like(p) for p in params]
        backward(saved, params, dout, grads)
        for p, g, s in zip(params, grads, states):
            optimizer.step(p, g, s)
        losses.append(loss)
    return params, losses


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
    params = init_params(num_dim, num_layers, seed)  # every rank: the whole model
    optimizer = AdamW(lr=lr)
    states = [optimizer.state(p) for p in params]
    fl, losses = Flops(), []
    for _ in range(num_steps):
        out, saved = forward(data, params, fl)
        loss, dout = mean_square(out)
        grads = [np.zeros_like(p) for p in params]
        backward(saved, params, dout, grads, fl=fl)
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
    params = [np.ascontiguousarray(w[:, mine]) for w in init_params(num_dim, num_layers, seed)]
    optimizer = AdamW(lr=lr)
    states = [optimizer.state(p) for p in params]
    fl, losses = Flops(), []
    for _ in range(num_steps):
        x, inputs, saved = data, [], []
        for w in params:
            inputs.append(x)
            a, s = layer_forward(x, w, fl)  # batch x cols: this rank's columns of the layer's output
            saved.append(s)
            _charge(fl, dist)
            parts = [np.empty_like(a) for _ in range(world_size)]
            dist.all_gather([_tensor(p, dist) for p in parts], _tensor(np.ascontiguousarray(a), dist))
            x = np.concatenate(parts, axis=1)  # batch x num_dim
        loss, dx = mean_square(x)  # the same on every rank
        grads = [np.zeros_like(p) for p in params]
        for i in reversed(range(num_layers)):
            # all_gather's backward: this rank's columns of the gradient; the layer's input gradient is a sum
            # of every rank's partial product, so all-reduce it (not needed for the data)
            partial = layer_backward(saved[i], params[i], np.ascontiguousarray(dx[:, mine]), grads[i],
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
    params = init_params(num_dim, num_layers, seed)[rank * per_rank:(rank + 1) * per_rank]
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
                x, saved[m] = forward(x, params, fl)
                _charge(fl, dist)
                if not last:
                    dist.send(_tensor(x, dist), dst=rank + 1)
                else:
                    part, _ = mean_square(x, batch_size * num_dim)  # this microbatch's share of the loss
                    loss += part
                    saved[m] = (saved[m], x)
            else:
                if last:
                    s, out = saved.pop(m)
                    dout = 2.0 * out / (batch_size * num_dim)
                else:
                    s, dout = saved.pop(m), np.empty((micro, num_dim))
                    dist.recv(_tensor(dout, dist), src=rank + 1)  # the output gradient from the next stage
                dx = backward(s, params, dout, grads, need_dx=not first, fl=fl)
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
