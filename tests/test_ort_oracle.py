"""ci/ort_oracle.py: the uint8-weight copy of an int8 model computes the same function as the model.

On a CPU without VNNI, onnxruntime's uint8 x int8 sums saturate (int16 pairs), so the corpus check runs
that copy instead; these tests hold on every CPU because their products are too small to saturate.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "ci") not in sys.path:
    sys.path.insert(0, str(ROOT / "ci"))

ort = pytest.importorskip("onnxruntime", reason="the oracle is onnxruntime")

import ort_oracle  # noqa: E402


def _conv_and_matmul_model() -> bytes:
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.integers(-8, 8, (4, 3, 3, 3)).astype(np.int8), "w")
    b = numpy_helper.from_array(rng.integers(-8, 8, (6, 5)).astype(np.int8), "b")
    scalars = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
               [("xs", 0.05, np.float32), ("xz", 3, np.uint8), ("ws", 0.02, np.float32), ("wz", -2, np.int8),
                ("ys", 0.1, np.float32), ("yz", 120, np.uint8)]]
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4),
             # the same int8 weight read by a second, float consumer: it must keep its int8 original
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
             helper.make_node("MatMulInteger", ["m", "b"], ["mm"])]  # no zero points: the shifted one is 128
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 6, 6]),
         helper.make_tensor_value_info("m", TensorProto.UINT8, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
         helper.make_tensor_value_info("wf", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("mm", TensorProto.INT32, None)],
        [w, b, *scalars])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _run(data: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_uint8_weight_copy_computes_the_same_outputs():
    data = _conv_and_matmul_model()
    rng = np.random.default_rng(1)
    feeds = {"x": rng.integers(0, 16, (1, 3, 6, 6)).astype(np.uint8),
             "m": rng.integers(0, 16, (2, 6)).astype(np.uint8)}
    shifted = ort_oracle.uint8_weights(data)
    assert shifted != data
    for want, got in zip(_run(data, feeds), _run(shifted, feeds)):
        np.testing.assert_array_equal(got, want)


def test_uint8_weight_copy_rewires_only_the_product_ops():
    import onnx

    model = onnx.load_from_string(ort_oracle.uint8_weights(_conv_and_matmul_model()))
    types = {t.name: t.data_type for t in model.graph.initializer}
    conv, dq, mm = model.graph.node
    assert types[conv.input[3]] == TensorProto.UINT8 and types[conv.input[5]] == TensorProto.UINT8
    assert dq.input[0] == "w" and types["w"] == TensorProto.INT8
    assert types[mm.input[1]] == TensorProto.UINT8 and types[mm.input[3]] == TensorProto.UINT8


def test_a_model_without_int8_products_is_returned_as_is():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    data = helper.make_model(graph).SerializeToString()
    assert ort_oracle.uint8_weights(data) is data
