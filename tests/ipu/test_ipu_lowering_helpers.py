"""The lowering's numpy helpers against plain definitions."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.ipu.placement import peak_per_tile, unique_rows


@pytest.mark.parametrize(("cols", "high"), [(3, 5), (12, 1 << 20), (2, 1 << 40), (1, 1)])
def test_unique_rows_is_numpys_unique_along_rows(cols: int, high: int) -> None:
    rng = np.random.default_rng(cols)
    rows = rng.integers(-3, high, (4000, cols))
    rows = np.concatenate([rows, rows[:1500]])
    rng.shuffle(rows)
    assert np.array_equal(unique_rows(rows), np.unique(rows, axis=0))


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
