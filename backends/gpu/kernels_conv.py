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

__all__ = ["conv2d_implicit_gemm", "conv_transpose2d_direct", "conv_tile", "conv_transpose_total",
           "conv_transpose_channels", "CONV_PARAMS", "CT_CHANNELS", "CONV_REG_TILE"]


#: The integer parameters of both conv forms, after (x, w, bias, y).
CONV_PARAMS = ("has_bias", "total", "N", "C", "H", "W", "OC", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW",
               "DH", "DW", "G")


#: The register tile of :func:`conv2d_implicit_gemm`: each thread accumulates ``RM x RP`` outputs (output
#: channels x pixels), so a block's tile is ``16 RM x 16 RP``.  Every value a thread reads from shared
#: memory feeds ``RP`` (a weight) or ``RM`` (an input) multiply-adds instead of one, and each im2col
#: index (the div/mod of the reduction index) serves ``RP`` gathers: on PoCL, where a barrier splits the
#: work-group loop, a K step also does 16x the arithmetic per barrier of a one-output thread.
CONV_REG_TILE = (2, 4)


def conv_tile(reg: tuple[int, int] = CONV_REG_TILE, threads_side: int = 16) -> tuple[int, int]:
    """``(TM, TP)``: output channels and pixels of one rTask's tile."""
    return threads_side * reg[0], threads_side * reg[1]


def conv2d_implicit_gemm(name: str, tile: int = 16, reg: tuple[int, int] = CONV_REG_TILE) -> ir.Kernel:
    """``y = conv(x, w) + bias`` (NCHW, OIHW weights, groups ``G``) with ``tile * tile`` threads per
    block, each accumulating a ``reg = (RM, RP)`` register tile: thread ``(ty, tx)`` owns output
    channels ``row0 + ty + tile i`` (``i < RM``) and pixels ``col0 + tx + tile j`` (``j < RP``), so
    neighbouring threads read neighbouring shared values.  Per K step of ``tile``, the block stages a
    ``TM x tile`` weight slice and gathers the matching ``tile x TP`` input windows (zero outside the
    padded input, so a non-finite weight still meets the padding's zero) into shared memory.  rTask
    ``r`` is tile ``r % tiles`` of image-group ``r / tiles`` (``tiles = ceil(M / TM) * ceil(P / TP)``)."""
    rm, rp = reg
    tm, tp = tile * rm, tile * rp
    t = c(tile)
    tx, ty = v("tx"), v("ty")
    # Weights: thread (ty, tx) stages rows ty + tile i, reduction index k0 + tx.
    ka = _add(v("k0"), tx)
    stage_a = tuple(
        ir.Store("As", _add(c(i * tile * tile), _mul(ty, t), tx),
                 Select(_and(_lt(v(f"r{i}"), v("M")), _lt(ka, v("K"))),
                        Load("w", _add(_mul(_add(v("ocb"), v(f"r{i}")), v("K")), ka)), c(0.0)))
        for i in range(rm))
    # Inputs: thread (ty, tx) gathers reduction index k0 + ty for pixels tx + tile j; the index split
    # (channel, kernel row, kernel column) is done once for its RP pixels.
    gather: list[ir.Stmt] = [
        ir.Decl("int", "kb", _add(v("k0"), ty)),
        ir.Decl("int", "ic", _div(v("kb"), _mul(v("KH"), v("KW")))),
        ir.Decl("int", "kh", _mod(_div(v("kb"), v("KW")), v("KH"))),
        ir.Decl("int", "kw", _mod(v("kb"), v("KW"))),
        ir.Decl("int", "dh", BinOp("-", _mul(v("kh"), v("DH")), v("PH"))),
        ir.Decl("int", "dw", BinOp("-", _mul(v("kw"), v("DW")), v("PW"))),
        ir.Decl("int", "xrow", _mul(_add(_mul(v("n"), v("C")), v("icb"), v("ic")), v("H"))),
        ir.Decl("int", "kin", _lt(v("kb"), v("K"))),
    ]
    for j in range(rp):
        ih, iw = _add(v(f"bh{j}"), v("dh")), _add(v(f"bw{j}"), v("dw"))
        gather += [
            ir.Decl("int", f"ih{j}", ih),
            ir.Decl("int", f"iw{j}", iw),
            ir.Store("Bs", _add(_mul(ty, c(tp)), tx, c(j * tile)),
                     Select(_and(BinOp("!=", v("kin"), c(0)), _lt(v(f"p{j}"), v("P")),
                                 BinOp(">=", v(f"ih{j}"), c(0)), _lt(v(f"ih{j}"), v("H")),
                                 BinOp(">=", v(f"iw{j}"), c(0)), _lt(v(f"iw{j}"), v("W"))),
                            Load("x", _add(_mul(_add(v("xrow"), v(f"ih{j}")), v("W")), v(f"iw{j}"))), c(0.0))),
        ]
    inner: list[ir.Stmt] = [ir.Decl("float", f"a{i}", Load("As", _add(c(i * tile * tile), _mul(ty, t), v("kk"))))
                            for i in range(rm)]
    inner += [ir.Decl("float", f"b{j}", Load("Bs", _add(_mul(v("kk"), c(tp)), tx, c(j * tile)))) for j in range(rp)]
    inner += [ir.Assign(f"acc{i}_{j}", _add(v(f"acc{i}_{j}"), _mul(v(f"a{i}"), v(f"b{j}"))))
              for i in range(rm) for j in range(rp)]
    store: list[ir.Stmt] = []
    for i in range(rm):
        bias = Select(BinOp("!=", v("has_bias"), c(0)), Load("bias", _add(v("ocb"), v(f"r{i}"))), c(0.0))
        row_base = _mul(_add(_mul(v("n"), v("OC")), v("ocb"), v(f"r{i}")), v("P"))
        store.append(ir.If(_lt(v(f"r{i}"), v("M")), (
            ir.Decl("float", f"bias{i}", bias),
            *(ir.If(_lt(v(f"p{j}"), v("P")), (ir.Store("y", _add(row_base, v(f"p{j}")),
                                                       _add(v(f"acc{i}_{j}"), v(f"bias{i}"))),))
              for j in range(rp)),
        )))
    body = (
        ir.Decl("int", "M", _div(v("OC"), v("G"))),
        ir.Decl("int", "P", _mul(v("OH"), v("OW"))),
        ir.Decl("int", "K", _mul(_div(v("C"), v("G")), _mul(v("KH"), v("KW")))),
        ir.Decl("int", "tiles_p", _div(_add(v("P"), c(tp - 1)), c(tp))),
        ir.Decl("int", "tiles", _mul(_div(_add(v("M"), c(tm - 1)), c(tm)), v("tiles_p"))),
        ir.Decl("int", "ng", _div(Special("block_id"), v("tiles"))),
        ir.Decl("int", "tile", _mod(Special("block_id"), v("tiles"))),
        ir.Decl("int", "n", _div(v("ng"), v("G"))),
        ir.Decl("int", "g", _mod(v("ng"), v("G"))),
        ir.Decl("int", "ocb", _mul(v("g"), v("M"))),
        ir.Decl("int", "icb", _mul(v("g"), _div(v("C"), v("G")))),
        ir.Decl("int", "tx", _mod(Special("thread_id"), t)),
        ir.Decl("int", "ty", _div(Special("thread_id"), t)),
        ir.Decl("int", "row0", _mul(_div(v("tile"), v("tiles_p")), c(tm))),
        ir.Decl("int", "col0", _mul(_mod(v("tile"), v("tiles_p")), c(tp))),
        *(ir.Decl("int", f"r{i}", _add(v("row0"), ty, c(i * tile))) for i in range(rm)),
        *(d for j in range(rp) for d in (
            ir.Decl("int", f"p{j}", _add(v("col0"), tx, c(j * tile))),
            ir.Decl("int", f"bh{j}", _mul(_div(v(f"p{j}"), v("OW")), v("SH"))),
            ir.Decl("int", f"bw{j}", _mul(_mod(v(f"p{j}"), v("OW")), v("SW"))),
        )),
        *(ir.Decl("float", f"acc{i}_{j}", c(0.0)) for i in range(rm) for j in range(rp)),
        ir.For("k0", c(0), v("K"), t, (
            *stage_a,
            ir.Block(tuple(gather)),
            ir.Barrier(),
            ir.For("kk", c(0), t, c(1), tuple(inner)),
            ir.Barrier(),
        )),
        *store,
    )
    params = (ir.Param("x", "float", True, True), ir.Param("w", "float", True, True),
              ir.Param("bias", "float", True, True), ir.Param("y", "float", True),
              *(ir.Param(p, "int") for p in CONV_PARAMS))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("As", "float", tm * tile),
                                                  ir.SharedArray("Bs", "float", tile * tp)),
                     threads=tile * tile, meta=(("op", "Conv"), ("tiling", f"implicit GEMM {tm}x{tp}, {rm}x{rp} a thread")))


#: Output channels one ConvTranspose thread accumulates (one input load feeds this many multiply-adds);
#: a group of fewer output channels (depthwise, a one-channel head) gets one a thread
#: (:func:`conv_transpose_channels`), not a block mostly past the group's end.
CT_CHANNELS = 4


def conv_transpose_channels(out_channels_per_group: int) -> int:
    """The output channels a thread of :func:`conv_transpose2d_direct` takes for groups of this size."""
    return CT_CHANNELS if out_channels_per_group >= CT_CHANNELS else 1


def conv_transpose_total(n: int, oc: int, oh: int, ow: int, sh: int, sw: int, group: int = 1,
                         chans: int = CT_CHANNELS) -> int:
    """The thread count of :func:`conv_transpose2d_direct`: per image and group, ``chans`` output
    channels a thread, the outputs enumerated by stride phase, each phase's rows and columns rounded
    up to whole ``ceil(OH / SH) x ceil(OW / SW)`` grids."""
    blocks = -(-(oc // max(group, 1)) // chans)
    return n * group * blocks * sh * sw * -(-oh // sh) * -(-ow // sw)


def conv_transpose2d_direct(name: str, threads: int = 128, chans: int = CT_CHANNELS) -> ir.Kernel:
    """ONNX ConvTranspose (NCHW, ``[C, OC/G, KH, KW]`` weights, groups, strides, begin pads,
    dilations, optional bias): a thread computes ``chans`` output channels (of one group) at one
    output position, gathering the input positions whose strided, dilated taps land on it
    (``oh = ih * SH - PH + kh * DH``).  The threads walk the outputs by stride phase (``oh = qh SH +
    rh``, ``ow = qw SW + rw``; ``total`` is :func:`conv_transpose_total`), so neighbouring threads take
    the same taps, and each tap's test is made once per output with the input channels as the inner
    loop, not once per channel and tap; each input value read feeds ``chans`` multiply-adds.
    The parameters are ``conv2d_direct``'s, with ``C`` the input channels and ``OC`` the output channels."""
    icg, ocg = _div(v("C"), v("G")), _div(v("OC"), v("G"))
    on_h = _and(BinOp(">=", v("th"), c(0)), BinOp("==", _mod(v("th"), v("SH")), c(0)), _lt(_div(v("th"), v("SH")), v("H")))
    on_w = _and(BinOp(">=", v("tw"), c(0)), BinOp("==", _mod(v("tw"), v("SW")), c(0)), _lt(_div(v("tw"), v("SW")), v("W")))
    rest = v("i")
    coords = []
    for var, extent in (("qw", "QW"), ("qh", "QH"), ("rw", "SW"), ("rh", "SH"), ("ob", "OB"), ("g", "G")):
        coords.append(ir.Decl("int", var, _mod(rest, v(extent))))
        rest = _div(rest, v(extent))
    coords.append(ir.Decl("int", "n", rest))
    hw = _mul(v("H"), v("W"))
    khw = _mul(v("KH"), v("KW"))
    # channel j of the thread: oc = g * ocg + ob * chans + j, in range when ob * chans + j < ocg; a weight
    # row past it is read at the group's last channel (in bounds) and its sum not stored.
    w_rows = [ir.Decl("int", f"wo{j}", _mul(_add(v("cin0w"), Select(_lt(_add(v("oc0"), c(j)), ocg),
                                                                    _add(v("oc0"), c(j)), BinOp("-", ocg, c(1)))),
                                            khw)) for j in range(chans)]
    macs = [ir.Assign(f"acc{j}", _add(v(f"acc{j}"), _mul(v("xv"), Load("w", _add(v("wi"), v(f"wo{j}"),
                                                                                  _mul(v("ic"), v("wstep")))))))
            for j in range(chans)]
    stores = []
    for j in range(chans):
        bias = Select(BinOp("!=", v("has_bias"), c(0)), Load("bias", _add(v("ocg0"), v("oc0"), c(j))), c(0.0))
        out = _add(_mul(_add(_mul(_add(_mul(v("n"), v("OC")), v("ocg0"), v("oc0"), c(j)), v("OH")), v("oh")), v("OW")),
                   v("ow"))
        stores.append(ir.If(_lt(_add(v("oc0"), c(j)), ocg), (ir.Store("y", out, _add(v(f"acc{j}"), bias)),)))
    body = (
        ir.Decl("int", "i", _add(_mul(Special("block_id"), Special("block_dim")), Special("thread_id"))),
        ir.Decl("int", "QH", _div(_add(v("OH"), BinOp("-", v("SH"), c(1))), v("SH"))),
        ir.Decl("int", "QW", _div(_add(v("OW"), BinOp("-", v("SW"), c(1))), v("SW"))),
        ir.Decl("int", "OB", _div(_add(ocg, c(chans - 1)), c(chans))),
        ir.If(_lt(v("i"), v("total")), (
            *coords,
            ir.Decl("int", "oh", _add(_mul(v("qh"), v("SH")), v("rh"))),
            ir.Decl("int", "ow", _add(_mul(v("qw"), v("SW")), v("rw"))),
            ir.If(_and(_lt(v("oh"), v("OH")), _lt(v("ow"), v("OW"))), (
                ir.Decl("int", "oc0", _mul(v("ob"), c(chans))),
                ir.Decl("int", "ocg0", _mul(v("g"), ocg)),
                ir.Decl("int", "cin0", _mul(v("g"), icg)),
                ir.Decl("int", "cin0w", _mul(v("cin0"), ocg)),
                ir.Decl("int", "wstep", _mul(ocg, khw)),
                *w_rows,
                *(ir.Decl("float", f"acc{j}", c(0.0)) for j in range(chans)),
                ir.For("kh", c(0), v("KH"), c(1), (
                    ir.Decl("int", "th", _add(BinOp("-", v("oh"), _mul(v("kh"), v("DH"))), v("PH"))),
                    ir.If(on_h, (
                        ir.Decl("int", "ih", _div(v("th"), v("SH"))),
                        ir.For("kw", c(0), v("KW"), c(1), (
                            ir.Decl("int", "tw", _add(BinOp("-", v("ow"), _mul(v("kw"), v("DW"))), v("PW"))),
                            ir.If(on_w, (
                                ir.Decl("int", "xi", _add(_mul(_add(_mul(_add(_mul(v("n"), v("C")), v("cin0")),
                                                                       v("H")), v("ih")), v("W")),
                                                          _div(v("tw"), v("SW")))),
                                ir.Decl("int", "wi", _add(_mul(v("kh"), v("KW")), v("kw"))),
                                ir.For("ic", c(0), icg, c(1), (
                                    ir.Decl("float", "xv", Load("x", _add(v("xi"), _mul(v("ic"), hw)))),
                                    *macs,
                                )),
                            )),
                        )),
                    )),
                )),
                *stores,
            )),
        )),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("w", "float", True, True),
              ir.Param("bias", "float", True, True), ir.Param("y", "float", True),
              *(ir.Param(p, "int") for p in CONV_PARAMS))
    return ir.Kernel(name, params, body, threads=threads,
                     meta=(("op", "ConvTranspose"), ("tiling", f"direct, {chans} channels a thread, by stride phase")))
