"""The opcode table of fused elementwise programs (:mod:`.ewprogram`): name, operand count and
float immediates of each instruction ``dst = op(a, b, c; imm0, imm1)``.

Values have one of two register types (:data:`SIGNATURE`): ``"f"`` holds float32, and bool as 0/1
(bool inputs load as 0/1, bool outputs store ``!= 0``, so comparisons and ``Where`` fuse with float
math); ``"i"`` holds int64, and int32 kept sign-extended (the int32 translation wraps every result
that can leave int32's range, :data:`WRAP32`).  Integer instructions are exact: an int64 value never
passes through a float (which holds integers exactly only up to 2**24 in float32, 2**53 in float64).
How a backend encodes an instruction (opcode numbers, descriptor words) is its own: the order of
:data:`TABLE` is a stable default numbering, integer opcodes after the float ones.
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
    # -- integer instructions (see INT_SIGNATURE) --
    ("I2F", 1, 0),  # float32(a), rounded to nearest as numpy's astype
    ("F2I", 1, 0),  # int64(a), truncated toward zero (an ONNX Cast from float; bool is 0/1)
    ("F2I32", 1, 0),  # int32(a), truncated, then widened: what a float -> int32 Cast gives, out of range too
    ("ICOPY", 1, 0),
    ("INEG", 1, 0),
    ("IABS", 1, 0),
    ("IWRAP32", 1, 0),  # the low 32 bits, sign-extended: int32 wrap-around after int64 arithmetic
    ("IADD", 2, 0),
    ("ISUB", 2, 0),
    ("IMUL", 2, 0),
    ("IDIV", 2, 0),  # truncated toward zero; x / 0 = 0 (numpy's result)
    ("IMOD", 2, 0),  # sign of the divisor (ONNX Mod fmod=0); x % 0 = 0
    ("IFMOD", 2, 0),  # sign of the dividend (fmod=1); x % 0 = 0
    ("IMAX", 2, 0),
    ("IMIN", 2, 0),
    ("IEQ", 2, 0),
    ("ILT", 2, 0),
    ("ILE", 2, 0),
    ("IGT", 2, 0),
    ("IGE", 2, 0),
    ("IWHERE", 3, 0),  # a ? b : c, with a a bool in a float register
]

ARITY: dict[str, int] = {name: arity for name, arity, _ in TABLE}
N_IMM: dict[str, int] = {name: n for name, _, n in TABLE}

#: Register types of the integer instructions' operands and result; every other opcode reads and
#: writes "f" values only.
INT_SIGNATURE: dict[str, tuple[str, str]] = {
    "I2F": ("i", "f"), "F2I": ("f", "i"), "F2I32": ("f", "i"),
    **{op: ("i", "i") for op in ("ICOPY", "INEG", "IABS", "IWRAP32")},
    **{op: ("ii", "i") for op in ("IADD", "ISUB", "IMUL", "IDIV", "IMOD", "IFMOD", "IMAX", "IMIN")},
    **{op: ("ii", "f") for op in ("IEQ", "ILT", "ILE", "IGT", "IGE")},
    "IWHERE": ("fii", "i"),
}

#: Per opcode: (operand types, result type), one letter per operand.
SIGNATURE: dict[str, tuple[str, str]] = {
    name: INT_SIGNATURE.get(name, ("f" * arity, "f")) for name, arity, _ in TABLE}

#: Integer instructions whose int32 result can leave int32's range (followed by IWRAP32 for int32).
WRAP32 = frozenset({"INEG", "IABS", "IADD", "ISUB", "IMUL", "IDIV"})

#: The dtypes "i" registers hold; every other dtype loads into and stores from "f" registers.
INT_DTYPES = frozenset({"int64", "int32"})


def value_type(dtype: str) -> str:
    """The register type a tensor of ``dtype`` loads into and stores from."""
    return "i" if dtype in INT_DTYPES else "f"
