"""ByteTable on ``cpu`` (``k_byte_table``): a DequantizeLinear -> Clip -> QuantizeLinear chain with two scales
(onnxruntime's QOperator MobileNets) compiles to the byte-table kernel and gives the reference's bytes, both
looked up and computed (the chain's requantization in float32, where the lowering found it gives the table)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cpu_helpers import compare, node
from onnx import helper, numpy_helper

_TYPES = {"uint8": onnx.TensorProto.UINT8, "int8": onnx.TensorProto.INT8}


@pytest.mark.parametrize("computed", [True, False], ids=["computed", "looked-up"])
@pytest.mark.parametrize("x_type,y_type,shape", [("uint8", "uint8", (2, 3, 33, 17)), ("int8", "uint8", (5, 7)),
                                                  ("uint8", "int8", (1, 40000))])
def test_dequantize_clip_quantize_runs_as_a_byte_table(x_type, y_type, shape, computed, monkeypatch):
    from rammer.backends.cpu import lower_quant

    found = []

    def params(lw, n):
        got = original(lw, n) if computed else None
        found.append(got is not None)
        return got

    original = lower_quant.requantize_params
    monkeypatch.setattr(lower_quant, "requantize_params", params)
    consts = {"xs": np.array(0.032, np.float32), "xz": np.array(129 if x_type == "uint8" else -7, x_type),
              "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32),
              "ys": np.array(0.0159, np.float32), "yz": np.array(0 if y_type == "uint8" else -128, y_type)}
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["f"]), node("Clip", ["f", "lo", "hi"], ["c"]),
             node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    x = np.random.default_rng(5).integers(0, 256, size=shape).astype(np.uint8).view(x_type)
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", _TYPES[x_type], shape)],
                          [helper.make_tensor_value_info("y", _TYPES[y_type], shape)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    report = compare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), {"x": x},
                     expect_fallback=False)
    assert "k_byte_table" in report["kernels"] and "k_dequantize" not in report["kernels"], report["kernels"]
    assert found == [computed]  # the 256 bytes of these chains fold exactly into m = sx / sy
