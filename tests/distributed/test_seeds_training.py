"""The data / tensor / pipeline parallel examples of the lecture tutorial, ported to simcomm.

Each distributed program is checked against the same computation done in one process: the MLP is x -> gelu(x @ W)
repeated, the loss the mean of squares. Numpy does the maths (exact-erf gelu and its hand-written backward); one DP
variant uses torch autograd and AdamW as the tutorial does.
"""
import math

import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_grad(x):
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def init_params(num_dim: int, num_layers: int) -> list[np.ndarray]:
    """Identical on every rank (the tutorial seeds its initialiser the same way everywhere)."""
    rng = np.random.default_rng(0)
    return [rng.standard_normal((num_dim, num_dim)) / math.sqrt(num_dim) for _ in range(num_layers)]


def forward_backward(data, params):
    """Loss and the gradient of every weight for loss = mean(mlp(data) ** 2)."""
    xs, zs = [data], []
    for w in params:
        zs.append(xs[-1] @ w)
        xs.append(gelu(zs[-1]))
    out = xs[-1]
    loss = float(np.mean(out ** 2))
    grad = 2.0 * out / out.size
    grads = [None] * len(params)
    for i in reversed(range(len(params))):
        gz = grad * gelu_grad(zs[i])
        grads[i] = xs[i].T @ gz
        grad = gz @ params[i].T
    return loss, grads


def test_hand_written_backward_matches_finite_differences():
    rng = np.random.default_rng(5)
    data, params = rng.standard_normal((3, 4)), init_params(4, 2)
    _, grads = forward_backward(data, params)
    eps = 1e-6
    for layer, (i, j) in ((0, (1, 2)), (1, (3, 0))):
        bumped = [p.copy() for p in params]
        bumped[layer][i, j] += eps
        lo = [p.copy() for p in params]
        lo[layer][i, j] -= eps
        numeric = (forward_backward(data, bumped)[0] - forward_backward(data, lo)[0]) / (2 * eps)
        assert grads[layer][i, j] == pytest.approx(numeric, rel=1e-5, abs=1e-9)


# ---- data parallelism: all_reduce(AVG) of the gradients --------------------------------------------------------
def data_parallelism_main(rank, world_size, data, num_layers, num_steps, lr):
    batch_size = data.shape[0]
    local_batch_size = batch_size // world_size
    start_index = rank * local_batch_size
    end_index = start_index + local_batch_size
    data = data[start_index:end_index]
    params = init_params(data.shape[1], num_layers)
    losses = []
    for _step in range(num_steps):
        loss, grads = forward_backward(data, params)
        # Sync gradients across workers (the only difference from single-process training)
        for g in grads:
            dist.all_reduce(tensor=g, op=dist.ReduceOp.AVG, async_op=False)
        params = [p - lr * g for p, g in zip(params, grads)]
        losses.append(loss)
    return params, losses


@pytest.mark.parametrize("cluster", ["hgx-h100", "cpu-host"])
def test_data_parallelism(cluster):
    world_size, num_layers, num_steps, lr = 4, 3, 3, 0.5
    data = np.random.default_rng(1).standard_normal((8, 8))
    res = simcomm.spawn(data_parallelism_main, args=(world_size, data, num_layers, num_steps, lr), nprocs=world_size,
                        cluster=cluster)
    params = [r[0] for r in res.results]
    for other in params[1:]:
        for a, b in zip(params[0], other):
            np.testing.assert_array_equal(a, b)  # all_reduce leaves every rank bitwise equal
    # Averaging per-shard mean-loss gradients equals full-batch gradient descent.
    ref = init_params(8, num_layers)
    for _ in range(num_steps):
        _, grads = forward_backward(data, ref)
        ref = [p - lr * g for p, g in zip(ref, grads)]
    for a, b in zip(params[0], ref):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert not np.allclose(params[0][0], init_params(8, num_layers)[0])  # training moved the weights
    # Every rank issued num_layers all_reduces per step, each visible in the timeline.
    colls = [a for a in res.timeline if a.kind == "collective"]
    assert len(colls) == world_size * num_layers * num_steps


def test_data_parallelism_torch_adamw():
    import torch
    import torch.nn.functional as F

    def get_init_params(num_inputs, num_outputs, rank):
        torch.random.manual_seed(0)  # same initial weights on every rank
        return torch.nn.Parameter(torch.randn(num_inputs, num_outputs) / math.sqrt(num_outputs))

    def main(rank, world_size, data, num_layers, num_steps):
        local_batch_size = data.size(0) // world_size
        data = data[rank * local_batch_size:(rank + 1) * local_batch_size]
        params = [get_init_params(data.size(1), data.size(1), rank) for _ in range(num_layers)]
        optimizer = torch.optim.AdamW(params, lr=1e-3)
        for _ in range(num_steps):
            x = data
            for param in params:
                x = F.gelu(x @ param)
            loss = x.square().mean()
            loss.backward()
            for param in params:
                dist.all_reduce(tensor=param.grad, op=dist.ReduceOp.AVG, async_op=False)
            optimizer.step()
            optimizer.zero_grad()
        return [p.detach().clone() for p in params]

    data = torch.randn(8, 4, generator=torch.Generator().manual_seed(2))
    res = simcomm.spawn(main, args=(4, data, 2, 3), nprocs=4, cluster="hgx-h100").results
    for other in res[1:]:
        for a, b in zip(res[0], other):
            assert torch.equal(a, b)
    assert not torch.equal(res[0][0], get_init_params(4, 4, 0).detach())


# ---- tensor parallelism: all_gather of activation shards -------------------------------------------------------
def tensor_parallelism_main(rank, world_size, data, weights):
    batch_size, num_dim = data.shape
    local_num_dim = num_dim // world_size
    # This rank's columns of every layer's weight
    params = [w[:, rank * local_num_dim:(rank + 1) * local_num_dim].copy() for w in weights]
    x = data
    for i in range(len(params)):
        x = gelu(x @ params[i])  # batch_size x local_num_dim
        activations = [np.empty((batch_size, local_num_dim)) for _ in range(world_size)]
        dist.all_gather(tensor_list=activations, tensor=x, async_op=False)
        x = np.concatenate(activations, axis=1)  # batch_size x num_dim
    return x


@pytest.mark.parametrize("world_size", [2, 4])
def test_tensor_parallelism(world_size):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 8))
    weights = [rng.standard_normal((8, 8)) / math.sqrt(8) for _ in range(3)]
    res = simcomm.spawn(tensor_parallelism_main, args=(world_size, data, weights), nprocs=world_size).results
    expected = data
    for w in weights:
        expected = gelu(expected @ w)
    for x in res:
        np.testing.assert_array_equal(x, res[0])
        np.testing.assert_allclose(x, expected, rtol=1e-12, atol=1e-14)


# ---- pipeline parallelism: micro-batches through stages with send/recv ----------------------------------------
def pipeline_parallelism_main(rank, world_size, data, weights, num_micro_batches):
    batch_size, num_dim = data.shape
    local_num_layers = len(weights) // world_size
    local_params = weights[rank * local_num_layers:(rank + 1) * local_num_layers]
    micro_batch_size = batch_size // num_micro_batches
    if rank == 0:
        micro_batches = np.array_split(data, num_micro_batches, axis=0)
    else:
        micro_batches = [np.empty((micro_batch_size, num_dim)) for _ in range(num_micro_batches)]
    outputs = []
    for x in micro_batches:
        if rank - 1 >= 0:
            dist.recv(tensor=x, src=rank - 1)
        for param in local_params:
            x = gelu(x @ param)
        if rank + 1 < world_size:
            dist.send(tensor=np.ascontiguousarray(x), dst=rank + 1)
        outputs.append(x)
    return outputs


def test_pipeline_parallelism():
    world_size, num_micro_batches = 4, 4
    rng = np.random.default_rng(4)
    data = rng.standard_normal((8, 6))
    weights = [rng.standard_normal((6, 6)) / math.sqrt(6) for _ in range(8)]
    res = simcomm.spawn(pipeline_parallelism_main, args=(world_size, data, weights, num_micro_batches), nprocs=world_size)
    expected = data
    for w in weights:
        expected = gelu(expected @ w)
    last = np.concatenate(res.results[-1], axis=0)
    np.testing.assert_allclose(last, expected, rtol=1e-12, atol=1e-14)
    # Every stage handed every micro-batch on: (world_size - 1) * num_micro_batches sends of 2x6 float64.
    sends = [a for a in res.timeline if a.kind == "send"]
    assert len(sends) == (world_size - 1) * num_micro_batches
    assert all(a.nbytes == 2 * 6 * 8 and a.peer == a.rank + 1 for a in sends)
    # Stage s finishes its last micro-batch after stage s - 1 does.
    assert res.finish_times == sorted(res.finish_times)
