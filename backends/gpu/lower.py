"""Lowering one graph node to a GPU rKernel: the kernel-IR template, and per rTask the device
function's ``rtask_id`` and arguments (pointer arguments are :class:`Ref`: a tensor of the node
plus an element offset, resolved to arena offsets once memory is planned).

:func:`lower_node` either returns a :class:`Lowered` or raises :class:`NoGpuKernel` saying why
(an op with no rKernel, an attribute value no rKernel implements, a tensor of a dtype the op
cannot run on).  This module dispatches by op: data movement (Slice, Split, Concat, Transpose,
constant Pad, Reshape, Gather of constant indices in strided order...) is :mod:`.lower_copy`, which
derives strided views from rammer's own reference implementation run on index arrays and checks
them element by element; contractions, convolutions, pooling, Softmax and LRN are :mod:`.lower_nn`;
what they share is :mod:`.lower_types`.  ``mult`` picks among tilings:
elements per rTask = threads x mult.  Integer and bool tensors are exact float32 values in the
arena (:mod:`.lower_ints`); only ops that move, select or gather values may touch them (data
movement, Gather, Where, Cast: :mod:`.lower_index`, :mod:`.lower_ints`).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np

from rammer.errors import OpExecutionError, ShapeError
from rammer.ir import Graph, Node
from rammer.ops.branch_guard import is_branch_guard

from . import kernels_index as kx
from . import kernels_model as km
from .fuse import FUSED_DOMAIN, FUSED_OP, lower_fused
from .guards import lower_guard
from .lower_copy import lower_copy
from .lower_index import lower_cumsum, lower_gather, lower_gather_elements, lower_layernorm
from .lower_ints import ARENA_DTYPES, lower_cast, output_refusal
from .lower_nn import (
    lower_conv,
    lower_conv_transpose,
    lower_gemm,
    lower_global_pool,
    lower_lrn,
    lower_pool,
    lower_softmax,
)
from .lower_quant import QUANT_OPS, lower_quant
from .lower_reduce import REDUCE_OPS, lower_reduce, lower_resize
from .lower_types import (
    BLOCK_THREADS,
    CONV_IMPLICIT_GEMM,
    TILINGS,
    Lowered,
    NoGpuKernel,
    Ref,
    broadcast_strides,
    chunks,
    fail,
    pad6,
    reference_outputs,
    shape_of,
    template,
)

__all__ = ["Ref", "Lowered", "NoGpuKernel", "lower_node", "GPU_OPS", "TILINGS", "BLOCK_THREADS", "CONV_IMPLICIT_GEMM",
           "UNARY", "BINARY", "COPY", "describe"]

UNARY = frozenset(km.UNARY_OPS)


BINARY = frozenset(km.BINARY_OPS)


COPY = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Split",
                  "Concat", "Pad", "Expand", "Dropout"})


#: Ops whose values pass through unchanged (moved, selected, gathered, cast without change): they may
#: read and write the integer and bool tensors the arena carries as exact float32 values.
INDEX_OPS = frozenset({"Gather", "GatherElements", "Cast", "Where"})


GPU_OPS = UNARY | BINARY | COPY | INDEX_OPS | frozenset({"MatMul", "Gemm", "Conv", "MaxPool", "AveragePool",
                                                         "GlobalAveragePool", "GlobalMaxPool", "Softmax", "LogSoftmax",
                                                         "ConvTranspose", "CumSum", "LRN", "ConstantOfShape",
                                                         "Resize", "LayerNormalization", *REDUCE_OPS,
                                                         *QUANT_OPS})


#: The lowerings of the last graph lowered: a compile lowers each node three times (the
#: unsupported-node check, the scheduler's candidates, the program), and a copy's view is
#: derived by running the reference op on index arrays.  Keyed by node identity; holding the
#: graph keeps the ids valid.
_MEMO: dict[str, Any] = {"graph": None, "lowered": {}}


def lower_node(node: Node, graph: Graph, mult: int = 1) -> Lowered:
    """The GPU rKernel of ``node`` at tiling ``mult``; :class:`NoGpuKernel` when there is none."""
    if _MEMO["graph"] is not graph:
        _MEMO["graph"], _MEMO["lowered"] = graph, {}
    key = (id(node), mult)
    hit = _MEMO["lowered"].get(key)
    if hit is None:
        try:
            hit = (node, _lower_node(node, graph, mult))
        except NoGpuKernel as exc:
            hit = (node, exc)
        _MEMO["lowered"][key] = hit
    if hit[0] is not node:  # cannot happen while the graph (which holds its nodes) is alive
        raise RuntimeError("lowering memo out of date")
    if isinstance(hit[1], NoGpuKernel):
        raise hit[1]
    return hit[1]


def _lower_node(node: Node, graph: Graph, mult: int = 1) -> Lowered:
    op = node.op_type
    if node.domain == FUSED_DOMAIN and op == FUSED_OP:
        return lower_fused(node, graph, mult, Lowered, Ref)
    if is_branch_guard(op, node.domain):  # an If's reachable branch inlined: its condition, checked after the run
        return lower_guard(node, graph, mult, Lowered, Ref)
    if node.domain not in ("", "ai.onnx") or op not in GPU_OPS:
        raise fail(node, "the GPU backends have no rKernel for this op")
    why = output_refusal(node, graph)
    if why:
        raise fail(node, why)
    free = _value_slots(node)
    for name in [*node.inputs, *node.outputs]:
        if not name or name in graph.initializers:
            continue
        dtype = graph.value_info[name].dtype
        if dtype == "float32" or (name in free and dtype in ARENA_DTYPES):
            continue
        if op in COPY and name in node.inputs[1:]:
            raise fail(node, f"its input '{name}' is computed at run time; it must be a constant")
        raise fail(node, f"tensor '{name}' is {dtype}; the GPU rKernels are float32 (integer and bool tensors "
                          f"only move through copies, Gather, Where and Cast)")
    try:
        if op in UNARY:
            return _unary(node, graph, mult)
        if op in BINARY:
            return _binary(node, graph, mult)
        if op in COPY:
            return lower_copy(node, graph, mult)
        if op in ("MatMul", "Gemm"):
            return lower_gemm(node, graph)
        if op == "Conv":
            return lower_conv(node, graph, mult)
        if op == "ConvTranspose":
            return lower_conv_transpose(node, graph)
        if op in ("MaxPool", "AveragePool"):
            return lower_pool(node, graph)
        if op in ("GlobalAveragePool", "GlobalMaxPool"):
            return lower_global_pool(node, graph)
        if op in REDUCE_OPS:
            return lower_reduce(node, graph, Lowered, Ref)
        if op == "Resize":
            return lower_resize(node, graph, Lowered, Ref)
        if op == "Gather":
            return _gather(node, graph, mult)
        if op == "GatherElements":
            return lower_gather_elements(node, graph, mult, Lowered, Ref)
        if op == "CumSum":
            return lower_cumsum(node, graph, Lowered, Ref)
        if op in QUANT_OPS:
            return lower_quant(node, graph, mult, Lowered, Ref)
        if op == "LRN":
            return lower_lrn(node, graph)
        if op == "ConstantOfShape":
            return _constant_of_shape(node, graph, mult)
        if op == "Cast":
            return lower_cast(node, graph, mult, Lowered, Ref)
        if op == "Where":
            return _where(node, graph, mult)
        if op == "LayerNormalization":
            return lower_layernorm(node, graph, BLOCK_THREADS, Lowered, Ref)
        return lower_softmax(node, graph)
    except NoGpuKernel:
        raise
    except ValueError as exc:
        raise fail(node, str(exc) if str(exc) != "rank" else f"more than {km.MAX_RANK} dimensions") from None


def _value_slots(node: Node) -> set[str]:
    """The tensors of ``node`` that may be integer or bool (exact float32 values in the arena): those
    whose values the op only moves, selects or gathers.  Everything else must be float32."""
    op = node.op_type
    if op in COPY:
        data = node.inputs if op == "Concat" else node.inputs[:1]
    elif op in INDEX_OPS:
        data = node.inputs[:3]  # Gather's data and indices, Cast's input, Where's condition and values
    elif op == "ConstantOfShape":
        data = node.inputs  # the (constant) shape is not read; an integer fill is an exact float32 value
    elif op in QUANT_OPS:
        data = node.inputs  # quantized values, scales, zero points (lower_quant checks the dtypes)
    elif op == "CumSum":
        data = node.inputs[:2]  # integer sums run in 64-bit registers (kernels_index.cumsum_strided)
    else:
        return set()
    return {n for n in (*data, *node.outputs) if n}


def _gather(node: Node, graph: Graph, mult: int) -> Lowered:
    """Constant indices forming a strided view (a scalar, a range) are a copy, like Slice; other
    indices are read from the arena by the gather kernel."""
    if node.inputs[1] in graph.initializers:
        try:
            return lower_copy(node, graph, mult)
        except (ValueError, ShapeError, OpExecutionError):
            pass  # not a strided view, or out of range (lower_gather refuses it, saying so)
    return lower_gather(node, graph, mult, Lowered, Ref)


def _unary(node: Node, graph: Graph, mult: int) -> Lowered:
    n = int(np.prod(shape_of(graph, node.outputs[0])))
    chunk = 256 * mult
    args = (Ref("in", 0), Ref("out", 0), n, chunk)  # one tuple shared by the rTasks (resolved once)
    calls = tuple(zip(range(chunks(n, chunk)), repeat(args)))
    kernel = template(km.unary_chunked, f"un_{node.op_type.lower()}", node.op_type)
    return Lowered(kernel, calls, 4.0 * chunk, 8.0 * chunk)


def _binary(node: Node, graph: Graph, mult: int) -> Lowered:
    out = shape_of(graph, node.outputs[0])
    n = int(np.prod(out))
    dims = pad6(list(out), 1)
    sa = broadcast_strides(shape_of(graph, node.inputs[0]), out)
    sb = broadcast_strides(shape_of(graph, node.inputs[1]), out)
    chunk = 256 * mult
    args = (Ref("in", 0), Ref("in", 1), Ref("out", 0), n, chunk, *dims[1:], *sa, *sb)
    calls = tuple(zip(range(chunks(n, chunk)), repeat(args)))
    kernel = template(km.binary_nd, f"bin_{node.op_type.lower()}", node.op_type)
    return Lowered(kernel, calls, 1.0 * chunk, 12.0 * chunk)


def _where(node: Node, graph: Graph, mult: int) -> Lowered:
    """Where with a condition computed at run time (a constant one runs fused: the elementwise
    pass turns it into 0/1 floats); the condition is a bool as 0.0/1.0 in the arena."""
    out = shape_of(graph, node.outputs[0])
    n = int(np.prod(out))
    strides = [s for name in node.inputs[:3] for s in broadcast_strides(shape_of(graph, name), out)]
    chunk = 256 * mult
    args = (Ref("in", 0), Ref("in", 1), Ref("in", 2), Ref("out", 0), n, chunk, *pad6(list(out), 1)[1:], *strides)
    calls = tuple(zip(range(chunks(n, chunk)), repeat(args)))
    return Lowered(template(kx.where_nd, "where_nd"), calls, 1.0 * chunk, 16.0 * chunk)


def _constant_of_shape(node: Node, graph: Graph, mult: int) -> Lowered:
    """A fill of the static output shape with the op's value (exact in float32: checked here)."""
    value = np.asarray(reference_outputs(node, graph, {})[0]).ravel()
    fill_value = float(value[0]) if value.size else 0.0
    if value.size and np.float32(fill_value) != value[0]:
        raise ValueError(f"its value {value[0]!r} is not exact in float32 (the arena's type)")
    n = int(np.prod(shape_of(graph, node.outputs[0])))
    chunk = 256 * mult
    args = (Ref("out", 0), n, chunk, fill_value)  # one tuple shared by the rTasks (resolved once)
    calls = tuple(zip(range(chunks(n, chunk)), repeat(args)))
    return Lowered(template(kx.fill, "fill", 256), calls, 0.0, 4.0 * chunk)


def describe(low: Lowered) -> dict[str, Any]:
    return {"kernel": low.kernel.name, "rtasks": len(low.calls), "threads": low.kernel.threads,
            "shared_bytes": low.shared_bytes}
