"""Elementwise ops: arithmetic, math functions, comparisons, logic, casts."""

from __future__ import annotations

import numpy as np

from .registry import OpContext, broadcast_bool_infer, broadcast_infer, register_op, same_as_input


def _keep(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    """numpy promotes scalars and ints; ONNX keeps the input dtype."""
    return np.asarray(x).astype(like.dtype, copy=False)


@register_op("Add", infer=broadcast_infer)
def add(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _keep(a + b, a)


@register_op("Sub", infer=broadcast_infer)
def sub(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _keep(a - b, a)


@register_op("Mul", infer=broadcast_infer)
def mul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _keep(a * b, a)


@register_op("Relu", infer=same_as_input)
def relu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return _keep(np.maximum(x, 0), x)


@register_op("Equal", infer=broadcast_bool_infer)
def equal(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.equal(a, b)
