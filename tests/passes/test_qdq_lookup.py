"""DequantizeLinear -> per-element float ops -> QuantizeLinear as one ByteTable (core/passes/qdq_lookup.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from pass_graphs import assert_left_alone

import rammer
from rammer.ops.control import RAMMER_DOMAIN
from rammer.passes import QDQ_LOOKUP, run_pipeline

_TEN = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
_SHAPE = [1, 3, 5, 7]


def _chain_model(chain: list[tuple[str, dict, dict]], x_type: str = "uint8", y_type: str = "uint8",
                 x_scale: float = 0.032, x_zero: int = 129, y_scale: float = 0.0159, y_zero: int = 0,
                 per_axis: bool = False, extra_reader: bool = False):
    """x -> DequantizeLinear -> ops of ``chain`` (op, constant inputs after the data, attributes) -> QuantizeLinear."""
    inits: dict[str, np.ndarray] = {
        "x_s": np.full(3, x_scale, np.float32) if per_axis else np.array(x_scale, np.float32),
        "x_z": np.full(3, x_zero, x_type) if per_axis else np.array(x_zero, x_type),
        "y_s": np.array(y_scale, np.float32), "y_z": np.array(y_zero, y_type)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["f0"], name="dq", axis=1)]
    for i, (op, consts, attrs) in enumerate(chain):
        names = []
        for k, v in consts.items():
            inits[f"{k}{i}"] = v
            names.append(f"{k}{i}")
        nodes.append(helper.make_node(op, [f"f{i}", *names], [f"f{i + 1}"], name=f"op{i}", **attrs))
    nodes.append(helper.make_node("QuantizeLinear", [f"f{len(chain)}", "y_s", "y_z"], ["y"], name="q"))
    outputs = [helper.make_tensor_value_info("y", _TEN[y_type], _SHAPE)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["f0"], ["z"], name="other"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, _SHAPE))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", _TEN[x_type], _SHAPE)], outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _every_byte(x_type: str) -> dict[str, np.ndarray]:
    x = np.resize(np.arange(256, dtype=np.uint8), int(np.prod(_SHAPE))).view(np.dtype(x_type)).reshape(_SHAPE)
    return {"x": x}


_CLIP6 = ("Clip", {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}, {})
CHAINS = [
    ([_CLIP6], "uint8", "uint8"),  # onnxruntime's QOperator MobileNet: two scales around Clip(0, 6)
    ([("Relu", {}, {})], "int8", "int8"),
    ([("Sigmoid", {}, {}), ("Mul", {"k": np.array([[[[1.5]]]], np.float32)}, {})], "uint8", "int8"),
    ([("LeakyRelu", {}, {"alpha": 0.1}), ("HardSwish", {}, {})], "int8", "uint8"),
]


@pytest.mark.parametrize("chain,x_type,y_type", CHAINS, ids=["clip6", "relu", "sigmoid-mul", "leaky-hardswish"])
def test_the_chain_becomes_one_byte_table_with_onnxruntime_s_values(chain, x_type, y_type):
    model = _chain_model(chain, x_type, y_type, x_zero=129 if x_type == "uint8" else -3,
                         y_zero=0 if y_type == "uint8" else -128)
    graph = rammer.load(model)
    rewritten = run_pipeline(graph, [QDQ_LOOKUP], verify=True).graph
    assert [(n.domain, n.op_type) for n in rewritten.nodes] == [(RAMMER_DOMAIN, "ByteTable")]
    node = rewritten.nodes[0]
    assert node.inputs[0] == "x" and node.outputs == ("y",)
    assert rewritten.initializers[node.inputs[1]].shape == (256,)
    assert set(rewritten.initializers) == {node.inputs[1]}  # the chain's constants went with it
    feeds = _every_byte(x_type)  # every byte value, so every entry of the table is checked
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    unfused = rammer.compile(graph, backend="reference")(feeds)["y"]
    got = rammer.compile(rewritten, backend="reference")(feeds)["y"]
    np.testing.assert_array_equal(got, unfused)  # the table is the chain, bit for bit
    assert got.dtype == want.dtype and np.abs(got.astype(int) - want.astype(int)).max() <= 1


@pytest.mark.parametrize("case", [dict(per_axis=True), dict(extra_reader=False, chain=[]),
                                  dict(chain=[("Add", {"v": np.ones(7, np.float32)}, {})])],
                         ids=["per-axis", "no-op-between", "non-scalar-operand"])
def test_chains_that_are_not_a_function_of_the_byte_are_left_alone(case):
    chain = case.pop("chain", [_CLIP6])
    assert_left_alone(QDQ_LOOKUP, rammer.load(_chain_model(chain, **case)))


def test_a_dequantize_read_elsewhere_stays_for_its_other_reader():
    graph = rammer.load(_chain_model([_CLIP6], extra_reader=True))
    rewritten = run_pipeline(graph, [QDQ_LOOKUP], verify=True).graph
    assert sorted(n.op_type for n in rewritten.nodes) == ["ByteTable", "DequantizeLinear", "Relu"]
    feeds = _every_byte("uint8")
    want = rammer.compile(graph, backend="reference")(feeds)
    got = rammer.compile(rewritten, backend="reference")(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
