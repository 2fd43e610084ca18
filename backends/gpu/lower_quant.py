"""Lowering the linear-quantization ops to GPU rKernels (:mod:`.kernels_quant`): QuantizeLinear and
DequantizeLinear per tensor or per axis (blocked quantization is refused by name),
DynamicQuantizeLinear (one block: the whole tensor's range decides the scale), MatMulInteger
(batched, zero points per tensor, per row of A or per column of B), and the QOperator ops
QLinearConv (1-d and 2-d, groups, strides, pads, dilations; weights per tensor or per output
channel) and QLinearMatMul (batched; B per tensor or per column).  Quantized tensors are exact
float32 values in the arena (:mod:`.lower_ints`).

The QLinear ops' scales and zero points must be constants: the requantization multiplier
``x_scale * w_scale / y_scale`` is computed here in float32, exactly as the reference computes it
(a division on the device need not be correctly rounded), and passed to each rTask with its zero
points and (QLinearConv) int32 bias, which need not be exact in the float arena."""

from __future__ import annotations

import math
from itertools import repeat
from typing import Any

import numpy as np

from rammer.ir import Graph, Node
from rammer.ops.conv import window_geometry
from rammer.ops.registry import OpContext

from . import kernels_quant as kq
from .kernels_model import MAX_RANK

__all__ = ["QUANT_OPS", "lower_quant"]

QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                       "QLinearConv", "QLinearMatMul"})
_THREADS = 256
#: Integer dtypes a quantized tensor may have here (int32 only as DequantizeLinear's input).
_QUANT_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.value_info[name].shape)


def _present(node: Node, i: int) -> str | None:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else None


def _param_strides(node: Node, graph: Graph, x_shape: tuple[int, ...]) -> list[int]:
    """The scale's (and zero point's) broadcast strides over ``x``, padded to the kernels' rank."""
    scale = _shape(graph, node.inputs[1])
    if len(x_shape) > MAX_RANK:
        raise ValueError(f"more than {MAX_RANK} dimensions")
    strides = [0] * len(x_shape)
    if int(np.prod(scale)) != 1 or len(scale) > 1:
        if len(scale) != 1 or int(node.attrs.get("block_size", 0)):
            raise ValueError(f"a scale of shape {list(scale)} (blocked quantization; per tensor and per axis run)")
        axis = int(node.attrs.get("axis", 1)) % max(len(x_shape), 1)
        strides[axis] = 1
    return [0] * (MAX_RANK - len(x_shape)) + strides


def lower_quant(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """The rKernel of a quantization op; ValueError saying why not."""
    op = node.op_type
    if op == "QLinearConv":
        return _qlinear_conv(node, graph, lowered, ref)
    if op == "QLinearMatMul":
        return _qlinear_matmul(node, graph, lowered, ref)
    if op == "MatMulInteger":
        return _matmul_integer(node, graph, lowered, ref)
    if op == "DynamicQuantizeLinear":
        n = int(np.prod(_shape(graph, node.inputs[0])))
        outs = [o for o in node.outputs if o]
        if len(outs) != 3:
            raise ValueError("DynamicQuantizeLinear without all three outputs")
        args = (ref("in", 0), ref("out", 0), ref("out", 1), ref("out", 2), n)
        return lowered(kq.dynamic_quantize("dynamic_quantize", _THREADS), ((0, args),), 6.0 * n, 8.0 * n)
    x = _shape(graph, node.inputs[0])
    total = int(np.prod(x))
    dims = ([1] * (MAX_RANK - len(x)) + list(x))[1:]
    strides = _param_strides(node, graph, x)
    zp = _present(node, 2)
    chunk = _THREADS * mult
    rtasks = range(max(1, math.ceil(total / chunk)))
    head = (ref("in", 0), ref("in", 1), ref("in", 2) if zp else ref("in", 1), ref("out", 0), total, chunk, *dims,
            *strides, int(zp is not None))
    if op == "QuantizeLinear":
        dtype = graph.value_info[node.outputs[0]].dtype
        if dtype not in _QUANT_RANGE:
            raise ValueError(f"quantizing to {dtype}")
        if graph.value_info[node.inputs[0]].dtype != "float32" or int(node.attrs.get("precision", 0)):
            raise ValueError("a non-float32 input or a 'precision' attribute (float32 quantization runs)")
        lo, hi = _QUANT_RANGE[dtype]
        return lowered(kq.quantize_nd("quantize", _THREADS), tuple((r, (*head, float(lo), float(hi))) for r in rtasks),
                       4.0 * chunk, 12.0 * chunk)
    if graph.value_info[node.outputs[0]].dtype != "float32":
        raise ValueError(f"dequantizing to {graph.value_info[node.outputs[0]].dtype} (float32 runs)")
    return lowered(kq.dequantize_nd("dequantize", _THREADS), tuple((r, head) for r in rtasks), 2.0 * chunk,
                   12.0 * chunk)


def _batched_matmul(graph: Graph, a_name: str, b_name: str, op: str) -> tuple[int, int, int, int, int, int]:
    """``(m, k, n, batches, a's batch stride, b's batch stride)`` of a batched integer MatMul (an
    operand broadcast over the batch has stride 0); refuses vectors and partly broadcast batch axes."""
    a, b = _shape(graph, a_name), _shape(graph, b_name)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"{op} of a vector (matrices and batches of them run)")
    m, k, n = a[-2], a[-1], b[-1]
    batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
    nb = int(np.prod(batch)) if batch else 1

    def batch_stride(bs: tuple[int, ...], size: int) -> int:
        if not bs or int(np.prod(bs)) == 1:
            return 0
        if (1,) * (len(batch) - len(bs)) + bs == batch:
            return size
        raise ValueError("batch axes that broadcast partly")

    return m, k, n, nb, batch_stride(a[:-2], m * k), batch_stride(b[:-2], k * n)


def _matmul_integer(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    m, k, n, nb, sab, sbb = _batched_matmul(graph, node.inputs[0], node.inputs[1], "MatMulInteger")

    def zp_stride(i: int, per: int, what: str) -> tuple[Any, int, int]:
        name = _present(node, i)
        if name is None:
            return ref("in", 0), 0, 0
        size = int(np.prod(_shape(graph, name)))
        if size == 1:
            return ref("in", i), 0, 1
        if size == per and len(_shape(graph, name)) == 1:
            return ref("in", i), 1, 1
        raise ValueError(f"a zero point of shape {list(_shape(graph, name))} (per tensor or per {what} run)")

    azp, azs, has_a = zp_stride(2, m, "row of A")
    bzp, bzs, has_b = zp_stride(3, n, "column of B")
    total = nb * m * n
    threads = 128
    args = (ref("in", 0), ref("in", 1), azp, bzp, ref("out", 0), total, m, n, k, sab, sbb, azs, bzs, has_a, has_b)
    calls = tuple(zip(range(max(1, math.ceil(total / threads))), repeat(args)))
    return lowered(kq.matmul_integer("matmul_integer", threads), calls, 2.0 * threads * k, 8.0 * threads * k)


# -- QLinearConv, QLinearMatMul ---------------------------------------------------------------------

def _constant(node: Node, graph: Graph, slot: int, what: str, length: int) -> np.ndarray | None:
    """Input ``slot`` (a scale or zero point) as a flat constant of 1 or ``length`` values; None when
    absent; ValueError when it is computed at run time or has another size."""
    name = _present(node, slot)
    if name is None:
        return None
    if name not in graph.initializers:
        raise ValueError(f"its {what} '{name}' is computed at run time (constant scales and zero points run)")
    value = np.asarray(graph.initializers[name]).reshape(-1)
    if value.size not in (1, length):
        raise ValueError(f"its {what} '{name}' has {value.size} values (1 or {length} run)")
    return value


def _per(value: np.ndarray | None, i: int, default: float = 0) -> float:
    if value is None:
        return default
    return value[i] if value.size > 1 else value[0]


def _multipliers(a_scale: np.ndarray, b_scale: np.ndarray, y_scale: np.ndarray) -> np.ndarray:
    """``a_scale * b_scale / y_scale`` in float32, as :mod:`rammer.ops.qlinear` computes it."""
    return (np.float32(a_scale[0]) * b_scale.astype(np.float32)) / np.float32(y_scale[0])


def _output_range(node: Node, graph: Graph) -> tuple[float, float]:
    dtype = graph.value_info[node.outputs[0]].dtype
    if dtype not in ("uint8", "int8"):
        raise ValueError(f"an output of dtype {dtype} (uint8 and int8 run)")
    return tuple(float(b) for b in _QUANT_RANGE[dtype])  # type: ignore[return-value]


def _qlinear_conv(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    x, w, y = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[3]), _shape(graph, node.outputs[0])
    nsp = len(x) - 2
    if nsp not in (1, 2):
        raise ValueError(f"{nsp}-d QLinearConv (1-d and 2-d run)")
    infos = [graph.value_info[node.inputs[0]], graph.value_info[node.inputs[3]]]
    geo = window_geometry(OpContext(node, graph.opset.get(node.domain, 1), infos, [None, None]), x[2:], w[2:])
    oc_total = w[0]
    x_zp = _constant(node, graph, 2, "x_zero_point", 1)
    w_scale = _constant(node, graph, 4, "w_scale", oc_total)
    w_zp = _constant(node, graph, 5, "w_zero_point", oc_total)
    y_zp = _constant(node, graph, 7, "y_zero_point", 1)
    bias = _constant(node, graph, 8, "bias", oc_total)
    mult = _multipliers(_constant(node, graph, 1, "x_scale", 1), w_scale, _constant(node, graph, 6, "y_scale", 1))
    lo, hi = _output_range(node, graph)

    def two(values: Any, fill: int) -> list[int]:
        values = [int(d) for d in values]
        return [fill] + values if len(values) == 1 else values

    h, wd = two(x[2:], 1)
    oh, ow = two(y[2:], 1)
    kh, kw = two(w[2:], 1)
    sh, sw = two(geo.strides, 1)
    ph, pw = two(geo.pad_begin, 0)
    dh, dw = two(geo.dilations, 1)
    group = int(node.attrs.get("group", 1))
    pixels = oh * ow
    threads = 128
    shape = (x[1], h, wd, y[1], oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, group)
    calls = []
    for n in range(x[0]):
        for oc in range(y[1]):
            tail = (int(_per(bias, oc)), int(_per(x_zp, 0)), int(_per(w_zp, oc)),
                    float(_per(mult, oc)), float(_per(y_zp, 0)), lo, hi)
            for p0 in range(0, max(pixels, 1), threads):
                count = min(threads, pixels - p0)
                calls.append((len(calls), (ref("in", 0), ref("in", 3), ref("out", 0), *shape, n, oc, p0, count,
                                           *tail)))
    macs = x[1] // max(group, 1) * kh * kw
    return lowered(kq.qlinear_conv("qlinear_conv", threads), tuple(calls), 2.0 * threads * macs,
                   2.0 * threads * macs)


def _qlinear_matmul(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    m, k, n, nb, sab, sbb = _batched_matmul(graph, node.inputs[0], node.inputs[3], "QLinearMatMul")
    a_zp = _constant(node, graph, 2, "a_zero_point", 1)
    b_scale = _constant(node, graph, 4, "b_scale", n)
    b_zp = _constant(node, graph, 5, "b_zero_point", n)
    y_zp = _constant(node, graph, 7, "y_zero_point", 1)
    mult = _multipliers(_constant(node, graph, 1, "a_scale", 1), b_scale, _constant(node, graph, 6, "y_scale", 1))
    lo, hi = _output_range(node, graph)
    threads = 128
    per_column = mult.size > 1 or (b_zp is not None and b_zp.size > 1)
    calls = []
    for bi in range(nb):
        if per_column:  # one column per block: its multiplier and zero point are the rTask's arguments
            blocks = [(m0, col, 1, min(threads, m - m0)) for col in range(n) for m0 in range(0, m, threads)]
        else:  # whole rows: as many as fit the threads (a row longer than that in pieces)
            rows = max(1, threads // max(n, 1))
            blocks = ([(m0, 0, n, min(rows, m - m0) * n) for m0 in range(0, m, rows)] if n <= threads else
                      [(m0, c0, min(threads, n - c0), min(threads, n - c0)) for m0 in range(m)
                       for c0 in range(0, n, threads)])
        for m0, n0, cols, count in blocks:
            tail = (int(_per(a_zp, 0)), int(_per(b_zp, n0)), float(_per(mult, n0)), float(_per(y_zp, 0)), lo, hi)
            calls.append((len(calls), (ref("in", 0), ref("in", 3), ref("out", 0), m, n, k, sab, sbb, bi, m0, n0, cols,
                                       count, *tail)))
    return lowered(kq.qlinear_matmul("qlinear_matmul", threads), tuple(calls), 2.0 * threads * k, 2.0 * threads * k)
