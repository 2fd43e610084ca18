"""Hand-built ai.onnx.ml models for the tests: random tree ensembles with every
node mode, missing-value tracks, base values and post transform, and the
preprocessing ops; built with onnx.helper (no scikit-learn needed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
#: Feature values and thresholds come from this small set, so EQ/NEQ branches are taken both ways.
VALUES = np.asarray([0.0, 1.0, 2.0, 3.0], np.float32)


def random_trees(rng: np.random.Generator, n_trees: int, depth: int, n_features: int, modes: list[str],
                 missing: bool) -> dict[str, list]:
    """Node attributes of ``n_trees`` random trees (unbalanced, up to ``depth``)."""
    att: dict[str, list] = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values",
                                            "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids",
                                            "nodes_missing_value_tracks_true", "nodes_hitrates")}
    leaves: list[tuple[int, int]] = []
    for t in range(n_trees):
        count = [0]

        def grow(level: int) -> int:
            me = count[0]
            count[0] += 1
            row = len(att["nodes_treeids"])
            for k in att:
                att[k].append(0)
            att["nodes_treeids"][row] = t
            att["nodes_nodeids"][row] = me
            att["nodes_hitrates"][row] = 1.0
            if level == depth or (level > 0 and rng.random() < 0.25):
                att["nodes_modes"][row] = "LEAF"
                att["nodes_values"][row] = 0.0
                leaves.append((t, me))
                return me
            att["nodes_modes"][row] = str(rng.choice(modes))
            att["nodes_featureids"][row] = int(rng.integers(n_features))
            att["nodes_values"][row] = float(rng.choice(VALUES) + (0.5 if rng.random() < 0.3 else 0.0))
            att["nodes_missing_value_tracks_true"][row] = int(missing and rng.random() < 0.5)
            att["nodes_truenodeids"][row] = grow(level + 1)
            att["nodes_falsenodeids"][row] = grow(level + 1)
            return me

        grow(0)
    att["_leaves"] = leaves  # type: ignore[assignment]
    return att


def tree_model(kind: str, rng: np.random.Generator, *, n_trees: int = 5, depth: int = 4, n_features: int = 6,
               n_out: int = 3, modes: list[str] | None = None, missing: bool = True, post: str = "NONE",
               base: list[float] | None = None, aggregate: str = "SUM", labels: Any = None,
               double: bool = False, one_class: bool = False, batch: int = 16) -> onnx.ModelProto:
    """A TreeEnsembleClassifier (kind 'clf') or TreeEnsembleRegressor ('reg') model."""
    att = random_trees(rng, n_trees, depth, n_features, modes or MODES, missing)
    leaves = att.pop("_leaves")
    values = att.pop("nodes_values")
    prefix = "class" if kind == "clf" else "target"
    ids, tids, nids, ws = [], [], [], []
    for t, n in leaves:
        outs = [0] if one_class else range(n_out)
        for c in outs:
            if not one_class and rng.random() < 0.2:
                continue  # leaves need not write every output
            tids.append(t)
            nids.append(n)
            ids.append(c)
            ws.append(float(np.round(rng.normal(), 3)))
    attrs: dict[str, Any] = dict(att)
    attrs[prefix + "_treeids"] = tids
    attrs[prefix + "_nodeids"] = nids
    attrs[prefix + "_ids"] = ids
    ftype = TensorProto.DOUBLE if double else TensorProto.FLOAT
    if double:
        attrs["nodes_values_as_tensor"] = helper.make_tensor("v", TensorProto.DOUBLE, [len(values)], values)
        attrs[prefix + "_weights_as_tensor"] = helper.make_tensor("w", TensorProto.DOUBLE, [len(ws)], ws)
        if base is not None:
            attrs["base_values_as_tensor"] = helper.make_tensor("b", TensorProto.DOUBLE, [len(base)], base)
    else:
        attrs["nodes_values"] = values
        attrs[prefix + "_weights"] = ws
        if base is not None:
            attrs["base_values"] = base
    attrs["post_transform"] = post
    if kind == "clf":
        labels = list(range(n_out)) if labels is None else labels
        if isinstance(labels[0], str):
            attrs["classlabels_strings"] = labels
        else:
            attrs["classlabels_int64s"] = labels
        ltype = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
        node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
                                name="trees", **attrs)
        outputs = [helper.make_tensor_value_info("label", ltype, [batch]),
                   helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, len(labels)])]
    else:
        attrs["n_targets"] = n_out
        attrs["aggregate_function"] = aggregate
        node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", name="trees", **attrs)
        outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, n_out])]
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("X", ftype, [batch, n_features])],
                              outputs)
    return _model(graph, 3)


def _model(graph: onnx.GraphProto, ml_opset: int) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 9
    return model


def tree_inputs(rng: np.random.Generator, batch: int, n_features: int, nan: bool = True,
                dtype: Any = np.float32) -> np.ndarray:
    x = rng.choice(VALUES, size=(batch, n_features)).astype(dtype)
    x += (rng.random((batch, n_features)) < 0.2) * 0.25
    if nan:
        x[rng.random((batch, n_features)) < 0.1] = np.nan
    return x.astype(dtype)


def single_op_model(op: str, attrs: dict[str, Any], in_type: int, in_shape: list[int], out_type: int,
                    out_shape: list[int], extra_inits: list[onnx.TensorProto] = (), extra_inputs: list[str] = ()
                    ) -> onnx.ModelProto:
    node = helper.make_node(op, ["X", *extra_inputs], ["Y"], domain="ai.onnx.ml", name=op.lower(), **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("X", in_type, in_shape)],
                              [helper.make_tensor_value_info("Y", out_type, out_shape)], initializer=list(extra_inits))
    return _model(graph, 1)
