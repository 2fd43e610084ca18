"""Indexing ops: Slice, Gather, GatherElements, GatherND and the Scatter family.

ONNX indices may be negative (counting from the end of their axis); every op
here normalizes them once and reports an out-of-range index with the node's
name instead of numpy's bare IndexError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import IndexRangeError
from .registry import OpContext, OutSpec, normalize_axis, register_op
from .tensor import int_list


def index_out_of_range(node_name: str, op_type: str, index: int, bound: int, tensor: str,
                       at: Sequence[int] | None = None) -> str:
    """How every backend reports an index outside [-bound, bound): node, op, the index, the bound,
    the indices tensor and where in it (e.g. ``Gather node 'emb' (op Gather): index 30712 out of
    range [-30522, 30522) in input 'input_ids' at [0, 5]``)."""
    where = f" at {[int(i) for i in at]}" if at is not None else ""
    return (f"{op_type} node '{node_name}' (op {op_type}): index {int(index)} out of range [-{int(bound)}, "
            f"{int(bound)}) in input '{tensor}'{where}; indices must lie in that range")


def first_out_of_range(indices: np.ndarray, bound: int) -> tuple[tuple[int, ...], int] | None:
    """(position, value) of the first index (in C order) outside [-bound, bound), or None."""
    idx = np.asarray(indices)
    if not idx.size:
        return None
    bad = (idx < -bound) | (idx >= bound)
    if not bad.any():
        return None
    flat = int(np.argmax(bad.reshape(-1)))
    at = tuple(int(i) for i in np.unravel_index(flat, idx.shape))
    return at, int(idx.reshape(-1)[flat])


def _normalized_indices(ctx: OpContext, indices: np.ndarray, dim: int, column: int | None = None) -> np.ndarray:
    """``indices`` (input 1 of the node; ``column``: its last-axis column, for index tuples) made
    non-negative; an :class:`IndexRangeError` naming node, index, bound and position otherwise."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        at, value = first_out_of_range(idx, dim)  # type: ignore[misc]
        node = ctx.node
        raise IndexRangeError(index_out_of_range(node.name or (node.outputs[0] if node.outputs else "?"),
                                                  node.op_type, value, dim, node.inputs[1],
                                                  at + ((column,) if column is not None else ())))
    return np.where(idx < 0, idx + dim, idx)


# -- Slice ------------------------------------------------------------------------


def _slice_operands(ctx: OpContext, arrays: Sequence[np.ndarray | None] | None) -> tuple[list[int], ...]:
    """(starts, ends, axes or [], steps or []) from inputs (opset >= 10) or attributes."""

    def operand(i: int, what: str) -> list[int] | None:
        if not ctx.has_input(i):
            return None
        return int_list(ctx.const(i, what) if arrays is None else arrays[i])

    if ctx.has_input(1):
        starts, ends = operand(1, "starts"), operand(2, "ends")
        axes, steps = operand(3, "axes"), operand(4, "steps")
    else:  # opset < 10 attribute form
        starts, ends = int_list(ctx.attr("starts")), int_list(ctx.attr("ends"))
        axes, steps = ctx.attr("axes"), None
        axes = None if axes is None else int_list(axes)
    return starts or [], ends or [], axes or [], steps or []


def slice_plan(ctx: OpContext, shape: tuple[int, ...],
               operands: tuple[list[int], ...]) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """Python slices per axis and the output shape, with ONNX's clamping rules."""
    starts, ends, axes, steps = operands
    rank = len(shape)
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    slices = [slice(None)] * rank
    out = list(shape)
    seen: set[int] = set()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = normalize_axis(ctx, axis, rank)
        if a in seen:
            raise ctx.fail(f"axes {axes} repeat axis {a}")
        seen.add(a)
        if step == 0:
            raise ctx.fail("a slice step is 0")
        dim = shape[a]
        # Negative positions count from the end; then clamp (INT64_MIN/MAX mean "to the edge").
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            length = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            length = max(0, -(-(start - end) // -step)) if dim else 0
        out[a] = length
        slices[a] = slice(start, end if end >= 0 else None, step)
    return tuple(slices), tuple(out)


def _infer_slice(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    return [(x.dtype, slice_plan(ctx, x.shape, _slice_operands(ctx, None))[1])]


@register_op("Slice", infer=_infer_slice)
def slice_(ctx: OpContext, x: np.ndarray, *operands: np.ndarray | None) -> np.ndarray:
    slices, _ = slice_plan(ctx, x.shape, _slice_operands(ctx, (x, *operands)))
    return x[slices].copy()


# -- Gather family -----------------------------------------------------------------------


def _infer_gather(ctx: OpContext) -> list[OutSpec]:
    data, indices = ctx.inputs[0], ctx.inputs[1]
    assert data is not None and indices is not None
    if not data.shape:
        raise ctx.fail(f"data '{ctx.node.inputs[0]}' is a scalar; Gather needs data of rank 1 or more")
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(data.shape))
    return [(data.dtype, data.shape[:axis] + indices.shape + data.shape[axis + 1 :])]


@register_op("Gather", infer=_infer_gather)
def gather(ctx: OpContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), data.ndim)
    idx = _normalized_indices(ctx, indices, data.shape[axis])
    return np.asarray(np.take(data, idx, axis=axis))


def _infer_gather_elements(ctx: OpContext) -> list[OutSpec]:
    data, indices = ctx.inputs[0], ctx.inputs[1]
    assert data is not None and indices is not None
    if len(indices.shape) != len(data.shape) or not data.shape:
        raise ctx.fail(f"indices rank {len(indices.shape)} must equal the data's rank {len(data.shape)}, "
                       f"which must be 1 or more")
    normalize_axis(ctx, int(ctx.attr("axis", 0)), len(data.shape))
    return [(data.dtype, indices.shape)]


@register_op("GatherElements", infer=_infer_gather_elements)
def gather_elements(ctx: OpContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), data.ndim)
    idx = _normalized_indices(ctx, indices, data.shape[axis])
    return np.take_along_axis(data, idx, axis=axis)


def _gather_nd_shape(ctx: OpContext, data: tuple[int, ...], indices: tuple[int, ...]) -> tuple[int, ...]:
    b = int(ctx.attr("batch_dims", 0))
    if not indices or data[:b] != indices[:b]:
        raise ctx.fail(f"batch dims of data {list(data)} and indices {list(indices)} differ (batch_dims={b})")
    k = indices[-1]
    if b + k > len(data):
        raise ctx.fail(f"index tuples of length {k} exceed data rank {len(data)} after {b} batch dims")
    return indices[:-1] + data[b + k :]


@register_op(
    "GatherND",
    infer=lambda ctx: [(ctx.input(0).dtype, _gather_nd_shape(ctx, ctx.input(0).shape, ctx.input(1).shape))],
)
def gather_nd(ctx: OpContext, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    out_shape = _gather_nd_shape(ctx, data.shape, indices.shape)
    b, k = int(ctx.attr("batch_dims", 0)), indices.shape[-1]
    batch = math.prod(data.shape[:b])
    flat_data = data.reshape((batch,) + data.shape[b:])
    coords = [
        _normalized_indices(ctx, indices[..., j], data.shape[b + j], column=j).reshape(batch, -1) for j in range(k)
    ]
    batch_ids = np.arange(batch).reshape(batch, 1)
    return flat_data[(batch_ids,) + tuple(coords)].reshape(out_shape)


# -- Scatter family ----------------------------------------------------------------------

_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_into(ctx: OpContext, out: np.ndarray, where: tuple[np.ndarray, ...], updates: np.ndarray) -> np.ndarray:
    reduction = ctx.attr("reduction", "none")
    if reduction == "none":
        out[where] = updates
    elif reduction in _REDUCERS:
        _REDUCERS[reduction].at(out, where, updates)
    else:
        raise ctx.fail(f"unknown reduction '{reduction}'")
    return out


_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _check_reduction(ctx: OpContext) -> None:
    reduction = ctx.attr("reduction", "none")
    if reduction not in _REDUCTIONS:
        raise ctx.fail(f"unknown reduction '{reduction}' (expected one of {', '.join(_REDUCTIONS)})")


def _infer_scatter_elements(ctx: OpContext) -> list[OutSpec]:
    data, indices, updates = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    assert data is not None and indices is not None and updates is not None
    normalize_axis(ctx, int(ctx.attr("axis", 0)), len(data.shape))
    if indices.shape != updates.shape or len(indices.shape) != len(data.shape):
        raise ctx.fail(f"indices {list(indices.shape)} and updates {list(updates.shape)} must have one shape, "
                       f"of the data's rank {len(data.shape)}")
    _check_reduction(ctx)
    return [(data.dtype, data.shape)]


def _infer_scatter_nd(ctx: OpContext) -> list[OutSpec]:
    data, indices, updates = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    assert data is not None and indices is not None and updates is not None
    if not indices.shape or indices.shape[-1] > len(data.shape):
        raise ctx.fail(f"indices of shape {list(indices.shape)} need a last dim of at most the data's rank "
                       f"{len(data.shape)}")
    k = indices.shape[-1]
    expected = indices.shape[:-1] + data.shape[k:]
    if tuple(updates.shape) != tuple(expected):
        raise ctx.fail(f"updates shape {list(updates.shape)} should be {list(expected)} (indices "
                       f"{list(indices.shape)}, data {list(data.shape)})")
    _check_reduction(ctx)
    return [(data.dtype, data.shape)]


@register_op(["ScatterElements", "Scatter"], infer=_infer_scatter_elements)
def scatter_elements(ctx: OpContext, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise ctx.fail(f"indices {list(indices.shape)} and updates {list(updates.shape)} must match in shape and rank")
    where: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    where[axis] = _normalized_indices(ctx, indices, data.shape[axis])
    return _scatter_into(ctx, data.copy(), tuple(where), updates.astype(data.dtype, copy=False))


@register_op("ScatterND", infer=_infer_scatter_nd)
def scatter_nd(ctx: OpContext, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    k = indices.shape[-1]
    expected = indices.shape[:-1] + data.shape[k:]
    if k > data.ndim or tuple(updates.shape) != tuple(expected):
        raise ctx.fail(f"updates shape {list(updates.shape)} should be {list(expected)}")
    where = tuple(_normalized_indices(ctx, indices[..., j], data.shape[j], column=j) for j in range(k))
    return _scatter_into(ctx, data.copy(), where, updates.astype(data.dtype, copy=False))
