"""Lowering of reductions (ReduceSum/Mean/Max/Min) and Resize to GPU rKernels.

A reduction whose axes are one run of adjacent dimensions (after dropping size-1 ones) is the
tensor seen as ``[outer, R, inner]``: over the trailing axes (``inner == 1``) one block reduces
each row (``kernels_nn.reduce_rows``), otherwise one thread makes each output
(``kernels_reduce.reduce_strided``).  Other axis sets are refused naming the node.

Resize: NCHW (or any rank with only the last two axes resized), nearest or linear, with the
coordinate transformations and nearest modes of ``kernels_reduce``; cubic, antialias and
tf_crop_and_resize are refused.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rammer.ir import Graph, Node

from . import kernels_nn as kn
from . import kernels_reduce as kr

__all__ = ["REDUCE_OPS", "lower_reduce", "lower_resize"]

REDUCE_OPS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min"}
_THREADS = 256


def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.value_info[name].shape)


def _const(graph: Graph, node: Node, slot: int, what: str) -> np.ndarray | None:
    if len(node.inputs) <= slot or not node.inputs[slot]:
        return None
    name = node.inputs[slot]
    if name not in graph.initializers:
        raise ValueError(f"its {what} input '{name}' is computed at run time; it must be a constant")
    return np.asarray(graph.initializers[name])


def _axes(node: Node, graph: Graph, rank: int) -> list[int]:
    axes = node.attrs.get("axes")
    if axes is None:
        given = _const(graph, node, 1, "axes")
        axes = None if given is None else [int(a) for a in given.ravel()]
    if not axes:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            return []
        return list(range(rank))
    return sorted({int(a) % rank for a in axes})


def lower_reduce(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    """``lowered``/``ref`` are :class:`.lower.Lowered` and :class:`.lower.Ref` (passed in to keep
    this module free of an import cycle with :mod:`.lower`)."""
    x = _shape(graph, node.inputs[0])
    axes = _axes(node, graph, len(x))
    kind = REDUCE_OPS[node.op_type]
    real = [a for a in axes if x[a] != 1]
    if real and real != list(range(real[0], real[-1] + 1)):
        raise ValueError(f"reducing axes {axes} of shape {list(x)} (only adjacent axes)")
    if not real:  # nothing to reduce: every output is its one input (a mean of one value too)
        outer, size, inner = int(np.prod(x)), 1, 1
    else:
        outer = int(np.prod(x[:real[0]]))
        size = int(np.prod(x[real[0]:real[-1] + 1]))
        inner = int(np.prod(x[real[-1] + 1:]))
    total = outer * inner
    if inner == 1:
        calls = tuple((r, (ref("in", 0), ref("out", 0), size)) for r in range(max(outer, 1)))
        return lowered(kn.reduce_rows(f"rows_{kind}", kind, _THREADS), calls, float(size), 4.0 * size)
    args = (ref("in", 0), ref("out", 0), total, size, inner)
    calls = tuple((r, args) for r in range(max(1, math.ceil(total / _THREADS))))
    return lowered(kr.reduce_strided(f"reduce_{kind}_strided", kind, _THREADS), calls, float(_THREADS * size),
                   4.0 * _THREADS * size)


def lower_resize(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    mode = node.attrs.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    coord = node.attrs.get("coordinate_transformation_mode", b"half_pixel")
    coord = coord.decode() if isinstance(coord, bytes) else str(coord)
    nearest = node.attrs.get("nearest_mode", b"round_prefer_floor")
    nearest = nearest.decode() if isinstance(nearest, bytes) else str(nearest)
    if mode not in ("nearest", "linear"):
        raise ValueError(f"mode '{mode}' (nearest and linear only)")
    if coord not in kr.COORD_MODES:
        raise ValueError(f"coordinate_transformation_mode '{coord}'")
    if nearest not in kr.NEAREST_MODES:
        raise ValueError(f"nearest_mode '{nearest}'")
    if int(node.attrs.get("antialias", 0)) or node.attrs.get("axes") is not None:
        raise ValueError("antialias or axes")
    if len(node.inputs) < 3 and graph.opset.get("", 11) < 11:
        raise ValueError("opset 10 Resize")
    x, y = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if len(x) < 2 or x[:-2] != y[:-2]:
        raise ValueError(f"resizing {list(x)} to {list(y)} (only the last two axes)")
    scales = _const(graph, node, 2, "scales")
    if scales is not None and scales.size:
        sh, sw = float(scales.ravel()[-2]), float(scales.ravel()[-1])
    else:  # sizes given: the scale is the ratio, as ONNX defines it
        sh, sw = y[-2] / x[-2], y[-1] / x[-1]
    if sh <= 0 or sw <= 0:
        raise ValueError(f"scales {sh}, {sw}")
    total = int(np.prod(y))
    args = (ref("in", 0), ref("out", 0), total, x[-2], x[-1], y[-2], y[-1], float(sh), float(sw),
            kr.COORD_MODES[coord], kr.NEAREST_MODES[nearest], int(mode == "linear"))
    calls = tuple((r, args) for r in range(max(1, math.ceil(total / _THREADS))))
    return lowered(kr.resize2d("resize2d", _THREADS), calls, 8.0 * _THREADS, 4.0 * 5 * _THREADS)
