"""Lowering Gather and GatherElements (indices read at run time), CumSum and LayerNormalization to GPU
rKernels.

Gather with constant indices that form a strided view (a scalar index, a range: the attention-head
Gathers of a ViT, the class-token Gather) never gets here: :mod:`.lower` lowers it as a copy, like
Slice.  What is left reads its indices from the arena (an embedding lookup of token ids, or constant
indices in no strided order), with :func:`.kernels_index.gather_rows`.  Integer and bool tensors
are exact float32 values in the arena (:mod:`.lower_ints`).
"""

from __future__ import annotations

import math
from itertools import repeat
from typing import Any

import numpy as np

from rammer.ir import Graph, Node

from . import kernels_index as kx
from . import kernels_nn as kn
from .kernels_model import MAX_RANK

__all__ = ["lower_gather", "lower_gather_elements", "lower_cumsum", "lower_layernorm"]

_THREADS = 256


def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.value_info[name].shape)


def _size(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _pad(values: list[int], fill: int, rank: int) -> list[int]:
    if len(values) > rank:
        raise ValueError("rank")
    return [fill] * (rank - len(values)) + list(values)


def _indexed_axis(node: Node, graph: Graph, ind: str, x: tuple[int, ...]) -> tuple[int, int]:
    """The non-negative ``axis`` attribute of a Gather/GatherElements over data of shape ``x`` and that
    axis's size; ValueError when the axis is out of range, the indices ``ind`` are not integers, or
    constant indices hold a value out of range (the model's error, said at compile time)."""
    axis = int(node.attrs.get("axis", 0))
    if not -len(x) <= axis < len(x):
        raise ValueError(f"axis {axis} of a rank-{len(x)} tensor")
    axis %= len(x)
    if graph.value_info[ind].dtype not in ("int64", "int32"):
        raise ValueError(f"indices '{ind}' of dtype {graph.value_info[ind].dtype}")
    size = x[axis]
    if ind in graph.initializers:
        idx = np.asarray(graph.initializers[ind])
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise ValueError(f"its constant indices hold {int(idx[(idx < -size) | (idx >= size)].ravel()[0])}, "
                             f"out of range for an axis of size {size}")
    return axis, size


def lower_gather_elements(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """GatherElements (any axis, indices computed or constant) over chunks of ``256 * mult`` outputs."""
    data, ind = node.inputs[0], node.inputs[1]
    x, k = _shape(graph, data), _shape(graph, ind)
    if not x or len(k) != len(x):
        raise ValueError(f"indices of rank {len(k)} for data of rank {len(x)}")
    axis, size = _indexed_axis(node, graph, ind, x)
    strides = _strides(x)
    axis_stride = strides[axis]
    strides[axis] = 0
    total = _size(k)
    chunk = _THREADS * mult
    args = (ref("in", 0), ref("in", 1), ref("out", 0), total, chunk, *_pad(list(k), 1, MAX_RANK)[1:],
            *_pad(strides, 0, MAX_RANK), axis_stride, size, float("nan"))
    calls = tuple(zip(range(max(1, math.ceil(total / chunk))), repeat(args)))
    return lowered(kx.gather_elements("gather_elements", _THREADS), calls, 2.0 * chunk, 12.0 * chunk)


def lower_cumsum(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    """CumSum along a constant axis, every ``exclusive``/``reverse`` combination, float32 or integer
    (exact float32 values in the arena) data; one thread per line along the axis."""
    x = _shape(graph, node.inputs[0])
    if len(node.inputs) < 2 or node.inputs[1] not in graph.initializers:
        raise ValueError("its axis is computed at run time; it must be a constant")
    axis = int(np.asarray(graph.initializers[node.inputs[1]]).ravel()[0])
    rank = max(len(x), 1)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} of a rank-{len(x)} tensor")
    axis %= rank
    dtype = graph.value_info[node.inputs[0]].dtype
    integer = dtype in ("int64", "int32")
    if not integer and dtype != "float32":
        raise ValueError(f"CumSum of {dtype} values")
    n = x[axis] if x else 1
    outer, inner = _size(x[:axis]), _size(x[axis + 1:])
    exclusive, reverse = bool(node.attrs.get("exclusive", 0)), bool(node.attrs.get("reverse", 0))
    threads = 128
    total = outer * inner
    name = f"cumsum_{'i' if integer else 'f'}{'_excl' if exclusive else ''}{'_rev' if reverse else ''}"
    args = (ref("in", 0), ref("out", 0), total, threads, n, max(inner, 1), float("nan"))
    calls = tuple(zip(range(max(1, math.ceil(total / threads))), repeat(args)))
    return lowered(kx.cumsum_strided(name, integer, exclusive, reverse, threads), calls, 1.0 * threads * n,
                   8.0 * threads * n)


def lower_gather(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """The gather kernel over chunks of ``256 * mult`` outputs; ValueError saying why not."""
    data, ind = node.inputs[0], node.inputs[1]
    x = _shape(graph, data)
    if not x:
        raise ValueError("Gather of a scalar")
    axis, size = _indexed_axis(node, graph, ind, x)
    outer, inner = _size(x[:axis]), _size(x[axis + 1:])
    k = _size(_shape(graph, ind))
    total = outer * k * inner
    chunk = _THREADS * mult
    args = (ref("in", 0), ref("in", 1), ref("out", 0), total, chunk, max(k, 1), size, max(inner, 1), float("nan"))
    calls = tuple(zip(range(max(1, math.ceil(total / chunk))), repeat(args)))
    return lowered(kx.gather_rows("gather_rows", _THREADS), calls, 2.0 * chunk, 12.0 * chunk)


def _period(graph: Graph, name: str, normalized: tuple[int, ...], what: str) -> int:
    """The period along a normalized row at which ``name`` repeats: its size, once its shape
    (leading 1s dropped) is a suffix of the normalized shape."""
    shape = list(_shape(graph, name))
    while shape and shape[0] == 1:
        shape.pop(0)
    if len(shape) > len(normalized) or (shape and tuple(shape) != normalized[len(normalized) - len(shape):]):
        raise ValueError(f"its {what} of shape {list(_shape(graph, name))} broadcasts over the normalized shape "
                         f"{list(normalized)} other than from the right")
    return max(_size(tuple(shape)), 1)


def lower_layernorm(node: Node, graph: Graph, threads: int, lowered: Any, ref: Any) -> Any:
    """One block of ``threads`` per row ``x[:axis]``, normalizing over ``x[axis:]`` (one row of
    ``n`` contiguous values); the optional Mean and InvStdDev outputs get one value per row."""
    if int(node.attrs.get("stash_type", 1)) != 1:
        raise ValueError(f"stash_type {node.attrs.get('stash_type')} (float32 statistics only)")
    x = _shape(graph, node.inputs[0])
    axis = int(node.attrs.get("axis", -1))
    if not -len(x) <= axis < len(x):
        raise ValueError(f"axis {axis} of a rank-{len(x)} tensor")
    axis %= len(x)
    normalized = x[axis:]
    n, rows = _size(normalized), _size(x[:axis])
    sp = _period(graph, node.inputs[1], normalized, "scale")
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    bp = _period(graph, node.inputs[2], normalized, "bias") if has_bias else 1
    eps = float(node.attrs.get("epsilon", 1e-5))
    # An empty tensor still gets one rTask (a schedule op needs one); n = 0 makes it touch nothing.
    has_mean = rows > 0 and len(node.outputs) > 1 and bool(node.outputs[1])
    has_inv = rows > 0 and len(node.outputs) > 2 and bool(node.outputs[2])
    # Absent operands point at a tensor the call has anyway; their flags keep them unread/unwritten.
    args = (ref("in", 0), ref("in", 1), ref("in", 2) if has_bias else ref("in", 1), ref("out", 0),
            n if rows else 0, eps, sp, bp, int(has_bias), int(has_mean), int(has_inv),
            ref("out", 1) if has_mean else ref("out", 0), ref("out", 2) if has_inv else ref("out", 0))
    calls = tuple(zip(range(max(rows, 1)), repeat(args)))
    return lowered(kn.layernorm_rows("layernorm_rows", threads, broadcast=True), calls, 8.0 * n, 12.0 * n)
