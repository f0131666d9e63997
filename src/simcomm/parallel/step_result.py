"""What a simulated training step reports: step time, where the time went, throughput, MFU/HFU and memory.

Breakdown (per pipeline stage, of its first GPU's compute stream from the step's start to its end; the
categories add up to the step time): forward, backward and recompute (kernels running), tp and cp (the compute
stream waiting on tensor- or context-parallel communication), pp (a blocking send in flight, or waiting for an
activation or gradient whose transfer has started), dp (waiting on gradient reduction, parameter gathers, the
tied-embedding all-reduce), optimizer, and bubble (idle: waiting for work that has not been produced yet, and
for the slowest stage at the step's end), and interference (how much longer kernels and communication took for
sharing the GPU: engine/sharing.py; listed only when it is modelled). The headline breakdown is the mean over
stages.

MFU = model FLOPs per step / (step time x GPUs x peak); HFU also counts the FLOPs recomputation executes
(Korthikanti et al. 2022 section 6.3). The model FLOPs formula and the peak are named in the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..units import format_size

CATEGORIES = ("forward", "backward", "recompute", "tp", "cp", "ep", "pp", "dp", "optimizer", "bubble",
              "interference")
LABELS = {"forward": "forward", "backward": "backward", "recompute": "recompute", "tp": "exposed TP comm",
          "cp": "exposed CP comm", "ep": "exposed EP comm (MoE dispatch/combine)", "pp": "exposed PP comm",
          "dp": "exposed DP comm", "optimizer": "optimizer",
          "bubble": "pipeline bubble", "interference": "compute/comm interference"}


@dataclass
class StepResult:
    layout: object
    step_time: float
    stages: list[dict[str, float]]  # per pipeline rank: category -> seconds
    memory: list  # StageMemory per pipeline rank
    model_flops: float  # per step, all GPUs
    hardware_flops: float
    world: int
    peak: float  # flop/s per GPU
    formula: str
    tokens: int  # per step
    device: str
    notes: list[str] = field(default_factory=list)
    traffic: dict = field(default_factory=dict)
    passes: dict = field(default_factory=dict)  # per stage: its forward and backward passes' seconds
    finish: list = field(default_factory=list)  # per stage: when its last work (the optimizer, gathers) ended
    interference: bool = False  # compute and communication shared the GPUs (the breakdown lists its cost)
    simulation: object = field(default=None, repr=False, compare=False)  # the engine it ran on (its records)
    moe: dict = field(default_factory=dict)  # MoE models: router, experts, dispatch/combine, imbalance
    copies: object = field(default=None, repr=False, compare=False)  # step_trace.RankCopies: who stands for whom
    bubbles: list = field(default_factory=list, repr=False, compare=False)  # per stage: its (start, end) waits

    @property
    def categories(self) -> tuple[str, ...]:
        """The breakdown's categories: ep only for a mixture of experts, interference only where modelled."""
        moe = getattr(getattr(self.layout, "model", None), "is_moe", False)
        return tuple(k for k in CATEGORIES if (k != "ep" or moe) and (k != "interference" or self.interference))

    @property
    def breakdown(self) -> dict[str, float]:
        n = len(self.stages)
        return {k: sum(s[k] for s in self.stages) / n for k in self.categories}

    @property
    def tflops_per_gpu(self) -> float:
        return self.model_flops / self.step_time / self.world / 1e12

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_time * self.world * self.peak)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_time * self.world * self.peak)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.step_time

    @property
    def bubble_fraction(self) -> float:
        return self.breakdown["bubble"] / self.step_time

    @property
    def peak_memory(self) -> float:
        return max(m.peak for m in self.memory)

    def as_dict(self) -> dict:
        """The `step` object of `simcomm run --json` (SI units: seconds, bytes, flop/s)."""
        worst = max(self.memory, key=lambda m: m.peak)
        return {
            "layout": self.layout.describe(), "step_time": self.step_time,
            "tflops_per_gpu": self.tflops_per_gpu, "hardware_tflops_per_gpu": self.hardware_flops / self.step_time
            / self.world / 1e12, "mfu": self.mfu, "hfu": self.hfu, "tokens_per_second": self.tokens_per_second,
            "flops_formula": self.formula, "peak_flops_per_gpu": self.peak, "device": self.device,
            "model_flops_per_step": self.model_flops, "hardware_flops_per_step": self.hardware_flops,
            "breakdown": self.breakdown,
            "breakdown_per_stage": [{k: s[k] for k in self.categories} for s in self.stages],
            "bubble_fraction": self.bubble_fraction,
            "memory": {"peak": worst.peak, "capacity": worst.capacity, "fits": all(m.fits for m in self.memory),
                       "worst_stage": worst.rank, "categories": dict(worst.categories),
                       "per_stage": [m.as_dict() for m in self.memory]},
            "passes": self.passes, "traffic": self.traffic, "notes": list(self.notes),
            **({"moe": self.moe} if self.moe else {}),
        }

    def summary_rows(self) -> list[tuple]:
        """(category, seconds, share) for the report."""
        return [(LABELS[k], v, v / self.step_time) for k, v in self.breakdown.items()]

    def memory_rows(self) -> list[tuple]:
        cats = list(self.memory[0].categories)
        return [(f"stage {m.rank} (GPU {m.gpu})", *[format_size(m.categories[c]) for c in cats],
                 format_size(m.peak), f"{m.peak / m.capacity:.0%}", m.in_flight) for m in self.memory]
