"""The graph rewrites the ipu backend runs before scheduling.

* :data:`rammer.passes.IF_TO_SELECT` (core): an ``If`` on a run-time condition becomes both
  branches inlined and a ``Where`` per output.  The lowering emits one static BSP program (it does
  not model Poplar's ``program::If``), and a branch body's rTasks would read the outer tensors it
  captures without any exchange delivering them: such an ``If`` was refused (real:vad, the silero
  detector whose whole network is the two branches of an ``If`` on the sample rate).  An ``If`` the
  pass leaves is still refused by name (device.py).
* :data:`rammer.passes.DECOMPOSE` (core): nearest ``Resize`` with integer factors becomes a
  broadcast view (Reshape -> Expand -> Reshape), a ``ConvTranspose`` whose kernel equals its
  stride a 1x1 Conv and a depth-to-space view, and the rest of that pass's forms.  Those ops have
  no tiled rKernel: their one whole-tensor rTask did not fit a tile (unet-seg-b8's
  ConvTranspose, the torch YOLO export's Resize were refused with ``no rKernel can run it``).
* split-k: a MatMul/Gemm with a constant weight whose smallest rTask would read operand blocks
  (``min(M, 16)`` rows of A and ``min(N, 8)`` columns of B over the whole K) larger than half a
  tile is split along K (core :func:`rammer.passes.split_k.split_k`):
  partial products over K slices on their own tiles, summed by an Add tree (the reduction
  supersteps; the lowering accounts the partials' exchange like any other).  Real AlexNet's fc6
  (K = 9216) read 288 KiB of weight per rTask and overflowed 48 tiles.
* split-conv-channels (:mod:`rammer.backends.ipu.split_conv`): an ungrouped Conv with a constant
  weight whose smallest rTask (one output row, 8 output channels, every input channel) does not
  fit its room on a tile, by the split-k rule (:func:`conv_pieces`; the room is half a tile less
  what the model's other constants take beyond the other half, :mod:`.conv_plan`), or, under
  memory pressure, that needs more slices for a block of half the room
  (:func:`.conv_plan.pressure_pieces`), becomes partial convolutions over slices of its input
  channels summed by an Add tree.
* unroll-large-rnn: LSTM/GRU/RNN nodes unrolled into per-step MatMuls and elementwise
  cells (core :func:`rammer.passes.unroll_rnn.unroll_rnn`) when one of them moves more bytes
  than a tile holds; such a node's one whole-op rTask cannot be placed
  (the torch CRNN's LSTM).  Smaller recurrent nodes stay one rTask each, fewer supersteps.
* split-gather-rows: a Gather from a constant table one of whose columns is larger than a
  quarter of a tile (:mod:`rammer.backends.ipu.split_gather`) becomes lookups in row pieces of the
  table and an Add tree; ``gather.split_table`` then cuts each piece along its width.

The graph is prepared for the compile's vDevice (:func:`ipu_passes` of its tile SRAM).
"""

from __future__ import annotations

import math

import numpy as np

from rammer.ir import Graph, Node
from rammer.passes import DECOMPOSE, IF_TO_SELECT, Pass
from rammer.passes.split_k import make_split_k
from rammer.passes.unroll_rnn import unroll_rnn
from rammer.vdevice import PRESETS

from .conv_plan import constant_bytes, conv_out_rows, conv_room, pressure_limit, pressure_pieces
from .split_conv import conv_window_elements, split_conv_channels
from .split_gather import split_tall_gathers

RNN_OPS = frozenset({"LSTM", "GRU", "RNN"})

#: The SRAM of a tile of the default preset (gc200), for :data:`IPU_PASSES`.
DEFAULT_TILE_BYTES = int(PRESETS["gc200"]["veu"]["local_mem_bytes"])
#: Its tile count (one vEU per tile).
DEFAULT_TILES = int(PRESETS["gc200"]["num_veus"])
#: The matrix family's smallest output tile (rows, columns): core rammer.kernels_dense.
_SMALLEST_TILE = (16, 8)
#: The most K slices the split-k rule cuts a product into (each is an op, an A slice and an Add).
MAX_K_PIECES = 32


def _node_bytes(graph: Graph, names) -> int:
    total = 0
    for name in names:
        info = graph.value_info.get(name) if name else None
        if info is not None and info.shape is not None:
            total += math.prod(info.shape) * (info.np_dtype.itemsize if info.dtype != "bool" else 1)
    return total


def unroll_large_rnns(graph: Graph, tile_bytes: int = DEFAULT_TILE_BYTES) -> Graph:
    """``graph`` with its recurrent nodes unrolled when one of them reads and writes more than
    ``tile_bytes`` (the same object otherwise)."""
    large = [n for n in graph.nodes if n.op_type in RNN_OPS and not n.domain
             and _node_bytes(graph, [*n.inputs, *n.outputs]) > tile_bytes]
    return unroll_rnn(graph) if large else graph


def reduction_pieces(a_per_k: int, b_per_k: int, k: int, out_blocks: int, limit: int, itemsize: int = 4,
                     num_tiles: int = 0) -> int:
    """Slices of a reduction axis of length ``k`` needed so that the operand blocks of the smallest
    rTask (``a_per_k`` + ``b_per_k`` elements per unit of ``k``) fit ``limit`` bytes.

    With ``num_tiles``, also so that the blocks a tile holds when the ``p x out_blocks`` rTasks are
    spread evenly over the tiles (``ceil(rTasks / num_tiles)`` of them) fit ``limit``: a weight that
    takes a large part of the chip is cut finer, so that no tile holds two whole blocks of it in one
    superstep (real:vgg19's fc6, 411 MB in 3 slices: 1,536 rTasks of 261 KiB of weight on 1,472
    tiles put two on 64 tiles).  Smaller blocks bring each tile's share near the weight's bytes over
    the tiles.  When no split up to :data:`MAX_K_PIECES` reaches ``limit``, the blocks' own rule
    decides alone."""
    block = (a_per_k + b_per_k) * k * itemsize
    first = max(1, math.ceil(block / limit))
    if num_tiles <= 0 or out_blocks <= 0 or block == 0:
        return first

    def per_tile(p: int) -> int:
        return math.ceil(p * out_blocks / num_tiles) * (a_per_k + b_per_k) * math.ceil(k / p) * itemsize

    if first == 1 and per_tile(1) <= limit:
        return 1
    candidates = range(first, max(first, min(MAX_K_PIECES, k)) + 1)
    fitting = [p for p in candidates if per_tile(p) <= limit]
    return fitting[0] if fitting else first


def k_pieces(m: int, n: int, k: int, limit: int, itemsize: int = 4, num_tiles: int = 0) -> int:
    """K slices of a MatMul ``(m x k) @ (k x n)``: :func:`reduction_pieces` for the matrix family's
    smallest output tile, ``min(m, 16)`` rows of A and ``min(n, 8)`` columns of B."""
    rows, cols = min(m, _SMALLEST_TILE[0]), min(n, _SMALLEST_TILE[1])
    if rows == 0 or cols == 0:
        return max(1, math.ceil((rows + cols) * k * itemsize / limit))
    out_blocks = math.ceil(m / rows) * math.ceil(n / cols)
    return reduction_pieces(rows, cols, k, out_blocks, limit, itemsize, num_tiles)


def conv_pieces(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...], room: int,
                num_tiles: int = 0) -> int:
    """Slices of the input channels of an ungrouped Conv: :func:`reduction_pieces` for the conv
    family's smallest rTask (one output row, ``min(C_out, 8)`` output channels), whose input block
    is its window rows over every input channel and whose weight block is its output channels'
    kernels over every input channel."""
    out_channels = w_shape[0]
    cols = min(out_channels, _SMALLEST_TILE[1])
    if cols == 0 or len(x_shape) < 3:
        return 1
    a_per_channel = conv_window_elements(node, x_shape, w_shape)
    b_per_channel = cols * math.prod(w_shape[2:])
    out_rows = conv_out_rows(node, x_shape, w_shape)
    out_blocks = x_shape[0] * out_rows * math.ceil(out_channels / cols)
    return reduction_pieces(a_per_channel, b_per_channel, x_shape[1], out_blocks, room, num_tiles=num_tiles)


def split_large_convs(graph: Graph, tile_bytes: int = DEFAULT_TILE_BYTES, num_tiles: int = DEFAULT_TILES) -> Graph:
    """``graph`` with each Conv whose smallest rTask does not fit its room on a tile
    (:func:`conv_room`, :func:`conv_pieces`) split over slices of its input channels
    (:mod:`.split_conv`)."""
    constants = constant_bytes(graph)

    def pieces_for(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...], g: Graph) -> int:
        room = conv_room(tile_bytes, num_tiles, constants - np.asarray(g.initializers[node.inputs[1]]).nbytes)
        pieces = conv_pieces(node, x_shape, w_shape, room, num_tiles)
        limit = pressure_limit(tile_bytes, room)
        if limit is not None:  # the weights leave little room: blocks that fit half of it (conv_plan.py)
            pieces = max(pieces, pressure_pieces(node, x_shape, w_shape, limit, num_tiles))
        return pieces

    return split_conv_channels(graph, pieces_for)


def ipu_passes(tile_bytes: int = DEFAULT_TILE_BYTES, num_tiles: int = DEFAULT_TILES) -> tuple[Pass, ...]:
    """The ipu backend's graph passes, in order, for ``num_tiles`` tiles of ``tile_bytes`` of SRAM:
    operand blocks of a MatMul rTask, and a tile's share of a split weight, may take half a tile
    (the other half holds the tile's constants and activations), a recurrent node all of it."""
    share = tile_bytes // 2
    return (IF_TO_SELECT, DECOMPOSE,
            Pass("unroll-large-rnn", lambda g: unroll_large_rnns(g, tile_bytes),
                 "LSTM/GRU/RNN unrolled into MatMuls and cells when one of them is larger than a tile"),
            make_split_k(pieces_for=lambda m, n, k: k_pieces(m, n, k, share, num_tiles=num_tiles)),
            Pass("split-conv-channels", lambda g: split_large_convs(g, tile_bytes, num_tiles),
                 "a Conv whose smallest rTask does not fit its room on a tile split over its input channels"),
            Pass("split-gather-rows", lambda g: split_tall_gathers(g, tile_bytes // 4),
                 "a Gather from a table whose column is larger than a quarter of a tile split along its rows"))


#: The passes for the default preset's tiles.
IPU_PASSES: tuple[Pass, ...] = ipu_passes()
