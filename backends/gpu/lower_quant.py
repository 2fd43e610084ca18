"""Lowering the linear-quantization ops to GPU rKernels (:mod:`.kernels_quant`): QuantizeLinear and
DequantizeLinear per tensor or per axis (blocked quantization is refused by name),
DynamicQuantizeLinear (one block: the whole tensor's range decides the scale), and MatMulInteger
(batched, zero points per tensor, per row of A or per column of B).  Quantized tensors are exact
float32 values in the arena (:mod:`.lower_ints`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rammer.ir import Graph, Node

from . import kernels_quant as kq
from .kernels_model import MAX_RANK

__all__ = ["QUANT_OPS", "lower_quant"]

QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger"})
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


def _matmul_integer(node: Node, graph: Graph, lowered: Any, ref: Any) -> Any:
    a, b = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    if len(a) < 2 or len(b) < 2:
        raise ValueError("MatMulInteger of a vector (matrices and batches of them run)")
    m, k, n = a[-2], a[-1], b[-1]
    batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
    nb = int(np.prod(batch)) if batch else 1

    def batch_stride(bs: tuple[int, ...], size: int) -> int:
        if not bs or int(np.prod(bs)) == 1:
            return 0
        if (1,) * (len(batch) - len(bs)) + bs == batch:
            return size
        raise ValueError("batch axes that broadcast partly")

    sab, sbb = batch_stride(a[:-2], m * k), batch_stride(b[:-2], k * n)

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
    calls = tuple((r, args) for r in range(max(1, math.ceil(total / threads))))
    return lowered(kq.matmul_integer("matmul_integer", threads), calls, 2.0 * threads * k, 8.0 * threads * k)
