"""GPU rKernels for reductions over middle axes and for Resize, written once in the kernel IR.

``reduce_strided``: a tensor seen as ``[outer, R, inner]`` reduced over ``R``; each thread makes one
output (coalesced over ``inner``), so it needs no shared memory and no barrier.  Reductions over the
trailing axes (``inner == 1``) use the block-per-row ``kernels_nn.reduce_rows`` instead.

``resize2d``: NCHW Resize over H and W, nearest or (bi)linear, each thread one output pixel; the
coordinate transformation and nearest rounding are integer codes chosen at lower time.
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Load, Select, c, v

from .ir_helpers import add as _add, gid as _gid, ints as _ints, mul as _mul

__all__ = ["reduce_strided", "resize2d", "COORD_MODES", "NEAREST_MODES"]

#: Resize ``coordinate_transformation_mode`` codes.
COORD_MODES = {"half_pixel": 0, "asymmetric": 1, "align_corners": 2, "pytorch_half_pixel": 3}
#: Resize ``nearest_mode`` codes.
NEAREST_MODES = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


def reduce_strided(name: str, kind: str, threads: int = 256) -> ir.Kernel:
    """``y[o, i] = reduce_r x[o, r, i]`` over ``R`` (sum, mean, max, min); one output per thread."""
    init = {"sum": c(0.0), "mean": c(0.0), "max": c(-3.0e38), "min": c(3.0e38)}[kind]
    x = Load("x", _add(_add(_mul(v("o"), _mul(v("R"), v("I"))), _mul(v("r"), v("I"))), v("i")))
    step = {"max": Call("fmax", (v("acc"), x)), "min": Call("fmin", (v("acc"), x))}.get(kind, _add(v("acc"), x))
    out = BinOp("/", v("acc"), ir.Cast("float", v("R"))) if kind == "mean" else v("acc")
    body = (
        ir.Decl("int", "k", _gid()),
        ir.If(BinOp("<", v("k"), v("total")), (
            ir.Decl("int", "o", BinOp("/", v("k"), v("I"))),
            ir.Decl("int", "i", BinOp("%", v("k"), v("I"))),
            ir.Decl("float", "acc", init),
            ir.For("r", c(0), v("R"), c(1), (ir.Assign("acc", step),)),
            ir.Store("y", v("k"), out),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), *_ints("total", "R", "I"))
    op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin"}[kind]
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", op), ("tiling", "strided, one output per thread")))


def _source(o: str, size_in: str, size_out: str, scale: str, mode: ir.Expr) -> ir.Expr:
    """The source coordinate (float) of output coordinate ``o`` along an axis of input extent
    ``size_in``, output extent ``size_out`` and scale ``scale`` (output / input), per ONNX's
    coordinate_transformation_mode code ``mode``."""
    of, fin = ir.Cast("float", v(o)), ir.Cast("float", v(size_in))
    half = BinOp("-", BinOp("/", _add(of, c(0.5)), v(scale)), c(0.5))
    asym = BinOp("/", of, v(scale))
    # align_corners divides by the resized length as the scale gives it, before rounding (ONNX's
    # reference: 4 x 0.6 = 2.4, not the 2 pixels written).
    corners = Select(BinOp(">", v(size_out), c(1)),
                     BinOp("/", _mul(of, BinOp("-", fin, c(1.0))), BinOp("-", _mul(fin, v(scale)), c(1.0))), c(0.0))
    torch_half = Select(BinOp(">", v(size_out), c(1)), half, c(0.0))
    return Select(BinOp("==", mode, c(0)), half,
                  Select(BinOp("==", mode, c(1)), asym, Select(BinOp("==", mode, c(2)), corners, torch_half)))


def _nearest(x: ir.Expr, mode: ir.Expr) -> ir.Expr:
    fl, ce = Call("floor", (x,)), Call("ceil", (x,))
    frac = BinOp("-", x, fl)
    prefer_floor = Select(BinOp("<=", frac, c(0.5)), fl, ce)
    prefer_ceil = Select(BinOp("<", frac, c(0.5)), fl, ce)
    return Select(BinOp("==", mode, c(0)), prefer_floor,
                  Select(BinOp("==", mode, c(1)), prefer_ceil, Select(BinOp("==", mode, c(2)), fl, ce)))


def _clamp(x: ir.Expr, hi: ir.Expr) -> ir.Expr:
    """``x`` clamped to ``[0, hi - 1]`` (ints)."""
    top = BinOp("-", hi, c(1))
    return Select(BinOp("<", x, c(0)), c(0), Select(BinOp(">", x, top), top, x))


def resize2d(name: str, threads: int = 256) -> ir.Kernel:
    """``y[nc, oh, ow]`` from ``x[nc, :IH, :IW]``: ``linear != 0`` bilinear, else nearest."""
    body: list[ir.Stmt] = [
        ir.Decl("int", "k", _gid()),
        ir.If(BinOp("<", v("k"), v("total")), (
            ir.Decl("int", "ow", BinOp("%", v("k"), v("OW"))),
            ir.Decl("int", "oh", BinOp("%", BinOp("/", v("k"), v("OW")), v("OH"))),
            ir.Decl("int", "nc", BinOp("/", v("k"), _mul(v("OW"), v("OH")))),
            ir.Decl("float", "fh", _source("oh", "IH", "OH", "SH", v("coord"))),
            ir.Decl("float", "fw", _source("ow", "IW", "OW", "SW", v("coord"))),
            ir.Decl("int", "base", _mul(v("nc"), _mul(v("IH"), v("IW")))),
            ir.If(BinOp("!=", v("linear"), c(0)), (
                ir.Assign("fh", Call("fmax", (v("fh"), c(0.0)))),
                ir.Assign("fw", Call("fmax", (v("fw"), c(0.0)))),
                ir.Decl("int", "fh0", ir.Cast("int", Call("floor", (v("fh"),)))),
                ir.Decl("int", "fw0", ir.Cast("int", Call("floor", (v("fw"),)))),
                ir.Decl("int", "h0", _clamp(v("fh0"), v("IH"))),
                ir.Decl("int", "w0", _clamp(v("fw0"), v("IW"))),
                ir.Decl("int", "h1", Select(BinOp("<", _add(v("h0"), c(1)), v("IH")), _add(v("h0"), c(1)), v("h0"))),
                ir.Decl("int", "w1", Select(BinOp("<", _add(v("w0"), c(1)), v("IW")), _add(v("w0"), c(1)), v("w0"))),
                ir.Decl("float", "lh", Call("fmin", (BinOp("-", v("fh"), ir.Cast("float", v("h0"))), c(1.0)))),
                ir.Decl("float", "lw", Call("fmin", (BinOp("-", v("fw"), ir.Cast("float", v("w0"))), c(1.0)))),
                ir.Decl("float", "top", _add(
                    _mul(Load("x", _add(v("base"), _add(_mul(v("h0"), v("IW")), v("w0")))), BinOp("-", c(1.0), v("lw"))),
                    _mul(Load("x", _add(v("base"), _add(_mul(v("h0"), v("IW")), v("w1")))), v("lw")))),
                ir.Decl("float", "bot", _add(
                    _mul(Load("x", _add(v("base"), _add(_mul(v("h1"), v("IW")), v("w0")))), BinOp("-", c(1.0), v("lw"))),
                    _mul(Load("x", _add(v("base"), _add(_mul(v("h1"), v("IW")), v("w1")))), v("lw")))),
                ir.Store("y", v("k"), _add(_mul(v("top"), BinOp("-", c(1.0), v("lh"))), _mul(v("bot"), v("lh")))),
            ), (
                ir.Decl("int", "nh", ir.Cast("int", _nearest(v("fh"), v("rounding")))),
                ir.Decl("int", "nw", ir.Cast("int", _nearest(v("fw"), v("rounding")))),
                ir.Decl("int", "sh", _clamp(v("nh"), v("IH"))),
                ir.Decl("int", "sw", _clamp(v("nw"), v("IW"))),
                ir.Store("y", v("k"), Load("x", _add(v("base"), _add(_mul(v("sh"), v("IW")), v("sw"))))),
            )),
        )),
    ]
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True),
              *_ints("total", "IH", "IW", "OH", "OW"), ir.Param("SH", "float"), ir.Param("SW", "float"),
              *_ints("coord", "rounding", "linear"))
    return ir.Kernel(name, tuple(params), tuple(body), threads=threads, meta=(("op", "Resize"),))
