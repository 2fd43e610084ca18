"""The tree-ensemble rKernel (``TreeEnsembleScores`` lowered to ``k_tree`` on cpu) against onnxruntime:
labels and probabilities over a grid of depths, tree counts and rows; every node mode with missing
values; every aggregate; the op's reference implementation; and the lowering that picks it on cpu."""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from ml_models import tree_inputs, tree_model

import rammer
from rammer import plugins
from rammer.errors import CompileError
from rammer.ml import lower_ml
from rammer.ml.strategy import compiles_tree_kernel
from rammer.ops.ml import TREE_SCORES

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these tests")


def _expect(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})


def _check(model: onnx.ModelProto, x: np.ndarray, backend: str = "cpu", strategy: str | None = "tree_kernel",
           **options) -> rammer.CompiledModel:
    want = _expect(model, x)
    opts = dict(options)
    if strategy is not None:
        opts["tree_strategy"] = strategy
    compiled = rammer.compile(model, backend=backend, **opts)
    got = compiled({"X": x})
    for name, w in zip([o.name for o in model.graph.output], want):
        have = np.asarray(got[name])
        if w.dtype.kind in "iuOU":
            assert have.reshape(-1).tolist() == w.reshape(-1).tolist(), f"{name} differs on {backend}"
        else:
            np.testing.assert_allclose(have, w.reshape(have.shape), rtol=1e-5, atol=1e-5, err_msg=f"{name} ({backend})")
    return compiled


def _kernels(compiled: rammer.CompiledModel) -> list[str]:
    return list(compiled.executable.program.report["kernels"])


@pytest.mark.parametrize("depth,trees,rows", [(1, 1, 1), (3, 9, 8), (6, 40, 1), (6, 7, 70), (10, 12, 33),
                                              (12, 3, 130)])
def test_classifier_grid_matches_onnxruntime(depth, trees, rows):
    rng = np.random.default_rng(depth * 100 + trees)
    model = tree_model("clf", rng, n_trees=trees, depth=depth, n_out=3, post="SOFTMAX", base=[0.0, 0.1, 0.2],
                       batch=rows)
    compiled = _check(model, tree_inputs(rng, rows, 6))
    assert "k_tree" in _kernels(compiled)
    assert not compiled.executable.report["fallbacks"]


@pytest.mark.parametrize("mode", ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
                                  "mixed"])
def test_node_modes_and_missing_values(mode):
    rng = np.random.default_rng(zlib.crc32(mode.encode()) % 1000)  # (str hashes change per process)
    model = tree_model("reg", rng, n_trees=6, depth=4, modes=None if mode == "mixed" else [mode], missing=True,
                       n_out=2)
    _check(model, tree_inputs(rng, 16, 6))


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_aggregates(aggregate):
    rng = np.random.default_rng(3)
    model = tree_model("reg", rng, n_trees=20, n_out=1 if aggregate in ("MIN", "MAX") else 3, aggregate=aggregate,
                       base=[1.5] if aggregate in ("MIN", "MAX") else [1.0, 2.0, 3.0])
    _check(model, tree_inputs(rng, 16, 6))


@pytest.mark.parametrize("one_class", [False, True])
def test_binary_classifiers(one_class):
    rng = np.random.default_rng(11)
    model = tree_model("clf", rng, n_out=2, one_class=one_class, n_trees=10)
    _check(model, tree_inputs(rng, 16, 6))


def test_reference_runs_the_op_as_onnxruntime():
    rng = np.random.default_rng(8)
    model = tree_model("clf", rng, n_trees=17, depth=7, n_out=4, post="SOFTMAX", batch=16)
    _check(model, tree_inputs(rng, 16, 6), backend="reference")


def test_blocks_of_trees_are_separate_ops_combined_at_the_end():
    graph = rammer.load(tree_model("reg", np.random.default_rng(1), n_trees=16, n_out=1, aggregate="MAX"))
    report: dict = {}
    lowered = lower_ml(graph, "tree_kernel", tree_groups=4, report=report)
    assert report == {"trees": ["tree_kernel"]}
    walks = [n for n in lowered.nodes if n.op_type == TREE_SCORES]
    assert len(walks) == 4 and all(n.attrs["aggregate"] == "MAX" for n in walks)
    assert any(n.op_type == "Max" and len(n.inputs) == 4 for n in lowered.nodes)
    assert lowered.opset.get(walks[0].domain) == 1


def test_a_backend_that_compiles_the_kernel_gets_it_and_others_keep_tensor_ops():
    graph = rammer.load(tree_model("clf", np.random.default_rng(4), n_trees=8, depth=5, n_out=3))
    report: dict = {}
    lower_ml(graph, None, device="cpu", report=report, tree_kernel=True)
    assert report["trees"] == ["tree_kernel"]
    for name, kernel in (("cpu", True), ("opencl", False), ("reference", False)):
        # opencl on PoCL is a device of kind cpu too: what counts is the ops the backend compiles
        assert compiles_tree_kernel(plugins.backends()[name].capabilities) is kernel, name
    report.clear()
    lowered = lower_ml(graph, None, device="cpu", report=report)
    assert report["trees"] != ["tree_kernel"]
    assert not any(n.op_type == TREE_SCORES for n in lowered.nodes)


def test_double_thresholds_keep_the_tensor_op_strategies():
    """The kernel compares float32; trees with double thresholds take the tensor-op lowering."""
    rng = np.random.default_rng(5)
    model = tree_model("reg", rng, n_out=2, double=True, base=[0.5, -0.5])
    report: dict = {}
    lower_ml(rammer.load(model), "tree_kernel", report=report)
    assert report["trees"] != ["tree_kernel"]
    # (reference: float64 tensors run on the cpu backend's host path, which fails on main as well)
    _check(model, tree_inputs(rng, 16, 6, dtype=np.float64), backend="reference")


def test_rows_split_into_rtasks_on_two_veus():
    rng = np.random.default_rng(9)
    rows = 300
    model = tree_model("clf", rng, n_trees=24, depth=8, n_out=3, post="SOFTMAX", batch=rows)
    # op-by-op spreads every op over both vEUs: each block of trees runs as several row blocks
    compiled = _check(model, tree_inputs(rng, rows, 6), veus=2, policy="op-by-op", cache=False)
    program = compiled.executable.program
    tree_rows = [r for r in range(program.T.shape[0])
                 if program.kernel_names[int(program.T[r, 0])] == "k_tree"]
    blocks = sum(1 for n in compiled.executable.graph.nodes if n.op_type == TREE_SCORES)
    assert blocks == 3 and len(tree_rows) >= 2 * blocks


def test_a_branch_node_reading_a_negative_feature_is_refused_by_name():
    """The walk indexes the row with the node's feature; a negative one is a malformed model, not a
    read before the row (leaves' features are never read: they may be negative)."""
    model = tree_model("reg", np.random.default_rng(0), n_trees=2, depth=3, n_out=1)
    node = model.graph.node[0]
    modes = next(a for a in node.attribute if a.name == "nodes_modes").strings
    features = next(a for a in node.attribute if a.name == "nodes_featureids")
    features.ints[[k for k, m in enumerate(modes) if m != b"LEAF"][1]] = -1
    with pytest.raises(CompileError, match=r"'trees'.*reads feature -1, the input has features 0\.\.5"):
        rammer.compile(model, backend="cpu", tree_strategy="tree_kernel")
