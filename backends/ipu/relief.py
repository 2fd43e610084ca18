"""Constant slices moved off tiles that overflow, to tiles with free SRAM.

The lowering first owns each constant or graph-input chunk on the tile of its first reader (no
exchange for that read).  A tile keeps what it owns for the whole program, so a tile whose early
rTasks read large weights (a column of convolutions) may overflow much later, when a large
activation or another weight block arrives (real:zfnet512's fc6 blocks on tile 512; real:resnet50's
res4 activation on tile 14, 4.4 KiB over).  A chunk its owner does not read in the supersteps where
the tile overflows need not live there: owned by a tile with room, it is received by its reader in
the superstep that reads it, and the overflowing tile is lighter in every other superstep.

:func:`relief_moves` chooses such moves from a program that overflowed; the lowering then places
the chunks again with those owners (``lower``'s retries), and the SRAM check decides as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rammer.rtask import Box

#: Bytes kept free under the SRAM on an overflowing tile and on a host, for what the moves change
#: (the received chunk in its reader's superstep, the exchange of its neighbours).
MARGIN_FRACTION = 1 / 32

#: The key of a constant chunk: its tensor and box.
ChunkKey = tuple[str, Box]


def live_per_step(num_tiles: int, num_steps: int, tile: np.ndarray, start: np.ndarray, end: np.ndarray,
                  nbytes: np.ndarray) -> np.ndarray:
    """Bytes live on each tile in each superstep, as a (tiles, supersteps) array."""
    steps = num_steps + 1
    diff = np.bincount(tile * steps + np.maximum(start, 0), weights=nbytes, minlength=num_tiles * steps)
    diff -= np.bincount(tile * steps + np.maximum(end, 0) + 1, weights=nbytes, minlength=num_tiles * steps)
    return np.cumsum(diff.reshape(num_tiles, steps), axis=1)[:, :num_steps]


def relief_moves(sram: int, live: np.ndarray, const_slices: Sequence[tuple[str, Box, int, int]],
                 read_steps: Mapping[tuple[str, int], np.ndarray]) -> dict[ChunkKey, int]:
    """New owners for constant chunks of the tiles whose ``live`` bytes (tiles x supersteps) pass
    ``sram``.  ``const_slices``: (tensor, box, owner, bytes) of every constant or input chunk;
    ``read_steps[(tensor, tile)]``: the supersteps in which that tile's rTasks read the tensor.

    For each overflowing tile, while some superstep is over the SRAM less a margin, the largest chunk
    it does not read in its worst superstep is moved (it is then received in the supersteps that
    read it); each goes to the tile whose peak is then lowest, if it fits there with the margin.
    Empty when nothing can be moved."""
    limit = sram - int(sram * MARGIN_FRACTION)
    peak = live.max(axis=1) if live.size else np.zeros(len(live))
    over = np.flatnonzero(peak > limit)
    if not len(over):
        return {}
    by_owner: dict[int, list[tuple[int, str, Box]]] = {}
    over_set = set(over.tolist())
    for name, box, owner, nbytes in const_slices:
        if owner in over_set:
            by_owner.setdefault(owner, []).append((nbytes, name, box))
    host_peak = peak.astype(np.float64).copy()
    host_peak[over] = np.inf  # an overflowing tile hosts nothing
    moves: dict[ChunkKey, int] = {}
    for tile in over.tolist():
        # What the tile holds per superstep as chunks leave it: a moved chunk is gone from every
        # superstep but those in which the tile reads it (it is received there).
        now = live[tile].astype(np.float64).copy()
        left = sorted(by_owner.get(tile, []), key=lambda c: -c[0])
        while left and now.max() > limit:
            worst = int(np.argmax(now))
            for j, (nbytes, name, box) in enumerate(left):
                steps = read_steps.get((name, tile), np.zeros(0, np.int64))
                if worst in steps:
                    continue  # read in that superstep: received there instead, no relief
                host = int(np.argmin(host_peak))
                if host_peak[host] + nbytes > limit:
                    continue
                host_peak[host] += nbytes
                moves[(name, box)] = host
                now -= nbytes
                now[np.unique(steps)] += nbytes
                del left[j]
                break
            else:
                break  # nothing left relieves the worst superstep
    return moves
