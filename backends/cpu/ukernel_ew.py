"""Vector kernels for the elementwise interpreter's transcendental opcodes: ``d[:n] = op(a[:n])``.

:mod:`.kernels_ew` runs every opcode as a numba loop over a register of up to BLOCK floats.  For
EXP, SIGMOID, TANH, ERF and the two GELUs, LLVM left those loops scalar (the inlined
:mod:`.fastmath` functions did not vectorize): 1.2-2.7 ns a float more than a copy, where
onnxruntime's vector routines cost 0.1-0.4.  These kernels compute the same functions on WIDTH
lanes, with the same algorithms, constants and order of operations as :mod:`.fastmath` (no fused
multiply-adds), so every value is the one the numba loop produced; the last partial vector is read
and written masked.  GELU's erf runs in every transformer feed-forward layer's fused store, sigmoid
in every SiLU and LSTM gate, tanh in GRU/LSTM cells and the tanh GELU.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import _vec_exp
from .ukernel_softmax import LANES, _loop, _RowOps

#: Opcode name -> kernel symbol (the names of :data:`.ewops.OPCODE`).
EW_SYMBOLS = {name: f"rammer_cpu_ew_{name.lower()}" for name in ("EXP", "SIGMOID", "TANH", "ERF", "GELU_ERF",
                                                                 "GELU_TANH")}
# fastmath.erf32's rational fit (float32-rounded here as there).
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


class _Vec:
    """Float32 vector arithmetic on one builder, constants rounded to float32 as numba's ``f32(...)``."""

    def __init__(self, bld: ir.IRBuilder) -> None:
        self.b = bld
        self.vf = ir.VectorType(ir.FloatType(), LANES)

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.vf, [float(np.float32(v))] * LANES)

    def sel(self, cond, a, b):
        return self.b.select(cond, a, b)

    def exp(self, x):
        return _vec_exp(self.b, x)

    def sigmoid(self, x):
        b = self.b
        return b.fdiv(self.c(1.0), b.fadd(self.c(1.0), self.exp(b.fneg(x))))

    def tanh(self, x):
        b, c = self.b, self.c
        a = self.sel(b.fcmp_ordered("<", x, c(0.0)), b.fneg(x), x)  # abs (NaN: handled at the end)
        x2 = b.fmul(x, x)
        p = c(-1382.0 / 155925.0)
        for k in (62.0 / 2835.0, -17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0):
            p = b.fadd(b.fmul(p, x2), c(k))
        small = b.fadd(x, b.fmul(b.fmul(x, x2), p))
        big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(self.exp(b.fmul(c(2.0), a)), c(1.0))))
        big = self.sel(b.fcmp_ordered(">=", x, c(0.0)), big, b.fneg(big))
        y = self.sel(b.fcmp_ordered("<", a, c(0.3)), small, big)
        return self.sel(b.fcmp_unordered("!=", x, x), x, y)

    def erf(self, x):
        b, c = self.b, self.c
        cl = self.sel(b.fcmp_ordered(">", x, c(4.0)), c(4.0), x)
        cl = self.sel(b.fcmp_ordered("<", cl, c(-4.0)), c(-4.0), cl)
        x2 = b.fmul(cl, cl)
        p = c(_ERF_P[0])
        for k in _ERF_P[1:]:
            p = b.fadd(b.fmul(p, x2), c(k))
        q = c(_ERF_Q[0])
        for k in _ERF_Q[1:]:
            q = b.fadd(b.fmul(q, x2), c(k))
        return b.fdiv(b.fmul(cl, p), q)

    def gelu_erf(self, x):
        b, c = self.b, self.c
        inner = self.erf(b.fmul(x, c(1.0 / math.sqrt(2.0))))
        return b.fmul(b.fmul(c(0.5), x), b.fadd(c(1.0), inner))

    def gelu_tanh(self, x):
        b, c = self.b, self.c
        cube = b.fmul(b.fmul(b.fmul(c(0.044715), x), x), x)
        t = self.tanh(b.fmul(c(math.sqrt(2.0 / math.pi)), b.fadd(x, cube)))
        return b.fmul(b.fmul(c(0.5), x), b.fadd(c(1.0), t))


def _add_unary(mod: ir.Module, name: str) -> None:
    f32, i64 = ir.FloatType(), ir.IntType(64)
    fp = f32.as_pointer()
    ops = _RowOps(mod)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fp, fp]), name=EW_SYMBOLS[name])
    n, a, d = fn.args
    n.name, a.name, d.name = "n", "a", "d"
    zero = ir.Constant(ops.vf, [0.0] * LANES)

    def step(b, i, acc, mask):
        v = _Vec(b)
        ops.store(b, getattr(v, name.lower())(ops.load(b, a, i, mask, zero)), d, i, mask)
        return []

    bld, _ = _loop(fn, ir.IRBuilder(fn.append_basic_block("entry")), n, [], step, "ew")
    bld.ret_void()


def _ew_module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel_ew")
    for name in EW_SYMBOLS:
        _add_unary(mod, name)
    return mod


EW = MachineCode(f"ukernel ew w{LANES}", _ew_module, tuple(EW_SYMBOLS.values()))


def _unary_intrinsic(name: str):
    symbol = EW_SYMBOLS[name]

    def typer(typingctx, n, A, a_off, D, d_off):
        if not arrays_are(types.float32, A, D):
            return None
        return types.none(n, A, a_off, D, d_off), call_codegen(symbol, "iff")
    typer.__name__ = f"vec_{name.lower()}"
    typer.__doc__ = f"``D[d_off:d_off + n] = {name.lower()}(A[a_off:a_off + n])`` on vectors (fastmath's values)."
    return uses(symbol)(intrinsic(typer))


vec_exp, vec_sigmoid, vec_tanh, vec_erf, vec_gelu_erf, vec_gelu_tanh = (_unary_intrinsic(n) for n in EW_SYMBOLS)
