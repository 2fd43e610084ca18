"""The ai.onnx.ml ops on hand-built models: the reference implementation and every
lowering strategy against onnxruntime (node modes, missing values, post transforms,
base values, aggregates, labels, double thresholds, preprocessing ops)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ml_models import single_op_model, tree_inputs, tree_model
from onnx import TensorProto, helper

import rammer
from rammer.errors import CompileError
from rammer.ml import lower_ml
from rammer.ops.ml import probit, tree_tables

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these tests")

STRATEGIES = ["off", "gemm", "tree_traversal", "perfect_tree_traversal"]


def ort_run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": x})


def check(model: onnx.ModelProto, x: np.ndarray, backend: str = "reference", strategy: str = "off",
          atol: float = 1e-5) -> None:
    expected = ort_run(model, x)
    compiled = rammer.compile(model, backend=backend, tree_strategy=strategy)
    got = compiled({"X": x})
    for name, want in zip([o.name for o in model.graph.output], expected):
        have = np.asarray(got[name])
        if want.dtype.kind in "iuOU":
            assert have.reshape(-1).tolist() == want.reshape(-1).tolist(), f"{name} differs ({strategy}, {backend})"
        else:
            np.testing.assert_allclose(have, want.reshape(have.shape), rtol=1e-5, atol=atol,
                                       err_msg=f"{name} ({strategy}, {backend})")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
                                  "mixed"])
def test_node_modes_and_missing_tracks(mode, strategy):
    rng = np.random.default_rng(abs(hash(mode)) % 1000)
    modes = None if mode == "mixed" else [mode]
    model = tree_model("reg", rng, n_trees=6, depth=4, modes=modes, missing=True, n_out=2)
    check(model, tree_inputs(rng, 16, 6), strategy=strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_classifier_post_transforms(post, strategy):
    rng = np.random.default_rng(7)
    model = tree_model("clf", rng, n_out=4, post=post, base=[0.1, -0.2, 0.3, 0.0])
    x = tree_inputs(rng, 16, 6)
    if post == "PROBIT":
        # probit is defined on (0, 1): keep the scores there.
        model = tree_model("clf", np.random.default_rng(7), n_out=4, post="NONE")
        _scale_weights(model, 0.05, 0.5)
        model.graph.node[0].attribute.append(helper.make_attribute("post_transform", "PROBIT"))
        _drop_attr(model, "post_transform", keep_last=True)
    check(model, x, strategy=strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", ["positive-one-class", "mixed-one-class", "mixed-one-class-logistic",
                                  "two-classes", "one-class-base2", "strings"])
def test_binary_classifiers(case, strategy):
    """onnxruntime's binary rules: one scored class, weight signs, base values, string labels."""
    rng = np.random.default_rng(11)
    kw: dict = {"n_out": 2}
    if case.endswith("one-class") or case.endswith("logistic") or case == "one-class-base2":
        kw["one_class"] = True
    if case == "mixed-one-class-logistic":
        kw["post"] = "LOGISTIC"
        kw["base"] = [0.25]
    if case == "one-class-base2":
        kw["base"] = [0.5, 0.5]
    if case == "strings":
        kw["labels"] = ["no", "yes"]
    model = tree_model("clf", rng, **kw)
    if case == "positive-one-class":
        _scale_weights(model, 0.1, 0.0, absolute=True)
    check(model, tree_inputs(rng, 16, 6), strategy=strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_aggregates(aggregate, strategy):
    rng = np.random.default_rng(3)
    # MIN/MAX: every leaf writes every target (onnxruntime skips outputs a tree does not write).
    model = tree_model("reg", rng, n_out=1 if aggregate in ("MIN", "MAX") else 3, aggregate=aggregate,
                       base=[1.5] if aggregate in ("MIN", "MAX") else [1.0, 2.0, 3.0])
    check(model, tree_inputs(rng, 16, 6), strategy=strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_double_thresholds(strategy):
    rng = np.random.default_rng(5)
    model = tree_model("reg", rng, n_out=2, double=True, base=[0.5, -0.5])
    x = tree_inputs(rng, 16, 6, dtype=np.float64)
    # Thresholds just above a float32 value: a float32 comparison would go the other way.
    check(model, x, strategy=strategy)


@pytest.mark.parametrize("strategy", ["gemm", "tree_traversal", "perfect_tree_traversal"])
def test_cpu_backend_runs_lowered_trees(strategy):
    rng = np.random.default_rng(21)
    model = tree_model("clf", rng, n_trees=12, depth=5, n_out=3, post="SOFTMAX", base=[0.0, 0.1, 0.2])
    check(model, tree_inputs(rng, 16, 6), backend="cpu", strategy=strategy)


def test_cpu_backend_compiles_every_lowered_node():
    """Lowered trees need no host steps on the cpu backend."""
    rng = np.random.default_rng(2)
    model = tree_model("clf", rng, n_trees=8, depth=4, n_out=3, post="SOFTMAX", missing=True)
    for strategy in ("gemm", "tree_traversal", "perfect_tree_traversal"):
        compiled = rammer.compile(model, backend="cpu", tree_strategy=strategy, strict=True)
        assert not compiled.executable.report["fallbacks"], strategy


def test_unknown_strategy_is_a_clear_error():
    model = tree_model("reg", np.random.default_rng(0))
    with pytest.raises(CompileError, match="tree strategy 'fastest'"):
        rammer.compile(model, backend="reference", tree_strategy="fastest")


def test_groups_are_independent_subgraphs():
    graph = rammer.load(tree_model("reg", np.random.default_rng(1), n_trees=16, n_out=1))
    report: dict = {}
    lowered = lower_ml(graph, "tree_traversal", tree_groups=4, report=report)
    assert report == {"trees": ["tree_traversal"]}
    # One leaf-value Gather per group, each reading its own table.
    leaf_reads = [n for n in lowered.nodes if n.op_type == "Gather" and "leaf_values" in n.inputs[0]]
    assert len(leaf_reads) == 4
    assert not any(n.domain for n in lowered.nodes)


def test_probit_matches_onnxruntime_formula():
    x = np.asarray([0.05, 0.3, 0.5, 0.7, 0.95], np.float32)
    # sqrt(2) * erfinv(2x - 1) is the normal quantile: close to scipy-free reference values.
    want = np.asarray([-1.6449, -0.5244, 0.0, 0.5244, 1.6449], np.float32)
    np.testing.assert_allclose(probit(x), want, atol=5e-3)


# -- linear models and preprocessing ------------------------------------------------------------------


def _linear_classifier(n_classes: int, labels: list, post: str, multi: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(n_classes)
    k = 1 if n_classes == 2 and len(labels) == 2 and multi < 0 else n_classes
    attrs = {"coefficients": rng.normal(size=k * 5).round(3).tolist(),
             "intercepts": rng.normal(size=k).round(3).tolist(), "post_transform": post, "multi_class": max(multi, 0)}
    attrs["classlabels_strings" if isinstance(labels[0], str) else "classlabels_ints"] = labels
    ltype = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    node = helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", name="lin", **attrs)
    width = 2 if k == 1 else k
    graph = helper.make_graph([node], "lin", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [8, 5])],
                              [helper.make_tensor_value_info("label", ltype, [8]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [8, width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("lowered", ["off", "auto"])
@pytest.mark.parametrize("case", [(3, [0, 1, 2], "SOFTMAX", 1), (3, [4, 5, 6], "LOGISTIC", 0),
                                  (2, [0, 1], "LOGISTIC", -1), (2, [3, 7], "NONE", -1), (2, [0, 1], "NONE", 0),
                                  (3, ["a", "b", "c"], "SOFTMAX_ZERO", 0)])
def test_linear_classifier(case, lowered):
    n, labels, post, multi = case
    x = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32)
    check(_linear_classifier(n, labels, post, multi), x, strategy=lowered)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("op", ["Scaler", "Normalizer-MAX", "Normalizer-L1", "Normalizer-L2", "Binarizer",
                                "Imputer", "LinearRegressor", "ArrayFeatureExtractor", "OneHotEncoder"])
def test_preprocessing_ops(op, backend):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 5)).astype(np.float32)
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    if op == "Scaler":
        model = single_op_model("Scaler", {"offset": [0.5, 1, 2, 3, 4], "scale": [2.0, 1, 0.5, 3, 1]},
                                f, [8, 5], f, [8, 5])
    elif op.startswith("Normalizer"):
        x[0] = 0
        model = single_op_model("Normalizer", {"norm": op.split("-")[1]}, f, [8, 5], f, [8, 5])
    elif op == "Binarizer":
        model = single_op_model("Binarizer", {"threshold": 0.25}, f, [8, 5], f, [8, 5])
    elif op == "Imputer":
        x[rng.random(x.shape) < 0.3] = np.nan
        model = single_op_model("Imputer", {"imputed_value_floats": [1, 2, 3, 4, 5.0],
                                            "replaced_value_float": float("nan")}, f, [8, 5], f, [8, 5])
    elif op == "LinearRegressor":
        model = single_op_model("LinearRegressor", {"coefficients": rng.normal(size=10).tolist(),
                                                    "intercepts": [0.5, -0.5], "targets": 2}, f, [8, 5], f, [8, 2])
    elif op == "ArrayFeatureExtractor":
        idx = helper.make_tensor("idx", i64, [3], [4, 0, 2])
        model = single_op_model("ArrayFeatureExtractor", {}, f, [8, 5], f, [8, 3], [idx], ["idx"])
    else:
        x = rng.integers(0, 5, size=(8, 2)).astype(np.int64)
        model = single_op_model("OneHotEncoder", {"cats_int64s": [1, 3, 4], "zeros": 1}, i64, [8, 2], f, [8, 2, 3])
    check(model, x, backend=backend, strategy="auto")
    if backend == "reference":
        check(model, x, backend=backend, strategy="off")


def test_tree_ensemble_opset5_matches_onnxruntime():
    """TreeEnsemble (ai.onnx.ml opset 5): leaves in their own array, integer enums."""
    splits = helper.make_tensor("s", TensorProto.FLOAT, [3], [1.5, 0.5, 2.5])
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", name="te",
        nodes_featureids=[0, 1, 2], nodes_splits=splits, nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [3],
                                                                                       [0, 1, 3]),
        nodes_truenodeids=[1, 0, 2], nodes_trueleafs=[0, 1, 1], nodes_falsenodeids=[2, 1, 3],
        nodes_falseleafs=[0, 1, 1], tree_roots=[0], leaf_targetids=[0, 0, 0, 0], leaf_weights=weights,
        n_targets=1, aggregate_function=1, post_transform=0)
    graph = helper.make_graph([node], "te", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [16, 3])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [16, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])
    model.ir_version = 10
    x = tree_inputs(np.random.default_rng(0), 16, 3, nan=False)
    for strategy in STRATEGIES:
        check(model, x, strategy=strategy)


# -- helpers ------------------------------------------------------------------------------------------------


def _drop_attr(model: onnx.ModelProto, name: str, keep_last: bool = False) -> None:
    attrs = model.graph.node[0].attribute
    found = [i for i, a in enumerate(attrs) if a.name == name]
    for i in reversed(found[:-1] if keep_last else found):
        del attrs[i]


def _scale_weights(model: onnx.ModelProto, scale: float, offset: float, absolute: bool = False) -> None:
    node = model.graph.node[0]
    for a in node.attribute:
        if a.name in ("class_weights", "target_weights"):
            values = [abs(v) if absolute else v for v in a.floats]
            del a.floats[:]
            a.floats.extend([v * scale + offset / 5 for v in values])


def test_rammer_run_accepts_ml_models(tmp_path, capsys):
    from rammer.cli import main

    path = tmp_path / "trees.onnx"
    onnx.save(tree_model("clf", np.random.default_rng(9), n_out=3, post="SOFTMAX", batch=8), str(path))
    assert main(["run", str(path), "--backend", "cpu", "--repeat", "1"]) == 0
    assert "output scores: float32[8, 3]" in capsys.readouterr().out


def test_strategy_off_keeps_the_ml_nodes_and_auto_uses_the_table():
    from rammer.ml import choose

    graph = rammer.load(tree_model("reg", np.random.default_rng(1), depth=3))
    assert lower_ml(graph, "off") is graph
    report: dict = {}
    # (on cpu the tree rKernel is used instead: tests/ml/test_ml_tree_kernel.py)
    lower_ml(graph, None, device="gpu", report=report)
    depth = tree_tables(graph.nodes[0], 3).depth
    assert report["trees"] == [choose(depth, 16, "gpu")]
    assert choose(8, 1000, "cpu") == "perfect_tree_traversal"
    assert choose(20, 1000, "cpu") == "tree_traversal"


@pytest.mark.parametrize("axis,idx_type", [(0, np.int64), (1, np.int64), (1, np.int32), (2, np.int64)])
def test_cpu_gather_of_single_elements(axis, idx_type):
    """The cpu Gather's one-element-row path (the tree lookups) on every outer/inner layout,
    negative indices included."""
    data = np.arange(3 * 5 * 7, dtype=np.float32).reshape(3, 5, 7)
    size = data.shape[axis]
    idx = np.asarray([[0, -1, 2], [size - 1, 1, -size]], idx_type)
    out_shape = list(data.shape[:axis]) + [2, 3] + list(data.shape[axis + 1:])
    idx_t = TensorProto.INT64 if idx_type == np.int64 else TensorProto.INT32
    node = helper.make_node("Gather", ["X", "I"], ["Y"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, data.shape),
                                            helper.make_tensor_value_info("I", idx_t, idx.shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = rammer.compile(model, backend="cpu")({"X": data, "I": idx})["Y"]
    np.testing.assert_array_equal(got, np.take(data, idx.astype(np.int64), axis=axis))


def test_perfect_traversal_without_top_levels_walks_from_the_roots(monkeypatch):
    """Trees x rows too many for even one level of row copies (TOP_ELEMENTS): every level is walked by
    Gathers from each tree's root (the walk used to start from no position at all)."""
    from rammer.ml import trees

    monkeypatch.setattr(trees, "TOP_ELEMENTS", 0)
    rng = np.random.default_rng(11)
    model = tree_model("reg", rng, n_trees=5, depth=3, n_out=2)
    check(model, tree_inputs(rng, 16, 6), strategy="perfect_tree_traversal")
