"""Small expression builders the GPU rKernel templates share (kernel IR, :mod:`rammer.codegen.kernel_ir`)."""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Select, Special

__all__ = ["add", "mul", "div", "mod", "lt", "and_", "gid", "ints", "inf", "neg_inf"]


def add(*terms: ir.Expr) -> ir.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = BinOp("+", out, t)
    return out


def mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("*", a, b)


def div(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("/", a, b)


def mod(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("%", a, b)


def lt(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("<", a, b)


def and_(*terms: ir.Expr) -> ir.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = BinOp("&&", out, t)
    return out


def gid() -> ir.Expr:
    """The global thread index: ``block_id * block_dim + thread_id``."""
    return add(mul(Special("block_id"), Special("block_dim")), Special("thread_id"))


def ints(*names: str) -> tuple[ir.Param, ...]:
    return tuple(ir.Param(n, "int") for n in names)


def inf() -> ir.Expr:
    """+infinity (``1.0f / 0.0f``: no dialect has one spelling for it).  The start of a min
    reduction: any float, however close to -FLT_MAX (a mask's ``finfo.min`` plus a score), is below
    it, where a finite start such as 3e38 wins over real values and breaks the result."""
    return BinOp("/", ir.c(1.0), ir.c(0.0))


def neg_inf() -> ir.Expr:
    """-infinity, the start of a max reduction (see :func:`inf`)."""
    return BinOp("/", ir.c(-1.0), ir.c(0.0))


def _nan_first(a: ir.Expr, b: ir.Expr, value: ir.Expr) -> ir.Expr:
    """``value``, or the NaN operand when there is one."""
    return Select(BinOp("!=", a, a), a, Select(BinOp("!=", b, b), b, value))


def nan_max(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """max(a, b) that propagates NaN, as ONNX's Max, ReduceMax and MaxPool do (numpy's maximum, the
    reference); C's fmax returns the other operand instead."""
    return _nan_first(a, b, Call("fmax", (a, b)))


def nan_min(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """min(a, b) that propagates NaN (see :func:`nan_max`)."""
    return _nan_first(a, b, Call("fmin", (a, b)))
