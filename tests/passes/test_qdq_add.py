"""DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear as one QuantizedAdd
(core/passes/qdq_add.py): the residual adds of QDQ models."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from pass_graphs import assert_left_alone
from qdq_add_models import add_model, feeds_for

import rammer
from rammer.ops.control import RAMMER_DOMAIN
from rammer.passes import QDQ_ADD, qdq_add, run_pipeline


@pytest.mark.parametrize("a_type,b_type,y_type,relu,zero_points", [
    ("uint8", "uint8", "uint8", False, True), ("uint8", "uint8", "uint8", True, True),
    ("int8", "uint8", "int8", False, True), ("int8", "int8", "uint8", True, True),
    ("uint8", "uint8", "uint8", False, False)],
    ids=["u8", "u8-relu", "s8-u8-to-s8", "s8-relu", "no-zero-points"])
def test_the_add_becomes_one_quantized_add_bit_for_bit_the_chain(a_type, b_type, y_type, relu, zero_points):
    model = add_model(a_type, b_type, y_type, relu, zero_points=zero_points)
    graph = rammer.load(model)
    rewritten = run_pipeline(graph, [QDQ_ADD], verify=True).graph
    assert [(n.domain, n.op_type) for n in rewritten.nodes] == [(RAMMER_DOMAIN, "QuantizedAdd")]
    node = rewritten.nodes[0]
    assert node.inputs[0] == "a" and node.inputs[3] == "b" and node.outputs == ("y",)
    assert node.attrs["relu"] == int(relu)
    feeds = feeds_for(a_type, b_type, (1, 3, 5, 7))
    unfused = rammer.compile(graph, backend="reference")(feeds)["y"]
    got = rammer.compile(rewritten, backend="reference")(feeds)["y"]
    np.testing.assert_array_equal(got, unfused)
    # onnxruntime runs the QDQ chain as its QLinearAdd (two multipliers, one rounding): one step apart at most
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.dtype == want.dtype and np.abs(got.astype(int) - want.astype(int)).max() <= 1


@pytest.mark.parametrize("case", [dict(per_axis=True), dict(b_shape=(1, 3, 1, 7)), dict(extra_reader=True)],
                         ids=["per-axis", "broadcast", "sum-read-elsewhere"])
def test_adds_the_kernel_does_not_take_are_left_alone(case):
    shape = (1, 3, 5, 7)
    model = add_model(**case, shape=shape)
    assert_left_alone(qdq_add, rammer.load(model))


def test_a_dequantize_linear_with_another_reader_stays_for_it():
    model = add_model(relu=True)
    g = model.graph
    g.node.append(helper.make_node("Sigmoid", ["fb"], ["t"], name="other"))
    g.output.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, (1, 3, 5, 7)))
    rewritten = qdq_add(rammer.load(model))
    assert sorted(n.op_type for n in rewritten.nodes) == ["DequantizeLinear", "QuantizedAdd", "Sigmoid"]
    feeds = feeds_for("uint8", "uint8", (1, 3, 5, 7), seed=3)
    want = rammer.compile(rammer.load(model), backend="reference")(feeds)
    got = rammer.compile(rewritten, backend="reference")(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
