"""The collectives of torch.distributed, with its signatures, argument checks and non-member behaviour.

Each call checks its own arguments the way torch does (in the calling rank: tensors.tensor_arg), then meets the
other members at the rendezvous, which checks that they agree (shape, dtype, data or size-only, op, root) and
raises any disagreement in every rank of the call, naming the ranks at fault. When all have arrived the
group-level collective runs once (session.collective) and results are written back with tensors.write.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..algorithms import Buffers, ReduceOp
from ..algorithms.reduce_ops import as_reduce_op, check_op, premultiply
from ..errors import AlgorithmError, DistError
from .api import backend_rules, resolve_group, resolve_peer
from .groups import as_rank
from .runtime import current
from .tensors import Arg, tensor_arg, write, write_all
from .work import Work


# Dtypes every collective of torch 2.13's ProcessGroupGloo refuses ("Invalid scalar type"; measured for the 16- and
# unsigned 32/64-bit integers and float8_e4m3fn/e5m2; the other fp8 types are not in gloo's type list either).
GLOO_NO_DTYPES = ("int16", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                  "float8_e5m2fnuz", "float8_e8m0fnu")


def _start(kind: str, group, signature: dict, payload, runner, async_op: bool, outputs=None):
    """Meet the group; returns a Work (async) or None after completion. Non-members get None with a warning."""
    rt, me = current()
    g = resolve_group(group)
    if g is None or me not in g:
        warnings.warn(f"Running {kind} on global rank {me} which does not belong to the given group.",
                      stacklevel=3)
        return None
    dtype = signature.get("dtype", "")
    if _rules() == "gloo" and (dtype in GLOO_NO_DTYPES or (kind == "gather" and dtype.startswith("complex"))):
        raise DistError(f"rank {me}: {kind}: Invalid scalar type {dtype}: torch's gloo collectives take bool, "
                        "uint8, int8, int32, int64, float16, bfloat16, float32, float64 and complex tensors (gather: "
                        "no complex); send and recv take any dtype")
    done, describe = rt.services["collectives"].arrive(me, g, kind, signature, payload, runner,
                                                       tags=rt.tags.get(me))
    if async_op:
        return Work(rt, me, done, describe, outputs)
    rt.wait(me, done, describe)
    return None


def _launch(kind: str, group, count: int, dtype, rows, finish, op=ReduceOp.SUM, root: int = 0, splits=None,
            variant: str = ""):
    """A runner body: run the group-level collective on the session, then `finish(rows)` writes results back;
    fires done."""
    rt, _ = current()
    session = rt.services["session"]
    tags = {**rt.services.get("launch_tags", {}), "group": group.name}
    busy = rt.services["launch_after"]  # the compute each member had queued when it issued the call runs first
    # A communicator's collectives run one after another, in the order they were issued (NCCL launches them on the
    # communicator's stream): async calls on one group queue behind each other, calls on other groups overlap.
    streams = rt.services.setdefault("streams", {})
    before = streams.get(id(group))
    if before is not None and not before.processed:
        busy = [*busy, before]

    def start(done):
        ran = session.collective(kind, group.ranks, count=count, data=rows, dtype=np.dtype(dtype), op=op, root=root,
                                 splits=splits, variant=variant, tags=tags, after=busy)
        streams[id(group)] = ran

        def complete(_e):
            if ran.buffers.live:
                finish(ran.buffers.rows)
            done.succeed()
        ran.callbacks.append(complete)
    return start


def _sig(a: Arg, **extra) -> dict:
    """What every member of a call must agree on about a tensor."""
    return {"shape": list(a.shape), "dtype": a.dtype.name, "data": "size-only" if a.data is None else "values",
            **extra}


def _rows(args: list[Arg]) -> np.ndarray | None:
    """Stack per-rank data into (n, count) rows in the tensors' own dtype; None for size-only calls.

    (The rows must keep the dtype: reducing in float64 would change float32 results, corrupt int64 values above
    2**53, drop the imaginary part of complex values and break bitwise ops.)
    """
    if any(a.data is None for a in args):
        return None
    return np.stack([a.flat() for a in args])


def _sources(args: list[Arg], op: ReduceOp) -> Buffers | None:
    """The ranks' own arrays for a reduction that may read them in place (stacked only if its plan needs rows);
    None for size-only calls."""
    if any(a.data is None for a in args):
        return None
    return Buffers(None, op, sources=[a.flat() for a in args])


def _numerics() -> str:
    return current()[0].services["session"].numerics


def _check_op(op, a: Arg, call: str) -> ReduceOp:
    """The op as simcomm's ReduceOp, or the error torch raises for op on this dtype on this backend (raised in
    the calling rank, so every rank that passes it raises)."""
    _, me = current()
    try:
        op = as_reduce_op(op)
    except ValueError as exc:
        raise DistError(f"rank {me}: {call}: {exc}") from None
    like = a.dtype.numpy or ("complex64" if a.dtype.name == "complex32" else "float16")  # for the dtype rules
    backend = _rules()
    try:
        check_op(op, np.dtype(like), backend, process_group=True)
    except AlgorithmError as exc:
        raise AlgorithmError(f"rank {me}: {call}: {exc}") from None
    if op.name == "PREMUL_SUM" and a.dtype.name not in PREMUL_DTYPES:
        raise AlgorithmError(f"rank {me}: {call}: PreMulSum Data type must be half, float, bfloat16 or double "
                             f"(ProcessGroupNCCL; complex tensors count as their real parts), got {a.dtype.name}")
    return op


# ProcessGroupNCCL's PREMUL_SUM dtypes (NCCL's ncclRedOpCreatePreMulSum); complex tensors are reduced as their
# real views (view_as_real), so they pass too.
PREMUL_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128")


def _rules() -> str:
    """"gloo" or "nccl": whose argument rules this rank's calls follow (the backend it asked for, see
    api.backend_rules)."""
    return backend_rules("gloo" if _numerics() == "gloo" else "nccl")


# ---- reductions ------------------------------------------------------------------------------------------
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce tensor across the group; every rank ends with the same result."""
    a = tensor_arg(tensor, "all_reduce", output=True, reduce=True)
    op = _check_op(op, a, "all_reduce")

    def runner(payloads, done):
        args, ops = [p[0] for p in payloads], [p[1] for p in payloads]
        if ops[0].name == "PREMUL_SUM":
            group_op, rows = premultiply(ops, _rows(args))
        else:
            group_op, rows = ops[0], _sources(args, ops[0])

        def finish(r):
            write_all(list(zip(args, r)))
        _launch("all_reduce", resolve_group(group), a.numel, a.sim_dtype, rows, finish, group_op)(done)
    return _start("all_reduce", group, _sig(a, op=op.name), (a, op), runner, async_op, [tensor])


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduce onto dst. Other ranks' tensors: as they were with NCCL numerics; with gloo numerics, the partial
    results gloo's ring leaves in them (see algorithms/gloo.py)."""
    a = tensor_arg(tensor, "reduce", output=True, reduce=True)
    op = _check_op(op, a, "reduce")
    g = resolve_group(group)
    if g is None:
        return _start("reduce", group, {}, None, None, async_op)
    root = g.rank_of(resolve_peer(g, dst, group_dst, "dst"))

    def runner(payloads, done):
        args = [p[0] for p in payloads]
        group_op, rows = premultiply([p[1] for p in payloads], _rows(args))
        everyone = _numerics() == "gloo"

        def finish(r):
            write_all([(arg, r[i]) for i, arg in enumerate(args) if i == root or everyone])
        _launch("reduce", g, a.numel, a.sim_dtype, rows, finish, group_op, root)(done)
    return _start("reduce", group, _sig(a, op=op.name, root=g.ranks[root]), (a, op), runner, async_op, [tensor])


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copy src's tensor into every rank's tensor."""
    g = resolve_group(group)
    if g is None:
        return _start("broadcast", group, {}, None, None, async_op)
    root_global = resolve_peer(g, src, group_src, "src")
    _, me = current()
    a = tensor_arg(tensor, "broadcast", output=me != root_global)
    root = g.rank_of(root_global)

    def runner(payloads, done):
        args = [p[0] for p in payloads]

        def finish(r):
            write_all([(arg, row) for i, (arg, row) in enumerate(zip(args, r)) if i != root])
        _launch("broadcast", g, a.numel, a.sim_dtype, _rows(args), finish, root=root)(done)
    return _start("broadcast", group, _sig(a, root=root_global), (a,), runner, async_op, [tensor])


def _list_size(call: str, name: str, lst, n: int) -> None:
    if lst is None or not isinstance(lst, (list, tuple)) or len(lst) != n:
        _, me = current()
        got = "none" if lst is None else (len(lst) if isinstance(lst, (list, tuple)) else type(lst).__name__)
        raise DistError(f"rank {me}: {call}: Incorrect {name} size {got}. {name.capitalize()} size should be {n}")


def _same_as(call: str, name: str, items: list[Arg], ref: Arg, same_shape: bool = False) -> None:
    """Every tensor of a list has ref's dtype and size, as torch requires ("Invalid usage of tensors with
    different dtypes")."""
    _, me = current()
    for i, t in enumerate(items):
        if t.dtype != ref.dtype:
            raise DistError(f"rank {me}: {call}: Invalid usage of tensors with different dtypes: {name}[{i}] is "
                            f"{t.dtype.name}, expected {ref.dtype.name}")
        if (t.data is None) != (ref.data is None):
            raise DistError(f"rank {me}: {call}: {name}[{i}] is {t.describe()} but the call's tensor is "
                            f"{ref.describe()}: size-only and data tensors cannot be mixed")
        if t.numel != ref.numel or (same_shape and t.shape != ref.shape):
            raise DistError(f"rank {me}: {call}: {name}[{i}] has {t.numel} elements {list(t.shape)}, expected "
                            f"{ref.numel} {list(ref.shape)}")


def _args(call: str, name: str, lst, output: bool = False, reduce: bool = False) -> list[Arg]:
    return [tensor_arg(t, call, f"{name}[{i}]", output=output, reduce=reduce) for i, t in enumerate(lst)]


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce input_list[i] across ranks into group rank i's output."""
    out = tensor_arg(output, "reduce_scatter", "output", output=True, reduce=True)
    op = _check_op(op, out, "reduce_scatter")
    g = resolve_group(group)
    ins = []
    if g is not None:
        _list_size("reduce_scatter", "input list", input_list, g.size())
        ins = _args("reduce_scatter", "input_list", input_list, reduce=True)
        _same_as("reduce_scatter", "input_list", ins, out)

    def runner(payloads, done):
        outs = [p[0] for p in payloads]
        c = out.numel
        rows = None if out.data is None else np.stack([np.concatenate([t.flat() for t in p[1]]) for p in payloads])
        group_op, rows = premultiply([p[2] for p in payloads], rows)

        def finish(r):
            for i, arg in enumerate(outs):
                write(arg, r[i, i * c:(i + 1) * c])
        _launch("reduce_scatter", g, c, out.sim_dtype, rows, finish, group_op, variant="list")(done)
    return _start("reduce_scatter", group, _sig(out, op=op.name), (out, ins, op), runner, async_op, [output])


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002 - torch's name
    """Reduce input (group size x output elements) across ranks; rank i keeps the i-th slice."""
    call = "reduce_scatter_tensor"
    out = tensor_arg(output, call, "output", output=True, reduce=True)
    inp = tensor_arg(input, call, "input", reduce=True)
    op = _check_op(op, out, call)
    g = resolve_group(group)
    _, me = current()
    if g is not None and inp.numel != g.size() * out.numel:
        raise DistError(f"rank {me}: {call}: input has {inp.numel} elements; it must be group size ({g.size()}) "
                        f"times the output's {out.numel}")
    if inp.dtype != out.dtype or (inp.data is None) != (out.data is None):
        raise DistError(f"rank {me}: {call}: input ({inp.describe()}) and output ({out.describe()}) must have the "
                        "same dtype and both hold data or both be size-only")

    def runner(payloads, done):
        c = out.numel
        group_op, rows = premultiply([p[2] for p in payloads], _rows([p[1] for p in payloads]))

        def finish(r):
            for i, p in enumerate(payloads):
                write(p[0], r[i, i * c:(i + 1) * c])
        _launch("reduce_scatter", g, c, out.sim_dtype, rows, finish, group_op)(done)
    return _start("reduce_scatter", group, _sig(out, op=op.name), (out, inp, op), runner, async_op, [output])


# ---- gathers and scatters --------------------------------------------------------------------------------
def _gather_rows(inputs: list[Arg], n: int, dtype):
    """(n, n*count) rows with rank i's input in block i."""
    if any(a.data is None for a in inputs):
        return None
    count = inputs[0].numel
    rows = np.zeros((n, n * count), dtype=dtype)
    for i, a in enumerate(inputs):
        rows[i, i * count:(i + 1) * count] = a.flat()
    return rows


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Every rank receives every rank's tensor into tensor_list."""
    a = tensor_arg(tensor, "all_gather")
    g = resolve_group(group)
    outs = []
    if g is not None:
        _list_size("all_gather", "output list", tensor_list, g.size())
        outs = _args("all_gather", "tensor_list", tensor_list, output=True)
        _same_as("all_gather", "tensor_list", outs, a)

    def runner(payloads, done):
        c, n = a.numel, g.size()
        rows = _gather_rows([p[1] for p in payloads], n, a.sim_dtype)

        def finish(r):
            for i, p in enumerate(payloads):
                for j, t in enumerate(p[0]):
                    write(t, r[i, j * c:(j + 1) * c])
        _launch("all_gather", g, c, a.sim_dtype, rows, finish)(done)
    return _start("all_gather", group, _sig(a), (outs, a), runner, async_op, [tensor_list])


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank receives the concatenation of all ranks' inputs (along dim 0) in output_tensor."""
    call = "all_gather_into_tensor"
    out = tensor_arg(output_tensor, call, "output_tensor", output=True)
    inp = tensor_arg(input_tensor, call, "input_tensor")
    g = resolve_group(group)
    _, me = current()
    if g is not None and out.numel != g.size() * inp.numel:
        raise DistError(f"rank {me}: {call}: output has {out.numel} elements; it must be group size ({g.size()}) "
                        f"times the input's {inp.numel}")
    if inp.dtype != out.dtype or (inp.data is None) != (out.data is None):
        raise DistError(f"rank {me}: {call}: invalid tensor type: output_tensor is {out.describe()}, input_tensor "
                        f"is {inp.describe()}; they must have the same dtype and both hold data or both be "
                        "size-only")

    def runner(payloads, done):
        rows = _gather_rows([p[1] for p in payloads], g.size(), inp.sim_dtype)

        def finish(r):
            for i, p in enumerate(payloads):
                write(p[0], r[i])
        _launch("all_gather", g, inp.numel, inp.sim_dtype, rows, finish)(done)
    return _start("all_gather", group, _sig(inp), (out, inp), runner, async_op, [output_tensor])


def _rooted(name: str, g, peer, group_peer, lst, lst_name: str, ref: Arg, output: bool):
    """Root's group rank, global rank and checked list for gather/scatter (global rank 0 by default), with
    torch's list checks."""
    _, me = current()
    if peer is None and group_peer is None:
        peer = 0
    root_global = resolve_peer(g, peer, group_peer, "dst" if name == "gather" else "src")
    side = "destination" if name == "gather" else "source"
    args = []
    if me == root_global:
        if not lst:
            raise DistError(f"rank {me}: {name}: Argument ``{lst_name}`` must be specified on {side} rank.")
        _list_size(name, lst_name.replace("_", " "), lst, g.size())
        args = _args(name, lst_name, lst, output=output)
        _same_as(name, lst_name, args, ref)
    elif lst:
        raise DistError(f"rank {me}: {name}: Argument ``{lst_name}`` must NOT be specified on non-{side} ranks.")
    return g.rank_of(root_global), root_global, args


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Collect every rank's tensor into gather_list on dst."""
    g = resolve_group(group)
    if g is None:
        return _start("gather", group, {}, None, None, async_op)
    a = tensor_arg(tensor, "gather")
    root, root_global, outs = _rooted("gather", g, dst, group_dst, gather_list, "gather_list", a, output=True)

    def runner(payloads, done):
        c, n = a.numel, g.size()
        rows = _gather_rows([p[0] for p in payloads], n, a.sim_dtype)

        def finish(r):
            for j, t in enumerate(payloads[root][1]):
                write(t, r[root, j * c:(j + 1) * c])
        _launch("gather", g, c, a.sim_dtype, rows, finish, root=root)(done)
    return _start("gather", group, _sig(a, root=root_global), (a, outs), runner, async_op,
                  [gather_list] if gather_list else [])


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Send scatter_list[i] on src to group rank i's tensor."""
    g = resolve_group(group)
    if g is None:
        return _start("scatter", group, {}, None, None, async_op)
    a = tensor_arg(tensor, "scatter", output=True)
    root, root_global, ins = _rooted("scatter", g, src, group_src, scatter_list, "scatter_list", a, output=False)

    def runner(payloads, done):
        c, n = a.numel, g.size()
        rows = None
        if a.data is not None:
            rows = np.zeros((n, n * c), dtype=a.sim_dtype)
            rows[root] = np.concatenate([t.flat() for t in payloads[root][1]])

        def finish(r):
            for i, p in enumerate(payloads):
                write(p[0], r[i, i * c:(i + 1) * c] if i != root else r[root, root * c:(root + 1) * c])
        _launch("scatter", g, c, a.sim_dtype, rows, finish, root=root)(done)
    return _start("scatter", group, _sig(a, root=root_global), (a, ins), runner, async_op, [tensor])


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Group rank i's input_tensor_list[j] lands in group rank j's output_tensor_list[i]; sizes may differ
    (NCCL), except with gloo numerics: ProcessGroupGloo's alltoall needs every tensor of a list the same size."""
    call = "all_to_all"
    g = resolve_group(group)
    if g is None:
        return _start(call, group, {}, None, None, async_op)
    _list_size(call, "input list", input_tensor_list, g.size())
    _list_size(call, "output list", output_tensor_list, g.size())
    ins = _args(call, "input_tensor_list", input_tensor_list)
    outs = _args(call, "output_tensor_list", output_tensor_list, output=True)
    _, me = current()
    gloo = _rules() == "gloo"
    for name, lst in (("input_tensor_list", ins), ("output_tensor_list", outs)):
        for i, t in enumerate(lst):
            if t.dtype != ins[0].dtype or (t.data is None) != (ins[0].data is None):
                raise DistError(f"rank {me}: {call}: Invalid usage of tensors with different dtypes: {name}[{i}] "
                                f"is {t.describe()}, input_tensor_list[0] is {ins[0].describe()}")
            if gloo and t.shape != lst[0].shape:
                raise DistError(f"rank {me}: ProcessGroupGloo::alltoall: invalid tensor size at index {i} "
                                f"(expected {lst[0].shape}, got {t.shape})")
    return _all_to_all(g, group, ins[0], [t.numel for t in ins], [t.numel for t in outs],
                       [t.flat() if t.data is not None else None for t in ins], outs, async_op,
                       list(output_tensor_list))


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,  # noqa: A002
                      async_op=False):
    """all_to_all on single tensors split along dim 0 (evenly, or by the given split sizes)."""
    call = "all_to_all_single"
    g = resolve_group(group)
    if g is None:
        return _start("all_to_all", group, {}, None, None, async_op)
    out = tensor_arg(output, call, "output", output=True)
    inp = tensor_arg(input, call, "input")
    _, me = current()
    if out.dtype != inp.dtype or (out.data is None) != (inp.data is None):
        raise DistError(f"rank {me}: {call}: output ({out.describe()}) and input ({inp.describe()}) must have the "
                        "same dtype and both hold data or both be size-only")
    n = g.size()

    def split(a: Arg, sizes, name):
        dim0 = a.shape[0] if a.shape else 1
        row = a.numel // dim0 if dim0 else int(np.prod(a.shape[1:]))
        if sizes is None:
            if dim0 % n:
                raise DistError(f"rank {me}: {call}: {name} dim 0 ({dim0}) is not divisible by group size {n}")
            sizes = [dim0 // n] * n
        given = list(sizes)
        try:
            sizes = [as_rank(s, "") for s in sizes]  # integer-likes, as ranks are
        except DistError:
            sizes = None
        if sizes is None or any(s < 0 for s in sizes):
            raise DistError(f"rank {me}: {call}: {name}_split_sizes must be whole numbers >= 0, got {given}")
        if len(sizes) != n or sum(sizes) != dim0:
            raise DistError(f"rank {me}: {call}: {name}_split_sizes {sizes} must have {n} entries summing to dim 0 "
                            f"({dim0})")
        return [int(s) * row for s in sizes]
    in_counts, out_counts = split(inp, input_split_sizes, "input"), split(out, output_split_sizes, "output")

    def blocks(a: Arg, counts):
        if a.data is None:
            return [None] * n
        flat, bounds = a.flat(), np.concatenate([[0], np.cumsum(counts)]).astype(int)
        return [flat[bounds[i]:bounds[i + 1]] for i in range(n)]
    return _all_to_all(g, group, inp, in_counts, out_counts, blocks(inp, in_counts), [out], async_op, [output],
                       out_counts)


def _all_to_all(g, group, ref: Arg, in_counts, out_counts, in_blocks, outs: list[Arg], async_op, futures,
                single_counts=None):
    """Run an all_to_all; outputs are filled in contiguous scratch blocks and written back with tensors.write
    (outs: one Arg per block, or one Arg whose blocks are single_counts)."""
    def runner(payloads, done):
        n = g.size()
        splits = np.array([p[0] for p in payloads], dtype=np.int64)
        expect = np.array([p[1] for p in payloads], dtype=np.int64).T  # expect[i][j]: j's slot for i's block
        if (splits != expect).any():
            i, j = map(int, np.argwhere(splits != expect)[0])
            raise DistError(f"rank {g.ranks[i]}: all_to_all size mismatch on {g.name}: group rank {i} sends "
                            f"{splits[i, j]} elements to group rank {j} (rank {g.ranks[j]}), which expects "
                            f"{expect[i, j]}")
        rows, scratch = None, None
        if ref.data is not None:
            scratch = [[np.zeros(c, dtype=ref.sim_dtype) for c in p[1]] for p in payloads]
            rows = Buffers(([p[2] for p in payloads], scratch), ReduceOp.SUM)

        def complete():
            for p, blocks in zip(payloads, scratch):
                if p[4] is not None:  # all_to_all_single: one output, its blocks back to back
                    write(p[3][0], np.concatenate(blocks) if blocks else [])
                else:
                    for arg, block in zip(p[3], blocks):
                        write(arg, block)
        uniform = (splits == splits.flat[0]).all()
        _launch("all_to_all", g, int(splits.flat[0]) if n else 0, ref.sim_dtype, rows,
                lambda r: complete(), splits=None if uniform else splits)(done)
    sig = _sig(ref)
    sig.pop("shape")
    return _start("all_to_all", group, sig, (in_counts, out_counts, in_blocks, outs, single_counts), runner,
                  async_op, futures)


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Nobody leaves until every member has arrived."""
    g = resolve_group(group)

    def runner(payloads, done):
        _launch("barrier", g, 0, np.uint8, None, lambda r: None)(done)
    return _start("barrier", group, {}, None, runner, async_op, [])


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """gloo's barrier that names ranks that never arrive: here every barrier does (as a DeadlockError)."""
    return barrier(group)


# torch 2.13's preferred names for the single-tensor forms.
all_gather_single = all_gather_into_tensor
reduce_scatter_single = reduce_scatter_tensor
