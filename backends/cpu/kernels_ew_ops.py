"""The opcode loops of the fused elementwise interpreter: one vectorizable loop per float32 opcode
over a register's first ``n`` elements (:func:`unary_loop`, :func:`binary_loop`), shared by the
block interpreter (:mod:`.kernels_ew`) and the one-pass row programs (:mod:`.kernels_ew_direct`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .ewops import OPCODE
from .fastmath import erf32, exp32, sigmoid32, tanh32
from .ukernel_ew import vec_erf, vec_exp, vec_gelu_erf, vec_gelu_tanh, vec_sigmoid, vec_tanh

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

#: EXP, SIGMOID, TANH, ERF and the GELUs through the vector kernels of :mod:`.ukernel_ew` (the same
#: values; off: the numba loops, which LLVM left scalar).
USE_VEC_EW = True

# numba folds module globals into the compiled code as constants.
COPY = OPCODE["COPY"]
NEG = OPCODE["NEG"]
ABS = OPCODE["ABS"]
RELU = OPCODE["RELU"]
SIGMOID = OPCODE["SIGMOID"]
TANH = OPCODE["TANH"]
EXP = OPCODE["EXP"]
LOG = OPCODE["LOG"]
SQRT = OPCODE["SQRT"]
RECIP = OPCODE["RECIP"]
FLOOR = OPCODE["FLOOR"]
CEIL = OPCODE["CEIL"]
ROUND = OPCODE["ROUND"]
ERF = OPCODE["ERF"]
SIN = OPCODE["SIN"]
COS = OPCODE["COS"]
SOFTPLUS = OPCODE["SOFTPLUS"]
SOFTSIGN = OPCODE["SOFTSIGN"]
SIGN = OPCODE["SIGN"]
NOT = OPCODE["NOT"]
ISNAN = OPCODE["ISNAN"]
LEAKY = OPCODE["LEAKY"]
ELU = OPCODE["ELU"]
HARDSIGMOID = OPCODE["HARDSIGMOID"]
CLIP = OPCODE["CLIP"]
SELU = OPCODE["SELU"]
AFFINE = OPCODE["AFFINE"]
THRESHOLDED = OPCODE["THRESHOLDED"]
CELU = OPCODE["CELU"]
HARDSWISH = OPCODE["HARDSWISH"]
GELU_TANH = OPCODE["GELU_TANH"]
GELU_ERF = OPCODE["GELU_ERF"]
TAN = OPCODE["TAN"]
ATAN = OPCODE["ATAN"]
ADD = OPCODE["ADD"]
SUB = OPCODE["SUB"]
MUL = OPCODE["MUL"]
DIV = OPCODE["DIV"]
POW = OPCODE["POW"]
MAX = OPCODE["MAX"]
MIN = OPCODE["MIN"]
PRELU = OPCODE["PRELU"]
FMOD = OPCODE["FMOD"]
EQ = OPCODE["EQ"]
LT = OPCODE["LT"]
LE = OPCODE["LE"]
GT = OPCODE["GT"]
GE = OPCODE["GE"]
AND = OPCODE["AND"]
OR = OPCODE["OR"]
XOR = OPCODE["XOR"]
WHERE = OPCODE["WHERE"]

_SQRT_2_OVER_PI = f32(math.sqrt(2.0 / math.pi))
_INV_SQRT2 = f32(1.0 / math.sqrt(2.0))


@njit(inline="always", error_model="numpy")
def _round_half_even(x):
    r = f32(np.floor(x))
    d = x - r
    if d > f32(0.5) or (d == f32(0.5) and np.fmod(r, 2.0) != 0.0):
        r += f32(1.0)
    return r


@njit(inline="always")
def relu_elem(x):
    """ReLU of one float32, NaN kept (the RELU opcode's value)."""
    return x if (x > f32(0.0) or x != x) else f32(0.0)


@njit(inline="always")
def clip_elem(y, lo, hi):
    """``y`` limited to [lo, hi], NaN kept (the CLIP opcode's value)."""
    y = y if y > lo or y != y else lo
    return y if y < hi or y != y else hi


@njit(inline="always")
def hardswish_elem(x):
    """HardSwish of one float32 as the HARDSWISH opcode computes it: ``x * clip(x / 6 + 0.5, 0, 1)``."""
    y = x * f32(1.0 / 6.0) + f32(0.5)
    y = y if y > f32(0.0) or y != y else f32(0.0)
    y = y if y < f32(1.0) or y != y else f32(1.0)
    return x * y


@njit(**_JIT)
def unary_loop(op, D, A, n, p0, p1):
    """D[:n] = op(A[:n]) for one-input opcodes (D and A are distinct registers)."""
    if op == COPY:
        for j in range(n):
            D[j] = A[j]
    elif op == NEG:
        for j in range(n):
            D[j] = -A[j]
    elif op == ABS:
        for j in range(n):
            D[j] = abs(A[j])
    elif op == RELU:
        for j in range(n):
            D[j] = relu_elem(A[j])
    elif op == SIGMOID:
        if USE_VEC_EW:
            vec_sigmoid(n, A, 0, D, 0)
        else:
            for j in range(n):
                D[j] = sigmoid32(A[j])
    elif op == TANH:
        if USE_VEC_EW:
            vec_tanh(n, A, 0, D, 0)
        else:
            for j in range(n):
                D[j] = tanh32(A[j])
    elif op == EXP:
        if USE_VEC_EW:
            vec_exp(n, A, 0, D, 0)
        else:
            for j in range(n):
                D[j] = exp32(A[j])
    elif op == LOG:
        for j in range(n):
            x = A[j]
            if x > f32(0.0):
                D[j] = f32(math.log(x))
            elif x == f32(0.0):
                D[j] = f32(-np.inf)
            elif x != x:
                D[j] = x
            else:
                D[j] = f32(np.nan)
    elif op == SQRT:
        for j in range(n):
            x = A[j]
            D[j] = f32(math.sqrt(x)) if x >= f32(0.0) else f32(np.nan)
    elif op == RECIP:
        for j in range(n):
            D[j] = f32(1.0) / A[j]
    elif op == FLOOR:
        for j in range(n):
            D[j] = f32(np.floor(A[j]))
    elif op == CEIL:
        for j in range(n):
            D[j] = f32(np.ceil(A[j]))
    elif op == ROUND:
        for j in range(n):
            D[j] = _round_half_even(A[j])
    elif op == ERF:
        if USE_VEC_EW:
            vec_erf(n, A, 0, D, 0)
        else:
            for j in range(n):
                D[j] = erf32(A[j])
    elif op == SIN:
        for j in range(n):
            D[j] = f32(math.sin(A[j]))
    elif op == COS:
        for j in range(n):
            D[j] = f32(math.cos(A[j]))
    elif op == TAN:
        for j in range(n):
            D[j] = f32(math.tan(A[j]))
    elif op == ATAN:
        for j in range(n):
            D[j] = f32(math.atan(A[j]))
    elif op == SOFTPLUS:
        for j in range(n):
            x = A[j]
            # log(1 + e**x) = max(x, 0) + log1p(e**-|x|), stable for any x
            D[j] = f32(max(np.float64(x), 0.0) + math.log1p(math.exp(-abs(np.float64(x))))) if x == x else x
    elif op == SOFTSIGN:
        for j in range(n):
            x = A[j]
            D[j] = x / (f32(1.0) + abs(x))
    elif op == SIGN:
        for j in range(n):
            x = A[j]
            D[j] = f32(1.0) if x > 0 else (f32(-1.0) if x < 0 else x)
    elif op == NOT:
        for j in range(n):
            D[j] = f32(1.0) if A[j] == f32(0.0) else f32(0.0)
    elif op == ISNAN:
        for j in range(n):
            x = A[j]
            D[j] = f32(1.0) if x != x else f32(0.0)
    elif op == LEAKY:
        for j in range(n):
            x = A[j]
            D[j] = x if x >= f32(0.0) else x * p0
    elif op == ELU:
        for j in range(n):
            x = A[j]
            D[j] = x if x > f32(0.0) else f32(p0 * math.expm1(np.float64(x)))
    elif op == CELU:
        for j in range(n):
            x = A[j]
            D[j] = x if x > f32(0.0) else f32(p0 * math.expm1(np.float64(x) / p0))
    elif op == SELU:
        for j in range(n):
            x = A[j]
            D[j] = f32(p1 * x) if x > f32(0.0) else f32(p1 * p0 * math.expm1(np.float64(x)))
    elif op == HARDSIGMOID:
        for j in range(n):
            y = A[j] * p0 + p1
            y = y if y > f32(0.0) or y != y else f32(0.0)
            D[j] = y if y < f32(1.0) or y != y else f32(1.0)
    elif op == CLIP:
        for j in range(n):
            D[j] = clip_elem(A[j], p0, p1)
    elif op == AFFINE:
        for j in range(n):
            D[j] = A[j] * p0 + p1
    elif op == THRESHOLDED:
        for j in range(n):
            x = A[j]
            D[j] = x if x > p0 else f32(0.0)
    elif op == HARDSWISH:
        for j in range(n):
            D[j] = hardswish_elem(A[j])
    elif op == GELU_TANH:
        if USE_VEC_EW:
            vec_gelu_tanh(n, A, 0, D, 0)
        else:
            for j in range(n):
                x = A[j]
                D[j] = f32(0.5) * x * (f32(1.0) + tanh32(_SQRT_2_OVER_PI * (x + f32(0.044715) * x * x * x)))
    elif op == GELU_ERF:
        if USE_VEC_EW:
            vec_gelu_erf(n, A, 0, D, 0)
        else:
            for j in range(n):
                x = A[j]
                D[j] = f32(0.5) * x * (f32(1.0) + erf32(x * _INV_SQRT2))


@njit(**_JIT)
def binary_loop(op, D, A, Bv, n):
    """D[:n] = op(A[:n], Bv[:n]) for two-input opcodes."""
    if op == ADD:
        for j in range(n):
            D[j] = A[j] + Bv[j]
    elif op == SUB:
        for j in range(n):
            D[j] = A[j] - Bv[j]
    elif op == MUL:
        for j in range(n):
            D[j] = A[j] * Bv[j]
    elif op == DIV:
        for j in range(n):
            D[j] = A[j] / Bv[j]
    elif op == POW:
        for j in range(n):
            D[j] = f32(A[j] ** Bv[j])
    elif op == MAX:
        for j in range(n):
            x = A[j]
            y = Bv[j]
            D[j] = x if (x > y or x != x) else y
    elif op == MIN:
        for j in range(n):
            x = A[j]
            y = Bv[j]
            D[j] = x if (x < y or x != x) else y
    elif op == PRELU:
        for j in range(n):
            x = A[j]
            D[j] = x if x >= f32(0.0) else x * Bv[j]
    elif op == FMOD:
        for j in range(n):
            D[j] = f32(np.fmod(A[j], Bv[j]))
    elif op == EQ:
        for j in range(n):
            D[j] = f32(1.0) if A[j] == Bv[j] else f32(0.0)
    elif op == LT:
        for j in range(n):
            D[j] = f32(1.0) if A[j] < Bv[j] else f32(0.0)
    elif op == LE:
        for j in range(n):
            D[j] = f32(1.0) if A[j] <= Bv[j] else f32(0.0)
    elif op == GT:
        for j in range(n):
            D[j] = f32(1.0) if A[j] > Bv[j] else f32(0.0)
    elif op == GE:
        for j in range(n):
            D[j] = f32(1.0) if A[j] >= Bv[j] else f32(0.0)
    elif op == AND:
        for j in range(n):
            D[j] = f32(1.0) if (A[j] != f32(0.0) and Bv[j] != f32(0.0)) else f32(0.0)
    elif op == OR:
        for j in range(n):
            D[j] = f32(1.0) if (A[j] != f32(0.0) or Bv[j] != f32(0.0)) else f32(0.0)
    elif op == XOR:
        for j in range(n):
            D[j] = f32(1.0) if ((A[j] != f32(0.0)) != (Bv[j] != f32(0.0))) else f32(0.0)
