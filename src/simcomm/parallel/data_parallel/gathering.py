"""How ZeRO-3 / FSDP (optim_grads_params) gathers a stage's parameters, each framework's way.

A *use* is compute that needs one unit's parameters whole: a unit's forward, its recomputation, its backward.
`Gathering` is what the frameworks users run do with them (defaults from their code; the configuration's
FSDP and DeepSpeed knobs override them):

- units: torchtitan wraps every transformer block with FSDP2's `fully_shard`, and the embedding and the final
  norm with the output layer as units of their own; Megatron-FSDP's units are its TransformerLayers, the
  embedding and output layer belong to the root; DeepSpeed ZeRO-3 hooks every module that owns parameters (the
  norms, QKV, the projection, FC1, FC2), and keeps modules under `stage3_param_persistence_threshold`
  parameters whole on every rank (never gathered).
- which uses gather (`plan`): a unit not held is gathered; after a use it is freed unless used again at once (a
  recomputed block's backward follows its recomputation, inside one FSDP pre-backward gather), unless the
  forward keeps it (`reshard_after_forward: false`; torchtitan keeps its output unit, FSDP2 its root), or, in
  DeepSpeed, unless the next use is within `stage3_max_reuse_distance` parameters. torchtitan under pipeline
  parallelism neither reshards after a backward nor reduces gradients until the last micro-batch's
  (torch.distributed.pipelining's FSDP path).
- when a gather may start (`release`): FSDP2 (and Megatron-FSDP) one unit ahead (forward and backward prefetch:
  the gather of unit k starts once unit k - 1 computes); DeepSpeed prefetches the next modules while fewer than
  `stage3_prefetch_bucket_size` parameters are in flight, and never holds more than
  `stage3_max_live_parameters`. No framework prefetches across passes.
- gradients: reduce-scattered as each unit's backward ends (FSDP2 one per unit; DeepSpeed in buckets of
  `reduce_bucket_size`, the configuration's bucket_size, default 500M elements), in the reduce dtype
  (TrainingConfig.grad_bytes), on the same communicator (and so NCCL stream) as the gathers.

Read by the step model (timing.py's Zero3Timing) and the memory accounting (model/memory.py's
zero3_gathered_parameters, through `peak_gathered`). The numeric store (zero.py) gathers per use and frees after
it whatever the framework: when parameters move changes time and memory, not values.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from ..model.layer import Linear, Pointwise, decoder_layer

EMBEDDING, OUTPUT = -1, -2  # the unit ids of the embedding and the output layer (decoder layers: their index)


@dataclass(frozen=True)
class Use:
    """Compute needing `unit` whole: (layer, module) with module '' for a whole block; layer -1 the embedding, -2
    the output layer. `position`: where in its pass (part index + fraction of that part)."""

    unit: tuple
    params: float
    phase: str  # forward | recompute | backward
    position: float = 0.0

    @property
    def kind(self) -> str:
        return "embedding" if self.unit[0] == EMBEDDING else "output" if self.unit[0] == OUTPUT else "layer"


@dataclass(frozen=True)
class Gathering:
    """A framework's ZeRO-3 semantics (see the module docstring)."""

    framework: str
    modules: bool  # DeepSpeed's per-module units (else whole blocks)
    reshard_after_forward: bool  # decoder-layer units
    kept_after_forward: frozenset = field(default_factory=frozenset)  # unit kinds kept from forward to backward
    forward_prefetch: int = 1  # units ahead
    backward_prefetch: int = 1
    prefetch_params: float | None = None  # DeepSpeed: parameters prefetched ahead (replaces the unit counts)
    max_live: float | None = None  # DeepSpeed: gathered parameters resident at most
    reuse_distance: float | None = None  # DeepSpeed: keep a unit whose next use is within this many parameters
    persistent_below: float = 0.0  # units with fewer parameters are never sharded
    sync_each_microbatch: bool = True  # else (torchtitan under PP) only the last micro-batch reduces and reshards
    reduce_bucket: float | None = None  # parameters per gradient reduce-scatter (None: one per unit's backward)

    # ---- which uses gather, which free -------------------------------------------------------------------
    def plan(self, uses: list[Use], following: list[Use] = (), held=frozenset(), last_backward: bool = True):
        """(gathers, frees, held after): for each use, whether its unit must be gathered before it and whether it
        is freed after it; `held` the units gathered before the pass; `following` the uses of the rank's next
        pass (DeepSpeed's reuse distance looks past this one); `last_backward` whether a backward pass is the
        step's last for its chunk (only that one reshards and reduces under torchtitan's PP)."""
        seq = list(uses) + list(following)
        nxt = _next_uses(seq)
        gathers, frees, now = [], [], set(held)
        for i, u in enumerate(uses):
            if self.persistent(u):
                gathers.append(False)
                frees.append(False)
                continue
            gathers.append(u.unit not in now)
            now.add(u.unit)
            free = not self._keeps(seq, i, nxt[i], last_backward)
            if free:
                now.discard(u.unit)
            frees.append(free)
        return gathers, frees, frozenset(now)

    def persistent(self, u: Use) -> bool:
        return u.params < self.persistent_below

    def _keeps(self, seq: list[Use], i: int, nxt: int | None, last_backward: bool) -> bool:
        """Whether use i keeps its unit gathered after it (`nxt`: the index of the unit's next use in `seq`)."""
        u = seq[i]
        if self.reuse_distance is not None:  # DeepSpeed: by the parameters used before the next use
            if nxt is None:
                return False
            between = {x.unit: x.params for x in seq[i + 1:nxt] if not self.persistent(x)}
            return sum(between.values()) <= self.reuse_distance
        if nxt == i + 1 and seq[nxt].phase == "backward" and u.phase == "recompute":
            return True  # FSDP's pre-backward gather serves the recomputation and the backward
        if u.phase == "forward":
            return not self.reshard_after_forward if u.kind == "layer" else \
                (u.kind in self.kept_after_forward or not self.reshard_after_forward)
        if u.phase == "backward":
            return not (last_backward or self.sync_each_microbatch)
        return False

    # ---- when each gather may start ----------------------------------------------------------------------
    def release(self, uses: list[Use], gathers: list[bool]) -> list[int]:
        """For each use, the index of the use at whose start its gather is issued (uses that do not gather:
        their own index). FSDP: the unit `prefetch` units before (counting units, not uses: a recomputed block's
        two uses are one unit); DeepSpeed: the earliest use from which at most `prefetch_params` parameters of
        gathers lie between, and from which the gathered units fit in `max_live`."""
        out = list(range(len(uses)))
        steps, k = [], -1
        for i, u in enumerate(uses):
            k += i == 0 or u.unit != uses[i - 1].unit
            steps.append(k)
        backward = any(u.phase != "forward" for u in uses)
        depth = self.backward_prefetch if backward else self.forward_prefetch
        for i in range(len(uses)):
            if not gathers[i]:
                continue
            if self.prefetch_params is None:
                j = bisect_left(steps, steps[i] - depth)  # the first use of the unit `depth` before (steps ascend)
            else:
                j, ahead = i, 0.0
                while j > 0 and ahead + (uses[j].params if gathers[j] and j != i else 0.0) < self.prefetch_params:
                    ahead += uses[j].params if gathers[j] and j != i else 0.0
                    j -= 1
            if self.max_live is not None:
                while j < i and sum(uses[x].params for x in range(j, i + 1) if gathers[x] or x == j) > self.max_live:
                    j += 1
            out[i] = j
        return out

    # ---- memory ------------------------------------------------------------------------------------------
    def peak_gathered(self, passes: list[list[Use]]) -> float:
        """The most parameters gathered at once over a sequence of passes (a micro-batch's forward and
        backward): the units held, those in use and those prefetched."""
        peak, held = 0.0, frozenset()
        for n, uses in enumerate(passes):
            nxt = passes[n + 1] if n + 1 < len(passes) else []
            gathers, frees, after = self.plan(uses, nxt, held)
            rel = self.release(uses, gathers)
            live = {u: p for u, p in _params(uses).items() if u in held}
            for i, u in enumerate(uses):
                for k in range(i, len(uses)):  # gathers issued by now for this use and the ones ahead
                    if gathers[k] and rel[k] <= i:
                        live[uses[k].unit] = uses[k].params
                peak = max(peak, sum(live.values()))
                if frees[i]:
                    live.pop(u.unit, None)
            held = after
        return peak


def _next_uses(seq: list[Use]) -> list[int | None]:
    """For each use, the index of the next use of its unit in `seq` (None: none)."""
    out: list[int | None] = [None] * len(seq)
    later: dict = {}
    for i in range(len(seq) - 1, -1, -1):
        out[i] = later.get(seq[i].unit)
        later[seq[i].unit] = i
    return out


def _params(uses: list[Use]) -> dict:
    return {u.unit: u.params for u in uses}


DEEPSPEED = {"stage3_prefetch_bucket_size": 50_000_000, "stage3_max_live_parameters": 1_000_000_000,
             "stage3_max_reuse_distance": 1_000_000_000, "stage3_param_persistence_threshold": 100_000,
             "reduce_bucket_size": 500_000_000}  # deepspeed/runtime/zero/config.py defaults


def gathering(config) -> Gathering:
    """The configuration's ZeRO-3 semantics: its framework's defaults, overridden by the knobs it gives."""
    c, pp = config, config.pipeline_model_parallel_size
    if c.framework == "deepspeed":
        pick = {k: getattr(c, k) if getattr(c, k) is not None else v for k, v in DEEPSPEED.items()
                if k != "reduce_bucket_size"}
        return Gathering("deepspeed", True, True, frozenset(), prefetch_params=pick["stage3_prefetch_bucket_size"],
                         max_live=pick["stage3_max_live_parameters"],
                         reuse_distance=pick["stage3_max_reuse_distance"],
                         persistent_below=pick["stage3_param_persistence_threshold"],
                         reduce_bucket=c.bucket_size or DEEPSPEED["reduce_bucket_size"])
    fwd = 1 if c.forward_prefetch is None else c.forward_prefetch
    bwd = 1 if c.backward_prefetch is None else c.backward_prefetch
    if c.framework == "torchtitan":  # reshard_after_forward_policy: default = not pp_enabled, always, never
        reshard = pp == 1 if c.reshard_after_forward is None else c.reshard_after_forward
        kept = frozenset() if c.reshard_after_forward else frozenset({"output"})
        return Gathering("torchtitan", False, reshard, kept, fwd, bwd, sync_each_microbatch=pp == 1,
                         reduce_bucket=c.bucket_size)
    reshard = True if c.reshard_after_forward is None else c.reshard_after_forward
    return Gathering("megatron", False, reshard, frozenset({"embedding", "output"}), fwd, bwd,
                     reduce_bucket=c.bucket_size)


def layer_modules(shape) -> list[tuple[str, float]]:
    """DeepSpeed's units of one decoder layer on one GPU, in forward order: (module, parameters) of the norms
    and the linear layers (their biases with add_bias_linear)."""
    c, out = shape.model, []
    bias = c.add_bias_linear
    for op in decoder_layer(shape):
        if isinstance(op, Linear):
            out.append((op.name, float(op.n * op.k + (op.n if bias else 0))))
        elif isinstance(op, Pointwise) and op.op_class == "norm":
            out.append((op.name, float(c.hidden_size * (2 if c.normalization == "LayerNorm" else 1))))
    return out


def unit_uses(g: Gathering, layer: int, params: float, phase: str, position: float, modules=None,
              fractions=None) -> list[Use]:
    """The uses of one part of a pass: the whole unit (blocks, the embedding, the output layer), or a layer's
    modules in the order the phase runs them (DeepSpeed), each at its fraction of the part (`fractions`: module
    -> fraction, else 0), scaled so that their parameters add up to the layer's."""
    if not g.modules or layer < 0 or not modules:
        return [Use((layer, ""), params, phase, position)]
    total = sum(p for _, p in modules)
    order = modules if phase != "backward" else modules[::-1]
    frac = fractions or {}
    return [Use((layer, name), p * params / total, phase, position + frac.get(name, 0.0)) for name, p in order]


def pass_uses(g: Gathering, layout, rank: int, chunk: int, phase: str, params: dict, fractions=None) -> list[Use]:
    """The uses of units in a pass (Layout.pass_parts), in compute order; `params` the stage's parameters by part
    (model.memory.stage_parameters); `fractions(part index)` where each module of a layer part starts in it."""
    modules = layer_modules(layout.layer_shape) if g.modules else None
    out = []
    for i, (layer, _program, ph) in enumerate(layout.pass_parts(rank, chunk, phase)):
        n = params["embedding"] if layer == EMBEDDING else params["output"] if layer == OUTPUT else \
            layout.layer_params
        out += unit_uses(g, layer, n, ph, i, modules, fractions(i) if fractions and modules else None)
    return out


__all__ = ["DEEPSPEED", "EMBEDDING", "OUTPUT", "Gathering", "Use", "gathering", "layer_modules", "pass_uses",
           "unit_uses"]
