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
from collections import defaultdict

import numpy as np

from rammer.ir import Graph, Node
from rammer.rtask import Box, RKernel
from rammer.schedule import Schedule
from rammer.vdevice import VDevice

from .placement import box_volume, is_static, reader_partition

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


#: The constant bytes a tile may own beyond the average share, as a fraction of the tile, when the
#: model's constants take more than half of every tile (the bins' slack for pieces of uneven size).
CAP_SLACK_FRACTION = 1 / 64


def constant_cap(tile_bytes: int, num_tiles: int, constant_bytes: int) -> int:
    """The constant bytes a tile may own: half of it, or when the model's constants take more than
    that on average, the average share plus :data:`CAP_SLACK_FRACTION` of the tile (their readers
    need the rest)."""
    share = -(-constant_bytes // max(1, num_tiles))
    return max(tile_bytes // 2, share + int(tile_bytes * CAP_SLACK_FRACTION))


def weight_stationary_tiles(ops: list[tuple[np.ndarray, list[tuple[int, int]]]], load: np.ndarray,
                            capacity: np.ndarray) -> list[np.ndarray]:
    """The tiles of the rTasks of some ops, each given as (its rTasks' tiles as scheduled, its
    anchors), with each rTask that is the first reader of a constant piece moved, with its piece, to a
    tile that can own it.

    An anchor is (rTask index in its op, bytes of the constant pieces it reads first); ``load``: the
    constant bytes each tile owns so far; ``capacity``: what each tile may own.  The pieces are placed
    largest first, over all the ops given (a bin packing: the lowering passes every op of a model
    whose constants fill the tiles, so that real:vgg19's 128 KiB blocks of fc7 and fc8, read last, are
    not left for tiles that its 46 KiB blocks of fc6 already filled).  An anchor stays on its tile
    when its pieces fit there, else it goes to the tile with the most room left.  No tile runs more
    rTasks of an op than the busiest did as scheduled, so each op's parallelism, and its compute time
    on the busiest tile, stay as the scheduler chose them."""
    num_tiles = len(load)
    room = capacity.astype(np.float64) - load
    out, limits, counts = [], [], []
    for tiles, anchors in ops:
        out.append(tiles.copy())
        limits.append(int(np.bincount(tiles, minlength=num_tiles).max()) if len(tiles) else 0)
        anchored = np.zeros(len(tiles), dtype=bool)
        anchored[[r for r, _ in anchors]] = True
        counts.append(np.bincount(tiles[~anchored], minlength=num_tiles))
    order = sorted(((-nbytes, j, r) for j, (_, anchors) in enumerate(ops) for r, nbytes in anchors))
    for neg, j, r in order:
        nbytes, tiles, count, limit = -neg, ops[j][0], counts[j], limits[j]
        t = int(tiles[r])
        if room[t] >= nbytes and count[t] < limit:
            target = t
        else:
            target = int(np.argmax(np.where(count < limit, room, -np.inf)))
        out[j][r] = target
        count[target] += 1
        room[target] -= nbytes
    return out


def constant_bytes_of(graph: Graph) -> int:
    """Bytes of the constants of ``graph`` that are tensor slices (not compile-time parameters)."""
    return sum(np.asarray(v).nbytes for name, v in graph.initializers.items() if not is_static(graph, name))


def plan_all_pieces(schedule: Schedule, graph: Graph, tile_of: np.ndarray, load: np.ndarray,
                     capacity: np.ndarray) -> dict[int, np.ndarray]:
    """Per op index, the tiles of its rTasks after :func:`weight_stationary_tiles` placed
    the pieces of every constant, each with its first reader, over all the ops at once."""
    seen: set[str] = set()
    which, plan_ops = [], []
    for i, op in enumerate(schedule.ops):
        node = graph.nodes[i]
        slots = {s for s, name in enumerate(node.inputs)
                 if name and name in graph.initializers and name not in seen and not is_static(graph, name)}
        seen.update(node.inputs[s] for s in slots)
        if not slots:
            continue
        k = op.kernel
        by_slot: dict[int, list[tuple[int, Box]]] = defaultdict(list)
        for r in range(k.num_rtasks):
            for slot, box in k.accesses(r).reads:
                if slot in slots:
                    by_slot[slot].append((r, box))
        anchors = stationary_anchors(graph, node, by_slot, {})
        if anchors:
            which.append(i)
            plan_ops.append((tile_of[op.first_rtask:op.first_rtask + k.num_rtasks], anchors))
    return dict(zip(which, weight_stationary_tiles(plan_ops, load, capacity)))


def stationary_anchors(graph: Graph, node: Node, by_slot: dict[int, list[tuple[int, Box]]], placed: dict
                        ) -> list[tuple[int, int]]:
    """(rTask, bytes) of the op's rTasks that first read a piece of a constant not placed yet, when the
    op's rTasks read it in blocks that tile it (:func:`.placement.reader_partition`): the pieces
    :func:`weight_stationary_tiles` moves compute to.  (A chunk whose owner a relief round
    fixed elsewhere is received by its reader, as without this placement.)"""
    first_bytes: dict[int, int] = defaultdict(int)
    for slot, reads in by_slot.items():
        name = node.inputs[slot]
        if name in placed or name not in graph.initializers:
            continue
        if reader_partition(graph.value_info[name].shape, [b for _, b in reads]) is None:
            continue
        size = graph.value_info[name].np_dtype.itemsize
        first: dict[Box, int] = {}
        for r, b in reads:
            first.setdefault(tuple((int(lo), int(hi)) for lo, hi in b), r)
        for b, r in first.items():
            first_bytes[r] += box_volume(b) * size
    return sorted(first_bytes.items())
