"""The GEMM micro-kernel with A read in place: rows of A at a stride, B packed.

:mod:`.ukernel`'s packed kernel reads an A panel that the caller has interleaved (``k*MR + r``).
Packing A is a transposing gather, about 1 ns a float on this machine: when K is small or A is
used once (attention's scores, whose head size is 64, and its probabilities, which are written,
used once and dropped) it costs as much as the multiply-adds.  This kernel broadcasts
``A[r*lda + k]`` straight from MR rows instead (the "sup" kernels of BLIS do the same for small
matrices): each k step reads one float of each of the MR rows, so each row's cache line serves 16
steps, and nothing is copied.

Variants for every row count 1..MR (1..12 built everywhere), so a last panel of a few rows reads only its own rows (a
kernel reading past the last row of A could run past the end of the arena).  The tile is stored
(``acc`` = 0) or added to C (``acc`` = 1), NR columns: the caller sends a ragged last panel of
columns through a scratch tile.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import NR, PF_PACKED, WIDTH, _k_loop, store_tile

LDA_SYMBOL = "rammer_cpu_ukernel_lda"
#: Row variants 1..12 on every CPU (MR is 12 with AVX-512 and 6 with AVX2; the callers use rows <= MR).
LDA_MAX_ROWS = 12


def lda_symbol(rows: int) -> str:
    return f"{LDA_SYMBOL}{rows}"


def _add_lda_kernel(mod: ir.Module, rows: int) -> None:
    """``(k, a, lda, b, c, ldc, acc)``: ``C[r*ldc + j] (+)= sum_kk a[r*lda + kk] * b[kk*NR + j]``
    for r < rows, j < NR."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    fp = f32.as_pointer()
    names = ("k", "a", "lda", "b", "c", "ldc", "acc")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64 if n in ("k", "lda", "ldc", "acc") else fp
                                                          for n in names]), name=lda_symbol(rows))
    for arg, name in zip(fn.args, names):
        arg.name = name
    k, a, lda, b, c, ldc, acc = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    row_base = [bld.gep(a, [bld.mul(lda, ir.Constant(i64, r))]) for r in range(rows)]
    bld, accs = _k_loop(fn, bld, k, rows, WIDTH, NR, b, lambda bld, kk, r: bld.gep(row_base[r], [kk]),
                        prefetch=PF_PACKED)
    add = fn.append_basic_block("add")
    put = fn.append_basic_block("put")
    bld.cbranch(bld.icmp_signed("!=", acc, ir.Constant(i64, 0)), add, put)
    store_tile(add, put, accs, c, ldc)


def _lda_module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel_lda")
    for rows in range(1, LDA_MAX_ROWS + 1):
        _add_lda_kernel(mod, rows)
    return mod


LDA = MachineCode(f"ukernel lda pf{PF_PACKED}", _lda_module, tuple(lda_symbol(r) for r in range(1, LDA_MAX_ROWS + 1)))


def _lda_intrinsic(rows: int):
    symbol = lda_symbol(rows)

    def typer(typingctx, k, A, a_off, lda, Bp, b_off, C, c_off, ldc, acc):
        if not arrays_are(types.float32, A, Bp, C):
            return None
        return types.none(k, A, a_off, lda, Bp, b_off, C, c_off, ldc, acc), call_codegen(symbol, "ififfii")
    typer.__name__ = f"ukernel_lda{rows}"
    typer.__doc__ = (f"``C[c_off + r*ldc + j] (+)= sum_k A[a_off + r*lda + k] * Bp[b_off + k*NR + j]`` for "
                     f"r < {rows}, j < NR (``acc``: add to C).")
    return uses(symbol)(intrinsic(typer))


ukernel_lda1, ukernel_lda2, ukernel_lda3, ukernel_lda4, ukernel_lda5, ukernel_lda6 = (
    _lda_intrinsic(r) for r in range(1, 7))
ukernel_lda7, ukernel_lda8, ukernel_lda9, ukernel_lda10, ukernel_lda11, ukernel_lda12 = (
    _lda_intrinsic(r) for r in range(7, 13))
