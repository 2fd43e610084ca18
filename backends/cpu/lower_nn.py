"""Lowering of the non-GEMM, non-elementwise ops: Concat, Pad, pooling,
reductions, softmax, layer normalization, Gather and (linear / cubic) Resize.

Each entry of :data:`LOWERINGS` adds the op's :class:`CpuOp`; :func:`reason`
says why a node cannot be lowered (then it runs on the host).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rammer.errors import ShapeError
from rammer.ir import Node
from rammer.lower.views import View
from rammer.ops import resize as resize_rules
from rammer.ops.conv import window_geometry
from rammer.ops.registry import OpContext

from . import kernels_nn as knn
from . import kernels_window as kwin
from . import lower_attention, lower_index, lower_quant, lower_rnn, lower_tree
from .ewops import BLOCK
from .lower_context import LowerContext
from .lower_conv import effective_steps
from .lower_views import copy_descriptors
from .ops import ARENA_DTYPES, CpuOp, EmitContext, Row, split_range
from .program import EwProgram, epilogue_io


def _info(lw: LowerContext, name: str):
    return lw.graph.value_info[name]


def _rows_partition(total: int, min_rows_per_task: int = 1) -> Callable[[int], list]:
    def partition(n: int) -> list:
        n = max(1, min(n, total // max(min_rows_per_task, 1) or 1))
        return [split_range(total, n, i) for i in range(n)]
    return partition


# -- Concat --------------------------------------------------------------------------------

def _aliased_buffers(lw: LowerContext) -> set[int]:
    """Buffers an earlier Concat already placed inside its output."""
    return {a[0] for op in lw.ops for a in op.extra.get("aliases", ())}


def _can_alias(lw: LowerContext, src: View, dst: View, taken: set[int]) -> bool:
    """Whether ``src``'s whole buffer can live at ``dst`` (a dense slice of the Concat output).

    The producer then writes its slice of the output directly.  The buffer
    must be exactly this one tensor (no other tensor's data in it), a
    temporary (not a graph input or constant), not placed elsewhere already,
    and the slice contiguous (axis 0, or leading dimensions of size 1).
    """
    b = lw.buffers[src.buffer]
    return (b.kind == "temp" and src.buffer not in taken and src.buffer != dst.buffer and src.offset == 0
            and b.size == src.size and src.size > 0 and src.is_dense() and dst.is_dense()
            and b.dtype == lw.buffers[dst.buffer].dtype)


def _concat(lw: LowerContext, node: Node) -> None:
    out = lw.views[node.outputs[0]]
    axis = int(node.attr("axis", 0)) % out.rank
    pieces = []
    # (input buffer, output buffer, element offset): planned inside the output, no copy (planner.py)
    aliases: list[tuple[int, int, int]] = []
    taken = _aliased_buffers(lw)
    start = 0
    for name in node.inputs:
        if not name:
            continue
        src = lw.view(name)
        size = src.shape[axis]
        if size:
            shape = list(out.shape)
            shape[axis] = size
            dst = View(out.buffer, out.dtype, tuple(shape), out.strides, out.offset + start * out.strides[axis])
            if _can_alias(lw, src, dst, taken):
                aliases.append((src.buffer, dst.buffer, dst.offset))
                taken.add(src.buffer)
            else:
                for d in copy_descriptors(src, dst):
                    pieces.append((src, dst, d))
        start += size
    rows = [d[11] * d[12] * d[13] for _, _, d in pieces]

    def partition(n: int) -> list:
        if not pieces:
            return [(-1, 0, 0)]
        parts = []
        per = max(1, n // max(len(pieces), 1))
        for k, r in enumerate(rows):
            m = min(per, r) if sum(rows) * 4 >= 8192 else 1
            parts += [(k,) + split_range(r, m, i) for i in range(m)]
        return parts

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        if not pieces:
            # Every input is already in place: an empty copy row, so that the
            # op still orders the producers before the output's readers.
            return [("k_copy", [ctx.side.add_ints([4] + [0] * 10 + [0, 1, 1, 0]), 0, 0])]
        offs = []
        for src, dst, d in pieces:
            d = list(d)
            d[1] += ctx.locate(src)
            d[6] += ctx.locate(dst)
            offs.append(ctx.side.add_ints(d))
        return [("k_copy", [offs[k], r0, r1]) for k, r0, r1 in parts]

    reads = tuple(sorted({p[0].buffer for p in pieces} | {a[0] for a in aliases}))
    nbytes = 2.0 * sum(p[2][11] * p[2][12] * p[2][13] * p[2][14] for p in pieces) * ARENA_DTYPES[out.dtype]
    lw.add_op(CpuOp(node.name or "Concat", "copy.concat", (node,), reads, (out.buffer,), 0.0, nbytes,
                    partition, emit, extra={"aliases": aliases}))


# -- Pad -----------------------------------------------------------------------------------

def _pad_params(lw: LowerContext, node: Node) -> tuple[list[int], float] | None:
    g = lw.graph
    if lw.opset < 11:
        pads = list(node.attr("pads", []))
        value = float(node.attr("value", 0.0))
        mode = node.attr("mode", "constant")
    else:
        mode = node.attr("mode", "constant")
        pads_arr = g.initializers.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if pads_arr is None:
            return None
        pads = [int(p) for p in pads_arr.ravel()]
        value = 0.0
        if len(node.inputs) > 2 and node.inputs[2]:
            v = g.initializers.get(node.inputs[2])
            if v is None:
                return None
            value = float(v.ravel()[0]) if v.size else 0.0
        if len(node.inputs) > 3 and node.inputs[3]:
            axes_arr = g.initializers.get(node.inputs[3])
            if axes_arr is None:
                return None
            rank = len(_info(lw, node.inputs[0]).shape)
            full = [0] * (2 * rank)
            axes = [int(a) % rank for a in axes_arr.ravel()]
            for k, a in enumerate(axes):
                full[a] = pads[k]
                full[a + rank] = pads[k + len(axes)]
            pads = full
    if mode != "constant":
        return None
    return pads, value


def _pad(lw: LowerContext, node: Node) -> None:
    pads, value = _pad_params(lw, node)
    src = lw.view(node.inputs[0])
    out = lw.views[node.outputs[0]]
    rank = src.rank
    lead = 4 - rank
    begins = [0] * lead + pads[:rank]
    s_shape = (1,) * lead + src.shape
    s_strides = (0,) * lead + src.strides
    o_shape = (1,) * lead + out.shape
    esize = ARENA_DTYPES[out.dtype]
    rows = o_shape[0] * o_shape[1] * o_shape[2]
    is_float = 1 if out.dtype == "float32" else 0

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        fimm = ctx.side.add_floats([value])
        ivalue = int(value) if np.isfinite(value) else 0  # only integer pads use it
        words = [esize, ctx.locate(src), *s_strides, ctx.locate(out), *o_shape, *begins, *s_shape,
                 ivalue, fimm, is_float]
        desc = ctx.side.add_ints(words)
        return [("k_pad", [desc, r0, r1]) for r0, r1 in parts]

    nbytes = 1.0 * esize * (src.size + out.size)
    lw.add_op(CpuOp(node.name or "Pad", "copy.pad", (node,), (src.buffer,), (out.buffer,), 0.0, nbytes,
                    _rows_partition(rows, 64), emit))


# -- pooling ---------------------------------------------------------------------------------

def _pool(lw: LowerContext, node: Node) -> None:
    lower_pool(lw, node, lw.views[node.outputs[0]], None, (node,))


def lower_pool(lw: LowerContext, node: Node, out: View, prog: EwProgram | None, nodes: tuple[Node, ...]) -> None:
    """MaxPool / AveragePool into ``out``, then the fused elementwise ``prog`` (over the
    ``("conv", C)`` space: rows are planes) on each group of finished planes."""
    x_info = _info(lw, node.inputs[0])
    x = lw.dense(node.inputs[0])
    ctx = OpContext(node, lw.opset, [x_info], [None])
    spatial = x_info.shape[2:]
    geo = window_geometry(ctx, spatial, node.attr("kernel_shape"), ceil_mode=bool(node.attr("ceil_mode", 0)))
    if prog is None and tuple(geo.kernel) == tuple(spatial) and not any(geo.pad_begin) and not any(geo.pad_end):
        # One window over the whole unpadded plane (ResNet-50's 7x7 AveragePool): the global pool's
        # reduction, not a window sweep (2048 planes of 7x7: 190 -> 25 us).
        planes = x_info.shape[0] * x_info.shape[1]
        _reduce_op(lw, node, x, out, planes, math.prod(spatial), 1,
                   knn.RED_MAX if node.op_type == "MaxPool" else knn.RED_MEAN)
        return
    strides, dilations = effective_steps(geo.out, geo.kernel, geo.strides, geo.dilations)
    if len(spatial) == 1:
        H, W = 1, spatial[0]
        kh, kw, sh, sw, ph, pw, dh, dw = 1, geo.kernel[0], 1, strides[0], 0, geo.pad_begin[0], 1, dilations[0]
        OH, OW = 1, geo.out[0]
        pe = (0, geo.pad_end[0])
        pb = (0, geo.pad_begin[0])
        dims = (1, W)
    else:
        H, W = spatial
        kh, kw = geo.kernel
        sh, sw = strides
        ph, pw = geo.pad_begin
        dh, dw = dilations
        OH, OW = geo.out
        pb, pe, dims = geo.pad_begin, geo.pad_end, spatial
    if H == kh == OH == 1 and kwin.window_scratch(1, OW, 1, kw, 1, sw, 1, dw) > POOL_BAND_MAX_FLOATS:
        # A one-row plane (a 1-D pool over a long axis) too long for a vEU's scratch runs as a
        # one-column plane (the same memory layout), which is cut into bands of rows below.
        H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = W, H, kw, kh, sw, sh, pw, ph, dw, dh, OW, OH
        pb, pe, dims = pb[::-1], pe[::-1], dims[::-1]
    mode = 0 if node.op_type == "MaxPool" else 1
    if int(node.attr("count_include_pad", 0)):
        limits = [(0, d + b + e) for d, b, e in zip(dims, pb, pe)]
    else:
        limits = [(b, b + d) for d, b in zip(dims, pb)]
    planes = x_info.shape[0] * x_info.shape[1]
    # the epilogue's registers first in scratch, then the planes
    regs = prog.n_registers() * BLOCK if prog is not None else 0
    space = ("conv", x_info.shape[1])
    bands = _pool_bands(OH, OW, kh, kw, sh, sw, dh, dw, regs)
    # Each band: (input row offset, band H, band top pad, first output row, band OH, stack, lo_h, hi_h).
    geometry = []
    for r0, r1 in bands if len(bands) > 1 else ():
        top = r0 * sh - ph  # the band's first padded row, in input rows
        span = (r1 - r0 - 1) * sh + (kh - 1) * dh + 1
        start = max(0, top)
        rows = min(H, top + span) - start
        stack = min(planes, kwin.pool_stack(r1 - r0, OW, kh, kw, sh, sw, dh, dw)) if len(bands) == 1 else 1
        geometry.append((start, rows, start - top, r0, r1 - r0, stack, limits[0][0] - r0 * sh,
                         limits[0][1] - r0 * sh))
    if len(bands) == 1:
        geometry.append((0, H, ph, 0, OH, min(planes, kwin.pool_stack(OH, OW, kh, kw, sh, sw, dh, dw)), *limits[0]))

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        epi = prog.emit(ctx.side, ctx.locate, space) if prog is not None else -1
        descs = []
        for start, rows, top_pad, r0, band_oh, stack, lo_h, hi_h in geometry:
            words = [ctx.locate(x) + start * W, x_info.shape[1], rows, W, kh, kw, sh, sw, top_pad, pw, dh, dw,
                     band_oh, OW, ctx.locate(out) + r0 * OW, mode, lo_h, hi_h, limits[1][0], limits[1][1],
                     regs, stack, epi, H * W, OH * OW, r0 * OW]
            descs.append(ctx.side.add_ints(words))
        return [("k_pool", [descs[b], q0, q1]) for b, q0, q1 in parts]

    flops = 1.0 * planes * OH * OW * kh * kw
    epi_reads, epi_writes, epi_inputs = epilogue_io(prog)
    reads = {x.buffer} | epi_reads
    writes = {out.buffer} | epi_writes
    # phase planes and accumulator of ``stack`` planes swept at once, 1/counts
    scratch = regs + max(kwin.window_scratch(band_oh, OW, kh, kw, sh, sw, dh, dw, stack)
                         for _, _, _, _, band_oh, stack, _, _ in geometry)
    plane_parts = _rows_partition(planes)

    def partition(k: int) -> list:
        per_band = max(1, k // len(bands))
        return [(b, q0, q1) for b in range(len(bands))
                for q0, q1 in (plane_parts(per_band) or [(0, planes)])]

    lw.add_op(CpuOp(node.name or node.op_type, "pool", nodes, tuple(sorted(reads - writes)), tuple(sorted(writes)),
                    flops, 4.0 * (x.size + out.size * (1 + epi_inputs)), partition, emit, scratch=scratch))


#: Floats of a vEU's scratch one pooling band may take (the phase planes, accumulator and 1/counts of
#: one plane's band of output rows; 1.5 MiB of the vEU's 2 MiB).
POOL_BAND_MAX_FLOATS = 384 * 1024


def _pool_bands(OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                regs: int) -> list[tuple[int, int]]:
    """Output-row ranges ``[r0, r1)`` swept one at a time: the whole plane when it fits in
    :data:`POOL_BAND_MAX_FLOATS`, else bands of equal height that each do (a 640x640 detector map,
    a long 1-D pool as a column).  Planes larger than a vEU's scratch failed to schedule before."""
    def floats(rows: int) -> int:
        return regs + kwin.window_scratch(rows, OW, kh, kw, sh, sw, dh, dw, 1)
    if floats(OH) <= POOL_BAND_MAX_FLOATS:
        return [(0, OH)]
    rows = OH
    while rows > 1 and floats(rows) > POOL_BAND_MAX_FLOATS:
        rows = max(1, rows // 2)
    count = -(-OH // rows)
    return [(OH * i // count, OH * (i + 1) // count) for i in range(count)]


# -- reductions --------------------------------------------------------------------------------

_REDUCE_MODES = {
    "ReduceSum": knn.RED_SUM, "ReduceMean": knn.RED_MEAN, "ReduceMax": knn.RED_MAX, "ReduceMin": knn.RED_MIN,
    "ReduceProd": knn.RED_PROD, "ReduceSumSquare": knn.RED_SUMSQ, "ReduceL1": knn.RED_L1,
    "ReduceL2": knn.RED_L2, "ReduceLogSum": knn.RED_LOGSUM, "ReduceLogSumExp": knn.RED_LOGSUMEXP,
    "GlobalAveragePool": knn.RED_MEAN, "GlobalMaxPool": knn.RED_MAX,
}


def _reduce_axes(lw: LowerContext, node: Node) -> list[int] | None:
    """Reduced axes (sorted, non-negative), or None if not known at compile time or a no-op."""
    rank = len(_info(lw, node.inputs[0]).shape)
    if node.op_type.startswith("Global"):
        return list(range(2, rank))
    takes_input = lw.opset >= 18 or (node.op_type == "ReduceSum" and lw.opset >= 13)
    if takes_input:
        if len(node.inputs) > 1 and node.inputs[1]:
            arr = lw.graph.initializers.get(node.inputs[1])
            if arr is None:
                return None
            axes = [int(a) for a in arr.ravel()]
        else:
            axes = []
    else:
        axes = [int(a) for a in node.attr("axes", [])]
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    return sorted({a % rank for a in axes}) if rank else []


def _reduce_space(shape: tuple[int, ...], axes: list[int]) -> tuple[int, int, int] | None:
    kept_between = [d for i, d in enumerate(shape) if axes and axes[0] < i < axes[-1] and i not in axes]
    if any(d != 1 for d in kept_between):
        return None
    outer = math.prod(shape[: axes[0]]) if axes else math.prod(shape)
    red = math.prod(shape[a] for a in axes)
    inner = math.prod(shape[axes[-1] + 1:]) if axes else 1
    return outer, red, inner


def _reduce(lw: LowerContext, node: Node) -> None:
    x_info = _info(lw, node.inputs[0])
    axes = _reduce_axes(lw, node)
    outer, red, inner = _reduce_space(x_info.shape, axes)
    _reduce_op(lw, node, lw.dense(node.inputs[0]), lw.views[node.outputs[0]], outer, red, inner,
               _REDUCE_MODES[node.op_type])


def _reduce_op(lw: LowerContext, node: Node, x: View, out: View, outer: int, red: int, inner: int, mode: int) -> None:
    """A k_reduce of x viewed as (outer, red, inner) over its middle axis into ``out``."""

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), outer, red, inner, ctx.locate(out), mode])
        return [("k_reduce", [desc, e0, e1]) for e0, e1 in parts]

    lines = outer * inner
    lw.add_op(CpuOp(node.name or node.op_type, "reduce", (node,), (x.buffer,), (out.buffer,), float(x.size),
                    4.0 * (x.size + out.size), _rows_partition(lines, max(1, 2048 // max(red, 1))), emit))


# -- softmax, layer norm -------------------------------------------------------------------------

def _softmax(lw: LowerContext, node: Node) -> None:
    shape = _info(lw, node.inputs[0]).shape
    rank = len(shape)
    axis = int(node.attr("axis", -1 if lw.opset >= 13 else 1)) % max(rank, 1)
    if lw.opset >= 13:
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    else:
        outer, n, inner = math.prod(shape[:axis]), math.prod(shape[axis:]), 1
    x = lw.dense(node.inputs[0])
    out = lw.views[node.outputs[0]]
    log = 1 if node.op_type == "LogSoftmax" else 0

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), outer, n, inner, ctx.locate(out), log])
        return [("k_softmax", [desc, e0, e1]) for e0, e1 in parts]

    lines = outer * inner
    lw.add_op(CpuOp(node.name or node.op_type, "rows.softmax", (node,), (x.buffer,), (out.buffer,),
                    5.0 * x.size, 8.0 * x.size, _rows_partition(lines, max(1, 2048 // max(n, 1))), emit))


def _layernorm(lw: LowerContext, node: Node) -> None:
    shape = _info(lw, node.inputs[0]).shape
    axis = int(node.attr("axis", -1)) % len(shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    x = lw.dense(node.inputs[0])
    scale = lw.dense(node.inputs[1])
    bias = lw.dense(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    out = lw.views[node.outputs[0]]
    eps = float(node.attr("epsilon", 1e-5))

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        epsi = ctx.side.add_floats([eps])
        desc = ctx.side.add_ints([ctx.locate(x), rows, n, ctx.locate(out), ctx.locate(scale),
                                  ctx.locate(bias) if bias is not None else -1, epsi])
        return [("k_layernorm", [desc, r0, r1]) for r0, r1 in parts]

    reads = tuple(sorted({x.buffer, scale.buffer} | ({bias.buffer} if bias is not None else set())))
    lw.add_op(CpuOp(node.name or node.op_type, "rows.layernorm", (node,), reads, (out.buffer,), 8.0 * x.size,
                    8.0 * x.size, _rows_partition(rows, max(1, 2048 // max(n, 1))), emit))


# -- Gather ----------------------------------------------------------------------------------------

def _gather(lw: LowerContext, node: Node) -> None:
    shape = _info(lw, node.inputs[0]).shape
    axis = int(node.attr("axis", 0)) % len(shape)
    data = lw.dense(node.inputs[0])
    idx = lw.dense(node.inputs[1])
    out = lw.views[node.outputs[0]]
    outer, axis_len, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    n_idx = idx.size
    esize = ARENA_DTYPES[data.dtype]
    idx_size = ARENA_DTYPES[idx.dtype]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([esize, ctx.locate(data), axis_len, inner, axis_len * inner, ctx.locate(idx),
                                  n_idx, ctx.locate(out), idx_size])
        return [("k_gather", [desc, r0, r1]) for r0, r1 in parts]

    lw.add_op(CpuOp(node.name or "Gather", "gather", (node,), (data.buffer, idx.buffer), (out.buffer,), 0.0,
                    2.0 * esize * out.size, _rows_partition(outer * n_idx, 16), emit))


# -- Resize ----------------------------------------------------------------------------------------

def _resize_tables(lw: LowerContext, node: Node) -> tuple[list, str | None]:
    """Per resized axis (the last two: rows, columns) the clamped input indices and the weights of
    each output position's taps, by the op's own rules (:mod:`rammer.ops.resize`); or why not."""
    x_info = _info(lw, node.inputs[0])
    shape = tuple(x_info.shape)
    values = [None] + [lw.graph.initializers.get(i) if i else None for i in node.inputs[1:]]
    ctx = OpContext(node, lw.opset, [x_info] + [_info(lw, i) if i else None for i in node.inputs[1:]], values)
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if resize_rules._legacy(ctx):
        ctm = "asymmetric"
    if ctm == "tf_crop_and_resize":
        return [], "tf_crop_and_resize (extrapolated pixels)"
    if node.attr("mode", "nearest") == "nearest":
        return [], "nearest Resize that the cpu rewrites did not turn into copies"
    try:
        plans = resize_rules._plan(ctx, shape, [None, *values[1:]])
    except Exception as exc:  # scales/sizes computed at run time: the reference says so when it runs
        return [], f"scales/sizes not constant ({exc})"
    if len(shape) < 2 or not all(p.out_len > 0 for p in plans) or not all(shape):
        return [], "rank < 2 or an empty axis"
    for p in plans[:-2]:
        if p.out_len != shape[p.axis] or not math.isclose(p.scale, 1.0):
            return [], f"resizes axis {p.axis} (the cpu kernel resizes the last two)"
    tables = []
    for p in plans[-2:]:
        in_len = shape[p.axis]
        if p.out_len == in_len and math.isclose(p.scale, 1.0):
            tables.append((np.arange(in_len, dtype=np.int64)[:, None], np.ones((in_len, 1))))
            continue
        x = resize_rules._source_coords(ctx, ctm, p, in_len)
        idx, weights = resize_rules._taps(ctx, x, in_len, p.scale)
        tables.append((np.ascontiguousarray(idx, dtype=np.int64), weights))
    return tables, None


#: Floats of a vEU's scratch Resize's column pass may take (a plane's input rows resampled to the
#: output's width); a larger plane gathers every output pixel's taps instead.
RESIZE_MAX_SCRATCH_FLOATS = 256 * 1024


def _resize(lw: LowerContext, node: Node) -> None:
    (ih, wh), (iw, ww) = _resize_tables(lw, node)[0]
    x_info = _info(lw, node.inputs[0])
    *lead, H, W = x_info.shape
    OH, OW = ih.shape[0], iw.shape[0]
    planes = math.prod(lead)
    x = lw.dense(node.inputs[0])
    out = lw.views[node.outputs[0]]
    # the columns' tables tap-major, so the column pass runs one vector loop per tap
    consts = [lw.const_view(np.ascontiguousarray(a, dtype=dt).ravel())
              for a, dt in ((ih, np.int64), (wh, np.float32), (iw.T, np.int64), (ww.T, np.float32))]
    separable = H * OW <= RESIZE_MAX_SCRATCH_FLOATS

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), H, W, ctx.locate(out), OH, OW, ih.shape[1], ctx.locate(consts[0]),
                                  ctx.locate(consts[1]), iw.shape[1], ctx.locate(consts[2]), ctx.locate(consts[3]),
                                  0 if separable else -1])
        return [("k_resize", [desc, q0, q1]) for q0, q1 in parts]

    taps = ih.shape[1] * iw.shape[1]
    reads = tuple(sorted({x.buffer} | {c.buffer for c in consts}))
    lw.add_op(CpuOp(node.name or "Resize", "resize", (node,), reads, (out.buffer,), 2.0 * out.size * taps,
                    4.0 * (x.size + out.size), _rows_partition(planes), emit,
                    scratch=H * OW if separable else 0))


LOWERINGS: dict[str, Callable[[LowerContext, Node], None]] = {
    "Concat": _concat, "Pad": _pad, "MaxPool": _pool, "AveragePool": _pool,
    "Softmax": _softmax, "LogSoftmax": _softmax, "LayerNormalization": _layernorm, "Gather": _gather,
    "Resize": _resize,
    **{op: _reduce for op in _REDUCE_MODES},
    **{op: lower_rnn.lower_rnn for op in lower_rnn.RNN_OPS},
    **lower_index.LOWERINGS, **lower_quant.LOWERINGS, **lower_tree.LOWERINGS, **lower_attention.LOWERINGS,
}

#: Ops whose own modules say whether they lower (scans / index ops, quantized ops, tree ensembles, fused attention).
_REASONS = {**lower_index.REASONS, **lower_quant.REASONS, **lower_tree.REASONS, **lower_attention.REASONS}


def reason(lw: LowerContext, node: Node) -> str | None:
    """None if :data:`LOWERINGS` can lower the node, else why not."""
    op = node.op_type
    if op in lower_rnn.RNN_OPS:
        return lower_rnn.reason(lw, node)
    if op in _REASONS:
        return _REASONS[op](lw, node)
    ins = [_info(lw, i) for i in node.inputs if i]
    dt = ins[0].dtype
    if op == "Concat" or op == "Gather":
        if op == "Gather" and ins[1].dtype not in ("int64", "int32"):
            return "Gather indices are not integers"
        return None
    if op == "Pad":
        return None if len(ins[0].shape) <= 4 and _pad_params(lw, node) is not None else \
            "Pad with non-constant mode/pads or rank > 4"
    if dt != "float32":
        return f"{dt} input (the CPU kernel is float32)"
    if op in ("MaxPool", "AveragePool"):
        if len([o for o in node.outputs if o]) > 1:
            return "MaxPool with Indices output"
        if len(ins[0].shape) not in (3, 4):
            return f"{len(ins[0].shape) - 2}-D pooling"
        return None
    if op in _REDUCE_MODES:
        axes = _reduce_axes(lw, node)
        if axes is None:
            return "axes computed at run time or empty with noop_with_empty_axes"
        if not axes or _reduce_space(ins[0].shape, axes) is None:
            return f"reduction over non-adjacent axes {axes}"
        return None
    if op == "LayerNormalization":
        if len([o for o in node.outputs if o]) > 1:
            return "LayerNormalization with Mean/InvStdDev outputs"
        axis = int(node.attr("axis", -1)) % len(ins[0].shape)
        norm_shape = ins[0].shape[axis:]
        for t in ins[1:]:
            if t.shape != norm_shape and math.prod(t.shape) != math.prod(norm_shape):
                return "broadcast scale/bias"
        return None
    if op == "Resize":
        return _resize_tables(lw, node)[1]
    if op in ("Softmax", "LogSoftmax"):
        if not ins[0].shape:  # (shape inference lets it through; the kernel would index a missing axis)
            raise ShapeError(f"{node.label}: axis {node.attr('axis', -1)} is out of range for the rank-0 input "
                             f"'{node.inputs[0]}'; fix the model")
        return None
    return "no CPU rKernel for this op"

