"""Reductions, arg-reductions, cumulative scans and TopK.

The ``axes`` of the Reduce* ops moved from an attribute to an optional
second input: in opset 13 for ReduceSum, in opset 18 for the others.  Both
forms are accepted whatever the opset says, since converted models sometimes
mix them.  An empty ``axes`` reduces over everything, unless
``noop_with_empty_axes`` is set, in which case nothing is reduced but the
elementwise part still applies (ReduceSumSquare squares, ReduceL1 takes abs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .elementwise import keep, numpy_op
from .registry import OpContext, OutSpec, normalize_axis, same_as_input


def _axes_from(ctx: OpContext, rank: int, axes_input: np.ndarray | None) -> tuple[int, ...]:
    """The axes to reduce; () with noop_with_empty_axes and no axes given."""
    if axes_input is not None:
        raw = [int(a) for a in np.asarray(axes_input).reshape(-1)]
    else:
        raw = [int(a) for a in (ctx.attr("axes", None) or [])]
    if not raw:
        return () if ctx.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({normalize_axis(ctx, a, rank) for a in raw}))


def _infer_axes(ctx: OpContext) -> tuple[int, ...]:
    rank = len(ctx.input(0).shape)
    axes_input = ctx.const(1, "axes") if ctx.has_input(1) else None
    return _axes_from(ctx, rank, axes_input)


def _reduce_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.input(0)
    axes = _infer_axes(ctx)
    if ctx.attr("keepdims", 1):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [(x.dtype, shape)]


def _float(x: np.ndarray) -> np.ndarray:
    """Where a reduction needs real arithmetic (sqrt, log, mean of ints)."""
    if x.dtype.kind in "fc" and x.dtype != np.float16:
        return x
    return x.astype(np.float64 if x.dtype.kind in "iub" else np.float32)


def _lowest(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _log_sum_exp(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    x = _float(x)
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    peak = np.max(x, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0)  # all -inf rows: log(0) = -inf anyway
    total = np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True)) + peak
    return total if keepdims else np.squeeze(total, axis=axis)


# Each reducer: (x, axes, keepdims) -> result (cast back to x's dtype after).
Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]

_REDUCERS: dict[str, Reducer] = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k, dtype=x.dtype),
    "ReduceMean": lambda x, a, k: np.mean(_float(x), axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k, dtype=x.dtype),
    # Empty sets reduce to the identity of max/min: -inf/+inf (lowest/highest).
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_lowest(x.dtype)),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_highest(x.dtype)),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k, dtype=x.dtype),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(np.square(_float(x)), axis=a, keepdims=k)),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(_float(x), axis=a, keepdims=k)),
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k, dtype=x.dtype),
}


def _register_reduce(op_type: str, reducer: Reducer) -> None:
    @numpy_op(op_type, infer=_reduce_infer)
    def compute(ctx: OpContext, x: np.ndarray, axes_input: np.ndarray | None = None) -> np.ndarray:
        # numpy reduces over no axis at all for axis=(), as noop_with_empty_axes wants.
        return keep(reducer(x, _axes_from(ctx, x.ndim, axes_input), bool(ctx.attr("keepdims", 1))), x)


for _op_type, _reducer in _REDUCERS.items():
    _register_reduce(_op_type, _reducer)


# -- ArgMax / ArgMin -----------------------------------------------------------


def _arg_infer(ctx: OpContext) -> list[OutSpec]:
    shape = ctx.input(0).shape
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    if shape and shape[axis] == 0:
        raise ctx.fail(f"axis {axis} of the input {list(shape)} is empty: there is no element to pick the index of "
                       f"(check the input shapes)")
    if ctx.attr("keepdims", 1):
        return [("int64", shape[:axis] + (1,) + shape[axis + 1 :])]
    return [("int64", shape[:axis] + shape[axis + 1 :])]


def _register_arg(op_type: str, pick: Callable[..., np.ndarray]) -> None:
    @numpy_op(op_type, infer=_arg_infer)
    def compute(ctx: OpContext, x: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), x.ndim)
        keepdims = bool(ctx.attr("keepdims", 1))
        if ctx.attr("select_last_index", 0):
            # The last extremum is the first one of the reversed axis.
            index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            index = pick(x, axis=axis, keepdims=keepdims)
        return np.asarray(index, dtype=np.int64)


_register_arg("ArgMax", np.argmax)
_register_arg("ArgMin", np.argmin)


# -- CumSum / CumProd --------------------------------------------------------


def _register_scan(op_type: str, scan: Callable[..., np.ndarray], identity: int) -> None:
    @numpy_op(op_type, infer=same_as_input)
    def compute(ctx: OpContext, x: np.ndarray, axis_input: np.ndarray) -> np.ndarray:
        axis = normalize_axis(ctx, int(np.asarray(axis_input).reshape(-1)[0]), x.ndim)
        reverse = bool(ctx.attr("reverse", 0))
        data = np.flip(x, axis) if reverse else x
        out = scan(data, axis=axis, dtype=x.dtype)
        if ctx.attr("exclusive", 0) and x.shape[axis] > 0:
            # Exclusive: element i accumulates elements before i only.
            head = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([head, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
        return keep(np.flip(out, axis) if reverse else out, x)


_register_scan("CumSum", np.cumsum, 0)
_register_scan("CumProd", np.cumprod, 1)


# -- TopK ----------------------------------------------------------------------


def _topk_k(ctx: OpContext, k_input: np.ndarray | None) -> int:
    if ctx.opset < 10 or not ctx.has_input(1):  # k was an attribute before opset 10
        return int(ctx.attr("k"))
    return int(np.asarray(k_input).reshape(-1)[0])


def _topk_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.input(0)
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), len(x.shape))
    k = _topk_k(ctx, ctx.const(1, "k") if ctx.has_input(1) else None)
    if not 0 <= k <= x.shape[axis]:
        raise ctx.fail(f"k={k} is out of range for axis {axis} of size {x.shape[axis]}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return [(x.dtype, shape), ("int64", shape)]


@numpy_op("TopK", infer=_topk_infer)
def topk(ctx: OpContext, x: np.ndarray, k_input: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), x.ndim)
    k = _topk_k(ctx, k_input)
    n = x.shape[axis]
    if ctx.attr("largest", 1):
        # Descending order with ties broken by the lower index: a stable
        # ascending sort of the reversed axis, read backwards.
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, indices, axis=axis), indices
