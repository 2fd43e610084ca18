"""QLinear operators: QLinearConv and QLinearMatMul (the QOperator format of quantized models).

Both compute in integers as the spec describes: the inputs minus their zero points, multiplied and
summed exactly (int32 accumulation; here float64, exact for these ranges), plus QLinearConv's int32
bias; then requantized with the float32 multiplier ``x_scale * w_scale / y_scale`` (per output
channel / column when the weight scale is), rounded half to even, plus the output zero point,
saturated to the output's 8-bit type (the output zero point's type).  The multiplier and the
product run in float32 as onnxruntime's kernels do, so the reference rounds where they round.
"""

from __future__ import annotations

import numpy as np

from .conv import _conv_infer, conv
from .linalg import matmul_shape
from .registry import OpContext, OutSpec, register_op

_EIGHT_BIT = ("uint8", "int8")


def _check_eight_bit(ctx: OpContext, slots: tuple[int, ...]) -> None:
    for slot in slots:
        t = ctx.inputs[slot] if slot < len(ctx.inputs) else None
        if t is not None and t.dtype not in _EIGHT_BIT:
            raise ctx.fail(f"input {slot} ('{ctx.node.inputs[slot]}') is {t.dtype}; QLinear ops take uint8 or int8")


def _scalar_or_vector(ctx: OpContext, slot: int, length: int, what: str) -> None:
    t = ctx.inputs[slot] if slot < len(ctx.inputs) else None
    if t is None:
        return
    size = int(np.prod(t.shape)) if t.shape else 1
    if size != 1 and (len(t.shape) != 1 or t.shape[0] != length):
        raise ctx.fail(f"{what} '{ctx.node.inputs[slot]}' has shape {list(t.shape)}; a scalar or {length} values "
                       f"expected")


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    scaled = np.rint(acc.astype(np.float32) * multiplier.astype(np.float32))
    return np.clip(scaled + zero_point.astype(np.float32), info.min, info.max).astype(dtype)


# -- QLinearConv -------------------------------------------------------------------------------


def _qlinear_conv_infer(ctx: OpContext) -> list[OutSpec]:
    _check_eight_bit(ctx, (0, 3))
    x, w = ctx.inputs[0], ctx.inputs[3]
    assert x is not None and w is not None
    y_zp = ctx.inputs[7] if len(ctx.inputs) > 7 else None
    for slot, what in ((1, "x_scale"), (2, "x_zero_point"), (6, "y_scale"), (7, "y_zero_point")):
        _scalar_or_vector(ctx, slot, 1, what)
    out_channels = w.shape[0] if w.shape else 0
    for slot, what in ((4, "w_scale"), (5, "w_zero_point"), (8, "B (bias)")):
        _scalar_or_vector(ctx, slot, out_channels, what)
    bias = ctx.inputs[8] if len(ctx.inputs) > 8 else None
    if bias is not None and bias.dtype != "int32":
        raise ctx.fail(f"bias '{ctx.node.inputs[8]}' is {bias.dtype}; QLinearConv's bias is int32")
    inner = OpContext(ctx.node, ctx.opset, [x, w], [None, None])
    (_, shape), = _conv_infer(inner)
    return [(y_zp.dtype if y_zp is not None else "uint8", shape)]


@register_op("QLinearConv", infer=_qlinear_conv_infer)
def qlinear_conv(ctx: OpContext, x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray, w: np.ndarray,
                 w_scale: np.ndarray, w_zero_point: np.ndarray, y_scale: np.ndarray,
                 y_zero_point: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
    out_channels = w.shape[0]
    rank = x.ndim - 2
    per_channel = (1, out_channels) + (1,) * rank
    xs = x.astype(np.float64) - np.float64(np.asarray(x_zero_point).reshape(-1)[0])
    wz = np.asarray(w_zero_point).astype(np.float64).reshape(-1)
    ws = w.astype(np.float64) - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz[0])
    acc = conv(ctx, xs, ws, None)
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape(per_channel)
    w_scale32 = np.asarray(w_scale, dtype=np.float32).reshape(-1)
    multiplier = (np.float32(np.asarray(x_scale).reshape(-1)[0]) * w_scale32) / np.float32(
        np.asarray(y_scale).reshape(-1)[0])
    multiplier = multiplier.reshape(per_channel) if multiplier.size > 1 else multiplier.reshape(())
    out_dtype = np.dtype(y_zero_point.dtype) if y_zero_point is not None else np.dtype(np.uint8)
    zp = np.asarray(y_zero_point if y_zero_point is not None else 0).reshape(-1)[0]
    # acc holds exact integers below 2**31 (int32 accumulation): float32(acc) rounds as onnxruntime's
    # float32(int32) does.
    return _requantize(acc.astype(np.int64), multiplier, np.asarray(zp), out_dtype)


# -- QLinearMatMul -----------------------------------------------------------------------------


def _qlinear_matmul_infer(ctx: OpContext) -> list[OutSpec]:
    _check_eight_bit(ctx, (0, 3))
    a, b = ctx.inputs[0], ctx.inputs[3]
    assert a is not None and b is not None
    y_zp = ctx.inputs[7] if len(ctx.inputs) > 7 else None
    return [(y_zp.dtype if y_zp is not None else "uint8", matmul_shape(ctx, a.shape, b.shape))]


@register_op("QLinearMatMul", infer=_qlinear_matmul_infer)
def qlinear_matmul(ctx: OpContext, a: np.ndarray, a_scale: np.ndarray, a_zero_point: np.ndarray, b: np.ndarray,
                   b_scale: np.ndarray, b_zero_point: np.ndarray, y_scale: np.ndarray,
                   y_zero_point: np.ndarray | None = None) -> np.ndarray:
    a64 = a.astype(np.int64) - np.asarray(a_zero_point).astype(np.int64)
    b64 = b.astype(np.int64) - np.asarray(b_zero_point).astype(np.int64)
    acc = np.matmul(a64, b64)
    multiplier = (np.asarray(a_scale, dtype=np.float32) * np.asarray(b_scale, dtype=np.float32)) / np.asarray(
        y_scale, dtype=np.float32)
    out_dtype = np.dtype(y_zero_point.dtype) if y_zero_point is not None else np.dtype(np.uint8)
    zp = np.asarray(y_zero_point if y_zero_point is not None else 0)
    return _requantize(acc, multiplier, zp, out_dtype)
