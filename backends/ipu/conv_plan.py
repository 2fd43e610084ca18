"""How a Conv is cut when the model's weights leave a tile little room (weight-stationary tiles).

A tile keeps its share of the model's constants for the whole program (:mod:`.codegen`), so the
room left on it for what an rTask receives in a superstep is half the tile (the split-k rule's
share) less whatever the other constants take beyond the other half (:func:`conv_room`).
real:vgg19's weights take 381 KiB of every 624 KiB tile on average: a conv4 layer's room is 249
KiB, not 312.

When the room is below half a tile (*memory pressure*), two choices follow for a Conv:

* how many slices of its input channels (:func:`pressure_pieces`, used by the split-conv-channels
  pass next to the split-k rule): the fewest for which the conv family offers a block (output
  channels x output rows, over the channel slice) whose operands fit half the room, with no more
  rTasks over all the slices than there are tiles, so that a tile need run at most one of them;
* which of the family's kernels the scheduler may take (:func:`least_traffic_fit`): among those
  whose rTask operands fit half the room, the ones that read the fewest bytes over all their
  rTasks.  The family's smallest rTasks re-read the input once per block of 8 output channels and
  the weight once per output row: the wavefront scheduler took 8-channel, 2-row blocks of vgg19's
  conv4 layers (the tiles then received 160 MB per layer, more than 100 KiB each), and 907 tiles
  overflowed.

Without memory pressure neither applies and the scheduler's choice stands.
"""

from __future__ import annotations

import math

import numpy as np

from rammer.ir import Graph, Node
from rammer.rtask import RKernel
from rammer.vdevice import VDevice

from .placement import box_volume

#: The most slices of input channels the pressure rule cuts a conv into.
MAX_CHANNEL_PIECES = 32
#: The conv family's output-channel blocks (core ``conv.tile``, ungrouped convs).
_CHANNEL_BLOCKS = (8, 16, 32, 64, 128)


def constant_bytes(graph: Graph) -> int:
    """Bytes of all the constants of ``graph``."""
    return sum(np.asarray(v).nbytes for v in graph.initializers.values())


def conv_room(tile_bytes: int, num_tiles: int, other_constant_bytes: int) -> int:
    """The bytes a conv rTask's operand blocks may take on a tile: half of it, less what the rest
    of the model's constants (each tile keeps its share of them for the whole program) take beyond
    the other half; at least a sixteenth of the tile."""
    half = tile_bytes // 2
    if num_tiles <= 0:
        return half
    excess = max(0, math.ceil(other_constant_bytes / num_tiles) - (tile_bytes - half))
    return max(tile_bytes // 16, half - excess)


def pressure_limit(tile_bytes: int, room: int) -> int | None:
    """The operand bytes one conv rTask may read under memory pressure (half the room), or None
    when the room is half a tile (no pressure)."""
    return room // 2 if room < tile_bytes // 2 else None


def conv_out_rows(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> int:
    """Output rows of a Conv (its first spatial axis), from the ONNX shape rule."""
    rank = len(x_shape) - 2
    stride = int(node.attr("strides", [1] * rank)[0])
    dilation = int(node.attr("dilations", [1] * rank)[0])
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return math.ceil(x_shape[2] / stride)
    pads = node.attr("pads", [0] * (2 * rank))
    span = (w_shape[2] - 1) * dilation + 1
    extra = 0 if auto == "VALID" else int(pads[0]) + int(pads[rank])
    return max(0, (x_shape[2] + extra - span) // stride + 1)


def _axis_view(node: Node, axis: int) -> Node:
    """``node`` with its strides, dilations and pads of spatial ``axis`` only (as a 1-d conv)."""
    rank_attrs = {}
    for key in ("strides", "dilations"):
        values = node.attr(key)
        if values is not None:
            rank_attrs[key] = [values[axis - 2]]
    pads = node.attr("pads")
    if pads is not None:
        rank = len(pads) // 2
        rank_attrs["pads"] = [pads[axis - 2], pads[axis - 2 + rank]]
    auto = node.attr("auto_pad")
    if auto is not None:
        rank_attrs["auto_pad"] = auto
    return Node("Conv", node.inputs, node.outputs, attrs=rank_attrs)


def _halvings(n: int) -> list[int]:
    out, b = [], n
    while True:
        out.append(b)
        if b <= 1:
            return out
        b = -(-b // 2)


def pressure_pieces(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...], limit: int,
                    num_tiles: int, itemsize: int = 4) -> int:
    """The fewest slices of the input channels (up to :data:`MAX_CHANNEL_PIECES`) for which some
    block of the conv family (output channels x output rows over the slice) reads and writes at
    most ``limit`` bytes with at most ``num_tiles`` rTasks over all the slices; 1 when none does."""
    channels, out_channels = x_shape[1], w_shape[0]
    rank = len(x_shape) - 2
    stride = int(node.attr("strides", [1] * rank)[0])
    dilation = int(node.attr("dilations", [1] * rank)[0])
    span = (w_shape[2] - 1) * dilation + 1
    row_elems, kernel = math.prod(x_shape[3:]), math.prod(w_shape[2:])
    out_rows = conv_out_rows(node, x_shape, w_shape)
    if out_rows <= 0 or channels <= 0:
        return 1
    # (the output's width: the same arithmetic on the axes after the rows)
    out_shape_tail = [conv_out_rows(_axis_view(node, a), (1, 1, x_shape[a]), (1, 1, w_shape[a]))
                      for a in range(3, len(x_shape))]
    blocks = sorted({min(out_channels, b) for b in _CHANNEL_BLOCKS})
    for p in range(1, min(MAX_CHANNEL_PIECES, channels) + 1):
        per_slice = math.ceil(channels / p)
        for cb in blocks:
            for rb in _halvings(out_rows):
                count = p * x_shape[0] * math.ceil(out_channels / cb) * math.ceil(out_rows / rb)
                rows_in = min(x_shape[2], (rb - 1) * stride + span)
                out_elems = cb * rb * math.prod(out_shape_tail) if out_shape_tail else cb * rb
                block = ((rows_in * row_elems + cb * kernel) * per_slice + out_elems) * itemsize
                if count <= num_tiles and block <= limit:
                    return p
    return 1


def _rtask_bytes(kernel: RKernel, itemsize: int) -> int:
    """Bytes one rTask of the kernel reads and writes, the largest of its first and its middle
    one (the first is clipped at the top edge)."""
    most = 0
    for i in {0, kernel.num_rtasks // 2}:
        access = kernel.accesses(i)
        most = max(most, sum(box_volume(box) for _, box in (*access.reads, *access.writes)))
    return most * itemsize


def least_traffic_fit(kernels: list[RKernel], limit: int, max_rtasks: int = 0, itemsize: int = 4) -> list[RKernel]:
    """Among ``kernels``, those whose rTasks read and write at most ``limit`` bytes, of these those
    with at most ``max_rtasks`` rTasks when some have (0: any count), and of these the ones moving
    the fewest bytes over all their rTasks; ``kernels`` itself when none fits."""
    if len(kernels) < 2:
        return kernels
    sized = [(_rtask_bytes(k, itemsize), k) for k in kernels]
    fitting = [(b * k.num_rtasks, k) for b, k in sized if b <= limit]
    if not fitting:
        return kernels
    few = [(t, k) for t, k in fitting if k.num_rtasks <= max_rtasks]
    fitting = few if max_rtasks > 0 and few else fitting
    least = min(t for t, _ in fitting)
    return [k for t, k in fitting if t == least]


def pressure_conv_limits(graph: Graph, vd: VDevice) -> dict[str, tuple[int, int]]:
    """Per Conv node name of ``graph`` under memory pressure on ``vd``'s tiles: the bytes one of its
    rTasks may read and write (:func:`pressure_limit`), and the most rTasks it should have so that
    a tile need run at most one rTask of the convolution it is part of: the tile count times its
    share of the input channels when it reads a channel slice (a partial convolution of
    :mod:`.split_conv`, whose siblings run in the same wave), else the tile count.  Convs without
    pressure are absent."""
    per_tile = int(vd.extra.get("veus_per_tile", 1))
    tiles = -(-vd.num_veus // per_tile)
    tile_bytes = vd.veu.local_mem_bytes * per_tile
    constants = constant_bytes(graph)
    channel_slices = {n.outputs[0]: n.inputs[0] for n in graph.nodes
                      if n.op_type == "Slice" and len(n.inputs) > 3 and n.inputs[3] in graph.initializers
                      and np.asarray(graph.initializers[n.inputs[3]]).tolist() == [1]}
    limits: dict[str, tuple[int, int]] = {}
    for node in graph.nodes:
        if node.op_type != "Conv" or node.domain or len(node.inputs) < 2:
            continue
        w = graph.initializers.get(node.inputs[1])
        own = np.asarray(w).nbytes if w is not None else 0
        limit = pressure_limit(tile_bytes, conv_room(tile_bytes, tiles, constants - own))
        if limit is None:
            continue
        max_rtasks = tiles
        source = graph.value_info.get(channel_slices.get(node.inputs[0], ""))
        mine = graph.value_info.get(node.inputs[0])
        if source is not None and mine is not None and source.shape and mine.shape:
            max_rtasks = max(1, tiles * mine.shape[1] // source.shape[1])
        limits[node.name] = (limit, max_rtasks)
    return limits
