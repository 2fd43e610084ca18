"""The tree-ensemble rKernel's branch-free walk (``kernels_tree``): its truth table takes every mode's
branch as the reference does, and ``k_tree`` called on its own gives the reference's raw scores for
rows in whole lane groups and in the tail, for trees with leaves at every depth, and when the
descriptor's depth is smaller than the trees' (those rows finish with the branching walk)."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.cpu import kernels_tree as kt
from rammer.ops import ml_trees as mlops


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("mode", [mlops.LEQ, mlops.LT, mlops.GTE, mlops.GT, mlops.EQ, mlops.NEQ])
def test_truth_table_takes_the_references_branch(mode, missing):
    t = np.float32(0.5)
    values = np.array([0.25, 0.5, 0.75, np.nan], np.float32)  # below, equal, above, NaN: o = 0..3
    want = mlops.branch_taken(np.full(4, mode), values, np.full(4, t), np.full(4, missing))
    code = mode | (int(missing) << mlops.MISSING_SHIFT)
    got = [(int(kt.TRUTH[code]) >> o) & 1 == 1 for o in range(4)]
    assert got == want.tolist()


def _random_tables(rng: np.random.Generator, n_trees: int, depth: int, features: int, outputs: int
                   ) -> mlops.TreeTables:
    """Trees whose leaves sit at every depth up to ``depth`` (a node splits with probability 0.7),
    random modes and missing-value flags; leaves carry a negative feature id, as some converters write."""
    feature, thr, mode, true, false, missing, roots, weights = [], [], [], [], [], [], [], []

    def grow(level: int) -> int:
        i = len(feature)
        feature.append(-2)
        thr.append(0.0)
        mode.append(mlops.LEAF)
        true.append(i)
        false.append(i)
        missing.append(False)
        weights.append(np.round(rng.normal(size=outputs), 3))
        if level < depth and (level == 0 or rng.random() < 0.7):
            feature[i] = int(rng.integers(features))
            thr[i] = float(rng.choice([-0.5, 0.0, 0.5]))
            mode[i] = int(rng.integers(0, 6))
            missing[i] = bool(rng.random() < 0.5)
            t = grow(level + 1)
            f = grow(level + 1)
            true[i], false[i] = t, f
        return i

    for _ in range(n_trees):
        roots.append(grow(0))
    n = len(feature)
    arr = np.asarray
    return mlops.TreeTables(arr(feature, np.int64), arr(thr, np.float32), arr(mode, np.int8), arr(true, np.int64),
                            arr(false, np.int64), arr(missing, bool), arr(roots, np.int64), np.zeros(n, np.int64),
                            np.stack(weights).astype(np.float64), np.ones(outputs, bool), depth)


def _k_tree(tables: mlops.TreeTables, x: np.ndarray, depth: int, r0: int, r1: int) -> np.ndarray:
    """``k_tree`` over rows [r0, r1) with the op's operands laid out in one float and one int arena."""
    rows, features = x.shape
    nodes = mlops.pack_tree_nodes(tables)
    w = tables.weights.astype(np.float32)
    k = w.shape[1]
    F = np.concatenate([x.ravel(), tables.threshold.astype(np.float32), w.ravel(),
                        np.full(rows * k, np.nan, np.float32)])
    I = np.concatenate([nodes.ravel(), tables.roots])
    thr, wo, out = x.size, x.size + len(nodes), x.size + len(nodes) + w.size
    X = np.array([0, features, 0, thr, nodes.size, len(tables.roots), wo, k, out, 0, depth], np.int64)
    p = np.array([0, r0, r1], np.int64)
    assert kt.k_tree(F, np.zeros(1, np.uint8), I, np.zeros(1, np.int32), X, np.zeros(1, np.float64), p, 0) == 0
    return F[out:].reshape(rows, k)


@pytest.mark.parametrize("rows,r0,r1", [(8, 0, 8), (37, 0, 37), (300, 5, 299), (3, 0, 3)])
@pytest.mark.parametrize("short", [0, 2])
def test_k_tree_matches_the_reference(rows, r0, r1, short):
    rng = np.random.default_rng(rows * 10 + short)
    depth = 6
    tables = _random_tables(rng, n_trees=7, depth=depth, features=5, outputs=3)
    x = rng.choice(np.array([-0.5, 0.0, 0.5, 0.25, -0.75], np.float32), size=(rows, 5))
    x[rng.random(x.shape) < 0.15] = np.nan
    got = _k_tree(tables, x, depth - short if short else depth, r0, r1)
    want = mlops.raw_scores(tables, x, "SUM").astype(np.float32)
    np.testing.assert_allclose(got[r0:r1], want[r0:r1], rtol=1e-6, atol=1e-6)
    assert np.isnan(got[:r0]).all() and np.isnan(got[r1:]).all()  # rows outside the task are not written


def test_packed_leaves_read_feature_zero():
    tables = _random_tables(np.random.default_rng(1), n_trees=3, depth=4, features=4, outputs=2)
    nodes = mlops.pack_tree_nodes(tables)
    leaf = tables.mode == mlops.LEAF
    assert (tables.feature[leaf] < 0).all()
    assert (nodes[leaf, mlops.NODE_FEATURE] == 0).all()
    assert (nodes[~leaf, mlops.NODE_FEATURE] == tables.feature[~leaf]).all()
