"""Hardware-neutral rKernel families for dense operators: MatMul/Gemm output
tiles, Conv by output-channel and output-row blocks, pooling windows.

Costing and tiling helpers are shared with :mod:`rammer.kernels_generic`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .ir import Graph, Node
from .kernels_generic import (
    Tiling,
    box_size,
    itemsize,
    make_kernel,
    map_broadcast,
    pareto,
    shape_of,
    tile_efficiency,
    whole,
)
from .rtask import RKernel, RTaskAccess

if TYPE_CHECKING:  # pragma: no cover
    from .vdevice import VDevice

#: Tile edges tried for matrix rows and columns (clipped to the matrix).
_ROW_TILES = (16, 32, 64, 128)
_COL_TILES = (8, 16, 32, 64, 128, 256)
#: Depth of the operand panels a GPU-like rTask stages in local memory.
_STAGE_K = 32


def _staging(rows: int, cols: int, k: int, size: int) -> int:
    """Double-buffered A and B panels of a rows x cols tile."""
    return 2 * (rows + cols) * min(k, _STAGE_K) * size


def k_slice(depth: int, slice_bytes: float, fixed_bytes: float, local_mem: int) -> int | None:
    """Reduction depth per slice for an rTask that loops over its reduction axis, staging
    double-buffered slices of its operands in local memory: ``slice_bytes`` per unit of depth,
    plus ``fixed_bytes`` held throughout (the output tile).  Equal slices, as deep as fit;
    None when even a slice of depth 1 does not."""
    if slice_bytes <= 0:
        return depth
    most = int((local_mem - fixed_bytes) // (2 * slice_bytes))
    if most < 1:
        return None
    if most >= depth:
        return depth
    pieces = -(-depth // most)
    return -(-depth // pieces)


class MatMulFamily:
    """MatMul and Gemm cut into ``tile_m x tile_n`` output tiles (one per
    batch matrix); each rTask streams its A rows and B columns."""

    name = "matmul.tile"
    op_types = frozenset(["MatMul", "Gemm"])

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        a, b = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
        out = shape_of(graph, node.outputs[0])
        if a is None or b is None or out is None or len(a) < 2 or len(b) < 2 or len(out) < 2:
            return []
        gemm = node.op_type == "Gemm"
        trans_a = gemm and bool(node.attr("transA", 0))
        trans_b = gemm and bool(node.attr("transB", 0))
        m, n = out[-2], out[-1]
        k = a[-2] if trans_a else a[-1]
        c = shape_of(graph, node.inputs[2]) if gemm and len(node.inputs) > 2 and node.inputs[2] else None
        size = itemsize(graph, node.inputs[0])
        batch = len(out) - 2
        # On a local-memory-only device, operands a K loop stages (constants in flash are read in place).
        flash = vd.constant_memory == "flash"
        a_local = 0 if flash and node.inputs[0] in graph.initializers else 1
        b_local = 0 if flash and node.inputs[1] in graph.initializers else 1
        rows = sorted({min(m, t) for t in _ROW_TILES})
        cols = sorted({min(n, t) for t in _COL_TILES})
        kernels = []
        for tm in rows:
            for tn in cols:
                # Keep tiles roughly square unless the matrix forces a thin one.
                if (tm < m and tn < n) and (tm > 8 * tn or tn > 8 * tm):
                    continue
                tiling = Tiling(out, (1,) * batch + (tm, tn))

                def access(i: int, tiling: Tiling = tiling) -> RTaskAccess:
                    box = tiling.box(i)
                    (r0, r1), (c0, c1) = box[-2], box[-1]
                    a_box = ((0, k), (r0, r1)) if trans_a else ((r0, r1), (0, k))
                    b_box = ((c0, c1), (0, k)) if trans_b else ((0, k), (c0, c1))
                    reads = [(0, map_broadcast(box[:-2] + ((0, 1), (0, 1)), a)[:-2] + a_box),
                             (1, map_broadcast(box[:-2] + ((0, 1), (0, 1)), b)[:-2] + b_box)]
                    if c is not None:
                        reads.append((2, map_broadcast(box, c)))
                    return RTaskAccess(tuple(reads), ((0, box),))

                flops = 2.0 * tm * tn * k
                nbytes = (tm * k + k * tn + tm * tn * (2 if c is not None else 1)) * size
                whole_k = make_kernel(
                    self.name, {"tile_m": tm, "tile_n": tn}, tiling.count, vd, flops, nbytes, access, node,
                    graph, efficiency=tile_efficiency(tm, tn), staging_bytes=_staging(tm, tn, k, size),
                    contraction=True, work_items=tm * tn)
                kernels.append(whole_k)
                if vd.local_memory_only and not whole_k.resources.fits(vd.veu):
                    # Operands past local memory: loop over K, staging slices of A and B.
                    out_bytes = tm * tn * size * (2 if c is not None else 1)
                    ks = k_slice(k, (tm * a_local + tn * b_local) * size, out_bytes, vd.veu.local_mem_bytes)
                    if ks is not None and ks < k:
                        kernels.append(make_kernel(
                            self.name, {"tile_m": tm, "tile_n": tn, "k_slice": ks}, tiling.count, vd, flops,
                            nbytes, access, node, graph, efficiency=tile_efficiency(tm, tn), contraction=True,
                            work_items=tm * tn,
                            local_bytes=2 * (tm * a_local + tn * b_local) * ks * size + out_bytes))
        return pareto(kernels, vd.num_veus, vd.veu)


def _window_pads(node: Node, spatial_in: tuple[int, ...], spatial_out: tuple[int, ...],
                 kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...]) -> list[int]:
    """Leading pad per spatial axis, resolving ``auto_pad``."""
    auto = node.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    rank = len(spatial_in)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lead = []
        for i in range(rank):
            total = max(0, (spatial_out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial_in[i])
            lead.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        return lead
    if auto == "VALID":
        return [0] * rank
    pads = list(node.attr("pads", [0] * (2 * rank)))
    return pads[:rank]


def _window_rows(o0: int, o1: int, stride: int, pad: int, kernel: int, dilation: int, size: int) -> tuple[int, int]:
    """Input rows an output row range [o0, o1) reads, clipped to the input."""
    lo = o0 * stride - pad
    hi = (o1 - 1) * stride - pad + (kernel - 1) * dilation + 1
    return max(0, lo), max(max(0, lo), min(size, hi))


def _halvings(n: int) -> list[int]:
    """n, ceil(n/2), ceil(n/4)... down to 1."""
    out, b = [], n
    while True:
        out.append(b)
        if b == 1:
            return out
        b = -(-b // 2)


class ConvFamily:
    """Conv (1-D, 2-D, 3-D...) cut into blocks of output channels (never
    splitting a group's input channels) and of the first spatial axis
    ("rows"); each rTask reads the input rows its window covers."""

    name = "conv.tile"
    op_types = frozenset(["Conv"])

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        x, w = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
        out = shape_of(graph, node.outputs[0])
        if x is None or w is None or out is None or len(x) < 3 or len(out) != len(x):
            return []
        has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
        groups = int(node.attr("group", 1))
        rank = len(x) - 2
        channels_out, oh = out[1], out[2]
        ow = math.prod(out[3:])  # everything after the rows: one row's worth of outputs
        per_group = channels_out // groups
        in_per_group = w[1]
        kernel = tuple(w[2:])
        strides = tuple(node.attr("strides", [1] * rank))
        dilations = tuple(node.attr("dilations", [1] * rank))
        pads = _window_pads(node, tuple(x[2:]), tuple(out[2:]), kernel, strides, dilations)
        size = itemsize(graph, node.inputs[0])
        flash = vd.constant_memory == "flash"
        if groups == 1:
            channel_blocks = {min(channels_out, b) for b in (8, 16, 32, 64, 128)}
        else:  # whole groups, or a divisor of one group
            channel_blocks = {b for b in (8, 16, 32, 64) if b < per_group and per_group % b == 0}
            channel_blocks |= {per_group * g for g in (1, 2, 4, 8, 16) if groups % g == 0}
        kernels = []
        for cb in sorted(channel_blocks):
            for rb in _halvings(oh):
                tiling = Tiling(out, (1, cb, rb) + tuple(out[3:]))

                def access(i: int, tiling: Tiling = tiling) -> RTaskAccess:
                    box = tiling.box(i)
                    (c0, c1), (r0, r1) = box[1], box[2]
                    g0, g1 = c0 // per_group, -(-c1 // per_group)
                    rows = _window_rows(r0, r1, strides[0], pads[0], kernel[0], dilations[0], x[2])
                    reads = [(0, (box[0], (g0 * in_per_group, g1 * in_per_group), rows) + whole(x[3:])),
                             (1, ((c0, c1),) + whole(w[1:]))]
                    if has_bias:
                        reads.append((2, ((c0, c1),)))
                    return RTaskAccess(tuple(reads), ((0, box),))

                acc = access(0)
                in_box = acc.reads[0][1]
                nbytes = (box_size(in_box) + cb * math.prod(w[1:]) + (cb if has_bias else 0)
                          + cb * rb * ow) * size
                flops = 2.0 * cb * rb * ow * in_per_group * math.prod(kernel)
                whole_k = make_kernel(
                    self.name, {"channels": cb, "rows": rb}, tiling.count, vd, flops, nbytes, access, node,
                    graph, efficiency=tile_efficiency(cb, rb * ow),
                    staging_bytes=_staging(min(cb, 64), min(rb * ow, 64), in_per_group * math.prod(kernel), size),
                    contraction=True, work_items=cb * rb * ow)
                kernels.append(whole_k)
                if vd.local_memory_only and groups == 1 and not whole_k.resources.fits(vd.veu):
                    # Operands past local memory: loop over input channels, staging slices of the
                    # input window and of the weights (weights in flash are read in place).
                    in_channels = in_box[1][1] - in_box[1][0]
                    per_channel = box_size(in_box) // max(1, in_channels)
                    w_local = 0 if flash and node.inputs[1] in graph.initializers else 1
                    out_bytes = (cb * rb * ow + (cb if has_bias else 0)) * size
                    cs = k_slice(in_channels, (per_channel + w_local * cb * math.prod(kernel)) * size, out_bytes,
                                 vd.veu.local_mem_bytes)
                    if cs is not None and cs < in_channels:
                        kernels.append(make_kernel(
                            self.name, {"channels": cb, "rows": rb, "k_slice": cs}, tiling.count, vd, flops, nbytes,
                            access, node, graph, efficiency=tile_efficiency(cb, rb * ow), contraction=True,
                            work_items=cb * rb * ow,
                            local_bytes=2 * (per_channel + w_local * cb * math.prod(kernel)) * cs * size + out_bytes))
        return pareto(kernels, vd.num_veus, vd.veu)


#: Channel blocks of a pooling rTask; :data:`_SMALL_POOL_CHANNELS` only when none of these fits a vEU.
_POOL_CHANNELS = (8, 16, 32, 64, 128)
#: A global pool over a large plane (ocr-det-640's 96 x 160 x 160: 800 KiB in 8 channels) fits a
#: 624 KiB IPU tile only a few channels at a time.  Offered only when no block of
#: :data:`_POOL_CHANNELS` fits, so a vDevice where one does (every cpu and GPU) keeps its candidates.
_SMALL_POOL_CHANNELS = (1, 2, 4)


class PoolFamily:
    """Max/Average/Lp pooling (any spatial rank) by channel blocks and blocks
    of the first spatial axis; global pools by channel blocks.  Blocks of 1, 2 or 4
    channels only where no block of 8 or more fits a vEU."""

    name = "pool.tile"
    op_types = frozenset(["MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
                          "GlobalLpPool"])

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        x, out = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
        if x is None or out is None or len(x) < 3 or len(out) != len(x):
            return []
        channels = x[1]
        kernels = pareto(self._kernels(node, graph, vd, x, out, {min(channels, b) for b in _POOL_CHANNELS}),
                         vd.num_veus, vd.veu)
        if kernels:
            return kernels
        small = {b for b in _SMALL_POOL_CHANNELS if b < min(channels, _POOL_CHANNELS[0])}
        return pareto(self._kernels(node, graph, vd, x, out, small), vd.num_veus, vd.veu)

    def _kernels(self, node: Node, graph: Graph, vd: VDevice, x: tuple[int, ...], out: tuple[int, ...],
                 channel_blocks: set[int]) -> list[RKernel]:
        """One kernel per (channel block, block of output rows)."""
        glob = node.op_type.startswith("Global")
        size = itemsize(graph, node.inputs[0])
        rank = len(x) - 2
        if glob:
            kernel, strides, dilations, pads = tuple(x[2:]), (1,) * rank, (1,) * rank, [0] * rank
        else:
            kernel = tuple(node.attr("kernel_shape"))
            strides = tuple(node.attr("strides", [1] * rank))
            dilations = tuple(node.attr("dilations", [1] * rank))
            pads = _window_pads(node, tuple(x[2:]), tuple(out[2:]), kernel, strides, dilations)
        extra_outputs = [j for j, o in enumerate(node.outputs) if o and j > 0]
        row_blocks = [1] if glob else _halvings(out[2])
        kernels = []
        for cb in sorted(channel_blocks):
            for rb in row_blocks:
                block = (1, cb) + ((1,) * rank if glob else (rb,) + tuple(out[3:]))
                tiling = Tiling(out, block)

                def access(i: int, tiling: Tiling = tiling) -> RTaskAccess:
                    box = tiling.box(i)
                    if glob:
                        in_box = box[:2] + whole(x[2:])
                    else:
                        rows = _window_rows(box[2][0], box[2][1], strides[0], pads[0], kernel[0], dilations[0],
                                            x[2])
                        in_box = box[:2] + (rows,) + whole(x[3:])
                    writes = ((0, box),) + tuple((j, box) for j in extra_outputs)
                    return RTaskAccess(((0, in_box),), writes)

                acc = access(0)
                out_elems = box_size(acc.writes[0][1])
                nbytes = (box_size(acc.reads[0][1]) + out_elems * len(acc.writes)) * size
                flops = float(out_elems * math.prod(kernel))
                kernels.append(make_kernel(self.name, {"channels": cb, "rows": rb}, tiling.count, vd, flops,
                                           nbytes, access, node, graph, work_items=out_elems))
        return kernels
