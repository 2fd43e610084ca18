"""The tree-ensemble rKernel: rows walked through a block of trees, leaf weights aggregated per row.

One task row runs rows ``[r0, r1)`` through every tree of its op (an op is one block of trees: the ML
lowering splits an ensemble into a few blocks and sums, or takes the min / max of, their outputs).
Rows go in blocks of :data:`ROW_BLOCK`: for each tree, every row of the block walks it from the root
(one dependent load of the packed node, one feature read, one comparison per level) and adds its
leaf's weights to the block's float64 accumulators, so a tree's nodes stay in cache while the
block's rows walk it.  The aggregate is written once per row as float32.

Descriptor (``X[d:]``)::

    [x, n_features, nodes, thresholds, roots, n_trees, weights, n_outputs, out, aggregate]

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
ROW_BLOCK = 64
#: Mode codes (rammer.ops.ml: LEQ, LT, GTE, GT, EQ, NEQ, LEAF).
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _LEAF = 0, 1, 2, 3, 4, 5, 6
AGGREGATES = {"SUM": 0, "MIN": 1, "MAX": 2}


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
    acc = np.empty((ROW_BLOCK, k), np.float64)
    start = p[1]
    while start < p[2]:
        stop = min(start + ROW_BLOCK, p[2])
        init = 0.0 if agg == 0 else (np.inf if agg == 1 else -np.inf)
        for b in range(stop - start):
            for c in range(k):
                acc[b, c] = init
        for t in range(nt):
            root = I[_u(roots + t)]
            for b in range(stop - start):
                leaf = _leaf(F, I, x + (start + b) * nf, nodes, thr, root)
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
