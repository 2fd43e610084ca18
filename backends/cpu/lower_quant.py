"""Lowering of the quantized ops to the integer rKernels of :mod:`.kernels_quant`.

* QuantizeLinear (float32 -> uint8 / int8) and DequantizeLinear (uint8 / int8 / int32 -> float32),
  per tensor and per axis (blocked quantization and the 16-bit / float8 / 4-bit types stay on the
  reference);
* DynamicQuantizeLinear (one rTask: the range of the whole tensor, then the quantization);
* MatMulInteger ([..., M, K] x [K, N] or same-batch [..., K, N], 8-bit, int32 output; A's zero point
  a scalar, B's a scalar or one per column);
* QLinearMatMul (as MatMulInteger, then requantized; B's scale a scalar or one per column);
* QLinearConv (2-D, any group / stride / dilation / padding, per-tensor or per-channel weights).

Scales and zero points are read from the arena, so they may be constants or computed at run time.

A constant B of MatMulInteger / QLinearMatMul and the constant weights of a non-depthwise QLinearConv are
prepared at compile time for the 8-bit GEMM micro-kernel (:mod:`.ukernel_int8`, VNNI where the CPU has
it): B packed in its panel layout (``k_gemm_int8``), conv weights as uint8 rows (``k_qconv_int8``).
A depthwise QLinearConv with constant weights runs on the float window sweeps over planes widened to
float32, whose sums are exact (``k_qdwconv``, :mod:`.kernels_qdw`).  Run-time weights use the row / plane
kernels (``k_matmul_int``, ``k_qlinear_matmul``, ``k_qlinearconv``), as does everything with
:data:`PACK_INT8_WEIGHTS` off.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from rammer.ir import Node, TensorInfo
from rammer.lower.views import View
from rammer.ops.conv import window_geometry
from rammer.ops.quant import BYTE_TABLE, MATMUL_INTEGER_FLOAT, QUANTIZED_ADD
from rammer.ops.registry import OpContext

from .kernels_qdw import MAX_EXACT_TAPS, qdw_scratch
from .kernels_window import direct_fits
from .lower_context import LowerContext
from .lower_quant_conv import nhwc_conv_op, pointwise_conv_op, pointwise_weights, symmetric_weights
from .ops import CpuOp, EmitContext, Row, split_range
from .ukernel_int8 import MR, NR, pack_b

_EIGHT_BIT = ("uint8", "int8")
#: Run MatMulInteger / QLinearMatMul with a constant B and non-depthwise QLinearConv with constant
#: weights on the 8-bit GEMM micro-kernel (:mod:`.ukernel_int8`); off: the row / plane kernels that
#: read the weights in place (``ci/micro_int8.py --before`` compares the two).
PACK_INT8_WEIGHTS = True


def _info(lw: LowerContext, name: str) -> TensorInfo:
    return lw.graph.value_info[name]


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if i < len(node.inputs) and node.inputs[i] else ""


def _size(info: TensorInfo) -> int:
    return math.prod(info.shape) if info.shape else 1


def _parts(total: int, min_per_task: int) -> Callable[[int], list]:
    def partition(n: int) -> list:
        n = max(1, min(n, total // max(min_per_task, 1) or 1))
        return [split_range(total, n, i) for i in range(n)]
    return partition


def _one_part(n: int) -> list:
    return [(0, 1)]


def _scalar_or_axis(lw: LowerContext, node: Node) -> tuple[int, int, int, bool] | str:
    """(lines, axis length, line length, per axis) of a (de)quantization, or why the kernel can't."""
    x = _info(lw, node.inputs[0])
    scale = _info(lw, node.inputs[1])
    if int(node.attr("block_size", 0)):
        return "blocked quantization"
    if scale.dtype != "float32":
        return f"{scale.dtype} scale"
    zp = _input(node, 2)
    if zp and _info(lw, zp).dtype not in _EIGHT_BIT + ("int32",):
        return f"{_info(lw, zp).dtype} zero point"
    shape = x.shape
    if _size(scale) == 1 and len(scale.shape) <= 1:
        inner = shape[-1] if shape else 1
        return (_size(x) // max(inner, 1), 1, inner, False)
    if len(scale.shape) != 1 or not shape:
        return f"scale of shape {list(scale.shape)}"
    axis = int(node.attr("axis", 1)) % len(shape)
    if scale.shape[0] != shape[axis]:
        return f"scale of shape {list(scale.shape)}"
    inner = math.prod(shape[axis + 1:])
    return (math.prod(shape[:axis + 1]), shape[axis], inner, True)


# -- QuantizeLinear / DequantizeLinear ------------------------------------------------------------

def quantize_reason(lw: LowerContext, node: Node) -> str | None:
    x = _info(lw, node.inputs[0])
    out = _info(lw, node.outputs[0])
    if x.dtype != "float32" or out.dtype not in _EIGHT_BIT:
        return f"QuantizeLinear {x.dtype} -> {out.dtype} (the cpu kernel quantizes float32 to 8 bits)"
    if int(node.attr("precision", 0)):
        return "QuantizeLinear with a 'precision' attribute"
    if not int(node.attr("saturate", 1)):
        return "QuantizeLinear without saturation"
    layout = _scalar_or_axis(lw, node)
    return layout if isinstance(layout, str) else None


def dequantize_reason(lw: LowerContext, node: Node) -> str | None:
    x = _info(lw, node.inputs[0])
    out = _info(lw, node.outputs[0])
    if x.dtype not in _EIGHT_BIT + ("int32",) or out.dtype != "float32":
        return f"DequantizeLinear {x.dtype} -> {out.dtype} (the cpu kernel dequantizes 8 bits and int32 to float32)"
    zp = _input(node, 2)
    if zp and _info(lw, zp).dtype != x.dtype:
        return "zero point of another type than the input"
    layout = _scalar_or_axis(lw, node)
    return layout if isinstance(layout, str) else None


def _zp_at(ctx: EmitContext, zp: View | None) -> int:
    return ctx.locate(zp) if zp is not None else -1


def _lower_qdq(lw: LowerContext, node: Node, kernel: str, code: int, flops_per_element: float) -> None:
    """QuantizeLinear and DequantizeLinear: the same operands (x, scale, optional zero point, out),
    lines and partition; ``code`` the kernel's type field (the signedness of the output for
    :func:`.kernels_quant.k_quantize`, the input's kind for :func:`.kernels_quant.k_dequantize`)."""
    layout = _scalar_or_axis(lw, node)
    assert not isinstance(layout, str)
    lines, axis_len, inner, per_axis = layout
    x = lw.dense(node.inputs[0])
    scale = lw.dense(node.inputs[1])
    zp = lw.dense(_input(node, 2)) if _input(node, 2) else None
    out = lw.views[node.outputs[0]]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), ctx.locate(out), axis_len, inner, ctx.locate(scale),
                                  _zp_at(ctx, zp), code, int(per_axis)])
        return [(kernel, [desc, q0, q1]) for q0, q1 in parts]

    reads = tuple(sorted({x.buffer, scale.buffer} | ({zp.buffer} if zp is not None else set())))
    lw.add_op(CpuOp(node.name or node.op_type, "quant", (node,), reads, (out.buffer,), flops_per_element * x.size,
                    5.0 * x.size, _parts(lines, max(1, 4096 // max(inner, 1))), emit))


def lower_quantize(lw: LowerContext, node: Node) -> None:
    _lower_qdq(lw, node, "k_quantize", int(lw.views[node.outputs[0]].dtype == "int8"), 3.0)


def lower_dequantize(lw: LowerContext, node: Node) -> None:
    kind = {"uint8": 0, "int8": 1, "int32": 2}[_info(lw, node.inputs[0]).dtype]
    _lower_qdq(lw, node, "k_dequantize", kind, 2.0)


# -- ByteTable (rammer domain: DequantizeLinear -> per-element ops -> QuantizeLinear, see rammer.passes.qdq_lookup)

def byte_table_reason(lw: LowerContext, node: Node) -> str | None:
    if _info(lw, node.inputs[0]).dtype not in _EIGHT_BIT or _info(lw, node.inputs[1]).dtype not in _EIGHT_BIT:
        return "ByteTable of a non-8-bit tensor"
    return None


def requantize_params(lw: LowerContext, node: Node) -> np.ndarray | None:
    """A ByteTable's function as :func:`.kernels_quant._requantize_bytes`'s float32 parameters
    [m, zx, lo, hi, zy], from its ``requantize`` attribute (:mod:`rammer.passes.qdq_lookup`: the chain's
    sx, zx, clip bounds, sy, zy) with the division by sy folded into m = sx / sy and the bounds; used
    only when that formula, run here in numpy's float32 on the 256 byte values, gives the table
    exactly (the folding may round differently), else None: the kernel looks the bytes up."""
    params = node.attrs.get("requantize")
    table = lw.graph.initializers.get(node.inputs[1])
    if params is None or table is None or len(params) != 6:
        return None
    table = np.asarray(table)
    sx, zx, lo, hi, sy, zy = (np.float32(v) for v in params)
    with np.errstate(all="ignore"):
        folded = np.array([sx / sy, zx, lo / sy, hi / sy, zy], np.float32)
        m, zx, lo, hi, zy = folded
        x = np.arange(256, dtype=np.uint8).view(np.dtype(_info(lw, node.inputs[0]).dtype)).astype(np.int32)
        q = np.iinfo(table.dtype)
        v = np.minimum(np.maximum((x - zx).astype(np.float32) * m, lo), hi)
        y = np.minimum(np.maximum(np.rint(v) + zy, np.float32(q.min)), np.float32(q.max))
    if not np.all(np.isfinite(folded[[0, 1, 4]])) or not np.array_equal(y.astype(table.dtype), table):
        return None
    return folded


def lower_byte_table(lw: LowerContext, node: Node) -> None:
    x = lw.dense(node.inputs[0])
    table = lw.dense(node.inputs[1])
    out = lw.views[node.outputs[0]]
    found = requantize_params(lw, node)
    params = lw.const_view(found) if found is not None else None

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), ctx.locate(table), ctx.locate(out),
                                  ctx.locate(params) if params is not None else -1, int(x.dtype == "int8"),
                                  int(out.dtype == "int8")])
        return [("k_byte_table", [desc, e0, e1]) for e0, e1 in parts]

    reads = {x.buffer, table.buffer} | ({params.buffer} if params is not None else set())
    lw.add_op(CpuOp(node.name or BYTE_TABLE, "quant", (node,), tuple(sorted(reads)), (out.buffer,),
                    float(x.size), 2.0 * x.size + 256, _parts(x.size, 16384), emit))


# -- QuantizedAdd (rammer domain: DQ(a) + DQ(b) [-> Relu] -> Q, see rammer.passes.qdq_add) -----------------

def quantized_add_reason(lw: LowerContext, node: Node) -> str | None:
    out = _info(lw, node.outputs[0])
    for slot in (0, 3):
        t = _info(lw, node.inputs[slot])
        if t.dtype not in _EIGHT_BIT or tuple(t.shape) != tuple(out.shape):
            return f"QuantizedAdd operand '{node.inputs[slot]}' ({t.dtype} {list(t.shape)}) is not 8-bit of the " \
                   f"output's shape {list(out.shape)} (the kernel does not broadcast)"
    if any(_input(node, i) and _size(_info(lw, node.inputs[i])) != 1 for i in (1, 2, 4, 5, 6, 7)):
        return "QuantizedAdd with per-axis scales or zero points"
    return None


def lower_quantized_add(lw: LowerContext, node: Node) -> None:
    a = lw.dense(node.inputs[0])
    b = lw.dense(node.inputs[3])
    params = {i: lw.dense(node.inputs[i]) for i in (1, 2, 4, 5, 6, 7) if _input(node, i)}
    out = lw.views[node.outputs[0]]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(params[slot]) if slot in params else -1

        desc = ctx.side.add_ints([ctx.locate(a), ctx.locate(b), ctx.locate(out), at(1), at(2), at(4), at(5), at(6),
                                  at(7), int(a.dtype == "int8"), int(b.dtype == "int8"), int(out.dtype == "int8"),
                                  int(node.attr("relu", 0))])
        return [("k_qadd", [desc, e0, e1]) for e0, e1 in parts]

    reads = {a.buffer, b.buffer} | {v.buffer for v in params.values()}
    lw.add_op(CpuOp(node.name or QUANTIZED_ADD, "quant", (node,), tuple(sorted(reads)), (out.buffer,),
                    6.0 * out.size, 3.0 * out.size, _parts(out.size, 16384), emit))


# -- DynamicQuantizeLinear --------------------------------------------------------------------------

def dynamic_quantize_reason(lw: LowerContext, node: Node) -> str | None:
    if _info(lw, node.inputs[0]).dtype != "float32":
        return "DynamicQuantizeLinear of a non-float32 input"
    if len(node.outputs) < 3 or not all(node.outputs[:3]):
        return "DynamicQuantizeLinear with an unused output"
    return None


def lower_dynamic_quantize(lw: LowerContext, node: Node) -> None:
    x = lw.dense(node.inputs[0])
    y, scale, zp = (lw.views[o] for o in node.outputs[:3])

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), x.size, ctx.locate(y), ctx.locate(scale), ctx.locate(zp)])
        return [("k_dynquant", [desc]) for _ in parts]

    lw.add_op(CpuOp(node.name or "DynamicQuantizeLinear", "quant", (node,), (x.buffer,),
                    tuple(sorted({y.buffer, scale.buffer, zp.buffer})), 5.0 * x.size, 9.0 * x.size, _one_part,
                    emit))


# -- MatMulInteger --------------------------------------------------------------------------------

def matmul_integer_reason(lw: LowerContext, node: Node) -> str | None:
    a, b = _info(lw, node.inputs[0]), _info(lw, node.inputs[1])
    if a.dtype not in _EIGHT_BIT or b.dtype not in _EIGHT_BIT:
        return f"MatMulInteger of {a.dtype} x {b.dtype}"
    if len(a.shape) < 2 or len(b.shape) < 2:
        return "MatMulInteger of a vector"
    if len(b.shape) > 2 and (len(b.shape) != len(a.shape) or a.shape[:-2] != b.shape[:-2]):
        return "MatMulInteger with broadcast batch dimensions"
    a_zp, b_zp = _input(node, 2), _input(node, 3)
    if a_zp and _size(_info(lw, a_zp)) != 1:
        return "per-row zero point of A"
    if b_zp:
        zb = _info(lw, b_zp)
        if _size(zb) != 1 and (len(b.shape) != 2 or zb.shape != (b.shape[1],)):
            return f"zero point of B of shape {list(zb.shape)}"
    return None


def _packed_weight(lw: LowerContext, name: str) -> tuple[View, View, bool, bool] | None:
    """A constant 2-D 8-bit B packed once at compile time for :func:`.kernels_quant.k_gemm_int8`:
    (the panels as int8, shifted by -128 when B is uint8; their int32 column sums over K; whether B
    is uint8; whether no packed byte is -128, which the ``avx2`` micro-kernel otherwise checks per panel
    at run time), or None when B is not a 2-D constant (it is then read in place by the row kernels)."""
    init = lw.graph.initializers.get(name) if PACK_INT8_WEIGHTS else None
    if init is None:
        return None
    w = np.asarray(init)
    if w.ndim != 2 or w.dtype not in (np.uint8, np.int8):
        return None
    cache = lw.__dict__.setdefault("_packed_int8_weights", {})
    found = cache.get(name)
    if found is None:
        unsigned = w.dtype == np.uint8
        shifted = (w.astype(np.int16) - (128 if unsigned else 0)).astype(np.int8)
        packed = lw.const_view(pack_b(shifted).view(np.uint8))
        colsum = lw.const_view(shifted.astype(np.int32).sum(axis=0, dtype=np.int64).astype(np.int32))
        found = cache[name] = (packed, colsum, bool(unsigned), not bool(np.any(shifted == -128)))
    return found


def _gemm_int8_op(lw: LowerContext, node: Node, a: View, weight: tuple[View, View, bool, bool], out: View, rows: int,
                  K: int, N: int, zps: tuple[View | None, View | None],
                  requant: tuple[View, View, View, View | None] | None,
                  dequant: tuple[View, View | None] | None = None) -> None:
    """The op of :func:`.kernels_quant.k_gemm_int8`: A (rows x K, dense) times a packed constant B;
    ``requant`` (a scale, b scale, y scale, y zero point) for QLinearMatMul, ``dequant`` (scale, bias)
    for MatMulIntegerToFloat, neither for MatMulInteger."""
    packed, colsum, b_unsigned, no_min = weight
    za, zb = zps
    tiles = -(-rows // MR) * -(-N // NR)

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        scales = [-1, -1, 0, -1, -1]
        kind = 0
        if requant is not None:
            a_s, b_s, y_s, y_zp = requant
            scales = [ctx.locate(a_s), ctx.locate(b_s), int(b_s.size > 1), ctx.locate(y_s), _zp_at(ctx, y_zp)]
            kind = 1
        elif dequant is not None:
            scale, bias = dequant
            scales = [ctx.locate(bias) if bias is not None else -1, ctx.locate(scale), int(scale.size > 1), -1, -1]
            kind = 2
        desc = ctx.side.add_ints([ctx.locate(a), ctx.locate(packed), ctx.locate(out), rows, K, N,
                                  int(a.dtype == "int8"), int(b_unsigned), _zp_at(ctx, za), _zp_at(ctx, zb),
                                  int(zb is not None and zb.size > 1), ctx.locate(colsum), kind,
                                  *scales, int(out.dtype == "int8"), int(no_min)])
        return [("k_gemm_int8", [desc, t0, t1]) for t0, t1 in parts]

    views = [a, packed, colsum, *(v for v in (*zps, *(requant or ()), *(dequant or ())) if v is not None)]
    lw.add_op(CpuOp(node.name or node.op_type, "gemm.int8", (node,), tuple(sorted({v.buffer for v in views})),
                    (out.buffer,), 2.0 * rows * N * K, float(a.size + packed.size + 4 * out.size),
                    _parts(tiles, max(1, 2**18 // max(MR * NR * K, 1))), emit,
                    scratch=MR * NR + MR + 4 * NR, blas=True))


def lower_matmul_integer(lw: LowerContext, node: Node) -> None:
    a_info, b_info = _info(lw, node.inputs[0]), _info(lw, node.inputs[1])
    *batch, M, K = a_info.shape
    N = b_info.shape[-1]
    rows = math.prod(batch) * M
    a = lw.dense(node.inputs[0])
    za = lw.dense(_input(node, 2)) if _input(node, 2) else None
    zb = lw.dense(_input(node, 3)) if _input(node, 3) else None
    out = lw.views[node.outputs[0]]
    weight = _packed_weight(lw, node.inputs[1])
    if weight is not None:
        _gemm_int8_op(lw, node, a, weight, out, rows, K, N, (za, zb), None)
        return
    b = lw.dense(node.inputs[1])
    b_batch_stride = K * N if len(b_info.shape) > 2 else 0
    zb_cols = int(zb is not None and zb.size > 1)

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(a), ctx.locate(b), ctx.locate(out), M, K, N, M * K, b_batch_stride,
                                  int(a.dtype == "int8"), int(b.dtype == "int8"), _zp_at(ctx, za),
                                  _zp_at(ctx, zb), zb_cols])
        return [("k_matmul_int", [desc, r0, r1]) for r0, r1 in parts]

    reads = {a.buffer, b.buffer} | {v.buffer for v in (za, zb) if v is not None}
    lw.add_op(CpuOp(node.name or "MatMulInteger", "gemm.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * rows * N * K, float(a.size + b.size + 4 * out.size),
                    _parts(rows, max(1, 65536 // max(N * K, 1))), emit, blas=True))


# -- MatMulIntegerToFloat ------------------------------------------------------------------------

def matmul_integer_float_reason(lw: LowerContext, node: Node) -> str | None:
    found = matmul_integer_reason(lw, dataclasses.replace(node, inputs=node.inputs[:4]))
    if found:
        return found.replace("MatMulInteger", MATMUL_INTEGER_FLOAT)
    if len(_info(lw, node.inputs[1]).shape) != 2 or _packed_weight(lw, node.inputs[1]) is None:
        return f"{MATMUL_INTEGER_FLOAT} with a B that is not a 2-D 8-bit constant (the kernel packs it)"
    return None


def lower_matmul_integer_float(lw: LowerContext, node: Node) -> None:
    """MatMulIntegerToFloat: ``k_gemm_int8`` storing ``float32(acc) * scale + bias``."""
    a_info, b_info = _info(lw, node.inputs[0]), _info(lw, node.inputs[1])
    *batch, M, K = a_info.shape
    N = b_info.shape[-1]
    weight = _packed_weight(lw, node.inputs[1])
    assert weight is not None
    zps = (lw.dense(node.inputs[2]) if _input(node, 2) else None, lw.dense(node.inputs[3]) if _input(node, 3) else None)
    bias = lw.dense(node.inputs[5]) if _input(node, 5) else None
    _gemm_int8_op(lw, node, lw.dense(node.inputs[0]), weight, lw.views[node.outputs[0]], math.prod(batch) * M, K, N,
                  zps, None, (lw.dense(node.inputs[4]), bias))


# -- QLinearMatMul -------------------------------------------------------------------------------

def qlinear_matmul_reason(lw: LowerContext, node: Node) -> str | None:
    found = matmul_integer_reason(lw, dataclasses.replace(node, inputs=(node.inputs[0], node.inputs[3],
                                                                         node.inputs[2], node.inputs[5])))
    if found:
        return found.replace("MatMulInteger", "QLinearMatMul")
    b = _info(lw, node.inputs[3])
    for slot in (1, 6, 7):
        if _input(node, slot) and _size(_info(lw, node.inputs[slot])) != 1:
            return f"input {slot} of QLinearMatMul is not a scalar"
    scale = _info(lw, node.inputs[4])
    if _size(scale) != 1 and (len(b.shape) != 2 or scale.shape != (b.shape[1],)):
        return f"b_scale of shape {list(scale.shape)}"
    if any(_info(lw, node.inputs[s]).dtype != "float32" for s in (1, 4, 6)):
        return "scales other than float32"
    return None


def lower_qlinear_matmul(lw: LowerContext, node: Node) -> None:
    a_info, b_info = _info(lw, node.inputs[0]), _info(lw, node.inputs[3])
    *batch, M, K = a_info.shape
    N = b_info.shape[-1]
    rows = math.prod(batch) * M
    a = lw.dense(node.inputs[0])
    views = {slot: lw.dense(node.inputs[slot]) for slot in (1, 2, 4, 5, 6, 7) if _input(node, slot)}
    out = lw.views[node.outputs[0]]
    weight = _packed_weight(lw, node.inputs[3])
    if weight is not None:
        _gemm_int8_op(lw, node, a, weight, out, rows, K, N, (views.get(2), views.get(5)),
                      (views[1], views[4], views[6], views.get(7)))
        return
    b = lw.dense(node.inputs[3])
    b_batch_stride = K * N if len(b_info.shape) > 2 else 0

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(views[slot]) if slot in views else -1

        desc = ctx.side.add_ints([ctx.locate(a), ctx.locate(b), ctx.locate(out), M, K, N, M * K, b_batch_stride,
                                  int(a.dtype == "int8"), int(b.dtype == "int8"), at(2), at(5),
                                  int(5 in views and views[5].size > 1), at(1), at(4), int(views[4].size > 1),
                                  at(6), at(7), int(out.dtype == "int8")])
        return [("k_qlinear_matmul", [desc, r0, r1]) for r0, r1 in parts]

    reads = {a.buffer, b.buffer} | {v.buffer for v in views.values()}
    lw.add_op(CpuOp(node.name or "QLinearMatMul", "gemm.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * rows * N * K, float(a.size + b.size + out.size),
                    _parts(rows, max(1, 65536 // max(N * K, 1))), emit, scratch=N, blas=True))


# -- QLinearConv ------------------------------------------------------------------------------------

def _conv_geometry(lw: LowerContext, node: Node):
    x, w = _info(lw, node.inputs[0]), _info(lw, node.inputs[3])
    ctx = OpContext(node, lw.opset, [x, w], [None, None])
    return window_geometry(ctx, x.shape[2:], w.shape[2:])


def qlinear_conv_reason(lw: LowerContext, node: Node) -> str | None:
    x = _info(lw, node.inputs[0])
    if len(x.shape) != 4:
        return f"{len(x.shape) - 2}-D QLinearConv (the cpu kernel is 2-D)"
    for slot in (1, 2, 6, 7):
        if _input(node, slot) and _size(_info(lw, node.inputs[slot])) != 1:
            return f"input {slot} of QLinearConv is not a scalar"
    return None


def _conv_weight_rows(lw: LowerContext, name: str) -> tuple[View, View] | None:
    """A constant QLinearConv weight (OC, cin per group, kh, kw) as the rows of
    :func:`.kernels_quant.k_qconv_int8`'s A: per output channel its ``K`` weights as uint8 (``w + 128``
    for int8), padded with zeros to a multiple of 4, then one row of K ones; and the int32 sums of the
    weight rows.  None when the weight is not a constant (the plane kernel reads it in place)."""
    init = lw.graph.initializers.get(name) if PACK_INT8_WEIGHTS else None
    if init is None:
        return None
    w = np.asarray(init)
    if w.ndim != 4 or w.dtype not in (np.uint8, np.int8):
        return None
    cache = lw.__dict__.setdefault("_packed_int8_weights", {})
    key = (name, "conv rows")
    found = cache.get(key)
    if found is None:
        flat = w.reshape(w.shape[0], -1).astype(np.int16) + (128 if w.dtype == np.int8 else 0)
        k = flat.shape[1]
        rows = np.zeros((w.shape[0] + 1, -(-k // 4) * 4), np.uint8)
        rows[:-1, :k] = flat
        rows[-1, :k] = 1  # the column sums of the gathered panels come from the micro-kernel too
        found = cache[key] = (lw.const_view(rows), lw.const_view(flat.sum(axis=1, dtype=np.int64).astype(np.int32)))
    return found


def _qconv_gemm_op(lw: LowerContext, node: Node, x: View, weight: tuple[View, View], out: View,
                   views: dict[int, View], dims: tuple[int, ...], geo) -> None:
    """The op of :func:`.kernels_quant.k_qconv_int8`: tasks over image x group x NR-pixel panels x
    chunks of output channels (chunks only where the panels are too few to feed every vEU)."""
    rows, rowsum = weight
    N, C, H, W, OC, OH, OW, cpg, group, KH, KW = dims
    K = cpg * KH * KW
    kp = -(-K // 4) * 4
    opg = OC // group
    panels = N * group * -(-(OH * OW) // NR)
    chunks = max(1, min(-(-opg // (2 * MR)), -(-8 // panels)))
    per_chunk = -(-opg // chunks)

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(views[slot]) if slot in views else -1

        desc = ctx.side.add_ints([
            ctx.locate(x), ctx.locate(rows), ctx.locate(out), C, H, W, OC, OH, OW, cpg, opg, KH, KW,
            geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.pad_begin[0],
            geo.pad_begin[1], int(x.dtype == "int8"), int(rows_signed), int(out.dtype == "int8"),
            at(2), at(5), int(5 in views and views[5].size > 1), at(1), at(4), int(views[4].size > 1), at(6), at(7),
            at(8), ctx.locate(rowsum), group, chunks, per_chunk])
        return [("k_qconv_int8", [desc, t0, t1]) for t0, t1 in parts]

    rows_signed = _info(lw, node.inputs[3]).dtype == "int8"
    reads = {x.buffer, rows.buffer, rowsum.buffer} | {v.buffer for v in views.values()}
    lw.add_op(CpuOp(node.name or "QLinearConv", "conv.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * N * OC * OH * OW * K, float(x.size + rows.size + out.size),
                    _parts(panels * chunks, max(1, 2**18 // max(NR * K * per_chunk, 1))), emit,
                    scratch=kp * NR // 4 + NR + MR * NR, blas=True))


def _depthwise_float_weights(lw: LowerContext, node: Node) -> View | None:
    """A depthwise QLinearConv's constant weights as float32 ``w - w_zp`` (kh * kw per channel) for
    :func:`.kernels_qdw.k_qdwconv`; None when the weights or their zero point are computed at run time
    or the window has too many taps for an exact float32 sum (the plane kernel runs those)."""
    w = lw.graph.initializers.get(node.inputs[3]) if PACK_INT8_WEIGHTS else None
    zp_name = _input(node, 5)
    zw = lw.graph.initializers.get(zp_name) if zp_name else np.zeros((), np.int32)
    if w is None or zw is None:
        return None
    w, zw = np.asarray(w), np.asarray(zw)
    if w.ndim != 4 or w.dtype not in (np.uint8, np.int8) or w.shape[2] * w.shape[3] > MAX_EXACT_TAPS:
        return None
    zw = zw.astype(np.float32).reshape(-1, 1, 1, 1) if zw.size > 1 else np.float32(zw.reshape(()))
    return lw.const_view(np.ascontiguousarray(w.astype(np.float32) - zw).reshape(w.shape[0], -1))


def _qdwconv_op(lw: LowerContext, node: Node, x: View, float_taps: View, out: View, views: dict[int, View],
                dims: tuple[int, ...], geo) -> None:
    """The op of :func:`.kernels_qdw.k_qdwconv`: tasks over (image, channel) planes."""
    N, C, H, W, OH, OW, KH, KW = dims

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(views[slot]) if slot in views else -1

        desc = ctx.side.add_ints([
            ctx.locate(x), ctx.locate(float_taps), ctx.locate(out), C, H, W, OH, OW, KH, geo.strides[0],
            geo.pad_begin[0], geo.pad_begin[1], int(x.dtype == "int8"), int(out.dtype == "int8"), at(2), at(1), at(4),
            int(views[4].size > 1), at(6), at(7), at(8)])
        return [("k_qdwconv", [desc, q0, q1]) for q0, q1 in parts]

    reads = {x.buffer, float_taps.buffer} | {v.buffer for v in views.values()}
    lw.add_op(CpuOp(node.name or "QLinearConv", "conv.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * N * C * OH * OW * KH * KW, float(x.size + float_taps.size + out.size),
                    _parts(N * C, 1), emit, scratch=qdw_scratch(H, W, OH, OW), blas=True))


def lower_qlinear_conv(lw: LowerContext, node: Node) -> None:
    x_info, w_info = _info(lw, node.inputs[0]), _info(lw, node.inputs[3])
    N, C, H, W = x_info.shape
    OC, cpg, KH, KW = w_info.shape
    group = int(node.attr("group", 1))
    geo = _conv_geometry(lw, node)
    OH, OW = geo.out
    x = lw.dense(node.inputs[0])
    views = {slot: lw.dense(node.inputs[slot]) for slot in (1, 2, 4, 5, 6, 7, 8) if _input(node, slot)}
    out = lw.views[node.outputs[0]]
    w_zp_ch = int(5 in views and views[5].size > 1)
    w_scale_ch = int(views[4].size > 1)
    # (other windows, dilated ones, 7x7: the int32 plane kernel; the sweeps' per-pixel fallback ran
    # 7x7 at 4x its time, ci/micro_int8.py --family depthwise)
    if cpg == 1 and OC == group and direct_fits(KH, KW, *geo.strides, *geo.dilations):
        float_taps = _depthwise_float_weights(lw, node)
        if float_taps is not None:
            _qdwconv_op(lw, node, x, float_taps, out, views, (N, C, H, W, OH, OW, KH, KW), geo)
            return
    pointwise = pointwise_weights(lw, node, PACK_INT8_WEIGHTS, geo)
    if pointwise is not None:
        pointwise_conv_op(lw, node, x, pointwise, out, views, (N, C, H, W, OC, OH, OW), geo)
        return
    symmetric = symmetric_weights(lw, node, PACK_INT8_WEIGHTS)
    if symmetric is not None and nhwc_conv_op(lw, node, x, symmetric, out, views,
                                              (N, C, H, W, OC, OH, OW, KH, KW), geo):
        return
    weight = None if cpg == 1 and OC == group else _conv_weight_rows(lw, node.inputs[3])
    if weight is not None:
        _qconv_gemm_op(lw, node, x, weight, out, views, (N, C, H, W, OC, OH, OW, cpg, group, KH, KW), geo)
        return
    w = lw.dense(node.inputs[3])

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(views[slot]) if slot in views else -1

        desc = ctx.side.add_ints([
            ctx.locate(x), ctx.locate(w), ctx.locate(out), C, H, W, OC, OH, OW, cpg, OC // group, KH, KW,
            geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.pad_begin[0],
            geo.pad_begin[1], int(x.dtype == "int8"), int(w.dtype == "int8"), int(out.dtype == "int8"),
            at(2), at(5), w_zp_ch, at(1), at(4), w_scale_ch, at(6), at(7), at(8)])
        return [("k_qlinearconv", [desc, q0, q1]) for q0, q1 in parts]

    reads = {x.buffer, w.buffer} | {v.buffer for v in views.values()}
    lw.add_op(CpuOp(node.name or "QLinearConv", "conv.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * N * OC * OH * OW * cpg * KH * KW, float(x.size + w.size + out.size),
                    _parts(N * OC, 1), emit, scratch=OH * OW, blas=True))


LOWERINGS: dict[str, Callable[[LowerContext, Node], None]] = {
    "QuantizeLinear": lower_quantize, "DequantizeLinear": lower_dequantize,
    "DynamicQuantizeLinear": lower_dynamic_quantize, "MatMulInteger": lower_matmul_integer,
    BYTE_TABLE: lower_byte_table, MATMUL_INTEGER_FLOAT: lower_matmul_integer_float,
    QUANTIZED_ADD: lower_quantized_add,
    "QLinearConv": lower_qlinear_conv, "QLinearMatMul": lower_qlinear_matmul,
}
REASONS: dict[str, Callable[[LowerContext, Node], str | None]] = {
    "QuantizeLinear": quantize_reason, "DequantizeLinear": dequantize_reason,
    "DynamicQuantizeLinear": dynamic_quantize_reason, "MatMulInteger": matmul_integer_reason,
    BYTE_TABLE: byte_table_reason, MATMUL_INTEGER_FLOAT: matmul_integer_float_reason,
    QUANTIZED_ADD: quantized_add_reason,
    "QLinearConv": qlinear_conv_reason, "QLinearMatMul": qlinear_matmul_reason,
}
