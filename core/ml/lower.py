"""The graph pass: ai.onnx.ml nodes replaced by standard ONNX ops.

``lower_ml(graph)`` returns a graph in which tree ensembles, linear models
and the numeric preprocessing ops are ordinary tensor ops (MatMul, Gather,
comparisons, Where, reductions...), which any backend compiles and
schedules like a network.  Nodes it cannot lower (OneHotEncoder with string
categories, Imputer on integers, ArrayFeatureExtractor with run-time
indices) stay as they are and run through the op registry's reference
implementation (the cpu backend runs them as host steps), as does the label
lookup of a classifier with string labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node
from ..ops import ml as mlops
from ..ops.control import RAMMER_DOMAIN
from .emit import GraphEmitter, GraphWriter
from .strategy import KERNEL, OFF, check_strategy, choose, use_kernel
from .trees import STRATEGIES, Lowering, StrategyRefused, lower_gemm, lower_perfect, lower_tree_traversal, split_groups

ML = mlops.ML
_TREE_OPS = ("TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble")
_STRATEGY_FNS = {"gemm": lower_gemm, "tree_traversal": lower_tree_traversal,
                 "perfect_tree_traversal": lower_perfect}


def has_ml_nodes(graph: Graph) -> bool:
    return any(n.domain == ML for n in graph.nodes)


def lower_ml(graph: Graph, tree_strategy: str | None = None, device: str = "cpu", tree_groups: int | None = None,
             report: dict | None = None, tree_kernel: bool = False) -> Graph:
    """``graph`` with its ai.onnx.ml nodes lowered.  ``tree_strategy`` forces one of
    :data:`~rammer.ml.trees.STRATEGIES` (None: the measured table); ``tree_groups``
    the number of independent tree groups (None: up to 4).  ``report``, if given,
    receives ``{node name: strategy}``."""
    try:
        forced = check_strategy(tree_strategy)
    except ValueError as exc:
        raise CompileError(str(exc)) from None
    if forced == OFF or not has_ml_nodes(graph):
        return graph
    nodes: list[Node] = []
    inits = dict(graph.initializers)
    infos = dict(graph.value_info)
    domains: set[str] = set()
    folded = _scalers_into_linear(graph)
    for i, node in enumerate(graph.nodes):
        lowering = _LOWERINGS.get(node.op_type) if node.domain == ML else None
        if lowering is None:
            nodes.append(node)
            continue
        if id(node) in folded and node.op_type == "Scaler":
            infos.pop(node.outputs[0], None)  # folded into the linear model it feeds (below)
            continue
        w = GraphWriter(graph.replace(value_info=infos), f"ml{i}")
        try:
            if id(node) in folded:
                done = _linear(w, node, scaler=folded[id(node)])
            else:
                done = lowering(w, node, forced, device, tree_groups, report, tree_kernel)
        except mlops.MlModelError as exc:
            raise CompileError(f"{node.label}: {exc}") from None
        if not done:
            nodes.append(node)
            continue
        nodes.extend(w.nodes)
        inits.update(w.initializers)
        infos.update(w.infos)
        domains |= w.domains
    opset = {**graph.opset, **{d: 1 for d in sorted(domains) if d not in graph.opset}}
    lowered = graph.replace(nodes=tuple(nodes), initializers=inits, value_info=infos, opset=opset)
    lowered.verify()
    return lowered


# -- per op -----------------------------------------------------------------------------------------


def _matrix_input(w: GraphWriter, name: str, dtype: str) -> tuple[str, int, int]:
    """The input as a [B, F] tensor of ``dtype``: (name, B, F)."""
    info = w.info(name)
    x = w.cast(name, dtype)
    if len(info.shape) == 2:
        return x, info.shape[0], info.shape[1]
    rows = info.shape[0] if len(info.shape) > 1 else 1
    feats = int(np.prod(info.shape)) // max(rows, 1)
    return w.reshape(x, [rows, feats]), rows, feats


def _bind(w: GraphWriter, outputs: tuple[str, ...], values: list[str]) -> None:
    for out, v in zip(outputs, values):
        if out:
            w.nodes.append(Node("Identity", (v,), (out,), out + "@ml", ""))
            w.infos[out] = w.graph.value_info[out]


def _tree_ensemble(w: GraphWriter, node: Node, forced: str | None, device: str, groups: int | None,
                   report: dict | None, tree_kernel: bool = False) -> bool:
    tables = mlops.tree_tables(node, mlops.n_tree_outputs(node))
    agg = "SUM" if node.op_type == "TreeEnsembleClassifier" else mlops.aggregate_function(node)
    thr_dtype = str(tables.threshold.dtype)
    score_dtype = mlops.score_dtype(node)
    x, rows, feats = _matrix_input(w, node.inputs[0], thr_dtype)
    read = tables.feature[tables.mode != mlops.LEAF]
    if int(read.max(initial=0)) >= feats or int(read.min(initial=0)) < 0:
        bad = int(read.max()) if int(read.max(initial=0)) >= feats else int(read.min())
        raise mlops.MlModelError(f"a node reads feature {bad}, the input has features 0..{feats - 1}")
    n_groups = groups if groups else min(4, max(1, tables.n_trees // 8))
    # Outputs no leaf writes (a binary classifier scores one class) are zeros, not table columns.
    scored = np.flatnonzero(tables.has_weight)
    full_width = tables.n_outputs
    kernel = forced == KERNEL or (forced is None and use_kernel(tree_kernel, thr_dtype))
    if kernel and thr_dtype == "float32":
        if 0 < len(scored) < full_width:
            tables = dataclasses.replace(tables, weights=tables.weights[:, scored])
        raw = _tree_kernel_scores(w, x, tables, n_groups, agg)
        if report is not None:
            report[node.name] = [KERNEL]
        return _finish_trees(w, node, tables, raw, rows, scored, full_width, agg, score_dtype)
    xt = w.op("Transpose", [x], perm=[1, 0])
    low = Lowering(w, xt, w.reshape(xt, [feats * rows]), rows, feats, score_dtype)
    order = [forced] if forced not in (None, KERNEL) else [choose(tables.depth, rows, device)]
    order += [s for s in ("perfect_tree_traversal", "tree_traversal", "gemm") if s not in order]
    parts = []
    used = []
    if 0 < len(scored) < full_width:
        tables = dataclasses.replace(tables, weights=tables.weights[:, scored])
    for g in split_groups(tables, n_groups):
        reasons = []
        for strategy in order:
            mark = len(w.nodes), dict(w.infos), dict(w.initializers)
            try:
                per_tree = _STRATEGY_FNS[strategy](low, g.local)
            except StrategyRefused as exc:
                del w.nodes[mark[0]:]
                w.infos, w.initializers = mark[1], mark[2]
                reasons.append(str(exc))
                continue
            used.append(strategy)
            break
        else:
            raise CompileError(f"{node.label}: no tree strategy applies: {'; '.join(reasons)}")
        reduce_op = {"MIN": "ReduceMin", "MAX": "ReduceMax"}.get(agg, "ReduceSum")
        reduced = w.reduce(reduce_op, per_tree, [0], keepdims=0)
        parts.append(w.op("Transpose", [reduced], perm=[1, 0]) if strategy == "gemm" else reduced)
    combine = {"MIN": "Min", "MAX": "Max"}.get(agg, "Sum")
    raw = parts[0] if len(parts) == 1 else w.op(combine, parts)
    if report is not None:
        report[node.name] = sorted(set(used))
    return _finish_trees(w, node, tables, raw, rows, scored, full_width, agg, score_dtype)


def _tree_kernel_scores(w: GraphWriter, x: str, tables: mlops.TreeTables, n_groups: int, agg: str) -> str:
    """[rows, outputs] aggregated leaf weights through one tree rKernel op per block of trees
    (:data:`rammer.ops.ml.TREE_SCORES`), the blocks' outputs combined by Sum / Min / Max."""
    parts = []
    for g in split_groups(tables, n_groups):
        t = g.local
        parts.append(w.op_in_domain(
            RAMMER_DOMAIN, mlops.TREE_SCORES,
            [x, w.const(mlops.pack_tree_nodes(t), "tree_nodes"), w.const(t.threshold.astype(np.float32), "thresholds"),
             w.const(t.roots.astype(np.int64), "roots"), w.const(t.weights.astype(np.float32), "leaf_weights")],
            "tree_scores", aggregate="SUM" if agg == "AVERAGE" else agg, depth=int(t.depth)))
    combine = {"MIN": "Min", "MAX": "Max"}.get(agg, "Sum")
    return parts[0] if len(parts) == 1 else w.op(combine, parts)


def _finish_trees(w: GraphWriter, node: Node, tables: mlops.TreeTables, raw: str, rows: int, scored: np.ndarray,
                  full_width: int, agg: str, score_dtype: str) -> bool:
    """Base values, post transform and labels after the raw [rows, scored outputs] scores."""
    if 0 < len(scored) < full_width:
        zero = w.const(np.zeros((rows, 1), score_dtype), "unscored")
        at = {int(c): j for j, c in enumerate(scored)}
        raw = w.op("Concat", [w.slice(raw, 1, at[c], at[c] + 1) if c in at else zero for c in range(full_width)],
                   axis=1)
    E = GraphEmitter(w, score_dtype)
    if node.op_type == "TreeEnsembleClassifier":
        weights = mlops.attr_floats(node, "class_weights")
        positive = weights is None or bool(np.all(weights >= 0))
        label, scores = mlops.finalize_classifier(E, raw, tables.has_weight, mlops.base_values(node),
                                                  mlops.post_transform(node), mlops.class_labels(node), positive)
        _bind(w, node.outputs, [label, scores])
    else:
        out = mlops.finalize_regression(E, raw, tables.has_weight, tables.n_trees, mlops.base_values(node), agg,
                                        mlops.post_transform(node))
        _bind(w, node.outputs, [out])
    return True


def _scalers_into_linear(graph: Graph) -> dict[int, Node]:
    """Scaler nodes whose only consumer is a LinearClassifier/LinearRegressor over [rows, features]
    (scikit-learn's StandardScaler + linear model pipelines), by ``id``: each Scaler maps to its
    linear node and each linear node to its Scaler.  The affine map folds into the coefficients at
    compile time, ``((x - o) * s) C^T + b = x (s C)^T + (b - (o s) C^T)``, so the rows pass through
    one GEMM instead of an elementwise pass over every feature first."""
    consumers = graph.consumers
    outputs = {o.name for o in graph.outputs}
    pairs: dict[int, Node] = {}
    for node in graph.nodes:
        if node.domain != ML or node.op_type != "Scaler" or node.outputs[0] in outputs:
            continue
        users = consumers.get(node.outputs[0], ())
        info = graph.value_info.get(node.inputs[0])
        if (len(users) != 1 or users[0].domain != ML or users[0].op_type not in ("LinearClassifier", "LinearRegressor")
                or users[0].inputs[0] != node.outputs[0] or info is None or len(info.shape) != 2
                or info.np_dtype.kind != "f"):
            continue
        pairs[id(node)] = users[0]
        pairs[id(users[0])] = node
    return pairs


def _linear(w: GraphWriter, node: Node, *_args, scaler: Node | None = None) -> bool:
    coef, icpt = mlops.linear_params(node)
    source = node.inputs[0] if scaler is None else scaler.inputs[0]
    x, rows, feats = _matrix_input(w, source, "float32")
    if feats != coef.shape[1]:
        raise mlops.MlModelError(f"input has {feats} features, coefficients {coef.shape[1]}")
    if scaler is not None:
        offset = mlops.per_feature(scaler.attrs.get("offset"), feats).astype(np.float64)
        scale = mlops.per_feature(scaler.attrs.get("scale", [1.0]), feats).astype(np.float64)
        c64 = coef.astype(np.float64)
        icpt = (icpt.astype(np.float64) - c64 @ (offset * scale)).astype(np.float32)
        coef = (c64 * scale[None, :]).astype(np.float32)
    s = w.op("Add", [w.op("MatMul", [x, w.const(coef.T.copy(), "coefficients")]),
                     w.const(icpt.reshape(1, -1), "intercepts")])
    E = GraphEmitter(w)
    post = mlops.post_transform(node)
    if node.op_type == "LinearRegressor":
        out = E.transform(s, "PROBIT" if post == "PROBIT" else "NONE") if coef.shape[0] == 1 else E.transform(s, post)
        _bind(w, node.outputs, [out])
        return True
    labels = mlops.class_labels(node)
    label, scores = mlops.finalize_linear_classifier(E, s, coef.shape[0], post, labels)
    _bind(w, node.outputs, [label, scores])
    return True


def _scaler(w: GraphWriter, node: Node, *_args) -> bool:
    info = w.info(node.inputs[0])
    width = info.shape[-1] if info.shape else 1
    x = w.cast(node.inputs[0], "float32")
    offset = mlops.per_feature(node.attrs.get("offset"), width)
    scale = mlops.per_feature(node.attrs.get("scale", [1.0]), width)
    _bind(w, node.outputs, [w.op("Mul", [w.op("Sub", [x, w.const(offset)]), w.const(scale)])])
    return True


def _normalizer(w: GraphWriter, node: Node, *_args) -> bool:
    info = w.info(node.inputs[0])
    if len(info.shape) != 2:
        return False
    x = w.cast(node.inputs[0], "float32")
    norm = node.attrs.get("norm", "MAX")
    if norm == "MAX":
        d = w.reduce("ReduceMax", x, [1])
    elif norm == "L1":
        d = w.reduce("ReduceSum", w.op("Abs", [x]), [1])
    elif norm == "L2":
        d = w.op("Sqrt", [w.reduce("ReduceSum", w.op("Mul", [x, x]), [1])])
    else:
        raise mlops.MlModelError(f"norm {norm!r} is not one of MAX, L1, L2")
    zero = w.const(np.zeros((1, 1), np.float32))
    nonzero = w.op("Not", [w.op("Equal", [d, zero])])
    safe = w.op("Where", [nonzero, d, w.const(np.ones((1, 1), np.float32))])
    _bind(w, node.outputs, [w.op("Div", [x, safe])])
    return True


def _binarizer(w: GraphWriter, node: Node, *_args) -> bool:
    info = w.info(node.inputs[0])
    thr = w.const(np.asarray(node.attrs.get("threshold", 0.0), info.dtype))
    _bind(w, node.outputs, [w.cast(w.op("Greater", [node.inputs[0], thr]), info.dtype)])
    return True


def _imputer(w: GraphWriter, node: Node, *_args) -> bool:
    info = w.info(node.inputs[0])
    if info.np_dtype.kind != "f":
        return False
    fill = mlops.per_feature(node.attrs.get("imputed_value_floats"), info.shape[-1]).astype(info.dtype)
    missing = float(node.attrs.get("replaced_value_float", 0.0))
    x = node.inputs[0]
    hit = w.op("IsNaN", [x]) if np.isnan(missing) else w.op("Equal", [x, w.const(np.asarray(missing, info.dtype))])
    _bind(w, node.outputs, [w.op("Where", [hit, w.const(fill), x])])
    return True


def _one_hot(w: GraphWriter, node: Node, *_args) -> bool:
    cats = node.attrs.get("cats_int64s")
    info = w.info(node.inputs[0])
    if not cats or not node.attrs.get("zeros", 1) or info.np_dtype.kind not in "iuf":
        return False
    x = w.op("Unsqueeze", [node.inputs[0], w.const(np.asarray([-1], np.int64))]) if w.opset >= 13 else \
        w.op("Unsqueeze", [node.inputs[0]], axes=[-1])
    hit = w.op("Equal", [w.cast(x, "int64"), w.const(np.asarray(cats, np.int64))])
    _bind(w, node.outputs, [w.cast(hit, "float32")])
    return True


def _array_feature_extractor(w: GraphWriter, node: Node, *_args) -> bool:
    idx = w.graph.initializers.get(node.inputs[1])
    info = w.info(node.inputs[0])
    if idx is None or len(info.shape) < 2:
        return False
    flat = np.asarray(idx, np.int64).reshape(-1)
    if np.any(flat < 0) or np.any(flat >= info.shape[-1]):
        raise mlops.MlModelError(f"an index of {flat.tolist()[:8]} is out of range for {info.shape[-1]} features")
    _bind(w, node.outputs, [w.op("Gather", [node.inputs[0], w.const(flat)], axis=len(info.shape) - 1)])
    return True


_LOWERINGS: dict[str, Callable[..., bool]] = {
    **{op: _tree_ensemble for op in _TREE_OPS},
    "LinearClassifier": _linear, "LinearRegressor": _linear, "Scaler": _scaler, "Normalizer": _normalizer,
    "Binarizer": _binarizer, "Imputer": _imputer, "OneHotEncoder": _one_hot,
    "ArrayFeatureExtractor": _array_feature_extractor,
}

__all__ = ["STRATEGIES", "has_ml_nodes", "lower_ml"]
