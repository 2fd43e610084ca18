"""Packing an A panel for the GEMM micro-kernel with vector transposes, generated as LLVM IR.

The packed micro-kernel (:mod:`.ukernel`) reads A as MR-row panels laid out k-major,
``P[k * MR + r] = alpha * A[r, k]``: one broadcast per row per k step.  Packing is a transpose of
MR rows, and done element by element (numba's loop: a scalar load and a scalar store 48 bytes
from the last) it cost 0.45 ns a float here, 2-8% of a transformer's GEMM (1024 x 1376 x 512:
0.63 of 14 ms; the micro-kernel alone, A already packed, ran at 115 GFLOP/s and the whole GEMM
at 107).  This kernel loads WIDTH columns of each of the MR rows as vectors, transposes them in
registers (the pixel-row kernel's :func:`.ukernel._transpose_columns`, the rows padded to WIDTH),
and stores each column's MR floats with one masked store.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import MR, NR, WIDTH, _masked, _splat, _transpose_columns, _vec_ptr

SYMBOL = "rammer_cpu_pack_a_panel"
#: The same transpose for WIDTH columns of a B stored column by column (attention's K^T, a transposed
#: view of K whose columns are K's rows), into half (AVX-512: NR = 2 WIDTH) of an NR-wide B panel.
COLUMNS_SYMBOL = "rammer_cpu_pack_b_columns"


def _add_pack_kernel(mod: ir.Module, rows: int, width: int, symbol: str = SYMBOL, ldp: int | None = None) -> None:
    """``(blocks, a, lda, p, alpha)``: ``p[k * ldp + r] = alpha * a[r * lda + k]`` for r < rows and
    k < blocks * width (whole column blocks; the caller packs a ragged end); ``ldp`` = ``rows``
    unless given."""
    ldp = rows if ldp is None else ldp
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    fp = f32.as_pointer()
    vec = ir.VectorType(f32, width)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fp, i64, fp, f32]), name=symbol)
    blocks, a, lda, p, alpha = fn.args
    for arg, name in zip(fn.args, ("blocks", "a", "lda", "p", "alpha")):
        arg.name = name
    entry = fn.append_basic_block("entry")
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    bld = ir.IRBuilder(entry)
    scale = _splat(bld, alpha, vec)
    store = _masked(mod, vec, store=True)
    keep = ir.Constant(ir.VectorType(ir.IntType(1), width), [1] * rows + [0] * (width - rows))
    bld.branch(head)
    bld = ir.IRBuilder(head)
    kb = bld.phi(i64, name="kb")
    kb.add_incoming(ir.Constant(i64, 0), entry)
    bld.cbranch(bld.icmp_signed("<", kb, blocks), body, done)
    bld = ir.IRBuilder(body)
    k0 = bld.mul(kb, ir.Constant(i64, width))
    loaded = []
    for r in range(rows):
        src = bld.add(bld.mul(ir.Constant(i64, r), lda), k0)
        loaded.append(bld.fmul(bld.load(_vec_ptr(bld, a, src, vec), align=4), scale))
    # the rows padded to a whole width x width block (the lanes past ``rows`` are not stored)
    loaded += [ir.Constant(vec, [0.0] * width)] * (width - rows)
    out = bld.mul(k0, ir.Constant(i64, ldp))
    for c, col in enumerate(_transpose_columns(bld, [[v] for v in loaded], width, width)):
        dst = _vec_ptr(bld, p, bld.add(out, ir.Constant(i64, c * ldp)), vec)
        bld.call(store, [col, dst, ir.Constant(ir.IntType(32), 4), keep])
    kb.add_incoming(bld.add(kb, ir.Constant(i64, 1)), body)
    bld.branch(head)
    ir.IRBuilder(done).ret_void()


def pack_module(rows: int, width: int, ldb: int | None = None) -> ir.Module:
    """A module with the panel-packing kernel for ``rows`` x ``width`` blocks (tests build the AVX2
    shape here too) and, with ``ldb``, the B-columns kernel (``width`` columns into panels ``ldb``
    wide)."""
    mod = ir.Module(name="rammer_pack_a")
    _add_pack_kernel(mod, rows, width)
    if ldb is not None:
        _add_pack_kernel(mod, width, width, COLUMNS_SYMBOL, ldp=ldb)
    return mod


PACK = MachineCode(f"pack a {MR}x{WIDTH} b {NR}", lambda: pack_module(MR, WIDTH, NR), (SYMBOL, COLUMNS_SYMBOL))


@uses(SYMBOL)
@intrinsic
def pack_a_panel(typingctx, blocks, A, a_off, lda, P, p_off, alpha):
    """``P[p_off + k*MR + r] = alpha * A[a_off + r*lda + k]`` for the MR rows and the first
    ``blocks * WIDTH`` columns of a panel (rows of unit stride)."""
    if not arrays_are(types.float32, A, P):
        return None
    return types.none(blocks, A, a_off, lda, P, p_off, alpha), call_codegen(SYMBOL, "ififs")


@uses(COLUMNS_SYMBOL)
@intrinsic
def pack_b_columns(typingctx, blocks, A, a_off, lda, P, p_off, alpha):
    """``P[p_off + k*NR + j] = alpha * A[a_off + j*lda + k]`` for WIDTH columns j of a B stored
    column by column (column j's k-th float at ``a_off + j*lda + k``) and the first ``blocks * WIDTH``
    of its rows."""
    if not arrays_are(types.float32, A, P):
        return None
    return types.none(blocks, A, a_off, lda, P, p_off, alpha), call_codegen(COLUMNS_SYMBOL, "ififs")
