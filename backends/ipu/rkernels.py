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

Not covered: a table one of whose columns alone is larger than a tile's constant share (a
vocabulary beyond about 80,000 rows of float32 on a GC200); the placement then refuses it with
``IpuPlacementError`` naming the table.
"""

from __future__ import annotations

import math
from dataclasses import replace

from rammer.ir import Graph, Node
from rammer.kernels_generic import CopyFamily, ElementwiseFamily, itemsize, make_kernel, normalize_axis, shape_of
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


def ipu_rkernels(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """The ipu backend's own candidates for ``node``; ``[]`` when the generic families serve it."""
    return (split_table_gather(node, graph, vd) or tiled_dropout_with_mask(node, graph, vd)
            or tiled_lrn(node, graph, vd) or tiled_constant_of_shape(node, graph, vd))
