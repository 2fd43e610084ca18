"""The integer instructions of the fused elementwise interpreter (:mod:`.kernels_ew`).

Integer registers hold int64 (int32 values sign-extended) and live in the same scratch slots as the
float registers: register ``k`` is ``F[sbase + k * BLOCK:]`` as float32 and ``I[ibase + k * IREG:]``
as int64, ``ibase = ceil(sbase / 2)`` (:data:`.ewops.IREG`).  Every instruction is exact integer
arithmetic, wrapping on overflow as numpy does; the cases where C's division traps or is undefined
(``x / 0``, ``INT64_MIN / -1``) are spelled out to give numpy's results instead.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .ewops import BLOCK, IREG, OPCODE

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# numba folds module globals into the compiled code as constants.
I2F = OPCODE["I2F"]
F2I = OPCODE["F2I"]
F2I32 = OPCODE["F2I32"]
ICOPY = OPCODE["ICOPY"]
INEG = OPCODE["INEG"]
IABS = OPCODE["IABS"]
IWRAP32 = OPCODE["IWRAP32"]
IADD = OPCODE["IADD"]
ISUB = OPCODE["ISUB"]
IMUL = OPCODE["IMUL"]
IDIV = OPCODE["IDIV"]
IMOD = OPCODE["IMOD"]
IFMOD = OPCODE["IFMOD"]
IMAX = OPCODE["IMAX"]
IMIN = OPCODE["IMIN"]
IEQ = OPCODE["IEQ"]
ILT = OPCODE["ILT"]
ILE = OPCODE["ILE"]
IGT = OPCODE["IGT"]
IGE = OPCODE["IGE"]
IWHERE = OPCODE["IWHERE"]
#: The first integer opcode: the interpreter hands every opcode from here on to :func:`int_instr`.
FIRST_INT = I2F


@njit(**_JIT)
def _int_unary(op, D, A, n):
    if op == ICOPY:
        for j in range(n):
            D[j] = A[j]
    elif op == INEG:
        for j in range(n):
            D[j] = -A[j]  # INT64_MIN stays INT64_MIN, as in numpy
    elif op == IABS:
        for j in range(n):
            x = A[j]
            D[j] = -x if x < 0 else x
    elif op == IWRAP32:
        for j in range(n):
            D[j] = np.int64(np.int32(A[j]))


@njit(**_JIT)
def _int_binary(op, D, A, Bv, n):
    if op == IADD:
        for j in range(n):
            D[j] = A[j] + Bv[j]
    elif op == ISUB:
        for j in range(n):
            D[j] = A[j] - Bv[j]
    elif op == IMUL:
        for j in range(n):
            D[j] = A[j] * Bv[j]
    elif op == IMAX:
        for j in range(n):
            x = A[j]
            y = Bv[j]
            D[j] = x if x > y else y
    elif op == IMIN:
        for j in range(n):
            x = A[j]
            y = Bv[j]
            D[j] = x if x < y else y
    elif op == IDIV:
        for j in range(n):
            x = A[j]
            y = Bv[j]
            if y == 0:
                D[j] = 0
            elif y == -1:
                D[j] = -x  # x // -1 would trap for INT64_MIN
            else:
                q = x // y  # floor; ONNX (and the reference) truncate toward zero
                if q * y != x and (x < 0) != (y < 0):
                    q += 1
                D[j] = q
    elif op == IMOD:
        for j in range(n):
            y = Bv[j]
            D[j] = 0 if (y == 0 or y == -1) else A[j] % y  # Python's %: the divisor's sign
    elif op == IFMOD:
        for j in range(n):
            x = A[j]
            y = Bv[j]
            if y == 0 or y == -1:
                D[j] = 0
            else:
                r = x % y
                if r != 0 and (r < 0) != (x < 0):
                    r -= y  # C's remainder: the dividend's sign
                D[j] = r


@njit(**_JIT)
def _int_compare(op, D, A, Bv, n):
    """D (float 0/1) = A op Bv on int64 registers."""
    if op == IEQ:
        for j in range(n):
            D[j] = f32(1.0) if A[j] == Bv[j] else f32(0.0)
    elif op == ILT:
        for j in range(n):
            D[j] = f32(1.0) if A[j] < Bv[j] else f32(0.0)
    elif op == ILE:
        for j in range(n):
            D[j] = f32(1.0) if A[j] <= Bv[j] else f32(0.0)
    elif op == IGT:
        for j in range(n):
            D[j] = f32(1.0) if A[j] > Bv[j] else f32(0.0)
    elif op == IGE:
        for j in range(n):
            D[j] = f32(1.0) if A[j] >= Bv[j] else f32(0.0)


@njit(**_JIT)
def int_instr(op, F, I, X, q, sbase, ibase, n):
    """Run the integer instruction at ``X[q:]`` (opcode, dst, a, b, c, imm) over ``n`` elements."""
    dst = X[q + 1]
    a = X[q + 2]
    if op == I2F:
        D = F[sbase + dst * BLOCK:sbase + dst * BLOCK + n]
        A = I[ibase + a * IREG:ibase + a * IREG + n]
        for j in range(n):
            D[j] = f32(A[j])
        return
    if op == F2I or op == F2I32:
        Di = I[ibase + dst * IREG:ibase + dst * IREG + n]
        Af = F[sbase + a * BLOCK:sbase + a * BLOCK + n]
        if op == F2I:
            for j in range(n):
                Di[j] = np.int64(Af[j])
        else:
            for j in range(n):
                Di[j] = np.int64(np.int32(Af[j]))
        return
    b = X[q + 3]
    if op == IWHERE:
        Di = I[ibase + dst * IREG:ibase + dst * IREG + n]
        C = F[sbase + a * BLOCK:sbase + a * BLOCK + n]
        Bv = I[ibase + b * IREG:ibase + b * IREG + n]
        e = X[q + 4]
        E = I[ibase + e * IREG:ibase + e * IREG + n]
        for j in range(n):
            Di[j] = Bv[j] if C[j] != f32(0.0) else E[j]
        return
    A = I[ibase + a * IREG:ibase + a * IREG + n]
    if op <= IWRAP32:
        _int_unary(op, I[ibase + dst * IREG:ibase + dst * IREG + n], A, n)
        return
    Bv = I[ibase + b * IREG:ibase + b * IREG + n]
    if op <= IMIN:
        _int_binary(op, I[ibase + dst * IREG:ibase + dst * IREG + n], A, Bv, n)
    else:
        _int_compare(op, F[sbase + dst * BLOCK:sbase + dst * BLOCK + n], A, Bv, n)
