"""The opcode table of fused elementwise programs (:mod:`.ewprogram`): name, operand count and
float immediates of each instruction ``dst = op(a, b, c; imm0, imm1)``.

Registers hold float32; bool inputs load as 0/1 and bool outputs store ``!= 0``, so comparisons and
``Where`` fuse with float math.  How a backend encodes an instruction (opcode numbers, descriptor
words) is its own: the order of :data:`TABLE` is a stable default numbering.
"""

from __future__ import annotations

#: (name, arity, number of float immediates), in the default opcode order.
TABLE: list[tuple[str, int, int]] = [
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

ARITY: dict[str, int] = {name: arity for name, arity, _ in TABLE}
N_IMM: dict[str, int] = {name: n for name, _, n in TABLE}
