"""Elementwise ops: arithmetic, math functions, comparisons, logic, casts.

ONNX never promotes dtypes: every output here has the dtype ONNX prescribes
(usually the first input's), whereas numpy would promote mixed or scalar
operands.  :func:`numpy_op` casts results back and silences numpy's floating
point warnings (inf/nan results are what ONNX specifies, not errors).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import numpy as np

from ..dtypes import from_onnx, np_dtype
from .registry import (
    InferFn,
    OpContext,
    OutSpec,
    broadcast_bool_infer,
    broadcast_infer,
    broadcast_shapes,
    register_op,
    same_as_input,
)


def numpy_op(name: str | Iterable[str], infer: InferFn, **kwargs: object) -> Callable:
    """``register_op`` for numpy computes: silences fp warnings, returns ndarrays.

    numpy returns scalars (not arrays) for 0-d operands and warns on overflow
    and division by zero; both would leak into the runtime otherwise.
    """

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def compute(ctx: OpContext, *args: np.ndarray | None) -> np.ndarray | tuple[np.ndarray, ...]:
            with np.errstate(all="ignore"):
                out = fn(ctx, *args)
            if isinstance(out, tuple):
                return tuple(np.asarray(o) for o in out)
            return np.asarray(out)

        register_op(name, infer=infer, **kwargs)(compute)  # type: ignore[arg-type]
        return fn

    return deco


def keep(x: np.ndarray | np.generic, like: np.ndarray) -> np.ndarray:
    """numpy promotes scalars and ints; ONNX keeps the input dtype."""
    return np.asarray(x).astype(like.dtype, copy=False)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, exact to double precision, in x's dtype.

    numpy has no erf and scipy is not a dependency.  math.erf per element
    costs ~0.25 s per million elements; a numba ufunc would be 5x faster but
    costs ~1 s of import and compilation per process, which the reference
    implementation (exactness first) does not need.
    """
    x = np.asarray(x)
    return np.asarray(_erf_scalar(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


# -- unary math ----------------------------------------------------------

_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Sqrt": np.sqrt,
    "Exp": np.exp,
    "Log": np.log,
    "Erf": erf,
    "Reciprocal": lambda x: np.divide(1, x),
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.rint,  # half to even, as ONNX specifies
    "Sign": np.sign,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
    "Not": np.logical_not,
    "BitwiseNot": np.invert,
    "Relu": lambda x: np.maximum(x, 0),
}


def _register_unary(op_type: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    @numpy_op(op_type, infer=same_as_input)
    def compute(ctx: OpContext, x: np.ndarray) -> np.ndarray:
        return keep(fn(x), x)


for _op_type, _fn in _UNARY.items():
    _register_unary(_op_type, _fn)


@numpy_op("Identity", infer=same_as_input)
def identity(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return x


@numpy_op("IsNaN", infer=lambda ctx: [("bool", ctx.input(0).shape)])
def isnan(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.isnan(x)


@numpy_op("IsInf", infer=lambda ctx: [("bool", ctx.input(0).shape)])
def isinf(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    positive = np.isposinf(x) if ctx.attr("detect_positive", 1) else np.zeros(x.shape, bool)
    negative = np.isneginf(x) if ctx.attr("detect_negative", 1) else np.zeros(x.shape, bool)
    return positive | negative


# -- binary arithmetic ---------------------------------------------------


@numpy_op("Add", infer=broadcast_infer)
def add(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return keep(a + b, a)


@numpy_op("Sub", infer=broadcast_infer)
def sub(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return keep(a - b, a)


@numpy_op("Mul", infer=broadcast_infer)
def mul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return keep(a * b, a)


@numpy_op("Div", infer=broadcast_infer)
def div(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # Integer division truncates toward zero (C semantics); numpy floors.
        quotient = np.floor_divide(a, b)
        if a.dtype.kind == "i":
            inexact = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            quotient = quotient + inexact.astype(a.dtype)
        return keep(quotient, a)
    return keep(np.true_divide(a, b), a)


@numpy_op("Mod", infer=broadcast_infer)
def mod(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # fmod=1: sign of the dividend (C fmod); fmod=0: sign of the divisor (Python %).
    if ctx.attr("fmod", 0):
        return keep(np.fmod(a, b), a)
    return keep(np.mod(a, b), a)


@numpy_op("Pow", infer=broadcast_infer)
def power(ctx: OpContext, base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    # The output has the base's dtype whatever the exponent's (opset >= 12).
    if base.dtype.kind in "iu" and exponent.dtype.kind in "iu" and not (exponent < 0).any():
        return keep(np.power(base, exponent.astype(np.int64)), base)
    if base.dtype.kind in "iu":
        return keep(np.trunc(np.power(base.astype(np.float64), exponent.astype(np.float64))), base)
    # Compute in the wider of the two types (a float32 exponent of a float16
    # base keeps its precision), then narrow to the base's dtype.
    return keep(np.power(base, exponent), base)


@numpy_op("BitShift", infer=broadcast_infer)
def bitshift(ctx: OpContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    in_range = (y >= 0) & (y < bits)
    shift = np.where(in_range, y, 0).astype(x.dtype)
    left = str(ctx.attr("direction", "")).upper() == "LEFT"
    shifted = np.left_shift(x, shift) if left else np.right_shift(x, shift)
    # A shift by >= the width (or a negative one) empties the value: 0, or -1
    # for an arithmetic right shift of a negative number; C leaves it undefined.
    if left:
        overflow = np.zeros_like(x)
    else:
        overflow = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else np.zeros_like(x)
    return keep(np.where(in_range, shifted, overflow), x)


for _op_type, _fn in {
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}.items():

    def _bitwise(fn: Callable = _fn) -> Callable:
        return lambda ctx, a, b: keep(fn(a, b), a)

    numpy_op(_op_type, infer=broadcast_infer)(_bitwise())


# -- comparisons and logic -------------------------------------------------

for _op_type, _fn in {
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
}.items():

    def _compare(fn: Callable = _fn) -> Callable:
        return lambda ctx, a, b: np.asarray(fn(a, b)).astype(bool)

    numpy_op(_op_type, infer=broadcast_bool_infer)(_compare())


def _where_infer(ctx: OpContext) -> list[OutSpec]:
    shapes = [t.shape for t in ctx.inputs if t is not None]
    return [(ctx.input(1).dtype, broadcast_shapes(ctx, shapes))]


@numpy_op("Where", infer=_where_infer)
def where(ctx: OpContext, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return keep(np.where(cond, x, y), x)


# -- variadic ------------------------------------------------------------


def _variadic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable:
    def compute(ctx: OpContext, *xs: np.ndarray) -> np.ndarray:
        present = [x for x in xs if x is not None]
        out = functools.reduce(fn, present)
        return keep(np.broadcast_to(out, np.broadcast_shapes(*(x.shape for x in present))), present[0])

    return compute


numpy_op("Sum", infer=broadcast_infer)(_variadic(np.add))
numpy_op("Min", infer=broadcast_infer)(_variadic(np.minimum))
numpy_op("Max", infer=broadcast_infer)(_variadic(np.maximum))


@numpy_op("Mean", infer=broadcast_infer)
def mean(ctx: OpContext, *xs: np.ndarray) -> np.ndarray:
    present = [x for x in xs if x is not None]
    total = _variadic(np.add)(ctx, *present)
    return keep(total / len(present), present[0])


# -- clipping and dropout ------------------------------------------------


@numpy_op("Clip", infer=same_as_input)
def clip(ctx: OpContext, x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    if ctx.opset < 11:  # bounds were float attributes before opset 11
        lo = ctx.attr("min", None)
        hi = ctx.attr("max", None)
    out = x
    # max-then-min, so that min > max gives max everywhere, as the spec says.
    if lo is not None:
        out = np.maximum(out, np.asarray(lo).astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi).astype(x.dtype))
    return keep(out, x)


def _dropout_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.input(0)
    return [(x.dtype, x.shape), ("bool", x.shape)][: max(1, len(ctx.node.outputs))]


@numpy_op("Dropout", infer=_dropout_infer)
def dropout(
    ctx: OpContext, x: np.ndarray, ratio: np.ndarray | None = None, training: np.ndarray | None = None
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    if ctx.opset < 12:
        rate, train = float(ctx.attr("ratio", 0.5)), False  # opset 10/11: inference only
    else:
        # (a one-element [1] tensor is read as the scalar the spec asks for)
        rate = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
        train = training is not None and bool(np.asarray(training).reshape(-1)[0])
    if not train or rate == 0.0:
        out, mask = x, np.ones(x.shape, bool)
    else:
        # Training mode: a random mask, kept elements scaled by 1/(1-ratio).
        # RandomState(seed) is the generator the ONNX test data was drawn with.
        rng = np.random.RandomState(ctx.attr("seed", None))
        mask = rng.uniform(0.0, 1.0, x.shape) >= rate
        out = keep(np.where(mask, x / (1.0 - rate), 0), x)
    return (out, mask) if len(ctx.node.outputs) > 1 else out


# -- casts -----------------------------------------------------------------


def _parse_number(text: str, integer: bool) -> float | int:
    # Python's float() reads "NaN", "INF", "-inf", "1e-3"... as ONNX wants;
    # integers are parsed exactly when they are written as integers.
    if integer:
        try:
            return int(text)
        except ValueError:
            return int(float(text))  # "100.5" -> 100, truncating like a float cast
    return float(text)


def cast_to(x: np.ndarray, dtype: str, ctx: OpContext | None = None) -> np.ndarray:
    """ONNX Cast: floats truncate toward zero into ints; strings parse/print."""
    if x.dtype == object and dtype != "object":
        try:
            return _cast_from_strings(x, dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            bad = next((s for s in x.ravel() if not _is_number(str(s))), None)
            message = (f"cannot convert the string {str(bad)[:40]!r} to {dtype}: the input must hold numbers "
                       f"written as text" if bad is not None else f"cannot convert the strings to {dtype} ({exc})")
            if ctx is None:
                raise ValueError(message) from None
            raise ctx.fail(message) from None
    return _cast_from_strings(x, dtype)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _cast_from_strings(x: np.ndarray, dtype: str) -> np.ndarray:
    target = np_dtype(dtype)
    if dtype == "object":
        # bool prints as "1"/"0" (onnxruntime does so); numbers in shortest form.
        printable = x.astype(np.uint8) if x.dtype == bool else x
        return printable.astype(np.str_).astype(object)
    if x.dtype == object:
        integer = target.kind in "iu"
        parsed = [_parse_number(str(s), integer) for s in x.ravel()]
        if target.kind == "b":
            return (np.array(parsed, dtype=np.float64) != 0).reshape(x.shape)
        if integer:  # through the 64-bit type, so that narrowing wraps as ONNX says
            wide = np.array(parsed, dtype=object).astype(np.int64 if target.kind == "i" else np.uint64)
            return wide.astype(target).reshape(x.shape)
        return np.array(parsed, dtype=np.float64).astype(target).reshape(x.shape)
    return x.astype(target)


@numpy_op("Cast", infer=lambda ctx: [(from_onnx(int(ctx.attr("to")), ctx.node.label), ctx.input(0).shape)])
def cast(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return cast_to(x, from_onnx(int(ctx.attr("to")), ctx.node.label), ctx)


@numpy_op("CastLike", infer=lambda ctx: [(ctx.input(1).dtype, ctx.input(0).shape)])
def cast_like(ctx: OpContext, x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return cast_to(x, "object" if like.dtype == object else like.dtype.name, ctx)
