"""GPU rKernels for indexing and selection, written once in the kernel IR: Gather and GatherElements
with indices read at run time, a broadcasting Where, Cast to bool, and CumSum.

Integer and bool tensors live in the float arena as exact float32 values (:mod:`.lower_ints`), so
these kernels read indices and conditions as floats: an index is range-checked while still a float
(an out-of-range value never becomes an out-of-bounds address, and a huge value is never converted
to ``int``), and a condition is "not 0.0".  Like :mod:`.kernels_model`, each rTask works on one
chunk of the output (``chunk`` is an argument, so one template serves every tiling); no barriers.
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Load, Select, c, v

from .ir_helpers import add, and_, div, ints, lt, mod, mul
from .kernels_model import MAX_RANK, _chunk_loop, _coords

__all__ = ["gather_rows", "gather_elements", "where_nd", "cast_bool", "cumsum_strided", "fill"]


def gather_rows(name: str, threads: int = 256) -> ir.Kernel:
    """ONNX Gather seen as ``x[outer, A, inner]`` and ``ind[K]``: ``y[o, k, j] = x[o, ind[k], j]``, a
    negative index counting from the end (``ind[k] + A``).  An index still outside ``[0, A)`` (ONNX
    makes that an error, which a kernel cannot raise) stores ``bad`` (the caller passes NaN), so a
    bad index poisons the output instead of reading another tensor's memory."""
    size = ir.Cast("float", v("A"))
    body = (
        ir.Decl("int", "j", mod(v("i"), v("inner"))),
        ir.Decl("int", "t", div(v("i"), v("inner"))),
        ir.Decl("int", "k", mod(v("t"), v("K"))),
        ir.Decl("int", "o", div(v("t"), v("K"))),
        ir.Comment("the index as a float: exact for integers below 2^24, compared before any int conversion"),
        ir.Decl("float", "f", Load("ind", v("k"))),
        ir.If(lt(v("f"), c(0.0)), (ir.Assign("f", add(v("f"), size)),)),
        ir.If(and_(BinOp(">=", v("f"), c(0.0)), lt(v("f"), size)),
              (ir.Store("y", v("i"), Load("x", add(mul(add(mul(v("o"), v("A")), ir.Cast("int", v("f"))), v("inner")),
                                                   v("j")))),),
              (ir.Store("y", v("i"), v("bad")),)),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("ind", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "chunk", "K", "A", "inner"), ir.Param("bad", "float"))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "Gather"), ("tiling", "chunked")))


def where_nd(name: str, threads: int = 256) -> ir.Kernel:
    """``y[i] = cond[SC . k] != 0 ? a[SA . k] : b[SB . k]`` over the output's coordinates ``k``
    (extents ``D1..D5``, broadcasting through zero strides): Where with a condition computed at run
    time (bool as 0.0/1.0 in the arena)."""
    r = MAX_RANK
    idx = {p: add(*(mul(v(f"k{d}"), v(f"{p}{d}")) for d in range(r))) for p in ("SC", "SA", "SB")}
    body = (*_coords("k", r),
            ir.Store("y", v("i"), Select(BinOp("!=", Load("cond", idx["SC"]), c(0.0)),
                                         Load("a", idx["SA"]), Load("b", idx["SB"]))))
    params = (ir.Param("cond", "float", True, True), ir.Param("a", "float", True, True),
              ir.Param("b", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "chunk", *(f"D{d}" for d in range(1, r)),
                    *(f"{p}{d}" for p in ("SC", "SA", "SB") for d in range(r))))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "Where"), ("tiling", "chunked, broadcast")))


def cast_bool(name: str, threads: int = 256) -> ir.Kernel:
    """``y[i] = x[i] != 0 ? 1.0 : 0.0``: Cast to bool (NaN is true, as numpy has it)."""
    body = (ir.Store("y", v("i"), Select(BinOp("!=", Load("x", v("i")), c(0.0)), c(1.0), c(0.0))),)
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), *ints("total", "chunk"))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "Cast"), ("tiling", "chunked")))


def gather_elements(name: str, threads: int = 256) -> ir.Kernel:
    """ONNX GatherElements: ``y[k] = x[k with k[axis] replaced by ind[k]]`` over the indices' (and
    output's) coordinates ``k`` (extents ``D1..D5``).  ``S0..S5`` are the data's strides with the
    axis's set to 0, ``SA`` the axis's stride, ``A`` its size; a negative index counts from the end,
    one still out of range stores ``bad`` (NaN), as :func:`gather_rows` does."""
    r = MAX_RANK
    size = ir.Cast("float", v("A"))
    base = add(*(mul(v(f"k{d}"), v(f"S{d}")) for d in range(r)))
    body = (*_coords("k", r),
            ir.Decl("float", "f", Load("ind", v("i"))),
            ir.If(lt(v("f"), c(0.0)), (ir.Assign("f", add(v("f"), size)),)),
            ir.If(and_(BinOp(">=", v("f"), c(0.0)), lt(v("f"), size)),
                  (ir.Store("y", v("i"), Load("x", add(base, mul(ir.Cast("int", v("f")), v("SA"))))),),
                  (ir.Store("y", v("i"), v("bad")),)))
    params = (ir.Param("x", "float", True, True), ir.Param("ind", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "chunk", *(f"D{d}" for d in range(1, r)), *(f"S{d}" for d in range(r)), "SA", "A"),
              ir.Param("bad", "float"))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "GatherElements"), ("tiling", "chunked")))


def cumsum_strided(name: str, integer: bool, exclusive: bool, reverse: bool, threads: int = 128) -> ir.Kernel:
    """CumSum of ``x`` seen as ``[outer, n, inner]`` along ``n``: one thread per ``(outer, inner)``
    pair walks its line with stride ``inner`` (forward, or backward for ``reverse``), storing the
    running sum before (``exclusive``) or after adding each element.  Float sums accumulate in
    float32 in order, as numpy's cumsum does; integer ones (int32/int64 as exact float32 values) in a
    64-bit integer, stored as NaN past 2**24 where float32 would round them.  ``total`` is
    ``outer * inner``; each rTask takes ``threads`` lines."""
    acc_type = "long" if integer else "float"
    zero = c(0) if integer else c(0.0)
    pos = (BinOp("-", BinOp("-", v("n"), c(1)), v("j")) if reverse else v("j"))
    at = add(v("base"), mul(pos, v("inner")))
    value: ir.Expr = ir.Cast("long", Load("x", at)) if integer else Load("x", at)

    def stored(x: ir.Expr) -> ir.Expr:
        if not integer:
            return x
        big = BinOp("||", BinOp(">", x, c(1 << 24)), BinOp("<", x, c(-(1 << 24))))
        return Select(big, v("bad"), ir.Cast("float", x))

    step: tuple[ir.Stmt, ...] = (
        (ir.Store("y", at, stored(v("acc"))), ir.Assign("acc", add(v("acc"), value))) if exclusive else
        (ir.Assign("acc", add(v("acc"), value)), ir.Store("y", at, stored(v("acc")))))
    line = ir.Decl("int", "base", add(mul(div(v("i"), v("inner")), mul(v("n"), v("inner"))), mod(v("i"), v("inner"))))
    body = (line, ir.Decl(acc_type, "acc", zero), ir.For("j", c(0), v("n"), c(1), step))
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), *ints("total", "chunk", "n", "inner"),
              ir.Param("bad", "float"))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "CumSum"), ("tiling", "one line per thread")))


def fill(name: str, threads: int = 256) -> ir.Kernel:
    """``y[i] = value`` over this rTask's chunk: ConstantOfShape (its shape is static)."""
    params = (ir.Param("y", "float", True), *ints("total", "chunk"), ir.Param("value", "float"))
    return ir.Kernel(name, params, _chunk_loop(threads, (ir.Store("y", v("i"), v("value")),)), threads=threads,
                     meta=(("op", "ConstantOfShape"), ("tiling", "chunked")))
