"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both take class scores ``[N, C, d1, ...]`` and integer targets ``[N, d1, ...]``,
optional per-class weights, an ``ignore_index`` whose targets contribute
nothing, and a ``reduction`` of none, sum or mean (mean divides by the total
weight of the targets that were not ignored).
"""

from __future__ import annotations

import numpy as np

from .linalg import accumulate_dtype
from .registry import OpContext, OutSpec, register_op

_REDUCTIONS = ("none", "sum", "mean")


def _reduction(ctx: OpContext) -> str:
    reduction = ctx.attr("reduction", "mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
    if reduction not in _REDUCTIONS:
        raise ctx.fail(f"reduction '{reduction}' is not one of {', '.join(_REDUCTIONS)}")
    return reduction


def _loss_shape(ctx: OpContext) -> tuple[int, ...]:
    scores, target = ctx.inputs[0], ctx.inputs[1]
    assert scores is not None and target is not None
    if len(scores.shape) < 2 or scores.shape[1] == 0:
        raise ctx.fail(f"scores must be [N, C, ...] with at least one class, got shape {list(scores.shape)}")
    weight = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if weight is not None and tuple(weight.shape) != (scores.shape[1],):
        raise ctx.fail(f"weight of shape {list(weight.shape)} must hold one value per class: [{scores.shape[1]}]")
    expected = scores.shape[:1] + scores.shape[2:]
    if tuple(target.shape) != expected:
        raise ctx.fail(f"target shape {list(target.shape)} should be {list(expected)} for scores {list(scores.shape)}")
    return expected if _reduction(ctx) == "none" else ()


def negative_log_likelihood(
    ctx: OpContext, log_prob: np.ndarray, target: np.ndarray, weight: np.ndarray | None
) -> np.ndarray:
    """The reduced NLL loss of ``log_prob`` (computed in its accumulation dtype)."""
    acc = log_prob.dtype
    ignore_index = ctx.attr("ignore_index")
    classes = log_prob.shape[1]
    keep = np.ones(target.shape, dtype=bool) if ignore_index is None else target != int(ignore_index)
    # Ignored targets may be out of range; any valid index stands in for them.
    safe_target = np.where(keep, target, 0).astype(np.int64)
    if np.any((safe_target < 0) | (safe_target >= classes)):
        raise ctx.fail(f"a target is outside the class range [0, {classes}) and is not ignore_index")
    picked = np.take_along_axis(log_prob, np.expand_dims(safe_target, 1), axis=1).squeeze(1)
    w = np.ones(target.shape, dtype=acc) if weight is None else weight.astype(acc)[safe_target]
    w = np.where(keep, w, 0).astype(acc)
    loss = -picked * w
    reduction = _reduction(ctx)
    if reduction == "sum":
        return np.asarray(loss.sum())
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(loss.sum() / w.sum())
    return loss


def _nll_infer(ctx: OpContext) -> list[OutSpec]:
    scores = ctx.inputs[0]
    assert scores is not None
    return [(scores.dtype, _loss_shape(ctx))]


@register_op("NegativeLogLikelihoodLoss", infer=_nll_infer)
def negative_log_likelihood_loss(
    ctx: OpContext, x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None
) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    loss = negative_log_likelihood(ctx, x.astype(acc, copy=False), target, weight)
    return loss.astype(x.dtype)


def _sce_infer(ctx: OpContext) -> list[OutSpec]:
    scores = ctx.inputs[0]
    assert scores is not None
    specs = [(scores.dtype, _loss_shape(ctx))]
    if len(ctx.node.outputs) > 1:
        specs.append((scores.dtype, scores.shape))
    return specs


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@register_op("SoftmaxCrossEntropyLoss", infer=_sce_infer)
def softmax_cross_entropy_loss(
    ctx: OpContext, scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    acc = accumulate_dtype(scores.dtype)
    log_prob = log_softmax(scores.astype(acc, copy=False), axis=1)
    loss = negative_log_likelihood(ctx, log_prob, labels, weights).astype(scores.dtype)
    if len(ctx.node.outputs) > 1:
        return loss, log_prob.astype(scores.dtype)
    return loss
