"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Only integer quantized types numpy has are supported (uint8, int8, uint16,
int16, and int32 for dequantization); float8 and 4-bit types are rejected by
the dtype mapping with a clear error.  The scale's shape picks the
granularity: a scalar (per tensor), a 1-D tensor along ``axis`` (per axis),
or the input's rank with ``axis`` shrunk by ``block_size`` (blocked).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import from_onnx
from .control import RAMMER_DOMAIN
from .elementwise import numpy_op
from .linalg import matmul_integer, matmul_shape
from .registry import OpContext, OutSpec, normalize_axis, register_op


def _expand_scale(ctx: OpContext, param: np.ndarray, x_shape: tuple[int, ...]) -> np.ndarray:
    """Reshape or repeat a scale / zero point so that it broadcasts against x."""
    param = np.asarray(param)
    if param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    axis = normalize_axis(ctx, int(ctx.attr("axis", 1)), len(x_shape))
    block = int(ctx.attr("block_size", 0))
    if param.ndim == 1 and not block:
        if param.shape[0] != x_shape[axis]:
            raise ctx.fail(f"per-axis scale has {param.shape[0]} values but axis {axis} of the input has {x_shape[axis]}")
        return param.reshape([-1 if i == axis else 1 for i in range(len(x_shape))])
    if param.ndim != len(x_shape) or block <= 0:
        raise ctx.fail(
            f"scale of shape {list(param.shape)} fits neither per-tensor, per-axis nor blocked "
            f"quantization of an input of shape {list(x_shape)} (block_size={block})"
        )
    # Blocked: each scale covers block_size consecutive elements along axis.
    return np.repeat(param, block, axis=axis).take(np.arange(x_shape[axis]), axis=axis)


def _check_scales(ctx: OpContext) -> None:
    """At import: the scale's and zero point's shapes fit the input (what ``_expand_scale`` needs)."""
    x, scale = ctx.inputs[0], ctx.inputs[1]
    zp = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if x is None or scale is None:
        return
    shape = tuple(scale.shape)
    if zp is not None and tuple(zp.shape) != shape:
        raise ctx.fail(f"zero point of shape {list(zp.shape)} must have the scale's shape {list(shape)}")
    if len(shape) <= 1 and (scale.size == 1 if shape else True):
        return
    axis = normalize_axis(ctx, int(ctx.attr("axis", 1)), len(x.shape))
    block = int(ctx.attr("block_size", 0))
    if len(shape) == 1 and not block:
        if shape[0] != x.shape[axis]:
            raise ctx.fail(f"per-axis scale has {shape[0]} values but axis {axis} of the input "
                           f"{list(x.shape)} has {x.shape[axis]}")
        return
    blocked = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x.shape)) if block > 0 else None
    if shape != blocked:
        raise ctx.fail(f"scale of shape {list(shape)} fits neither per-tensor, per-axis nor blocked quantization "
                       f"of an input of shape {list(x.shape)} (axis={axis}, block_size={block})")


def _saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(values, info.min, info.max).astype(dtype)


def _quantized_dtype(ctx: OpContext, zero_point_dtype: str | None) -> str:
    if zero_point_dtype is not None:
        return zero_point_dtype
    output_dtype = int(ctx.attr("output_dtype", 0))
    return from_onnx(output_dtype, ctx.node.label) if output_dtype else "uint8"


def _quantize_infer(ctx: OpContext) -> list[OutSpec]:
    _check_scales(ctx)
    zp = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    return [(_quantized_dtype(ctx, zp.dtype if zp is not None else None), ctx.input(0).shape)]


@numpy_op("QuantizeLinear", infer=_quantize_infer)
def quantize_linear(
    ctx: OpContext, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
) -> np.ndarray:
    target = np.dtype(_quantized_dtype(ctx, zero_point.dtype.name if zero_point is not None else None))
    if target.kind not in "iu":
        raise ctx.fail(f"quantizing to {target} is not supported (integer types only)")
    # The division runs in the scale's precision (or the 'precision' attribute's).
    precision = int(ctx.attr("precision", 0))
    work = np.dtype(from_onnx(precision, ctx.node.label)) if precision else scale.dtype
    scaled = np.rint(x.astype(work) / _expand_scale(ctx, scale, x.shape).astype(work))
    if zero_point is not None:
        scaled = scaled + _expand_scale(ctx, zero_point, x.shape).astype(np.float64)
    return _saturate(scaled, target)


def _dequantize_infer(ctx: OpContext) -> list[OutSpec]:
    _check_scales(ctx)
    output_dtype = int(ctx.attr("output_dtype", 0))
    dtype = from_onnx(output_dtype, ctx.node.label) if output_dtype else ctx.input(1).dtype
    return [(dtype, ctx.input(0).shape)]


@numpy_op("DequantizeLinear", infer=_dequantize_infer)
def dequantize_linear(
    ctx: OpContext, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
) -> np.ndarray:
    out_dtype = np.dtype(_dequantize_infer(ctx)[0][0])
    # Subtract in a wide integer type: uint8 - uint8 would wrap.
    shifted = x.astype(np.int64)
    if zero_point is not None:
        shifted = shifted - _expand_scale(ctx, zero_point, x.shape).astype(np.int64)
    return (shifted.astype(out_dtype) * _expand_scale(ctx, scale, x.shape).astype(out_dtype)).astype(out_dtype)


def _dynamic_infer(ctx: OpContext) -> list[OutSpec]:
    return [("uint8", ctx.input(0).shape), ("float32", ()), ("uint8", ())]


@numpy_op("DynamicQuantizeLinear", infer=_dynamic_infer)
def dynamic_quantize_linear(ctx: OpContext, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # The range always includes 0 so that 0 is exactly representable.
    lo = min(0.0, float(x.min())) if x.size else 0.0
    hi = max(0.0, float(x.max())) if x.size else 0.0
    # An all-zero input would give scale 0 and 0/0 below; onnxruntime uses 1.
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zero_point = _saturate(np.rint(np.float32(0.0) - np.float32(lo) / scale), np.dtype(np.uint8))
    y = _saturate(np.rint(x.astype(np.float32) / scale) + zero_point, np.dtype(np.uint8))
    return y, np.asarray(scale), np.asarray(zero_point)


#: A lookup of every byte of an 8-bit tensor in a 256-entry table (rammer domain): what
#: :mod:`rammer.passes.qdq_lookup` makes of DequantizeLinear -> per-element float ops -> QuantizeLinear.
BYTE_TABLE = "ByteTable"


def _byte_table_infer(ctx: OpContext) -> list[OutSpec]:
    x, table = ctx.input(0), ctx.input(1)
    if x.dtype not in ("uint8", "int8") or table.dtype not in ("uint8", "int8"):
        raise ctx.fail(f"input {x.dtype} and table {table.dtype}: both must be uint8 or int8")
    if tuple(table.shape) != (256,):
        raise ctx.fail(f"table of shape {list(table.shape)}; 256 entries expected (one per byte value)")
    return [(table.dtype, x.shape)]


@register_op(BYTE_TABLE, infer=_byte_table_infer, domain=RAMMER_DOMAIN)
def byte_table(ctx: OpContext, x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``y = table[byte of x]``: the byte read unsigned, so an int8 -1 is entry 255."""
    return table[np.ascontiguousarray(x).view(np.uint8)]


#: MatMulInteger whose int32 result is dequantized in the same op (rammer domain): inputs (A, B, A's zero
#: point, B's zero point, scale, bias), ``y = float32(MatMulInteger(A, B, za, zb)) * scale + bias`` with
#: float32 rounding after the product and after the sum, as the Cast -> Mul -> Add that
#: :mod:`rammer.passes.qdq_matmul_float` makes it of (onnxruntime's ``quantize_dynamic`` writes that chain
#: after every MatMulInteger).  ``scale``: one element or one per column; ``bias`` (optional): one per column.
MATMUL_INTEGER_FLOAT = "MatMulIntegerToFloat"


def _matmul_integer_float_infer(ctx: OpContext) -> list[OutSpec]:
    a, b = ctx.input(0), ctx.input(1)
    return [("float32", matmul_shape(ctx, a.shape, b.shape))]


@register_op(MATMUL_INTEGER_FLOAT, infer=_matmul_integer_float_infer, domain=RAMMER_DOMAIN)
def matmul_integer_float(ctx: OpContext, a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None,
                         b_zero_point: np.ndarray | None, scale: np.ndarray,
                         bias: np.ndarray | None = None) -> np.ndarray:
    y = matmul_integer(ctx, a, b, a_zero_point, b_zero_point).astype(np.float32) * scale.astype(np.float32)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return y.astype(np.float32, copy=False)


#: The sum of two dequantized 8-bit tensors, requantized (rammer domain): inputs (a, a scale, a zero
#: point, b, b scale, b zero point, y scale, y zero point), as ONNX's contrib QLinearAdd orders them; attribute
#: ``relu`` (0 or 1).  ``y = QuantizeLinear([Relu](DequantizeLinear(a) + DequantizeLinear(b)))`` with every
#: step in float32 as those ops compute it, so it is bit for bit the chain that
#: :mod:`rammer.passes.qdq_add` makes it of (onnxruntime's QLinearAdd folds the scales into two multipliers
#: and rounds once: equal within one step).  Per-tensor scales and zero points; a and b broadcast.
QUANTIZED_ADD = "QuantizedAdd"


def _quantized_add_infer(ctx: OpContext) -> list[OutSpec]:
    a, b = ctx.input(0), ctx.input(3)
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in ("uint8", "int8"):
            raise ctx.fail(f"input {name} is {t.dtype}: QuantizedAdd adds uint8 or int8 tensors")
    for slot in (1, 2, 4, 5, 6, 7):
        p = ctx.inputs[slot] if slot < len(ctx.inputs) else None
        if p is not None and p.size != 1:
            raise ctx.fail(f"input {slot} has shape {list(p.shape)}: QuantizedAdd takes per-tensor scales and "
                           "zero points")
    y_zp = ctx.inputs[7] if len(ctx.inputs) > 7 else None
    shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    return [(y_zp.dtype if y_zp is not None else "uint8", shape)]


@register_op(QUANTIZED_ADD, infer=_quantized_add_infer, domain=RAMMER_DOMAIN)
def quantized_add(ctx: OpContext, a: np.ndarray, a_scale: np.ndarray, a_zero_point: np.ndarray | None,
                  b: np.ndarray, b_scale: np.ndarray, b_zero_point: np.ndarray | None, y_scale: np.ndarray,
                  y_zero_point: np.ndarray | None = None) -> np.ndarray:
    def dequantized(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
        shifted = x.astype(np.int64) - (np.int64(np.asarray(zp).reshape(())) if zp is not None else 0)
        return shifted.astype(np.float32) * np.float32(np.asarray(scale).reshape(()))

    total = dequantized(a, a_scale, a_zero_point) + dequantized(b, b_scale, b_zero_point)
    if int(ctx.attr("relu", 0)):
        total = np.maximum(total, np.float32(0.0))
    target = np.dtype(y_zero_point.dtype if y_zero_point is not None else np.uint8)
    scaled = np.rint(total / np.float32(np.asarray(y_scale).reshape(())))
    if y_zero_point is not None:
        scaled = scaled + np.float64(np.asarray(y_zero_point).reshape(()))
    return _saturate(scaled, target)
