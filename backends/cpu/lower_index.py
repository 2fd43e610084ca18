"""Lowering of CumSum, GatherElements, ArgMax and ArgMin to the rKernels of :mod:`.kernels_index`.

CumSum: any axis (a compile-time constant), exclusive and reverse, on float32 / int64 / int32.
GatherElements: any axis, data of any arena dtype, int32 / int64 indices (negative ones counted from
the end; one out of range stops the run with the error naming node, index and position, as Gather's).
ArgMax / ArgMin: float32 input, any axis, keepdims either way, select_last_index.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rammer.ir import Node

from .lower_context import LowerContext
from .ops import ARENA_DTYPES, CpuOp, EmitContext, Row, split_range

_CUMSUM_KIND = {"float32": 0, "int64": 1, "int32": 2}


def _parts(total: int, min_per_task: int) -> Callable[[int], list]:
    def partition(n: int) -> list:
        n = max(1, min(n, total // max(min_per_task, 1) or 1))
        return [split_range(total, n, i) for i in range(n)]
    return partition


def _cumsum_axis(lw: LowerContext, node: Node) -> int | None:
    value = lw.graph.initializers.get(node.inputs[1])
    if value is None:
        return None
    rank = len(lw.graph.value_info[node.inputs[0]].shape)
    axis = int(np.asarray(value).reshape(-1)[0])
    return axis + rank if axis < 0 else axis


def cumsum_reason(lw: LowerContext, node: Node) -> str | None:
    x = lw.graph.value_info[node.inputs[0]]
    if x.dtype not in _CUMSUM_KIND:
        return f"CumSum of {x.dtype} (the cpu kernel scans float32, int64 and int32)"
    if not x.shape:
        return "CumSum of a scalar"
    axis = _cumsum_axis(lw, node)
    if axis is None:
        return "CumSum axis computed at run time"
    if not 0 <= axis < len(x.shape):
        return "CumSum axis out of range"  # the reference reports it, naming the node
    return None


def lower_cumsum(lw: LowerContext, node: Node) -> None:
    shape = lw.graph.value_info[node.inputs[0]].shape
    axis = _cumsum_axis(lw, node)
    assert axis is not None
    x = lw.dense(node.inputs[0])
    out = lw.views[node.outputs[0]]
    n, inner = shape[axis], math.prod(shape[axis + 1:])
    lines = math.prod(shape[:axis]) * inner
    kind = _CUMSUM_KIND[x.dtype]
    flags = (int(bool(node.attr("exclusive", 0))), int(bool(node.attr("reverse", 0))))

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([kind, ctx.locate(x), ctx.locate(out), n, inner, *flags])
        return [("k_cumsum", [desc, q0, q1]) for q0, q1 in parts]

    size = ARENA_DTYPES[x.dtype]
    lw.add_op(CpuOp(node.name or "CumSum", "scan", (node,), (x.buffer,), (out.buffer,), float(x.size),
                    2.0 * size * x.size, _parts(lines, max(1, 4096 // max(n, 1))), emit))


def gather_elements_reason(lw: LowerContext, node: Node) -> str | None:
    data = lw.graph.value_info[node.inputs[0]]
    idx = lw.graph.value_info[node.inputs[1]]
    if idx.dtype not in ("int32", "int64"):
        return f"GatherElements indices of {idx.dtype}"
    if len(data.shape) != len(idx.shape) or not data.shape:
        return "GatherElements ranks differ or a scalar"  # the reference reports it, naming the node
    axis = int(node.attr("axis", 0)) % len(data.shape)
    for a, (dd, di) in enumerate(zip(data.shape, idx.shape)):
        # (as numpy's take_along_axis, the reference: equal, or the data's 1 broadcast)
        if a != axis and di != dd and dd != 1:
            return f"indices dimension {a} ({di}) differs from the data's ({dd})"
    return None


def lower_gather_elements(lw: LowerContext, node: Node) -> None:
    data_info = lw.graph.value_info[node.inputs[0]]
    idx_info = lw.graph.value_info[node.inputs[1]]
    rank = len(data_info.shape)
    axis = int(node.attr("axis", 0)) % rank
    data = lw.dense(node.inputs[0])
    idx = lw.dense(node.inputs[1])
    out = lw.views[node.outputs[0]]
    strides = [math.prod(data_info.shape[a + 1:]) for a in range(rank)]
    dims: list[int] = []
    for a in range(rank):
        # A data dimension of 1 against a longer indices dimension broadcasts (stride 0), as numpy's
        # take_along_axis (the reference) does.
        step = 0 if a != axis and data_info.shape[a] == 1 and idx_info.shape[a] > 1 else strides[a]
        dims += [idx_info.shape[a], step]
    esize = ARENA_DTYPES[data.dtype]
    n_idx = idx.size

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([esize, ctx.locate(data), ctx.locate(idx), ctx.locate(out),
                                  ARENA_DTYPES[idx.dtype], rank, axis, data_info.shape[axis], n_idx, *dims])
        return [("k_gather_elements", [desc, r0, r1]) for r0, r1 in parts]

    lw.add_op(CpuOp(node.name or "GatherElements", "gather", (node,), (data.buffer, idx.buffer), (out.buffer,),
                    0.0, 3.0 * esize * out.size, _parts(n_idx, 4096), emit))


def argreduce_reason(lw: LowerContext, node: Node) -> str | None:
    x = lw.graph.value_info[node.inputs[0]]
    if x.dtype != "float32":
        return f"{node.op_type} of {x.dtype} (the cpu kernel compares float32)"
    if not x.shape:
        return f"{node.op_type} of a scalar"  # the reference reports it, naming the node
    axis = int(node.attr("axis", 0))
    if not -len(x.shape) <= axis < len(x.shape) or x.shape[axis] == 0:
        return f"{node.op_type} axis {axis} out of range or empty"
    return None


def lower_argreduce(lw: LowerContext, node: Node) -> None:
    shape = lw.graph.value_info[node.inputs[0]].shape
    axis = int(node.attr("axis", 0)) % len(shape)
    x = lw.dense(node.inputs[0])
    out = lw.views[node.outputs[0]]
    outer, red, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    lines = outer * inner
    flags = int(node.op_type == "ArgMin") | 2 * int(bool(node.attr("select_last_index", 0)))

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), outer, red, inner, ctx.locate(out), flags])
        return [("k_argreduce", [desc, e0, e1]) for e0, e1 in parts]

    lw.add_op(CpuOp(node.name or node.op_type, "reduce", (node,), (x.buffer,), (out.buffer,), float(x.size),
                    4.0 * x.size + 8.0 * lines, _parts(lines, max(1, 2048 // max(red, 1))), emit))


LOWERINGS: dict[str, Callable[[LowerContext, Node], None]] = {
    "CumSum": lower_cumsum, "GatherElements": lower_gather_elements, "ArgMax": lower_argreduce,
    "ArgMin": lower_argreduce,
}
REASONS: dict[str, Callable[[LowerContext, Node], str | None]] = {
    "CumSum": cumsum_reason, "GatherElements": gather_elements_reason, "ArgMax": argreduce_reason,
    "ArgMin": argreduce_reason,
}
