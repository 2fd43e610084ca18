"""Packing an A panel for the GEMM micro-kernel with vector transposes, generated as LLVM IR.

The packed micro-kernel (:mod:`.ukernel`) reads A as MR-row panels laid out k-major,
``P[k * MR + r] = alpha * A[r, k]``: one broadcast per row per k step.  Packing is a transpose of
MR rows, and done element by element (numba's loop: a scalar load and a scalar store 48 bytes
from the last) it cost 0.45 ns a float here, 2-8% of a transformer's GEMM (1024 x 1376 x 512:
0.63 of 14 ms; the micro-kernel alone, A already packed, ran at 115 GFLOP/s and the whole GEMM
at 107).  This kernel loads WIDTH columns of each of the MR rows as vectors, transposes them in
registers in groups of four rows (two stages of in-lane unpacks, as in a 4 x 4 transpose per
128-bit block, then one or two shuffles that join the groups' blocks), and stores each column's
MR floats with one masked store.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import MR, NR, WIDTH, _masked, _splat, _vec_ptr

SYMBOL = "rammer_cpu_pack_a_panel"
#: The same transpose for WIDTH columns of a B stored column by column (attention's K^T, a transposed
#: view of K whose columns are K's rows), into half (AVX-512: NR = 2 WIDTH) of an NR-wide B panel.
COLUMNS_SYMBOL = "rammer_cpu_pack_b_columns"
#: Lanes of a 128-bit block: the unpack stages work within blocks, as x86's unpack instructions do.
BLOCK = 4


def _shuffle(bld: ir.IRBuilder, x: ir.Value, y: ir.Value, mask: list[int]) -> ir.Value:
    i32 = ir.IntType(32)
    return bld.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, len(mask)), mask))


def transpose_columns(bld: ir.IRBuilder, rows: list[ir.Value], width: int) -> list[ir.Value]:
    """``rows`` (at most ``width``, each a ``width``-lane vector) as ``width`` column vectors: lane r
    of column c is ``rows[r][c]`` for r < len(rows); the lanes past the rows are undefined."""
    vec = rows[0].type
    zero = ir.Constant(vec, [0.0] * width)
    groups = []
    for g in range(0, len(rows), BLOCK):
        x = list(rows[g:g + BLOCK]) + [zero] * (BLOCK - len(rows[g:g + BLOCK]))
        lo = [i for b in range(0, width, BLOCK) for i in (b, width + b, b + 1, width + b + 1)]
        hi = [i + 2 for i in lo]
        t0, t1 = _shuffle(bld, x[0], x[1], lo), _shuffle(bld, x[0], x[1], hi)
        t2, t3 = _shuffle(bld, x[2], x[3], lo), _shuffle(bld, x[2], x[3], hi)
        # block b of u[j] is column b + j of the group's four rows
        even = [i for b in range(0, width, BLOCK) for i in (b, b + 1, width + b, width + b + 1)]
        odd = [i + 2 for i in even]
        groups.append([_shuffle(bld, t0, t2, even), _shuffle(bld, t0, t2, odd),
                       _shuffle(bld, t1, t3, even), _shuffle(bld, t1, t3, odd)])
    columns = []
    for b in range(0, width, BLOCK):
        for j in range(BLOCK):
            col = groups[0][j]
            if len(groups) == 1:
                if b:
                    col = _shuffle(bld, col, col, [b + i for i in range(BLOCK)] + [0] * (width - BLOCK))
            else:
                # block b of the first two groups, then each further group's block b after them
                mask = [b + i for i in range(BLOCK)] + [width + b + i for i in range(BLOCK)]
                col = _shuffle(bld, col, groups[1][j], mask + [0] * (width - len(mask)))
                for g in range(2, len(groups)):
                    mask = list(range(g * BLOCK)) + [width + b + i for i in range(BLOCK)]
                    col = _shuffle(bld, col, groups[g][j], mask + [0] * (width - len(mask)))
            columns.append(col)
    return columns


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
    out = bld.mul(k0, ir.Constant(i64, ldp))
    for c, col in enumerate(transpose_columns(bld, loaded, width)):
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
