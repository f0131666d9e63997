"""Pipeline stages in the step model: one simpy process per pipeline rank, walking its schedule's actions.

A forward (a backward, or its input half I) waits for its activation (gradient) from the neighbouring stage, runs
its pass on the compute stream (Session.compute, tagged), cut where a part must wait for its parameters, and sends
its output over the real network (blocking, as Megatron-LM's p2p is, unless overlap_p2p_comm); a weight pass (W)
waits for nothing; DualPipe's overlapped pair runs as its forward, then its backward, or interleaved
(pair_timing.py, overlapped_pair.py). Each StageTiming owns its time
breakdown (step_result.CATEGORIES): the kernels of its passes (forward, backward, recompute, and the TP and CP
communication they leave exposed, and how much longer they took for sharing the GPU: interference), pp (a blocking
send in flight or waiting for its receiver, or waiting for an activation or gradient already on the wire), dp
(waiting for parameters; the last stage's per-micro-batch loss all-reduce), bubble (waiting for work not yet
produced); the step adds what follows the schedule (step_cost.py).

What a send pays besides its bytes:
- the NCCL rendezvous (p2p_rendezvous): a send's transfer starts only once the receiver has posted the matching
  receive, where Megatron's schedules post it: batched with the receiver's previous send (send_forward_recv_backward
  and the like) when the receiver's previous action is of the other phase, or in the interleaved schedule; when
  the receiver has finished its previous send otherwise (1F1B's warm-up and cool-down); one action ahead with
  overlap_p2p_comm (and for the interleaved schedule's backwards, posted with the iteration's forward's).
- Megatron's scatter/gather (scatter_gather_tensors_in_pipeline, without sequence parallelism): each TP rank sends
  1/t of the activation and the receiving stage all-gathers it over its TP group before using it.
- on the last stage, Megatron's loss_func averages each micro-batch's loss over the data-parallel group (a blocking
  4-byte all-reduce between the forward and the backward; step_collectives).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...engine import IDLE_KERNEL, Mix
from ..step_result import CATEGORIES
from .actions import FORWARD, INPUT_GRADIENT, PHASE_NAMES, WEIGHT_GRADIENT, computations
from .overlapped_pair import slowed
from .pair_timing import OverlappedPairs


# The schedules whose p2p follows Megatron-LM's (blocking, batched exchanges; receives posted by posted_with);
# frameworks.MEGATRON_SCHEDULES are those Megatron-LM offers (GPipe is not one).
MEGATRON_P2P_SCHEDULES = ("1f1b", "interleaved_1f1b", "gpipe")


class Pipeline:
    """What the stages share: activations and gradients in flight between virtual stages, and the passes they
    ran (for the trace)."""

    def __init__(self, layout, session, traffic, passes: dict, dp, activation_bytes: float):
        self.layout, self.session, self.traffic, self.passes, self.dp = layout, session, traffic, passes, dp
        self.env = session.env
        self.activation_bytes = activation_bytes
        self.send_size = send_bytes(layout, activation_bytes)  # (bytes per TP rank, scattered and gathered)
        self._gathers: dict = {}  # a stage -> the TP groups that all-gather what it receives scattered
        dims = layout.dims
        self.ranks = [_frozen(dims.ranks(pp=r, dp=0)) for r in range(dims.pp)]  # one replica of each stage
        self.placement = layout.placement
        self.arrivals: dict = {}  # (F | B, microbatch, rank, chunk it is for) -> [event, time its transfer started]
        self.posted: dict = {}  # the same keys -> event: its receive is posted
        # (rank, action, pass, its compute jobs as (first part, end part, progress)), in the order the passes ended
        self.instances: list = []
        self._mixes: dict = {}
        self._spans: dict = {}
        self.stages = [StageTiming(self, r) for r in range(dims.pp)]

    def arrival(self, key) -> list:
        if key not in self.arrivals:
            self.arrivals[key] = [self.env.event(), None]
        return self.arrivals[key]

    def post(self, key):
        """The event of the receive of `key` being posted (the rendezvous a send waits for)."""
        if key not in self.posted:
            self.posted[key] = self.env.event()
        return self.posted[key]

    def gather_groups(self, stage: int) -> list:
        """The TP groups of a stage (one per CP rank) that all-gather a scattered activation it receives."""
        got = self._gathers.get(stage)
        if got is None:
            dims = self.layout.dims
            got = self._gathers[stage] = [dims.ranks(pp=stage, dp=0, cp=c).reshape(-1) for c in range(dims.cp)]
        return got

    def span(self, p, x, y) -> float:
        """_span(p, x, y), worked out once per pass and cut (a step runs each pass many times)."""
        key = (id(p), x, y)
        got = self._spans.get(key)
        if got is None:
            got = self._spans[key] = _span(p, x, y)
        return got

    def mix(self, p, i: int, j: int) -> Mix | None:
        """What parts i..j-1 of pass p are made of (their templates' kernels and idle waits), for the engine to
        slow them by the communication that runs beside them."""
        key = (id(p), i, j)
        got = self._mixes.get(key)
        if got is None:
            weights, kernels = [], []
            for x in p.parts[i:j]:
                mix = x.template.mix
                if mix is None:
                    weights.append(x.template.duration)
                    kernels.append(IDLE_KERNEL)
                else:
                    weights.extend((mix.weights * x.template.duration).tolist())
                    kernels.extend(mix.kernels)
            got = self._mixes[key] = Mix(weights, kernels) if sum(weights) > 0 else None
        return got


class StageTiming:
    """One pipeline rank: the process that runs its schedule, and its time breakdown."""

    def __init__(self, pipeline: Pipeline, rank: int):
        self.p, self.rank = pipeline, rank
        self.env, self.session = pipeline.env, pipeline.session
        self.ranks = pipeline.ranks[rank]
        self.acc = {k: 0.0 for k in CATEGORIES}
        self.bubbles: list[tuple[float, float]] = []  # when it waited for work not yet produced
        dp = pipeline.dp
        self.after_part = dp.after_part if dp.acts_after_parts else None  # called for every part: only if it acts
        self.plan = rank_plan(pipeline.layout, rank)
        self.actions, self.receives, self.outputs = self.plan.actions, self.plan.receives, self.plan.outputs
        self.action_tags = [self.tags(a) for a in self.actions]
        self.pass_tags = [({**t, "annotation": "pass"}, _label(a)) for t, a in zip(self.action_tags, self.actions)]
        self.pairs = OverlappedPairs(self, pipeline.layout.schedule[rank])  # ... unless they interleave
        self.last_backward = {c: max(i for i, a in enumerate(self.actions) if a.phase in WEIGHT_GRADIENT and
                                     a.chunk == c) for c in range(pipeline.layout.chunks)}

    def schedule(self):
        """Every action of the rank's schedule, in order: each waits for its input from the neighbouring stage
        (where the layout's placement puts it), runs, and sends its output on. A send waits for its receive
        (p2p_rendezvous): Megatron's schedules post receives as posted_with says; torch.distributed.pipelining's
        (zero bubble, V, DualPipe, looped BFS) issue their irecvs ahead, so every receive is posted at the start."""
        layout, dp, plan = self.p.layout, self.p.dp, self.plan
        cfg, actions, receives = layout.config, self.actions, self.receives
        defers, deferred = cfg.p2p_rendezvous and plan.interleaved and plan.steady and not cfg.overlap_p2p_comm, []
        if not plan.megatron:
            self._post(*(k for k in receives if k is not None))
        for i, a in enumerate(actions):
            forward = a.phase == FORWARD
            key = receives[i]
            if key is not None:
                self._post(key)  # a blocking recv of its own, unless posted with an earlier action
            when, ahead = plan.posts[i]
            # an interleaved pair runs both its passes at its forward (index i); its backward (i + 1) has run then
            together, ran = self.pairs.together(i), self.pairs.ran(i)
            if together:
                b = actions[i + 1]
                yield from self._wait([self.p.arrival(k) for k in (key, receives[i + 1]) if k is not None])
                dp.on_backward(self.rank, b, self.pairs.pass_of(b), i + 1 == self.last_backward[b.chunk])
                yield from self.pairs.run(a, b)
            elif not ran:
                yield from self._wait([self.p.arrival(key)] if key is not None else [])
            p = self.p.passes[(self.rank, a.chunk, a.phase)]
            tags = self.action_tags[i]
            if a.phase in WEIGHT_GRADIENT and not ran:
                dp.on_backward(self.rank, a, p, i == self.last_backward[a.chunk])
            if when == "start":
                self._post(*ahead)
            if not (together or ran):
                yield from self._run_pass(a, p, *self.pass_tags[i])
            to = self.outputs[i]
            if forward and to is None:
                yield from self._loss_all_reduce(tags)
            if when == "end":
                self._post(*ahead)
            sends, deferred = deferred, []
            if to is not None and to[0] == self.rank:  # the V's turn: handed to the other chunk on this GPU
                slot = self.p.arrival(plan.arrivals[i])
                slot[1] = self.env.now
                slot[0].succeed()
            elif to is not None:
                sends.append((plan.arrivals[i], tags))
            if defers and forward and i + 1 < len(actions) and actions[i + 1].phase != FORWARD or together:
                deferred, sends = sends, []  # a steady iteration's (a pair's) exchange follows its backward
            yield from self._exchange(sends)

    def tags(self, a) -> dict:
        return {"stage": self.rank, "microbatch": a.microbatch, "chunk": a.chunk, "phase": PHASE_NAMES[a.phase]}

    def _exchange(self, sends):
        """Send each (arrival key, tags); Megatron's p2p blocks the sender until they are through (unless
        overlap_p2p_comm): waiting for the receivers to post is bubble, the transfers pp."""
        ops = [self._send(k, t) for k, t in sends]
        if not ops or self.p.layout.config.overlap_p2p_comm:
            return
        t = self.env.now
        yield self.env.all_of(ops)
        began = max(self.p.arrival(k)[1] for k, _ in sends)
        waited = max(0.0, min(began, self.env.now) - t)
        self.idle(t, waited)
        self.acc["pp"] += self.env.now - t - waited

    def _post(self, *keys) -> None:
        for key in keys:
            ev = self.p.post(key)
            if not ev.triggered:
                ev.succeed(self.env.now)

    def _loss_all_reduce(self, tags):
        """Megatron's loss_func: the micro-batch's loss averaged over the data-parallel group (for logging; it
        blocks the last stage between its forward and backward)."""
        if not self.p.layout.config.step_collectives or self.p.layout.dims.dp * self.p.layout.dims.cp < 2:
            return
        t = self.env.now
        yield self.env.all_of([self.p.traffic.collective("all_reduce", g, 4, "float32",
                                                         tags={"axis": "dp", **tags, "phase": "loss"})
                               for g in self.p.dp.groups[self.rank]])
        self.acc["dp"] += self.env.now - t

    def _wait(self, deps):
        """Wait for the inputs of an action; split the wait into pipeline communication and bubble."""
        env = self.env
        t_w = env.now
        pending = [d for d in deps if not d[0].processed]
        if pending:
            yield env.all_of([d[0] for d in pending])
        t_a = env.now
        if t_a > t_w:
            sent = max((d[1] for d in deps if d[1] is not None), default=t_a)
            comm = t_a - max(sent, t_w)
            self.acc["pp"] += comm
            self.idle(t_w, (t_a - t_w) - comm)

    def _run_pass(self, a, p, tags, label):
        """The pass on the compute stream, cut where a part must wait for its parameters. The policy's cuts are
        positions in the pass (a part's index, or index + fraction within it) mapped to the events to wait for
        there, or to a function called when the compute reaches that position that returns them (it may issue
        communication then: a prefetch)."""
        env, dp = self.env, self.p.dp
        cut = dp.before_pass(self.rank, a, p)
        n = len(p.parts)
        bounds = sorted({0, *cut}) + [n]
        jobs = []
        for x, y in zip(bounds, bounds[1:]):
            dep = cut.get(x)
            if dep is not None:
                deps = dep() if callable(dep) else dep
                if deps:
                    t = env.now
                    yield env.all_of(deps)
                    self.acc["dp"] += env.now - t
            if y <= x:
                continue
            i, j = math.floor(x), math.ceil(y)
            secs = self.p.span(p, x, y)
            t0, origin = env.now, _at(p, x)
            op = self.session.compute(self.ranks, seconds=secs, tags=tags, label=label,
                                      kernels=self.p.mix(p, i, j) if self.session.sim.interference else None)
            yield op
            jobs.append((i, j, op.progress))
            took = env.now - t0
            self.acc["interference"] += slowed(took, secs)  # slowed by communication beside it
            if self.after_part is not None:
                scale = took / secs if secs > 0 else 1.0
                for k in range(i, math.floor(y)):
                    x_part = p.parts[k]
                    self.after_part(self.rank, a, x_part, t0 + (x_part.offset + x_part.template.duration - origin)
                                    * scale)
        for k, v in p.breakdown.items():
            self.acc[k] += v
        self.p.instances.append((self.rank, a, p, jobs))

    def idle(self, start: float, seconds: float) -> None:
        """The stage waited `seconds` from `start` for work not yet produced (the bubble)."""
        self.acc["bubble"] += seconds
        if seconds > 0:
            self.bubbles.append((start, start + seconds))

    def _send(self, key, tags):
        """The pass's output to the next virtual stage (its previous one for a gradient), arriving at `key`: after
        the receive is posted (p2p_rendezvous), 1/t of it per TP rank then all-gathered over the receiver's TP
        groups (scatter_gather_tensors_in_pipeline), else the whole of it from every TP rank."""
        cfg, env = self.p.layout.config, self.env
        dst = key[2]
        nbytes, scatter = self.p.send_size
        posted = self.p.post(key) if cfg.p2p_rendezvous else None
        op = self.p.traffic.send(self.ranks, self.p.ranks[dst], nbytes, after=[posted] if posted else (),
                                 tags={"axis": "pp", **tags})
        slot = self.p.arrival(key)
        slot[1] = env.now  # when the transfer starts: now, or once the receive is posted
        if posted is not None and not posted.triggered:
            posted.callbacks.append(lambda _e: slot.__setitem__(1, env.now))
        done = op
        if scatter:
            groups = self.p.gather_groups(dst)
            done = env.all_of([self.p.traffic.collective("all_gather", g, self.p.activation_bytes, cfg.act_dtype,
                                                         after=[op], tags={"axis": "tp", **tags,
                                                                           "phase": "pp_gather"})
                               for g in groups])
        done.callbacks.append(lambda _e, ev=slot[0]: ev.succeed())
        return op


class RankPlan(NamedTuple):
    """What a pipeline rank's walk reads of its schedule (the step's StageTiming and the plan's p2p_timeline)."""

    actions: list  # in order, an overlapped pair as its forward then its backward
    receives: list  # per action: the arrival it waits for, (F | B, micro-batch, this rank, its chunk), or None
    outputs: list  # per action: the (rank, chunk) its output goes to, or None (a weight pass; past either end)
    arrivals: list  # per action: the arrival its output makes there, (F | B, micro-batch, rank, chunk), or None
    posts: list  # per action: (when, the arrival keys whose receives it posts then), as posted_with says
    megatron: bool  # Megatron-LM's p2p (MEGATRON_P2P_SCHEDULES)
    interleaved: bool  # Megatron's interleaved p2p: every exchange batched
    steady: bool  # the rank has a steady phase (a backward before its last forward)


_PLANS: dict = {}


def rank_plan(layout, rank: int) -> RankPlan:
    """Rank `rank`'s RankPlan, cached by what it depends on (layouts of other batches, ZeRO stages or memory
    settings share one)."""
    overlap = layout.config.overlap_p2p_comm
    key = (layout.schedule_key, rank, overlap)
    got = _PLANS.get(key)
    if got is None:
        if len(_PLANS) >= 512:
            _PLANS.clear()
        got = _PLANS[key] = _make_plan(layout, rank, overlap)
    return got


def _make_plan(layout, r: int, overlap: bool) -> RankPlan:
    actions = list(computations(layout.schedule[r]))
    placement, chunks = layout.placement, layout.chunks
    prev = [placement.prev(r, c) for c in range(chunks)]
    nxt = [placement.next(r, c) for c in range(chunks)]
    receives, outputs, arrivals = [], [], []
    for a in actions:
        forward = a.phase == FORWARD
        source = prev[a.chunk] if forward else nxt[a.chunk] if a.phase in INPUT_GRADIENT else None
        receives.append(None if source is None else ("F" if forward else "B", a.microbatch, r, a.chunk))
        outputs.append(nxt[a.chunk] if forward else prev[a.chunk] if a.phase in INPUT_GRADIENT else None)
        arrivals.append(None if outputs[-1] is None else ("F" if forward else "B", a.microbatch, *outputs[-1]))
    megatron = layout.schedule_name in MEGATRON_P2P_SCHEDULES
    interleaved = chunks > 1 and megatron
    posts = []
    for i in range(len(actions)):
        when, ahead = posted_with(actions, i, interleaved, overlap) if megatron else ("", ())
        posts.append((when, [k for k in (receives[j] for j in ahead) if k is not None]))
    lead = next((i for i, a in enumerate(actions) if a.phase != FORWARD), len(actions))
    steady = lead < sum(a.phase == FORWARD for a in actions)  # else every forward is a warm-up one
    return RankPlan(actions, receives, outputs, arrivals, posts, megatron, interleaved, steady)


def posted_with(actions, i: int, interleaved: bool, overlap: bool) -> tuple[str, list]:
    """The receives a rank posts around action i's pass, as Megatron's schedules do: ('start', next actions, by
    index) with overlap_p2p_comm (asynchronous receives posted before the compute); ('end', next actions) when they
    are batched with action i's send (send_forward_recv_backward and the like; in the interleaved schedule every
    exchange is batched, and the one after a backward, or after the last warm-up forward, also receives the next
    backward's gradient); ('wait', []) when the next receive is a blocking call of its own after the send (1F1B's
    warm-up and cool-down)."""
    nxt = list(actions[i + 1:i + 3])
    if not nxt:
        return "wait", []
    if interleaved and len(nxt) == 2 and nxt[0].phase == FORWARD and nxt[1].phase != FORWARD:
        ahead = [i + 1, i + 2]
    else:
        ahead = [i + 1]
    if overlap:
        return "start", ahead
    if interleaved or actions[i].phase != nxt[0].phase:
        return "end", ahead
    return "wait", []


def _at(p, x) -> float:
    """Offset in pass p of position x (a part's index, or index + fraction of that part)."""
    i = math.floor(x)
    if i >= len(p.parts):
        return p.duration
    part = p.parts[i]
    return part.offset + (x - i) * part.template.duration if x != i else part.offset


def _span(p, x, y) -> float:
    """Seconds of pass p from position x to y (whole parts summed as they are, so a pass cut at parts only
    costs what its parts add up to)."""
    i, j = math.ceil(x), math.floor(y)
    whole = sum(part.template.duration for part in p.parts[i:j]) if j > i else 0.0
    if x == i and y == j:
        return whole
    if j < i:  # within one part
        return (y - x) * p.parts[j].template.duration
    head = (i - x) * p.parts[i - 1].template.duration if x != i else 0.0
    tail = (y - j) * p.parts[j].template.duration if y != j else 0.0
    return head + whole + tail


def _frozen(ranks) -> np.ndarray:
    """A read-only copy of a rank array, flat (the Session checks such an array once, not on every call)."""
    out = np.array(ranks, dtype=np.int64).reshape(-1)
    out.setflags(write=False)
    return out


def _label(a) -> str:
    return f"{a.phase}{a.microbatch}" + (f" chunk {a.chunk}" if a.chunk else "")


__all__ = ["Pipeline", "StageTiming", "slowed"]


def send_bytes(layout, activation_bytes: float) -> tuple[float, bool]:
    """(bytes each TP rank of a stage sends the next, whether Megatron scatters the activation over them and the
    receiver all-gathers it: scatter_gather_tensors_in_pipeline, without sequence parallelism)."""
    cfg, tp = layout.config, layout.dims.tp
    scatter = cfg.scatter_gather_tensors_in_pipeline and tp > 1 and not cfg.sp
    return activation_bytes / (tp if scatter else 1), scatter
