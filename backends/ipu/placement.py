"""Where tensor slices live: constants and graph inputs cut into chunks and placed
on tiles, and each tile's SRAM high-water mark over the supersteps.

A constant or graph input whose first consumer's rTasks read disjoint boxes that cover it (a
table cut along its width by a split Gather, a weight cut by the output columns of a MatMul)
is partitioned along those boxes (:func:`reader_partition`): each piece, cut into chunks, lives
on the tile of the rTask that reads it, so the reads need no exchange.  Otherwise it is cut
along its first axis (:func:`chunk_boxes`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from rammer.ir import Graph
from rammer.rtask import Box, boxes_overlap

from .bsp import IpuPlacementError

#: Constants and graph inputs are cut along their first axis into slices of at most this size.
CHUNK_BYTES = 16 * 1024


#: Integer constants up to this many elements (shapes, axes, split sizes) are compile-time
#: parameters of the vertex code, present on every tile, not tensor slices.
STATIC_MAX_ELEMENTS = 64


def is_static(graph, name: str) -> bool:
    value = graph.initializers.get(name)
    return value is not None and not np.issubdtype(value.dtype, np.floating) and value.size <= STATIC_MAX_ELEMENTS


def chunk_boxes(shape: Sequence[int], itemsize: int, chunk_bytes: int = CHUNK_BYTES) -> list[Box]:
    """``shape`` cut into boxes of at most ``chunk_bytes`` (at least one element each): single
    indices of the leading axes, then ranges of the first axis whose inner rows fit."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return [()]
    if any(d == 0 for d in shape):
        return [tuple((0, d) for d in shape)]
    axis = 0
    while axis < len(shape) - 1 and itemsize * math.prod(shape[axis:]) > chunk_bytes \
            and itemsize * math.prod(shape[axis + 1:]) > chunk_bytes:
        axis += 1
    inner = itemsize * math.prod(shape[axis + 1:])
    per = max(1, chunk_bytes // max(1, inner))
    rest = tuple((0, d) for d in shape[axis + 1:])
    boxes = []
    for lead in np.ndindex(*shape[:axis]):
        head = tuple((i, i + 1) for i in lead)
        for lo in range(0, shape[axis], per):
            boxes.append(head + ((lo, min(shape[axis], lo + per)),) + rest)
    return boxes


def chunk_box(box: Box, itemsize: int, chunk_bytes: int = CHUNK_BYTES) -> list[Box]:
    """``box`` (a region of a tensor) cut as :func:`chunk_boxes` cuts a whole tensor."""
    extent = tuple(hi - lo for lo, hi in box)
    return [tuple((lo + a, lo + b) for (lo, _), (a, b) in zip(box, part))
            for part in chunk_boxes(extent, itemsize, chunk_bytes)]


#: Read boxes compared pairwise at most (their count squared bounds the overlap matrix).
_MAX_PARTITION_BOXES = 4096


def reader_partition(shape: Sequence[int], read_boxes: Sequence[Box]) -> list[Box] | None:
    """The distinct ``read_boxes`` when they are pairwise disjoint and cover ``shape`` exactly
    (the readers tile the tensor), else None."""
    shape = tuple(int(d) for d in shape)
    distinct = list(dict.fromkeys(tuple((int(lo), int(hi)) for lo, hi in b) for b in read_boxes))
    if len(distinct) < 2 or len(distinct) > _MAX_PARTITION_BOXES or not shape:
        return None
    arr = boxes_array(distinct, len(shape))
    if (arr[..., 0] < 0).any() or (arr[..., 1] > np.asarray(shape)).any() or (arr[..., 1] <= arr[..., 0]).any():
        return None
    if int(np.prod(arr[..., 1] - arr[..., 0], axis=1).sum()) != math.prod(shape):
        return None
    overlap = boxes_overlap(arr, arr)
    np.fill_diagonal(overlap, False)
    return None if overlap.any() else distinct


def overlapping_pairs(reads: np.ndarray, slices: np.ndarray, budget: int = 1 << 21
                      ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The pairs ``(i, j)`` of boxes ``reads[i]`` and ``slices[j]`` (arrays shaped (n, ndim, 2))
    that overlap, yielded in blocks of about ``budget`` candidate pairs.

    Not the whole n x m overlap matrix: the slices are sorted by their start along one axis
    (the one giving the fewest candidates), and a read is compared only with the slices whose
    start lies between its own start minus the longest slice on that axis and its end.  For the
    tiled tensors of a model that is close to the pairs that overlap, so the cost follows the
    reads and exchanges, not their product."""
    n, m = len(reads), len(slices)
    if n == 0 or m == 0:
        return
    ndim = slices.shape[1]
    if ndim == 0:
        yield np.repeat(np.arange(n), m), np.tile(np.arange(m), n)
        return
    best = None
    for axis in range(ndim):
        order = np.argsort(slices[:, axis, 0], kind="stable")
        starts = slices[order, axis, 0]
        longest = int((slices[:, axis, 1] - slices[:, axis, 0]).max())
        first = np.searchsorted(starts, reads[:, axis, 0] - longest, side="right")
        stop = np.searchsorted(starts, reads[:, axis, 1], side="left")
        count = np.maximum(stop - first, 0)
        total = int(count.sum())
        if best is None or total < best[0]:
            best = (total, order, first, count)
    assert best is not None
    _, order, first, count = best
    ends = np.cumsum(count)
    lo = 0
    while lo < n:
        # Reads [lo, hi): at least one, and about ``budget`` candidates.
        hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + budget, side="right")))
        hi = min(hi, n)
        c = count[lo:hi]
        ri = np.repeat(np.arange(lo, hi), c)
        if len(ri):
            offset = np.arange(len(ri)) - np.repeat(np.cumsum(c) - c, c)
            sj = order[first[ri] + offset]
            a, b = reads[ri], slices[sj]
            hit = np.all(np.maximum(a[..., 0], b[..., 0]) < np.minimum(a[..., 1], b[..., 1]), axis=-1)
            yield ri[hit], sj[hit]
        lo = hi


def box_volume(box: Box) -> int:
    return math.prod(max(0, hi - lo) for lo, hi in box)


def boxes_array(boxes: Sequence[Box], ndim: int) -> np.ndarray:
    if not boxes:
        return np.zeros((0, ndim, 2), dtype=np.int64)
    return np.asarray(boxes, dtype=np.int64).reshape(len(boxes), ndim, 2)


def distinct_columns(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For rows given as equal-length integer columns: the index of one row of each distinct row,
    in the rows' lexicographic order, and for each row the index of its distinct row.  The columns
    are packed, in order, into as few int64 words as their value ranges allow (numpy sorts rows of
    several columns as opaque bytes, several times slower; the lowering's exchange lists have
    millions of rows), and never stacked into one 2-d copy."""
    n = len(columns[0]) if columns else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    words: list[np.ndarray] = []
    word: np.ndarray | None = None
    room = 1
    for col in columns:
        low = int(col.min())
        s = int(col.max()) - low + 1
        if word is None or room * s >= 1 << 62:
            if word is not None:
                words.append(word)
            word, room = np.zeros(n, dtype=np.int64), 1
        word *= s
        word += col
        word -= low
        room *= s
    assert word is not None
    words.append(word)
    if len(words) == 1:
        _, first, inverse = np.unique(words[0], return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)
    order = np.lexsort(words[::-1])
    first = np.ones(n, dtype=bool)
    for w in words:
        ws = w[order]
        first[1:] &= ws[1:] == ws[:-1]
    first = ~first
    first[0] = True
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return order[first], inverse


def unique_rows(rows: np.ndarray, return_inverse: bool = False):
    """The distinct rows of a 2-d integer array in lexicographic order, as ``np.unique(rows,
    axis=0)`` gives them (and with ``return_inverse``, the index of each row's distinct row)
    (:func:`distinct_columns`)."""
    if len(rows) == 0:
        return (rows, np.zeros(0, dtype=np.int64)) if return_inverse else rows
    first, inverse = distinct_columns([rows[:, c] for c in range(rows.shape[1])])
    return (rows[first], inverse) if return_inverse else rows[first]


def narrowest_int(high: int) -> type:
    """The narrowest of int16, int32 and int64 that holds every integer in [-high, high]."""
    return np.int16 if high < 2**15 else np.int32 if high < 2**31 else np.int64


#: Tiles x supersteps up to which :func:`peak_per_tile` sums on a dense grid (no sort).
_DENSE_PEAK_CELLS = 1 << 26


def peak_per_tile(num_tiles: int, tile: np.ndarray, start: np.ndarray, end: np.ndarray,
                  nbytes: np.ndarray) -> np.ndarray:
    """Peak bytes per tile of intervals ``[start, end]`` (supersteps) holding ``nbytes`` on ``tile``.
    An interval ending at ``s - 1`` and one starting at ``s`` do not overlap."""
    peak = np.zeros(num_tiles, dtype=np.int64)
    if len(tile) == 0:
        return peak
    steps = int(max(end.max(), start.max())) + 2
    if num_tiles * steps <= _DENSE_PEAK_CELLS and start.min() >= 0:
        # A difference array over (tile, superstep): + at the start, - after the end, summed along steps.
        diff = np.bincount(tile * steps + start, weights=nbytes, minlength=num_tiles * steps)
        diff -= np.bincount(tile * steps + end + 1, weights=nbytes, minlength=num_tiles * steps)
        live = np.cumsum(diff.reshape(num_tiles, steps), axis=1)
        return np.rint(live.max(axis=1)).astype(np.int64).clip(min=0)
    ev_tile = np.concatenate([tile, tile])
    ev_time = np.concatenate([start, end + 1])
    ev_delta = np.concatenate([nbytes, -nbytes])
    # At equal time, frees (negative) first.
    order = np.lexsort((ev_delta >= 0, ev_time, ev_tile))
    ev_tile, ev_delta = ev_tile[order], ev_delta[order]
    running = np.cumsum(ev_delta)
    first = np.flatnonzero(np.r_[True, ev_tile[1:] != ev_tile[:-1]])
    before = np.r_[0, running[first[1:] - 1]] if len(first) > 1 else np.array([0])
    offsets = np.repeat(before, np.diff(np.r_[first, len(ev_tile)]))
    local = running - offsets
    np.maximum.at(peak, ev_tile, local)
    return peak


def live_at(tile_id: int, superstep: int, tile: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Indices of the intervals live on ``tile_id`` at ``superstep``."""
    return np.flatnonzero((tile == tile_id) & (start <= superstep) & (end >= superstep))


def refuse_over_chip(graph: Graph, num_tiles: int, tile_bytes: int, vdevice_name: str) -> None:
    """Raise :class:`IpuPlacementError` when the model's constants and
    graph inputs alone are larger than all the tiles' SRAM together (about 900 MB on a GC200):
    no placement can hold them, however they are split.  The message names the largest tensors
    and their bytes."""
    names = list(graph.initializers) + [t.name for t in graph.inputs if t.name not in graph.initializers]
    sizes = []
    for name in names:
        info = graph.value_info.get(name)
        if info is not None and info.shape is not None and not is_static(graph, name):
            itemsize = 1 if info.dtype == "bool" else np.dtype(info.dtype).itemsize
            sizes.append((math.prod(info.shape) * itemsize, name))
    total, chip = sum(b for b, _ in sizes), num_tiles * tile_bytes
    if total <= chip:
        return
    largest = ", ".join(f"'{n}' {b / 1e6:.1f} MB" for b, n in sorted(sizes, reverse=True)[:3] if b >= total // 100)
    raise IpuPlacementError(
        f"the model does not fit the {vdevice_name}'s In-Processor memory: its constants and inputs take "
        f"{total / 1e6:.1f} MB, more than the {chip / 1e6:.1f} MB of its {num_tiles} tiles' SRAM together "
        f"(largest: {largest}); run it on several IPUs (not supported by this backend) or on another --backend")
