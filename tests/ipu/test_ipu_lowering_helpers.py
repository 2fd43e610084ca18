"""The lowering's numpy helpers against plain definitions."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.ipu import tile_memory
from rammer.backends.ipu.placement import distinct_columns, narrowest_int, peak_per_tile, unique_rows
from rammer.backends.ipu.tile_memory import Intervals, busiest_per_step, labelled_at, live_grid, peak_bytes


@pytest.mark.parametrize(("cols", "high"), [(3, 5), (12, 1 << 20), (2, 1 << 40), (1, 1)])
def test_unique_rows_is_numpys_unique_along_rows(cols: int, high: int) -> None:
    rng = np.random.default_rng(cols)
    rows = rng.integers(-3, high, (4000, cols))
    rows = np.concatenate([rows, rows[:1500]])
    rng.shuffle(rows)
    assert np.array_equal(unique_rows(rows), np.unique(rows, axis=0))


@pytest.mark.parametrize("high", [5, 1 << 14, 1 << 30])
def test_distinct_columns_of_mixed_widths_is_numpys_unique(high: int) -> None:
    """Columns of different integer widths (int16 tiles and bounds beside int32 indices), never stacked."""
    rng = np.random.default_rng(high)
    cols = [rng.integers(-3, min(high, 1 << 14), 5000).astype(np.int16), rng.integers(0, high, 5000).astype(np.int32),
            rng.integers(0, 3, 5000).astype(np.int16)]
    cols = [np.concatenate([c, c[:2000]]) for c in cols]
    first, inverse = distinct_columns(cols)
    rows = np.stack([c.astype(np.int64) for c in cols], axis=1)
    want, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(rows[first], want) and np.array_equal(inverse, want_inverse.reshape(-1))
    assert all(int(first[i]) == int(np.flatnonzero(inverse == i)[0]) for i in range(0, len(first), 97))  # the first
    assert [narrowest_int(h) for h in (1472, 32767, 32768, 2**31)] == [np.int16, np.int16, np.int32, np.int64]


def test_peak_per_tile_matches_a_step_by_step_sum() -> None:
    rng = np.random.default_rng(7)
    tile = rng.integers(0, 7, 3000)
    start = rng.integers(0, 40, 3000)
    end = start + rng.integers(0, 5, 3000)
    nbytes = rng.integers(0, 100, 3000)
    want = np.zeros(7, dtype=np.int64)
    for t in range(7):
        for step in range(45):
            live = (tile == t) & (start <= step) & (end >= step)
            want[t] = max(want[t], int(nbytes[live].sum()))
    assert np.array_equal(peak_per_tile(7, tile, start, end, nbytes), want)


@pytest.mark.parametrize("grid_cells", [1 << 24, 100])  # one block of tiles; a block per tile or two
def test_tile_memory_grid_sums_groups_as_the_concatenated_intervals(monkeypatch, grid_cells: int) -> None:
    monkeypatch.setattr(tile_memory, "GRID_CELLS", grid_cells)
    monkeypatch.setattr(tile_memory, "BATCH", 333)  # several batches per group
    rng = np.random.default_rng(11)
    tile = rng.integers(0, 7, 3000)
    start = rng.integers(0, 40, 3000)
    end = start + rng.integers(0, 5, 3000)
    nbytes = rng.integers(0, 100, 3000)
    # Four groups, the last an index into a table of (tile, bytes) rows, as an exchange group is.
    table_tile, table_bytes = tile[2000:2500].copy(), nbytes[2000:2500].copy()
    index = rng.integers(0, 500, 1000)
    tile[2000:], nbytes[2000:] = table_tile[index], table_bytes[index]
    groups = [Intervals(tile[a:b], start[a:b], end[a:b], nbytes[a:b], f"g{a}", movable=a > 0)
              for a, b in ((0, 700), (700, 1400), (1400, 2000))]
    groups.append(Intervals(table_tile, start[2000:], end[2000:], table_bytes, "x", index=index))
    assert np.array_equal(peak_bytes(7, 45, groups), peak_per_tile(7, tile, start, end, nbytes))
    moved = slice(700, None)
    assert np.array_equal(peak_bytes(7, 45, groups, movable_only=True),
                          peak_per_tile(7, tile[moved], start[moved], end[moved], nbytes[moved]))
    live = live_grid(7, 45, groups)
    for t, step in ((3, 20), (6, 44)):
        hit = (tile == t) & (start <= step) & (end >= step)
        assert live[t, step] == nbytes[hit].sum()
        assert sum(labelled_at(groups, t, step).values()) == nbytes[hit].sum()
    one_step = [Intervals(g.tile, g.start, g.start, g.nbytes, g.label, index=g.index) for g in groups]
    want = np.zeros(40)
    for step in range(40):
        at = start == step
        want[step] = max(nbytes[at & (tile == t)].sum() for t in range(7))
    assert np.array_equal(busiest_per_step(7, 40, one_step), want)


def _grid(shape: tuple[int, ...], block: tuple[int, ...]) -> np.ndarray:
    cuts = [list(range(0, d, b)) for d, b in zip(shape, block)]
    boxes = [[(lo, min(d, lo + b)) for lo, d, b in zip(corner, shape, block)]
             for corner in np.array(np.meshgrid(*cuts, indexing="ij")).reshape(len(shape), -1).T]
    return np.asarray(boxes, dtype=np.int64).reshape(len(boxes), len(shape), 2)


@pytest.mark.parametrize("budget", [1, 50, 1 << 21])
def test_overlapping_pairs_are_the_overlap_matrix(budget: int) -> None:
    from rammer.backends.ipu.placement import overlapping_pairs
    from rammer.rtask import boxes_overlap

    rng = np.random.default_rng(3)
    slices = _grid((6, 20, 9), (1, 7, 4))  # a written tensor, tiled
    lo = rng.integers(0, [6, 20, 9], (300, 3))
    hi = lo + rng.integers(1, 8, (300, 3))
    reads = np.stack([lo, np.minimum(hi, [6, 20, 9])], axis=-1)
    reads = np.concatenate([reads, [[(0, 6), (0, 20), (0, 9)]]])  # and one whole read
    got = [(int(i), int(j)) for ri, sj in overlapping_pairs(reads, slices, budget) for i, j in zip(ri, sj)]
    want = [tuple(map(int, p)) for p in np.argwhere(boxes_overlap(reads, slices))]
    assert sorted(got) == sorted(want) and len(got) == len(set(got))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_remote_reads_derive_the_exchanges_of_a_row_per_read(seed: int) -> None:
    """The remote reads kept as (read box, source slice) pairs give the same distinct reads, in the
    order of their first remote read, and the same exchanges per superstep, as a row per remote read
    (tiles, intersection box, slice) deduplicated directly; repeats (two rTasks of a tile reading the
    same box of a slice) included."""
    from rammer.backends.ipu.placement import overlapping_pairs
    from rammer.backends.ipu.remote_reads import RemoteReads, read_chunk

    rng = np.random.default_rng(seed)
    slices = _grid((24, 10), (5, 4))
    slice_owner = rng.integers(0, 4, len(slices))
    num_rtasks = 40
    tile_of = rng.integers(0, 4, num_rtasks)
    tile_of[1::2] = tile_of[0::2]  # pairs of rTasks on one tile
    chunks, rows = [], []
    for op in range(3):  # one chunk per op; each rTask reads a box, some twice (repeats)
        rtasks = np.arange(op * 10, op * 10 + 16) % num_rtasks
        lo = rng.integers(0, [20, 8], (len(rtasks), 2))
        boxes = np.stack([lo, lo + rng.integers(1, [6, 4], (len(rtasks), 2))], axis=-1)
        boxes[1::2] = boxes[0::2]
        pj, pm = (np.concatenate(x) for x in zip(*overlapping_pairs(boxes, slices)))
        far = slice_owner[pm] != tile_of[rtasks[pj]]
        pj, pm = pj[far], pm[far]
        chunks.append(read_chunk(pj, pm, rtasks, boxes, np.int16, len(slices)))
        for j, m in zip(pj, pm):
            inter = np.stack([np.maximum(boxes[j, :, 0], slices[m, :, 0]),
                              np.minimum(boxes[j, :, 1], slices[m, :, 1])], -1)
            rows.append((int(rtasks[j]), int(slice_owner[m]), int(tile_of[rtasks[j]]), tuple(inter.ravel()), int(m)))
    table = RemoteReads.from_chunks(chunks, slices, slice_owner, tile_of, 4, 4)
    distinct = list(dict.fromkeys(r[1:] for r in rows))
    assert len(table) == len(distinct) < table.num_pairs  # some repeats
    src, dst, box, nbytes, sid = table.take(np.arange(len(table)))
    got = [(int(s), int(d), tuple(int(x) for x in b.ravel()), int(m)) for s, d, b, m in zip(src, dst, box, sid)]
    assert got == distinct  # in the order of their first remote read
    assert np.array_equal(nbytes, [4 * (b[1] - b[0]) * (b[3] - b[2]) for _, _, b, _ in got])
    step = rng.integers(0, 5, num_rtasks)
    want = sorted({(int(step[r[0]]), *r[1:]) for r in rows})
    steps, index = table.exchanges(step)
    src, dst, box, _, sid = table.take(index)
    have = sorted((int(t), int(s), int(d), tuple(int(x) for x in b.ravel()), int(m))
                  for t, s, d, b, m in zip(steps, src, dst, box, sid))
    assert have == want and np.all(np.diff(steps) >= 0)
