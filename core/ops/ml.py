"""The ``ai.onnx.ml`` ops skl2onnx emits: numpy reference implementations.

Semantics follow onnxruntime's CPU kernels, quirks included (the binary
classifier cases, the missing-value tracks, softmax_zero), since those are
what scikit-learn models exported with skl2onnx are checked against.

Tree ensembles are parsed into flat tables by :mod:`rammer.ops.ml_trees`
(re-exported here).  The post-processing shared by trees and linear models
(base values, post transforms, class labels) is written once against a small
:class:`Emitter` interface, so the numpy reference here and the tensor-op
lowering in ``rammer.ml`` cannot disagree on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..ir import Node
from .ml_trees import (  # noqa: F401  (re-exported: rammer.ops.ml is where readers find the ml ops)
    EQ,
    GT,
    GTE,
    LEAF,
    LEQ,
    LT,
    ML,
    NEQ,
    TREE_SCORES,
    MlModelError,
    TreeTables,
    attr_floats,
    branch_taken,
    leaf_indices,
    pack_tree_nodes,
    raw_scores,
    tree_tables,
)
from .registry import OpContext, OutSpec, register_op

# -- post-processing, written once for numpy and for tensor ops --------------------------


class Emitter(Protocol):
    """The few tensor operations post-processing needs.  Values are [B, k] float
    tensors (numpy arrays here, graph tensor names in rammer.ml)."""

    def const(self, value: np.ndarray) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def sub(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
    def column(self, a: Any, j: int) -> Any: ...
    def concat(self, parts: Sequence[Any]) -> Any: ...
    def where_positive(self, cond: Any, threshold: float, a: Any, b: Any) -> Any: ...
    def transform(self, a: Any, post: str) -> Any: ...
    def argmax_labels(self, a: Any, labels: np.ndarray, valid: np.ndarray) -> Any: ...
    def pick_label(self, cond: Any, threshold: float, labels: np.ndarray) -> Any: ...


def probit(x: np.ndarray) -> np.ndarray:
    """onnxruntime's ComputeProbit: sqrt(2) * ErfInv(2x - 1) with its ErfInv approximation."""
    x = (2 * x - 1).astype(np.float32)
    sgn = np.where(x < 0, np.float32(-1), np.float32(1))
    t = (1 - x) * (1 + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log(t)
        v = np.float32(2 / (3.14159 * 0.147)) + np.float32(0.5) * lg
        v2 = np.float32(1 / 0.147) * lg
        v3 = -v + np.sqrt(v * v - v2)
        return (np.float32(1.41421356) * sgn * np.sqrt(v3)).astype(np.float32)


def softmax_zero(s: np.ndarray) -> np.ndarray:
    m = s.max(axis=1, keepdims=True)
    keep = np.abs(s) > np.float32(1e-7)
    e = np.where(keep, np.exp(s - m), s * np.exp(-m))
    return e / np.where(keep, e, 0).sum(axis=1, keepdims=True)


class NumpyEmitter:
    """The :class:`Emitter` evaluating eagerly with numpy (the reference)."""

    def __init__(self, dtype: np.dtype = np.dtype(np.float32)):
        self.dtype = dtype

    def const(self, value: np.ndarray) -> np.ndarray:
        return np.asarray(value, self.dtype)

    def add(self, a, b):
        return (a + b).astype(self.dtype)

    def sub(self, a, b):
        return (a - b).astype(self.dtype)

    def mul(self, a, b):
        return (a * b).astype(self.dtype)

    def column(self, a, j):
        return a[:, j:j + 1]

    def concat(self, parts):
        return np.concatenate(parts, axis=1)

    def where_positive(self, cond, threshold, a, b):
        return np.where(cond > threshold, a, b).astype(self.dtype)

    def transform(self, a, post):
        a = a.astype(self.dtype)
        if post == "LOGISTIC":
            with np.errstate(over="ignore"):
                return (1 / (1 + np.exp(-a))).astype(self.dtype)
        if post == "SOFTMAX":
            e = np.exp(a - a.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).astype(self.dtype)
        if post == "SOFTMAX_ZERO":
            return softmax_zero(a).astype(self.dtype)
        if post == "PROBIT":
            return probit(a).astype(self.dtype)
        return a

    def argmax_labels(self, a, labels, valid):
        masked = np.where(valid[None, :], a, -np.inf)
        return np.asarray(labels)[np.argmax(masked, axis=1)]

    def pick_label(self, cond, threshold, labels):
        return np.where(cond[:, 0] > threshold, labels[1], labels[0])


def _check_post(post: str) -> str:
    if post not in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"):
        raise MlModelError(f"post_transform {post!r} is not one of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT")
    return post


def finalize_regression(E: Emitter, raw: Any, tables_has: np.ndarray, n_trees: int, base: np.ndarray,
                        aggregate: str, post: str) -> Any:
    """onnxruntime's TreeEnsembleRegressor finalization of [B, K] aggregated scores."""
    k = len(tables_has)
    s = raw
    if aggregate == "AVERAGE":
        s = E.mul(s, E.const(np.full((1, k), 1.0 / n_trees)))
    if k == 1:
        if len(base) == 1:
            s = E.add(s, E.const(base.reshape(1, 1)))
        return E.transform(s, "PROBIT") if post == "PROBIT" else s
    if len(base) == k:
        s = E.add(s, E.const(base.reshape(1, k)))
    return E.transform(s, post)


def finalize_classifier(E: Emitter, raw: Any, has: np.ndarray, base: np.ndarray, post: str,
                        labels: np.ndarray, weights_positive: bool) -> tuple[Any, Any]:
    """onnxruntime's TreeEnsembleClassifier finalization: (labels [B], scores [B, C])."""
    n = len(labels)
    if n > 2:
        s = raw
        if len(base):
            pad = np.zeros(n)
            pad[:len(base)] = base
            s = E.add(s, E.const(pad.reshape(1, n)))
            has = has.copy()
            has[:len(base)] = True
        return E.argmax_labels(s, labels, has), E.transform(s, post)
    if n != 2:
        raise MlModelError(f"a classifier needs at least 2 class labels, it has {n}")
    binary_case = int(has.sum()) == 1
    s0, s1 = E.column(raw, 0), E.column(raw, 1)
    h1 = bool(has[1])
    size = 2
    if len(base) == 2:
        if h1:
            s1 = E.add(s0, E.const(np.full((1, 1), base[1])))
            s0 = E.sub(E.const(np.zeros((1, 1))), s1)
        else:
            # Binary as multiclass: onnxruntime adds base[1] to a class no leaf scores and
            # then writes that class's score as 0.
            s0 = E.add(s0, E.const(np.full((1, 1), base[0])))
    elif len(base) == 1:
        s0 = E.add(s0, E.const(np.full((1, 1), base[0])))
        size = 2 if h1 else 1
    else:
        size = 2 if h1 else 1
    pos = s1 if size == 2 and h1 else (s0 if has[0] else E.const(np.zeros((1, 1))))
    if binary_case:
        limit = 0.5 if weights_positive else 0.0
        label = E.pick_label(pos, limit, labels)
    else:
        # onnxruntime labels 1/0 here: integers as such, string labels by index.
        limit = 0.0
        label = E.pick_label(pos, limit, np.asarray([0, 1], dtype=labels.dtype) if labels.dtype.kind in "iu"
                             else labels)
    if size == 2:
        return label, E.transform(E.concat([s0, s1]), post)
    if post == "PROBIT":
        return label, E.concat([E.transform(s0, post), E.const(np.zeros((1, 1)))])
    if weights_positive and binary_case:
        return label, E.concat([E.sub(E.const(np.ones((1, 1))), s0), s0])
    neg = E.sub(E.const(np.zeros((1, 1))), s0)
    if post == "LOGISTIC":
        return label, E.concat([E.transform(neg, post), E.transform(s0, post)])
    # Mixed weights: [-s, s] whichever class wins (onnxruntime 1.2x's batched score update).
    return label, E.concat([neg, s0])


def finalize_linear_classifier(E: Emitter, scores: Any, n_scores: int, post: str,
                               labels: np.ndarray) -> tuple[Any, Any]:
    """onnxruntime's LinearClassifier after the GEMM: (labels [B], scores)."""
    if n_scores == 1:
        pair = labels if len(labels) == 2 else (np.asarray([0, 1], labels.dtype) if labels.dtype.kind in "iu"
                                                else np.asarray(["0", "1"], dtype=object))
        label = E.pick_label(scores, 0.0, pair)
        s = E.transform(scores, post)
        # Two labels and one score column: [1 - p, p] after the transform.
        return label, (E.concat([E.sub(E.const(np.ones((1, 1))), s), s]) if len(labels) == 2 else s)
    if len(labels) != n_scores:
        raise MlModelError(f"{n_scores} score columns but {len(labels)} class labels")
    return E.argmax_labels(scores, labels, np.ones(n_scores, bool)), E.transform(scores, post)


# -- attribute readers ---------------------------------------------------------------------

#: TreeEnsemble (opset 5) encodes its post transform and aggregate function as integers.
_V5_POST = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}
_V5_AGG = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}


def class_labels(node: Node) -> np.ndarray:
    ints = node.attrs.get("classlabels_int64s", node.attrs.get("classlabels_ints"))
    strs = node.attrs.get("classlabels_strings")
    if strs:
        return np.asarray(list(strs), dtype=object)
    return np.asarray(list(ints or []), dtype=np.int64)


def post_transform(node: Node) -> str:
    p = node.attrs.get("post_transform", "NONE")
    return _check_post(_V5_POST.get(p, "NONE") if isinstance(p, int) else str(p))


def aggregate_function(node: Node) -> str:
    agg = node.attrs.get("aggregate_function", 1 if node.op_type == "TreeEnsemble" else "SUM")
    agg = _V5_AGG.get(agg, "SUM") if isinstance(agg, int) else str(agg)
    if agg not in ("SUM", "AVERAGE", "MIN", "MAX"):
        raise MlModelError(f"aggregate_function {agg!r} is not one of SUM, AVERAGE, MIN, MAX")
    return agg


def base_values(node: Node) -> np.ndarray:
    b = attr_floats(node, "base_values")
    return np.zeros(0) if b is None else b.astype(np.float64)


def n_tree_outputs(node: Node) -> int:
    if node.op_type == "TreeEnsembleClassifier":
        return len(class_labels(node))
    return int(node.attrs.get("n_targets", 1))


def _tables(ctx: OpContext) -> TreeTables:
    try:
        return tree_tables(ctx.node, n_tree_outputs(ctx.node))
    except MlModelError as exc:
        raise ctx.fail(str(exc)) from None


def _rows(ctx: OpContext) -> int:
    x = ctx.inputs[0]
    assert x is not None
    return x.shape[0] if len(x.shape) > 1 else 1


def score_dtype(node: Node) -> str:
    # float64 outputs only for the opset-5 TreeEnsemble with double splits.
    if node.op_type == "TreeEnsemble":
        return str(np.asarray(node.attrs["nodes_splits"]).dtype)
    return "float32"


# -- tree ensemble ops -----------------------------------------------------------------------


def _infer_tree_classifier(ctx: OpContext) -> list[OutSpec]:
    labels = class_labels(ctx.node)
    ltype = "object" if labels.dtype == object else "int64"
    return [(ltype, (_rows(ctx),)), ("float32", (_rows(ctx), len(labels)))]


@register_op("TreeEnsembleClassifier", infer=_infer_tree_classifier, domain=ML)
def tree_ensemble_classifier(ctx: OpContext, x: np.ndarray):
    t = _tables(ctx)
    raw = raw_scores(t, x, "SUM").astype(np.float32)
    w = attr_floats(ctx.node, "class_weights")
    positive = w is None or bool(np.all(w >= 0))
    try:
        label, scores = finalize_classifier(NumpyEmitter(), raw, t.has_weight, base_values(ctx.node),
                                            post_transform(ctx.node), class_labels(ctx.node), positive)
    except MlModelError as exc:
        raise ctx.fail(str(exc)) from None
    return np.asarray(label).astype(class_labels(ctx.node).dtype), scores.astype(np.float32)


def _infer_tree_regressor(ctx: OpContext) -> list[OutSpec]:
    return [(score_dtype(ctx.node), (_rows(ctx), n_tree_outputs(ctx.node)))]


@register_op(["TreeEnsembleRegressor", "TreeEnsemble"], infer=_infer_tree_regressor, domain=ML)
def tree_ensemble_regressor(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    t = _tables(ctx)
    agg = aggregate_function(ctx.node)
    dt = np.dtype(score_dtype(ctx.node))
    raw = raw_scores(t, x, agg).astype(dt)
    out = finalize_regression(NumpyEmitter(dt), raw, t.has_weight, t.n_trees, base_values(ctx.node), agg,
                              post_transform(ctx.node))
    return np.asarray(out, dt).reshape(_rows(ctx), -1)


# -- linear models -------------------------------------------------------------------------------


def linear_params(node: Node) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients [K, F], intercepts [K]) of a LinearClassifier/Regressor."""
    coef = np.asarray(node.attrs.get("coefficients", []), np.float32)
    icpt = np.asarray(node.attrs.get("intercepts", []), np.float32)
    k = len(icpt) if len(icpt) else int(node.attrs.get("targets", 1))
    if k == 0 or coef.size % k:
        raise MlModelError(f"{coef.size} coefficients do not split into {k} rows")
    if not len(icpt):
        icpt = np.zeros(k, np.float32)
    return coef.reshape(k, -1), icpt


def _linear_scores(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    try:
        coef, icpt = linear_params(ctx.node)
    except MlModelError as exc:
        raise ctx.fail(str(exc)) from None
    x2 = x.reshape(_rows(ctx), -1).astype(np.float32)
    if x2.shape[1] != coef.shape[1]:
        raise ctx.fail(f"input has {x2.shape[1]} features, coefficients {coef.shape[1]}")
    return (x2 @ coef.T + icpt).astype(np.float32)


def _infer_linear_classifier(ctx: OpContext) -> list[OutSpec]:
    labels = class_labels(ctx.node)
    coef, icpt = linear_params(ctx.node)
    k = len(icpt)
    width = 2 if k == 1 and len(labels) == 2 else k
    return [("object" if labels.dtype == object else "int64", (_rows(ctx),)), ("float32", (_rows(ctx), width))]


@register_op("LinearClassifier", infer=_infer_linear_classifier, domain=ML)
def linear_classifier(ctx: OpContext, x: np.ndarray):
    s = _linear_scores(ctx, x)
    labels = class_labels(ctx.node)
    label, scores = finalize_linear_classifier(NumpyEmitter(), s, s.shape[1], post_transform(ctx.node), labels)
    return np.asarray(label).astype(labels.dtype), np.asarray(scores, np.float32)


def _infer_linear_regressor(ctx: OpContext) -> list[OutSpec]:
    coef, _ = linear_params(ctx.node)
    return [("float32", (_rows(ctx), coef.shape[0]))]


@register_op("LinearRegressor", infer=_infer_linear_regressor, domain=ML)
def linear_regressor(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    s = _linear_scores(ctx, x)
    post = post_transform(ctx.node)
    if s.shape[1] == 1:
        return probit(s) if post == "PROBIT" else s
    return NumpyEmitter().transform(s, post)


# -- preprocessing -------------------------------------------------------------------------------


def _same_shape_float(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    return [("float32", x.shape)]


def per_feature(values: Any, width: int) -> np.ndarray:
    v = np.asarray(values if values is not None else [0.0], np.float32).reshape(-1)
    return v if len(v) != 1 else np.full(width, v[0], np.float32)


@register_op("Scaler", infer=_same_shape_float, domain=ML)
def scaler(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    width = x.shape[-1] if x.ndim else 1
    offset = per_feature(ctx.attr("offset"), width)
    scale = per_feature(ctx.attr("scale", [1.0]), width)
    return ((x.astype(np.float32) - offset) * scale).astype(np.float32)


@register_op("Normalizer", infer=_same_shape_float, domain=ML)
def normalizer(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    x2 = x.reshape(_rows(ctx), -1).astype(np.float32)
    norm = ctx.attr("norm", "MAX")
    if norm == "MAX":
        d = x2.max(axis=1, keepdims=True)
    elif norm == "L1":
        d = np.abs(x2).sum(axis=1, keepdims=True)
    elif norm == "L2":
        d = np.sqrt((x2 * x2).sum(axis=1, keepdims=True))
    else:
        raise ctx.fail(f"norm {norm!r} is not one of MAX, L1, L2")
    out = np.where(d != 0, x2 / np.where(d != 0, d, 1), x2)
    return out.astype(np.float32).reshape(x.shape)


@register_op("Binarizer", infer=lambda ctx: [(ctx.input(0).dtype, ctx.input(0).shape)], domain=ML)
def binarizer(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return (x > np.asarray(ctx.attr("threshold", 0.0), x.dtype)).astype(x.dtype)


@register_op("Imputer", infer=lambda ctx: [(ctx.input(0).dtype, ctx.input(0).shape)], domain=ML)
def imputer(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        fill = per_feature(ctx.attr("imputed_value_floats"), x.shape[-1]).astype(x.dtype)
        missing = np.float32(ctx.attr("replaced_value_float", 0.0))
        hit = np.isnan(x) if np.isnan(missing) else (x == missing)
    else:
        fill = np.asarray(ctx.attr("imputed_value_int64s", [0]), np.int64)
        fill = fill if len(fill) != 1 else np.full(x.shape[-1], fill[0])
        hit = x == int(ctx.attr("replaced_value_int64", 0))
    return np.where(hit, fill.astype(x.dtype), x)


def _infer_one_hot(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    cats = ctx.attr("cats_int64s") or ctx.attr("cats_strings") or []
    return [("float32", x.shape + (len(cats),))]


@register_op("OneHotEncoder", infer=_infer_one_hot, domain=ML)
def one_hot_encoder(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    cats = ctx.attr("cats_int64s")
    if cats:
        table = np.asarray(cats, np.int64)
        hit = x.astype(np.int64)[..., None] == table
        known = hit.any(axis=-1)
    else:
        table = np.asarray(ctx.attr("cats_strings") or [], dtype=object)
        hit = x.astype(object)[..., None] == table
        known = hit.any(axis=-1)
    if not ctx.attr("zeros", 1) and not known.all():
        raise ctx.fail("an input value is not among the categories and zeros=0")
    return hit.astype(np.float32)


def _infer_afe(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    idx = ctx.inputs[1]
    assert x is not None and idx is not None
    n = int(np.prod(idx.shape)) if idx.shape else 1
    shape = (1, n) if len(x.shape) == 1 else x.shape[:-1] + (n,)
    return [(x.dtype, shape)]


@register_op("ArrayFeatureExtractor", infer=_infer_afe, domain=ML)
def array_feature_extractor(ctx: OpContext, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    flat = np.asarray(idx, np.int64).reshape(-1)
    if np.any(flat < 0) or np.any(flat >= x.shape[-1]):
        raise ctx.fail(f"an index of {flat.tolist()[:8]} is out of range for {x.shape[-1]} features")
    out = np.take(x, flat, axis=-1)
    return out.reshape(1, -1) if x.ndim == 1 else out
