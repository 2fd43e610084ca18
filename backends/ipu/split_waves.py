"""Waves split into supersteps that each give a tile at most one rTask with remote reads.

A tile holds the boxes it receives during their superstep, so a tile that runs several rTasks of a
wave in one superstep holds all their received boxes at once.  Under memory pressure that is what
overflowed real:vgg19: its conv partials (2,240 rTasks of conv3_2 for 1,472 tiles) put two rTasks on
hundreds of tiles, each receiving a 57 KiB weight block and 34 KiB of input rows beside the ~400 KiB
of constants the tile owns for the whole program.

Here the rTasks of a wave that read from other tiles are spread over consecutive supersteps, the
``j``-th of them on each tile in the wave's ``j``-th superstep (the others in its first): the ops of
one wave do not depend on each other (a wave is 1 + the latest wave of an op's predecessors), so any
such order is valid, and each tile then holds the received boxes of one rTask at a time.  The
compute each tile does is the same; the wave pays one sync per extra superstep, and a box that two
rTasks of a tile read is received twice.  The lowering builds this program only when the waves
themselves overflow (:func:`.codegen.lower`).
"""

from __future__ import annotations

import numpy as np


def split_waves(wave: np.ndarray, tile_of: np.ndarray, receives: np.ndarray) -> np.ndarray:
    """The superstep of each rTask: its wave's first superstep plus its rank among the rTasks of the
    same wave and tile that receive data (``receives``; 0 for those that do not), the waves' supersteps
    in wave order."""
    n = len(wave)
    if not n:
        return wave.copy()
    rank = np.zeros(n, dtype=np.int64)
    idx = np.flatnonzero(receives)
    if len(idx):
        order = idx[np.lexsort((idx, tile_of[idx], wave[idx]))]
        key_w, key_t = wave[order], tile_of[order]
        new_group = np.r_[True, (key_w[1:] != key_w[:-1]) | (key_t[1:] != key_t[:-1])]
        starts = np.flatnonzero(new_group)
        group_start = starts[np.cumsum(new_group) - 1]
        rank[order] = np.arange(len(order)) - group_start
    num_waves = int(wave.max()) + 1
    depth = np.ones(num_waves, dtype=np.int64)
    np.maximum.at(depth, wave, rank + 1)
    first = np.concatenate([[0], np.cumsum(depth)[:-1]])
    return first[wave] + rank
