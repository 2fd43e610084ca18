"""A Scaler feeding a linear model (scikit-learn's StandardScaler + LogisticRegression /
LinearRegression pipelines) is folded into the model's coefficients by the ML lowering: one GEMM
reads the raw features, and the results still match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import rammer
from rammer.frontend import load
from rammer.ml import lower_ml

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these tests")

ROWS, FEATS, CLASSES = 64, 6, 3


def _pipeline(op: str, post: str, scaler_is_output: bool = False):
    rng = np.random.default_rng(0)
    k = CLASSES if op == "LinearClassifier" else 1
    scaler = helper.make_node("Scaler", ["X"], ["scaled"], domain="ai.onnx.ml", name="scaler",
                              offset=rng.normal(size=FEATS).tolist(), scale=rng.uniform(0.5, 2, FEATS).tolist())
    attrs = dict(coefficients=rng.normal(size=k * FEATS).tolist(), intercepts=rng.normal(size=k).tolist(),
                 post_transform=post)
    if op == "LinearClassifier":
        linear = helper.make_node(op, ["scaled"], ["label", "scores"], domain="ai.onnx.ml", name="linear",
                                  classlabels_ints=list(range(k)), **attrs)
        outs = [helper.make_tensor_value_info("label", TensorProto.INT64, [ROWS]),
                helper.make_tensor_value_info("scores", TensorProto.FLOAT, [ROWS, k])]
    else:
        linear = helper.make_node(op, ["scaled"], ["scores"], domain="ai.onnx.ml", name="linear", targets=1, **attrs)
        outs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [ROWS, 1])]
    if scaler_is_output:
        outs.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [ROWS, FEATS]))
    graph = helper.make_graph([scaler, linear], "pipe", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                                       [ROWS, FEATS])], outs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("op,post", [("LinearClassifier", "SOFTMAX"), ("LinearClassifier", "LOGISTIC"),
                                     ("LinearRegressor", "NONE")])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_folded_pipeline_matches_onnxruntime(op, post, backend):
    m = _pipeline(op, post)
    lowered = lower_ml(load(m))
    ops = [n.op_type for n in lowered.nodes]
    assert "Sub" not in ops and "Mul" not in ops[:ops.index("MatMul")], ops  # no pass over the features first
    matmul = next(n for n in lowered.nodes if n.op_type == "MatMul")
    assert matmul.inputs[0] == "X"
    x = np.random.default_rng(1).normal(size=(ROWS, FEATS)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = rammer.compile(m, backend=backend, tree_strategy="auto")({"X": x})
    for name, w in zip([o.name for o in m.graph.output], want):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got[name], w.reshape(got[name].shape), rtol=1e-5, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_scaler_that_is_also_an_output_is_not_folded():
    m = _pipeline("LinearClassifier", "SOFTMAX", scaler_is_output=True)
    lowered = lower_ml(load(m))
    assert any(n.op_type == "Mul" for n in lowered.nodes)  # the scaler still runs: its output is wanted
    x = np.random.default_rng(2).normal(size=(ROWS, FEATS)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = rammer.compile(m, backend="reference", tree_strategy="auto")({"X": x})
    np.testing.assert_allclose(got["scaled"], want[2], rtol=1e-6, atol=1e-6)
