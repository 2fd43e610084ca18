"""The graph rewrites the ipu backend runs before scheduling.

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

from rammer.ir import Graph
from rammer.passes import DECOMPOSE, Pass
from rammer.passes.split_k import make_split_k
from rammer.passes.unroll_rnn import unroll_rnn
from rammer.vdevice import PRESETS

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


def k_pieces(m: int, n: int, k: int, limit: int, itemsize: int = 4, num_tiles: int = 0) -> int:
    """K slices needed so that the smallest output tile's operand blocks (``min(m, 16)`` rows of A,
    ``min(n, 8)`` columns of B, over K) fit ``limit`` bytes.

    With ``num_tiles``, also so that the blocks a tile holds when the product's rTasks are spread
    evenly over the tiles (``ceil(rTasks / num_tiles)`` of them) fit ``limit``: a weight that takes
    a large part of the chip is cut finer, so that no tile holds two whole blocks of it in one
    superstep (real:vgg19's fc6, 411 MB in 3 slices: 1,536 rTasks of 261 KiB of weight on 1,472
    tiles put two on 64 tiles).  Smaller blocks bring each tile's share near the weight's bytes over
    the tiles.  When no split up to :data:`MAX_K_PIECES` reaches ``limit`` the one with the
    smallest share is taken."""
    rows, cols = min(m, _SMALLEST_TILE[0]), min(n, _SMALLEST_TILE[1])
    block = (rows + cols) * k * itemsize
    first = max(1, math.ceil(block / limit))
    if num_tiles <= 0 or rows == 0 or cols == 0:
        return first
    out_tiles = math.ceil(m / rows) * math.ceil(n / cols)

    def per_tile(p: int) -> int:
        return math.ceil(p * out_tiles / num_tiles) * (rows + cols) * math.ceil(k / p) * itemsize

    if first == 1 and per_tile(1) <= limit:
        return 1
    candidates = range(first, max(first, min(MAX_K_PIECES, k)) + 1)
    fitting = [p for p in candidates if per_tile(p) <= limit]
    return fitting[0] if fitting else first


def ipu_passes(tile_bytes: int = DEFAULT_TILE_BYTES, num_tiles: int = DEFAULT_TILES) -> tuple[Pass, ...]:
    """The ipu backend's graph passes, in order, for ``num_tiles`` tiles of ``tile_bytes`` of SRAM:
    operand blocks of a MatMul rTask, and a tile's share of a split weight, may take half a tile
    (the other half holds the tile's constants and activations), a recurrent node all of it."""
    share = tile_bytes // 2
    return (DECOMPOSE,
            Pass("unroll-large-rnn", lambda g: unroll_large_rnns(g, tile_bytes),
                 "LSTM/GRU/RNN unrolled into MatMuls and cells when one of them is larger than a tile"),
            make_split_k(pieces_for=lambda m, n, k: k_pieces(m, n, k, share, num_tiles=num_tiles)),
            Pass("split-gather-rows", lambda g: split_tall_gathers(g, tile_bytes // 4),
                 "a Gather from a table whose column is larger than a quarter of a tile split along its rows"))


#: The passes for the default preset's tiles.
IPU_PASSES: tuple[Pass, ...] = ipu_passes()
