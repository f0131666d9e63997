"""The mixture-of-experts settings, with Megatron-Core's names, defaults and checks, and which layers are MoE.

`MoEFields` are the MoE fields of a TransformerConfig (Megatron-Core: num_moe_experts, moe_router_topk, ...): an
MoE layer reads them, and the model's `swiglu`, from the model config; `check_moe` is their rules.
"""
from __future__ import annotations

import ast
import dataclasses
import math
from dataclasses import dataclass

from ..errors import ModelConfigError

# What Megatron accepts for moe_router_load_balancing_type, and the ones modelled here.
LOAD_BALANCING_TYPES = ("aux_loss", "seq_aux_loss", "none")
_MEGATRON_ONLY = ("global_aux_loss", "sinkhorn")
# Megatron's names for the losses its tracker logs (per load-balancing type), and the z-loss.
LOSS_NAMES = {"aux_loss": "load_balancing_loss", "seq_aux_loss": "seq_load_balancing_loss"}
Z_LOSS = "z_loss"


@dataclass(frozen=True, kw_only=True)
class MoEFields:
    """The MoE fields of a model config, Megatron-Core's names and defaults (shared/reference/moe.md section 1):
    the TransformerConfig has them (num_moe_experts None: a dense model)."""

    num_moe_experts: int | None = None
    moe_ffn_hidden_size: int | None = None  # None: the model's ffn_hidden_size
    moe_router_topk: int = 2
    moe_shared_expert_intermediate_size: int | None = None  # total width of the shared experts
    moe_shared_expert_gate: bool = False  # sigmoid(x . g) scales the shared experts' output (Qwen2-MoE)
    moe_router_score_function: str = "softmax"  # or "sigmoid"
    moe_router_pre_softmax: bool = False  # softmax over all experts before top-k (else over the k chosen)
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    moe_router_topk_scaling_factor: float | None = None
    moe_router_enable_expert_bias: bool = False
    moe_router_bias_update_rate: float = 1e-3
    moe_router_load_balancing_type: str | tuple[str, ...] = "aux_loss"
    moe_aux_loss_coeff: float | tuple[float, ...] = 0.0
    moe_z_loss_coeff: float | None = None
    moe_expert_capacity_factor: float | None = None  # None: dropless
    moe_pad_expert_input_to_capacity: bool = False
    moe_token_drop_policy: str = "probs"  # or "position"
    moe_layer_freq: int | tuple[int, ...] | str = 1


MOE_FIELDS = tuple(f.name for f in dataclasses.fields(MoEFields))


def normalise_moe(c) -> None:
    """Lists as tuples (the config stays hashable) and moe_layer_freq parsed, on a frozen dataclass `c`."""
    for name in ("moe_router_load_balancing_type", "moe_aux_loss_coeff"):
        if isinstance(getattr(c, name), list):
            object.__setattr__(c, name, tuple(getattr(c, name)))
    object.__setattr__(c, "moe_layer_freq", parse_moe_layer_freq(c.moe_layer_freq))


def _whole(name: str, v, minimum: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ModelConfigError(f"{name} must be a whole number >= {minimum}, got {v!r}", name)


def _number(name: str, v, positive: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or \
            (positive and v == 0):
        raise ModelConfigError(f"{name} must be a {'positive' if positive else 'non-negative'} number, got {v!r}", name)


def check_moe(c) -> None:
    """Megatron-Core's rules for the MoE fields of `c` (a TransformerConfig with num_moe_experts set)."""
    E, k = c.num_moe_experts, c.moe_router_topk
    _whole("num_moe_experts", E)
    _whole("moe_ffn_hidden_size", c.moe_ffn_hidden_size)
    _whole("moe_router_topk", k)
    if k > E:
        raise ModelConfigError(f"moe_router_topk {k} is more than num_moe_experts {E}", "moe_router_topk")
    if c.moe_shared_expert_intermediate_size is not None:
        _whole("moe_shared_expert_intermediate_size", c.moe_shared_expert_intermediate_size)
    elif c.moe_shared_expert_gate:
        raise ModelConfigError("moe_shared_expert_gate needs moe_shared_expert_intermediate_size (a shared expert)",
                               "moe_shared_expert_gate")
    _check_router(c, E, k)
    _check_balancing(c)
    _check_capacity(c)


def _check_router(c, E: int, k: int) -> None:
    if c.moe_router_score_function not in ("softmax", "sigmoid"):
        raise ModelConfigError(f"moe_router_score_function must be softmax or sigmoid, got "
                               f"{c.moe_router_score_function!r}", "moe_router_score_function")
    if k == 1 and c.moe_router_score_function == "softmax" and not c.moe_router_pre_softmax:
        # Megatron's rule: a softmax over one chosen expert is 1 and passes no gradient to the router
        raise ModelConfigError("moe_router_topk 1 with softmax scores needs moe_router_pre_softmax=True",
                               "moe_router_topk")
    if c.moe_router_enable_expert_bias and c.moe_router_score_function != "sigmoid":
        raise ModelConfigError("moe_router_enable_expert_bias (aux-loss-free balancing) needs "
                               "moe_router_score_function sigmoid, as in Megatron-Core")
    _number("moe_router_bias_update_rate", c.moe_router_bias_update_rate)
    if c.moe_router_topk_scaling_factor is not None:
        _number("moe_router_topk_scaling_factor", c.moe_router_topk_scaling_factor, positive=True)
    groups, group_topk = c.moe_router_num_groups, c.moe_router_group_topk
    if group_topk is None:
        return
    if groups is None:
        raise ModelConfigError("moe_router_group_topk needs moe_router_num_groups (group-limited routing)",
                               "moe_router_group_topk")
    _whole("moe_router_num_groups", groups)
    _whole("moe_router_group_topk", group_topk)
    if E % groups or group_topk > groups or k % group_topk or k > group_topk * (E // groups):
        raise ModelConfigError(
            f"group-limited routing needs num_moe_experts ({E}) divisible by moe_router_num_groups ({groups}), "
            f"moe_router_group_topk ({group_topk}) <= moe_router_num_groups, moe_router_topk ({k}) divisible by "
            f"moe_router_group_topk and at most the experts of the chosen groups ({group_topk * (E // groups)})")


def aux_loss_coeffs(c) -> dict[str, float]:
    """Each load-balancing type with its coefficient (Megatron's get_aux_loss_coeff), "none" left out."""
    types, coeffs = c.moe_router_load_balancing_type, c.moe_aux_loss_coeff
    if isinstance(types, str):
        return {} if types == "none" else {types: coeffs}
    return {t: a for t, a in zip(types, coeffs) if t != "none"}


def _check_balancing(c) -> None:
    types, coeffs = c.moe_router_load_balancing_type, c.moe_aux_loss_coeff
    listed = (types,) if isinstance(types, str) else types
    if not isinstance(types, str) and (isinstance(coeffs, (int, float)) or len(coeffs) != len(types)):
        raise ModelConfigError("a list of moe_router_load_balancing_type needs a list of moe_aux_loss_coeff of the "
                               f"same length, got {list(types)} and {coeffs!r}")
    for t in listed:
        if t in _MEGATRON_ONLY:
            raise ModelConfigError(f"moe_router_load_balancing_type {t!r} is not modelled; expected one of "
                                   f"{', '.join(LOAD_BALANCING_TYPES)}")
        if t not in LOAD_BALANCING_TYPES:
            raise ModelConfigError(f"moe_router_load_balancing_type must be one of {', '.join(LOAD_BALANCING_TYPES)}, "
                                   f"got {t!r}")
    for a in (coeffs,) if isinstance(coeffs, (int, float)) else coeffs:
        _number("moe_aux_loss_coeff", a)
    if c.moe_z_loss_coeff is not None:
        _number("moe_z_loss_coeff", c.moe_z_loss_coeff)


def _check_capacity(c) -> None:
    if c.moe_token_drop_policy not in ("probs", "position"):
        raise ModelConfigError(f"moe_token_drop_policy must be probs or position, got {c.moe_token_drop_policy!r}",
                               "moe_token_drop_policy")
    if c.moe_expert_capacity_factor is not None:
        _number("moe_expert_capacity_factor", c.moe_expert_capacity_factor, positive=True)
    elif c.moe_pad_expert_input_to_capacity:
        raise ModelConfigError("moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor",
                               "moe_pad_expert_input_to_capacity")


def get_capacity(num_tokens: int, num_experts: int, capacity_factor: float) -> int:
    """Rows each expert may take: ceil(num_tokens / num_experts * capacity_factor), num_tokens counting every
    (token, chosen expert) pair (Megatron's get_capacity, called with T * topk)."""
    return math.ceil(num_tokens / num_experts * capacity_factor)


# ---- which layers are MoE ------------------------------------------------------------------------------------
def parse_moe_layer_freq(value) -> int | tuple[int, ...]:
    """moe_layer_freq as Megatron's --moe-layer-freq takes it: an int N, a list of 0/1, or the text of either
    ("4", "[1,0,1,0]", "([0]*3+[1]*58)": list literals, + and * only; nothing is evaluated)."""
    if isinstance(value, str):
        try:
            value = _list_expression(ast.parse(value.strip(), mode="eval").body)
        except (SyntaxError, ValueError) as e:
            raise ModelConfigError(f"moe_layer_freq {value!r} is not an int or a list expression such as "
                                   f"'([0]*3+[1]*58)' ({e})") from None
    if isinstance(value, (list, tuple)):
        if not value or any(isinstance(v, bool) or v not in (0, 1) for v in value):
            raise ModelConfigError(f"moe_layer_freq as a list must hold only 0 (dense) and 1 (MoE), got {list(value)}")
        return tuple(int(v) for v in value)
    _whole("moe_layer_freq", value)
    return value


def _list_expression(node):
    """The value of an int / list literal built with + and * (the only forms Megatron's examples use)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_list_expression(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _list_expression(node.left), _list_expression(node.right)
        if isinstance(node.op, ast.Add) and isinstance(left, list) == isinstance(right, list):
            return left + right
        if isinstance(node.op, ast.Mult) and isinstance(left, list) != isinstance(right, list):
            return left * right
    raise ValueError(f"unexpected {ast.unparse(node)!r}")


def moe_layer_pattern(moe_layer_freq, num_layers: int) -> tuple[bool, ...]:
    """Which of the num_layers layers are MoE: layer i when i % N == 0 for an int N (Megatron's 1:N ratio), or
    as the list says (its length must be num_layers)."""
    freq = parse_moe_layer_freq(moe_layer_freq)
    if isinstance(freq, int):
        return tuple(i % freq == 0 for i in range(num_layers))
    if len(freq) != num_layers:
        raise ModelConfigError(f"moe_layer_freq lists {len(freq)} layers but the model has num_layers {num_layers}",
                               "moe_layer_freq")
    return tuple(bool(v) for v in freq)
