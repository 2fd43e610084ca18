"""The fused elementwise rKernel's encoding of programs: opcode numbers, dtype codes, word layout.

A fused elementwise group (FusionStitching-style: a chain or DAG of
pointwise ops of one shape) becomes a program: load inputs into registers,
run instructions ``dst = op(a, b, c; imm0, imm1)`` over a block of elements,
store some registers.  The program is data in the task table's side array, so
one compiled kernel runs every fused group of every model.

The opcode table and the program builder are the core's (:mod:`rammer.lower.ewops`,
:mod:`rammer.lower.ewprogram`); this module numbers and lays them out for the kernel.
"""

from __future__ import annotations

from rammer.lower.ewops import TABLE

# Storage dtype codes of loads and stores.
DT_F32 = 0
DT_BOOL = 1
DT_I64 = 2
DT_I32 = 3
DTYPE_CODE = {"float32": DT_F32, "bool": DT_BOOL, "int64": DT_I64, "int32": DT_I32}

# Opcodes: the core's table (rammer.lower.ewops) numbered in its order.
OPCODE: dict[str, int] = {name: i for i, (name, _, _) in enumerate(TABLE)}

# Module-level constants the numba kernel compares against (frozen at compile time).
globals().update({f"OP_{name}": code for name, code in OPCODE.items()})

#: Elements per register block: long enough that the per-block dispatch is
#: amortized (a GEMM epilogue runs one block per tile row), small enough that
#: a dozen registers (48 KiB) stay in L1/L2.
BLOCK = 1024

#: A register slot is BLOCK float32s of scratch; an integer register (int64) uses the same slot,
#: IREG int64s from the first 8-byte boundary in it.  A program with integer values therefore runs
#: blocks of IBLOCK elements: one less than IREG, so that the slot holds them whatever the parity of
#: the scratch base a kernel hands the interpreter (scratch sizes stay registers * BLOCK).
IREG = BLOCK // 2
IBLOCK = IREG - 1

# Layout of a program in the int64 side array (all offsets relative to its start).
HDR_NIN = 0
HDR_NOUT = 1
HDR_NINSTR = 2
HDR_NREGS = 3
HDR_DIMS = 4  # d0, d1, d2, d3
HDR_INT = 8  # 1 if any value lives in an integer register (blocks of IBLOCK elements)
HDR_LEN = 9
IN_LEN = 6  # dtype, offset, s0, s1, s2, s3
OUT_LEN = 7  # reg, dtype, offset, s0, s1, s2, s3
INSTR_LEN = 6  # opcode, dst, a, b, c, imm index into the float side array
