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

from .ir_helpers import add as _add
from .ir_helpers import gid as _gid
from .ir_helpers import inf, nan_max, nan_min, neg_inf
from .ir_helpers import ints as _ints
from .ir_helpers import mul as _mul

__all__ = ["reduce_strided", "reduce_general", "softmax_strided", "resize2d", "COORD_MODES", "NEAREST_MODES",
           "GENERAL_KINDS", "AXES"]

#: Dimensions of the kept and of the reduced index spaces of :func:`reduce_general` (after merging
#: adjacent axes of a rank-6 tensor, at most 3 of each).
AXES = 4
#: Reductions :func:`reduce_general` makes: kind -> (initial value, step, final value) in terms of
#: ``acc``, the loaded ``x``, the count ``R`` and (logsumexp) the running maximum ``m``.
GENERAL_KINDS = ("sum", "mean", "max", "min", "prod", "l1", "l2", "sumsquare", "logsum", "logsumexp")

#: Resize ``coordinate_transformation_mode`` codes.
COORD_MODES = {"half_pixel": 0, "asymmetric": 1, "align_corners": 2, "pytorch_half_pixel": 3}
#: Resize ``nearest_mode`` codes.
NEAREST_MODES = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


def reduce_strided(name: str, kind: str, threads: int = 256) -> ir.Kernel:
    """``y[o, i] = reduce_r x[o, r, i]`` over ``R`` (sum, mean, max, min); one output per thread."""
    init = {"sum": c(0.0), "mean": c(0.0), "max": neg_inf(), "min": inf()}[kind]
    x = Load("x", _add(_add(_mul(v("o"), _mul(v("R"), v("I"))), _mul(v("r"), v("I"))), v("i")))
    step = {"max": nan_max(v("acc"), x), "min": nan_min(v("acc"), x)}.get(kind, _add(v("acc"), x))
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


def _unflatten(index: ir.Expr, dims: list[str], strides: list[str], out: str, tmp: str) -> list[ir.Stmt]:
    """``out = sum_d coord_d * strides[d]`` where ``index`` is flat over ``dims`` (row-major; the
    first extent is implied)."""
    stmts: list[ir.Stmt] = [ir.Decl("int", tmp, index), ir.Decl("int", out, c(0))]
    for d in range(len(strides) - 1, 0, -1):
        stmts += [ir.Assign(out, _add(v(out), _mul(BinOp("%", v(tmp), v(dims[d - 1])), v(strides[d])))),
                  ir.Assign(tmp, BinOp("/", v(tmp), v(dims[d - 1])))]
    stmts.append(ir.Assign(out, _add(v(out), _mul(v(tmp), v(strides[0])))))
    return stmts


def reduce_general(name: str, kind: str, threads: int = 256) -> ir.Kernel:
    """``y[k] = reduce_r x[base(k) + off(r)]`` over any set of axes: the kept index space has
    extents ``(., K1..K3)`` and input strides ``KS0..KS3``, the reduced one ``(., Q1..Q3)`` and
    ``QS0..QS3`` with ``R`` elements; one output per thread, no shared memory, no barrier (what
    the block-per-row and adjacent-axes kernels do not cover: ReduceProd/L1/L2/SumSquare/LogSum/
    LogSumExp, and axes that are not one run)."""
    if kind not in GENERAL_KINDS:
        raise ValueError(f"reduce kind {kind!r}")
    kept = [f"K{d}" for d in range(1, AXES)]
    red = [f"Q{d}" for d in range(1, AXES)]
    x = Load("x", _add(v("base"), v("off")))
    init = {"max": neg_inf(), "min": inf(), "prod": c(1.0)}.get(kind, c(0.0))
    step = {"max": nan_max(v("acc"), x), "min": nan_min(v("acc"), x), "prod": _mul(v("acc"), x),
            "l1": _add(v("acc"), Call("fabs", (x,))), "l2": _add(v("acc"), _mul(x, x)),
            "sumsquare": _add(v("acc"), _mul(x, x)),
            "logsumexp": _add(v("acc"), Call("exp", (BinOp("-", x, v("m")),)))}.get(kind, _add(v("acc"), x))
    final = {"mean": BinOp("/", v("acc"), ir.Cast("float", v("R"))), "l2": Call("sqrt", (v("acc"),)),
             "logsum": Call("log", (v("acc"),)), "logsumexp": _add(Call("log", (v("acc"),)), v("m"))}.get(kind, v("acc"))

    def over_r(update: ir.Stmt) -> ir.Stmt:
        return ir.For("r", c(0), v("R"), c(1), (*_unflatten(v("r"), red, [f"QS{d}" for d in range(AXES)], "off", "rt"),
                                                update))

    body: list[ir.Stmt] = [*_unflatten(v("k"), kept, [f"KS{d}" for d in range(AXES)], "base", "kt")]
    if kind == "logsumexp":  # the maximum first: exp of the raw values overflows
        # (every value -inf: m = 0 keeps -inf - m from being NaN; the result is log(0) = -inf)
        body += [ir.Decl("float", "m", neg_inf()), over_r(ir.Assign("m", Call("fmax", (v("m"), x)))),
                 ir.If(BinOp("==", v("m"), neg_inf()), (ir.Assign("m", c(0.0)),))]
    body += [ir.Decl("float", "acc", init), over_r(ir.Assign("acc", step)), ir.Store("y", v("k"), final)]
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), *_ints("total", "R"),
              *_ints(*kept), *_ints(*(f"KS{d}" for d in range(AXES))), *_ints(*red),
              *_ints(*(f"QS{d}" for d in range(AXES))))
    return ir.Kernel(name, params, (ir.Decl("int", "k", _gid()), ir.If(BinOp("<", v("k"), v("total")), tuple(body))),
                     threads=threads, meta=(("op", f"reduce {kind}"), ("tiling", "any axes, one output per thread")))


def softmax_strided(name: str, log: bool, threads: int = 256) -> ir.Kernel:
    """Softmax (``log``: LogSoftmax) of ``x`` seen as ``[outer, N, I]`` over ``N``: one thread per
    ``(o, i)``, reading with stride ``I`` (an inner axis, coalesced over ``i``); no barrier."""
    at = _add(v("base"), _mul(v("j"), v("I")))
    body = (
        ir.Decl("int", "k", _gid()),
        ir.If(BinOp("<", v("k"), v("total")), (
            ir.Decl("int", "base", _add(_mul(BinOp("/", v("k"), v("I")), _mul(v("N"), v("I"))), BinOp("%", v("k"), v("I")))),
            ir.Decl("float", "m", neg_inf()),
            ir.For("j", c(0), v("N"), c(1), (ir.Assign("m", Call("fmax", (v("m"), Load("x", at)))),)),
            ir.Decl("float", "s", c(0.0)),
            ir.For("j", c(0), v("N"), c(1), (
                ir.Assign("s", _add(v("s"), Call("exp", (BinOp("-", Load("x", at), v("m")),)))),)),
            ir.Decl("float", "ls", Call("log", (v("s"),))),
            ir.For("j", c(0), v("N"), c(1), (
                ir.Store("y", at, BinOp("-", BinOp("-", Load("x", at), v("m")), v("ls")) if log else
                         BinOp("/", Call("exp", (BinOp("-", Load("x", at), v("m")),)), v("s"))),)),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), *_ints("total", "N", "I"))
    return ir.Kernel(name, params, body, threads=threads,
                     meta=(("op", "LogSoftmax" if log else "Softmax"), ("tiling", "strided, one row per thread")))


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
