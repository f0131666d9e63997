"""Pipeline stages in the step model: one simpy process per pipeline rank, walking its schedule's actions.

A forward (backward) waits for its activation (gradient) from the neighbouring virtual stage, runs its pass on
the compute stream (Session.compute, tagged), cut where a part must wait for its parameters, and sends its output
over the real network (blocking, as Megatron-LM's p2p is, unless overlap_p2p_comm). Each StageTiming owns its time
breakdown (step_result.CATEGORIES): the kernels of its passes (forward, backward, recompute, and the TP and CP
communication they leave exposed, and how much longer they took for sharing the GPU: interference), pp (a blocking send in flight, or waiting for an activation or gradient
already on the wire), dp (waiting for parameters), bubble (waiting for work not yet produced); the step adds
what follows the schedule (step_cost.py). Not modelled: the rendezvous of NCCL p2p (a send starts when its data
is ready).
"""
from __future__ import annotations

from ...engine import IDLE_KERNEL, Mix
from ..step_result import CATEGORIES
from .schedules import FORWARD


class Pipeline:
    """What the stages share: activations and gradients in flight between virtual stages, and the passes they
    ran (for the trace)."""

    def __init__(self, layout, session, traffic, passes: dict, dp, activation_bytes: float):
        self.layout, self.session, self.traffic, self.passes, self.dp = layout, session, traffic, passes, dp
        self.env = session.env
        self.activation_bytes = activation_bytes
        dims = layout.dims
        self.ranks = [dims.ranks(pp=r, dp=0).reshape(-1) for r in range(dims.pp)]  # one replica of each stage
        self.arrivals: dict = {}  # (phase, microbatch, virtual stage) -> [event, time its transfer started]
        # (rank, action, pass, its compute jobs as (first part, end part, progress)), in the order the passes ended
        self.instances: list = []
        self._mixes: dict = {}
        self.stages = [StageTiming(self, r) for r in range(dims.pp)]

    def arrival(self, key) -> list:
        if key not in self.arrivals:
            self.arrivals[key] = [self.env.event(), None]
        return self.arrivals[key]

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
        actions = pipeline.layout.schedule[rank]
        self.last_backward = {c: max(i for i, a in enumerate(actions) if a.phase != FORWARD and a.chunk == c)
                              for c in range(pipeline.layout.chunks)}

    def schedule(self):
        """Every action of the rank's schedule, in order."""
        layout, dp = self.p.layout, self.p.dp
        last_vs = layout.virtual_stages - 1
        for i, a in enumerate(layout.schedule[self.rank]):
            forward = a.phase == FORWARD
            vs = a.chunk * layout.dims.pp + self.rank
            deps = []
            if forward and vs > 0:
                deps.append(self.p.arrival(("F", a.microbatch, vs)))
            if not forward and vs < last_vs:
                deps.append(self.p.arrival(("B", a.microbatch, vs)))
            yield from self._wait(deps)
            p = self.p.passes[(self.rank, a.chunk, "F" if forward else "B")]
            tags = {"stage": self.rank, "microbatch": a.microbatch, "chunk": a.chunk,
                    "phase": "forward" if forward else "backward"}
            if not forward:
                dp.on_backward(self.rank, a, p, i == self.last_backward[a.chunk])
            yield from self._run_pass(a, p, tags)
            nxt = vs + 1 if forward else vs - 1
            if 0 <= nxt <= last_vs:
                op = self._send(("F" if forward else "B", a.microbatch, nxt), tags)
                if not layout.config.overlap_p2p_comm:  # Megatron's p2p blocks the sender
                    t = self.env.now
                    yield op
                    self.acc["pp"] += self.env.now - t

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

    def _run_pass(self, a, p, tags):
        """The pass on the compute stream, cut where a part must wait for its parameters."""
        env, dp = self.env, self.p.dp
        cut = dp.before_pass(self.rank, a, p)
        i, starts, jobs = 0, [], []
        while i < len(p.parts):
            dep = cut.get(i)
            if dep is not None:
                t = env.now
                yield env.all_of(dep)
                self.acc["dp"] += env.now - t
            j = i + 1
            while j < len(p.parts) and j not in cut:
                j += 1
            secs = sum(x.template.duration for x in p.parts[i:j])
            t0 = env.now
            starts += [t0 + x.offset - p.parts[i].offset for x in p.parts[i:j]]
            op = self.session.compute(self.ranks, seconds=secs, tags={**tags, "annotation": "pass"}, label=_label(a),
                                      kernels=self.p.mix(p, i, j) if self.session.sim.interference else None)
            yield op
            jobs.append((i, j, op.progress))
            self.acc["interference"] += (env.now - t0) - secs  # slowed by communication beside it
            if self.after_part is not None:
                for x, s in zip(p.parts[i:j], starts[i:j]):
                    self.after_part(self.rank, a, x, s)
            i = j
        for k, v in p.breakdown.items():
            self.acc[k] += v
        self.p.instances.append((self.rank, a, p, jobs))

    def idle(self, start: float, seconds: float) -> None:
        """The stage waited `seconds` from `start` for work not yet produced (the bubble)."""
        self.acc["bubble"] += seconds
        if seconds > 0:
            self.bubbles.append((start, start + seconds))

    def _send(self, key, tags):
        """The pass's output to the next virtual stage (its previous one for a gradient), arriving at `key`."""
        op = self.p.traffic.send(self.ranks, self.p.ranks[key[2] % self.p.layout.dims.pp], self.p.activation_bytes,
                                 tags={"axis": "pp", **tags})
        slot = self.p.arrival(key)
        slot[1] = self.env.now
        op.callbacks.append(lambda _e, ev=slot[0]: ev.succeed())
        return op


def _label(a) -> str:
    return f"{'F' if a.phase == FORWARD else 'B'}{a.microbatch}" + (f" chunk {a.chunk}" if a.chunk else "")


__all__ = ["Pipeline", "StageTiming"]
