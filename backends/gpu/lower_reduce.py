"""Lowering of reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp) and Resize
to GPU rKernels.

A reduction whose axes are one run of adjacent dimensions (after dropping size-1 ones) is the
tensor seen as ``[outer, R, inner]``: over the trailing axes (``inner == 1``) one block reduces
each row (``kernels_nn.reduce_rows``), otherwise one thread makes each output
(``kernels_reduce.reduce_strided``).  Other axis sets and the other kinds: one thread per output
over the kept and reduced axes as two strided index spaces (``kernels_reduce.reduce_general``).

Resize: NCHW (or any rank with only the last two axes resized), nearest or linear, with the
coordinate transformations and nearest modes of ``kernels_reduce``; cubic, antialias and
tf_crop_and_resize are refused.
"""

from __future__ import annotations

import math
from itertools import repeat
from typing import Any

import numpy as np

from rammer.ir import Graph, Node

from . import kernels_nn as kn
from . import kernels_reduce as kr

__all__ = ["REDUCE_OPS", "lower_reduce", "lower_resize"]

REDUCE_OPS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
              "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sumsquare", "ReduceLogSum": "logsum",
              "ReduceLogSumExp": "logsumexp"}
#: Kinds the block-per-row and adjacent-axes kernels make; the others (and axes that are not one
#: run) take ``kernels_reduce.reduce_general``.
_FAST_KINDS = ("sum", "mean", "max", "min")
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
    if kind not in _FAST_KINDS or (real and real != list(range(real[0], real[-1] + 1))):
        return _reduce_general(node, x, set(real), kind, lowered, ref)
    if not real:  # nothing to reduce: every output is its one input (a mean of one value too)
        outer, size, inner = int(np.prod(x)), 1, 1
    else:
        outer = int(np.prod(x[:real[0]]))
        size = int(np.prod(x[real[0]:real[-1] + 1]))
        inner = int(np.prod(x[real[-1] + 1:]))
    total = outer * inner
    if inner == 1:
        args = (ref("in", 0), ref("out", 0), size)  # one tuple shared by the rTasks (resolved once)
        calls = tuple(zip(range(max(outer, 1)), repeat(args)))
        return lowered(kn.reduce_rows(f"rows_{kind}", kind, _THREADS), calls, float(size), 4.0 * size)
    args = (ref("in", 0), ref("out", 0), total, size, inner)
    calls = tuple(zip(range(max(1, math.ceil(total / _THREADS))), repeat(args)))
    return lowered(kr.reduce_strided(f"reduce_{kind}_strided", kind, _THREADS), calls, float(_THREADS * size),
                   4.0 * _THREADS * size)


def _merged(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(extent, stride) pairs with size-1 axes dropped and contiguous neighbours merged."""
    out: list[tuple[int, int]] = []
    for d, st in dims:
        if d == 1:
            continue
        if out and out[-1][1] == d * st:
            out[-1] = (out[-1][0] * d, st)
        else:
            out.append((d, st))
    return out or [(1, 0)]


def _reduce_general(node: Node, x: tuple[int, ...], reduced: set[int], kind: str, lowered: Any, ref: Any) -> Any:
    """Any axes, any kind: the kept and the reduced axes as two strided index spaces of at most
    ``kr.AXES`` merged dimensions each (no transpose)."""
    strides = [int(np.prod(x[i + 1:])) for i in range(len(x))]
    kept = _merged([(x[i], strides[i]) for i in range(len(x)) if i not in reduced])
    red = _merged([(x[i], strides[i]) for i in range(len(x)) if i in reduced])
    if len(kept) > kr.AXES or len(red) > kr.AXES:
        raise ValueError(f"reducing axes {sorted(reduced)} of shape {list(x)} (more than {kr.AXES} separate runs)")
    kept = [(1, 0)] * (kr.AXES - len(kept)) + kept
    red = [(1, 0)] * (kr.AXES - len(red)) + red
    total = int(np.prod([d for d, _ in kept]))
    size = int(np.prod([d for d, _ in red]))
    if 0 in x:
        total = int(np.prod([x[i] for i in range(len(x)) if i not in reduced]))
        size = 0 if total == 0 else int(np.prod([x[i] for i in reduced]))
    args = (ref("in", 0), ref("out", 0), total, size, *[d for d, _ in kept[1:]], *[s for _, s in kept],
            *[d for d, _ in red[1:]], *[s for _, s in red])
    calls = tuple(zip(range(max(1, math.ceil(total / _THREADS))), repeat(args)))
    return lowered(kr.reduce_general(f"reduce_{kind}_any", kind, _THREADS), calls, float(_THREADS * max(size, 1)),
                   4.0 * _THREADS * max(size, 1))


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
    calls = tuple(zip(range(max(1, math.ceil(total / _THREADS))), repeat(args)))
    return lowered(kr.resize2d("resize2d", _THREADS), calls, 8.0 * _THREADS, 4.0 * 5 * _THREADS)
