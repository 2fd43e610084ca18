"""One tensor's remote reads, kept as (reader box, source slice) pairs; exchange boxes derived on demand.

A remote read is an rTask's declared read box overlapping a slice that another tile owns; its
exchange carries the intersection of the two.  real:resnet50 has 12.8 M of them (and as many distinct
exchanges) but only about 212,000 read boxes: each read box overlaps some 60 slices.  The lowering kept
a row per remote read (reading rTask, tiles, intersection box, source slice: 36 bytes per distinct read
and 8 per read, about 460 MB) for every candidate program.  Here a tensor keeps each read box once
(its rTask and bounds) and, per remote read, only the index of its source slice, grouped by read box;
the source tile, destination tile, intersection box and bytes of a distinct read are computed from
those when asked, a batch of rows at a time (:meth:`RemoteReads.take`).

Distinct reads (one exchange per superstep each) are numbered in the order of their first remote read.
Two remote reads are the same exchange when they have the same destination tile, source slice and
box (two rTasks of a tile reading the same rows); such repeats are rare (0.2% on real:resnet50), so
they are kept as a short list beside the pairs: distinct read ``g`` is the ``g``-th remote read that
is not a repeat.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .placement import distinct_columns, narrowest_int

#: Distinct reads computed per numpy step by :meth:`RemoteReads.take`.
TAKE_BATCH = 1 << 16


def sorted_distinct(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` for a 1-d integer array, by a sort and a neighbour compare: numpy 2.3+'s
    ``np.unique`` without ``return_*`` takes a hash-based path that was 30x slower here (1.4 s for 2 M
    int64; 118 s of a 246 s ResNet-50 ipu compile)."""
    k = np.sort(x)
    return k[np.r_[True, k[1:] != k[:-1]]] if k.size else k


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Boxes ``a`` and ``b`` (both (n, ndim, 2)) intersected, in ``a``'s integer type."""
    return np.stack([np.maximum(a[..., 0], b[..., 0]), np.minimum(a[..., 1], b[..., 1])], axis=-1).astype(a.dtype)


class RemoteReads:
    """The remote reads of one tensor and the distinct reads (exchanges) they make.

    ``read_rtask[r]`` and ``read_box[r]`` are read box ``r``'s rTask and bounds; its remote reads are
    pairs ``read_start[r]:read_start[r + 1]``, pair ``p`` reading slice ``pair_slice[p]``.  ``repeat``
    (sorted) are the pairs that repeat an earlier pair's exchange, ``repeat_of`` the distinct read each
    repeats.  The tensor's slices (``slice_boxes``, ``slice_owner``) and the rTasks' tiles (``tile_of``)
    are the lowering's arrays, shared, not copied."""

    def __init__(self, read_rtask: np.ndarray, read_box: np.ndarray, read_start: np.ndarray, pair_slice: np.ndarray,
                 slice_boxes: np.ndarray, slice_owner: np.ndarray, tile_of: np.ndarray, num_tiles: int,
                 itemsize: int) -> None:
        self.read_rtask, self.read_box, self.read_start, self.pair_slice = read_rtask, read_box, read_start, pair_slice
        # The slices' bounds in the read boxes' narrow integers (a copy per tensor: slices are few).
        self.slice_boxes = slice_boxes.astype(read_box.dtype)
        self.slice_owner, self.tile_of, self.itemsize = slice_owner, tile_of, itemsize
        self.tile_type = tile_type = narrowest_int(num_tiles)
        # Distinct on (destination tile, intersection box, source slice); the source tile follows from the slice.
        # Only the columns are built for this (one tensor at a time, a few tens of MB), none is kept.
        n = len(pair_slice)
        pair_read = self.pair_reads()
        dst = self.tile_of[self.read_rtask[pair_read]].astype(tile_type)
        inter = intersect(np.take(self.read_box, pair_read, axis=0), np.take(self.slice_boxes, pair_slice, axis=0))
        del pair_read
        ndim = inter.shape[1]
        first, group = distinct_columns([dst, *(inter[:, d, e] for d in range(ndim) for e in (0, 1)), pair_slice])
        del dst, inter
        representative = first[group]
        del first, group
        repeat = np.flatnonzero(representative != np.arange(n))
        # A repeat's distinct read: its representative's rank among the pairs that are not repeats.
        rep = representative[repeat]
        self.repeat = repeat
        self.repeat_of = rep - np.searchsorted(repeat, rep)
        # For row -> pair: distinct read g is pair g + (the repeats before it).
        self._repeat_shift = repeat - np.arange(len(repeat))

    @classmethod
    def from_chunks(cls, chunks: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                    slice_boxes: np.ndarray, slice_owner: np.ndarray, tile_of: np.ndarray, num_tiles: int,
                    itemsize: int) -> RemoteReads:
        """From the lowering's per-op chunks: (read rTasks, read boxes, remote reads per read box,
        source slice of each remote read, grouped by read box)."""
        counts = np.concatenate([c[2] for c in chunks])
        read_start = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=read_start[1:])
        return cls(np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]), read_start,
                   np.concatenate([c[3] for c in chunks]), slice_boxes, slice_owner, tile_of, num_tiles, itemsize)

    @property
    def num_pairs(self) -> int:
        return len(self.pair_slice)

    def __len__(self) -> int:
        """The number of distinct reads."""
        return self.num_pairs - len(self.repeat)

    def pair_reads(self) -> np.ndarray:
        """The read box of every remote read."""
        return np.repeat(np.arange(len(self.read_rtask)), np.diff(self.read_start))

    def pair_rtasks(self) -> np.ndarray:
        """The reading rTask of every remote read."""
        return np.repeat(self.read_rtask, np.diff(self.read_start))

    def pair_groups(self) -> np.ndarray:
        """The distinct read of every remote read."""
        n = self.num_pairs
        index_type = np.int32 if n < 2**31 else np.int64
        before = np.zeros(n, dtype=index_type)  # repeats up to each pair
        before[self.repeat] = 1
        np.cumsum(before, out=before)
        group = np.arange(n, dtype=index_type)
        group -= before
        group[self.repeat] = self.repeat_of
        return group

    def exchanges(self, rtask_step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(superstep, distinct read) of each exchange when rTask ``r`` runs in ``rtask_step[r]``: one
        per superstep and distinct read that some rTask of that superstep makes, sorted by superstep,
        then distinct read."""
        count, n = len(self), self.num_pairs
        steps = int(rtask_step.max(initial=0)) + 1
        key_type = np.int32 if steps * max(1, count) < 2**31 else np.int64
        # (superstep, distinct read) as one integer, sorted and without repeats: built in place, one
        # array of the pairs' length at a time (a tensor of real:resnet50 has up to 1.8 M pairs).
        key = np.repeat(rtask_step[self.read_rtask].astype(key_type), np.diff(self.read_start))
        key *= count
        if len(self.repeat):
            key += self.pair_groups().astype(key_type)
        else:
            key += np.arange(n, dtype=key_type)
        key.sort()
        if n:
            key = key[np.r_[True, key[1:] != key[:-1]]]
        return np.divmod(key, max(1, count))

    def _rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(read box, pair) of distinct reads ``rows``."""
        pair = rows + np.searchsorted(self._repeat_shift, rows, side="right") if len(self.repeat) else rows
        return np.searchsorted(self.read_start, pair, side="right") - 1, pair

    def _bytes(self, read: np.ndarray, sid: np.ndarray) -> np.ndarray:
        """Bytes of the intersections of read boxes ``read`` with slices ``sid`` (rows gathered with
        ``np.take``, 3x faster than fancy indexing of the 3-d arrays)."""
        a, b = np.take(self.read_box, read, axis=0), np.take(self.slice_boxes, sid, axis=0)
        extent = np.minimum(a[..., 1], b[..., 1])
        extent -= np.maximum(a[..., 0], b[..., 0])
        return self._extent_bytes(extent, bounds=False)

    def _extent_bytes(self, box: np.ndarray, bounds: bool = True) -> np.ndarray:
        """Bytes of boxes (n, ndim, 2), or of their extents (n, ndim) with ``bounds=False``."""
        extent = box[..., 1] - box[..., 0] if bounds else box
        np.maximum(extent, 0, out=extent)
        out = np.full(len(extent), self.itemsize, dtype=np.int64)
        for d in range(extent.shape[1]):  # a product over a short axis is slower as a reduction
            out *= extent[:, d]
        return out

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(source tile, destination tile, box, bytes, source slice) of distinct reads ``rows``; tiles and
        bounds in the narrowest integers that hold them, computed :data:`TAKE_BATCH` rows at a time into
        the results (the simulator takes a superstep's exchanges of a tensor at once: up to 1.8 M on
        real:resnet50, whose temporaries took 130 MB when computed in one step)."""
        rows = np.asarray(rows)
        n = len(rows)
        src, dst = np.empty(n, dtype=self.tile_type), np.empty(n, dtype=self.tile_type)
        box = np.empty((n, self.read_box.shape[1], 2), dtype=self.read_box.dtype)
        nbytes, sid = np.empty(n, dtype=np.int64), np.empty(n, dtype=self.pair_slice.dtype)
        for lo in range(0, n, TAKE_BATCH):
            at = slice(lo, lo + TAKE_BATCH)
            read, pair = self._rows(rows[at])
            sid[at] = s = self.pair_slice[pair]
            a, b = np.take(self.read_box, read, axis=0), np.take(self.slice_boxes, s, axis=0)
            np.maximum(a[..., 0], b[..., 0], out=box[at, :, 0])
            np.minimum(a[..., 1], b[..., 1], out=box[at, :, 1])
            nbytes[at] = self._extent_bytes(box[at])
            src[at] = self.slice_owner[s]
            dst[at] = self.tile_of[self.read_rtask[read]]
        return src, dst, box, nbytes, sid

    def tiles_bytes(self, rows: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(tile, bytes) of distinct reads ``rows``: the sending tile (``side="src"``) or the receiving one."""
        read, pair = self._rows(np.asarray(rows))
        sid = self.pair_slice[pair]
        tile = self.slice_owner[sid] if side == "src" else self.tile_of[self.read_rtask[read]]
        return tile, self._bytes(read, sid)

    def nbytes_kept(self) -> int:
        """Bytes of the arrays this table keeps (the shared slice and tile arrays excluded)."""
        return sum(int(x.nbytes) for x in (self.read_rtask, self.read_box, self.read_start, self.pair_slice,
                                           self.slice_boxes, self.repeat, self.repeat_of, self._repeat_shift))


def read_chunk(read_index: np.ndarray, slice_index: np.ndarray, read_rtask: np.ndarray, read_box: np.ndarray,
               box_type: type, num_slices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One op's remote reads of a tensor as a chunk for :meth:`RemoteReads.from_chunks`: pair ``j``
    is read box ``read_index[j]`` (of ``read_rtask``, ``read_box``) overlapping slice ``slice_index[j]``.
    Only the read boxes with a remote read are kept, in the narrowest integers that hold the bounds."""
    if len(read_index) > 1 and (read_index[1:] < read_index[:-1]).any():
        order = np.argsort(read_index, kind="stable")
        read_index, slice_index = read_index[order], slice_index[order]
    starts = np.flatnonzero(np.r_[True, read_index[1:] != read_index[:-1]])
    used = read_index[starts]
    counts = np.diff(np.r_[starts, len(read_index)])
    return (read_rtask[used].astype(np.int32), read_box[used].astype(box_type), counts,
            slice_index.astype(narrowest_int(num_slices)))
