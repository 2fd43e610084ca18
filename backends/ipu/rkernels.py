"""rKernels the ipu backend offers instead of the generic ones, where a tile's SRAM demands it.

**Gather from a large table (embedding lookup).**  The generic copy kernel declares a read of the
whole data tensor (which rows an rTask needs depends on the indices, unknown at compile time), so
every tile running a Gather rTask would receive the whole table in its superstep: a 1,000 x 128
float table (500 KiB) already overflows a GC200 tile's 624 KiB.  The rKernel here cuts the Gather
along a *non-gathered* axis of the table (the embedding width, for ``Gather(axis=0)`` on
``[vocab, hidden]``): rTask ``j`` reads every row of the table's column block ``j`` and the
indices, and writes the same column block of every gathered row.  Its reads are exact and
disjoint across rTasks, so the lowering places each column block on the tile of the rTask that
reads it (:func:`rammer.backends.ipu.codegen.lower` follows the readers' boxes), and the lookup
reads every row from the tile that owns it, with no exchange of the table.  Poplar's
``multiSlice`` plans embedding tables the same way (split along the embedding dimension, then
along the rows when a column alone is too large).

**Dropout with its mask output** (opset < 12 exports, Caffe2 models): the generic elementwise
family tiles single-output ops only, so such a Dropout fell back to one rTask over the whole
tensor, which a tile cannot hold for a 224 px image (``no rKernel can run it``).  Here it is tiled
as the elementwise family tiles ``Dropout(x) -> y``, each rTask also writing the same box of the mask.

**ConstantOfShape** (Caffe2's VGG / ZFNet / AlexNet exports fill large tensors with it) gets the
generic copy family's output tiling, each rTask reading the (small) shape input whole.

**LRN** (Caffe2's Inception and AlexNet exports) has no generic tiled kernel either (it sums over a
window of channels); here it is tiled over rows of its spatial axes, each rTask reading all the
channels of its rows.

A constant table one of whose columns alone is larger than a quarter of a tile is first split
along its rows by the ``split-gather-rows`` graph pass (:mod:`rammer.backends.ipu.split_gather`);
each row piece is then cut here along its width.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rammer.ir import Graph, Node
from rammer.kernels_generic import (
    CopyFamily,
    ElementwiseFamily,
    itemsize,
    make_kernel,
    map_broadcast,
    normalize_axis,
    shape_of,
)
from rammer.rtask import Box, RKernel, RTaskAccess
from rammer.vdevice import VDevice

from .placement import CHUNK_BYTES

#: A Gather whose data tensor is larger than this is split along a non-gathered axis: a whole
#: table read by every rTask would be exchanged to every reader tile.
SPLIT_TABLE_BYTES = CHUNK_BYTES


def split_axis(data_shape: tuple[int, ...], axis: int) -> int | None:
    """The axis of the table a split Gather cuts: the last one that is not gathered and has more
    than one element (None when there is none)."""
    for a in range(len(data_shape) - 1, -1, -1):
        if a != axis and data_shape[a] > 1:
            return a
    return None


def split_table_gather(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """The Gather cut along a non-gathered axis of its table (one candidate), or ``[]`` when the
    node is not a Gather of a table larger than :data:`SPLIT_TABLE_BYTES`."""
    if node.op_type != "Gather" or len(node.inputs) < 2 or not node.outputs or not node.outputs[0]:
        return []
    data, indices, out = (shape_of(graph, n) for n in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if data is None or indices is None or out is None or 0 in out:
        return []
    size = itemsize(graph, node.inputs[0])
    if math.prod(data) * size <= SPLIT_TABLE_BYTES:
        return []
    axis = normalize_axis(int(node.attr("axis", 0)), len(data))
    cut = split_axis(data, axis)
    if cut is None:
        return []
    # Output axes: data axes before ``axis``, then the index axes, then data axes after ``axis``.
    out_cut = cut if cut < axis else cut - 1 + len(indices)
    slab = math.prod(data) // data[cut] * size  # bytes of one index along the cut axis
    width = max(1, min(data[cut], SPLIT_TABLE_BYTES // max(1, slab)))
    count = math.ceil(data[cut] / width)
    if count < 2:
        return []
    whole_indices = tuple((0, d) for d in indices)

    def access(j: int) -> RTaskAccess:
        lo, hi = j * width, min(data[cut], (j + 1) * width)
        read: Box = tuple((lo, hi) if a == cut else (0, d) for a, d in enumerate(data))
        write: Box = tuple((lo, hi) if a == out_cut else (0, d) for a, d in enumerate(out))
        return RTaskAccess(((0, read), (1, whole_indices)), ((0, write),))

    out_block = math.prod(out) // out[out_cut] * width
    nbytes = 2.0 * out_block * itemsize(graph, node.outputs[0]) + math.prod(indices) * itemsize(graph, node.inputs[1])
    return [make_kernel("gather.split_table", {"axis": cut, "width": width}, count, vd, 0.0, nbytes, access,
                        node, graph, work_items=out_block)]


def tiled_dropout_with_mask(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """Dropout with a mask output, tiled like the single-output elementwise ops (the same box of
    the output and of the mask per rTask), or ``[]`` for any other node."""
    if node.op_type != "Dropout" or len(node.outputs) < 2 or not node.outputs[1] or not node.outputs[0]:
        return []
    out, mask = shape_of(graph, node.outputs[0]), shape_of(graph, node.outputs[1])
    if out is None or mask != out:
        return []
    single = replace(node, outputs=node.outputs[:1])
    kernels = []
    for k in ElementwiseFamily().candidates(single, graph, vd):
        inner = k.access_fn

        def access(r: int, inner=inner) -> RTaskAccess:
            a = inner(r)
            return RTaskAccess(a.reads, a.writes + tuple((1, box) for slot, box in a.writes if slot == 0))

        kernels.append(replace(k, family="dropout.mask_tile", access_fn=access,
                               output_shapes=(out, mask, *k.output_shapes[2:])))
    return kernels


def tiled_lrn(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """LRN over ``[N, C, spatial...]`` tiled over (N, rows of the first spatial axis), every channel of
    its rows per rTask (the channel window needs them), or ``[]`` for any other node."""
    if node.op_type != "LRN" or not node.outputs or not node.outputs[0]:
        return []
    shape = shape_of(graph, node.inputs[0])
    if shape is None or len(shape) < 3 or 0 in shape:
        return []
    size = itemsize(graph, node.inputs[0])
    row = math.prod(shape[1:]) // shape[2] * size  # one row of the first spatial axis, all channels
    rows = max(1, min(shape[2], SPLIT_TABLE_BYTES // max(1, row)))
    per_image = math.ceil(shape[2] / rows)
    count = shape[0] * per_image
    if count < 2:
        return []

    def access(j: int) -> RTaskAccess:
        n, b = divmod(j, per_image)
        box: Box = ((n, n + 1), (0, shape[1]), (b * rows, min(shape[2], (b + 1) * rows)),
                    *((0, d) for d in shape[3:]))
        return RTaskAccess(((0, box),), ((0, box),))

    elements = math.prod(shape[1:]) // shape[2] * rows
    window = int(node.attr("size", 1))
    return [make_kernel("lrn.rows", {"rows": rows}, count, vd, float(elements * (window + 4)),
                        2.0 * elements * size, access, node, graph, work_items=elements)]


def tiled_constant_of_shape(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """ConstantOfShape with its output tiled (each rTask reads the shape vector whole), or ``[]``."""
    if node.op_type != "ConstantOfShape" or not node.outputs or not node.outputs[0]:
        return []
    return [replace(k, family="constant_of_shape.tile") for k in CopyFamily().candidates(node, graph, vd)]


#: Ops whose output holds the input's elements in the same (row-major) order.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def flat_range_box(shape: tuple[int, ...], first: int, last: int) -> Box:
    """The smallest box of ``shape`` holding the row-major elements ``first..last`` (inclusive)."""
    if not shape:
        return ()
    lo = [int(i) for i in np.unravel_index(first, shape)]
    hi = [int(i) for i in np.unravel_index(last, shape)]
    split = next((a for a in range(len(shape)) if lo[a] != hi[a]), len(shape))
    return tuple((lo[a], lo[a] + 1) if a < split else (lo[a], hi[a] + 1) if a == split else (0, d)
                 for a, d in enumerate(shape))


def _window_offset(node: Node, graph: Graph, data: tuple[int, ...], out: tuple[int, ...]) -> list[int] | None:
    """Per axis, the input index of output index 0 for a Slice with constant starts/ends/axes and
    unit steps, or a constant-mode Pad with constant pads (``-pad_before``); None otherwise."""
    def const(i: int):
        name = node.inputs[i] if len(node.inputs) > i else ""
        return None if not name else graph.initializers.get(name)

    rank = len(data)
    if node.op_type == "Pad":
        mode = node.attr("mode", "constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        pads = const(1) if len(node.inputs) > 1 and node.inputs[1] else node.attr("pads", None)
        if mode != "constant" or pads is None or (len(node.inputs) > 3 and node.inputs[3]):
            return None
        pads = [int(p) for p in np.asarray(pads).ravel()]
        return [-p for p in pads[:rank]] if len(pads) == 2 * rank else None
    if len(node.inputs) < 3:
        return None
    starts, steps, axes = const(1), const(4), const(3)
    if starts is None or (len(node.inputs) > 3 and node.inputs[3] and axes is None) or \
            (len(node.inputs) > 4 and node.inputs[4] and (steps is None or (np.asarray(steps) != 1).any())):
        return None
    offset = [0] * rank
    for j, a in enumerate(np.asarray(axes).ravel() if axes is not None else range(len(np.asarray(starts).ravel()))):
        a = normalize_axis(int(a), rank)
        start = int(np.asarray(starts).ravel()[j])
        start = start + data[a] if start < 0 else start
        offset[a] = min(max(0, start), data[a])
    return offset if all(o + e <= d for o, e, d in zip(offset, out, data)) else None


def exact_view_reads(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """Reshape-like ops and Expand tiled as the copy family tiles them, each rTask declaring the
    input box its output box comes from, not the whole input (which every reader tile would
    receive: a tensor larger than a tile could not be reshaped at all); ``[]`` for other ops.

    A view's output box is a run of row-major elements, so it reads the box spanning the same
    run of the input (:func:`flat_range_box`); Expand reads the broadcast box, as the
    elementwise ops do.  The other inputs (shapes, axes) are small and read whole."""
    if node.op_type not in VIEW_OPS and node.op_type not in ("Expand", "Slice", "Pad"):
        return []
    shapes = [shape_of(graph, n) if n else None for n in node.inputs]
    out = shape_of(graph, node.outputs[0]) if node.outputs and node.outputs[0] else None
    if not shapes or shapes[0] is None or out is None or 0 in out:
        return []
    data = shapes[0]
    if node.op_type in VIEW_OPS and math.prod(data) != math.prod(out):
        return []
    offset = _window_offset(node, graph, data, out) if node.op_type in ("Slice", "Pad") else None
    if node.op_type in ("Slice", "Pad") and offset is None:
        return []
    kernels = []
    for k in CopyFamily().candidates(node, graph, vd):
        inner = k.access_fn

        def access(r: int, inner=inner) -> RTaskAccess:
            a = inner(r)
            box = a.writes[0][1]
            if node.op_type == "Expand":
                first: Box = map_broadcast(box, data)
            elif offset is not None:  # Slice / Pad: the output box shifted, clipped to the input
                first = tuple((min(d, max(0, lo + o)), max(min(d, max(0, lo + o)), min(d, hi + o)))
                              for (lo, hi), o, d in zip(box, offset, data))
            else:
                start = int(np.ravel_multi_index([lo for lo, _ in box], out)) if out else 0
                end = int(np.ravel_multi_index([hi - 1 for _, hi in box], out)) if out else 0
                first = flat_range_box(data, start, end)
            return RTaskAccess(((0, first),) + tuple((s, b) for s, b in a.reads if s != 0), a.writes)

        kernels.append(replace(k, family="copy.exact_view", access_fn=access))
    return kernels


def ipu_rkernels(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """The ipu backend's own candidates for ``node``; ``[]`` when the generic families serve it."""
    return (split_table_gather(node, graph, vd) or tiled_dropout_with_mask(node, graph, vd)
            or tiled_lrn(node, graph, vd) or tiled_constant_of_shape(node, graph, vd)
            or exact_view_reads(node, graph, vd))
