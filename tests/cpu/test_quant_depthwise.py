"""Depthwise QLinearConv on ``k_qdwconv`` (the float window sweeps over planes widened to float32,
requantized): the same bytes as the reference over a grid of windows, strides, paddings, signedness,
per-channel / per-tensor weights and biases, and the kernel actually chosen; the windows the sweeps do not
cover stay on the int32 plane kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cpu_helpers import compare, node
from onnx import helper, numpy_helper

_TYPES = {"uint8": onnx.TensorProto.UINT8, "int8": onnx.TensorProto.INT8}


def _depthwise_model(c: int, hw: tuple[int, int], k: tuple[int, int], x_type: str, w_type: str, y_type: str,
                     per_channel: bool, bias: bool, seed: int = 3, **attrs) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(seed)
    winfo, xinfo = np.iinfo(w_type), np.iinfo(x_type)
    consts = {
        "xs": np.array(0.05, np.float32), "xz": np.array(xinfo.max // 2 - 3, x_type),
        # the extreme weights and zero points too: the float sums must stay exact at |x - zx| = |w - zw| = 255
        "w": rng.integers(winfo.min, winfo.max + 1, size=(c, 1) + k).astype(w_type),
        "ws": (rng.random(c).astype(np.float32) * 0.02 + 0.001) if per_channel else np.array(0.004, np.float32),
        "wz": (rng.integers(winfo.min, winfo.min + 4, size=c).astype(w_type) if per_channel
               else np.array(winfo.min + 1, w_type)),
        "ys": np.array(1.3, np.float32), "yz": np.array(120 if y_type == "uint8" else 3, y_type),
    }
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        consts["b"] = rng.integers(-50000, 50000, size=c).astype(np.int32)
        ins.append("b")
    x = rng.integers(xinfo.min, xinfo.max + 1, size=(2, c) + hw).astype(x_type)
    g = helper.make_graph(
        [node("QLinearConv", ins, group=c, **attrs)], "t",
        [helper.make_tensor_value_info("x", _TYPES[x_type], x.shape)], [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(v, name) for name, v in consts.items()])
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]))
    del m.graph.output[:]
    m.graph.output.extend(v for v in m.graph.value_info if v.name == "y")
    return m, {"x": x}


DEPTHWISE_CASES = [
    # (channels, plane, window, x type, w type, y type, per channel, bias, attributes)
    (5, (9, 11), (3, 3), "uint8", "int8", "uint8", True, True, dict(pads=[1, 1, 1, 1])),  # direct sweep, s1
    (6, (12, 13), (3, 3), "uint8", "int8", "uint8", True, False, dict(pads=[1, 1, 1, 1], strides=[2, 2])),  # s2
    (3, (14, 14), (5, 5), "int8", "int8", "int8", False, True, dict(pads=[2, 2, 2, 2])),
    (4, (15, 10), (5, 5), "uint8", "uint8", "int8", True, True, dict(pads=[2, 2, 2, 2], strides=[2, 2])),
    (3, (8, 9), (3, 3), "int8", "uint8", "uint8", False, False, {}),  # no padding
    (4, (15, 10), (5, 5), "uint8", "int8", "uint8", True, True, dict(pads=[1, 2, 3, 2])),  # asymmetric pads
    (4, (2, 2), (3, 3), "uint8", "int8", "uint8", True, True, dict(pads=[1, 1, 1, 1])),  # tiny plane
    (3, (1, 1), (3, 3), "int8", "int8", "uint8", True, True, dict(pads=[1, 1, 1, 1])),  # one pixel
    (2, (9, 9), (2, 2), "uint8", "int8", "uint8", True, False, dict(strides=[2, 2])),
]
#: Windows the float sweeps do not cover (dilation, non-square, 7x7) stay on the int32 plane kernel.
PLANE_KERNEL_CASES = [
    (4, (10, 10), (3, 3), "uint8", "int8", "uint8", True, True, dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    (2, (11, 9), (3, 2), "uint8", "int8", "uint8", True, True, dict(pads=[1, 0, 1, 1], strides=[1, 2])),
    (3, (20, 20), (7, 7), "uint8", "int8", "uint8", True, True, dict(pads=[3, 3, 3, 3])),
]


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[f"case{i}" for i in range(len(DEPTHWISE_CASES))])
def test_depthwise_qlinear_conv_runs_k_qdwconv_bit_exact(case):
    m, feeds = _depthwise_model(*case[:8], **case[8])
    report = compare(m, feeds, expect_fallback=False)
    assert "k_qdwconv" in report["kernels"], report["kernels"]
    assert "k_qlinearconv" not in report["kernels"]


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_extreme_bytes_and_int32_biases_bit_exact(stride):
    """Activations of only 0 and 255 around a zero point of 0 (the largest widened values), biases at and
    near the int32 limits (past ``kernels_qdw._BIAS_INT32_SAFE`` the requantization adds in int64; below it
    in int32, vectorized) and a plane wider than two vectors and not a multiple of one, both strides."""
    from rammer.backends.cpu.kernels_qdw import _BIAS_INT32_SAFE

    m, feeds = _depthwise_model(5, (13, 37), (3, 3), "uint8", "int8", "uint8", True, True, pads=[1, 1, 1, 1],
                                strides=[stride, stride])
    biases = np.array([2**31 - 1, -2**31, _BIAS_INT32_SAFE, -_BIAS_INT32_SAFE, 7], np.int32)
    for i, init in enumerate(m.graph.initializer):
        if init.name == "b":
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(biases, "b"))
        elif init.name == "xz":
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.array(0, np.uint8), "xz"))
        elif init.name == "ys":  # a scale that keeps some outputs of the int32-limit channels unsaturated
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.array(2e4, np.float32), "ys"))
    x = np.where(np.random.default_rng(2).random(feeds["x"].shape) < 0.5, 0, 255).astype(np.uint8)
    report = compare(m, {"x": x}, expect_fallback=False)
    assert "k_qdwconv" in report["kernels"], report["kernels"]


@pytest.mark.parametrize("case", PLANE_KERNEL_CASES, ids=["dilated", "3x2", "7x7"])
def test_other_depthwise_windows_keep_the_plane_kernel(case):
    m, feeds = _depthwise_model(*case[:8], **case[8])
    report = compare(m, feeds, expect_fallback=False)
    assert "k_qlinearconv" in report["kernels"] and "k_qdwconv" not in report["kernels"]


def test_depthwise_with_run_time_weight_zero_point_keeps_the_plane_kernel():
    """A weight zero point computed at run time cannot be folded into the float taps."""
    m, feeds = _depthwise_model(3, (6, 6), (3, 3), "uint8", "int8", "uint8", False, True, pads=[1, 1, 1, 1])
    wz = next(i for i in m.graph.initializer if i.name == "wz")
    m.graph.initializer.remove(wz)
    m.graph.input.append(helper.make_tensor_value_info("wz", onnx.TensorProto.INT8, []))
    feeds = dict(feeds, wz=np.array(-3, np.int8))
    report = compare(m, feeds, expect_fallback=False)
    assert "k_qlinearconv" in report["kernels"] and "k_qdwconv" not in report["kernels"]


@pytest.mark.parametrize("k,stride,kernel", [(3, 2, "k_qdwconv"), (7, 1, None)])
def test_a_qdq_depthwise_conv_runs_k_qdwconv_where_its_window_is_swept(k, stride, kernel):
    """The cpu pipeline rewrites DQ -> depthwise Conv -> Q as QLinearConv for k_qdwconv's windows only; a
    7x7 stays a float conv between exact float (de)quantizations."""
    rng = np.random.default_rng(11)
    c = 6
    ws = (rng.random(c) * 0.004 + 0.001).astype(np.float32)
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
              "w": rng.integers(-127, 128, (c, 1, k, k)).astype(np.int8), "ws": ws,
              "b": rng.integers(-2000, 2000, c).astype(np.int32), "bs": (np.float32(0.02) * ws).astype(np.float32),
              "ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8)}
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]), node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             node("Conv", ["xf", "wf", "bf"], ["cv"], pads=[k // 2] * 4, strides=[stride] * 2, group=c),
             node("QuantizeLinear", ["cv", "ys", "yz"], ["y"])]
    x = rng.integers(0, 256, (1, c, 13, 13)).astype(np.uint8)
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(v, name) for name, v in consts.items()])
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]))
    del m.graph.output[:]
    m.graph.output.extend(v for v in m.graph.value_info if v.name == "y")
    import rammer

    cpu = rammer.compile(m, backend="cpu", cache=False)
    got = cpu({"x": x})["y"]
    want = rammer.compile(m, backend="reference")({"x": x})["y"]
    # the integer conv and the float one on the reference differ by float rounding only: one step at most
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    kernels = cpu.executable.report["kernels"]
    assert (kernel in kernels) if kernel else ("k_qdwconv" not in kernels and "k_qlinearconv" not in kernels)
