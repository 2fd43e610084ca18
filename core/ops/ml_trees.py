"""Tree ensembles of ``ai.onnx.ml`` as flat per-node tables, and rammer's own tree-block op.

TreeEnsembleClassifier/Regressor and TreeEnsemble (opset 5) are parsed once into
:class:`TreeTables`; :func:`raw_scores` walks them with onnxruntime's branch rule (the numpy
reference), :mod:`rammer.ml` lowers them to tensor ops, and :data:`TREE_SCORES` is the op a
backend with a tree rKernel runs instead (a block of trees packed by :func:`pack_tree_nodes`).
The ops that post-process the scores (base values, transforms, labels) live in
:mod:`rammer.ops.ml`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..ir import Node
from .control import RAMMER_DOMAIN
from .registry import OpContext, OutSpec, register_op

ML = "ai.onnx.ml"

#: Node modes as small integer codes (LEAF last so branch codes index tables).
LEQ, LT, GTE, GT, EQ, NEQ, LEAF = range(7)
_MODE_CODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ,
               "BRANCH_NEQ": NEQ, "LEAF": LEAF}
#: TreeEnsemble (opset 5) encodes modes as integers.
_V5_MODES = {0: LEQ, 1: LT, 2: GTE, 3: GT, 4: EQ, 5: NEQ}


class MlModelError(ValueError):
    """Attributes that do not describe a valid model (reported with the node's label)."""


# -- tree ensembles as flat tables --------------------------------------------------------


@dataclass(frozen=True)
class TreeTables:
    """A tree ensemble as per-node arrays; node ``i`` of the ensemble is global.

    Leaves point to themselves (``true == false == i``), so walking ``depth``
    steps from the roots lands every row on its leaf."""

    feature: np.ndarray      # int64 [N]
    threshold: np.ndarray    # float32 or float64 [N] (the model's threshold precision)
    mode: np.ndarray         # int8 [N], codes LEQ..LEAF
    true: np.ndarray         # int64 [N]
    false: np.ndarray        # int64 [N]
    missing_true: np.ndarray  # bool [N]
    roots: np.ndarray        # int64 [T]
    tree_of: np.ndarray      # int64 [N], the tree (0..T-1) of each node
    weights: np.ndarray      # float64 [N, K], summed leaf weights per output
    has_weight: np.ndarray   # bool [K], outputs some leaf writes to
    depth: int               # edges on the longest root-to-leaf path

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    @property
    def n_outputs(self) -> int:
        return self.weights.shape[1]


def attr_floats(node: Node, name: str) -> np.ndarray | None:
    """A float list attribute or its ``*_as_tensor`` twin (double precision)."""
    tensor = node.attrs.get(name + "_as_tensor")
    if tensor is not None:
        return np.asarray(tensor).reshape(-1)
    values = node.attrs.get(name)
    return None if values is None else np.asarray(values, dtype=np.float32)


def _depths(true: np.ndarray, false: np.ndarray, roots: np.ndarray, is_leaf: np.ndarray) -> int:
    depth = 0
    frontier = roots
    while not np.all(is_leaf[frontier]):
        inner = frontier[~is_leaf[frontier]]
        frontier = np.concatenate([true[inner], false[inner]])
        depth += 1
        if depth > len(true):
            raise MlModelError("the trees have a cycle")
    return depth


def tree_tables(node: Node, n_outputs: int) -> TreeTables:
    """Parse a TreeEnsembleClassifier/Regressor or TreeEnsemble node."""
    if node.op_type == "TreeEnsemble":
        return _tables_v5(node, n_outputs)
    a = node.attrs
    tids = np.asarray(a.get("nodes_treeids", []), np.int64)
    nids = np.asarray(a.get("nodes_nodeids", []), np.int64)
    if len(tids) == 0:
        raise MlModelError("the ensemble has no nodes")
    n = len(tids)
    modes_raw = a.get("nodes_modes", [])
    try:
        mode = np.asarray([_MODE_CODES[m] for m in modes_raw], np.int8)
    except KeyError as exc:
        raise MlModelError(f"node mode {exc.args[0]!r} is not supported (BRANCH_MEMBER is not)") from None
    values = attr_floats(node, "nodes_values")
    if values is None:
        raise MlModelError("nodes_values is missing")
    index = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tids, nids))}

    def target(ids: Sequence[int], what: str) -> np.ndarray:
        out = np.empty(n, np.int64)
        for k, (t, i) in enumerate(zip(tids, np.asarray(ids, np.int64))):
            if mode[k] == LEAF:
                out[k] = k
                continue
            j = index.get((int(t), int(i)))
            if j is None:
                raise MlModelError(f"{what} of tree {t} node {nids[k]} names node {i}, which does not exist")
            out[k] = j
        return out

    true = target(a.get("nodes_truenodeids", [0] * n), "the true branch")
    false = target(a.get("nodes_falsenodeids", [0] * n), "the false branch")
    missing = np.zeros(n, bool)
    mv = a.get("nodes_missing_value_tracks_true")
    if mv:
        missing[:] = np.asarray(mv, np.int64) != 0
    features = np.asarray(a.get("nodes_featureids", [0] * n), np.int64)
    tree_list = sorted(set(int(t) for t in tids))
    tree_pos = {t: p for p, t in enumerate(tree_list)}
    tree_of = np.asarray([tree_pos[int(t)] for t in tids], np.int64)
    children = set(true[mode != LEAF].tolist()) | set(false[mode != LEAF].tolist())
    roots = []
    for t in tree_list:
        members = [k for k in range(n) if tids[k] == t and k not in children]
        if len(members) != 1:
            members = [min((k for k in range(n) if tids[k] == t), key=lambda k: nids[k])]
        roots.append(members[0])
    prefix = "class" if "class_ids" in a else "target"
    weights = np.zeros((n, n_outputs), np.float64)
    has = np.zeros(n_outputs, bool)
    w = attr_floats(node, prefix + "_weights")
    for t, i, c, v in zip(a.get(prefix + "_treeids", []), a.get(prefix + "_nodeids", []), a.get(prefix + "_ids", []),
                          w if w is not None else []):
        k = index.get((int(t), int(i)))
        if k is None or not 0 <= int(c) < n_outputs:
            raise MlModelError(f"leaf weight for tree {t} node {i} output {c} names no node or output")
        weights[k, int(c)] += float(v)
        has[int(c)] = True
    is_leaf = mode == LEAF
    return TreeTables(features, values, mode, true, false, missing, np.asarray(roots, np.int64), tree_of,
                      weights, has, _depths(true, false, np.asarray(roots, np.int64), is_leaf))


def _tables_v5(node: Node, n_outputs: int) -> TreeTables:
    """TreeEnsemble (ai.onnx.ml opset 5): leaves live in a separate array."""
    a = node.attrs
    splits = np.asarray(a["nodes_splits"]).reshape(-1)
    n_int = len(splits)
    modes = np.asarray(a.get("nodes_modes"), np.int64).reshape(-1)
    if any(int(m) not in _V5_MODES for m in modes):
        raise MlModelError("BRANCH_MEMBER (mode 6) is not supported")
    leaf_t = np.asarray(a["leaf_targetids"], np.int64)
    leaf_w = np.asarray(a["leaf_weights"]).reshape(-1).astype(np.float64)
    n_leaf = len(leaf_t)
    n = n_int + n_leaf
    true_leaf = np.asarray(a.get("nodes_trueleafs", [0] * n_int), np.int64)
    false_leaf = np.asarray(a.get("nodes_falseleafs", [0] * n_int), np.int64)
    true = np.asarray(a["nodes_truenodeids"], np.int64) + np.where(true_leaf != 0, n_int, 0)
    false = np.asarray(a["nodes_falsenodeids"], np.int64) + np.where(false_leaf != 0, n_int, 0)
    mode = np.concatenate([np.asarray([_V5_MODES[int(m)] for m in modes], np.int8), np.full(n_leaf, LEAF, np.int8)])
    feature = np.concatenate([np.asarray(a["nodes_featureids"], np.int64), np.zeros(n_leaf, np.int64)])
    threshold = np.concatenate([splits, np.zeros(n_leaf, splits.dtype)])
    missing = np.zeros(n, bool)
    mv = a.get("nodes_missing_value_tracks_true")
    if mv is not None and len(mv):
        missing[:n_int] = np.asarray(mv, np.int64) != 0
    true_all = np.concatenate([true, np.arange(n_int, n)])
    false_all = np.concatenate([false, np.arange(n_int, n)])
    roots = np.asarray(a["tree_roots"], np.int64)
    # A tree that is a single leaf: its root index points into the leaf array when it has no nodes.
    tree_of = np.zeros(n, np.int64)
    for t, r in enumerate(roots):
        stack = [int(r)]
        while stack:
            k = stack.pop()
            tree_of[k] = t
            if mode[k] != LEAF:
                stack += [int(true_all[k]), int(false_all[k])]
    weights = np.zeros((n, n_outputs), np.float64)
    has = np.zeros(n_outputs, bool)
    for j, (t, v) in enumerate(zip(leaf_t, leaf_w)):
        weights[n_int + j, int(t)] += v
        has[int(t)] = True
    return TreeTables(feature, threshold, mode, true_all, false_all, missing, roots, tree_of, weights, has,
                      _depths(true_all, false_all, roots, mode == LEAF))


def branch_taken(mode: np.ndarray, value: np.ndarray, threshold: np.ndarray, missing_true: np.ndarray) -> np.ndarray:
    """Whether each comparison takes its true branch (onnxruntime's rule for every mode)."""
    v = value
    t = threshold
    with np.errstate(invalid="ignore"):
        cmp = np.select([mode == LEQ, mode == LT, mode == GTE, mode == GT, mode == EQ, mode == NEQ],
                        [v <= t, v < t, v >= t, v > t, v == t, v != t], False)
    return cmp | (missing_true & np.isnan(v))


def leaf_indices(tables: TreeTables, x: np.ndarray) -> np.ndarray:
    """[B, T] global index of the leaf each row reaches in each tree."""
    x2 = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    xv = x2.astype(tables.threshold.dtype, copy=False)
    rows = np.arange(xv.shape[0])[:, None]
    idx = np.broadcast_to(tables.roots[None, :], (xv.shape[0], tables.n_trees)).copy()
    for _ in range(tables.depth):
        mode = tables.mode[idx]
        inner = mode != LEAF
        if not inner.any():
            break
        value = xv[rows, tables.feature[idx]]
        taken = branch_taken(mode, value, tables.threshold[idx], tables.missing_true[idx])
        idx = np.where(inner, np.where(taken, tables.true[idx], tables.false[idx]), idx)
    return idx


def raw_scores(tables: TreeTables, x: np.ndarray, aggregate: str) -> np.ndarray:
    """[B, K] aggregated leaf weights (before base values and transforms), float64."""
    idx = leaf_indices(tables, x)
    w = tables.weights[idx]  # [B, T, K]
    if aggregate in ("SUM", "AVERAGE"):
        return w.sum(axis=1)
    return w.min(axis=1) if aggregate == "MIN" else w.max(axis=1)


# -- rammer's own tree rKernel op (what rammer.ml lowers an ensemble to on cpu) ------------------

#: Columns of the packed node table of :data:`TREE_SCORES` ([N, 4] int64): feature, true child,
#: false child and ``mode | missing_tracks_true << 3`` (leaves: feature 0, mode LEAF, children themselves, so
#: a walk that goes on past a leaf reads a real feature and stays there).
NODE_FEATURE, NODE_TRUE, NODE_FALSE, NODE_CODE = range(4)
MISSING_SHIFT = 3
#: The op: rows walked through a block of trees by one kernel, leaf weights aggregated per row.
#: Inputs ``X`` [B, F] (the thresholds' dtype), ``nodes`` [N, 4] int64, ``thresholds`` [N],
#: ``roots`` [T] int64, ``weights`` [N, K] float32; attribute ``aggregate`` (SUM, MIN or MAX);
#: output [B, K] float32: per row, the aggregate over the trees of the leaf weights it reaches
#: (the ``raw_scores`` of those trees, before base values and post transforms).
TREE_SCORES = "TreeEnsembleScores"


def pack_tree_nodes(t: TreeTables) -> np.ndarray:
    """``t``'s per-node arrays as the [N, 4] int64 node table of :data:`TREE_SCORES`."""
    code = t.mode.astype(np.int64) | (t.missing_true.astype(np.int64) << MISSING_SHIFT)
    feature = np.where(t.mode == LEAF, 0, t.feature).astype(np.int64)
    return np.stack([feature, t.true.astype(np.int64), t.false.astype(np.int64), code], axis=1)


def _unpack_tree_nodes(nodes: np.ndarray, thresholds: np.ndarray, roots: np.ndarray,
                       weights: np.ndarray) -> TreeTables:
    n = len(nodes)
    mode = (nodes[:, NODE_CODE] & 7).astype(np.int8)
    tree_of = np.zeros(n, np.int64)  # not read by raw_scores
    true, false = nodes[:, NODE_TRUE], nodes[:, NODE_FALSE]
    return TreeTables(nodes[:, NODE_FEATURE], thresholds, mode, true, false,
                      ((nodes[:, NODE_CODE] >> MISSING_SHIFT) & 1).astype(bool), roots, tree_of,
                      weights.astype(np.float64), np.ones(weights.shape[1], bool),
                      _depths(true, false, roots, mode == LEAF))


def _infer_tree_scores(ctx: OpContext) -> list[OutSpec]:
    x, w = ctx.input(0), ctx.input(4)
    if len(x.shape) != 2 or len(w.shape) != 2:
        raise ctx.fail(f"X must be [rows, features] and weights [nodes, outputs], got {list(x.shape)} and "
                       f"{list(w.shape)}")
    if str(ctx.attr("aggregate", "SUM")) not in ("SUM", "MIN", "MAX"):
        raise ctx.fail(f"aggregate {ctx.attr('aggregate')!r} is not one of SUM, MIN, MAX")
    return [("float32", (x.shape[0], w.shape[1]))]


@register_op(TREE_SCORES, infer=_infer_tree_scores, domain=RAMMER_DOMAIN)
def tree_ensemble_scores(ctx: OpContext, x: np.ndarray, nodes: np.ndarray, thresholds: np.ndarray,
                         roots: np.ndarray, weights: np.ndarray) -> np.ndarray:
    t = _unpack_tree_nodes(np.asarray(nodes, np.int64), np.asarray(thresholds), np.asarray(roots, np.int64),
                           np.asarray(weights))
    return raw_scores(t, x, str(ctx.attr("aggregate", "SUM"))).astype(np.float32)
