"""Tree ensembles as tensor ops: Hummingbird's three strategies.

Every strategy works on ``XT``, the input transposed to [F, B] (a feature's
values are one contiguous row, so gathering a node's feature is a row copy),
and produces per-tree outputs [T, K, B] or [T, B, K] for one *group* of
trees; groups are independent subgraphs the scheduler can run side by side.

* ``gemm``: Hummingbird's GEMM form.  The first product (picking each
  internal node's feature) is a row Gather, exact for NaN and infinities,
  which a one-hot MatMul is not; then ``C^T @ cond == D`` finds the leaf and
  ``E^T @ leaf`` its weights.  Cost grows with nodes x leaves: shallow trees.
* ``tree_traversal``: a walk over flat node tables, one round of Gathers per
  level (feature offset, threshold, input value, then the next node from the
  interleaved children at ``2i + c``), unrolled to the group's depth; leaves
  point to themselves.
* ``perfect_tree_traversal``: trees padded to perfect depth-D trees (a leaf
  above depth D is replicated below), so the next position is ``2i + c``
  and only the feature and threshold are gathered per level.

Positions and flat input offsets are carried as float32 (the cpu backend's
fused elementwise programs compute float32), exact below 2**24; a strategy
that would pass that limit refuses with a reason and the next one is used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ops.ml import EQ, GT, GTE, LEAF, LEQ, LT, NEQ, TreeTables
from .emit import GraphWriter

STRATEGIES = ("gemm", "tree_traversal", "perfect_tree_traversal")
_EXACT = 1 << 24
_CMP = {LEQ: "LessOrEqual", LT: "Less", GTE: "GreaterOrEqual", GT: "Greater", EQ: "Equal"}
#: Perfect trees above this depth would take 2**depth table rows per tree.
MAX_PERFECT_DEPTH = 14
#: Perfect tree traversal evaluates this many top levels for every node at once: a node's
#: feature row is copied whole (constant indices), which is far cheaper per value than a
#: per-element Gather, and Where picks each row's path through the 2**levels - 1 results.
TOP_LEVELS = 3
#: ... as long as those copies stay below this many values per group (large batches: fewer levels).
TOP_ELEMENTS = 1 << 23
#: Dense GEMM matrices above this many elements per group are refused.
MAX_GEMM_ELEMENTS = 1 << 26


class StrategyRefused(Exception):
    """This strategy cannot lower this group (the message says why)."""


@dataclass(frozen=True)
class Group:
    """The trees of one group, renumbered: local node ids, local roots."""

    nodes: np.ndarray  # global node indices, in local order
    local: TreeTables  # tables indexed by local node id; roots in local ids


def split_groups(t: TreeTables, n_groups: int) -> list[Group]:
    """Trees split into ``n_groups`` groups of consecutive trees with about equal node counts."""
    n_groups = max(1, min(n_groups, t.n_trees))
    sizes = np.bincount(t.tree_of, minlength=t.n_trees)
    cuts = np.searchsorted(np.cumsum(sizes), np.linspace(0, sizes.sum(), n_groups + 1)[1:-1], side="right")
    bounds = [0] + sorted(set(int(c) for c in cuts if 0 < c < t.n_trees)) + [t.n_trees]
    groups = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        nodes = np.flatnonzero((t.tree_of >= a) & (t.tree_of < b))
        remap = np.full(len(t.mode), -1, np.int64)
        remap[nodes] = np.arange(len(nodes))
        local = TreeTables(t.feature[nodes], t.threshold[nodes], t.mode[nodes], remap[t.true[nodes]],
                           remap[t.false[nodes]], t.missing_true[nodes], remap[t.roots[a:b]], t.tree_of[nodes] - a,
                           t.weights[nodes], t.has_weight, _group_depth(t, a, b))
        groups.append(Group(nodes, local))
    return groups


def _group_depth(t: TreeTables, a: int, b: int) -> int:
    depth = 0
    frontier = t.roots[a:b]
    while True:
        inner = frontier[t.mode[frontier] != LEAF]
        if not len(inner):
            return depth
        frontier = np.concatenate([t.true[inner], t.false[inner]])
        depth += 1


class Lowering:
    """Shared pieces: the branch condition for gathered values and thresholds."""

    def __init__(self, w: GraphWriter, xt: str, xt_flat: str, rows: int, features: int, score_dtype: str):
        self.w = w
        self.score_dtype = score_dtype
        self.xt = xt
        self.xt_flat = xt_flat
        self.rows = rows
        self.features = features

    def condition(self, v: str, thr: str, modes: np.ndarray, mode_of: Callable[[int], str],
                  missing: Callable[[], str] | None) -> str:
        """Bool tensor: the branch taken is the true one.  ``modes`` are the modes present;
        ``mode_of(m)`` gives a bool tensor selecting nodes of mode ``m`` (only called when
        several are present); ``missing()`` a bool tensor of missing-tracks-true nodes."""
        w = self.w
        present = [int(m) for m in np.unique(modes) if m != LEAF] or [LEQ]
        parts = []
        for m in present:
            c = w.op("Not", [w.op("Equal", [v, thr])]) if m == NEQ else w.op(_CMP[m], [v, thr])
            if len(present) > 1:
                c = w.op("And", [c, mode_of(m)])
            parts.append(c)
        cond = parts[0]
        for c in parts[1:]:
            cond = w.op("Or", [cond, c])
        if missing is not None:
            cond = w.op("Or", [cond, w.op("And", [w.op("IsNaN", [v]), missing()])])
        return cond

    def gather_fields(self, pos_int: str, columns: list[np.ndarray], hint: str) -> list[str]:
        """Per-node fields at positions [T, B], one Gather of one-element rows per field (the
        cpu backend's fastest Gather form: one packed [N, m] table was 1.5x slower)."""
        w = self.w
        return [w.op("Gather", [w.const(c, hint), pos_int], axis=0) for c in columns]

    def gather_values(self, feature_offset: str) -> str:
        """x[b, f] for [T, B] offsets ``f * B`` (as floats), through the flat [F*B] input."""
        w = self.w
        flat = w.op("Add", [feature_offset, w.const(np.arange(self.rows, dtype=w.info(feature_offset).dtype)
                                                    .reshape(1, -1), "rows")])
        return w.op("Gather", [self.xt_flat, w.cast(flat, "int64")], axis=0)


def _check_exact(rows: int, features: int, nodes: int, what: str) -> None:
    if rows * features >= _EXACT or nodes >= _EXACT:
        raise StrategyRefused(f"{what}: {rows} rows x {features} features or {nodes} nodes pass float32's "
                              f"exact integers (2**24)")


def lower_gemm(low: Lowering, g: TreeTables) -> str:
    """[T, K, B] per-tree outputs of one group, GEMM strategy."""
    w = low.w
    t_count = g.n_trees
    inner_of = [np.flatnonzero((g.tree_of == t) & (g.mode != LEAF)) for t in range(t_count)]
    leaves_of = [np.flatnonzero((g.tree_of == t) & (g.mode == LEAF)) for t in range(t_count)]
    n_i = max(1, max(len(a) for a in inner_of))
    n_l = max(len(a) for a in leaves_of)
    k = g.n_outputs
    if t_count * n_i * n_l > MAX_GEMM_ELEMENTS:
        raise StrategyRefused(f"gemm: {t_count} trees x {n_i} nodes x {n_l} leaves is too large a matrix")
    feat = np.zeros((t_count, n_i), np.int64)
    thr = np.zeros((t_count, n_i, 1), g.threshold.dtype)
    modes = np.full((t_count, n_i), LEQ, np.int8)
    miss = np.zeros((t_count, n_i, 1), bool)
    ct = np.zeros((t_count, n_l, n_i), low.score_dtype)
    d = np.full((t_count, n_l, 1), -1.0, low.score_dtype)
    et = np.zeros((t_count, k, n_l), low.score_dtype)
    for t in range(t_count):
        local_i = {int(n): j for j, n in enumerate(inner_of[t])}
        for j, n in enumerate(inner_of[t]):
            feat[t, j], thr[t, j, 0], modes[t, j], miss[t, j, 0] = g.feature[n], g.threshold[n], g.mode[n], \
                g.missing_true[n]
        for j, leaf in enumerate(leaves_of[t]):
            et[t, :, j] = g.weights[leaf]
        # Walk each tree, recording for every leaf its ancestors and sides.
        stack: list[tuple[int, list[tuple[int, bool]]]] = [(int(g.roots[t]), [])]
        leaf_pos = {int(n): j for j, n in enumerate(leaves_of[t])}
        while stack:
            n, path = stack.pop()
            if g.mode[n] == LEAF:
                j = leaf_pos[n]
                d[t, j, 0] = sum(1 for _, side in path if side)
                for anc, side in path:
                    ct[t, j, local_i[anc]] = 1.0 if side else -1.0
                continue
            stack.append((int(g.true[n]), path + [(n, True)]))
            stack.append((int(g.false[n]), path + [(n, False)]))
    v = w.reshape(w.op("Gather", [low.xt, w.const(feat.reshape(-1), "features")], axis=0), [t_count, n_i, low.rows])
    mode_const = {m: w.const((modes == m)[:, :, None], "mode") for m in np.unique(modes)}
    cond = low.condition(v, w.const(thr, "thresholds"), modes, lambda m: mode_const[m],
                         (lambda: w.const(miss, "missing")) if miss.any() else None)
    hits = w.op("MatMul", [w.const(ct, "paths"), w.cast(cond, low.score_dtype)])
    leaf = w.cast(w.op("Equal", [hits, w.const(d, "depths")]), low.score_dtype)
    return w.op("MatMul", [w.const(et, "leaf_values"), leaf])


def lower_tree_traversal(low: Lowering, g: TreeTables) -> str:
    """[T, B, K] per-tree outputs of one group, tree traversal strategy."""
    w = low.w
    n = len(g.mode)
    _check_exact(low.rows, low.features, 2 * n, "tree_traversal")
    t_count = g.n_trees
    is_leaf = g.mode == LEAF
    modes = g.mode
    feat_b = np.where(is_leaf, 0, g.feature) * low.rows
    thr = np.where(is_leaf, 0, g.threshold).astype(g.threshold.dtype)
    roots = g.roots
    pos = None
    # Level 0 reads the roots' features with constant indices.
    if np.all(is_leaf[roots]):
        pos = w.const(np.broadcast_to(roots.astype(np.float32)[:, None], (t_count, low.rows)), "roots")
    else:
        v = w.op("Gather", [low.xt, w.const(np.where(is_leaf[roots], 0, g.feature[roots]), "root_features")], axis=0)
        root_modes = modes[roots]
        cond = low.condition(v, w.const(thr[roots][:, None], "root_thresholds"), root_modes,
                             lambda m: w.const((root_modes == m)[:, None], "mode"),
                             (lambda: w.const(g.missing_true[roots][:, None], "missing"))
                             if g.missing_true[roots].any() else None)
        pos = w.op("Where", [cond, w.const(g.true[roots].astype(np.float32)[:, None], "true"),
                             w.const(g.false[roots].astype(np.float32)[:, None], "false")])
    present = [int(m) for m in np.unique(modes) if m != LEAF]
    columns = [feat_b.astype(thr.dtype), thr]
    if len(present) > 1:
        columns += [(modes == m).astype(thr.dtype) for m in present]
    if g.missing_true.any():
        columns.append(g.missing_true.astype(thr.dtype))
    # Children interleaved, [true_0, false_0, true_1, ...]: the next node is children[2 pos + (1 - c)].
    children = w.const(np.stack([g.true, g.false], axis=1).reshape(-1).astype(np.float32), "children")
    one = w.const(np.ones((1, 1), np.float32))
    for _level in range(1, g.depth):
        pi = w.cast(pos, "int64")
        fields = low.gather_fields(pi, columns, "nodes")
        v = low.gather_values(fields[0])
        extra = fields[2:]
        cond = low.condition(
            v, fields[1], modes, lambda m: w.cast(extra[present.index(m)], "bool"),
            (lambda: w.cast(extra[-1], "bool")) if g.missing_true.any() else None)
        slot = w.op("Add", [w.op("Add", [pos, pos]), w.op("Sub", [one, w.cast(cond, "float32")])])
        pos = w.op("Gather", [children, w.cast(slot, "int64")], axis=0)
    leaf_w = w.const(g.weights.astype(low.score_dtype), "leaf_values")
    return w.op("Gather", [leaf_w, w.cast(pos, "int64")], axis=0)


def lower_perfect(low: Lowering, g: TreeTables) -> str:
    """[T, B, K] per-tree outputs of one group, perfect tree traversal strategy."""
    w = low.w
    depth = g.depth
    t_count = g.n_trees
    if depth > MAX_PERFECT_DEPTH:
        raise StrategyRefused(f"perfect_tree_traversal: depth {depth} > {MAX_PERFECT_DEPTH} (2**depth rows per tree)")
    _check_exact(low.rows, low.features, t_count << depth, "perfect_tree_traversal")
    k = g.n_outputs
    feat = [np.zeros((t_count, 1 << lv), np.int64) for lv in range(depth)]
    thr = [np.zeros((t_count, 1 << lv), g.threshold.dtype) for lv in range(depth)]
    mode = [np.full((t_count, 1 << lv), LEAF, np.int8) for lv in range(depth)]
    miss = [np.zeros((t_count, 1 << lv), bool) for lv in range(depth)]
    leaves = np.zeros((t_count, 1 << depth, k), low.score_dtype)
    for t in range(t_count):
        stack = [(int(g.roots[t]), 0, 0)]
        while stack:
            n, lv, j = stack.pop()
            if g.mode[n] == LEAF:
                span = 1 << (depth - lv)
                leaves[t, j * span:(j + 1) * span] = g.weights[n]
                continue
            feat[lv][t, j], thr[lv][t, j], mode[lv][t, j], miss[lv][t, j] = \
                g.feature[n], g.threshold[n], g.mode[n], g.missing_true[n]
            stack.append((int(g.true[n]), lv + 1, 2 * j))
            stack.append((int(g.false[n]), lv + 1, 2 * j + 1))
    one = w.const(np.ones((1, 1), np.float32))
    top = min(depth, TOP_LEVELS)
    while top and t_count * ((1 << top) - 1) * low.rows > TOP_ELEMENTS:
        top -= 1
    # Positions [T, B] in the level being walked: after the top levels, or each tree's root.
    roots = np.broadcast_to((np.arange(t_count, dtype=np.float32))[:, None], (t_count, low.rows))
    pos = _perfect_top(low, t_count, top, feat, thr, mode, miss) if top else w.const(roots, "roots")
    for lv in range(top, depth):
        modes = mode[lv].reshape(-1)
        pi = w.cast(pos, "int64")
        dt = thr[lv].dtype
        present = [int(m) for m in np.unique(modes) if m != LEAF]
        columns = [(feat[lv].reshape(-1) * low.rows).astype(dt), thr[lv].reshape(-1)]
        if len(present) > 1:
            columns += [(modes == m).astype(dt) for m in present]
        if miss[lv].any():
            columns.append(miss[lv].reshape(-1).astype(dt))
        fields = low.gather_fields(pi, columns, "nodes")
        v = low.gather_values(fields[0])
        mode_of = (lambda m, f=fields[2:], present=present: w.cast(f[present.index(m)], "bool"))
        missing = (lambda f=fields: w.cast(f[-1], "bool")) if miss[lv].any() else None
        cond = low.condition(v, fields[1], modes, mode_of, missing)
        step = w.op("Sub", [one, w.cast(cond, "float32")])  # 0 for the true branch, 1 for the false one
        pos = w.op("Add", [w.op("Add", [pos, pos]), step])
    table = w.const(leaves.reshape(t_count << depth, k), "leaf_values")
    return w.op("Gather", [table, w.cast(pos, "int64")], axis=0)


def _perfect_top(low: Lowering, t_count: int, top: int, feat: list, thr: list, mode: list, miss: list) -> str:
    """Positions [T, B] after the first ``top`` levels of perfect trees (see :data:`TOP_LEVELS`)."""
    w = low.w
    n = (1 << top) - 1  # heap order: level lv, position j is node 2**lv - 1 + j
    feats = np.concatenate([feat[lv] for lv in range(top)], axis=1)  # [T, n]
    thrs = np.concatenate([thr[lv] for lv in range(top)], axis=1)[:, :, None]
    modes = np.concatenate([mode[lv] for lv in range(top)], axis=1)
    misses = np.concatenate([miss[lv] for lv in range(top)], axis=1)[:, :, None]
    v = w.reshape(w.op("Gather", [low.xt, w.const(feats.reshape(-1), "top_features")], axis=0), [t_count, n, low.rows])
    cond = low.condition(v, w.const(thrs, "top_thresholds"), modes, lambda m: w.const((modes == m)[:, :, None], "mode"),
                         (lambda: w.const(misses, "missing")) if misses.any() else None)
    node = [w.reshape(w.slice(cond, 1, i, i + 1), [t_count, low.rows]) for i in range(n)]
    bits: list[str] = []
    for lv in range(top):
        # The bit of the node this row reached at level lv: a mux over the level's nodes by the earlier bits.
        choices = node[(1 << lv) - 1:(1 << (lv + 1)) - 1]
        for b in reversed(bits):
            choices = [w.op("Where", [b, choices[2 * i], choices[2 * i + 1]]) for i in range(len(choices) // 2)]
        bits.append(choices[0])
    # pos = t * 2**top + sum over levels of (went false) * 2**(top - 1 - lv)
    pos = w.const((np.arange(t_count, dtype=np.float32) * (1 << top))[:, None], "tree_base")
    for lv, b in enumerate(bits):
        weight = w.const(np.full((1, 1), float(1 << (top - 1 - lv)), np.float32))
        pos = w.op("Add", [pos, w.op("Where", [b, w.const(np.zeros((1, 1), np.float32)), weight])])
    return pos
