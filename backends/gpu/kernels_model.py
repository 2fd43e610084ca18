"""GPU rKernels for whole models, written once in the kernel IR: chunked unary maps, broadcasting
binary maps, an n-d strided copy (every data-movement op) and a strided, batched, tiled GEMM.

Every kernel here reads its rTask index as ``block_id`` and works on one *chunk*: elements
``[block_id * chunk, min(total, (block_id + 1) * chunk))``, each thread striding by the kernel's
thread count, so one template serves several tilings (the chunk is an argument).  Only the GEMM
has block barriers; they sit in a loop whose trip count is uniform over the block (the shape PoCL
compiles correctly, shared/notes/gpu.md).  Views have at most :data:`MAX_RANK` dimensions.
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Load, Special, c, v

from .kernels import BINARY, UNARY

__all__ = ["MAX_RANK", "unary_chunked", "binary_nd", "copy_nd", "gemm_strided", "UNARY_OPS", "BINARY_OPS"]

MAX_RANK = 6

#: Unary ops beyond those of :mod:`.kernels`.
_MORE_UNARY = {
    "Sqrt": lambda x: Call("sqrt", (x,)),
    "Log": lambda x: Call("log", (x,)),
}
UNARY_OPS = {**UNARY, **_MORE_UNARY}
BINARY_OPS = dict(BINARY)


def _add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("+", a, b)


def _mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("*", a, b)


def _ints(*names: str) -> tuple[ir.Param, ...]:
    return tuple(ir.Param(n, "int") for n in names)


def _chunk_loop(threads: int, body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """``for (i = start + tid; i < stop; i += threads) body`` over this rTask's chunk."""
    start = _mul(Special("block_id"), v("chunk"))
    return (
        ir.Decl("int", "stop", _add(start, v("chunk"))),
        ir.If(BinOp(">", v("stop"), v("total")), (ir.Assign("stop", v("total")),)),
        ir.For("i", _add(start, Special("thread_id")), v("stop"), c(threads), body),
    )


def _coords(prefix: str, rank: int) -> list[ir.Stmt]:
    """Declarations splitting ``i`` into ``{prefix}0..`` over extents ``D0..`` (innermost last)."""
    out: list[ir.Stmt] = [ir.Decl("int", "rest", v("i"))]
    for d in range(rank - 1, 0, -1):
        out.append(ir.Decl("int", f"{prefix}{d}", BinOp("%", v("rest"), v(f"D{d}"))))
        out.append(ir.Assign("rest", BinOp("/", v("rest"), v(f"D{d}"))))
    out.append(ir.Decl("int", f"{prefix}0", v("rest")))
    return out


def unary_chunked(name: str, op: str, threads: int = 256) -> ir.Kernel:
    """``y[i] = op(a[i])`` over this rTask's chunk."""
    if op not in UNARY_OPS:
        raise ValueError(f"no GPU unary kernel for {op}")
    body = _chunk_loop(threads, (ir.Store("y", v("i"), UNARY_OPS[op](Load("a", v("i")))),))
    params = (ir.Param("a", "float", True, True), ir.Param("y", "float", True), *_ints("total", "chunk"))
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", op), ("tiling", "chunked")))


def binary_nd(name: str, op: str, threads: int = 256) -> ir.Kernel:
    """``y[i] = a[sa . coords(i)] op b[sb . coords(i)]``: broadcasting through zero strides."""
    if op not in BINARY_OPS:
        raise ValueError(f"no GPU binary kernel for {op}")
    r = MAX_RANK
    ia = ib = c(0)
    for d in range(r):
        ia = _add(ia, _mul(v(f"k{d}"), v(f"SA{d}")))
        ib = _add(ib, _mul(v(f"k{d}"), v(f"SB{d}")))
    body = _chunk_loop(threads, (*_coords("k", r),
                                 ir.Store("y", v("i"), BinOp(BINARY_OPS[op], Load("a", ia), Load("b", ib)))))
    params = (ir.Param("a", "float", True, True), ir.Param("b", "float", True, True), ir.Param("y", "float", True),
              *_ints("total", "chunk", *(f"D{d}" for d in range(1, r)), *(f"SA{d}" for d in range(r)),
                     *(f"SB{d}" for d in range(r))))
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", op), ("tiling", "chunked, broadcast")))


def copy_nd(name: str, threads: int = 256) -> ir.Kernel:
    """The data-movement kernel: over a view of extents ``D``, source coordinate
    ``s_d = k_d + ST_d``; ``y[DS . k] = (0 <= s_d < SE_d for all d) ? x[SS . s] : PV``.
    Slice, Split, Concat (one view per input), Transpose, constant Pad, Reshape and friends."""
    r = MAX_RANK
    src, dst, ok = c(0), c(0), c(True)
    stmts: list[ir.Stmt] = [*_coords("k", r)]
    for d in range(r):
        stmts.append(ir.Decl("int", f"s{d}", _add(v(f"k{d}"), v(f"ST{d}"))))
        ok = BinOp("&&", ok, BinOp("&&", BinOp(">=", v(f"s{d}"), c(0)), BinOp("<", v(f"s{d}"), v(f"SE{d}"))))
        src = _add(src, _mul(v(f"s{d}"), v(f"SS{d}")))
        dst = _add(dst, _mul(v(f"k{d}"), v(f"DS{d}")))
    stmts.append(ir.Store("y", dst, ir.Select(ok, Load("x", src), v("PV"))))
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True),
              *_ints("total", "chunk", *(f"D{d}" for d in range(1, r)), *(f"SS{d}" for d in range(r)),
                     *(f"DS{d}" for d in range(r)), *(f"ST{d}" for d in range(r)), *(f"SE{d}" for d in range(r))),
              ir.Param("PV", "float"))
    return ir.Kernel(name, params, _chunk_loop(threads, tuple(stmts)), threads=threads,
                     meta=(("op", "copy"), ("tiling", "chunked")))


def gemm_strided(name: str, tile: int = 16) -> ir.Kernel:
    """``Y[b, m, n] = alpha * sum_k A[b, m, k] B[b, k, n] + beta * C[m, n]`` with every operand
    addressed by strides (transposes, broadcast batches and a broadcast ``C`` are strides; ``C``
    only when ``has_c``).  One ``tile x tile`` output tile per rTask, ``tile * tile`` threads,
    A and B tiles staged in shared memory; rTask ``r`` is tile ``r % (tiles_m * tiles_n)`` of
    batch ``r / (tiles_m * tiles_n)``."""
    t = tile
    tx, ty, k0 = v("tx"), v("ty"), v("k0")
    row, col = v("row"), v("col")
    a_idx = _add(_add(v("abase"), _mul(row, v("SAM"))), _mul(_add(k0, tx), v("SAK")))
    b_idx = _add(_add(v("bbase"), _mul(_add(k0, ty), v("SBK"))), _mul(col, v("SBN")))
    in_a = BinOp("&&", BinOp("<", row, v("M")), BinOp("<", _add(k0, tx), v("K")))
    in_b = BinOp("&&", BinOp("<", _add(k0, ty), v("K")), BinOp("<", col, v("N")))
    sh = _add(_mul(ty, c(t)), tx)
    inner = ir.For("kk", c(0), c(t), c(1), (
        ir.Assign("acc", _add(v("acc"), _mul(Load("As", _add(_mul(ty, c(t)), v("kk"))),
                                             Load("Bs", _add(_mul(v("kk"), c(t)), tx))))),))
    cval = ir.Select(BinOp("!=", v("has_c"), c(0)),
                     _mul(v("beta"), Load("Cm", _add(_mul(row, v("SCM")), _mul(col, v("SCN"))))), c(0.0))
    body = (
        ir.Decl("int", "tiles_n", BinOp("/", _add(v("N"), c(t - 1)), c(t))),
        ir.Decl("int", "tiles", _mul(BinOp("/", _add(v("M"), c(t - 1)), c(t)), v("tiles_n"))),
        ir.Decl("int", "bat", BinOp("/", Special("block_id"), v("tiles"))),
        ir.Decl("int", "tile", BinOp("%", Special("block_id"), v("tiles"))),
        ir.Decl("int", "abase", _mul(v("bat"), v("SAB"))),
        ir.Decl("int", "bbase", _mul(v("bat"), v("SBB"))),
        ir.Decl("int", "tx", BinOp("%", Special("thread_id"), c(t))),
        ir.Decl("int", "ty", BinOp("/", Special("thread_id"), c(t))),
        ir.Decl("int", "row", _add(_mul(BinOp("/", v("tile"), v("tiles_n")), c(t)), ty)),
        ir.Decl("int", "col", _add(_mul(BinOp("%", v("tile"), v("tiles_n")), c(t)), tx)),
        ir.Decl("float", "acc", c(0.0)),
        ir.For("k0", c(0), v("K"), c(t), (
            ir.Store("As", sh, ir.Select(in_a, Load("A", a_idx), c(0.0))),
            ir.Store("Bs", sh, ir.Select(in_b, Load("B", b_idx), c(0.0))),
            ir.Barrier(),
            inner,
            ir.Barrier(),
        )),
        ir.If(BinOp("&&", BinOp("<", row, v("M")), BinOp("<", col, v("N"))),
              (ir.Store("Y", _add(_mul(v("bat"), _mul(v("M"), v("N"))), _add(_mul(row, v("N")), col)),
                        _add(_mul(v("alpha"), v("acc")), cval)),)),
    )
    params = (ir.Param("A", "float", True, True), ir.Param("B", "float", True, True),
              ir.Param("Cm", "float", True, True), ir.Param("Y", "float", True),
              *_ints("M", "N", "K", "SAB", "SAM", "SAK", "SBB", "SBK", "SBN", "SCM", "SCN", "has_c"),
              ir.Param("alpha", "float"), ir.Param("beta", "float"))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("As", "float", t * t),
                                                  ir.SharedArray("Bs", "float", t * t)),
                     threads=t * t, meta=(("op", "Gemm"), ("tile", f"{t}x{t}")))
