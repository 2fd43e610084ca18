"""A fused elementwise chain as one GPU rKernel: the core's elementwise program IR
(:class:`rammer.lower.ewprogram.EwProgram`) rendered as straight-line float math per element.

Each input is read through its own broadcast strides (so a bias, a per-channel scale or a scalar
needs no copy), every instruction becomes one local value, and each output is stored once: the
chain's intermediate tensors never reach memory.  :data:`OPCODES` maps the float opcodes of
:mod:`rammer.lower.ewops` to kernel-IR expressions, using only math every dialect table has; a
program with any other opcode (integer registers, sin/cos...) is not offered to the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Load, Select, UnOp, c, v

from .ir_helpers import nan_max, nan_min
from .kernels_model import MAX_RANK, _chunk_loop, _coords

__all__ = ["OPCODES", "fused_kernel", "supported"]

Ex = ir.Expr


def _f(x: float) -> Ex:
    return c(float(x))


def _sel(cond: Ex, a: Ex, b: Ex) -> Ex:
    return Select(cond, a, b)


def _b(cond: Ex) -> Ex:
    """A comparison as 0.0/1.0 (bools live in float registers)."""
    return Select(cond, _f(1.0), _f(0.0))


def _sigmoid(x: Ex) -> Ex:
    return BinOp("/", _f(1.0), BinOp("+", _f(1.0), Call("exp", (UnOp("-", x),))))


def _softplus(x: Ex) -> Ex:  # log(1 + e^x), stable for large |x|
    return BinOp("+", Call("fmax", (x, _f(0.0))), Call("log", (BinOp("+", _f(1.0), Call("exp", (UnOp("-", Call("fabs", (x,))),))),)))


def _clip(x: Ex, lo: float, hi: float) -> Ex:
    """Clip; an infinite (absent) bound is no bound: -inf and values near -FLT_MAX pass unchanged."""
    if lo > -math.inf:
        x = Call("fmax", (x, _f(lo)))
    if hi < math.inf:
        x = Call("fmin", (x, _f(hi)))
    return x


def _clamp01(x: Ex) -> Ex:
    return Call("fmax", (_f(0.0), Call("fmin", (_f(1.0), x))))


_K = math.sqrt(2.0 / math.pi)

#: opcode -> (args, imms) -> expression.
OPCODES: dict[str, Callable[[Sequence[Ex], Sequence[float]], Ex]] = {
    "COPY": lambda a, m: a[0],
    "NEG": lambda a, m: UnOp("-", a[0]),
    "ABS": lambda a, m: Call("fabs", (a[0],)),
    "RELU": lambda a, m: Call("fmax", (a[0], _f(0.0))),
    "SIGMOID": lambda a, m: _sigmoid(a[0]),
    "TANH": lambda a, m: Call("tanh", (a[0],)),
    "EXP": lambda a, m: Call("exp", (a[0],)),
    "LOG": lambda a, m: Call("log", (a[0],)),
    "SQRT": lambda a, m: Call("sqrt", (a[0],)),
    "RECIP": lambda a, m: BinOp("/", _f(1.0), a[0]),
    "FLOOR": lambda a, m: Call("floor", (a[0],)),
    "CEIL": lambda a, m: Call("ceil", (a[0],)),
    "ERF": lambda a, m: Call("erf", (a[0],)),
    "SOFTPLUS": lambda a, m: _softplus(a[0]),
    "SOFTSIGN": lambda a, m: BinOp("/", a[0], BinOp("+", _f(1.0), Call("fabs", (a[0],)))),
    "SIGN": lambda a, m: _sel(BinOp(">", a[0], _f(0.0)), _f(1.0), _sel(BinOp("<", a[0], _f(0.0)), _f(-1.0), _f(0.0))),
    "NOT": lambda a, m: _b(BinOp("==", a[0], _f(0.0))),
    "ISNAN": lambda a, m: _b(BinOp("!=", a[0], a[0])),
    "LEAKY": lambda a, m: _sel(BinOp(">=", a[0], _f(0.0)), a[0], BinOp("*", a[0], _f(m[0]))),
    "ELU": lambda a, m: _sel(BinOp(">=", a[0], _f(0.0)), a[0],
                             BinOp("*", _f(m[0]), BinOp("-", Call("exp", (a[0],)), _f(1.0)))),
    "HARDSIGMOID": lambda a, m: _clamp01(BinOp("+", BinOp("*", a[0], _f(m[0])), _f(m[1]))),
    "CLIP": lambda a, m: _clip(a[0], m[0], m[1]),
    "AFFINE": lambda a, m: BinOp("+", BinOp("*", a[0], _f(m[0])), _f(m[1])),
    "THRESHOLDED": lambda a, m: _sel(BinOp(">", a[0], _f(m[0])), a[0], _f(0.0)),
    "HARDSWISH": lambda a, m: BinOp("*", a[0], _clamp01(BinOp("+", BinOp("*", a[0], _f(1.0 / 6.0)), _f(0.5)))),
    "GELU_TANH": lambda a, m: BinOp("*", BinOp("*", _f(0.5), a[0]), BinOp("+", _f(1.0), Call("tanh", (BinOp(
        "*", _f(_K), BinOp("+", a[0], BinOp("*", _f(0.044715), BinOp("*", a[0], BinOp("*", a[0], a[0]))))),)))),
    "GELU_ERF": lambda a, m: BinOp("*", BinOp("*", _f(0.5), a[0]),
                                   BinOp("+", _f(1.0), Call("erf", (BinOp("*", a[0], _f(1.0 / math.sqrt(2.0))),)))),
    "ADD": lambda a, m: BinOp("+", a[0], a[1]),
    "SUB": lambda a, m: BinOp("-", a[0], a[1]),
    "MUL": lambda a, m: BinOp("*", a[0], a[1]),
    "DIV": lambda a, m: BinOp("/", a[0], a[1]),
    "POW": lambda a, m: Call("pow", (a[0], a[1])),
    "MAX": lambda a, m: nan_max(a[0], a[1]),
    "MIN": lambda a, m: nan_min(a[0], a[1]),
    "PRELU": lambda a, m: _sel(BinOp(">=", a[0], _f(0.0)), a[0], BinOp("*", a[0], a[1])),
    "EQ": lambda a, m: _b(BinOp("==", a[0], a[1])),
    "LT": lambda a, m: _b(BinOp("<", a[0], a[1])),
    "LE": lambda a, m: _b(BinOp("<=", a[0], a[1])),
    "GT": lambda a, m: _b(BinOp(">", a[0], a[1])),
    "GE": lambda a, m: _b(BinOp(">=", a[0], a[1])),
    "AND": lambda a, m: _b(BinOp("&&", BinOp("!=", a[0], _f(0.0)), BinOp("!=", a[1], _f(0.0)))),
    "OR": lambda a, m: _b(BinOp("||", BinOp("!=", a[0], _f(0.0)), BinOp("!=", a[1], _f(0.0)))),
    "XOR": lambda a, m: _b(BinOp("!=", BinOp("!=", a[0], _f(0.0)), BinOp("!=", a[1], _f(0.0)))),
    "WHERE": lambda a, m: _sel(BinOp("!=", a[0], _f(0.0)), a[1], a[2]),
}


# -- integer instructions ----------------------------------------------------------------------------
# Integer registers are 64-bit ("long"): an int64/int32 tensor is loaded from its exact float32
# value in the arena, computed on exactly (int32 results wrap through IWRAP32 as numpy's do), and
# stored back as float32, exact up to 2**24 in magnitude; a larger result is stored as NaN (see
# fused_kernel) rather than silently rounded.  Such a NaN, loaded again into an integer register,
# becomes the sentinel _POISON (converting NaN to an integer is undefined in C), and I2F turns the
# sentinel back into NaN, so a poisoned value stays visible through integer-typed ops.

#: The integer register value of a NaN loaded from the arena (far beyond 2**24: stored as NaN).
_POISON = -(2 ** 62)

def _i(x: int) -> Ex:
    return c(int(x))


def _idiv(a: Ex, b: Ex) -> Ex:
    """Truncated toward zero, as C's ``/``; ``x / 0`` is 0 (numpy's result)."""
    return _sel(BinOp("==", b, _i(0)), _i(0), BinOp("/", a, b))


def _imod(a: Ex, b: Ex) -> Ex:
    """The remainder with the divisor's sign (ONNX Mod, fmod=0); ``x % 0`` is 0."""
    r = BinOp("%", a, b)
    fix = BinOp("&&", BinOp("!=", r, _i(0)), BinOp("!=", BinOp("<", r, _i(0)), BinOp("<", b, _i(0))))
    return _sel(BinOp("==", b, _i(0)), _i(0), _sel(fix, BinOp("+", r, b), r))


INT_OPCODES: dict[str, Callable[[Sequence[Ex], Sequence[float]], Ex]] = {
    "I2F": lambda a, m: _sel(BinOp("==", a[0], _i(_POISON)), BinOp("/", _f(0.0), _f(0.0)), ir.Cast("float", a[0])),
    "F2I": lambda a, m: ir.Cast("long", a[0]),
    "F2I32": lambda a, m: ir.Cast("long", ir.Cast("int", a[0])),
    "ICOPY": lambda a, m: a[0],
    "INEG": lambda a, m: UnOp("-", a[0]),
    "IABS": lambda a, m: _sel(BinOp("<", a[0], _i(0)), UnOp("-", a[0]), a[0]),
    "IWRAP32": lambda a, m: ir.Cast("long", ir.Cast("int", a[0])),
    "IADD": lambda a, m: BinOp("+", a[0], a[1]),
    "ISUB": lambda a, m: BinOp("-", a[0], a[1]),
    "IMUL": lambda a, m: BinOp("*", a[0], a[1]),
    "IDIV": lambda a, m: _idiv(a[0], a[1]),
    "IMOD": lambda a, m: _imod(a[0], a[1]),
    "IFMOD": lambda a, m: _sel(BinOp("==", a[1], _i(0)), _i(0), BinOp("%", a[0], a[1])),
    "IMAX": lambda a, m: _sel(BinOp(">", a[0], a[1]), a[0], a[1]),
    "IMIN": lambda a, m: _sel(BinOp("<", a[0], a[1]), a[0], a[1]),
    "IEQ": lambda a, m: _b(BinOp("==", a[0], a[1])),
    "ILT": lambda a, m: _b(BinOp("<", a[0], a[1])),
    "ILE": lambda a, m: _b(BinOp("<=", a[0], a[1])),
    "IGT": lambda a, m: _b(BinOp(">", a[0], a[1])),
    "IGE": lambda a, m: _b(BinOp(">=", a[0], a[1])),
    "IWHERE": lambda a, m: _sel(BinOp("!=", a[0], _f(0.0)), a[1], a[2]),
}
#: Opcodes whose result is an integer register ("long" in the kernel).
INT_RESULTS = frozenset({"F2I", "F2I32", "ICOPY", "INEG", "IABS", "IWRAP32", "IADD", "ISUB", "IMUL", "IDIV", "IMOD",
                         "IFMOD", "IMAX", "IMIN", "IWHERE"})
#: Integers float32 holds exactly; an integer result beyond is stored as NaN.
_EXACT = 2 ** 24


def supported(instrs) -> bool:
    """Whether every instruction of a program has a GPU expression."""
    return all(ins.op in OPCODES or ins.op in INT_OPCODES for ins in instrs)


def fused_kernel(name: str, n_in: int, n_out: int, instrs: Sequence[tuple[str, int, tuple[int, ...], tuple[float, ...]]],
                 outputs: Sequence[int], threads: int = 256, in_types: Sequence[str] = ()) -> ir.Kernel:
    """``y_j[i] = program(x_0[S_0 . coords(i)], ...)`` over this rTask's chunk: inputs are values
    ``0..n_in-1``; ``instrs`` are ``(opcode, dst, args, imms)``; ``outputs[j]`` is the value stored to
    ``y_j``.  Parameters: ``x0..``, ``y0..``, ``total``, ``chunk``, extents ``D1..D5`` and per input
    the strides ``S{k}_0..S{k}_5``."""
    r = MAX_RANK
    body: list[ir.Stmt] = [*_coords("k", r)]
    for k in range(n_in):
        index: Ex = c(0)
        for d in range(r):
            index = BinOp("+", index, BinOp("*", v(f"k{d}"), v(f"S{k}_{d}")))
        integer = k < len(in_types) and in_types[k] == "i"
        load: Ex = Load(f"x{k}", index)
        if integer:  # NaN (a poisoned integer) -> the sentinel, never an undefined float -> long conversion
            body.append(ir.Decl("float", f"l{k}", load))
            load = _sel(BinOp("!=", v(f"l{k}"), v(f"l{k}")), _i(_POISON), ir.Cast("long", v(f"l{k}")))
        body.append(ir.Decl("long" if integer else "float", f"v{k}", load))
    is_int = {k for k in range(n_in) if k < len(in_types) and in_types[k] == "i"}
    for op, dst, args, imms in instrs:
        table = INT_OPCODES if op in INT_OPCODES else OPCODES
        body.append(ir.Decl("long" if op in INT_RESULTS else "float", f"v{dst}",
                            table[op]([v(f"v{a}") for a in args], imms)))
        if op in INT_RESULTS:
            is_int.add(dst)
    for j, value in enumerate(outputs):
        out: Ex = v(f"v{value}")
        if value in is_int:  # exact in float32 up to 2**24; NaN beyond, never a silently rounded integer
            inexact = BinOp("||", BinOp(">", out, _i(_EXACT)), BinOp("<", out, _i(-_EXACT)))
            out = _sel(inexact, BinOp("/", _f(0.0), _f(0.0)), ir.Cast("float", out))
        body.append(ir.Store(f"y{j}", v("i"), out))
    params = (*(ir.Param(f"x{k}", "float", True, True) for k in range(n_in)),
              *(ir.Param(f"y{j}", "float", True) for j in range(n_out)),
              *(ir.Param(p, "int") for p in ("total", "chunk", *(f"D{d}" for d in range(1, r)))),
              *(ir.Param(f"S{k}_{d}", "int") for k in range(n_in) for d in range(r)))
    return ir.Kernel(name, params, _chunk_loop(threads, tuple(body)), threads=threads,
                     meta=(("op", "fused elementwise"), ("instructions", str(len(instrs)))))
