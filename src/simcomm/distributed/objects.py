"""Collectives of picklable Python objects, built on byte tensors exactly as torch builds them."""
from __future__ import annotations

import pickle
import warnings

import numpy as np

from ..errors import DistError
from . import collectives as c
from .api import get_world_size, recv, resolve_group, resolve_peer, send
from .runtime import current


def _encode(obj) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()


def _decode(buf: np.ndarray, size: int):
    return pickle.loads(buf[:size].tobytes())


def _not_member(name: str) -> None:
    _, me = current()
    warnings.warn(f"Running {name} on global rank {me} which does not belong to the given group.", stacklevel=3)


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None) -> None:
    """Replace object_list's items on every rank with src's (sizes first, then the pickled bytes)."""
    g = resolve_group(group)
    if g is None:
        _not_member("broadcast_object_list")
        return
    _, me = current()
    if src is None and group_src is None:
        src = 0  # torch keeps the old default root
    root = resolve_peer(g, src, group_src, "src")
    encoded = [_encode(o) for o in object_list] if me == root else None
    sizes = np.array([len(e) for e in encoded] if encoded else [0] * len(object_list), dtype=np.int64)
    c.broadcast(sizes, src=root, group=group)
    payload = np.concatenate(encoded) if encoded else np.zeros(int(sizes.sum()), dtype=np.uint8)
    c.broadcast(payload, src=root, group=group)
    if me == root:
        return  # torch leaves the source's objects as they are (no round trip through pickle)
    offset = 0
    for i, size in enumerate(sizes.tolist()):
        object_list[i] = pickle.loads(payload[offset:offset + size].tobytes())
        offset += size


def _gathered_bytes(obj, group, collect):
    n = get_world_size(group)
    data = _encode(obj)
    size = np.array([len(data)], dtype=np.int64)
    sizes = [np.zeros(1, dtype=np.int64) for _ in range(n)]
    collect(sizes, size)
    width = int(max(s[0] for s in sizes))
    padded = np.zeros(width, dtype=np.uint8)
    padded[:len(data)] = data
    outs = [np.zeros(width, dtype=np.uint8) for _ in range(n)]
    collect(outs, padded)
    return [_decode(o, int(s[0])) for o, s in zip(outs, sizes)]


def all_gather_object(object_list, obj, group=None) -> None:
    """object_list[i] becomes group rank i's obj, on every rank."""
    if resolve_group(group) is None:
        _not_member("all_gather_object")
        return
    objs = _gathered_bytes(obj, group, lambda outs, t: c.all_gather(outs, t, group=group))
    object_list[:len(objs)] = objs


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None) -> None:
    """object_gather_list[i] on dst becomes group rank i's obj."""
    g = resolve_group(group)
    if g is None:
        _not_member("gather_object")
        return
    _, me = current()
    root = resolve_peer(g, 0 if dst is None and group_dst is None else dst, group_dst, "dst")
    if me == root and not object_gather_list:
        raise DistError("Argument ``object_gather_list`` must be specified on destination rank.")
    if me != root and object_gather_list:
        raise DistError("Argument ``object_gather_list`` must NOT be specified on non-destination ranks.")
    # Sizes go to everyone (torch gathers them with all_gather too), the bytes only to the root.
    n = g.size()
    data = _encode(obj)
    sizes = [np.zeros(1, dtype=np.int64) for _ in range(n)]
    c.all_gather(sizes, np.array([len(data)], dtype=np.int64), group=group)
    width = int(max(s[0] for s in sizes))
    padded = np.zeros(width, dtype=np.uint8)
    padded[:len(data)] = data
    outs = [np.zeros(width, dtype=np.uint8) for _ in range(n)] if me == root else None
    c.gather(padded, outs, dst=root, group=group)
    if me == root:
        object_gather_list[:n] = [_decode(o, int(s[0])) for o, s in zip(outs, sizes)]


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None) -> None:
    """scatter_object_output_list[0] on group rank i becomes src's scatter_object_input_list[i]."""
    g = resolve_group(group)
    if g is None:
        return
    _, me = current()
    root = resolve_peer(g, 0 if src is None and group_src is None else src, group_src, "src")
    n = g.size()
    if me == root and (scatter_object_input_list is None or len(scatter_object_input_list) != n):
        raise DistError(f"scatter_object_input_list on the source rank must hold {n} objects")
    encoded = [_encode(o) for o in scatter_object_input_list] if me == root else None
    # The widest pickle first (a broadcast), then each rank's padded bytes and its true size (scatters).
    width = np.array([max(len(e) for e in encoded)] if encoded else [0], dtype=np.int64)
    c.broadcast(width, src=root, group=group)
    w = int(width[0])
    padded = [np.pad(e, (0, w - len(e))) for e in encoded] if encoded else None
    sizes = [np.array([len(e)], dtype=np.int64) for e in encoded] if encoded else None
    out, size = np.zeros(w, dtype=np.uint8), np.zeros(1, dtype=np.int64)
    c.scatter(out, padded, src=root, group=group)
    c.scatter(size, sizes, src=root, group=group)
    scatter_object_output_list[0] = _decode(out, int(size[0]))


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None, use_batch=False) -> None:
    """Send the pickled objects to dst: their sizes first, then their bytes (two sends, as torch does)."""
    encoded = [_encode(o) for o in object_list]
    sizes = np.array([len(e) for e in encoded], dtype=np.int64)
    send(sizes, dst, group, group_dst=group_dst)
    send(np.concatenate(encoded) if encoded else np.zeros(0, np.uint8), dst, group, group_dst=group_dst)


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None, use_batch=False) -> int:
    """Fill object_list (of the sender's length) with src's objects; returns the sender's global rank."""
    sizes = np.zeros(len(object_list), dtype=np.int64)
    sender = recv(sizes, src, group, group_src=group_src)
    payload = np.zeros(int(sizes.sum()), dtype=np.uint8)
    recv(payload, sender, group)
    offset = 0
    for i, size in enumerate(sizes.tolist()):
        object_list[i] = pickle.loads(payload[offset:offset + size].tobytes())
        offset += size
    return sender


__all__ = ["all_gather_object", "broadcast_object_list", "gather_object", "recv_object_list", "scatter_object_list",
           "send_object_list"]
