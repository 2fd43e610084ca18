"""The fused elementwise rKernel: a block interpreter over register programs.

A program (see :mod:`.ewops`) describes one fused group over a 4-D
iteration space ``(d0, d1, d2, d3)``; an rTask covers rows ``[r0, r1)`` of the
flattened first three dimensions and columns ``[c0, c1)`` of ``d3``.  Each
block of up to ``BLOCK`` columns is loaded into scratch registers (strided,
broadcast or contiguous), every instruction runs as one tight, vectorizable
loop over the block, and the outputs are stored.  Intermediate values of the
group never leave L1: that is the memory round trip fusion removes.

The same routine runs GEMM and convolution epilogues (bias, residual add,
activation) over the tile the GEMM just wrote.
"""

from __future__ import annotations

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

import math

import numpy as np
from numba import njit

from .ewops import (BLOCK, HDR_LEN, IN_LEN, INSTR_LEN, OUT_LEN, DT_BOOL, DT_F32, DT_I32, DT_I64,
                    OPCODE)
from .fastmath import erf32, exp32, sigmoid32, tanh32

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

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


@njit(**_JIT)
def _unary(op, D, A, n, p0, p1):
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
            x = A[j]
            D[j] = x if (x > f32(0.0) or x != x) else f32(0.0)
    elif op == SIGMOID:
        for j in range(n):
            D[j] = sigmoid32(A[j])
    elif op == TANH:
        for j in range(n):
            D[j] = tanh32(A[j])
    elif op == EXP:
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
            y = A[j]
            y = y if y > p0 or y != y else p0
            D[j] = y if y < p1 or y != y else p1
    elif op == AFFINE:
        for j in range(n):
            D[j] = A[j] * p0 + p1
    elif op == THRESHOLDED:
        for j in range(n):
            x = A[j]
            D[j] = x if x > p0 else f32(0.0)
    elif op == HARDSWISH:
        for j in range(n):
            x = A[j]
            y = x * f32(1.0 / 6.0) + f32(0.5)
            y = y if y > f32(0.0) or y != y else f32(0.0)
            y = y if y < f32(1.0) or y != y else f32(1.0)
            D[j] = x * y
    elif op == GELU_TANH:
        for j in range(n):
            x = A[j]
            D[j] = f32(0.5) * x * (f32(1.0) + tanh32(_SQRT_2_OVER_PI * (x + f32(0.044715) * x * x * x)))
    elif op == GELU_ERF:
        for j in range(n):
            x = A[j]
            D[j] = f32(0.5) * x * (f32(1.0) + erf32(x * _INV_SQRT2))


@njit(**_JIT)
def _binary(op, D, A, Bv, n):
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


@njit(**_JIT)
def _load(F, B, I, J, dt, off, s, D, n):
    """D[:n] = source[off + j*s] converted to float32."""
    if dt == DT_F32:
        if s == 1:
            src = F[off:off + n]
            for j in range(n):
                D[j] = src[j]
        elif s == 0:
            v = F[off]
            for j in range(n):
                D[j] = v
        else:
            for j in range(n):
                D[j] = F[off + j * s]
    elif dt == DT_BOOL:
        for j in range(n):
            D[j] = f32(B[off + j * s])
    elif dt == DT_I64:
        for j in range(n):
            D[j] = f32(I[off + j * s])
    else:
        for j in range(n):
            D[j] = f32(J[off + j * s])


@njit(**_JIT)
def _store(F, B, I, J, dt, off, s, A, n):
    """target[off + j*s] = A[:n] converted from float32."""
    if dt == DT_F32:
        if s == 1:
            dst = F[off:off + n]
            for j in range(n):
                dst[j] = A[j]
        else:
            for j in range(n):
                F[off + j * s] = A[j]
    elif dt == DT_BOOL:
        for j in range(n):
            B[off + j * s] = 1 if A[j] != f32(0.0) else 0
    elif dt == DT_I64:
        for j in range(n):
            I[off + j * s] = np.int64(A[j])
    else:
        for j in range(n):
            J[off + j * s] = np.int32(A[j])


@njit(**_JIT)
def ew_run(F, B, I, J, X, R, prog, r0, r1, c0, c1, sbase):
    """Run program ``X[prog:]`` over rows [r0, r1) and columns [c0, c1).

    ``sbase`` is the float offset of this vEU's scratch registers in ``F``.
    """
    nin = X[prog]
    nout = X[prog + 1]
    ninstr = X[prog + 2]
    d1 = X[prog + 5]
    d2 = X[prog + 6]
    ins = prog + HDR_LEN
    code = ins + nin * IN_LEN
    outs = code + ninstr * INSTR_LEN
    for r in range(r0, r1):
        i2 = r % d2
        t = r // d2
        i1 = t % d1
        i0 = t // d1
        c = c0
        while c < c1:
            n = min(BLOCK, c1 - c)
            for k in range(nin):
                q = ins + k * IN_LEN
                s3 = X[q + 5]
                off = X[q + 1] + i0 * X[q + 2] + i1 * X[q + 3] + i2 * X[q + 4] + c * s3
                reg = sbase + k * BLOCK
                _load(F, B, I, J, X[q], off, s3, F[reg:reg + n], n)
            for k in range(ninstr):
                q = code + k * INSTR_LEN
                op = X[q]
                dst = sbase + X[q + 1] * BLOCK
                a = sbase + X[q + 2] * BLOCK
                D = F[dst:dst + n]
                A = F[a:a + n]
                if op >= ADD:
                    b = sbase + X[q + 3] * BLOCK
                    Bv = F[b:b + n]
                    if op == WHERE:
                        e = sbase + X[q + 4] * BLOCK
                        E = F[e:e + n]
                        for j in range(n):
                            D[j] = Bv[j] if A[j] != f32(0.0) else E[j]
                    else:
                        _binary(op, D, A, Bv, n)
                else:
                    imm = X[q + 5]
                    p0 = R[imm] if imm >= 0 else f32(0.0)
                    p1 = R[imm + 1] if imm >= 0 else f32(0.0)
                    _unary(op, D, A, n, p0, p1)
            for k in range(nout):
                q = outs + k * OUT_LEN
                s3 = X[q + 6]
                off = X[q + 2] + i0 * X[q + 3] + i1 * X[q + 4] + i2 * X[q + 5] + c * s3
                reg = sbase + X[q] * BLOCK
                _store(F, B, I, J, X[q + 1], off, s3, F[reg:reg + n], n)
            c += n


@njit(**_JIT)
def k_ew(F, B, I, J, X, R, p, sbase):
    """Task row: [prog, r0, r1, c0, c1]."""
    ew_run(F, B, I, J, X, R, p[0], p[1], p[2], p[3], p[4], sbase)
