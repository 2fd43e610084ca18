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
