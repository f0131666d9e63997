"""Run one rank program on real torch.distributed, and compare it with the same program on simcomm.

A rank program is written against a tiny shim: `fn(rank, dist, *args)` where `dist` is the module to use
(`torch.distributed` here, `simcomm.distributed` on the simulator), with CPU torch tensors:

    def program(rank, dist, n):
        t = torch.arange(n, dtype=torch.float32) * (rank + 1)
        dist.all_reduce(t)
        return t

    run_real(program, (4,), nprocs=3)              # real gloo, one process per rank
    print(compare(program, (4,), nprocs=3))        # simcomm (numerics="gloo") vs real gloo, bitwise

The runner initialises the process group itself (the program must not call init_process_group). fn and args
must be picklable (a module-level function): ranks are fresh processes (forkserver, or spawn where there is
none), so a script calling run_real needs the usual `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from ..errors import SimcommError

TORCH_HINT = "the torch adapter needs `pip install simcomm[torch]`"


class RealRunError(SimcommError):
    """A run on real torch.distributed failed (a rank raised, died, or the run timed out)."""


class RealRankFailed(RealRunError):
    """A rank's program raised (or its process died); `details` has the rank's traceback."""

    def __init__(self, rank: int, details: str):
        last = details.strip().splitlines()[-1] if details.strip() else "no details"
        super().__init__(f"rank {rank} failed on real torch.distributed: {last}\n{details}")
        self.rank = rank
        self.details = details


class RealRunTimeout(RealRunError):
    """The run did not finish within its timeout; every process was terminated."""


class NoGPUs(RealRunError):
    """Real NCCL was asked for on a machine without a CUDA GPU per rank."""


def check_gpus(backend: str, nprocs: int) -> None:
    """For backend "nccl": one CUDA GPU per rank, or NoGPUs saying what this machine has (never a silent skip)."""
    if backend != "nccl":
        return
    import torch
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < nprocs:
        raise NoGPUs(f"real NCCL with {nprocs} ranks needs {nprocs} CUDA GPUs (one per rank); this machine has "
                     f"{have} (torch.cuda.is_available() is {torch.cuda.is_available()})")


def _to_host(value):
    """Tensors moved to the CPU (a GPU rank's results are unpickled by a parent that may have no GPU), recursively."""
    if hasattr(value, "is_cuda") and value.is_cuda:
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    return value


def require_torch():
    """torch (with torch.distributed), or an ImportError that says how to get it."""
    try:
        import torch
        import torch.distributed
    except ImportError as exc:
        raise ImportError(TORCH_HINT) from exc
    if not torch.distributed.is_available():
        raise ImportError(f"{TORCH_HINT} (this torch build has no torch.distributed)")
    return torch


def free_port() -> int:
    """A TCP port nobody listens on now (bind port 0 on the loopback and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, nprocs: int, port: int, backend: str, fn_args: bytes, results, timeout: float) -> None:
    """One rank: join the process group, run the program, post (rank, status, payload)."""
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(nprocs), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nprocs))
        if sys.platform.startswith("linux") and "GLOO_SOCKET_IFNAME" not in os.environ \
                and os.path.exists("/sys/class/net/lo"):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # every rank is on this host
        import torch
        import torch.distributed as dist
        fn, args = pickle.loads(fn_args)
        if backend == "nccl":
            torch.cuda.set_device(rank)  # one GPU per rank, as torchrun's LOCAL_RANK on one node
        dist.init_process_group(backend, rank=rank, world_size=nprocs, timeout=timedelta(seconds=timeout))
        value = _to_host(fn(rank, dist, *args))
        results.put((rank, "ok", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        results.put((rank, "error", traceback.format_exc()))
        return
    try:  # leave together, so no rank tears down while a peer still talks to it
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001, S110 - the result is already posted; the parent reaps this process
        pass


def _stop(procs, grace: float) -> None:
    """Wait up to `grace` seconds for the processes to exit, then terminate, then kill; always reaps them."""
    end = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join(2.0)


def _context():
    """forkserver where there is one (a server that has imported torch once forks each rank: no per-rank torch
    import, and no fork of this possibly threaded process); spawn elsewhere."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed"])
        return ctx
    return mp.get_context("spawn")


def run_real(fn, args=(), nprocs: int = 2, backend: str = "gloo", timeout: float = 60) -> list:
    """Run fn(rank, torch.distributed, *args) in nprocs processes on real torch.distributed; per-rank results.

    Ranks rendezvous on 127.0.0.1 at a free port. `timeout` (seconds) bounds the whole run, start-up included;
    past it every process is terminated and RealRunTimeout names the ranks still running. A rank that raises
    stops the run at once (RealRankFailed with its traceback). Results travel back pickled, tensors on the CPU.
    backend="nccl" runs rank r on CUDA device r and needs a GPU per rank: without them, NoGPUs at once.
    """
    require_torch()
    if nprocs < 1:
        raise SimcommError(f"nprocs must be at least 1, got {nprocs}")
    check_gpus(backend, nprocs)
    try:
        fn_args = pickle.dumps((fn, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickling errors come in many types
        raise SimcommError(f"run_real needs a picklable fn and args (a module-level function), since every "
                           f"rank is a spawned process: {exc}") from None
    ctx = _context()
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, nprocs, port, backend, fn_args, results, timeout), daemon=True,
                         name=f"simcomm-real-rank-{r}") for r in range(nprocs)]
    deadline = time.monotonic() + timeout
    out: dict[int, object] = {}
    dead_since: dict[int, float] = {}
    ok = False
    try:
        for p in procs:
            p.start()
        while len(out) < nprocs:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in range(nprocs) if r not in out]
                raise RealRunTimeout(f"real torch.distributed run ({backend}, {nprocs} ranks) did not finish within "
                                     f"{timeout:g} s: rank{'s' if len(missing) > 1 else ''} "
                                     f"{', '.join(map(str, missing))} still running; all processes terminated")
            try:
                rank, status, payload = results.get(timeout=min(0.25, left))
            except queue_mod.Empty:
                now = time.monotonic()
                for r, p in enumerate(procs):
                    # a dead rank's message may still be in the pipe: allow a moment before calling it lost
                    if r not in out and p.exitcode is not None and now - dead_since.setdefault(r, now) > 2.0:
                        raise RealRankFailed(r, f"process exited with code {p.exitcode} without a result "
                                                "(its stderr may say why)")
                continue
            if status == "error":
                raise RealRankFailed(rank, payload)
            out[rank] = pickle.loads(payload)
        ok = True
    finally:
        _stop(procs, grace=min(10.0, max(0.0, deadline - time.monotonic())) if ok else 0.0)
        results.close()
        results.cancel_join_thread()
    return [out[r] for r in range(nprocs)]


# ---- comparing results -------------------------------------------------------------------------------------
def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "numpy") and hasattr(x, "dtype")


def _as_numpy(t):
    """A tensor's values as numpy (bfloat16 widened to float32 for values) and its bytes as unsigned ints."""
    if _is_torch(t):
        import torch
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.float().numpy(), t.view(torch.int16).numpy().view(np.uint16)
        a = t.resolve_conj().resolve_neg().numpy() if t.is_complex() else t.numpy()
    else:
        a = np.ascontiguousarray(t)
    if a.dtype == object:
        return a, None
    return a, a.reshape(-1).view(np.uint8).reshape(a.shape + (a.itemsize,)) if a.size else a.view(np.uint8)


def _abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| over elements (inf where exactly one side is NaN or the infinities differ)."""
    if a.size == 0:
        return 0.0
    if a.dtype.kind == "b":
        return float(np.any(a != b))
    if a.dtype.kind in "iu":
        return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    if a.dtype.kind == "c":
        a, b = a.view(a.real.dtype), b.view(b.real.dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a64) & np.isnan(b64)
    same = (a64 == b64) | both_nan
    with np.errstate(invalid="ignore"):
        d = np.where(same, 0.0, np.abs(a64 - b64))
    d = np.where(np.isnan(d), np.inf, d)
    return float(d.max())


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def diff(sim, real, path: str = "result") -> tuple[bool, float, list[str]]:
    """(bitwise equal, max abs diff, mismatch descriptions) between two results, walking lists/tuples/dicts."""
    mism: list[str] = []
    if _is_torch(sim) or _is_torch(real) or isinstance(sim, np.ndarray) or isinstance(real, np.ndarray):
        if type(sim) is not type(real):
            return False, math.inf, [f"{path}: {type(sim).__name__} vs {type(real).__name__}"]
        a, abits = _as_numpy(sim)
        b, bbits = _as_numpy(real)
        if a.dtype != b.dtype or a.shape != b.shape:
            return False, math.inf, [f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"]
        if abits is None:
            eq = bool(np.all(a == b))
            return eq, 0.0 if eq else math.inf, [] if eq else [f"{path}: values differ"]
        differs = (abits != bbits).reshape(a.size, -1).any(axis=1) if a.size else np.zeros(0, bool)
        md = _abs_diff(a, b)
        if differs.any():
            first = int(np.argmax(differs))
            mism.append(f"{path}: {int(differs.sum())} of {a.size} elements differ bitwise (max abs diff {md:.6g}; "
                        f"first at flat index {first}: {a.reshape(-1)[first]!r} vs {b.reshape(-1)[first]!r})")
        return not differs.any(), md, mism
    if isinstance(sim, (list, tuple)) and isinstance(real, (list, tuple)):
        if type(sim) is not type(real) or len(sim) != len(real):
            what = f"{path}: {type(sim).__name__} of {len(sim)} vs {type(real).__name__} of {len(real)}"
            return False, math.inf, [what]
        parts = [diff(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(sim, real))]
    elif isinstance(sim, dict) and isinstance(real, dict):
        if set(sim) != set(real):
            return False, math.inf, [f"{path}: keys {sorted(map(repr, sim))} vs {sorted(map(repr, real))}"]
        parts = [diff(sim[k], real[k], f"{path}[{k!r}]") for k in sim]
    elif isinstance(sim, float) and isinstance(real, float):
        eq = _float_bits(sim) == _float_bits(real)
        md = 0.0 if eq or (sim == real) or (math.isnan(sim) and math.isnan(real)) else abs(sim - real)
        md = math.inf if math.isnan(md) else md
        return eq, md, [] if eq else [f"{path}: {sim!r} vs {real!r}"]
    else:
        try:
            eq = bool(sim == real) and type(sim) is type(real)
        except Exception:  # noqa: BLE001 - objects with odd __eq__
            eq = False
        return eq, 0.0 if eq else math.inf, [] if eq else [f"{path}: {sim!r} vs {real!r}"]
    eq = all(p[0] for p in parts)
    md = max((p[1] for p in parts), default=0.0)
    return eq, md, [m for p in parts for m in p[2]]


def bitwise_equal(a, b) -> bool:
    """True when two results (tensors, arrays, numbers, nested lists/tuples/dicts) are bitwise identical."""
    return diff(a, b)[0]


@dataclass
class RankComparison:
    rank: int
    equal: bool  # bitwise
    max_abs_diff: float
    mismatches: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """simcomm's per-rank results next to real torch.distributed's, compared bitwise."""

    simulated: list
    real: list
    ranks: list[RankComparison]
    backend: str = "gloo"
    simulated_time: float | None = None  # seconds on the simulated clock

    @property
    def equal(self) -> bool:
        return all(r.equal for r in self.ranks)

    @property
    def max_abs_diff(self) -> float:
        return max((r.max_abs_diff for r in self.ranks), default=0.0)

    def mismatches(self) -> list[str]:
        return [f"rank {r.rank}: {m}" for r in self.ranks for m in r.mismatches]

    def assert_equal(self) -> None:
        if not self.equal:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        head = (f"simcomm vs real {self.backend}, {len(self.ranks)} ranks: "
                + ("bitwise equal" if self.equal else f"DIFFERENT (max abs diff {self.max_abs_diff:.6g})"))
        lines = [head]
        for r in self.ranks:
            lines.append(f"  rank {r.rank}: " + ("equal" if r.equal else f"differs, max abs diff {r.max_abs_diff:.6g}"))
            lines.extend(f"    {m}" for m in r.mismatches[:10])
            if len(r.mismatches) > 10:
                lines.append(f"    ... {len(r.mismatches) - 10} more")
        return "\n".join(lines)


class _OnSimcomm:
    """fn(rank, simcomm.distributed, *args) as a simcomm.spawn rank function (picklable, unlike a closure)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, rank, *args):
        from .. import distributed
        return self.fn(rank, distributed, *args)


def run_simulated(fn, args=(), nprocs: int = 2, cluster="cpu-host", **spawn_kwargs):
    """fn(rank, simcomm.distributed, *args) on simcomm with gloo numerics; the SpawnResult."""
    from ..distributed.spawn import spawn
    spawn_kwargs.setdefault("numerics", "gloo")
    return spawn(_OnSimcomm(fn), args=tuple(args), nprocs=nprocs, cluster=cluster, **spawn_kwargs)


def compare(fn, args=(), nprocs: int = 2, cluster="cpu-host", timeout: float = 60, **spawn_kwargs) -> Comparison:
    """Run fn(rank, dist, *args) on simcomm (numerics="gloo") and on real gloo; compare per-rank results bitwise.

    Returns a Comparison: `.equal`, `.max_abs_diff`, per-rank `.ranks`, `.mismatches()`, both result lists.
    """
    require_torch()
    sim = run_simulated(fn, args, nprocs, cluster, **spawn_kwargs)
    real = run_real(fn, args, nprocs, backend="gloo", timeout=timeout)
    ranks = []
    for r, (s, x) in enumerate(zip(sim.results, real)):
        eq, md, mism = diff(s, x, "result")
        ranks.append(RankComparison(r, eq, md, mism))
    return Comparison(sim.results, real, ranks, "gloo", sim.elapsed)
