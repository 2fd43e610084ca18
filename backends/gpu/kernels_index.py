"""GPU rKernels for indexing and selection, written once in the kernel IR: Gather with indices read at
run time, a broadcasting Where, and Cast to bool.

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

__all__ = ["gather_rows", "where_nd", "cast_bool"]


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
