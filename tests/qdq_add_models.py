"""The QDQ residual add (DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear) as test models,
for tests/passes/test_qdq_add.py and tests/cpu/test_quant_add.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

_TEN = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def add_model(a_type: str = "uint8", b_type: str = "uint8", y_type: str = "uint8", relu: bool = False,
              shape: tuple[int, ...] = (1, 3, 5, 7), b_shape: tuple[int, ...] | None = None,
              zero_points: bool = True, per_axis: bool = False, extra_reader: bool = False,
              scales: tuple[float, float, float] = (0.0072, 0.0139, 0.0121)):
    """a, b (8-bit) -> DequantizeLinear each -> Add [-> Relu] -> QuantizeLinear -> y."""
    b_shape = b_shape or shape
    lo = {"uint8": 0, "int8": -128}
    inits = {"a_s": np.full(shape[1], scales[0], np.float32) if per_axis else np.array(scales[0], np.float32),
             "b_s": np.array(scales[1], np.float32), "y_s": np.array(scales[2], np.float32)}
    if zero_points:
        a_z = 112 + lo[a_type]
        inits.update(a_z=np.full(shape[1], a_z, a_type) if per_axis else np.array(a_z, a_type),
                     b_z=np.array(3 + lo[b_type], b_type), y_z=np.array(lo[y_type] if relu else 7, y_type))
    z = (lambda k: [k]) if zero_points else (lambda k: [])
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_s", *z("a_z")], ["fa"], name="dqa", axis=1),
             helper.make_node("DequantizeLinear", ["b", "b_s", *z("b_z")], ["fb"], name="dqb"),
             helper.make_node("Add", ["fa", "fb"], ["s"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"], name="relu"))
    nodes.append(helper.make_node("QuantizeLinear", ["r" if relu else "s", "y_s", *z("y_z")], ["y"], name="q"))
    outputs = [helper.make_tensor_value_info("y", _TEN[y_type] if zero_points else TensorProto.UINT8, shape)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, shape))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", _TEN[a_type], shape),
                                       helper.make_tensor_value_info("b", _TEN[b_type], b_shape)], outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def feeds_for(a_type: str, b_type: str, shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.integers(0, 256, size=shape).astype(np.uint8).view(t) for n, t in (("a", a_type), ("b", b_type))}
