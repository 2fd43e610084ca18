"""Elementwise ONNX nodes as instructions of a fused elementwise program.

:func:`ew_reason` says whether a node can join a fused group (None) or why
not; :func:`ew_translate` appends its instructions to an :class:`EwProgram`.
Every op here is one whose evaluation in the program's registers matches
numpy's: float32 math, comparisons and logic on float32/bool in float
registers; int64/int32 arithmetic, comparisons, ``Where`` and casts in
integer registers (int64 registers; int32 results wrapped back to 32 bits
where they can overflow, as numpy's int32 arithmetic wraps), so integer
values are never rounded through a float.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rammer.ir import Graph, Node

from .ewops import WRAP32
from .ewprogram import EwProgram

UNARY = {
    "Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Exp": "EXP", "Log": "LOG", "Sqrt": "SQRT",
    "Neg": "NEG", "Abs": "ABS", "Reciprocal": "RECIP", "Floor": "FLOOR", "Ceil": "CEIL", "Round": "ROUND",
    "Erf": "ERF", "Sin": "SIN", "Cos": "COS", "Tan": "TAN", "Atan": "ATAN", "Softplus": "SOFTPLUS",
    "Softsign": "SOFTSIGN", "Sign": "SIGN", "HardSwish": "HARDSWISH",
}
UNARY_ATTR = {"LeakyRelu", "Elu", "Celu", "Selu", "HardSigmoid", "ThresholdedRelu", "Gelu", "Clip"}
BINARY = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Pow": "POW", "PRelu": "PRELU"}
COMPARE = {"Equal": "EQ", "Less": "LT", "LessOrEqual": "LE", "Greater": "GT", "GreaterOrEqual": "GE"}
LOGIC = {"And": "AND", "Or": "OR", "Xor": "XOR"}
VARIADIC = {"Max": "MAX", "Min": "MIN", "Sum": "ADD", "Mean": "ADD"}
OTHER = {"Not", "IsNaN", "Where", "Cast", "CastLike", "Mod", "BatchNormalization", "IsInf"}

EW_OPS = frozenset(UNARY) | UNARY_ATTR | frozenset(BINARY) | frozenset(COMPARE) | frozenset(LOGIC) \
    | frozenset(VARIADIC) | OTHER

_CARRIED = {"float32", "bool"}  # dtypes a float32 register holds exactly
_INTS = {"int64", "int32"}  # dtypes an integer register holds exactly
_CASTABLE = _CARRIED | _INTS

# Integer counterparts (ops not listed here stay float32-only: Pow, PRelu, Sign, ...).
INT_UNARY = {"Neg": "INEG", "Abs": "IABS"}
INT_BINARY = {"Add": "IADD", "Sub": "ISUB", "Mul": "IMUL", "Div": "IDIV"}
INT_COMPARE = {"Equal": "IEQ", "Less": "ILT", "LessOrEqual": "ILE", "Greater": "IGT", "GreaterOrEqual": "IGE"}
INT_VARIADIC = {"Max": "IMAX", "Min": "IMIN"}  # (ONNX Sum and Mean take floats only)
_INT_OPS = frozenset(INT_UNARY) | frozenset(INT_BINARY) | frozenset(INT_VARIADIC) | {"Relu", "Mod", "Clip"}

_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


def _dtype(graph: Graph, name: str) -> str | None:
    return graph.value_info[name].dtype if name else None


def _const(graph: Graph, name: str) -> np.ndarray | None:
    return graph.initializers.get(name) if name else None


def ew_reason(node: Node, graph: Graph) -> str | None:
    """None if the node fuses into elementwise programs, else why not."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or op not in EW_OPS:
        return "not an elementwise op"
    ins = [_dtype(graph, i) for i in node.inputs]
    outs = [_dtype(graph, o) for o in node.outputs if o]
    if len(outs) != 1 or len([o for o in node.outputs if o]) != len(node.outputs[:1]):
        return "several outputs"
    out = outs[0]
    present = [d for d in ins if d is not None]
    if op in UNARY or op in UNARY_ATTR or op in BINARY or op in VARIADIC or op == "Mod":
        if op == "Clip":
            if any(_const(graph, i) is None for i in node.inputs[1:] if i):
                return "Clip bounds computed at run time"
            present = present[:1]
        if out in _INTS and all(d == out for d in present):
            if op not in _INT_OPS or (op == "Clip" and graph.opset.get("", 1) < 11):
                return f"{op} on {out} (integer programs have no such instruction)"
            return None
        if op == "Mod" and not node.attr("fmod", 0):
            return "integer-style Mod (fmod=0)"
        if any(d != "float32" for d in present) or out != "float32":
            return f"dtype {out} (the fused kernel computes float32, int64 and int32)"
        return None
    if op in COMPARE:
        # one dtype on both sides (ONNX's T): float32 and bool compare exactly in float registers
        if len(set(present)) == 1 and present[0] in _CASTABLE:
            return None
        return f"comparison of {'/'.join(sorted(set(present)))} values"
    if op in LOGIC or op == "Not":
        return None if all(d == "bool" for d in present) else "logic on non-bool values"
    if op in ("IsNaN", "IsInf"):
        if op == "IsInf" and (node.attr("detect_negative", 1) != 1 or node.attr("detect_positive", 1) != 1):
            return "one-sided IsInf"
        return None if present[0] == "float32" else "non-float32 input"
    if op == "Where":
        if ins[0] == "bool" and (all(d in _CARRIED for d in ins[1:]) and out in _CARRIED
                                 or all(d == out for d in ins[1:]) and out in _INTS):
            return None
        return f"Where on {ins[1:]}"
    if op in ("Cast", "CastLike"):
        src = ins[0]
        if src not in _CASTABLE or out not in _CASTABLE:
            return f"Cast {src}->{out}"
        return None
    if op == "BatchNormalization":
        if len([o for o in node.outputs if o]) != 1 or node.attr("training_mode", 0):
            return "training-mode BatchNormalization"
        if any(_const(graph, i) is None for i in node.inputs[1:5]):
            return "BatchNormalization statistics computed at run time"
        if ins[0] != "float32":
            return "non-float32 BatchNormalization"
        return None
    return "not an elementwise op"


def bn_constants(node: Node, graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """BatchNormalization as y = x * a + b per channel: (a, b) shaped to broadcast over [N, C, ...]."""
    scale, bias, mean, var = (graph.initializers[i].astype(np.float64) for i in node.inputs[1:5])
    eps = float(node.attr("epsilon", 1e-5))
    with np.errstate(invalid="ignore", divide="ignore"):  # a negative variance gives NaN, as in reference
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
    rank = len(graph.value_info[node.inputs[0]].shape)
    shape = (-1,) + (1,) * max(rank - 2, 0)
    return a.astype(np.float32).reshape(shape), b.astype(np.float32).reshape(shape)


#: Called for inputs the translation needs: ``operand(i)`` is the register of
#: node input i; ``constant(array)`` loads an array computed at compile time.
Operand = Callable[[int], int]
Constant = Callable[[np.ndarray], int]


def ew_translate(node: Node, graph: Graph, prog: EwProgram, operand: Operand, constant: Constant) -> int:
    """Append the node's instructions; returns the register of its output."""
    op = node.op_type
    a = node.attr
    out = graph.value_info[node.outputs[0]].dtype
    if op in ("Cast", "CastLike"):
        return _cast(prog, operand(0), graph.value_info[node.inputs[0]].dtype, out)
    if out in _INTS and op != "Where":
        return _int_translate(node, graph, prog, operand, constant, out)
    if op in INT_COMPARE and graph.value_info[node.inputs[0]].dtype in _INTS:
        return prog.op(INT_COMPARE[op], operand(0), operand(1))
    if op in UNARY:
        return prog.op(UNARY[op], operand(0))
    if op == "LeakyRelu":
        return prog.op("LEAKY", operand(0), imms=(float(a("alpha", 0.01)),))
    if op == "Elu":
        return prog.op("ELU", operand(0), imms=(float(a("alpha", 1.0)),))
    if op == "Celu":
        return prog.op("CELU", operand(0), imms=(float(a("alpha", 1.0)),))
    if op == "Selu":
        return prog.op("SELU", operand(0), imms=(float(a("alpha", _SELU_ALPHA)), float(a("gamma", _SELU_GAMMA))))
    if op == "HardSigmoid":
        return prog.op("HARDSIGMOID", operand(0), imms=(float(a("alpha", 0.2)), float(a("beta", 0.5))))
    if op == "ThresholdedRelu":
        return prog.op("THRESHOLDED", operand(0), imms=(float(a("alpha", 1.0)),))
    if op == "Gelu":
        return prog.op("GELU_TANH" if a("approximate", "none") == "tanh" else "GELU_ERF", operand(0))
    if op == "Clip":
        lo, hi = clip_bounds(node, graph)
        x = operand(0)
        if lo is None and hi is None:
            return prog.op("COPY", x)
        return prog.op("CLIP", x, imms=(-math.inf if lo is None else lo, math.inf if hi is None else hi))
    if op in BINARY:
        if op == "Pow":
            # small integer powers as products: POW is a libm call per element and keeps the loop scalar
            exponent = _const(graph, node.inputs[1])
            if exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) in (1.0, 2.0, 3.0):
                x = operand(0)
                e = float(exponent.ravel()[0])
                if e == 1.0:
                    return prog.op("COPY", x)
                sq = prog.op("MUL", x, x)
                return sq if e == 2.0 else prog.op("MUL", sq, x)
        return prog.op(BINARY[op], operand(0), operand(1))
    if op == "Mod":
        return prog.op("FMOD", operand(0), operand(1))
    if op in COMPARE:
        return prog.op(COMPARE[op], operand(0), operand(1))
    if op in LOGIC:
        return prog.op(LOGIC[op], operand(0), operand(1))
    if op in VARIADIC:
        live = [i for i, name in enumerate(node.inputs) if name]
        acc = operand(live[0])
        if len(live) == 1:
            acc = prog.op("COPY", acc)
        for i in live[1:]:
            acc = prog.op(VARIADIC[op], acc, operand(i))
        if op == "Mean":
            acc = prog.op("AFFINE", acc, imms=(1.0 / len(live), 0.0))
        return acc
    if op == "Not":
        return prog.op("NOT", operand(0))
    if op == "IsNaN":
        return prog.op("ISNAN", operand(0))
    if op == "IsInf":
        x = prog.op("ABS", operand(0))
        return prog.op("EQ", x, constant(np.array(np.inf, dtype=np.float32)))
    if op == "Where":
        return prog.op("IWHERE" if out in _INTS else "WHERE", operand(0), operand(1), operand(2))
    if op == "BatchNormalization":
        scale, shift = bn_constants(node, graph)
        y = prog.op("MUL", operand(0), constant(scale))
        return prog.op("ADD", y, constant(shift))
    raise AssertionError(f"no elementwise translation for {op}")


def _int_op(prog: EwProgram, name: str, dtype: str, *args: int) -> int:
    """An integer instruction; an int32 result that can leave int32's range wraps as numpy's does."""
    value = prog.op(name, *args)
    return prog.op("IWRAP32", value) if dtype == "int32" and name in WRAP32 else value


def _int_translate(node: Node, graph: Graph, prog: EwProgram, operand: Operand, constant: Constant,
                   dtype: str) -> int:
    """An arithmetic node over int64/int32 (``dtype``), in integer registers."""
    op = node.op_type
    if op in INT_UNARY:
        return _int_op(prog, INT_UNARY[op], dtype, operand(0))
    if op == "Relu":
        return prog.op("IMAX", operand(0), constant(np.array(0, dtype=np.int64)))
    if op in INT_BINARY:
        return _int_op(prog, INT_BINARY[op], dtype, operand(0), operand(1))
    if op == "Mod":
        return prog.op("IFMOD" if node.attr("fmod", 0) else "IMOD", operand(0), operand(1))
    if op == "Clip":
        # max, then min: bounds with lo > hi give hi everywhere, as the reference does
        x = first = operand(0)
        for i, name in ((1, "IMAX"), (2, "IMIN")):
            bound = _const(graph, node.inputs[i]) if i < len(node.inputs) else None
            if bound is not None:
                x = prog.op(name, x, constant(np.asarray(bound, dtype=np.int64).reshape(())))
        return x if x != first else prog.op("ICOPY", x)
    if op in INT_VARIADIC:
        live = [i for i, name in enumerate(node.inputs) if name]
        acc = operand(live[0])
        if len(live) == 1:
            return prog.op("ICOPY", acc)
        for i in live[1:]:
            acc = _int_op(prog, INT_VARIADIC[op], dtype, acc, operand(i))
        return acc
    raise AssertionError(f"no integer translation for {op}")


def _cast(prog: EwProgram, x: int, src: str, out: str) -> int:
    """Cast (or CastLike) between float32, bool, int64 and int32 registers, exactly where numpy is."""
    if src in _INTS and out in _INTS:
        # int64 -> int32 keeps the low 32 bits, as numpy's astype does
        return prog.op("IWRAP32" if out == "int32" and src == "int64" else "ICOPY", x)
    if src in _INTS:
        value = prog.op("I2F", x)
        # a nonzero integer never rounds to 0.0, so != 0 on the float is != 0 on the integer
        return prog.op("NOT", prog.op("NOT", value)) if out == "bool" else value
    if out in _INTS:
        return prog.op("F2I32" if out == "int32" else "F2I", x)
    # A float -> bool -> float chain inside a group needs the explicit != 0 in between.
    if out == "bool" and src != "bool":
        return prog.op("NOT", prog.op("NOT", x))
    return prog.op("COPY", x)


def clip_bounds(node: Node, graph: Graph) -> tuple[float | None, float | None]:
    opset = graph.opset.get("", 1)
    if opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
        return (None if lo is None else float(lo)), (None if hi is None else float(hi))
    bounds: list[float | None] = []
    for i in (1, 2):
        c = _const(graph, node.inputs[i]) if i < len(node.inputs) else None
        bounds.append(None if c is None else float(c.ravel()[0]))
    return bounds[0], bounds[1]
