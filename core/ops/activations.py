"""Activation functions and the softmax family.

Relu lives with the elementwise ops.  Everything here keeps the input dtype;
float16 inputs are computed in float32 so that exp/log do not lose the few
bits float16 has.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .elementwise import erf, keep, numpy_op
from .registry import OpContext, broadcast_infer, normalize_axis, same_as_input


def _wide(x: np.ndarray) -> np.ndarray:
    """x in a dtype with enough precision for transcendental functions."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows: both branches are exact forms.
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z)).astype(x.dtype)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.zeros((), x.dtype), x)


def _activation(op_type: str, fn: Callable[[OpContext, np.ndarray], np.ndarray]) -> None:
    @numpy_op(op_type, infer=same_as_input)
    def compute(ctx: OpContext, x: np.ndarray) -> np.ndarray:
        return keep(fn(ctx, _wide(x)), x)


def _f(ctx: OpContext, key: str, default: float) -> float:
    return float(ctx.attr(key, default))


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


def _elu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, _f(ctx, "alpha", 1.0) * np.expm1(x))


def _selu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    alpha, gamma = _f(ctx, "alpha", _SELU_ALPHA), _f(ctx, "gamma", _SELU_GAMMA)
    return gamma * np.where(x > 0, x, alpha * np.expm1(x))


def _celu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    alpha = _f(ctx, "alpha", 1.0)
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


def _hard_sigmoid(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.clip(_f(ctx, "alpha", 0.2) * x + _f(ctx, "beta", 0.5), 0, 1)


def _gelu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    if ctx.attr("approximate", "none") == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0).astype(x.dtype)))


def _shrink(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    lambd, bias = _f(ctx, "lambd", 0.5), _f(ctx, "bias", 0.0)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


_ACTIVATIONS: dict[str, Callable[[OpContext, np.ndarray], np.ndarray]] = {
    "Sigmoid": lambda ctx, x: sigmoid(x),
    "Tanh": lambda ctx, x: np.tanh(x),
    "LeakyRelu": lambda ctx, x: np.where(x >= 0, x, _f(ctx, "alpha", 0.01) * x),
    "Elu": _elu,
    "Selu": _selu,
    "Celu": _celu,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": lambda ctx, x: x * np.clip(x / 6.0 + 0.5, 0, 1),
    "Gelu": _gelu,
    "Softplus": lambda ctx, x: softplus(x),
    "Softsign": lambda ctx, x: x / (1 + np.abs(x)),
    "ThresholdedRelu": lambda ctx, x: np.where(x > _f(ctx, "alpha", 1.0), x, 0),
    "Mish": lambda ctx, x: x * np.tanh(softplus(x)),
    "Swish": lambda ctx, x: x * sigmoid(_f(ctx, "alpha", 1.0) * x),
    "Shrink": _shrink,
}

for _op_type, _fn in _ACTIVATIONS.items():
    _activation(_op_type, _fn)


@numpy_op("PRelu", infer=broadcast_infer)
def prelu(ctx: OpContext, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return keep(np.where(x < 0, slope * x, x), x)


# -- softmax family ---------------------------------------------------------


def _along_axis(
    ctx: OpContext, x: np.ndarray, fn: Callable[[np.ndarray, int], np.ndarray]
) -> np.ndarray:
    """Apply ``fn(array, axis)`` the way the opset defines the axis.

    Before opset 13 the input is coerced to 2-D ``[prod(shape[:axis]),
    prod(shape[axis:])]`` and normalised over the second dimension; from 13 on
    it is normalised over the single ``axis`` (default -1).
    """
    if ctx.opset < 13:
        axis = normalize_axis(ctx, int(ctx.attr("axis", 1)), x.ndim)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = x.reshape(rows, -1) if x.size else x.reshape(rows, int(np.prod(x.shape[axis:])))
        return fn(flat, 1).reshape(x.shape)
    return fn(x, normalize_axis(ctx, int(ctx.attr("axis", -1)), x.ndim))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    # 1 at the first maximum along the axis, 0 elsewhere.
    winner = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, winner, 1, axis=axis)
    return out


for _op_type, _norm in {"Softmax": _softmax, "LogSoftmax": _log_softmax, "Hardmax": _hardmax}.items():

    def _register(op_type: str = _op_type, norm: Callable = _norm) -> None:
        @numpy_op(op_type, infer=same_as_input)
        def compute(ctx: OpContext, x: np.ndarray) -> np.ndarray:
            if x.size == 0:
                return x.copy()
            return keep(_along_axis(ctx, _wide(x), norm), x)

    _register()
