"""More GPU rKernels written once in the kernel IR: conv (direct, grouped so depthwise too), pooling,
row reductions, layer norm and a shared-memory tiled transpose.

Each builder states threads per block and shared memory (``Kernel.threads``,
``Kernel.shared``); a kernel's block index is its rTask index.  Every block
barrier is passed by every thread (barriers sit only in straight-line code or
in loops whose trip count is uniform over the block), which is also the shape
PoCL compiles correctly (shared/notes/gpu.md).  Layouts are NCHW, row-major.
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Load, Special, c, v

from .ir_helpers import add, and_, gid, inf, ints, lt, mul, nan_max, nan_min, neg_inf
from .kernels import tree_reduce

__all__ = ["conv2d_direct", "pool2d", "reduce_rows", "layernorm_rows", "transpose_tiled", "REDUCE_KINDS", "lrn"]

#: Row reductions ``reduce_rows`` builds.
REDUCE_KINDS = ("sum", "mean", "max", "min")


def _unflatten(index: str, dims: list[tuple[str, str]]) -> list[ir.Stmt]:
    """Declarations splitting the flat ``index`` into coordinates, innermost last: ``dims`` is
    ``[(coord, extent), ...]`` outermost first."""
    out: list[ir.Stmt] = [ir.Decl("int", "rest", v(index))]
    for coord, extent in reversed(dims[1:]):
        out.append(ir.Decl("int", coord, BinOp("%", v("rest"), v(extent))))
        out.append(ir.Assign("rest", BinOp("/", v("rest"), v(extent))))
    out.append(ir.Decl("int", dims[0][0], v("rest")))
    return out


def conv2d_direct(name: str, threads: int = 128) -> ir.Kernel:
    """ONNX Conv (NCHW, groups, strides, pads, dilations, optional bias): one thread per output
    element; depthwise is ``groups == C == OC``.  No shared memory."""
    oc, ic, kh, kw = v("oc"), v("ic"), v("kh"), v("kw")
    icg = BinOp("/", v("C"), v("G"))
    ocg = BinOp("/", v("OC"), v("G"))
    ih = add(BinOp("-", mul(v("oh"), v("SH")), v("PH")), mul(kh, v("DH")))
    iw = add(BinOp("-", mul(v("ow"), v("SW")), v("PW")), mul(kw, v("DW")))
    cin = add(mul(BinOp("/", oc, ocg), icg), ic)
    x_idx = add(mul(add(mul(add(mul(v("n"), v("C")), cin), v("H")), v("ih")), v("W")), v("iw"))
    w_idx = add(mul(add(mul(add(mul(oc, icg), ic), v("KH")), kh), v("KW")), kw)
    body = (
        ir.Decl("int", "i", gid()),
        ir.If(lt(v("i"), v("total")), (
            *_unflatten("i", [("n", "N"), ("oc", "OC"), ("oh", "OH"), ("ow", "OW")]),
            ir.Decl("float", "acc", ir.Select(BinOp("!=", v("has_bias"), c(0)), Load("bias", oc), c(0.0))),
            ir.For("ic", c(0), icg, c(1), (
                ir.For("kh", c(0), v("KH"), c(1), (
                    ir.Decl("int", "ih", ih),
                    ir.For("kw", c(0), v("KW"), c(1), (
                        ir.Decl("int", "iw", iw),
                        # A padded tap reads 0 and still multiplies its weight (as the implicit-GEMM form's
                        # zero-filled tile does): 0 * NaN or 0 * inf is NaN, as specified.
                        ir.Assign("acc", add(v("acc"), mul(
                            ir.Select(and_(BinOp(">=", v("ih"), c(0)), lt(v("ih"), v("H")),
                                           BinOp(">=", v("iw"), c(0)), lt(v("iw"), v("W"))),
                                      Load("x", x_idx), c(0.0)),
                            Load("w", w_idx)))),
                    )),
                )),
            )),
            ir.Store("y", v("i"), v("acc")),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("w", "float", True, True),
              ir.Param("bias", "float", True, True), ir.Param("y", "float", True),
              *ints("has_bias", "total", "N", "C", "H", "W", "OC", "OH", "OW", "KH", "KW",
                     "SH", "SW", "PH", "PW", "DH", "DW", "G"))
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", "Conv"), ("tiling", "direct")))


def pool2d(name: str, kind: str, threads: int = 128) -> ir.Kernel:
    """MaxPool / AveragePool (NCHW, strides, pads; ``avg``: average over the in-bounds window,
    ONNX's ``count_include_pad=0``; ``avg_pad``: over the window's positions inside the padded
    input, ``count_include_pad=1``, with the end pads ``PHE``, ``PWE`` as parameters too): one
    thread per output element.  No shared memory."""
    if kind not in ("max", "avg", "avg_pad"):
        raise ValueError(f"pool kind {kind!r} is not max, avg or avg_pad")
    ih = add(BinOp("-", mul(v("oh"), v("SH")), v("PH")), v("kh"))
    iw = add(BinOp("-", mul(v("ow"), v("SW")), v("PW")), v("kw"))
    x_idx = add(mul(add(mul(v("nc"), v("H")), v("ih")), v("W")), v("iw"))
    update = (ir.Assign("acc", nan_max(v("acc"), Load("x", x_idx))) if kind == "max"
              else ir.Assign("acc", add(v("acc"), Load("x", x_idx))))
    body = (
        ir.Decl("int", "i", gid()),
        ir.If(lt(v("i"), v("total")), (
            *_unflatten("i", [("nc", "NC"), ("oh", "OH"), ("ow", "OW")]),
            ir.Decl("float", "acc", neg_inf() if kind == "max" else c(0.0)),
            ir.Decl("int", "cnt", c(0)),
            ir.For("kh", c(0), v("KH"), c(1), (
                ir.Decl("int", "ih", ih),
                ir.For("kw", c(0), v("KW"), c(1), (
                    ir.Decl("int", "iw", iw),
                    ir.If(and_(BinOp(">=", v("ih"), c(0)), lt(v("ih"), v("H")),
                               BinOp(">=", v("iw"), c(0)), lt(v("iw"), v("W"))),
                          (update,) if kind == "avg_pad" else (update, ir.Assign("cnt", add(v("cnt"), c(1))))),
                    *((ir.If(and_(lt(v("ih"), add(v("H"), v("PHE"))), lt(v("iw"), add(v("W"), v("PWE")))),
                             (ir.Assign("cnt", add(v("cnt"), c(1))),)),) if kind == "avg_pad" else ()),
                )),
            )),
            ir.Store("y", v("i"), v("acc") if kind == "max"
                     else BinOp("/", v("acc"), ir.Cast("float", ir.Select(BinOp(">", v("cnt"), c(0)), v("cnt"),
                                                                        c(1))))),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "NC", "H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW"),
              *(ints("PHE", "PWE") if kind == "avg_pad" else ()))
    return ir.Kernel(name, params, body, threads=threads,
                     meta=(("op", "MaxPool" if kind == "max" else "AveragePool"),))


def _block_reduce(kind: str, threads: int, part: str = "part") -> tuple[ir.Stmt, ...]:
    """Tree reduction of each thread's ``part`` through shared ``red`` (:func:`.kernels.tree_reduce`)."""
    if kind == "max":
        combine = nan_max
    elif kind == "min":
        combine = nan_min
    else:
        def combine(a, b): return add(a, b)
    return tree_reduce(combine, threads, part)


def reduce_rows(name: str, kind: str, threads: int = 128) -> ir.Kernel:
    """``y[r] = reduce(x[r, :n])`` (ReduceSum/Mean/Max/Min over the last axis after the caller
    permutes the reduced axes last): one block per row; shared memory ``threads`` floats."""
    if kind not in REDUCE_KINDS:
        raise ValueError(f"reduce kind {kind!r} is not one of {REDUCE_KINDS}")
    tid = v("tid")
    base = mul(Special("block_id"), v("n"))
    init = {"sum": c(0.0), "mean": c(0.0), "max": neg_inf(), "min": inf()}[kind]
    x = Load("x", add(base, v("j")))
    step = {"max": nan_max(v("part"), x), "min": nan_min(v("part"), x)}.get(kind, add(v("part"), x))
    out = BinOp("/", v("part"), ir.Cast("float", v("n"))) if kind == "mean" else v("part")
    body = (
        ir.Decl("int", "tid", Special("thread_id")),
        ir.Decl("float", "part", init),
        ir.For("j", tid, v("n"), c(threads), (ir.Assign("part", step),)),
        *_block_reduce("sum" if kind == "mean" else kind, threads),
        ir.If(BinOp("==", tid, c(0)), (ir.Store("y", Special("block_id"), out),)),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), ir.Param("n", "int"))
    op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin"}[kind]
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("red", "float", threads),), threads=threads,
                     meta=(("op", op),))


def layernorm_rows(name: str, threads: int = 128, broadcast: bool = False) -> ir.Kernel:
    """LayerNormalization over the last axis of ``x[rows, n]`` with ``scale[n]``, ``bias[n]``:
    one block per row; mean, then variance of the centred values (two passes: one pass of sums
    and squares loses digits when the mean is large), each a block reduction (``threads``
    floats shared).  With ``broadcast``, more parameters: the scale and bias repeat with
    periods ``SP`` and ``BP`` along the row (ONNX broadcasts them from the right, e.g. a
    ``[64]`` scale over a ``[17, 64]`` normalized shape), ``has_bias`` 0 means no bias; and the
    optional Mean and InvStdDev outputs, one value per row (``mean_y``, ``inv_y`` with flags
    ``has_mean``, ``has_inv``)."""
    tid = v("tid")
    base = mul(Special("block_id"), v("n"))
    x = Load("x", add(base, v("j")))
    centred = BinOp("-", x, v("mean"))
    if broadcast:
        scale = Load("scale", BinOp("%", v("j"), v("SP")))
        bias = ir.Select(BinOp("!=", v("has_bias"), c(0)), Load("bias", BinOp("%", v("j"), v("BP"))), c(0.0))
    else:
        scale, bias = Load("scale", v("j")), Load("bias", v("j"))
    body = (
        ir.Decl("int", "tid", Special("thread_id")),
        ir.Decl("float", "part", c(0.0)),
        ir.For("j", tid, v("n"), c(threads), (ir.Assign("part", add(v("part"), x)),)),
        *_block_reduce("sum", threads),
        ir.Decl("float", "mean", BinOp("/", v("part"), ir.Cast("float", v("n")))),
        ir.Assign("part", c(0.0)),
        ir.For("j", tid, v("n"), c(threads), (ir.Assign("part", add(v("part"), mul(centred, centred))),)),
        *_block_reduce("sum", threads),
        ir.Decl("float", "inv", Call("rsqrt", (add(BinOp("/", v("part"), ir.Cast("float", v("n"))), v("eps")),))),
        ir.For("j", tid, v("n"), c(threads), (
            ir.Store("y", add(base, v("j")), add(mul(mul(centred, v("inv")), scale), bias)),)),
    )
    if broadcast:
        row = Special("block_id")
        body += (ir.If(BinOp("==", tid, c(0)), (
            ir.If(BinOp("!=", v("has_mean"), c(0)), (ir.Store("mean_y", row, v("mean")),)),
            ir.If(BinOp("!=", v("has_inv"), c(0)), (ir.Store("inv_y", row, v("inv")),)))),)
    params = (ir.Param("x", "float", True, True), ir.Param("scale", "float", True, True),
              ir.Param("bias", "float", True, True), ir.Param("y", "float", True), ir.Param("n", "int"),
              ir.Param("eps", "float"))
    if broadcast:
        params += (*ints("SP", "BP", "has_bias", "has_mean", "has_inv"), ir.Param("mean_y", "float", True),
                   ir.Param("inv_y", "float", True))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("red", "float", threads),), threads=threads,
                     meta=(("op", "LayerNormalization"),))


def transpose_tiled(name: str, tile: int = 16) -> ir.Kernel:
    """``y[C, R] = x[R, C]^T`` through a ``tile x (tile + 1)`` shared tile (the pad column avoids
    bank conflicts): one block of ``tile * tile`` threads per tile."""
    t = tile
    tx, ty = v("tx"), v("ty")
    body = (
        ir.Decl("int", "tiles_c", BinOp("/", add(v("C"), c(t - 1)), c(t))),
        ir.Decl("int", "tx", BinOp("%", Special("thread_id"), c(t))),
        ir.Decl("int", "ty", BinOp("/", Special("thread_id"), c(t))),
        ir.Decl("int", "r0", mul(BinOp("/", Special("block_id"), v("tiles_c")), c(t))),
        ir.Decl("int", "c0", mul(BinOp("%", Special("block_id"), v("tiles_c")), c(t))),
        ir.If(and_(lt(add(v("r0"), ty), v("R")), lt(add(v("c0"), tx), v("C"))),
              (ir.Store("tileb", add(mul(ty, c(t + 1)), tx),
                        Load("x", add(mul(add(v("r0"), ty), v("C")), add(v("c0"), tx)))),)),
        ir.Barrier(),
        ir.If(and_(lt(add(v("c0"), ty), v("C")), lt(add(v("r0"), tx), v("R"))),
              (ir.Store("y", add(mul(add(v("c0"), ty), v("R")), add(v("r0"), tx)),
                        Load("tileb", add(mul(tx, c(t + 1)), ty))),)),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), ir.Param("R", "int"),
              ir.Param("C", "int"))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("tileb", "float", t * (t + 1)),), threads=t * t,
                     meta=(("op", "Transpose"), ("tile", f"{t}x{t}")))


def lrn(name: str, threads: int = 128) -> ir.Kernel:
    """LRN across channels of ``x[N, C, S]``: ``y = x / (bias + alpha / size * sum sq)^beta``, the sum
    over channels ``c - before .. c + after`` inside ``[0, C)``; one output per thread."""
    c_at = BinOp("%", BinOp("/", v("i"), v("S")), v("C"))
    body = (
        ir.Decl("int", "i", gid()),
        ir.If(lt(v("i"), v("total")), (
            ir.Decl("int", "ch", c_at),
            ir.Decl("float", "acc", c(0.0)),
            ir.For("cc", BinOp("-", v("ch"), v("before")), add(v("ch"), v("after"), c(1)), c(1), (
                ir.If(BinOp("&&", BinOp(">=", v("cc"), c(0)), lt(v("cc"), v("C"))), (
                    ir.Decl("float", "xv", Load("x", add(v("i"), mul(BinOp("-", v("cc"), v("ch")), v("S"))))),
                    ir.Assign("acc", add(v("acc"), mul(v("xv"), v("xv")))),
                )),
            )),
            ir.Store("y", v("i"), BinOp("/", Load("x", v("i")),
                                         Call("pow", (add(v("bias"), mul(v("alpha_n"), v("acc"))), v("beta"))))),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "C", "S", "before", "after"), ir.Param("alpha_n", "float"), ir.Param("beta", "float"),
              ir.Param("bias", "float"))
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", "LRN"), ("tiling", "one output per thread")))
