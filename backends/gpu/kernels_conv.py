"""Conv as an implicit GEMM, written once in the kernel IR.

Per image ``n`` and group ``g`` a 2-d conv is ``Y[oc, p] = sum_k W[oc, k] X'[k, p]`` with
``M = OC / G`` output channels, ``P = OH * OW`` pixels and ``K = (C / G) * KH * KW``; ``X'`` (the
im2col matrix) is never stored: each block stages a ``tile x K-slice`` of weights and gathers the
matching ``K-slice x tile`` of input windows (zero outside the padded input) into shared memory, as
the tiled MatMul does.  One rTask is one output tile of one image and group.  The parameters are
``conv2d_direct``'s, so both forms are candidates for the same node and the scheduler picks.
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Load, Select, Special, c, v

from .ir_helpers import add as _add
from .ir_helpers import and_ as _and
from .ir_helpers import div as _div
from .ir_helpers import lt as _lt
from .ir_helpers import mod as _mod
from .ir_helpers import mul as _mul

__all__ = ["conv2d_implicit_gemm", "conv_transpose2d_direct", "CONV_PARAMS"]


#: The integer parameters of both conv forms, after (x, w, bias, y).
CONV_PARAMS = ("has_bias", "total", "N", "C", "H", "W", "OC", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW",
               "DH", "DW", "G")


def conv2d_implicit_gemm(name: str, tile: int = 16) -> ir.Kernel:
    """``y = conv(x, w) + bias`` (NCHW, OIHW weights, groups ``G``) with ``tile * tile`` threads per
    block and two ``tile x tile`` shared tiles; rTask ``r`` is tile ``r % tiles`` of image-group
    ``r / tiles`` (``tiles = ceil(M / tile) * ceil(P / tile)``)."""
    t = c(tile)
    tx, ty = v("tx"), v("ty")
    sh = _add(_mul(ty, t), tx)
    # A tile: weights of output channel (row) and reduction index k0 + tx.
    ka = _add(v("k0"), tx)
    in_a = _and(_lt(v("row"), v("M")), _lt(ka, v("K")))
    a_idx = _add(_mul(_add(v("ocb"), v("row")), v("K")), ka)
    # B tile: input value at reduction index k0 + ty for pixel col.
    kb = _add(v("k0"), ty)
    gather = (
        ir.Decl("int", "kb", kb),
        ir.Decl("int", "ic", _div(v("kb"), _mul(v("KH"), v("KW")))),
        ir.Decl("int", "kh", _mod(_div(v("kb"), v("KW")), v("KH"))),
        ir.Decl("int", "kw", _mod(v("kb"), v("KW"))),
        ir.Decl("int", "ih", _add(BinOp("-", _mul(v("oh"), v("SH")), v("PH")), _mul(v("kh"), v("DH")))),
        ir.Decl("int", "iw", _add(BinOp("-", _mul(v("ow"), v("SW")), v("PW")), _mul(v("kw"), v("DW")))),
        ir.Decl("int", "inside", Select(_and(_lt(v("kb"), v("K")), _lt(v("col"), v("P")), BinOp(">=", v("ih"), c(0)),
                                             _lt(v("ih"), v("H")), BinOp(">=", v("iw"), c(0)), _lt(v("iw"), v("W"))),
                                        c(1), c(0))),
        ir.Store("Bs", sh, Select(BinOp("!=", v("inside"), c(0)),
                                  Load("x", _add(_mul(_add(_mul(_add(_mul(v("n"), v("C")), v("icb"), v("ic")), v("H")),
                                                           v("ih")), v("W")), v("iw"))), c(0.0))),
    )
    inner = ir.For("kk", c(0), t, c(1), (
        ir.Assign("acc", _add(v("acc"), _mul(Load("As", _add(_mul(ty, t), v("kk"))),
                                             Load("Bs", _add(_mul(v("kk"), t), tx))))),))
    out_idx = _add(_mul(_add(_mul(v("n"), v("OC")), v("ocb"), v("row")), v("P")), v("col"))
    bias = Select(BinOp("!=", v("has_bias"), c(0)), Load("bias", _add(v("ocb"), v("row"))), c(0.0))
    body = (
        ir.Decl("int", "M", _div(v("OC"), v("G"))),
        ir.Decl("int", "P", _mul(v("OH"), v("OW"))),
        ir.Decl("int", "K", _mul(_div(v("C"), v("G")), _mul(v("KH"), v("KW")))),
        ir.Decl("int", "tiles_p", _div(_add(v("P"), c(tile - 1)), t)),
        ir.Decl("int", "tiles", _mul(_div(_add(v("M"), c(tile - 1)), t), v("tiles_p"))),
        ir.Decl("int", "ng", _div(Special("block_id"), v("tiles"))),
        ir.Decl("int", "tile", _mod(Special("block_id"), v("tiles"))),
        ir.Decl("int", "n", _div(v("ng"), v("G"))),
        ir.Decl("int", "g", _mod(v("ng"), v("G"))),
        ir.Decl("int", "ocb", _mul(v("g"), v("M"))),
        ir.Decl("int", "icb", _mul(v("g"), _div(v("C"), v("G")))),
        ir.Decl("int", "tx", _mod(Special("thread_id"), t)),
        ir.Decl("int", "ty", _div(Special("thread_id"), t)),
        ir.Decl("int", "row", _add(_mul(_div(v("tile"), v("tiles_p")), t), ty)),
        ir.Decl("int", "col", _add(_mul(_mod(v("tile"), v("tiles_p")), t), tx)),
        ir.Decl("int", "oh", _div(v("col"), v("OW"))),
        ir.Decl("int", "ow", _mod(v("col"), v("OW"))),
        ir.Decl("float", "acc", c(0.0)),
        ir.For("k0", c(0), v("K"), t, (
            ir.Store("As", sh, Select(in_a, Load("w", a_idx), c(0.0))),
            ir.Block(gather),
            ir.Barrier(),
            inner,
            ir.Barrier(),
        )),
        ir.If(_and(_lt(v("row"), v("M")), _lt(v("col"), v("P"))), (ir.Store("y", out_idx, _add(v("acc"), bias)),)),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("w", "float", True, True),
              ir.Param("bias", "float", True, True), ir.Param("y", "float", True),
              *(ir.Param(p, "int") for p in CONV_PARAMS))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("As", "float", tile * tile),
                                                  ir.SharedArray("Bs", "float", tile * tile)),
                     threads=tile * tile, meta=(("op", "Conv"), ("tiling", f"implicit GEMM {tile}x{tile}")))


def conv_transpose2d_direct(name: str, threads: int = 128) -> ir.Kernel:
    """ONNX ConvTranspose (NCHW, ``[C, OC/G, KH, KW]`` weights, groups, strides, begin pads,
    dilations, optional bias): one thread per output element gathers the input positions whose
    strided, dilated taps land on it (``oh = ih * SH - PH + kh * DH``); the parameters are
    ``conv2d_direct``'s, with ``C`` the input channels and ``OC`` the output channels."""
    icg, ocg = _div(v("C"), v("G")), _div(v("OC"), v("G"))
    th = _add(BinOp("-", v("oh"), _mul(v("kh"), v("DH"))), v("PH"))
    tw = _add(BinOp("-", v("ow"), _mul(v("kw"), v("DW"))), v("PW"))
    cin = _add(_mul(_div(v("oc"), ocg), icg), v("ic"))
    x_idx = _add(_mul(_add(_mul(_add(_mul(v("n"), v("C")), cin), v("H")), v("ih")), v("W")), v("iw"))
    w_idx = _add(_mul(_add(_mul(_add(_mul(cin, ocg), _mod(v("oc"), ocg)), v("KH")), v("kh")), v("KW")), v("kw"))
    on_h = _and(BinOp(">=", v("th"), c(0)), BinOp("==", _mod(v("th"), v("SH")), c(0)), _lt(_div(v("th"), v("SH")), v("H")))
    on_w = _and(BinOp(">=", v("tw"), c(0)), BinOp("==", _mod(v("tw"), v("SW")), c(0)), _lt(_div(v("tw"), v("SW")), v("W")))
    rest = v("i")
    coords = []
    for var, extent in (("ow", "OW"), ("oh", "OH"), ("oc", "OC")):
        coords.append(ir.Decl("int", var, _mod(rest, v(extent))))
        rest = _div(rest, v(extent))
    coords.append(ir.Decl("int", "n", rest))
    body = (
        ir.Decl("int", "i", _add(_mul(Special("block_id"), Special("block_dim")), Special("thread_id"))),
        ir.If(_lt(v("i"), v("total")), (
            *coords,
            ir.Decl("float", "acc", Select(BinOp("!=", v("has_bias"), c(0)), Load("bias", v("oc")), c(0.0))),
            ir.For("ic", c(0), icg, c(1), (
                ir.For("kh", c(0), v("KH"), c(1), (
                    ir.Decl("int", "th", th),
                    ir.If(on_h, (
                        ir.Decl("int", "ih", _div(v("th"), v("SH"))),
                        ir.For("kw", c(0), v("KW"), c(1), (
                            ir.Decl("int", "tw", tw),
                            ir.If(on_w, (
                                ir.Decl("int", "iw", _div(v("tw"), v("SW"))),
                                ir.Assign("acc", _add(v("acc"), _mul(Load("x", x_idx), Load("w", w_idx)))),
                            )),
                        )),
                    )),
                )),
            )),
            ir.Store("y", v("i"), v("acc")),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("w", "float", True, True),
              ir.Param("bias", "float", True, True), ir.Param("y", "float", True),
              *(ir.Param(p, "int") for p in CONV_PARAMS))
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", "ConvTranspose"), ("tiling", "direct")))
