"""QuantizeLinear -> DequantizeLinear pairs as float elementwise ops (core/passes/qdq_as_float.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.passes import QDQ_AS_FLOAT, run_pipeline


def _model(qtype: str = "uint8", per_axis: bool = False, q_read_twice: bool = False, scale_is_input: bool = False):
    rng = np.random.default_rng(0)
    ten = TensorProto.UINT8 if qtype == "uint8" else TensorProto.INT8
    zero = 128 if qtype == "uint8" else -3
    if per_axis:
        scale = np.array([0.05, 0.5, 0.02], np.float32)
        zp = np.array([zero, 0, 7], qtype)
    else:
        scale, zp = np.array(0.05, np.float32), np.array(zero, qtype)
    inits = {"w": rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "s": scale, "z": zp}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])]
    if scale_is_input:
        del inits["s"]
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, list(scale.shape)))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"], name="quant", axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dequant", axis=1),
             helper.make_node("Relu", ["d"], ["y"], name="act")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6])]
    if q_read_twice:
        outputs.append(helper.make_tensor_value_info("q", ten, [1, 3, 6, 6]))
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _feeds(model) -> dict[str, np.ndarray]:
    feeds = rammer.compile(model, backend="reference").random_feeds(3)
    feeds["x"] = feeds["x"] * 40  # beyond the 8-bit range too: saturation decides those
    return feeds


@pytest.mark.parametrize("qtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_axis", [False, True])
def test_the_pair_becomes_float_ops_with_the_same_values(qtype, per_axis):
    model = _model(qtype, per_axis)
    rewritten = run_pipeline(rammer.load(model), [QDQ_AS_FLOAT], verify=True).graph
    clip = ["Max", "Min"] if per_axis else ["Clip"]
    assert [n.op_type for n in rewritten.nodes] == ["Conv", "Div", "Round", *clip, "Mul", "Relu"]
    feeds = _feeds(model)
    want = rammer.compile(model, backend="reference")(feeds)["y"]
    got = rammer.compile(rewritten, backend="reference")(feeds)["y"]
    np.testing.assert_array_equal(got, want)  # bit for bit
    # and on cpu, where the chain runs in the conv's epilogue
    cpu = rammer.compile(model, backend="cpu", cache=False)
    np.testing.assert_allclose(cpu(feeds)["y"], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    assert not cpu.executable.report["fallbacks"]


def test_different_zero_points_keep_the_shifts():
    model = _model()
    model.graph.initializer.append(numpy_helper.from_array(np.array(120, np.uint8), "z_out"))
    model.graph.node[2].input[2] = "z_out"
    rewritten = run_pipeline(rammer.load(model), [QDQ_AS_FLOAT], verify=True).graph
    assert [n.op_type for n in rewritten.nodes] == ["Conv", "Div", "Round", "Add", "Max", "Min", "Sub", "Mul", "Relu"]
    feeds = _feeds(model)
    np.testing.assert_array_equal(rammer.compile(rewritten, backend="reference")(feeds)["y"],
                                  rammer.compile(model, backend="reference")(feeds)["y"])


@pytest.mark.parametrize("case", [dict(q_read_twice=True), dict(scale_is_input=True)])
def test_pairs_that_cannot_go_keep_what_they_need(case):
    graph = rammer.load(_model(**case))
    rewritten = run_pipeline(graph, [QDQ_AS_FLOAT], verify=True).graph
    ops = [n.op_type for n in rewritten.nodes]
    if "q_read_twice" in case:  # the quantized tensor is a graph output: QuantizeLinear stays for it
        assert ops == ["Conv", "QuantizeLinear", "Div", "Round", "Clip", "Mul", "Relu"]
    else:  # a scale known only at run time
        assert rewritten is graph
