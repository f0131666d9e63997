"""The collectives of torch.distributed, with its signatures, argument checks and non-member behaviour.

Each call checks its arguments the way torch does, then meets the other members at the rendezvous; when all have
arrived the group-level collective runs once (algorithms.run_collective) and results are written back in place.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..algorithms import ReduceOp
from ..algorithms.reduce_ops import as_reduce_op, check_op
from ..errors import DistError
from .api import resolve_group, resolve_peer
from .runtime import current
from .tensors import as_array, dtype_of, numel_of, shape_of
from .work import Work


def _shape(t) -> list[int]:
    return list(shape_of(t))


def _start(kind: str, group, signature: dict, payload, runner, async_op: bool, what: str | None = None):
    """Meet the group; returns a Work (async) or None after completion. Non-members get None with a warning."""
    rt, me = current()
    g = resolve_group(group)
    if g is None or me not in g:
        warnings.warn(f"Running {kind} on global rank {me} which does not belong to the given group.",
                      stacklevel=3)
        return None
    done, describe = rt.services["collectives"].arrive(me, g, kind, signature, payload, runner)
    if async_op:
        return Work(rt, me, done, what or describe)
    rt.wait(me, done, describe)
    return None


def _launch(kind: str, group, count: int, dtype, rows, finish, op=ReduceOp.SUM, root: int = 0, splits=None,
            variant: str = ""):
    """A runner body: run the group-level collective on the session, then `finish(rows)` writes results back;
    fires done."""
    rt, _ = current()
    session = rt.services["session"]

    def start(done):
        ran = session.collective(kind, group.ranks, count=count, data=rows, dtype=np.dtype(dtype), op=op, root=root,
                                 splits=splits, variant=variant, tags={"group": group.name})

        def complete(_e):
            if ran.buffers.live:
                finish(ran.buffers.rows)
            done.succeed()
        ran.callbacks.append(complete)
    return start


def _rows(arrays, count: int):
    """Stack per-rank data into (n, count) rows in the tensors' own dtype; None if any rank has no data.

    (The rows must keep the dtype: reducing in float64 would change float32 results, corrupt int64 values above
    2**53, drop the imaginary part of complex values and break bitwise ops.)
    """
    if any(a is None for a in arrays):
        return None
    return np.stack([np.ascontiguousarray(a).reshape(-1) for a in arrays])


def _write(tensor, values) -> None:
    out = as_array(tensor)
    if out is not None:
        out[...] = np.asarray(values).reshape(out.shape)


def _numerics() -> str:
    return current()[0].services["session"].numerics


def _check_op(op, tensor=None):
    """The op as simcomm's ReduceOp; with a tensor, also the error torch raises for op on its dtype on this
    backend, raised on every calling rank (not only on the one that completes the rendezvous)."""
    try:
        op = as_reduce_op(op)
    except ValueError as exc:
        raise DistError(str(exc)) from None
    if tensor is not None:
        check_op(op, dtype_of(tensor), "gloo" if _numerics() == "gloo" else "nccl")
    return op


# ---- reductions ------------------------------------------------------------------------------------------
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce tensor across the group; every rank ends with the same result."""
    op = _check_op(op, tensor)
    sig = {"shape": _shape(tensor), "dtype": dtype_of(tensor).name, "op": op.name}

    def runner(tensors, done):
        g = resolve_group(group)
        rows = _rows([as_array(t) for t in tensors], numel_of(tensor))
        def finish(r):
            for t, row in zip(tensors, r):
                _write(t, row)
        _launch("all_reduce", g, numel_of(tensor), dtype_of(tensor), rows, finish, op)(done)
    return _start("all_reduce", group, sig, tensor, runner, async_op)


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduce onto dst. Other ranks' tensors: as they were with NCCL numerics; with gloo numerics, the partial
    results gloo's ring leaves in them (see algorithms/gloo.py)."""
    op = _check_op(op, tensor)
    g = resolve_group(group)
    if g is None:
        return _start("reduce", group, {}, None, None, async_op)
    root = g.rank_of(resolve_peer(g, dst, group_dst, "dst"))
    sig = {"shape": _shape(tensor), "dtype": dtype_of(tensor).name, "op": op.name, "root": g.ranks[root]}

    def runner(tensors, done):
        rows = _rows([as_array(t) for t in tensors], numel_of(tensor))
        everyone = _numerics() == "gloo"

        def finish(r):
            for i, t in enumerate(tensors):
                if i == root or everyone:
                    _write(t, r[i])
        _launch("reduce", g, numel_of(tensor), dtype_of(tensor), rows, finish, op, root)(done)
    return _start("reduce", group, sig, tensor, runner, async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copy src's tensor into every rank's tensor."""
    g = resolve_group(group)
    if g is None:
        return _start("broadcast", group, {}, None, None, async_op)
    root = g.rank_of(resolve_peer(g, src, group_src, "src"))
    sig = {"shape": _shape(tensor), "dtype": dtype_of(tensor).name, "root": g.ranks[root]}

    def runner(tensors, done):
        rows = _rows([as_array(t) for t in tensors], numel_of(tensor))
        def finish(r):
            for t, row in zip(tensors, r):
                _write(t, row)
        _launch("broadcast", g, numel_of(tensor), dtype_of(tensor), rows, finish, root=root)(done)
    return _start("broadcast", group, sig, tensor, runner, async_op)


def _list_size(name: str, lst, n: int) -> None:
    if lst is None or len(lst) != n:
        raise DistError(f"Incorrect {name} size {0 if lst is None else len(lst)}. {name.capitalize()} size "
                        f"should be {n}")


def _same_as(name: str, items, ref) -> None:
    for i, t in enumerate(items):
        if dtype_of(t) != dtype_of(ref):
            raise DistError(f"{name}[{i}] has dtype {dtype_of(t).name}, expected {dtype_of(ref).name}")
        if numel_of(t) != numel_of(ref):
            raise DistError(f"{name}[{i}] has {numel_of(t)} elements, expected {numel_of(ref)}")


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce input_list[i] across ranks into group rank i's output."""
    op = _check_op(op, output)
    g = resolve_group(group)
    if g is not None:
        _list_size("input list", input_list, g.size())
        _same_as("input_list", input_list, output)
    sig = {"shape": _shape(output), "dtype": dtype_of(output).name, "op": op.name}

    def runner(payloads, done):
        outs = [p[0] for p in payloads]
        arrays = [None if any(as_array(t) is None for t in p[1]) else
                  np.concatenate([as_array(t).reshape(-1) for t in p[1]]) for p in payloads]
        rows = _rows(arrays, numel_of(output))
        c = numel_of(output)
        def finish(r):
            for i, t in enumerate(outs):
                _write(t, r[i, i * c:(i + 1) * c])
        _launch("reduce_scatter", g, c, dtype_of(output), rows, finish, op, variant="list")(done)
    return _start("reduce_scatter", group, sig, (output, input_list), runner, async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002 - torch's name
    """Reduce input (group size x output elements) across ranks; rank i keeps the i-th slice."""
    g = resolve_group(group)
    if g is not None and numel_of(input) != g.size() * numel_of(output):
        raise DistError(f"reduce_scatter_tensor: input has {numel_of(input)} elements; it must be group size "
                        f"({g.size()}) times the output's {numel_of(output)}")
    if g is not None and dtype_of(input) != dtype_of(output):
        raise DistError("reduce_scatter_tensor: input and output must have the same dtype")
    return _reduce_scatter_flat(output, input, op, group, async_op)


def _reduce_scatter_flat(output, input, op, group, async_op):  # noqa: A002
    op = _check_op(op, output)
    g = resolve_group(group)
    sig = {"shape": _shape(output), "dtype": dtype_of(output).name, "op": op.name}

    def runner(payloads, done):
        rows = _rows([as_array(p[1]) for p in payloads], numel_of(input))
        c = numel_of(output)
        def finish(r):
            for i, p in enumerate(payloads):
                _write(p[0], r[i, i * c:(i + 1) * c])
        _launch("reduce_scatter", g, c, dtype_of(output), rows, finish, op)(done)
    return _start("reduce_scatter", group, sig, (output, input), runner, async_op)


# ---- gathers and scatters --------------------------------------------------------------------------------
def _gather_rows(inputs, count: int, n: int, dtype):
    """(n, n*count) rows with rank i's input in block i."""
    if any(a is None for a in inputs):
        return None
    rows = np.zeros((n, n * count), dtype=dtype)
    for i, a in enumerate(inputs):
        rows[i, i * count:(i + 1) * count] = np.asarray(a).reshape(-1)
    return rows


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Every rank receives every rank's tensor into tensor_list."""
    g = resolve_group(group)
    if g is not None:
        _list_size("output list", tensor_list, g.size())
        _same_as("tensor_list", tensor_list, tensor)
    sig = {"shape": _shape(tensor), "dtype": dtype_of(tensor).name}

    def runner(payloads, done):
        c, n = numel_of(tensor), g.size()
        rows = _gather_rows([as_array(p[1]) for p in payloads], c, n, dtype_of(tensor))
        def finish(r):
            for i, p in enumerate(payloads):
                for j, t in enumerate(p[0]):
                    _write(t, r[i, j * c:(j + 1) * c])
        _launch("all_gather", g, c, dtype_of(tensor), rows, finish)(done)
    return _start("all_gather", group, sig, (tensor_list, tensor), runner, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank receives the concatenation of all ranks' inputs (along dim 0) in output_tensor."""
    g = resolve_group(group)
    if g is not None and numel_of(output_tensor) != g.size() * numel_of(input_tensor):
        raise DistError(f"all_gather_into_tensor: output has {numel_of(output_tensor)} elements; it must be group "
                        f"size ({g.size()}) times the input's {numel_of(input_tensor)}")
    sig = {"shape": _shape(input_tensor), "dtype": dtype_of(input_tensor).name}

    def runner(payloads, done):
        c, n = numel_of(input_tensor), g.size()
        rows = _gather_rows([as_array(p[1]) for p in payloads], c, n, dtype_of(input_tensor))
        def finish(r):
            for i, p in enumerate(payloads):
                _write(p[0], r[i])
        _launch("all_gather", g, c, dtype_of(input_tensor), rows, finish)(done)
    return _start("all_gather", group, sig, (output_tensor, input_tensor), runner, async_op)


def _rooted(name: str, g, peer, group_peer, lst, lst_name: str, tensor):
    """Root's group rank for gather/scatter (global rank 0 by default), with torch's list checks."""
    rt, me = current()
    if peer is None and group_peer is None:
        peer = 0
    root_global = resolve_peer(g, peer, group_peer, "dst" if name == "gather" else "src")
    if me == root_global:
        if not lst:
            raise DistError(f"Argument ``{lst_name}`` must be specified on "
                            f"{'destination' if name == 'gather' else 'source'} rank.")
        _list_size(lst_name.replace("_", " "), lst, g.size())
        _same_as(lst_name, lst, tensor)
    elif lst:
        raise DistError(f"Argument ``{lst_name}`` must NOT be specified on non-"
                        f"{'destination' if name == 'gather' else 'source'} ranks.")
    return g.rank_of(root_global), root_global


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Collect every rank's tensor into gather_list on dst."""
    g = resolve_group(group)
    if g is None:
        return _start("gather", group, {}, None, None, async_op)
    root, root_global = _rooted("gather", g, dst, group_dst, gather_list, "gather_list", tensor)
    sig = {"shape": _shape(tensor), "dtype": dtype_of(tensor).name, "root": root_global}

    def runner(payloads, done):
        c, n = numel_of(tensor), g.size()
        rows = _gather_rows([as_array(p[0]) for p in payloads], c, n, dtype_of(tensor))
        def finish(r):
            for j, t in enumerate(payloads[root][1]):
                _write(t, r[root, j * c:(j + 1) * c])
        _launch("gather", g, c, dtype_of(tensor), rows, finish, root=root)(done)
    return _start("gather", group, sig, (tensor, gather_list), runner, async_op)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Send scatter_list[i] on src to group rank i's tensor."""
    g = resolve_group(group)
    if g is None:
        return _start("scatter", group, {}, None, None, async_op)
    root, root_global = _rooted("scatter", g, src, group_src, scatter_list, "scatter_list", tensor)
    sig = {"shape": _shape(tensor), "dtype": dtype_of(tensor).name, "root": root_global}

    def runner(payloads, done):
        c, n = numel_of(tensor), g.size()
        lst = payloads[root][1]
        rows = None
        if all(as_array(t) is not None for t in lst) and all(as_array(p[0]) is not None for p in payloads):
            rows = np.zeros((n, n * c), dtype=dtype_of(tensor))
            rows[root] = np.concatenate([as_array(t).reshape(-1) for t in lst])
        def finish(r):
            for i, p in enumerate(payloads):
                _write(p[0], r[i, i * c:(i + 1) * c] if i != root else r[root, root * c:(root + 1) * c])
        _launch("scatter", g, c, dtype_of(tensor), rows, finish, root=root)(done)
    return _start("scatter", group, sig, (tensor, scatter_list), runner, async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Group rank i's input_tensor_list[j] lands in group rank j's output_tensor_list[i]; sizes may differ
    (NCCL), except with gloo numerics: ProcessGroupGloo's alltoall needs every tensor of a list the same size."""
    g = resolve_group(group)
    if g is not None:
        _list_size("input list", input_tensor_list, g.size())
        _list_size("output list", output_tensor_list, g.size())
        if _numerics() == "gloo":
            for lst in (output_tensor_list, input_tensor_list):
                for i, t in enumerate(lst):
                    if _shape(t) != _shape(lst[0]):
                        raise DistError(f"ProcessGroupGloo::alltoall: invalid tensor size at index {i} (expected "
                                        f"{tuple(_shape(lst[0]))}, got {tuple(_shape(t))})")
    dtype = dtype_of(input_tensor_list[0]) if input_tensor_list else np.dtype("float32")
    sig = {"dtype": dtype.name}
    return _all_to_all(g, group, sig, [numel_of(t) for t in input_tensor_list],
                       [numel_of(t) for t in output_tensor_list],
                       [as_array(t) for t in input_tensor_list], [as_array(t) for t in output_tensor_list],
                       dtype, async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,  # noqa: A002
                      async_op=False):
    """all_to_all on single tensors split along dim 0 (evenly, or by the given split sizes)."""
    g = resolve_group(group)
    if g is None:
        return _start("all_to_all", group, {}, None, None, async_op)
    n = g.size()
    row = int(np.prod(shape_of(input)[1:])) if len(shape_of(input)) > 1 else 1
    def split(t, sizes, name):
        dim0 = shape_of(t)[0] if shape_of(t) else 1
        if sizes is None:
            if dim0 % n:
                raise DistError(f"all_to_all_single: {name} dim 0 ({dim0}) is not divisible by group size {n}")
            sizes = [dim0 // n] * n
        if len(sizes) != n or sum(sizes) != dim0:
            raise DistError(f"all_to_all_single: {name}_split_sizes {list(sizes)} must have {n} entries summing "
                            f"to dim 0 ({dim0})")
        return [s * row for s in sizes]
    ins, outs = split(input, input_split_sizes, "input"), split(output, output_split_sizes, "output")
    a_in, a_out = as_array(input), as_array(output)
    def views(a, counts):
        if a is None:
            return [None] * n
        flat = a.reshape(-1)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        return [flat[bounds[i]:bounds[i + 1]] for i in range(n)]
    return _all_to_all(g, group, {"dtype": dtype_of(input).name}, ins, outs, views(a_in, ins), views(a_out, outs),
                       dtype_of(input), async_op)


def _all_to_all(g, group, sig, in_counts, out_counts, in_views, out_views, dtype, async_op):
    def runner(payloads, done):
        n = g.size()
        splits = np.array([p[0] for p in payloads], dtype=np.int64)
        expect = np.array([p[1] for p in payloads], dtype=np.int64).T  # expect[i][j]: j's slot for i's block
        if (splits != expect).any():
            i, j = map(int, np.argwhere(splits != expect)[0])
            rt, _ = current()
            from ..errors import MismatchError
            rt.fail(MismatchError(f"all_to_all size mismatch: group rank {i} sends {splits[i, j]} elements to "
                                  f"group rank {j}, which expects {expect[i, j]}"))
        live = all(v is not None for p in payloads for v in p[2] + p[3])
        rows = None
        if live:
            from ..algorithms import Buffers
            rows = Buffers(([p[2] for p in payloads], [p[3] for p in payloads]), ReduceOp.SUM)
        uniform = (splits == splits.flat[0]).all()
        _launch("all_to_all", g, int(splits.flat[0]) if n else 0, dtype, rows, lambda r: None,
                splits=None if uniform else splits)(done)
    return _start("all_to_all", group, sig, (in_counts, out_counts, in_views, out_views), runner, async_op)


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Nobody leaves until every member has arrived."""
    g = resolve_group(group)

    def runner(payloads, done):
        _launch("barrier", g, 0, np.uint8, None, lambda r: None)(done)
    return _start("barrier", group, {}, None, runner, async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """gloo's barrier that names ranks that never arrive: here every barrier does (as a DeadlockError)."""
    return barrier(group)


# torch 2.13's preferred names for the single-tensor forms.
all_gather_single = all_gather_into_tensor
reduce_scatter_single = reduce_scatter_tensor
