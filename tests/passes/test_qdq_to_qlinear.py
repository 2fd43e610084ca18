"""DQ -> Conv / MatMul / Gemm [-> Relu] -> Q as QLinearConv / QLinearMatMul (core/passes/qdq_to_qlinear.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from pass_graphs import assert_graphs_equal, assert_left_alone

import rammer
from rammer.frontend.onnx_import import import_model
from rammer.passes import QDQ_TO_QLINEAR, run_pipeline

_X_SCALE, _Y_SCALE = np.float32(0.05), np.float32(0.04)

try:
    from rammer.backends.cpu.machine_code import HOST_FEATURES
except ImportError:  # (the cpu backend's LLVM bindings absent: assume the strict comparison)
    HOST_FEATURES = {"avx512vnni"}

#: Whether onnxruntime's uint8 x int8 kernels compute the spec's sums here.  Without VNNI they add
#: pairs of products in saturating int16 (vpmaddubsw): on an AMD Zen 3 a few outputs of these
#: full-range inputs came out 12-118 steps off, while the reference and the cpu backend agree.
ORT_U8S8_EXACT = bool(HOST_FEATURES & {"avx512vnni", "avxvnni"})


def _agrees_with_onnxruntime(got: np.ndarray, want: np.ndarray) -> bool:
    """Within one rounding step of onnxruntime on all but 2% of outputs; where its kernels saturate
    (no VNNI), not asked: those tests also compare with the float form on the reference."""
    off = np.abs(got.astype(int) - want.astype(int))
    return not ORT_U8S8_EXACT or bool(off.max() <= 1 and np.mean(off > 0) < 0.02)


def _weights(shape: tuple[int, ...], axis: int, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights and their scales, as onnxruntime's quantizer makes them."""
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    other = tuple(a for a in range(len(shape)) if a != axis)
    peak = np.abs(w).max(axis=other) if per_channel else np.abs(w).max(keepdims=True).reshape(1)
    scale = (peak / np.float32(127)).astype(np.float32)
    q = np.rint(w / np.expand_dims(scale, other) if per_channel else w / scale[0]).astype(np.int8)
    return q, (scale if per_channel else scale.reshape(()))


def _conv_model(per_channel: bool = True, relu: bool = True, y_zero: int = 0, x_type: str = "uint8",
                bias: bool = True, conv_read_twice: bool = False):
    ten = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
    c, m = 8, 6
    w_q, w_s = _weights((m, c, 3, 3), 0, per_channel)
    inits = {"x_s": _X_SCALE, "x_z": np.array(3, x_type), "w_q": w_q, "w_s": w_s, "w_z": np.zeros(w_s.shape, np.int8),
             "y_s": _Y_SCALE, "y_z": np.array(y_zero, "uint8")}
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"], name="dx"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wf"], name="dw", axis=0)]
    conv_in = ["xf", "wf"]
    if bias:
        inits["b_q"] = np.random.default_rng(2).integers(-3000, 3000, m).astype(np.int32)
        inits["b_s"] = (_X_SCALE * w_s).astype(np.float32)
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["bf"], name="db", axis=0))
        conv_in.append("bf")
    nodes.append(helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1] * 4))
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
    nodes.append(helper.make_node("QuantizeLinear", ["r" if relu else "c", "y_s", "y_z"], ["y"], name="q"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, m, 7, 7])]
    if conv_read_twice:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="other"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, m, 7, 7]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", ten[x_type], [1, c, 7, 7])], outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), inits


def _qlinear_conv_model(inits: dict, x_type: str, bias: bool):
    """The expected result: one QLinearConv on the same integers."""
    ten = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
    names = ["x", "x_s", "x_z", "w_q", "w_s", "w_z0", "y_s", "y_z"] + (["b_q"] if bias else [])
    keep = {k: v for k, v in inits.items() if k in names}
    keep["w_z0"] = np.array(0, np.int8)
    g = helper.make_graph([helper.make_node("QLinearConv", names, ["y"], name="conv", pads=[1] * 4)], "g",
                          [helper.make_tensor_value_info("x", ten[x_type], [1, 8, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 6, 7, 7])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in keep.items()])
    return rammer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _x(model, x_type: str) -> dict[str, np.ndarray]:
    info = np.iinfo(np.dtype(x_type))
    return {"x": np.random.default_rng(3).integers(info.min, info.max + 1, (1, 8, 7, 7)).astype(x_type)}


@pytest.mark.parametrize("per_channel,relu,x_type,bias", [(True, True, "uint8", True), (False, False, "int8", True),
                                                          (True, False, "uint8", False)])
def test_the_pattern_becomes_one_qlinear_conv(per_channel, relu, x_type, bias):
    model, inits = _conv_model(per_channel, relu, x_type=x_type, bias=bias)
    graph = rammer.load(model)  # the frontend folds DequantizeLinear(w) and (b): the pass finds the grid
    rewritten = run_pipeline(graph, [QDQ_TO_QLINEAR], verify=True).graph
    expected = _qlinear_conv_model(inits, x_type, bias)
    if not per_channel:  # the recovered scale is one per channel, all equal
        expected = expected.replace(initializers={**expected.initializers,
                                                  "w_s": np.full(6, inits["w_s"], np.float32)},
                                    value_info={**expected.value_info,
                                                "w_s": expected.value_info["w_s"].__class__("w_s", "float32", (6,))})
    assert_graphs_equal(rewritten, expected)
    # the same values as onnxruntime (which fuses the pattern itself) and as the float form on the reference
    feeds = _x(model, x_type)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = rammer.compile(rewritten, backend="reference")(feeds)["y"]
    float_form = rammer.compile(graph, backend="reference")(feeds)["y"]
    assert _agrees_with_onnxruntime(got, want)
    assert np.abs(got.astype(int) - float_form).max() <= 1


def test_live_dequantize_of_the_weights_is_read_directly():
    model, inits = _conv_model()
    graph = import_model(model, fold=False)
    rewritten = run_pipeline(graph, [QDQ_TO_QLINEAR], verify=True).graph
    assert [n.op_type for n in rewritten.nodes] == ["QLinearConv"]
    assert rewritten.nodes[0].inputs[3] == "w_q" and rewritten.nodes[0].inputs[8] == "b_q"


@pytest.mark.parametrize("case", [dict(relu=True, y_zero=10), dict(conv_read_twice=True)])
def test_patterns_that_are_not_exact_are_left_alone(case):
    assert_left_alone(QDQ_TO_QLINEAR, rammer.load(_conv_model(**case)[0]))


def test_float_weights_off_an_8_bit_grid_are_left_alone():
    model, _ = _conv_model()
    graph = rammer.load(model)
    name = next(n.inputs[1] for n in graph.nodes if n.op_type == "Conv")
    nudged = graph.initializers[name].copy()
    nudged[0, 0, 0, 0] = np.nextafter(nudged[0, 0, 0, 0], np.float32(9))
    assert_left_alone(QDQ_TO_QLINEAR, graph.replace(initializers={**graph.initializers, name: nudged}))


def _matmul_model(op: str, trans_b: bool, bias: bool = False):
    k, n = 16, 12
    w_q, w_s = _weights((n, k) if trans_b else (k, n), 0 if trans_b else 1, True)
    inits = {"x_s": _X_SCALE, "x_z": np.array(128, np.uint8), "w_q": w_q, "w_s": w_s,
             "y_s": _Y_SCALE, "y_z": np.array(128, np.uint8)}
    attrs = dict(transB=1) if trans_b else {}
    mm_in = ["xf", "wf"]
    if bias:
        inits["b"] = np.ones(n, np.float32)
        mm_in.append("b")
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["wf"], axis=0 if trans_b else 1),
             helper.make_node(op, mm_in, ["c"], name="mm", **attrs),
             helper.make_node("QuantizeLinear", ["c", "y_s", "y_z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [4, k])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [4, n])],
                          [numpy_helper.from_array(np.asarray(v), key) for key, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w_q


@pytest.mark.parametrize("op,trans_b", [("MatMul", False), ("Gemm", True)])
def test_matmul_and_gemm_become_qlinear_matmul(op, trans_b):
    model, w_q = _matmul_model(op, trans_b)
    rewritten = run_pipeline(rammer.load(model), [QDQ_TO_QLINEAR], verify=True).graph
    (node,) = rewritten.nodes
    assert node.op_type == "QLinearMatMul"
    np.testing.assert_array_equal(rewritten.initializers[node.inputs[3]], w_q.T if trans_b else w_q)
    feeds = {"x": np.random.default_rng(4).integers(0, 256, (4, 16)).astype(np.uint8)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = rammer.compile(rewritten, backend="reference")(feeds)["y"]
    assert _agrees_with_onnxruntime(got, want)
    float_form = rammer.compile(rammer.load(model), backend="reference")(feeds)["y"]
    assert np.abs(got.astype(int) - float_form).max() <= 1


def test_a_gemm_with_a_bias_stays_float():
    assert_left_alone(QDQ_TO_QLINEAR, rammer.load(_matmul_model("Gemm", True, bias=True)[0]))


def test_the_cpu_backend_runs_the_int8_conv_with_onnxruntime_s_values():
    from rammer.backends.cpu.graph_passes import prepare

    model, _ = _conv_model(per_channel=True, relu=True)
    # a pruned (all-zero) output channel is on every grid and does not stop the rewrite
    w = next(t for t in model.graph.initializer if t.name == "w_q")
    values = numpy_helper.to_array(w).copy()
    values[2] = 0
    w.CopyFrom(numpy_helper.from_array(values, "w_q"))
    assert [n.op_type for n in prepare(rammer.load(model)).nodes] == ["QLinearConv"]
    feeds = _x(model, "uint8")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cpu = rammer.compile(model, backend="cpu", cache=False)
    got = cpu(feeds)["y"]
    assert not cpu.executable.report["fallbacks"]
    assert _agrees_with_onnxruntime(got, want)
    # and exactly the reference's values (the spec's, where onnxruntime's kernels saturate)
    np.testing.assert_array_equal(got, rammer.compile(model, backend="reference")(feeds)["y"])


def test_a_backend_can_keep_depthwise_convs_float():
    from rammer.passes import qdq_to_qlinear_pass

    model, _ = _conv_model()
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    conv.attribute.append(helper.make_attribute("group", 8))
    w = next(t for t in model.graph.initializer if t.name == "w_q")
    w.CopyFrom(numpy_helper.from_array(np.ones((8, 1, 3, 3), np.int8), "w_q"))
    for name in ("w_s", "w_z", "b_q", "b_s"):
        t = next(t for t in model.graph.initializer if t.name == name)
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t)[:1].repeat(8), name))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 8
    graph = rammer.load(model)
    assert_left_alone(qdq_to_qlinear_pass(depthwise=False), graph)
    assert [n.op_type for n in QDQ_TO_QLINEAR(graph).nodes] == ["QLinearConv"]
    # or only the windows it lists, as (kernel, stride): this one is 3x3 at stride 1
    assert_left_alone(qdq_to_qlinear_pass(depthwise=[(3, 2), (5, 1)]), graph)
    assert [n.op_type for n in qdq_to_qlinear_pass(depthwise=[(3, 1)])(graph).nodes] == ["QLinearConv"]
