"""Bytes live on each tile in each superstep, summed group by group.

A candidate program's memory is a set of intervals ``[start, end]`` (supersteps) holding bytes on a
tile: owned slices, code, received boxes.  The lowering concatenated all of them into four int64
arrays (and as many for the exchange times): real:resnet50's 12.8 M exchanges made those about
1.2 GB per candidate program, half the compile's peak RSS.  Here each group (a tensor's slices, a
tensor's exchanges) is added to a (tiles, supersteps) difference grid in batches of at most
:data:`BATCH` intervals, so the temporaries follow the batch and the grid, not the exchange count.
The sums are of integers below 2**53 in float64: exact, so equal to the concatenated sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

#: Intervals added to the grid per numpy step.
BATCH = 1 << 18
#: Grid cells (tiles x supersteps) summed at once; a larger grid is summed a block of tiles at a time.
GRID_CELLS = 1 << 24


@dataclass(frozen=True)
class Intervals:
    """Intervals ``[start, end]`` holding ``nbytes`` on ``tile``, all with one label."""

    tile: np.ndarray
    start: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray
    label: str
    #: False for what stays on its tile for the whole program (constants and graph inputs).
    movable: bool = True
    #: When set, interval ``j`` has tile ``tile[index[j]]`` and bytes ``nbytes[index[j]]`` (a table
    #: shared by many intervals); ``start`` and ``end`` have a row per interval.
    index: np.ndarray | None = None
    #: When set (with ``index``), the (tile, bytes) of table rows, computed on demand instead of read
    #: from ``tile`` and ``nbytes`` (an :class:`~.bsp.ExchangeGroup`'s table of remote reads).
    lookup: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    @classmethod
    def of_table(cls, start: np.ndarray, end: np.ndarray, index: np.ndarray,
                 lookup: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], label: str) -> Intervals:
        """Intervals ``[start[j], end[j]]`` holding table row ``index[j]``, whose (tile, bytes) ``lookup`` gives."""
        empty = np.zeros(0, dtype=np.int64)
        return cls(empty, start, end, empty, label, index=index, lookup=lookup)

    def __len__(self) -> int:
        return len(self.start)

    def tiles_bytes(self, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        at = self.index[rows] if self.index is not None else rows
        if self.lookup is not None:
            tile, nbytes = self.lookup(np.asarray(at))
            return np.asarray(tile, dtype=np.int64), np.asarray(nbytes)
        return np.asarray(self.tile[at], dtype=np.int64), np.asarray(self.nbytes[at])


def _batches(groups: Sequence[Intervals], lo: int, hi: int, movable_only: bool
             ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(tile - lo, start, end, bytes) of the intervals on tiles [lo, hi), at most :data:`BATCH` at a time."""
    for g in groups:
        if movable_only and not g.movable:
            continue
        for b in range(0, len(g), BATCH):
            rows = slice(b, b + BATCH)
            t, nbytes = g.tiles_bytes(rows)
            # (supersteps may be int16: no products in that width)
            start, end = np.asarray(g.start[rows], dtype=np.int64), np.asarray(g.end[rows], dtype=np.int64)
            keep = (t >= lo) & (t < hi)
            if keep.all():
                yield t - lo, start, end, nbytes
            elif keep.any():
                yield t[keep] - lo, start[keep], end[keep], nbytes[keep]


def live_grid(num_tiles: int, num_steps: int, groups: Sequence[Intervals], movable_only: bool = False,
              tiles: tuple[int, int] | None = None) -> np.ndarray:
    """Bytes live on each tile of ``tiles`` (a range; all by default) in each superstep, as an int64
    (tiles, max(1, num_steps)) array; ``movable_only`` leaves out the groups that are not movable."""
    lo, hi = tiles if tiles is not None else (0, num_tiles)
    steps = max(1, num_steps) + 1
    diff = np.zeros((hi - lo) * steps)
    for t, start, end, nbytes in _batches(groups, lo, hi, movable_only):
        w = nbytes.astype(np.float64)
        diff += np.bincount(t * steps + np.maximum(start, 0), weights=w, minlength=len(diff))
        diff -= np.bincount(t * steps + np.maximum(end, 0) + 1, weights=w, minlength=len(diff))
    live = np.cumsum(diff.reshape(hi - lo, steps), axis=1)[:, :steps - 1]
    return np.rint(live).astype(np.int64)


def peak_bytes(num_tiles: int, num_steps: int, groups: Sequence[Intervals], movable_only: bool = False
               ) -> np.ndarray:
    """Each tile's peak of :func:`live_grid` (at least 0), summed a block of tiles at a time."""
    per_block = max(1, GRID_CELLS // (max(1, num_steps) + 1))
    peak = np.zeros(num_tiles, dtype=np.int64)
    for lo in range(0, num_tiles, per_block):
        hi = min(num_tiles, lo + per_block)
        peak[lo:hi] = live_grid(num_tiles, num_steps, groups, movable_only, (lo, hi)).max(axis=1).clip(min=0)
    return peak


def busiest_per_step(num_tiles: int, num_steps: int, groups: Sequence[Intervals]) -> np.ndarray:
    """Per superstep, the most bytes on one tile: ``groups`` hold one-superstep intervals (``start``
    the superstep), summed per (superstep, tile) over all of them."""
    per_block = max(1, GRID_CELLS // max(1, num_steps))
    busiest = np.zeros(num_steps)
    for lo in range(0, num_tiles, per_block):
        hi = min(num_tiles, lo + per_block)
        sums = np.zeros(num_steps * (hi - lo))
        for t, start, _, nbytes in _batches(groups, lo, hi, False):
            sums += np.bincount(start * (hi - lo) + t, weights=nbytes.astype(np.float64), minlength=len(sums))
        if len(sums):
            busiest = np.maximum(busiest, sums.reshape(num_steps, hi - lo).max(axis=1))
    return busiest


def labelled_at(groups: Sequence[Intervals], tile: int, step: int) -> dict[str, int]:
    """Bytes per label live on ``tile`` in ``step``, labels in the order the groups first hold some."""
    per: dict[str, int] = {}
    for g in groups:
        tiles, nbytes = g.tiles_bytes(slice(None))
        hit = (tiles == tile) & (g.start <= step) & (g.end >= step)
        if hit.any():
            per[g.label] = per.get(g.label, 0) + int(nbytes[hit].sum())
    return per
