"""Conv + inference BatchNormalization folded into one Conv (core/passes/fold_batchnorm.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.passes import FOLD_BATCHNORM, run_pipeline


def _model(bias: bool = True, group: int = 1, opset: int = 17, conv_read_twice: bool = False,
           conv_is_output: bool = False, bn_attrs: dict | None = None, mean_is_input: bool = False,
           after: str = "Relu", dtype=np.float32):
    rng = np.random.default_rng(0)
    c, m = 4, 6
    ten = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inits = {"w": rng.standard_normal((m, c // group, 3, 3)).astype(dtype),
             "scale": rng.uniform(0.5, 2.0, m).astype(dtype), "shift": rng.standard_normal(m).astype(dtype),
             "mean": rng.standard_normal(m).astype(dtype), "var": rng.uniform(0.1, 3.0, m).astype(dtype)}
    if bias:
        inits["b"] = rng.standard_normal(m).astype(dtype)
    inputs = [helper.make_tensor_value_info("x", ten, [1, c, 9, 9])]
    if mean_is_input:
        del inits["mean"]
        inputs.append(helper.make_tensor_value_info("mean", ten, [m]))
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], name="conv", pads=[1] * 4,
                              group=group),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], name="bn",
                              **(bn_attrs or {})),
             helper.make_node(after, ["n"], ["y"], name="act")]
    outputs = [helper.make_tensor_value_info("y", ten, [1, m, 9, 9])]
    if conv_read_twice:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="other"))
        outputs.append(helper.make_tensor_value_info("z", ten, [1, m, 9, 9]))
    if conv_is_output:
        outputs.append(helper.make_tensor_value_info("c", ten, [1, m, 9, 9]))
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(model) -> dict[str, np.ndarray]:
    return rammer.compile(model, backend="reference").random_feeds(3)


@pytest.mark.parametrize("bias,group,opset", [(True, 1, 17), (False, 1, 9), (True, 2, 14)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_pair_becomes_one_conv_with_the_same_values(bias, group, opset, dtype):
    model = _model(bias=bias, group=group, opset=opset, dtype=dtype)
    graph = rammer.load(model)
    folded = run_pipeline(graph, [FOLD_BATCHNORM], verify=True).graph
    assert [n.op_type for n in folded.nodes] == ["Conv", "Relu"]
    conv = folded.nodes[0]
    assert conv.outputs == ("n",) and len(conv.inputs) == 3
    assert folded.initializers[conv.inputs[1]].dtype == dtype
    assert {"scale", "shift", "mean", "var", "w"}.isdisjoint(folded.initializers)  # no longer read
    feeds = _feeds(model)
    want = rammer.compile(model, backend="reference")(feeds)["y"]
    got = rammer.compile(folded, backend="reference")(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(conv_read_twice=True),                      # another op reads the raw conv output
    dict(conv_is_output=True),                       # so does the caller
    dict(bn_attrs={"training_mode": 1}, opset=15),   # training form: batch statistics
    dict(mean_is_input=True),                        # a parameter known only at run time
])
def test_pairs_that_cannot_fold_are_left_alone(case):
    graph = rammer.load(_model(**case))
    assert FOLD_BATCHNORM(graph) is graph


def test_the_cpu_backend_folds_and_matches_the_reference():
    """On cpu the BN is gone before lowering: one conv op whose kernel also takes the ReLU."""
    model = _model()
    feeds = _feeds(model)
    cpu = rammer.compile(model, backend="cpu", cache=False)
    want = rammer.compile(model, backend="reference")(feeds)["y"]
    np.testing.assert_allclose(cpu(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    report = cpu.executable.report
    assert report["ops_by_family"] == {"conv": 1}, report["ops_by_family"]
    assert report["nodes"] == 2  # Conv and Relu: the BN was folded


def _affine_model(ops: list[tuple[str, tuple[int, ...], bool]], const_is_input: bool = False, zero: bool = False):
    """Conv -> ops in a chain, each (op type, constant's shape, conv value first)."""
    rng = np.random.default_rng(1)
    m = 5
    inits = {"w": rng.standard_normal((m, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(m).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["v0"], pads=[1] * 4)]
    for k, (op, shape, first) in enumerate(ops):
        name = f"k{k}"
        value = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        if zero:
            value.flat[0] = 0.0
        if const_is_input:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        else:
            inits[name] = value
        args = [f"v{k}", name] if first else [name, f"v{k}"]
        nodes.append(helper.make_node(op, args, [f"v{k + 1}"]))
    out = f"v{len(ops)}"
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, m, 8, 8])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), out


@pytest.mark.parametrize("ops", [
    [("Mul", (1, 5, 1, 1), True), ("Add", (5, 1, 1), True)],   # Paddle's affine_channel
    [("Mul", (1, 5, 1, 1), False), ("Add", (1,), False)],     # the conv as the second operand; a scalar
    [("Div", (5, 1, 1), True), ("Sub", (1, 5, 1, 1), True)],
])
def test_per_channel_affine_ops_fold_into_the_conv(ops):
    model, out = _affine_model(ops)
    folded = run_pipeline(rammer.load(model), [FOLD_BATCHNORM], verify=True).graph
    assert [n.op_type for n in folded.nodes] == ["Conv"]
    feeds = _feeds(model)
    want = rammer.compile(model, backend="reference")(feeds)[out]
    np.testing.assert_allclose(rammer.compile(folded, backend="reference")(feeds)[out], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ops,kwargs", [
    ([("Mul", (1, 1, 8, 1), True)], {}),            # varies along a spatial axis
    ([("Sub", (5, 1, 1), False)], {}),              # constant minus the conv
    ([("Div", (5, 1, 1), False)], {}),              # constant over the conv
    ([("Div", (5, 1, 1), True)], {"zero": True}),   # a division by zero
    ([("Mul", (1, 5, 1, 1), True)], {"const_is_input": True}),
])
def test_affine_ops_that_cannot_fold_are_left_alone(ops, kwargs):
    graph = rammer.load(_affine_model(ops, **kwargs)[0])
    assert FOLD_BATCHNORM(graph) is graph


# -- Before/Expected on structural graph equality ---------------------------------------------------
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node  # noqa: E402

from rammer.passes import fold_batchnorm  # noqa: E402

_RNG = np.random.default_rng(1)
_W = _RNG.standard_normal((2, 3, 1, 1)).astype(np.float32)
_B = np.array([0.5, -1.0], np.float32)
_BN = {"gamma": np.array([2.0, 0.5], np.float32), "beta": np.array([1.0, 0.0], np.float32),
       "mean": np.array([0.25, -0.5], np.float32), "var": np.array([3.0, 0.75], np.float32)}
_IO = ({"x": [1, 3, 4, 4]}, {"y": [1, 2, 4, 4]})


def test_before_expected_a_bn_after_a_conv_becomes_the_conv_with_new_weights_and_bias():
    before = graph([node("Conv", ["x", "w", "b"], ["c"]),
                    node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], epsilon=0.25),
                    node("Relu", ["n"], ["y"])], *_IO, {"w": _W, "b": _B, **_BN})
    # s = gamma / sqrt(var + eps) = (2 / sqrt(3.25), 0.5 / sqrt(1)); b' = (b - mean) * s + beta
    s = np.array([2.0 / np.sqrt(3.25), 0.5], np.float64)
    w = (_W.astype(np.float64) * s.reshape(2, 1, 1, 1)).astype(np.float32)
    b = ((np.array([0.5, -1.0]) - np.array([0.25, -0.5])) * s + np.array([1.0, 0.0])).astype(np.float32)
    expected = graph([node("Conv", ["x", "w_bn", "b_bn"], ["n"]), node("Relu", ["n"], ["y"])], *_IO,
                     {"w_bn": w, "b_bn": b})
    assert_graphs_equal(run_pipeline(before, [FOLD_BATCHNORM], verify=True).graph, expected)


def test_before_expected_a_per_channel_mul_then_add_fold_one_after_the_other():
    before = graph([node("Conv", ["x", "w"], ["c"]), node("Mul", ["k", "c"], ["m"]), node("Add", ["m", "d"], ["y"])],
                   *_IO, {"w": _W, "k": np.array([2.0, 4.0], np.float32).reshape(1, 2, 1, 1),
                          "d": np.array([[[1.0]], [[3.0]]], np.float32)})
    w = _W * np.array([2.0, 4.0], np.float32).reshape(2, 1, 1, 1)
    expected = graph([node("Conv", ["x", "w2", "b2"], ["y"])], *_IO, {"w2": w, "b2": np.array([1.0, 3.0], np.float32)})
    assert_graphs_equal(fold_batchnorm(before), expected)


def test_before_expected_a_bn_whose_conv_is_read_twice_is_left_alone():
    before = graph([node("Conv", ["x", "w", "b"], ["c"]),
                    node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"]),
                    node("Add", ["n", "c"], ["y"])], *_IO, {"w": _W, "b": _B, **_BN})
    assert_left_alone(fold_batchnorm, before)
