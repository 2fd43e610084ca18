"""GPU rKernels for linear quantization, written once in the kernel IR: QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, and the QOperator ops QLinearConv and
QLinearMatMul.

Quantized tensors (uint8, int8, int32...) live in the float arena as exact float32 values, like every
integer tensor (:mod:`.lower_ints`), so these kernels compute on floats where that is exact (a
zero point subtracted from a uint8 value) and in a 64-bit integer where a sum could leave float32's
exact range (MatMulInteger's dot products).  Rounding is half to even, as ``np.rint``.
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Load, Select, Special, c, v

from .ir_helpers import add, gid, inf, ints, lt, mul, neg_inf
from .kernels import tree_reduce
from .kernels_model import MAX_RANK, _chunk_loop, _coords

__all__ = ["quantize_nd", "dequantize_nd", "dynamic_quantize", "matmul_integer", "qlinear_conv",
           "qlinear_matmul"]


def _rint(dst: str, x: ir.Expr) -> tuple[ir.Stmt, ...]:
    """``dst = rint(x)``, ties to even, from ``floor`` (no dialect-neutral ``rint`` in the IR).
    Exact below 2**23, the range where a value can still round to anything a quantized type holds."""
    t, frac = f"{dst}_t", f"{dst}_h"
    return (
        ir.Decl("float", frac, x),
        ir.Decl("float", dst, Call("floor", (BinOp("+", v(frac), c(0.5)),))),
        ir.Decl("float", t, BinOp("-", v(dst), v(frac))),
        # a tie (x = k + 0.5) rounded up to an odd number goes back down to the even one
        ir.If(BinOp("&&", BinOp("==", v(t), c(0.5)),
                    BinOp("!=", BinOp("-", v(dst), mul(c(2.0), Call("floor", (mul(v(dst), c(0.5)),)))), c(0.0))),
              (ir.Assign(dst, BinOp("-", v(dst), c(1.0))),)),
    )


def _clamp(x: ir.Expr) -> ir.Expr:
    return Call("fmin", (Call("fmax", (x, v("lo"))), v("hi")))


def _param_index(prefix: str) -> ir.Expr:
    return add(*(mul(v(f"k{d}"), v(f"{prefix}{d}")) for d in range(MAX_RANK)))


def quantize_nd(name: str, threads: int = 256) -> ir.Kernel:
    """QuantizeLinear: ``y = clamp(rint(x / scale) + zp, lo, hi)``; ``scale`` and ``zp`` read through
    their broadcast strides ``S0..S5`` (per tensor: zeros; per axis: the axis's), ``has_zp`` 0 or 1."""
    body = (*_coords("k", MAX_RANK),
            ir.Decl("int", "p", _param_index("S")),
            *_rint("q", BinOp("/", Load("x", v("i")), Load("scale", v("p")))),
            ir.If(BinOp("!=", v("has_zp"), c(0)), (ir.Assign("q", BinOp("+", v("q"), Load("zp", v("p")))),)),
            ir.Store("y", v("i"), _clamp(v("q"))))
    params = (ir.Param("x", "float", True, True), ir.Param("scale", "float", True, True),
              ir.Param("zp", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "chunk", *(f"D{d}" for d in range(1, MAX_RANK)), *(f"S{d}" for d in range(MAX_RANK)),
                    "has_zp"), ir.Param("lo", "float"), ir.Param("hi", "float"))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "QuantizeLinear"), ("tiling", "chunked, broadcast scale")))


def dequantize_nd(name: str, threads: int = 256) -> ir.Kernel:
    """DequantizeLinear: ``y = (x - zp) * scale`` (the difference of two exact integers is exact)."""
    shifted = Select(BinOp("!=", v("has_zp"), c(0)), BinOp("-", Load("x", v("i")), Load("zp", v("p"))),
                     Load("x", v("i")))
    body = (*_coords("k", MAX_RANK),
            ir.Decl("int", "p", _param_index("S")),
            ir.Store("y", v("i"), mul(shifted, Load("scale", v("p")))))
    params = (ir.Param("x", "float", True, True), ir.Param("scale", "float", True, True),
              ir.Param("zp", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "chunk", *(f"D{d}" for d in range(1, MAX_RANK)), *(f"S{d}" for d in range(MAX_RANK)),
                    "has_zp"))
    return ir.Kernel(name, params, _chunk_loop(threads, body), threads=threads,
                     meta=(("op", "DequantizeLinear"), ("tiling", "chunked, broadcast scale")))


def dynamic_quantize(name: str, threads: int = 256) -> ir.Kernel:
    """DynamicQuantizeLinear of ``x[n]`` in one block: the range (always holding 0) reduced through
    shared memory, ``scale = (hi - lo) / 255`` (1 for an all-zero input, as onnxruntime),
    ``zp = clamp(rint(-lo / scale), 0, 255)``, then ``y = clamp(rint(x / scale) + zp, 0, 255)``.
    One rTask: the whole tensor's range decides every element."""
    tid = v("tid")
    body: list[ir.Stmt] = [
        ir.Decl("int", "tid", Special("thread_id")),
        ir.Decl("float", "part", inf()),
        ir.For("j", tid, v("n"), c(threads), (ir.Assign("part", Call("fmin", (v("part"), Load("x", v("j"))))),)),
        *tree_reduce(lambda a, b: Call("fmin", (a, b)), threads),
        ir.Decl("float", "lo", Call("fmin", (v("part"), c(0.0)))),
        ir.Assign("part", neg_inf()),
        ir.For("j", tid, v("n"), c(threads), (ir.Assign("part", Call("fmax", (v("part"), Load("x", v("j"))))),)),
        *tree_reduce(lambda a, b: Call("fmax", (a, b)), threads),
        ir.Decl("float", "hi", Call("fmax", (v("part"), c(0.0)))),
        ir.Decl("float", "scale", Select(BinOp(">", v("hi"), v("lo")),
                                          BinOp("/", BinOp("-", v("hi"), v("lo")), c(255.0)),
                                         c(1.0))),
        *_rint("z", BinOp("-", c(0.0), BinOp("/", v("lo"), v("scale")))),
        ir.Assign("z", Call("fmin", (Call("fmax", (v("z"), c(0.0))), c(255.0)))),
        ir.For("j", tid, v("n"), c(threads), (
            *_rint("q", BinOp("/", Load("x", v("j")), v("scale"))),
            ir.Store("y", v("j"), Call("fmin", (Call("fmax", (BinOp("+", v("q"), v("z")), c(0.0))), c(255.0)))),
        )),
        ir.If(BinOp("==", tid, c(0)), (ir.Store("y_scale", c(0), v("scale")), ir.Store("y_zp", c(0), v("z")))),
    ]
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), ir.Param("y_scale", "float", True),
              ir.Param("y_zp", "float", True), ir.Param("n", "int"))
    return ir.Kernel(name, params, tuple(body), shared=(ir.SharedArray("red", "float", threads),), threads=threads,
                     meta=(("op", "DynamicQuantizeLinear"), ("tiling", "one block")))


def matmul_integer(name: str, threads: int = 128) -> ir.Kernel:
    """MatMulInteger: ``y[b, m, n] = sum_k (a[b, m, k] - azp[m]) * (b[b, k, n] - bzp[n])`` in a 64-bit
    integer, one output per thread; ``SAB``/``SBB`` are the operands' batch strides (0: broadcast),
    ``AZS``/``BZS`` the zero points' strides (0: per tensor, 1: per row / per column), ``has_azp``
    and ``has_bzp`` 0 or 1.  The int32 result is stored as its float32 value: exact up to 2**24, and
    beyond that the rounding a Cast to float (what follows MatMulInteger in a dynamically quantized
    model) gives anyway."""
    t = gid()
    a_at = add(mul(v("bi"), v("SAB")), mul(v("m"), v("K")), v("kk"))
    b_at = add(mul(v("bi"), v("SBB")), mul(v("kk"), v("N")), v("nn"))
    body = (
        ir.Decl("int", "i", t),
        ir.If(lt(v("i"), v("total")), (
            ir.Decl("int", "nn", BinOp("%", v("i"), v("N"))),
            ir.Decl("int", "m", BinOp("%", BinOp("/", v("i"), v("N")), v("M"))),
            ir.Decl("int", "bi", BinOp("/", v("i"), mul(v("M"), v("N")))),
            ir.Decl("long", "za", ir.Cast("long", Select(BinOp("!=", v("has_azp"), c(0)),
                                                          Load("azp", mul(v("m"), v("AZS"))), c(0.0)))),
            ir.Decl("long", "zb", ir.Cast("long", Select(BinOp("!=", v("has_bzp"), c(0)),
                                                          Load("bzp", mul(v("nn"), v("BZS"))), c(0.0)))),
            ir.Decl("long", "acc", c(0)),
            ir.For("kk", c(0), v("K"), c(1), (
                ir.Assign("acc", add(v("acc"), mul(BinOp("-", ir.Cast("long", Load("a", a_at)), v("za")),
                                                   BinOp("-", ir.Cast("long", Load("b", b_at)), v("zb"))))),)),
            ir.Store("y", v("i"), ir.Cast("float", ir.Cast("int", v("acc")))),
        )),
    )
    params = (ir.Param("a", "float", True, True), ir.Param("b", "float", True, True),
              ir.Param("azp", "float", True, True), ir.Param("bzp", "float", True, True), ir.Param("y", "float", True),
              *ints("total", "M", "N", "K", "SAB", "SBB", "AZS", "BZS", "has_azp", "has_bzp"))
    return ir.Kernel(name, params, body, threads=threads,
                     meta=(("op", "MatMulInteger"), ("tiling", "one output per thread")))


def _requantize_store(dst: str, at: ir.Expr) -> tuple[ir.Stmt, ...]:
    """``dst[at] = clamp(rint(float(acc) * mult) + yzp, lo, hi)``: ``acc`` a 64-bit integer, ``mult``
    the float32 multiplier ``x_scale * w_scale / y_scale`` computed on the host as the reference
    computes it (one float32 product here, then ties to even, as ``np.rint``)."""
    return (
        *_rint("q", mul(ir.Cast("float", v("acc")), v("mult"))),
        ir.Store(dst, at, _clamp(BinOp("+", v("q"), v("yzp")))),
    )


#: Integer parameters of :func:`qlinear_conv` after (x, w, y), then the float ones.
QLINEAR_CONV_INTS = ("C", "H", "W", "OC", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "G",
                     "n", "oc", "p0", "count", "bias", "xzp", "wzp")
QLINEAR_CONV_FLOATS = ("mult", "yzp", "lo", "hi")


def qlinear_conv(name: str, threads: int = 128) -> ir.Kernel:
    """QLinearConv (NCHW, OIHW 8-bit weights, groups, strides, pads, dilations): one rTask is
    ``count`` output pixels from ``p0`` of output channel ``oc`` of image ``n``, one per thread.
    ``acc = bias + sum (x - xzp) * (w - wzp)`` over the taps inside the input (a padded tap is a zero
    of ``x - xzp``) in a 64-bit integer; then requantized (:func:`_requantize_store`).  The channel's
    bias, weight zero point and multiplier are arguments of the rTask, so per-channel and per-tensor
    weights are one kernel and an int32 bias is exact (the arena holds integers only up to 2**24)."""
    icg = BinOp("/", v("C"), v("G"))
    ocg = BinOp("/", v("OC"), v("G"))
    ih = add(BinOp("-", mul(v("oh"), v("SH")), v("PH")), mul(v("kh"), v("DH")))
    iw = add(BinOp("-", mul(v("ow"), v("SW")), v("PW")), mul(v("kw"), v("DW")))
    cin = add(mul(BinOp("/", v("oc"), ocg), icg), v("ic"))
    x_idx = add(mul(add(mul(add(mul(v("n"), v("C")), cin), v("H")), v("ih")), v("W")), v("iw"))
    w_idx = add(mul(add(mul(add(mul(v("oc"), icg), v("ic")), v("KH")), v("kh")), v("KW")), v("kw"))
    inside = BinOp("&&", BinOp("&&", BinOp(">=", v("ih"), c(0)), lt(v("ih"), v("H"))),
                   BinOp("&&", BinOp(">=", v("iw"), c(0)), lt(v("iw"), v("W"))))
    tap = mul(BinOp("-", ir.Cast("long", Load("x", x_idx)), ir.Cast("long", v("xzp"))),
              BinOp("-", ir.Cast("long", Load("w", w_idx)), ir.Cast("long", v("wzp"))))
    body = (
        ir.Decl("int", "t", Special("thread_id")),
        ir.If(lt(v("t"), v("count")), (
            ir.Decl("int", "p", add(v("p0"), v("t"))),
            ir.Decl("int", "oh", BinOp("/", v("p"), v("OW"))),
            ir.Decl("int", "ow", BinOp("%", v("p"), v("OW"))),
            ir.Decl("long", "acc", ir.Cast("long", v("bias"))),
            ir.For("ic", c(0), icg, c(1), (
                ir.For("kh", c(0), v("KH"), c(1), (
                    ir.Decl("int", "ih", ih),
                    ir.For("kw", c(0), v("KW"), c(1), (
                        ir.Decl("int", "iw", iw),
                        ir.If(inside, (ir.Assign("acc", add(v("acc"), tap)),)),
                    )),
                )),
            )),
            *_requantize_store("y", add(mul(add(mul(v("n"), v("OC")), v("oc")), mul(v("OH"), v("OW"))), v("p"))),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("w", "float", True, True), ir.Param("y", "float", True),
              *ints(*QLINEAR_CONV_INTS), *(ir.Param(f, "float") for f in QLINEAR_CONV_FLOATS))
    return ir.Kernel(name, params, body, threads=threads,
                     meta=(("op", "QLinearConv"), ("tiling", "pixels of one output channel, direct")))


#: Integer parameters of :func:`qlinear_matmul` after (a, b, y), then the float ones.
QLINEAR_MATMUL_INTS = ("M", "N", "K", "SAB", "SBB", "bi", "m0", "n0", "cols", "count", "azp", "bzp")
QLINEAR_MATMUL_FLOATS = ("mult", "yzp", "lo", "hi")


def qlinear_matmul(name: str, threads: int = 128) -> ir.Kernel:
    """QLinearMatMul: one rTask is ``count`` outputs of batch ``bi`` in the block of columns
    ``[n0, n0 + cols)`` from row ``m0`` (row-major within the block), one per thread;
    ``acc = sum_k (a - azp) * (b - bzp)`` in a 64-bit integer, then requantized.  A per-column
    scale or zero point of B makes the block one column (``cols == 1``) so the rTask's multiplier
    and zero point are arguments; a per-tensor B takes whole rows."""
    a_at = add(mul(v("bi"), v("SAB")), mul(v("m"), v("K")), v("kk"))
    b_at = add(mul(v("bi"), v("SBB")), mul(v("kk"), v("N")), v("nn"))
    body = (
        ir.Decl("int", "t", Special("thread_id")),
        ir.If(lt(v("t"), v("count")), (
            ir.Decl("int", "m", add(v("m0"), BinOp("/", v("t"), v("cols")))),
            ir.Decl("int", "nn", add(v("n0"), BinOp("%", v("t"), v("cols")))),
            ir.Decl("long", "acc", c(0)),
            ir.For("kk", c(0), v("K"), c(1), (
                ir.Assign("acc", add(v("acc"), mul(
                    BinOp("-", ir.Cast("long", Load("a", a_at)), ir.Cast("long", v("azp"))),
                    BinOp("-", ir.Cast("long", Load("b", b_at)), ir.Cast("long", v("bzp")))))),)),
            *_requantize_store("y", add(mul(add(mul(v("bi"), v("M")), v("m")), v("N")), v("nn"))),
        )),
    )
    params = (ir.Param("a", "float", True, True), ir.Param("b", "float", True, True), ir.Param("y", "float", True),
              *ints(*QLINEAR_MATMUL_INTS), *(ir.Param(f, "float") for f in QLINEAR_MATMUL_FLOATS))
    return ir.Kernel(name, params, body, threads=threads,
                     meta=(("op", "QLinearMatMul"), ("tiling", "a block of outputs sharing one multiplier")))
