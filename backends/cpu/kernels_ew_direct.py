"""One-pass row programs: a fused elementwise program that is a chain, run from its operands to its
output row by row, without the interpreter's registers.

A chain is a float32 program whose every instruction takes the previous instruction's value (the
first: an input) and at most one input besides, each input either contiguous along a row or
constant along it (a per-channel scale or shift, a squeeze-excitation gate), and whose one output is
the last value, contiguous, and an input read after the first instruction is not the output's own
memory (written in place).  Each row is cut into pieces of at most :data:`CHAIN_PIECE` floats; a
piece's first instruction reads the operands and writes the output, and the others run in place on
the output piece while it is in L1, so memory sees one read of each operand and one write.  Through
the registers every instruction was a pass of its own, every row-constant input a fill and the
output a copy: a gate's ``Mul`` cost 2.6x onnxruntime's, a ``Mul + Add`` affine over [512, 3199]
(wav2vec2's GroupNorm) 3.5x a single ``Mul``.  The values are the interpreter's: the same float32
operations in the same order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .ewops import DT_F32, IN_LEN, INSTR_LEN
from .kernels_data import row_index
from .kernels_ew_int import FIRST_INT
from .kernels_ew_ops import (
    ADD,
    CLIP,
    DIV,
    ERF,
    EXP,
    GELU_ERF,
    GELU_TANH,
    HARDSWISH,
    MUL,
    RELU,
    SIGMOID,
    SUB,
    TANH,
    USE_VEC_EW,
    binary_loop,
    clip_elem,
    hardswish_elem,
    relu_elem,
    unary_loop,
)
from .ukernel_ew import vec_erf, vec_exp, vec_gelu_erf, vec_gelu_tanh, vec_sigmoid, vec_tanh

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

#: Rows (column ranges) shorter than this keep the register path (and its whole-rows mode, which
#: gathers many short rows into one block: a chain over rows of 64 columns ran 1.2-1.4x faster there,
#: 128 the same, 256 1.4x slower; ci/micro_ew_views.py's Neg rows, kernels alone).
DIRECT_MIN_COLUMNS = 128
#: Floats of a row piece (16 KiB: the later instructions of a chain find it in L1).
CHAIN_PIECE = 4096
#: Instructions of the longest chain run this way.
CHAIN_MAX_INSTRUCTIONS = 8


@njit(inline="always")
def _arithmetic(op):
    return op == ADD or op == SUB or op == MUL or op == DIV


@njit(inline="always")
def _in_place_unary(op):
    if op == RELU or op == CLIP or op == HARDSWISH:
        return True
    return USE_VEC_EW and (op == SIGMOID or op == TANH or op == EXP or op == ERF or op == GELU_TANH
                           or op == GELU_ERF)


@njit(**_JIT)
def _unary_in_place(op, D, n, p0, p1):
    """D[:n] = op(D[:n]) for the opcodes :func:`_in_place_unary` admits, as :func:`unary_loop`
    computes them (one array: a loop over two aliased ones would be left scalar)."""
    if op == RELU:
        for j in range(n):
            D[j] = relu_elem(D[j])
    elif op == CLIP:
        for j in range(n):
            D[j] = clip_elem(D[j], p0, p1)
    elif op == HARDSWISH:
        for j in range(n):
            D[j] = hardswish_elem(D[j])
    elif op == SIGMOID:
        vec_sigmoid(n, D, 0, D, 0)
    elif op == TANH:
        vec_tanh(n, D, 0, D, 0)
    elif op == EXP:
        vec_exp(n, D, 0, D, 0)
    elif op == ERF:
        vec_erf(n, D, 0, D, 0)
    elif op == GELU_TANH:
        vec_gelu_tanh(n, D, 0, D, 0)
    else:
        vec_gelu_erf(n, D, 0, D, 0)


@njit(**_JIT)
def _in_place(op, D, Bv, n, run_first):
    """D[:n] = op(D, Bv) (``run_first``) or op(Bv, D) for ADD, SUB, MUL, DIV."""
    if op == ADD:
        for j in range(n):
            D[j] = D[j] + Bv[j]
    elif op == MUL:
        for j in range(n):
            D[j] = D[j] * Bv[j]
    elif op == SUB:
        if run_first:
            for j in range(n):
                D[j] = D[j] - Bv[j]
        else:
            for j in range(n):
                D[j] = Bv[j] - D[j]
    elif run_first:
        for j in range(n):
            D[j] = D[j] / Bv[j]
    else:
        for j in range(n):
            D[j] = Bv[j] / D[j]


@njit(**_JIT)
def _scalar_in_place(op, D, v, n, run_first):
    """D[:n] = op(D, v) (``run_first``) or op(v, D) for ADD, SUB, MUL, DIV."""
    if op == ADD:
        for j in range(n):
            D[j] = D[j] + v
    elif op == MUL:
        for j in range(n):
            D[j] = D[j] * v
    elif op == SUB:
        if run_first:
            for j in range(n):
                D[j] = D[j] - v
        else:
            for j in range(n):
                D[j] = v - D[j]
    elif run_first:
        for j in range(n):
            D[j] = D[j] / v
    else:
        for j in range(n):
            D[j] = v / D[j]


@njit(**_JIT)
def _chain_ok(X, ins, nin, code, ninstr, outs, nout):
    """Whether the program is a chain (see the module's docstring)."""
    if nout != 1 or ninstr < 1 or ninstr > CHAIN_MAX_INSTRUCTIONS:
        return False
    if X[outs + 1] != DT_F32 or X[outs + 6] != 1:
        return False
    for k in range(nin):
        q = ins + k * IN_LEN
        if X[q] != DT_F32 or (X[q + 5] != 0 and X[q + 5] != 1):
            return False
    written = 0  # registers written so far (an input's register may be reused once it is dead)
    run = -1
    for k in range(ninstr):
        q = code + k * INSTR_LEN
        op = X[q]
        if op >= FIRST_INT or (op >= ADD and not _arithmetic(op)):
            return False
        a = X[q + 2]
        if op < ADD:
            # a unary: of a contiguous input (first), or in place on the running value (those with
            # a loop of their own here, see _unary_in_place)
            if k == 0:
                if a >= nin or X[ins + a * IN_LEN + 5] != 1:
                    return False
                if X[ins + a * IN_LEN + 1] == X[outs + 2] and not _in_place_unary(op):
                    return False  # (written in place over its input: only the in-place loops vectorize)
            elif a != run or not _in_place_unary(op):
                return False
        else:
            b = X[q + 3]
            if k == 0:
                if a >= nin or b >= nin:
                    return False
                sa = X[ins + a * IN_LEN + 5]
                sb = X[ins + b * IN_LEN + 5]
                if sa == 0 and sb == 0:
                    return False
            else:
                if (a == run) == (b == run):
                    return False
                other = b if a == run else a
                if other >= nin or (written >> other) & 1:
                    return False
                if X[ins + other * IN_LEN + 1] == X[outs + 2]:
                    # the output written in place over this input: the earlier instructions of a
                    # piece would have overwritten what this one reads (a conv's ``Relu(c) + c``)
                    return False
        run = X[q + 1]
        written |= 1 << run
    return X[outs] == run


@njit(**_JIT)
def _with_scalar(op, D, A, v, n, scalar_first):
    """D[:n] = op(A, v) (or op(v, A) when ``scalar_first``) for ADD, SUB, MUL, DIV."""
    if op == ADD:
        for j in range(n):
            D[j] = A[j] + v
    elif op == MUL:
        for j in range(n):
            D[j] = A[j] * v
    elif op == SUB:
        if scalar_first:
            for j in range(n):
                D[j] = v - A[j]
        else:
            for j in range(n):
                D[j] = A[j] - v
    elif scalar_first:
        for j in range(n):
            D[j] = v / A[j]
    else:
        for j in range(n):
            D[j] = A[j] / v


@njit(inline="always")
def _row_at(X, q, i0, i1, i2, col):
    """Where operand ``X[q:]`` (offset, then the strides of dims 0-2 and of the row) has column ``col``
    of row (i0, i1, i2)."""
    return X[q + 1] + i0 * X[q + 2] + i1 * X[q + 3] + i2 * X[q + 4] + col * X[q + 5]


@njit(**_JIT)
def direct_chain(F, X, R, ins, nin, code, ninstr, outs, nout, d1, d2, r0, r1, c0, c1):
    """Run a chain program over rows [r0, r1) and columns [c0, c1) in one pass (see the module's
    docstring).  Returns False (nothing done) when the program is not a chain."""
    if c1 - c0 < DIRECT_MIN_COLUMNS or not _chain_ok(X, ins, nin, code, ninstr, outs, nout):
        return False
    for r in range(r0, r1):
        i0, i1, i2 = row_index(r, d1, d2)
        o_row = X[outs + 2] + i0 * X[outs + 3] + i1 * X[outs + 4] + i2 * X[outs + 5]
        for p0 in range(c0, c1, CHAIN_PIECE):
            n = min(CHAIN_PIECE, c1 - p0)
            D = F[o_row + p0:o_row + p0 + n]
            run = -1
            for k in range(ninstr):
                q = code + k * INSTR_LEN
                op = X[q]
                a = X[q + 2]
                if op < ADD:
                    imm = X[q + 5]
                    u0 = R[imm] if imm >= 0 else f32(0.0)
                    u1 = R[imm + 1] if imm >= 0 else f32(0.0)
                    if k == 0:
                        qa = ins + a * IN_LEN
                        at = _row_at(X, qa, i0, i1, i2, p0)
                        if at == o_row + p0:
                            _unary_in_place(op, D, n, u0, u1)
                        else:
                            unary_loop(op, D, F[at:at + n], n, u0, u1)
                    else:
                        _unary_in_place(op, D, n, u0, u1)
                else:
                    b = X[q + 3]
                    if k == 0:
                        qa = ins + a * IN_LEN
                        qb = ins + b * IN_LEN
                        sa = X[qa + 5]
                        sb = X[qb + 5]
                        at = _row_at(X, qa, i0, i1, i2, p0)
                        bt = _row_at(X, qb, i0, i1, i2, p0)
                        # written in place over an operand: the loops over one array (a loop over two
                        # aliased arrays fails LLVM's overlap check and runs scalar)
                        if sa == 1 and at == o_row + p0:
                            if sb == 1:
                                _in_place(op, D, F[bt:bt + n], n, True)
                            else:
                                _scalar_in_place(op, D, F[bt], n, True)
                        elif sb == 1 and bt == o_row + p0:
                            if sa == 1:
                                _in_place(op, D, F[at:at + n], n, False)
                            else:
                                _scalar_in_place(op, D, F[at], n, False)
                        elif sa == 1 and sb == 1:
                            binary_loop(op, D, F[at:at + n], F[bt:bt + n], n)
                        elif sa == 1:
                            _with_scalar(op, D, F[at:at + n], F[bt], n, False)
                        else:
                            _with_scalar(op, D, F[bt:bt + n], F[at], n, True)
                    else:
                        first = a == run
                        other = b if first else a
                        qo = ins + other * IN_LEN
                        so = X[qo + 5]
                        ot = _row_at(X, qo, i0, i1, i2, p0)
                        if so == 0:
                            _scalar_in_place(op, D, F[ot], n, first)
                        else:
                            _in_place(op, D, F[ot:ot + n], n, first)
                run = X[q + 1]
    return True
