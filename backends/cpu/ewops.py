"""Opcodes of the fused elementwise rKernel's little register language.

A fused elementwise group (FusionStitching-style: a chain or DAG of
pointwise ops of one shape) becomes a program: load inputs into registers,
run instructions ``dst = op(a, b, c; imm0, imm1)`` over a block of elements,
store some registers.  The program is data in the task table's side array, so
one compiled kernel runs every fused group of every model.

Registers hold float32; bool inputs load as 0/1 and bool outputs store
``!= 0``, so comparisons and ``Where`` fuse with float math.
"""

from __future__ import annotations

# Storage dtype codes of loads and stores.
DT_F32 = 0
DT_BOOL = 1
DT_I64 = 2
DT_I32 = 3
DTYPE_CODE = {"float32": DT_F32, "bool": DT_BOOL, "int64": DT_I64, "int32": DT_I32}

# Opcodes.  (name, arity, number of float immediates)
_TABLE = [
    ("COPY", 1, 0),
    ("NEG", 1, 0),
    ("ABS", 1, 0),
    ("RELU", 1, 0),
    ("SIGMOID", 1, 0),
    ("TANH", 1, 0),
    ("EXP", 1, 0),
    ("LOG", 1, 0),
    ("SQRT", 1, 0),
    ("RECIP", 1, 0),
    ("FLOOR", 1, 0),
    ("CEIL", 1, 0),
    ("ROUND", 1, 0),  # half to even
    ("ERF", 1, 0),
    ("SIN", 1, 0),
    ("COS", 1, 0),
    ("SOFTPLUS", 1, 0),
    ("SOFTSIGN", 1, 0),
    ("SIGN", 1, 0),
    ("NOT", 1, 0),
    ("ISNAN", 1, 0),
    ("LEAKY", 1, 1),  # alpha
    ("ELU", 1, 1),  # alpha
    ("HARDSIGMOID", 1, 2),  # alpha, beta
    ("CLIP", 1, 2),  # lo, hi
    ("SELU", 1, 2),  # alpha, gamma
    ("AFFINE", 1, 2),  # x * a + b
    ("THRESHOLDED", 1, 1),  # alpha
    ("CELU", 1, 1),
    ("HARDSWISH", 1, 0),
    ("GELU_TANH", 1, 0),
    ("GELU_ERF", 1, 0),
    ("TAN", 1, 0),
    ("ATAN", 1, 0),
    ("ADD", 2, 0),
    ("SUB", 2, 0),
    ("MUL", 2, 0),
    ("DIV", 2, 0),
    ("POW", 2, 0),
    ("MAX", 2, 0),
    ("MIN", 2, 0),
    ("PRELU", 2, 0),
    ("FMOD", 2, 0),
    ("EQ", 2, 0),
    ("LT", 2, 0),
    ("LE", 2, 0),
    ("GT", 2, 0),
    ("GE", 2, 0),
    ("AND", 2, 0),
    ("OR", 2, 0),
    ("XOR", 2, 0),
    ("WHERE", 3, 0),  # a ? b : c
]

OPCODE: dict[str, int] = {name: i for i, (name, _, _) in enumerate(_TABLE)}
ARITY: dict[str, int] = {name: arity for name, arity, _ in _TABLE}
N_IMM: dict[str, int] = {name: n for name, _, n in _TABLE}

# Module-level constants the numba kernel compares against (frozen at compile time).
globals().update({f"OP_{name}": code for name, code in OPCODE.items()})

#: Elements per register block: long enough that the per-block dispatch is
#: amortized (a GEMM epilogue runs one block per tile row), small enough that
#: a dozen registers (48 KiB) stay in L1/L2.
BLOCK = 1024

# Layout of a program in the int64 side array (all offsets relative to its start).
HDR_NIN = 0
HDR_NOUT = 1
HDR_NINSTR = 2
HDR_NREGS = 3
HDR_DIMS = 4  # d0, d1, d2, d3
HDR_LEN = 8
IN_LEN = 6  # dtype, offset, s0, s1, s2, s3
OUT_LEN = 7  # reg, dtype, offset, s0, s1, s2, s3
INSTR_LEN = 6  # opcode, dst, a, b, c, imm index into the float side array
