"""The GPU lowerings of contractions (MatMul, Gemm), convolutions, pooling, Softmax and LRN."""

from __future__ import annotations

import math
from itertools import repeat

import numpy as np

from rammer.ir import Graph, Node

from . import kernels as gk
from . import kernels_conv as kc
from . import kernels_model as km
from . import kernels_nn as kn
from . import kernels_reduce as kr
from .lower_types import (
    BLOCK_THREADS,
    CONV_IMPLICIT_GEMM,
    Lowered,
    Ref,
    broadcast_strides,
    chunks,
    row_major_strides,
    shape_of,
    template,
)

__all__ = ["lower_gemm", "lower_conv", "lower_conv_transpose", "lower_pool", "lower_global_pool", "lower_softmax",
           "lower_lrn"]


def lower_gemm(node: Node, graph: Graph) -> Lowered:
    a, b = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
    has_c, c_strides, alpha, beta = 0, (0, 0), 1.0, 1.0
    if node.op_type == "Gemm":
        ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
        m, k = (a[1], a[0]) if ta else a
        n = b[0] if tb else b[1]
        sam, sak = (1, m) if ta else (k, 1)
        sbk, sbn = (1, k) if tb else (n, 1)
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        sab = sbb = 0
        nb = 1
        if len(node.inputs) > 2 and node.inputs[2]:
            cs = shape_of(graph, node.inputs[2])
            st = broadcast_strides(cs, (m, n))
            has_c, c_strides = 1, (st[-2], st[-1])
    else:
        if len(a) < 1 or len(b) < 1:
            raise ValueError("MatMul of a scalar")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        m, k, n = a2[-2], a2[-1], b2[-1]
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        nb = int(np.prod(batch)) if batch else 1

        def batch_stride(bs: tuple[int, ...], size: int) -> int | None:
            if int(np.prod(bs)) == 1 if bs else True:
                return 0
            if (1,) * (len(batch) - len(bs)) + bs == batch:
                return size
            return None  # broadcast along some batch axes only: one call group per batch (below)

        sab, sbb = batch_stride(a2[:-2], m * k), batch_stride(b2[:-2], k * n)
        sam, sak, sbk, sbn = k, 1, n, 1
        if sab is None or sbb is None:
            return _gemm_per_batch(a2, b2, batch, m, n, k)
    t = 16
    tiles = math.ceil(m / t) * math.ceil(n / t) if m and n else 0
    cref = Ref("in", 2) if has_c else Ref("in", 0)
    args = (Ref("in", 0), Ref("in", 1), cref, Ref("out", 0), m, n, k, sab, sam, sak, sbb, sbk, sbn,
            *c_strides, has_c, alpha, beta)
    calls = tuple(zip(range(max(1, nb * tiles)), repeat(args)))
    return Lowered(template(km.gemm_strided, "gemm16", t), calls, 2.0 * t * t * k, 4.0 * 2 * t * k + 4.0 * t * t)


def _gemm_per_batch(a2: tuple[int, ...], b2: tuple[int, ...], batch: tuple[int, ...], m: int, n: int,
                    k: int) -> Lowered:
    """A MatMul whose batch axes broadcast partially (``[2, 1, m, k] x [1, 3, k, n]``): per output
    batch, the operands' element offsets (a broadcast axis adds nothing), and the tiles of one
    2-d product there."""
    t = 16
    tiles = math.ceil(m / t) * math.ceil(n / t) if m and n else 0

    def offsets(shape: tuple[int, ...], size: int) -> np.ndarray:
        shape = (1,) * (len(batch) - len(shape)) + shape
        st = row_major_strides(shape) if shape else []
        idx = np.zeros(batch, np.int64)
        for d, (extent, stride) in enumerate(zip(shape, st)):
            if extent != 1:
                idx += (np.arange(extent) * stride * size).reshape([-1 if j == d else 1 for j in range(len(batch))])
        return idx.ravel()

    a_off, b_off = offsets(a2[:-2], m * k), offsets(b2[:-2], k * n)
    calls = []
    for bi in range(int(np.prod(batch))):
        args = (Ref("in", 0, int(a_off[bi])), Ref("in", 1, int(b_off[bi])), Ref("in", 0), Ref("out", 0, bi * m * n),
                m, n, k, 0, k, 1, 0, n, 1, 0, 0, 0, 1.0, 1.0)
        calls += zip(range(tiles), repeat(args))
    if not calls:
        calls = [(0, (Ref("in", 0), Ref("in", 1), Ref("in", 0), Ref("out", 0), m, n, k, 0, k, 1, 0, n, 1, 0, 0, 0,
                      1.0, 1.0))]
    return Lowered(template(km.gemm_strided, "gemm16", t), tuple(calls), 2.0 * t * t * k, 4.0 * 2 * t * k + 4.0 * t * t)


def _spatial(node: Node, graph: Graph, kernel: tuple[int, ...], dil: tuple[int, ...]) -> tuple[list[int], tuple]:
    """Begin pads (ONNX pads or auto_pad) and strides of a 1-d or 2-d conv/pool."""
    x = shape_of(graph, node.inputs[0])
    nsp = len(x) - 2
    if nsp not in (1, 2):
        raise ValueError(f"{nsp}-d {node.op_type} (only 1-d and 2-d)")
    strides = tuple(node.attrs.get("strides", [1] * nsp))
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(nsp):
            total = max(0, (math.ceil(x[2 + i] / strides[i]) - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
                        - x[2 + i])
            pads.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    elif auto == "VALID":
        pads = [0] * nsp
    else:
        pads = list(node.attrs.get("pads", [0] * (2 * nsp)))[:nsp]
    return pads, strides


def _end_pads(node: Node, graph: Graph, kernel: tuple[int, ...], begins: list[int], strides: tuple) -> list[int]:
    """End pads of a pool: ONNX ``pads``' second half, or what auto_pad adds after the begin pads."""
    x = shape_of(graph, node.inputs[0])
    nsp = len(x) - 2
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return [max(0, (math.ceil(x[2 + i] / strides[i]) - 1) * strides[i] + kernel[i] - x[2 + i]) - begins[i]
                for i in range(nsp)]
    if auto == "VALID":
        return [0] * nsp
    return list(node.attrs.get("pads", [0] * (2 * nsp)))[nsp:]


def _as2d(values, fill: int) -> list[int]:
    values = list(values)
    return [fill] + values if len(values) == 1 else values


def lower_conv(node: Node, graph: Graph, form: int = 1) -> Lowered:
    """``form`` 1: direct (one output per thread); :data:`CONV_IMPLICIT_GEMM`: implicit GEMM tiles."""
    x, w, y = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1]), shape_of(graph, node.outputs[0])
    nsp = len(x) - 2
    kernel = tuple(w[2:])
    dil = tuple(node.attrs.get("dilations", [1] * max(nsp, 1)))
    pads, strides = _spatial(node, graph, kernel, dil)
    group = int(node.attrs.get("group", 1))
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    h, wd = _as2d(x[2:], 1)
    oh, ow = _as2d(y[2:], 1)
    kh, kw = _as2d(kernel, 1)
    sh, sw = _as2d(strides, 1)
    ph, pw = _as2d(pads, 0)
    dh, dw = _as2d(dil, 1)
    total = int(np.prod(y))
    args = (Ref("in", 0), Ref("in", 1), Ref("in", 2) if has_bias else Ref("in", 1), Ref("out", 0), int(has_bias),
            total, x[0], x[1], h, wd, y[1], oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, group)
    macs = x[1] // max(group, 1) * kh * kw
    if form == CONV_IMPLICIT_GEMM:
        tm, tp = kc.conv_tile()
        tiles = -(-(y[1] // group) // tm) * -(-(oh * ow) // tp)
        calls = tuple(zip(range(max(1, x[0] * group * tiles)), repeat(args)))
        # Per tile: 2 TM TP MACs per reduction index, reading TM weights and gathering TP inputs.
        return Lowered(template(kc.conv2d_implicit_gemm, "conv_igemm", 16), calls, 2.0 * tm * tp * macs,
                       4.0 * (tm + tp) * macs)
    threads = 128
    calls = tuple(zip(range(chunks(total, threads)), repeat(args)))
    return Lowered(template(kn.conv2d_direct, "conv_direct", threads), calls, 2.0 * threads * macs,
                   8.0 * threads * macs)


def lower_conv_transpose(node: Node, graph: Graph) -> Lowered:
    """ConvTranspose, 1-d or 2-d, with explicit pads (output_padding only sizes the output, which
    the graph already gives); ``output_shape`` and SAME auto-padding are refused by name."""
    x, w, y = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1]), shape_of(graph, node.outputs[0])
    nsp = len(x) - 2
    if nsp not in (1, 2):
        raise ValueError(f"{nsp}-d ConvTranspose (only 1-d and 2-d)")
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "VALID") or node.attrs.get("output_shape") is not None:
        raise ValueError("output_shape or SAME auto_pad (give explicit pads)")
    pads = [0] * nsp if auto == "VALID" else list(node.attrs.get("pads", [0] * (2 * nsp)))[:nsp]
    group = int(node.attrs.get("group", 1))
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    h, wd = _as2d(x[2:], 1)
    oh, ow = _as2d(y[2:], 1)
    kh, kw = _as2d(w[2:], 1)
    sh, sw = _as2d(node.attrs.get("strides", [1] * nsp), 1)
    ph, pw = _as2d(pads, 0)
    dh, dw = _as2d(node.attrs.get("dilations", [1] * nsp), 1)
    chans = kc.conv_transpose_channels(y[1] // max(group, 1))
    # the threads walk the outputs by stride phase, chans output channels each
    total = kc.conv_transpose_total(x[0], y[1], oh, ow, sh, sw, group, chans)
    args = (Ref("in", 0), Ref("in", 1), Ref("in", 2) if has_bias else Ref("in", 1), Ref("out", 0), int(has_bias),
            total, x[0], x[1], h, wd, y[1], oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, group)
    threads = 128
    # per thread: chans outputs, each the taps of its stride phase over the group's input channels
    macs = chans * (x[1] // max(group, 1)) * -(-kh // sh) * -(-kw // sw)
    calls = tuple(zip(range(chunks(total, threads)), repeat(args)))
    name = "conv_transpose" if chans == kc.CT_CHANNELS else f"conv_transpose_c{chans}"
    return Lowered(template(kc.conv_transpose2d_direct, name, threads, chans), calls, 2.0 * threads * macs,
                   4.0 * threads * macs)


def lower_pool(node: Node, graph: Graph) -> Lowered:
    if len([o for o in node.outputs if o]) > 1:
        raise ValueError("the Indices output of MaxPool")
    kernel = tuple(node.attrs["kernel_shape"])
    if any(d != 1 for d in node.attrs.get("dilations", [1] * len(kernel))):
        raise ValueError("dilated pooling")
    pads, strides = _spatial(node, graph, kernel, (1,) * len(kernel))
    x, y = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
    h, wd = _as2d(x[2:], 1)
    oh, ow = _as2d(y[2:], 1)
    kh, kw = _as2d(kernel, 1)
    # An axis with one output position never applies its stride (the window starts at -pad): 1 then, so
    # that any stride the model gives (2**33 in a fuzzed one) fits the 32-bit call table.
    sh, sw = (s if o > 1 else 1 for s, o in zip(_as2d(strides, 1), (oh, ow)))
    ph, pw = _as2d(pads, 0)
    total = int(np.prod(y))
    args = (Ref("in", 0), Ref("out", 0), total, x[0] * x[1], h, wd, oh, ow, kh, kw, sh, sw, ph, pw)
    kind = "max" if node.op_type == "MaxPool" else "avg"
    if kind == "avg" and int(node.attrs.get("count_include_pad", 0)):
        # The divisor counts the window's positions inside the padded input (past the end pads
        # only with ceil_mode): the end pads are parameters too.
        kind = "avg_pad"
        ends = _end_pads(node, graph, kernel, pads, strides)
        args = (*args, *_as2d(ends, 0))
    calls = tuple(zip(range(chunks(total, 128)), repeat(args)))
    return Lowered(template(kn.pool2d, f"pool_{kind}", kind, 128), calls, 128.0 * kh * kw, 4.0 * 128 * kh * kw)


def lower_global_pool(node: Node, graph: Graph) -> Lowered:
    x = shape_of(graph, node.inputs[0])
    rows, n = x[0] * x[1], int(np.prod(x[2:]))
    kind = "mean" if node.op_type == "GlobalAveragePool" else "max"
    args = (Ref("in", 0), Ref("out", 0), n)  # one tuple shared by the rTasks (resolved once)
    calls = tuple(zip(range(max(rows, 1)), repeat(args)))
    return Lowered(template(kn.reduce_rows, f"rows_{kind}", kind, BLOCK_THREADS), calls, float(n), 4.0 * n)


def lower_softmax(node: Node, graph: Graph) -> Lowered:
    """Softmax and LogSoftmax on any axis: ``x`` seen as ``[outer, n, inner]``.  Over the last axis
    (``inner == 1``) one block per row; over an inner axis one thread per ``(outer, inner)`` pair,
    reading with stride ``inner`` (no transpose).  Before opset 13 the op normalises over every axis
    from ``axis`` on (a row of the 2-d coercion)."""
    x = shape_of(graph, node.inputs[0])
    log = node.op_type == "LogSoftmax"
    new_style = graph.opset.get("", 13) >= 13
    axis = int(node.attrs.get("axis", -1 if new_style else 1))
    rank = max(len(x), 1)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} of a rank-{len(x)} tensor")
    axis %= rank
    outer = int(np.prod(x[:axis])) if x else 1
    if new_style:
        n, inner = (x[axis] if x else 1), int(np.prod(x[axis + 1:]))
    else:
        n, inner = int(np.prod(x[axis:])), 1
    kind = "logsoftmax" if log else "softmax"
    if inner == 1:
        args = (Ref("in", 0), Ref("out", 0), n)  # one tuple shared by the rTasks (resolved once)
        calls = tuple(zip(range(max(outer, 1)), repeat(args)))
        return Lowered(template(gk.softmax_rows, f"{kind}_rows", BLOCK_THREADS, log), calls, 4.0 * n, 12.0 * n)
    total = outer * inner
    threads = 128
    args = (Ref("in", 0), Ref("out", 0), total, n, inner)
    calls = tuple(zip(range(chunks(total, threads)), repeat(args)))
    return Lowered(template(kr.softmax_strided, f"{kind}_strided", log, threads), calls, 4.0 * threads * n,
                   12.0 * threads * n)


def lower_lrn(node: Node, graph: Graph) -> Lowered:
    x = shape_of(graph, node.inputs[0])
    size = int(node.attrs["size"])
    total = int(np.prod(x))
    before = (size - 1) // 2
    args = (Ref("in", 0), Ref("out", 0), total, x[1], int(np.prod(x[2:])), before, size - 1 - before,
            float(node.attrs.get("alpha", 1e-4)) / size, float(node.attrs.get("beta", 0.75)),
            float(node.attrs.get("bias", 1.0)))
    calls = tuple(zip(range(chunks(total, 128)), repeat(args)))
    return Lowered(template(kn.lrn, "lrn", 128), calls, 3.0 * 128 * size, 4.0 * 128 * size)
