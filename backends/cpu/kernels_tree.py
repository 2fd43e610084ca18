"""The tree-ensemble rKernel: rows walked through a block of trees, leaf weights aggregated per row.

One task row runs rows ``[r0, r1)`` through every tree of its op (an op is one block of trees: the ML
lowering splits an ensemble into a few blocks and sums, or takes the min / max of, their outputs).
Rows go in blocks of :data:`ROW_BLOCK`: for each tree, every row of the block walks it from the root
(one dependent load of the packed node, one feature read, one comparison per level) and adds its
leaf's weights to the block's float64 accumulators, so a tree's nodes stay in cache while the
block's rows walk it.  The aggregate is written once per row as float32.

The walk is branch-free and :data:`WALK_LANES` rows wide: the rows of a group walk one tree side by
side for the op's depth, each level choosing its next node with a truth table (:data:`TRUTH`) instead of
a branch on the comparison.  A row's walk is a chain of dependent loads whose branch a random input
mispredicts about every other level (about 11 ns a level on this machine); the lanes are independent
chains the core overlaps, and leaves point to themselves, so a row that reaches its leaf early stays
there.  Rows of a block past the last whole group, and any row not at a leaf after ``depth`` levels
(a descriptor with a smaller depth), finish with the branching walk :func:`_leaf`.

Descriptor (``X[d:]``)::

    [x, n_features, nodes, thresholds, roots, n_trees, weights, n_outputs, out, aggregate, depth]

``x``, ``thresholds``, ``weights`` and ``out`` are float32 element offsets (``F``), ``nodes`` and
``roots`` int64 element offsets (``I``); ``nodes`` is the [N, 4] table of
:data:`rammer.ops.ml.TREE_SCORES` (feature, true child, false child, mode | missing << 3);
aggregate 0 SUM, 1 MIN, 2 MAX.  Row: ``[desc, r0, r1]``.

The branch rule is onnxruntime's (:func:`rammer.ops.ml.branch_taken`): the comparison of the node's
mode, or true when the value is NaN and the node sends missing values to its true child.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64

#: Rows that walk one tree before the next tree starts (their accumulators: ROW_BLOCK x outputs float64).
ROW_BLOCK = 256
#: Mode codes (rammer.ops.ml: LEQ, LT, GTE, GT, EQ, NEQ, LEAF).
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _LEAF = 0, 1, 2, 3, 4, 5, 6
AGGREGATES = {"SUM": 0, "MIN": 1, "MAX": 2}
#: Rows that walk a tree side by side in the branch-free walk (independent load chains).
WALK_LANES = 8


def _truth_table() -> np.ndarray:
    """``TRUTH[code] >> o & 1``: whether a node of ``code`` (mode | missing_tracks_true << 3) takes its
    true branch when the value is below (o = 0), equal to (1), above (2) the threshold or NaN (3)."""
    below, equal, above, nan = 1, 2, 4, 8
    bits = {_LEQ: below | equal, _LT: below, _GTE: equal | above, _GT: above, _EQ: equal,
            _NEQ: below | above | nan, _LEAF: 0}  # NaN != t is true: the reference's v != t
    table = np.zeros(16, np.int64)
    for code in range(16):
        mode, missing = code & 7, (code >> 3) & 1
        table[code] = bits.get(mode, 0) | (nan if missing and mode != _LEAF else 0)
    return table


TRUTH = _truth_table()


@njit(**_JIT)
def _leaf(F, I, xrow, nodes, thr, root):
    """The node index of the leaf row ``xrow`` (a float32 offset) reaches from ``root``."""
    i = root
    while True:
        at = nodes + 4 * i
        code = I[_u(at + 3)]
        mode = code & 7
        if mode == _LEAF:
            return i
        v = F[_u(xrow + I[_u(at)])]
        t = F[_u(thr + i)]
        if mode == _LEQ:
            taken = v <= t
        elif mode == _LT:
            taken = v < t
        elif mode == _GTE:
            taken = v >= t
        elif mode == _GT:
            taken = v > t
        elif mode == _EQ:
            taken = v == t
        else:
            taken = v != t
        if not taken and v != v and (code >> 3) & 1:
            taken = True
        i = I[_u(at + 1)] if taken else I[_u(at + 2)]


@njit(**_JIT)
def _walk_lanes(F, I, x, nf, nodes, thr, root, depth, idx):
    """``idx[j]``: the node that row ``x + j * nf`` (float32 offsets) reaches from ``root`` in ``depth``
    branch-free levels, for the WALK_LANES rows of a group."""
    for j in range(WALK_LANES):
        idx[j] = root
    for _level in range(depth):
        for j in range(WALK_LANES):
            i = idx[j]
            at = nodes + 4 * i
            v = F[_u(x + j * nf + I[_u(at)])]
            t = F[_u(thr + i)]
            o = np.int64(v == t) + 2 * np.int64(v > t) + 3 * np.int64(v != v)
            taken = (TRUTH[I[_u(at + 3)] & 15] >> o) & 1
            a = I[_u(at + 1)]
            b = I[_u(at + 2)]
            idx[j] = b + taken * (a - b)


@njit(**_JIT)
def k_tree(F, B, I, J, X, R, p, sbase):
    """Rows ``[p1, p2)`` through every tree of the descriptor at ``X[p0]``."""
    d = p[0]
    x = X[d]
    nf = X[d + 1]
    nodes = X[d + 2]
    thr = X[d + 3]
    roots = X[d + 4]
    nt = X[d + 5]
    w = X[d + 6]
    k = X[d + 7]
    out = X[d + 8]
    agg = X[d + 9]
    depth = X[d + 10]
    acc = np.empty((ROW_BLOCK, k), np.float64)
    idx = np.empty(WALK_LANES, np.int64)
    start = p[1]
    while start < p[2]:
        stop = min(start + ROW_BLOCK, p[2])
        init = 0.0 if agg == 0 else (np.inf if agg == 1 else -np.inf)
        for b in range(stop - start):
            for c in range(k):
                acc[b, c] = init
        lanes = (stop - start) - (stop - start) % WALK_LANES
        for t in range(nt):
            root = I[_u(roots + t)]
            for b in range(stop - start):
                if b % WALK_LANES == 0 and b < lanes:
                    _walk_lanes(F, I, x + (start + b) * nf, nf, nodes, thr, root, depth, idx)
                node = idx[b % WALK_LANES] if b < lanes else root
                leaf = node if I[_u(nodes + 4 * node + 3)] & 7 == _LEAF else _leaf(F, I, x + (start + b) * nf, nodes,
                                                                                  thr, node)
                wl = w + leaf * k
                if agg == 0:
                    for c in range(k):
                        acc[b, c] += F[_u(wl + c)]
                elif agg == 1:
                    for c in range(k):
                        acc[b, c] = min(acc[b, c], np.float64(F[_u(wl + c)]))
                else:
                    for c in range(k):
                        acc[b, c] = max(acc[b, c], np.float64(F[_u(wl + c)]))
        for b in range(stop - start):
            o = out + (start + b) * k
            for c in range(k):
                F[_u(o + c)] = np.float32(acc[b, c])
        start = stop
    return 0
