"""Numeric training's compute time: each operation the numeric GPT runs is charged the seconds the step model gives
the same kernel (the layer's one description, model/layer.py -> its programs, model/programs.py -> the fitted
ComputeModel), so the same layer costs the same compute time on both paths.

Charges are by kernel name as the programs list them ('qkv', 'qkv.dgrad', 'final_norm', ...; 'attention' and
'attention.backward' for core attention's kernels together, which ring attention charges a 1/cp share of per
block). They accumulate until the rank's next communication, which queues them on its device (rank_comm.py).
The numeric GPT has no dropout, so its layer is described without (whatever the model config says); recomputation
is charged (the recomputed forward or core attention before a layer's backward) but not executed: it would give
the same numbers.
"""
from __future__ import annotations

import dataclasses

from .compute_model import ComputeModel
from .model import programs
from .model.layer import CoreAttention, decoder_layer
from .model.moe.ops import expert_routing

_TABLES: dict = {}  # (shape, device figures, fp8) -> kernel name -> seconds


class KernelCharges:
    """The kernels of a layout's layer on one simulated device, and the seconds charged and not yet queued."""

    PROGRAMS = (programs.layer_forward, programs.layer_backward, programs.embedding_forward,
                programs.embedding_backward, programs.output_forward, programs.output_backward)

    def __init__(self, layout, device):
        self.layout = layout
        model = layout.model.with_overrides(attention_dropout=0.0, hidden_dropout=0.0)
        shape = dataclasses.replace(layout.layer_shape, model=model)
        precision, fp8 = layout.config.precision, layout.config.fp8_format is not None
        self.cm = ComputeModel(device, precision, fp8=fp8)
        key = (shape, device.name, device.compute_rate, device.memory_bandwidth, precision, fp8)
        if key not in _TABLES:
            _TABLES[key] = _table(shape, self.cm)
        self.table = _TABLES[key]
        self.moe_kernels, self.moe_rows = {}, 0
        if model.is_moe:  # an MoE layer's kernels (the MLP's; attention's are the dense layer's)
            moe = dataclasses.replace(layout.moe_layer_shape, model=model)
            self.moe_kernels = {k.name.split("[")[0]: k for program in (programs.layer_forward, programs.layer_backward)
                                for step in program(moe) for k in step.compute}
            # the rows the programs' expert kernels were sized for (the busiest EP rank's)
            self.moe_rows = expert_routing(moe.sp_tokens, model, moe.ep, moe.etp, moe.routing).received
        self.pending = 0.0

    def charge(self, name: str, share: float = 1.0) -> None:
        self.pending += self.table[name] * share

    def charge_moe(self, name: str, counts=None) -> None:
        """An MoE layer's kernel `name`; its expert GEMMs and activation at `counts`, the rows each local expert
        really computes (the step model sizes them by the routing it is given)."""
        k = self.moe_kernels[name]
        if counts is not None and k.kind == programs.GROUPED_GEMM:
            k = dataclasses.replace(k, shape=(tuple(int(n) for n in counts),) + k.shape[1:])
        elif counts is not None and k.kind == programs.GEMM:  # one GEMM per expert
            wgrad = name.endswith(".wgrad")
            self.pending += sum(self.cm.gemm(*((k.shape[0], k.shape[1], int(m)) if wgrad else
                                               (int(m), k.shape[1], k.shape[2]))) for m in counts if m)
            return
        elif counts is not None:  # the activation: its bytes in proportion to the rows
            k = dataclasses.replace(k, shape=(k.shape[0] * float(sum(counts)) / max(self.moe_rows, 1),) + k.shape[1:])
        self.pending += self.cm.kernel(k)

    def recompute(self, position: int) -> None:
        """What recomputation reruns before the backward of the layer at `position` in its chunk."""
        rerun = self.layout.recomputes(position)
        if rerun:
            self.pending += self.table["layer.forward" if rerun == "full" else "layer.selective"]

    def take(self) -> float:
        seconds, self.pending = self.pending, 0.0
        return seconds


def _table(shape, cm: ComputeModel) -> dict[str, float]:
    out = {}
    for program in KernelCharges.PROGRAMS:
        for step in program(shape):
            for k in step.compute:
                out[k.name] = cm.kernel(k)
    att = next(op for op in decoder_layer(shape) if isinstance(op, CoreAttention))
    out["attention"] = sum(cm.kernel(k) for k in programs.attention_kernels(shape, att, backward=False))
    out["attention.backward"] = sum(cm.kernel(k) for k in programs.attention_kernels(shape, att, backward=True))
    out["layer.forward"] = sum(cm.kernel(k) for step in programs.layer_forward(shape) for k in step.compute)
    out["layer.selective"] = sum(cm.kernel(k) for step in programs.selective_recompute(shape) for k in step.compute)
    return out


__all__ = ["KernelCharges"]
