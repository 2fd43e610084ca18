"""Lowering of QLinearConv with symmetric int8 weights (group 1) to the NHWC form of
:func:`.kernels_quant.k_qconv_int8` (:func:`.kernels_quant_conv.qconv_nhwc`): output pixels as the
8-bit micro-kernel's rows, the input read in place from an NHWC band, the weights packed at compile
time as a [taps * channels, OC] matrix in the micro-kernel's panel layout.

That is the weights ``quantize_static`` writes (per-channel int8, zero point 0) and what onnxruntime's
symmetric int8 convolution serves; other weights (uint8, a non-zero or run-time zero point) and
grouped convs keep :mod:`.lower_quant`'s forms.
"""

from __future__ import annotations

import numpy as np

from rammer.ir import Node
from rammer.lower.views import View

from .lower_context import LowerContext
from .ops import CpuOp, EmitContext, Row, split_range
from .ukernel_int8 import FORM, MR, NR, pack_b

#: Use the NHWC form where it applies (off: every group-1 conv on the gathered-window form; the
#: ``before`` of ``ci/micro_int8.py --family conv``).
NHWC_CONV = True
#: Run unpadded 1x1 symmetric-weight convs as a plain GEMM (:func:`pointwise_conv_op`; off:
#: the NHWC or gathered form, the ``before`` of ``ci/micro_int8.py --family conv --before pointwise``).
POINTWISE_CONV = True
#: The int32 sums of one band (output pixels x NR channels) stay under this many slots (128 KiB, in L2).
BAND_SUM_SLOTS = 32768
#: A conv whose one output row needs a wider NHWC band than this (bytes) keeps the gathered form.
MAX_BAND_BYTES = 1 << 20


def nhwc_pays(taps: int, cp: int, oc: int, form: str | None = None) -> bool:
    """Whether the NHWC form beats the gathered one for this shape class (``ci/micro_int8.py --family
    conv``, both forms): it computes whole panels of NR output channels, so it needs enough of them used;
    and its gain is the gather it saves, one copy per tap, so a 1x1 conv needs a deep K to pay for the band
    copy and the per-tile set-up (16->96, 64->128 and 144->24 ran 1.2-1.4x slower, 320->1280 1.2x faster).

    How many columns must be used depends on the micro-kernel's ``form`` (the process's by default): with
    VNNI at most a quarter may be padding (a 32-channel 3x3 stem ran 1.15x slower); the ``avx2`` form's
    gathered windows cost more against its dot step, and NHWC took 0.30-0.89x the gathered form's time
    on every multi-tap conv measured with at least a quarter of the columns used (16-40 output channels,
    3x3 and 5x5 stems included), and lost only at an eighth (3->8 channels, 1.12x)."""
    used = oc / (-(-oc // NR) * NR)
    least = 0.25 if (form or FORM) == "avx2" else 0.75
    return used >= least and (taps > 1 or cp >= 256)


def _symmetric_int8(lw: LowerContext, node: Node) -> np.ndarray | None:
    """A group-1 QLinearConv's constant 4-D int8 weights whose zero point is absent or a constant 0."""
    if int(node.attr("group", 1)) != 1:
        return None
    init = lw.graph.initializers.get(node.inputs[3])
    if init is None:
        return None
    w = np.asarray(init)
    if w.ndim != 4 or w.dtype != np.int8:
        return None
    zp_name = node.inputs[5] if len(node.inputs) > 5 else ""
    if zp_name:
        zw = lw.graph.initializers.get(zp_name)
        if zw is None or np.any(np.asarray(zw) != 0):
            return None
    return w


def pointwise_weights(lw: LowerContext, node: Node, packing: bool, geo) -> tuple[View, View, int] | None:
    """For a 1x1 unpadded QLinearConv (any stride) with symmetric int8 weights (group 1): the weights as
    int8 rows of kp bytes (kp = channels rounded up to 4, zeros past them) for
    :func:`.kernels_quant_conv.qconv_pointwise`, their int32 row sums and kp; None where the form does
    not apply."""
    if not (POINTWISE_CONV and packing):
        return None
    if any(geo.pad_begin) or any(geo.pad_end):
        return None
    w = _symmetric_int8(lw, node)
    if w is None or w.shape[2:] != (1, 1):
        return None
    cache = lw.__dict__.setdefault("_packed_int8_weights", {})
    key = (node.inputs[3], "conv pointwise")
    found = cache.get(key)
    if found is None:
        oc, c = w.shape[:2]
        kp = -(-c // 4) * 4
        rows = np.zeros((oc, kp), np.int8)
        rows[:, :c] = w.reshape(oc, c)
        sums = w.reshape(oc, c).sum(axis=1, dtype=np.int64).astype(np.int32)
        found = cache[key] = (lw.const_view(rows.view(np.uint8)), lw.const_view(sums), kp)
    return found


def no_min_weight(lw: LowerContext, node: Node) -> bool:
    """Whether the QLinearConv's constant int8 weights hold no -128: the ``avx2`` micro-kernel's callers
    then skip their run-time check of the packed weights (one pass over all of them per task)."""
    return not bool(np.any(np.asarray(lw.graph.initializers[node.inputs[3]]) == -128))


def pointwise_conv_op(lw: LowerContext, node: Node, x: View, weight: tuple[View, View, int], out: View,
                      views: dict[int, View], dims: tuple[int, ...], geo) -> None:
    """Add the op of :func:`.kernels_quant_conv.qconv_pointwise`: tasks over image x NR-pixel panels."""
    rows, sums, kp = weight
    no_min = no_min_weight(lw, node)
    N, C, H, W, OC, OH, OW = dims
    plane = OH * OW
    panels = N * -(-plane // NR)
    min_panels = max(1, 2**18 // max(NR * kp * OC, 1))

    def partition(n: int) -> list:
        n = max(1, min(n, panels // min_panels or 1))
        return [split_range(panels, n, i) for i in range(n)]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(views[slot]) if slot in views else -1

        desc = ctx.side.add_ints([
            -2, ctx.locate(x), ctx.locate(rows), ctx.locate(out), C, plane, OC, int(x.dtype == "int8"),
            int(out.dtype == "int8"), at(2), at(1), at(4), int(views[4].size > 1), at(6), at(7), at(8),
            ctx.locate(sums), kp, H, W, OW, geo.strides[0], geo.strides[1], int(no_min)])
        return [("k_qconv_int8", [desc, t0, t1]) for t0, t1 in parts]

    reads = {x.buffer, rows.buffer, sums.buffer} | {v.buffer for v in views.values()}
    lw.add_op(CpuOp(node.name or "QLinearConv", "conv.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * N * OC * plane * C, float(x.size + rows.size + out.size), partition, emit,
                    scratch=(kp * NR + MR * NR) // 4 + 2 * OC + 3, blas=True))


def symmetric_weights(lw: LowerContext, node: Node, packing: bool) -> tuple[View, View, int] | None:
    """A group-1 QLinearConv's constant int8 weights whose zero point is absent or a constant 0, packed
    for :func:`.kernels_quant_conv.qconv_nhwc` (row ``(i * KW + j) * cp + c`` of a [KH * KW * cp, OC]
    matrix, cp = channels rounded up to 4, then :func:`.ukernel_int8.pack_b`), their int32 sums per
    output channel and cp; None where the form does not apply."""
    if not (NHWC_CONV and packing):
        return None
    w = _symmetric_int8(lw, node)
    if w is None:
        return None
    if not nhwc_pays(w.shape[2] * w.shape[3], -(-w.shape[1] // 4) * 4, w.shape[0]):
        return None
    cache = lw.__dict__.setdefault("_packed_int8_weights", {})
    key = (node.inputs[3], "conv nhwc")
    found = cache.get(key)
    if found is None:
        oc, c, kh, kw = w.shape
        cp = -(-c // 4) * 4
        taps = np.zeros((kh, kw, cp, oc), np.int8)
        taps[:, :, :c, :] = w.transpose(2, 3, 1, 0)
        packed = pack_b(taps.reshape(kh * kw * cp, oc)).view(np.uint8)
        sums = w.reshape(oc, -1).sum(axis=1, dtype=np.int64).astype(np.int32)
        found = cache[key] = (lw.const_view(packed), lw.const_view(sums), cp)
    return found


def band_plan(dims: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
              pad_left: int, cp: int) -> tuple[int, int, int, int] | None:
    """(output rows per band, padded width, band int32 slots, sum slots) for a conv of ``dims`` =
    (H, W, OH, OW, KH, KW), or None when one output row's band is too wide."""
    H, W, OH, OW, KH, KW = dims
    sh, sw = strides
    dh, dw = dilations
    wp = (OW - 1) * sw + (KW - 1) * dw + 1  # band column col is input column col - pad_left
    band_rows = max(1, min(OH, BAND_SUM_SLOTS // max(OW * NR, 1)))
    rows_in = (band_rows - 1) * sh + (KH - 1) * dh + 1
    if ((KH - 1) * dh + 1) * wp * cp > MAX_BAND_BYTES:
        return None
    band_slots = -(-rows_in * wp * cp // 4)
    sum_slots = -(-band_rows * OW // MR) * MR * NR
    return band_rows, wp, band_slots, sum_slots


def nhwc_conv_op(lw: LowerContext, node: Node, x: View, weight: tuple[View, View, int], out: View,
                 views: dict[int, View], dims: tuple[int, ...], geo) -> bool:
    """Add the op of the NHWC form; False (nothing added) when its band would not fit."""
    packed, sums, cp = weight
    no_min = no_min_weight(lw, node)
    N, C, H, W, OC, OH, OW, KH, KW = dims
    plan = band_plan((H, W, OH, OW, KH, KW), tuple(geo.strides), tuple(geo.dilations), geo.pad_begin[1], cp)
    if plan is None:
        return False
    band_rows, wp, band_slots, sum_slots = plan
    taps_k = KH * KW * cp
    min_rows = max(1, 2**18 // max(OW * -(-OC // NR) * NR * taps_k, 1))

    def partition(n: int) -> list:
        n = max(1, min(n, (N * OH) // min_rows or 1))
        return [split_range(N * OH, n, i) for i in range(n)]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        def at(slot: int) -> int:
            return ctx.locate(views[slot]) if slot in views else -1

        desc = ctx.side.add_ints([
            -1, ctx.locate(x), ctx.locate(packed), ctx.locate(out), C, H, W, OC, OH, OW, cp, KH, KW,
            geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.pad_begin[0], geo.pad_begin[1],
            int(x.dtype == "int8"), int(out.dtype == "int8"), at(2), at(1), at(4), int(views[4].size > 1), at(6),
            at(7), at(8), ctx.locate(sums), band_rows, wp, band_slots, sum_slots, int(no_min)])
        return [("k_qconv_int8", [desc, t0, t1]) for t0, t1 in parts]

    reads = {x.buffer, packed.buffer, sums.buffer} | {v.buffer for v in views.values()}
    lw.add_op(CpuOp(node.name or "QLinearConv", "conv.int8", (node,), tuple(sorted(reads)), (out.buffer,),
                    2.0 * N * OC * OH * OW * KH * KW * C, float(x.size + packed.size + out.size), partition, emit,
                    scratch=band_slots + sum_slots + 2 * NR + sum_slots // 4, blas=True))
    return True
