"""Large constant weights cut finest: the tiles then hold them evenly (weight-stationary).

A tile keeps the constant chunks it owns for the whole program, and a weight read in blocks by a
product's rTasks is owned block by block by the tiles that read them (:mod:`.codegen`).  When a
weight takes a sizeable part of the chip, how finely its rTasks cut it decides how evenly the
tiles hold it: each tile holds about ``ceil(rTasks / tiles)`` blocks of it in the superstep that
reads it.  The wavefront scheduler, given a wave with more rTasks than vEUs, moves ops to kernels
with larger tiles (less work per output element), which for such a weight means larger blocks and
a few tiles with two or three of them: real:vgg19's fc6 (411 MB), split along K into slices whose
blocks of 8 columns would have given each tile at most 311 KiB, was scheduled with blocks of 32
and 64 columns, and tile 872 then had to hold 553 KiB of fc6 in one superstep.

So for a node with a constant input larger than :data:`STATIONARY_FRACTION` of the chip's SRAM,
only the candidate kernels whose rTasks read the smallest block of that input are offered, when
that finest cut has at most half as many rTasks as there are tiles: each of its rTasks can then
have a tile, and a coarser cut buys no parallelism, it only puts the weight on fewer tiles.  (With
more rTasks than that, the earliest-start scheduler gives a few tiles one more rTask than the
others, and blocks of the finest cut ended three on a tile of the 32-tile IPU of
tests/ipu/test_ipu_relief.py, where the scheduler's own cut placed.)  The split-k pass
(:mod:`.passes`) chose its K slices for blocks of that size.  Smaller weights keep every candidate
(the scheduler's choice of speed).
"""

from __future__ import annotations

import math

import numpy as np

from rammer.ir import Graph, Node
from rammer.rtask import RKernel
from rammer.vdevice import VDevice

from .placement import box_volume, is_static

#: A constant input larger than this fraction of the chip's SRAM (14 MiB on a GC200) is read only
#: through the kernels that cut it finest.
STATIONARY_FRACTION = 1 / 64


def chip_bytes(vd: VDevice) -> int:
    """The SRAM of all the tiles of ``vd`` (its vEUs' local memories)."""
    return vd.num_veus * vd.veu.local_mem_bytes


def _block_elements(kernel: RKernel, slot: int) -> int | None:
    """Elements of input ``slot`` that the kernel's first rTask reads (its blocks are alike)."""
    if kernel.num_rtasks == 0:
        return None
    reads = [box for s, box in kernel.accesses(0).reads if s == slot]
    return max((box_volume(b) for b in reads), default=None)


def finest_weight_cut(kernels: list[RKernel], node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """``kernels`` less those that read a large constant input of ``node`` in larger blocks than
    the finest of them (see the module docstring); ``kernels`` itself when nothing is dropped."""
    if len(kernels) < 2:
        return kernels
    limit = chip_bytes(vd) * STATIONARY_FRACTION
    tiles = vd.num_veus // int(vd.extra.get("veus_per_tile", 1))
    kept = kernels
    for slot, name in enumerate(node.inputs):
        if not name or name not in graph.initializers or is_static(graph, name):
            continue
        info = graph.value_info.get(name)
        if info is None or info.shape is None:
            continue
        if math.prod(info.shape) * info.np_dtype.itemsize <= limit:
            continue
        blocks = [(_block_elements(k, slot), k) for k in kept]
        sizes = [b for b, _ in blocks if b is not None]
        if not sizes:
            continue
        finest = min(sizes)
        fine = [k for b, k in blocks if b == finest]
        if max(k.num_rtasks for k in fine) > tiles // 2:
            continue  # the finest cut already crowds the tiles: the scheduler's choice stands
        kept = [k for b, k in blocks if b is None or b == finest]
    return kept


# --- Compute moved to its weights -------------------------------------------------------------
#
# The lowering owns each piece of a constant (a block its first consumer's rTasks read, when those
# blocks tile it) on the tile of the rTask that reads it, up to a cap on the constant bytes a tile
# owns; past the cap, pieces went to the least-loaded tile and their reader received them.  When the
# model's constants take more than half of every tile on average (real:vgg19: 381 KiB of a 624 KiB
# tile), every tile is past that cap by the last layers, so their weight blocks were owned by tiles
# that do not read them and received, several in one superstep, on top of what the reader already
# owns.  Weight-stationary placement moves the reader instead: the rTask runs on the tile that will
# own its block, chosen so that each tile's constants stay under its cap.


def constant_cap(tile_bytes: int, num_tiles: int, constant_bytes: int) -> int:
    """The constant bytes a tile may own: half of it, or when the model's constants take more than
    that on average, the average share plus a sixteenth of the tile (their readers need the rest)."""
    share = -(-constant_bytes // max(1, num_tiles))
    return max(tile_bytes // 2, share + tile_bytes // 16)


def weight_stationary_tiles(tiles: np.ndarray, anchors: list[tuple[int, int]], load: np.ndarray,
                            capacity: np.ndarray) -> np.ndarray:
    """The tiles of one op's rTasks (``tiles``, as scheduled) with each rTask that is the first reader
    of a constant piece moved, with its piece, to a tile that can own it.

    ``anchors``: (rTask index, bytes of the constant pieces it reads first), in rTask order; ``load``:
    the constant bytes each tile owns so far; ``capacity``: what each tile may own.  An anchor stays on
    its tile when the pieces fit there, else it goes to the tile with the most room left.  No tile runs
    more rTasks of the op than the busiest did as scheduled, so the op's parallelism, and its compute
    time on the busiest tile, stay as the scheduler chose them."""
    new = tiles.copy()
    if not anchors:
        return new
    num_tiles = len(load)
    limit = int(np.bincount(tiles, minlength=num_tiles).max())
    anchored = np.zeros(len(tiles), dtype=bool)
    anchored[[r for r, _ in anchors]] = True
    count = np.bincount(tiles[~anchored], minlength=num_tiles)
    room = capacity.astype(np.float64) - load
    for r, nbytes in anchors:
        t = int(tiles[r])
        if room[t] >= nbytes and count[t] < limit:
            target = t
        else:
            target = int(np.argmax(np.where(count < limit, room, -np.inf)))
        new[r] = target
        count[target] += 1
        room[target] -= nbytes
    return new
