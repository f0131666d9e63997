"""Data-parallel timing in the step model: one policy per sharding scheme, hooked in at the step's seams.

The step (step_cost.py) and its pipeline stages (pipeline_parallel/timing.py) call a policy

- `start()`                         at the step's start, before any stage runs;
- `on_backward(rank, action, pass)` as a backward pass starts (the reductions its gradients trigger);
- `before_pass(rank, action, pass)` for what each part of a pass must wait for ({part index: events});
- `after_part(rank, action, part, end)`   once a part's kernels have run (`end`: when they did);
- `end(rank)`                       after the stage's last pass: the operations to wait for before the optimizer;
- `after_optimizer(rank)`           after the optimizer: the operations the step still waits for.

Every data-parallel collective of a stage runs on that stage's data-parallel groups (dp x cp, one per simulated
TP rank) in the order issued, as on one NCCL communicator's stream. Gradient buckets follow Megatron-LM's
DistributedDataParallel: per model chunk, parameters in backward order, a new bucket once one holds the layout's
bucket_size parameters (one bucket per chunk when it is None).

- DDP: buckets all-reduced as the last micro-batch's backward fills them (overlap_grad_reduce) or after the last
  backward.
- the distributed optimizer (ZeRO-1): reduce-scattered instead; parameters all-gathered at the step's start beside
  the first forwards, each bucket's layers waiting for it (overlap_param_gather), or after the optimizer.
- ZeRO-2: as ZeRO-1, but every micro-batch's gradients are reduce-scattered (none are kept whole).
- ZeRO-3 / FSDP: each unit's parameters gathered before the forward, recomputation and backward that use it
  unless still held, each gather issued when the compute reaches the unit its prefetch depth before it, its
  gradients reduce-scattered as its backward ends, the framework's way (gathering.py).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..model.memory import stage_parameters
from ..pipeline_parallel.actions import BACKWARD_WEIGHT, FORWARD
from .gathering import gathering, pass_uses
from .sharding import Sharding, sharding


@dataclass(frozen=True)
class TimedBucket:
    """A gradient bucket of one model chunk: its parameters, the offset in the backward pass at which its last
    gradient is ready, and the layers (-1 embedding, -2 output) whose gradients it holds."""

    params: float
    ready: float
    layers: tuple[int, ...]
    expert_params: float = 0.0  # of which MoE experts' (their own group: expert data parallel)


def buckets(backward, size: float | None) -> list[TimedBucket]:
    """Gradient buckets of one chunk from its backward pass, in the order the backward fills them."""
    out, acc, experts, members = [], 0.0, 0.0, []
    grads = [p for p in backward.parts if p.params > 0]
    for n, p in enumerate(grads):
        acc += p.params
        experts += p.expert_params
        members.append(p.layer)
        if (size is not None and acc >= size) or n == len(grads) - 1:
            out.append(TimedBucket(acc, p.offset + p.template.duration, tuple(members), experts))
            acc, experts, members = 0.0, 0.0, []
    return out


class DataParallelTiming:
    """The hooks (no data-parallel work) and the data-parallel streams of every stage."""

    sharding: Sharding = sharding(0)
    gradient_collective = "all_reduce"
    acts_after_parts = False  # whether after_part does anything (it is called for every part of every pass)

    def __init__(self, layout, traffic, passes: dict, representatives: list[int]):
        self.layout, self.cfg, self.traffic = layout, layout.config, traffic
        self.passes = passes
        self.sim = traffic.s.sim
        dims, pp = layout.dims, layout.dims.pp
        self.groups = [[dims.ranks(pp=r, tp=t).reshape(-1) for t in representatives] for r in range(pp)]
        # MoE experts' gradients and parameters: over each representative's expert-data-parallel group
        self.expert_groups = [[dims.group_of(int(dims.ranks(pp=r, dp=0, cp=0, tp=t)), "edp") for t in representatives]
                              for r in range(pp)]
        self.buckets = {(r, c): buckets(passes.get((r, c, "W"), passes[(r, c, "B")]), layout.bucket_size)
                        for r in range(pp) for c in range(layout.chunks)}  # from the pass that makes the gradients
        self.last = [[None] * len(representatives) for _ in range(pp)]  # the last op on each stream
        self.pending = [[] for _ in range(pp)]  # reductions the stage waits for before the optimizer
        self._bucket_kept: dict = {}  # _bucket_calls' lists, by what they are of

    # ---- the hooks -----------------------------------------------------------------------------------------
    def start(self) -> None:
        pass

    def on_backward(self, rank: int, action, pass_, last: bool) -> None:
        """A backward pass of `action` starts (`last`: the chunk's last backward of the step)."""

    def before_pass(self, rank: int, action, pass_) -> dict[int, list]:
        return {}

    def after_part(self, rank: int, action, part, end: float) -> None:
        pass

    def end(self, rank: int) -> list:
        return self.pending[rank]

    def after_optimizer(self, rank: int) -> list:
        return []

    # ---- the streams ---------------------------------------------------------------------------------------
    def collective(self, rank: int, kind: str, bytes_per_param: int, params: float, after, tags,
                   experts: bool = False) -> list:
        """`kind` over every data-parallel group of pipeline rank `rank` (experts: every expert-data-parallel
        group), after `after` and the stream's last op."""
        return self._issue(rank, self._calls(rank, kind, bytes_per_param, params, tags, experts), after)

    def _calls(self, rank: int, kind: str, bytes_per_param: int, params: float, tags, experts: bool) -> list:
        """What `collective` issues: (index of the group's representative, the collective's arguments, its tags)
        per group."""
        groups = self.expert_groups[rank] if experts else self.groups[rank]
        dtype = "float32" if bytes_per_param == 4 else self.cfg.act_dtype
        # one rank holding its experts has nothing to reduce
        return [(i, (kind, group, params * bytes_per_param, dtype), {"axis": "edp" if experts else "dp",
                                                                      "stage": rank, **tags})
                for i, group in enumerate(groups) if not (experts and len(group) == 1)]

    def _issue(self, rank: int, calls: list, after) -> list:
        """Issue `calls` (_calls') on the rank's streams, each after `after` and its stream's last op."""
        out, last = [], self.last[rank]
        for i, args, tags in calls:
            prev = last[i]
            op = last[i] = self.traffic.collective(*args, after=[*after, prev] if prev is not None else list(after),
                                                   tags=tags)
            out.append(op)
        return out

    def _bucket_calls(self, rank: int, chunk: int, kind: str, bytes_per_param: int, phase: str,
                      forward: bool = False) -> list:
        """Per bucket of a chunk, in backward order (or forward), (the bucket, its collectives' calls): its dense
        parameters over data parallel, its experts' over expert data parallel (Megatron-Core's two gradient
        buffers); the same for every micro-batch: kept."""
        key = (rank, chunk, kind, bytes_per_param, phase, forward)
        got = self._bucket_kept.get(key)
        if got is None:
            got = self._bucket_kept[key] = []
            mine = self.buckets[(rank, chunk)]
            for k, b in enumerate(reversed(mine) if forward else mine):
                tags = {"chunk": chunk, "bucket": k, "phase": phase}
                dense = self._calls(rank, kind, bytes_per_param, b.params - b.expert_params, tags, False) \
                    if b.params > b.expert_params else []
                experts = self._calls(rank, kind, bytes_per_param, b.expert_params, tags, True) \
                    if b.expert_params else []
                got.append((b, dense + experts))
        return got

    def reduce_buckets(self, rank: int, chunk: int, at=None) -> None:
        """Reduce every bucket of a chunk, bucket k at at(bucket) (a simulated time) or now."""
        pending, at_ = self.pending[rank], self.sim.at
        for b, calls in self._bucket_calls(rank, chunk, self.gradient_collective, self.cfg.grad_bytes,
                                           "grad_reduce"):
            pending += self._issue(rank, calls, [at_(at(b))] if at is not None else [])

    def gather_buckets(self, rank: int, chunk: int) -> dict:
        """All-gather every bucket's parameters of a chunk, in forward order: {bucket's layers: its ops}."""
        calls = self._bucket_calls(rank, chunk, "all_gather", self.cfg.param_bytes, "param_gather", forward=True)
        return {b.layers: self._issue(rank, mine, []) for b, mine in calls}


class DDPTiming(DataParallelTiming):
    """Buckets all-reduced as the last micro-batch's backward fills them, or after the last backward."""

    def on_backward(self, rank: int, action, pass_, last: bool) -> None:
        if last and self.cfg.overlap_grad_reduce:
            now = self.sim.now
            self.reduce_buckets(rank, action.chunk, lambda b: now + b.ready)

    def end(self, rank: int) -> list:
        if not self.cfg.overlap_grad_reduce:
            for c in range(self.layout.chunks):
                self.reduce_buckets(rank, c)
        return self.pending[rank]


class DistributedOptimizerTiming(DDPTiming):
    """ZeRO-1: buckets reduce-scattered; parameters all-gathered beside the first forwards or after the optimizer."""

    sharding = sharding(1)
    gradient_collective = "reduce_scatter"

    def __init__(self, *args):
        super().__init__(*args)
        self.gathers: dict = {}  # (rank, chunk) -> {bucket's layers: its gathers} issued at the step's start

    def start(self) -> None:
        if self.cfg.overlap_param_gather:
            for r in range(self.layout.dims.pp):
                for c in range(self.layout.chunks):
                    self.gathers[(r, c)] = self.gather_buckets(r, c)

    def before_pass(self, rank: int, action, pass_) -> dict[int, list]:
        """The first forward of each chunk waits, part by part, for its buckets' gathers."""
        cut: dict[int, list] = {}
        if action.phase != FORWARD or action.microbatch != 0:
            return cut
        for layers, ops in self.gathers.get((rank, action.chunk), {}).items():
            idx = min((i for i, x in enumerate(pass_.parts) if x.layer in layers), default=None)
            if idx is not None:
                cut.setdefault(idx, []).extend(ops)
        return cut

    def after_optimizer(self, rank: int) -> list:
        if self.cfg.overlap_param_gather:
            return []
        return [op for c in range(self.layout.chunks) for ops in self.gather_buckets(rank, c).values() for op in ops]


class Zero2Timing(DistributedOptimizerTiming):
    """ZeRO-2: as ZeRO-1, but every micro-batch's gradients are reduce-scattered as its backward makes them."""

    sharding = sharding(2)

    def on_backward(self, rank: int, action, pass_, last: bool) -> None:
        if last and not self.cfg.overlap_grad_reduce:
            return  # reduced after the last backward (end)
        now, overlap = self.sim.now, self.cfg.overlap_grad_reduce
        self.reduce_buckets(rank, action.chunk, lambda b: now + (b.ready if overlap else pass_.duration))


class Zero3Timing(DataParallelTiming):
    """ZeRO-3 / FSDP as the layout's framework runs it (gathering.py): each unit's parameters gathered before the
    uses that need them (forward, recomputation, backward), each gather issued when the compute reaches the use it
    is prefetched from, gradients reduce-scattered as each unit's backward ends, all on the data-parallel stream.
    Counts its gathers by phase (`gathers`) and the most parameters it had gathered at once (`peak_gathered`)."""

    sharding = sharding(3)
    gradient_collective = "reduce_scatter"
    acts_after_parts = True

    def __init__(self, *args):
        super().__init__(*args)
        self.g = gathering(self.cfg)
        self.held: dict = {}  # (rank, chunk) -> units gathered and not freed
        self.last_backward = [True] * self.layout.dims.pp
        self.reducing: dict = {}  # rank -> parameters whose gradients wait for a reduce-scatter
        self.pass_of: dict = {}  # rank -> (pass, its uses)
        self.gathers: Counter = Counter()  # phase of the use -> gathers issued (per simulated GPU)
        self.live = [0.0] * self.layout.dims.pp
        self.peak_gathered = 0.0
        self._fractions: dict = {}
        self._uses: dict = {}

    def on_backward(self, rank: int, action, pass_, last: bool) -> None:
        self.last_backward[rank] = last

    def uses(self, rank: int, chunk: int, phase: str) -> list:
        """The uses of units in a pass ('F', 'B' or the input gradient's 'I'), in compute order, at their
        positions (the same for every micro-batch: kept)."""
        key = (rank, chunk, phase)
        got = self._uses.get(key)
        if got is None:
            p = self.passes[key]
            got = self._uses[key] = pass_uses(self.g, self.layout, rank, chunk, phase,
                                              stage_parameters(self.layout, rank),
                                              lambda i: self._module_fractions(p.parts[i]))
        return got

    def _module_fractions(self, part) -> dict | None:
        """Where in a layer's template each module's kernels start (DeepSpeed's hooks fire there)."""
        if part.layer < 0:
            return None
        tpl = part.template
        got = self._fractions.get(tpl.name)
        if got is None:
            got = {}
            for seg in tpl.segments:
                if seg.stream == "compute":
                    got.setdefault(seg.name.split(".")[0], seg.start / tpl.duration if tpl.duration else 0.0)
            self._fractions[tpl.name] = got
        return got

    def before_pass(self, rank: int, action, pass_) -> dict:
        if action.phase == BACKWARD_WEIGHT:  # X^T dY: the weight gradient reads no weights
            return {}
        key, backward = (rank, action.chunk), action.phase != FORWARD
        uses = self.uses(rank, action.chunk, action.phase)
        following = self._following(rank, action) if self.g.reuse_distance is not None else []
        last = self.last_backward[rank] if backward else True
        gathers, frees, self.held[key] = self.g.plan(uses, following, self.held.get(key, frozenset()), last)
        release = self.g.release(uses, gathers)
        issue: dict[int, list[int]] = {}
        for k, r in enumerate(release):
            if gathers[k]:
                issue.setdefault(r, []).append(k)
        done: dict[int, list] = {}
        freed = [False] * len(uses)
        over = [0]  # the uses before this are over (freed where they free): the compute reaches positions in order
        self.pass_of[rank] = (pass_, uses, frees, freed, backward and (last or self.g.sync_each_microbatch))
        at: dict[float, list[int]] = {}
        for k, u in enumerate(uses):
            at.setdefault(u.position, []).append(k)

        def reach(indices):
            def go():
                first = indices[0]
                for k in range(over[0], first):  # uses before this position are over: free what they free
                    if frees[k] and not freed[k]:
                        freed[k] = True
                        self.live[rank] -= uses[k].params
                over[0] = max(over[0], first)
                for j in indices:
                    for k in issue.get(j, ()):
                        u = uses[k]
                        self.gathers[u.phase] += 1
                        self.live[rank] += u.params
                        done[k] = self.collective(rank, "all_gather", self.cfg.param_bytes, u.params, [],
                                                  {"chunk": action.chunk, "layer": u.unit[0], "module": u.unit[1],
                                                   "microbatch": action.microbatch, "phase": "param_gather",
                                                   "use": u.phase})
                self.peak_gathered = max(self.peak_gathered, self.live[rank])
                return [op for k in indices for op in done.get(k, ())]
            return go
        return {pos: reach(indices) for pos, indices in at.items()}

    def _following(self, rank: int, action) -> list:
        """The uses of the rank's next pass (DeepSpeed's reuse distance looks past this one)."""
        actions = self.layout.schedule[rank]
        i = actions.index(action)
        if i + 1 == len(actions):
            return []
        nxt = actions[i + 1]
        return [] if nxt.phase == BACKWARD_WEIGHT else self.uses(rank, nxt.chunk, nxt.phase)

    def after_part(self, rank: int, action, part, end: float) -> None:
        pass_, uses, frees, freed, reduce = self.pass_of[rank]
        last = part is pass_.parts[-1]
        if last:  # the pass is over: what its last uses free
            for k, u in enumerate(uses):
                if frees[k] and not freed[k]:
                    freed[k] = True
                    self.live[rank] -= u.params
        if not reduce or not part.params:
            return
        pending, bucket = self.reducing.get(rank, 0.0) + part.params, self.g.reduce_bucket
        sizes = []
        if bucket is None:
            sizes, pending = [pending], 0.0
        while bucket is not None and pending >= bucket:
            sizes.append(bucket)
            pending -= bucket
        if pending > 0 and (last or not any(x.params for x in pass_.parts[pass_.parts.index(part) + 1:])):
            sizes.append(pending)
            pending = 0.0
        for n in sizes:
            self.collective(rank, "reduce_scatter", self.cfg.grad_bytes, n, [self.sim.at(end)],
                            {"chunk": action.chunk, "layer": part.layer, "phase": "grad_reduce_scatter"})
        self.reducing[rank] = pending

    def end(self, rank: int) -> list:
        return [op for op in self.last[rank] if op is not None]


POLICIES = {0: DDPTiming, 1: DistributedOptimizerTiming, 2: Zero2Timing, 3: Zero3Timing}


def data_parallel_timing(layout, traffic, passes: dict, representatives: list[int]) -> DataParallelTiming:
    """The policy of the layout's sharding scheme."""
    return POLICIES[layout.sharding.zero_stage](layout, traffic, passes, representatives)


__all__ = ["POLICIES", "DDPTiming", "DataParallelTiming", "DistributedOptimizerTiming", "TimedBucket",
           "Zero2Timing", "Zero3Timing", "buckets", "data_parallel_timing"]
