"""RNN/GRU/LSTM against onnxruntime on random inputs, through rammer's frontend
and the checking interpreter (which also catches infer/compute mismatches)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import rammer
from rammer.interpreter import run_graph

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _one_node_model(op: str, feeds: dict[str, np.ndarray], outputs: list[str], out_shape=None,
                    **attrs) -> onnx.ModelProto:
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][: 8 if op == "LSTM" else 6]
    inputs = [n if n in feeds else "" for n in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    node = helper.make_node(op, inputs, outputs, **attrs)
    elem = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("int32"): TensorProto.INT32}
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem[v.dtype], v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, out_shape) for o in outputs if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=9)
    # Graph outputs need shapes; ONNX's own inference supplies them.
    return model if out_shape is not None else onnx.shape_inference.infer_shapes(model)


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list, list]:
    ours = run_graph(rammer.load(model), feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)
    return ours, theirs


def _random_feeds(op, rng, *, seq=5, batch=3, inp=4, hidden=6, dirs=1, bias=True, lens=None,
                  init=False, peep=False) -> dict[str, np.ndarray]:
    g = GATES[op]
    feeds = {
        "X": rng.standard_normal((seq, batch, inp)).astype(np.float32),
        "W": (rng.standard_normal((dirs, g * hidden, inp)) * 0.5).astype(np.float32),
        "R": (rng.standard_normal((dirs, g * hidden, hidden)) * 0.5).astype(np.float32),
    }
    if bias:
        feeds["B"] = rng.standard_normal((dirs, 2 * g * hidden)).astype(np.float32)
    if lens is not None:
        feeds["sequence_lens"] = np.array(lens, dtype=np.int32)
    if init:
        feeds["initial_h"] = rng.standard_normal((dirs, batch, hidden)).astype(np.float32)
        if op == "LSTM":
            feeds["initial_c"] = rng.standard_normal((dirs, batch, hidden)).astype(np.float32)
    if peep:
        feeds["P"] = rng.standard_normal((dirs, 3 * hidden)).astype(np.float32)
    return feeds


def _check(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_all_outputs_with_lengths_states_and_peepholes(direction):
    rng = np.random.default_rng(0)
    dirs = 2 if direction == "bidirectional" else 1
    feeds = _random_feeds("LSTM", rng, dirs=dirs, lens=[5, 2, 4], init=True, peep=True)
    model = _one_node_model("LSTM", feeds, ["Y", "Y_h", "Y_c"], hidden_size=6, direction=direction)
    _check(*_run_both(model, feeds))


def test_lstm_clip_input_forget_and_omitted_y():
    rng = np.random.default_rng(1)
    feeds = _random_feeds("LSTM", rng, dirs=2, init=True)
    model = _one_node_model("LSTM", feeds, ["", "Y_h", "Y_c"], hidden_size=6, direction="bidirectional",
                            clip=0.7, input_forget=1)
    _check(*_run_both(model, feeds))


def test_lstm_custom_activations_with_alpha():
    rng = np.random.default_rng(2)
    feeds = _random_feeds("LSTM", rng)
    model = _one_node_model("LSTM", feeds, ["Y", "Y_h"], hidden_size=6,
                            activations=["HardSigmoid", "LeakyRelu", "Tanh"],
                            activation_alpha=[0.3, 0.05], activation_beta=[0.4])
    _check(*_run_both(model, feeds))


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_bidirectional_all_outputs(linear_before_reset):
    rng = np.random.default_rng(3)
    feeds = _random_feeds("GRU", rng, dirs=2, lens=[3, 5, 1], init=True)
    model = _one_node_model("GRU", feeds, ["Y", "Y_h"], hidden_size=6, direction="bidirectional",
                            linear_before_reset=linear_before_reset)
    _check(*_run_both(model, feeds))


def test_gru_without_bias_reverse():
    rng = np.random.default_rng(4)
    feeds = _random_feeds("GRU", rng, bias=False)
    model = _one_node_model("GRU", feeds, ["Y", "Y_h"], hidden_size=6, direction="reverse")
    _check(*_run_both(model, feeds))


def test_rnn_bidirectional_relu_with_lengths():
    rng = np.random.default_rng(5)
    feeds = _random_feeds("RNN", rng, dirs=2, lens=[4, 5, 2], init=True)
    model = _one_node_model("RNN", feeds, ["Y", "Y_h"], hidden_size=6, direction="bidirectional",
                            activations=["Relu", "Tanh"])
    _check(*_run_both(model, feeds))


def test_layout_1_matches_layout_0_transposed():
    # onnxruntime's CPU kernels do not take layout=1, so check it against layout 0.
    rng = np.random.default_rng(6)
    feeds = _random_feeds("LSTM", rng, dirs=2, init=True, lens=[5, 3, 2])
    model0 = _one_node_model("LSTM", feeds, ["Y", "Y_h", "Y_c"], hidden_size=6, direction="bidirectional")
    y0, h0, c0 = run_graph(rammer.load(model0), feeds)
    feeds1 = dict(feeds, X=feeds["X"].transpose(1, 0, 2).copy(),
                  initial_h=feeds["initial_h"].transpose(1, 0, 2).copy(),
                  initial_c=feeds["initial_c"].transpose(1, 0, 2).copy())
    model1 = _one_node_model("LSTM", feeds1, ["Y", "Y_h", "Y_c"], hidden_size=6, direction="bidirectional",
                             layout=1)
    y1, h1, c1 = run_graph(rammer.load(model1), feeds1)
    np.testing.assert_allclose(y1, y0.transpose(2, 0, 1, 3), rtol=1e-6)
    np.testing.assert_allclose(h1, h0.transpose(1, 0, 2), rtol=1e-6)
    np.testing.assert_allclose(c1, c0.transpose(1, 0, 2), rtol=1e-6)


def test_wrong_weight_shape_is_a_clear_error():
    rng = np.random.default_rng(7)
    feeds = _random_feeds("GRU", rng)
    feeds["W"] = feeds["W"][:, :-1]
    model = _one_node_model("GRU", feeds, ["Y"], out_shape=[5, 1, 3, 6], hidden_size=6)
    with pytest.raises(rammer.RammerError, match="W has shape"):
        rammer.load(model)
