"""The layers of a GPT-style decoder as numpy functions, each with its hand-written backward.

Conventions: activations are [sequence, batch, hidden] (Megatron's layout, so sequence-parallel and context-
parallel splits are splits of the leading axis); a linear layer is y = x @ w + b with w of shape (in, out).
Every function also runs on size-only tensors (shapes only) and counts its GEMM FLOPs (2 m k n per matmul, as
the cost model does) in a `Flops` counter, which the rank program charges as simulated compute time.
Backward functions accumulate weight gradients in place (`dw += ...`), as autograd does into `.grad`.
"""
from __future__ import annotations

import math

import numpy as np

from .tensor import Meta, as_meta, is_meta

LAYERNORM_EPS = 1e-5
_GELU_K = math.sqrt(2.0 / math.pi)


class Flops:
    """GEMM FLOPs counted since the last `take()` (and in total)."""

    def __init__(self):
        self.pending = 0.0
        self.total = 0.0

    def gemm(self, m: int, k: int, n: int, times: int = 1) -> None:
        f = 2.0 * m * k * n * times
        self.pending += f
        self.total += f

    def take(self) -> float:
        f, self.pending = self.pending, 0.0
        return f


def _rows(x) -> int:
    return math.prod(x.shape[:-1])


# ---- linear ----------------------------------------------------------------------------------------------
def linear(x, w, b=None, fl: Flops | None = None):
    """y = x @ w (+ b); x [..., in], w [in, out]."""
    if fl is not None:
        fl.gemm(_rows(x), w.shape[0], w.shape[1])
    if is_meta(x, w):
        return Meta(x.shape[:-1] + (w.shape[1],), x.dtype)
    y = x @ w
    if b is not None:
        y += b
    return y


def linear_backward(x, w, dy, dw, db=None, need_dx: bool = True, fl: Flops | None = None):
    """Adds x^T dy to dw (and dy summed over rows to db); returns dx = dy @ w^T (or None)."""
    if fl is not None:
        fl.gemm(_rows(x), w.shape[0], w.shape[1], times=2 if need_dx else 1)
    if is_meta(x, w, dy):
        return as_meta(x) if need_dx else None
    x2, dy2 = x.reshape(-1, w.shape[0]), dy.reshape(-1, w.shape[1])
    dw += x2.T @ dy2
    if db is not None:
        db += dy2.sum(axis=0)
    return dy @ w.T if need_dx else None


# ---- layer norm ------------------------------------------------------------------------------------------
def layernorm(x, w, b, eps: float = LAYERNORM_EPS):
    """LayerNorm over the last axis; returns (y, cache)."""
    if is_meta(x):
        return as_meta(x), None
    xc = x - x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    xhat = xc * rstd
    return xhat * w + b, (xhat, rstd)


def layernorm_backward(dy, cache, w, dw, db):
    """Adds to dw, db; returns dx."""
    if cache is None:
        return as_meta(dy)
    xhat, rstd = cache
    axes = tuple(range(dy.ndim - 1))
    dw += (dy * xhat).sum(axis=axes)
    db += dy.sum(axis=axes)
    g = dy * w
    return rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))


# ---- GELU (tanh approximation, as GPT-2 and Megatron's fused bias-GELU) -----------------------------------
def gelu(x):
    """Returns (y, cache)."""
    if is_meta(x):
        return as_meta(x), None
    t = np.tanh(_GELU_K * (x + 0.044715 * x ** 3))
    return 0.5 * x * (1.0 + t), (x, t)


def gelu_backward(dy, cache):
    if cache is None:
        return as_meta(dy)
    x, t = cache
    du = _GELU_K * (1.0 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


# ---- sigmoid and SwiGLU (Megatron's gated linear unit with SiLU) ---------------------------------------------
def sigmoid(x):
    """1 / (1 + exp(-x)), written with tanh so that no exponential overflows."""
    if is_meta(x):
        return as_meta(x)
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def swiglu(x):
    """silu(a) * b where [a | b] are the two halves of x's last axis (Megatron's glu: torch.chunk(x, 2) then
    F.silu on the first); returns (y, cache), y half as wide as x."""
    if is_meta(x):
        return Meta(x.shape[:-1] + (x.shape[-1] // 2,), x.dtype), None
    a, b = np.split(x, 2, axis=-1)
    sig = sigmoid(a)
    return a * sig * b, (a, b, sig)


def swiglu_backward(dy, cache):
    """dx [..., 2f] for dy [..., f]."""
    if cache is None:
        return Meta(dy.shape[:-1] + (2 * dy.shape[-1],), dy.dtype)
    a, b, sig = cache
    return np.concatenate([dy * b * sig * (1.0 + a * (1.0 - sig)), dy * a * sig], axis=-1)


# ---- embeddings ------------------------------------------------------------------------------------------
def embedding(ids, weight, start: int = 0):
    """Rows `ids - start` of weight ([..., h]); ids outside [start, start + rows) give zeros (a vocabulary
    shard's lookup, Megatron's VocabParallelEmbedding). Returns (out, cache)."""
    if is_meta(ids, weight):
        return Meta(tuple(ids.shape) + (weight.shape[1],), weight.dtype), None
    local = ids - start
    inside = (local >= 0) & (local < weight.shape[0])
    local = np.where(inside, local, 0)
    out = weight[local]
    out[~inside] = 0
    return out, (local, inside)


def embedding_backward(dout, cache, dweight) -> None:
    """Scatter-adds dout's rows into dweight (in index order, so runs are deterministic)."""
    if cache is None:
        return
    local, inside = cache
    np.add.at(dweight, local[inside], dout[inside])


# ---- attention -------------------------------------------------------------------------------------------
def attention_block(q, k, v, q_pos, k_pos, scale: float, fl: Flops | None = None):
    """Softmax attention of queries q [s, b, heads, d] over keys/values k, v [t, b, groups, d] (grouped-query:
    head j uses group j // (heads / groups)), causal by position (a query at position p sees keys at <= p).

    Returns (o, lse): o [s, b, heads, d] normalised over this block's keys, and lse [s, b, heads] the log of the
    softmax denominator (-inf where a query sees no key of this block). Blocks combine with `merge_attention`.
    """
    s, b, nh, d = q.shape
    t, _, ng, _ = k.shape
    if fl is not None:
        fl.gemm(s * b * nh, d, t, times=2)  # scores, and probabilities times values
    if is_meta(q, k, v):
        return Meta((s, b, nh, d), q.dtype), Meta((s, b, nh), q.dtype)
    scores = _scores(q, k, q_pos, k_pos, scale)
    m = scores.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(scores - m)
    total = e.sum(axis=-1)  # [b, g, r, s]
    o = np.einsum("bgrst,tbgd->sbgrd", e, v).reshape(s, b, nh, d)
    total_sbh = _to_sbh(total)
    o /= np.where(total_sbh > 0, total_sbh, 1.0)[..., None]
    with np.errstate(divide="ignore"):
        lse = np.where(total_sbh > 0, _to_sbh(m[..., 0]) + np.log(total_sbh), -np.inf)
    return o, lse


def attention_block_backward(q, k, v, q_pos, k_pos, scale: float, lse, do, delta, fl: Flops | None = None):
    """Gradients (dq, dk, dv) of one block given the final lse of every query over all blocks, the output
    gradient do [s, b, heads, d] and delta = sum(do * o, axis=-1) [s, b, heads] (o the final output)."""
    s, b, nh, d = q.shape
    t, _, ng, _ = k.shape
    if fl is not None:
        fl.gemm(s * b * nh, d, t, times=5)  # recomputed scores, dv, dp, dq, dk
    if is_meta(q, k, v, do):
        return as_meta(q), as_meta(k), as_meta(v)
    r = nh // ng
    p = np.exp(_scores(q, k, q_pos, k_pos, scale) - _from_sbh(lse, ng)[..., None])
    do5 = do.reshape(s, b, ng, r, d)
    dv = np.einsum("bgrst,sbgrd->tbgd", p, do5)
    dp = np.einsum("sbgrd,tbgd->bgrst", do5, v)
    ds = p * (dp - _from_sbh(delta, ng)[..., None])
    dq = np.einsum("bgrst,tbgd->sbgrd", ds, k).reshape(s, b, nh, d) * scale
    dk = np.einsum("bgrst,sbgrd->tbgd", ds, q.reshape(s, b, ng, r, d)) * scale
    return dq, dk, dv


def merge_attention(o1, lse1, o2, lse2):
    """Combine two blocks' normalised outputs by their log-sum-exps (the online softmax of ring attention)."""
    if is_meta(o1, o2):
        return as_meta(o1), as_meta(lse1)
    lse = np.logaddexp(lse1, lse2)
    finite = np.isfinite(lse)
    safe = np.where(finite, lse, 0.0)
    w1 = np.where(finite, np.exp(lse1 - safe), 0.0)
    w2 = np.where(finite, np.exp(lse2 - safe), 0.0)
    return o1 * w1[..., None] + o2 * w2[..., None], lse


def _scores(q, k, q_pos, k_pos, scale):
    """Scaled q.k [b, groups, heads per group, s, t], -inf where the key is in the query's future."""
    s, b, nh, d = q.shape
    ng = k.shape[2]
    scores = np.einsum("sbgrd,tbgd->bgrst", q.reshape(s, b, ng, nh // ng, d), k) * scale
    allowed = np.asarray(q_pos)[:, None] >= np.asarray(k_pos)[None, :]
    return np.where(allowed, scores, -np.inf)


def _to_sbh(x):
    """[b, g, r, s] -> [s, b, g * r]."""
    b, g, r, s = x.shape
    return x.reshape(b, g * r, s).transpose(2, 0, 1)


def _from_sbh(x, groups: int):
    """[s, b, heads] -> [b, groups, heads per group, s]."""
    s, b, nh = x.shape
    return x.transpose(1, 2, 0).reshape(b, groups, nh // groups, s)


def attention_delta(do, o):
    """sum(do * o) over the head dimension: [s, b, heads]."""
    if is_meta(do, o):
        return Meta(do.shape[:-1], do.dtype)
    return (do * o).sum(axis=-1)


# ---- cross-entropy over a vocabulary split across ranks ------------------------------------------------------
def vocab_parallel_cross_entropy(logits, targets, start: int, all_reduce):
    """Per-token loss -log softmax(logits)[target], with logits [s, b, V_local] holding vocabulary entries
    [start, start + V_local) (Megatron's vocab-parallel cross-entropy). all_reduce(x, op) combines per-token
    values over the ranks that hold the rest of the vocabulary ("max" then "sum" twice; identity for one rank).
    Returns (loss [s, b], cache)."""
    if is_meta(logits):
        m = all_reduce(Meta(logits.shape[:-1], logits.dtype), "max")
        all_reduce(Meta(logits.shape[:-1], logits.dtype), "sum")
        all_reduce(Meta(logits.shape[:-1], logits.dtype), "sum")
        return as_meta(m), None
    m = all_reduce(logits.max(axis=-1), "max")
    z = logits - m[..., None]
    local = targets - start
    inside = (local >= 0) & (local < logits.shape[-1])
    local = np.where(inside, local, 0)
    target_z = np.take_along_axis(z, local[..., None], axis=-1)[..., 0] * inside
    target_z = all_reduce(target_z, "sum")
    e = np.exp(z)
    total = all_reduce(e.sum(axis=-1), "sum")
    return np.log(total) - target_z, (e / total[..., None], local, inside)


def vocab_parallel_cross_entropy_backward(dloss, cache):
    """dlogits [s, b, V_local] for per-token loss gradients dloss [s, b]."""
    if cache is None:
        return None
    softmax, local, inside = cache
    grad = softmax.copy()
    onehot = np.zeros_like(grad)
    np.put_along_axis(onehot, local[..., None], inside[..., None].astype(grad.dtype), axis=-1)
    grad -= onehot
    return grad * dloss[..., None]
