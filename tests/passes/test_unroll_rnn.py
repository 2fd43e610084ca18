"""Unrolled LSTM/GRU/RNN give the same outputs as the ONNX op (reference before and after), for every
direction, with and without bias and initial states, both GRU reset variants; cases the pass does not
handle are left as they are; the GPU backends run an unrolled LSTM on PoCL."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import need_opencl
from onnx import TensorProto, helper

import rammer
from rammer.api import random_feeds
from rammer.frontend import load
from rammer.passes import run_pipeline
from rammer.passes.unroll_rnn import UNROLL_RNN, unroll_rnn

T, B, I, H = 4, 2, 3, 5


def _rnn(op, direction="forward", bias=True, initial=True, **attrs):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(hash((op, direction, bias, initial)) % 2 ** 32)

    def t(name, shape):
        values = (rng.standard_normal(shape) * 0.5).astype(np.float32).ravel()
        return helper.make_tensor(name, TensorProto.FLOAT, list(shape), values)

    inits = [t("W", (dirs, gates * H, I)), t("R", (dirs, gates * H, H))]
    inputs = ["x", "W", "R", "B" if bias else "", ""]
    if bias:
        inits.append(t("B", (dirs, 2 * gates * H)))
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I])]
    if initial:
        inputs.append("h0")
        graph_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [dirs, B, H]))
        if op == "LSTM":
            inputs.append("c0")
            graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [dirs, B, H]))
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, inputs, outs, hidden_size=H, direction=direction, name="the_rnn", **attrs)
    shapes = {"y": [T, dirs, B, H], "yh": [dirs, B, H], "yc": [dirs, B, H]}
    g = helper.make_graph([node], "rnn", graph_inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


CASES = [(op, d, bias, init, attrs) for op in ("LSTM", "GRU", "RNN") for d in ("forward", "reverse", "bidirectional")
         for bias, init in ((True, True), (False, False)) for attrs in ([{}] + ([{"linear_before_reset": 1}]
                                                                              if op == "GRU" else []))]


@pytest.mark.parametrize("op,direction,bias,initial,attrs", CASES)
def test_unrolled_rnn_matches_the_op(op, direction, bias, initial, attrs):
    graph = load(_rnn(op, direction, bias, initial, **attrs))
    unrolled = run_pipeline(graph, [UNROLL_RNN], verify=True).graph
    assert op not in {n.op_type for n in unrolled.nodes} and "MatMul" in {n.op_type for n in unrolled.nodes}
    feeds = random_feeds(graph.inputs, seed=3)
    want = rammer.compile(graph, backend="reference").run(feeds)
    got = rammer.compile(unrolled, backend="reference").run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_cases_the_pass_does_not_handle_are_left_alone():
    for model in (_rnn("LSTM", clip=1.0), _rnn("GRU", activations=["Relu", "Tanh"])):
        graph = load(model)
        assert unroll_rnn(graph) is graph


@pytest.mark.parametrize("mode", ["persistent", "wave"])
def test_gpu_backends_run_an_lstm(mode):
    need_opencl()
    model = _rnn("LSTM", "bidirectional")
    compiled = rammer.compile(model, backend="opencl", mode=mode)
    feeds = random_feeds(compiled.inputs, seed=5)
    want = rammer.compile(model, backend="reference").run(feeds)
    got = compiled.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


# -- Before/Expected on structural graph equality ---------------------------------------------------
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node  # noqa: E402

_W1 = np.array([[[1.0, 2.0], [3.0, 4.0]]], np.float32)  # [dirs, H, I]
_R1 = np.array([[[0.5, 0.0], [0.0, 0.5]]], np.float32)


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def test_before_expected_one_step_of_a_plain_rnn():
    """T = B = 1, I = H = 2, no bias, no initial state: one projection, one Tanh, the outputs reshaped.
    With no state before the first step, R is not read, and no constant is left unread."""
    before = graph([node("RNN", ["x", "W", "R"], ["y", "yh"], hidden_size=2)], {"x": [1, 1, 2]},
                   {"y": [1, 1, 1, 2], "yh": [1, 1, 2]}, {"W": _W1, "R": _R1}, opset=14)
    expected = graph([node("Reshape", ["x", "rows"], ["x2d"]), node("MatMul", ["x2d", "Wt"], ["xw"]),
                      node("Add", ["xw", "bias"], ["proj"]), node("Slice", ["proj", "s", "e", "a"], ["step0"]),
                      node("Tanh", ["step0"], ["h"]), node("Reshape", ["h", "shape4"], ["h4"]),
                      node("Concat", ["h4"], ["ys"], axis=0), node("Reshape", ["h", "shape3"], ["h3"]),
                      node("Identity", ["ys"], ["y"]), node("Identity", ["h3"], ["yh"])],
                     {"x": [1, 1, 2]}, {"y": [1, 1, 1, 2], "yh": [1, 1, 2]},
                     {"rows": _i64(1, 2), "Wt": _W1[0].T.copy(), "bias": np.zeros(2, np.float32), "s": _i64(0),
                      "e": _i64(1), "a": _i64(0), "shape4": _i64(1, 1, 1, 2), "shape3": _i64(1, 1, 2)}, opset=14)
    assert_graphs_equal(run_pipeline(before, [UNROLL_RNN], verify=True).graph, expected)


def test_before_expected_an_rnn_with_clip_is_left_alone():
    before = graph([node("RNN", ["x", "W", "R"], ["y", "yh"], hidden_size=2, clip=1.0)], {"x": [1, 1, 2]},
                   {"y": [1, 1, 1, 2], "yh": [1, 1, 2]}, {"W": _W1, "R": _R1}, opset=14)
    assert_left_alone(unroll_rnn, before)
